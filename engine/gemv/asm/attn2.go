package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The attention's and the gated activations' kernels on AVX2 with FMA
// (attn.go's, for the CPUs without AVX-512): the same sums in the same
// order, 8 lanes a register. Sixteen registers do not hold the
// exponential's constants beside the work, so its polynomial takes them
// from memory (exp8Consts, each constant in 8 lanes), and without
// VSCALEFPS the power of two is built in the exponent's bits, which
// holds normal numbers only: arguments below exp8Floor give 0, where
// AVX-512's exponential gives a subnormal down to e^−103 (a probability
// or a gate no float32 sum would notice).

const exp8Floor = -87 // e^−87 is normal in float32; its 2^k is 2^−126

// exp8Consts' 32-byte entries, in order.
const (
	e8Log2e = iota
	e8LnHi
	e8LnLo
	e8Floor
	e8Coef // 8 coefficients, 1/7! down to 1/0!
	e8Bias = e8Coef + 8
	e8Ceil = iota + 7
	e8One
	e8Cube
	e8TwoC
	e8OneD // a float64 1 (the sum's reciprocal)
	e8Count
)

var exp8Consts Mem

// exp8Table lays out exp8Consts once.
func exp8Table() {
	if exp8Consts.Symbol.Name != "" {
		return
	}
	exp8Consts = GLOBL("exp8Consts", RODATA|NOPTR)
	fact := 1.0
	coef := make([]float32, 8)
	for i := range coef {
		if i > 0 {
			fact *= float64(i)
		}
		coef[7-i] = float32(1 / fact)
	}
	vals := map[int]float32{e8Log2e: 1 / math.Ln2, e8LnHi: ln2Hi, e8LnLo: ln2Lo, e8Floor: exp8Floor,
		e8Ceil: expCeil, e8One: 1, e8Cube: 0.044715, e8TwoC: float32(2 * math.Sqrt(2/math.Pi))}
	for i, c := range coef {
		vals[e8Coef+i] = c
	}
	for e := range e8Count {
		for l := range 8 {
			switch {
			case e == e8Bias:
				DATA(32*e+4*l, U32(127))
				continue
			case e == e8OneD && l%2 == 0:
				DATA(32*e+4*l, F64(1))
				continue
			case e == e8OneD:
				continue
			}
			DATA(32*e+4*l, F32(vals[e]))
		}
	}
}

// exp8 returns e^x in a new register for the 8 lanes of x (overwritten),
// 0 for arguments below exp8Floor (−Inf included).
func exp8(x VecVirtual) VecVirtual {
	c := func(e int) Mem { return exp8Consts.Offset(32 * e) }
	low := YMM()
	VCMPPS(U8(1), c(e8Floor), x, low) // x < floor (ordered, signalling)
	VMAXPS(c(e8Floor), x, x)
	k := YMM()
	VMULPS(c(e8Log2e), x, k)
	VROUNDPS(U8(8), k, k) // to nearest, no precision exception
	VFNMADD231PS(c(e8LnHi), k, x)
	VFNMADD231PS(c(e8LnLo), k, x)
	e := YMM()
	VMOVUPS(c(e8Coef), e)
	for i := 1; i < 8; i++ {
		VFMADD213PS(c(e8Coef+i), x, e)
	}
	// 2^k: k+127 in the exponent's bits.
	VCVTPS2DQ(k, k)
	VPADDD(c(e8Bias), k, k)
	VPSLLD(U8(23), k, k)
	VMULPS(k, e, e)
	VANDNPS(e, low, e)
	return e
}

// scores4AVX2 is scores4AVX512 on 8-lane registers: each 16-key vector
// takes eight accumulators (four queries by its two halves), d in order.
func scores4AVX2() {
	TEXT("scores4AVX2", NOSPLIT, "func(q *float32, n int, k *float32, dstride, vstride, keys int, s *float32, sstride int)")
	Pragma("noescape")
	Doc("scores4AVX2 sets s[i][j] (rows sstride bytes apart) to Σ_d q[4d+i]·key j's element d over n elements d in order, for j below keys (a multiple of 16), the keys in 16-lane vectors vstride bytes apart whose elements lie dstride bytes apart.")
	qp := Load(Param("q"), GP64())
	n := Load(Param("n"), GP64())
	kp := Load(Param("k"), GP64())
	dstride := Load(Param("dstride"), GP64())
	vs := Load(Param("vstride"), GP64())
	keys := Load(Param("keys"), GP64())
	sp := Load(Param("s"), GP64())
	ss := Load(Param("sstride"), GP64())
	ss3 := GP64()
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	SHRQ(U8(4), keys)
	Label("scores2_vec")
	var acc [4][2]VecVirtual
	for i := range acc {
		for c := range acc[i] {
			acc[i][c] = YMM()
			VXORPS(acc[i][c], acc[i][c], acc[i][c])
		}
	}
	qi, ki, d := GP64(), GP64(), GP64()
	MOVQ(qp, qi)
	MOVQ(kp, ki)
	MOVQ(n, d)
	Label("scores2_d")
	var k [2]VecVirtual
	for c := range k {
		k[c] = YMM()
		VMOVUPS(Mem{Base: ki, Disp: 32 * c}, k[c])
	}
	for i := range acc {
		t := YMM()
		VBROADCASTSS(Mem{Base: qi, Disp: 4 * i}, t)
		for c := range k {
			VFMADD231PS(t, k[c], acc[i][c])
		}
	}
	ADDQ(U8(16), qi)
	ADDQ(dstride, ki)
	DECQ(d)
	JNE(LabelRef("scores2_d"))
	rows := []Mem{{Base: sp}, {Base: sp, Index: ss, Scale: 1}, {Base: sp, Index: ss, Scale: 2}, {Base: sp, Index: ss3, Scale: 1}}
	for i, row := range rows {
		for c := range acc[i] {
			VMOVUPS(acc[i][c], row.Offset(32*c))
		}
	}
	ADDQ(U8(64), sp)
	ADDQ(vs, kp)
	DECQ(keys)
	JNE(LabelRef("scores2_vec"))
	VZEROUPPER()
	RET()
}

// mix4AVX2 is mix4AVX512 on 8-lane registers, 16 columns at a time:
// eight accumulators (four rows by two halves).
func mix4AVX2() {
	TEXT("mix4AVX2", NOSPLIT, "func(p *float32, pstride int, v *float32, vstride, keys, n int, out *float32, acc bool)")
	Pragma("noescape")
	Doc("mix4AVX2 sets out[i][c] (rows n apart), or adds to it with acc, Σ_j p[i][j]·v[j][c] over keys rows j of v (vstride bytes apart) in order, for c below n (a multiple of 16), p's four rows pstride bytes apart.")
	pp := Load(Param("p"), GP64())
	vp := Load(Param("v"), GP64())
	vstride := Load(Param("vstride"), GP64())
	n := Load(Param("n"), GP64())
	op := Load(Param("out"), GP64())
	nb := GP64() // a row of out in bytes
	MOVQ(n, nb)
	SHLQ(U8(2), nb)
	SHRQ(U8(4), n)
	var prow [4]GPVirtual
	for i := range prow {
		prow[i] = GP64()
	}
	Label("mix2_group")
	var acc [4][2]VecVirtual
	for i := range acc {
		for c := range acc[i] {
			acc[i][c] = YMM()
			VXORPS(acc[i][c], acc[i][c], acc[i][c])
		}
	}
	flag := Load(Param("acc"), GP8())
	TESTB(flag, flag)
	JE(LabelRef("mix2_start"))
	oi := GP64()
	MOVQ(op, oi)
	for i := range acc {
		if i > 0 {
			ADDQ(nb, oi)
		}
		for c := range acc[i] {
			VMOVUPS(Mem{Base: oi, Disp: 32 * c}, acc[i][c])
		}
	}
	Label("mix2_start")
	ps := Load(Param("pstride"), GP64())
	MOVQ(pp, prow[0])
	for i := 1; i < 4; i++ {
		LEAQ(Mem{Base: prow[i-1], Index: ps, Scale: 1}, prow[i])
	}
	vi, r := GP64(), GP64()
	MOVQ(vp, vi)
	Load(Param("keys"), r)
	TESTQ(r, r)
	JE(LabelRef("mix2_store"))
	Label("mix2_key")
	var v [2]VecVirtual
	for c := range v {
		v[c] = YMM()
		VMOVUPS(Mem{Base: vi, Disp: 32 * c}, v[c])
	}
	for i := range acc {
		t := YMM()
		VBROADCASTSS(Mem{Base: prow[i]}, t)
		for c := range v {
			VFMADD231PS(t, v[c], acc[i][c])
		}
		ADDQ(U8(4), prow[i])
	}
	ADDQ(vstride, vi)
	DECQ(r)
	JNE(LabelRef("mix2_key"))
	Label("mix2_store")
	o := GP64()
	MOVQ(op, o)
	for i := range acc {
		if i > 0 {
			ADDQ(nb, o)
		}
		for c := range acc[i] {
			VMOVUPS(acc[i][c], Mem{Base: o, Disp: 32 * c})
		}
	}
	ADDQ(U8(64), op)
	ADDQ(U8(64), vp)
	DECQ(n)
	JNE(LabelRef("mix2_group"))
	VZEROUPPER()
	RET()
}

// softmaxAVX2 is softmaxAVX512 on 8-lane registers, with exp8.
func softmaxAVX2() {
	exp8Table()
	TEXT("softmaxAVX2", NOSPLIT, "func(s *float32, n int, scale float32) (m float32, sum float64)")
	Pragma("noescape")
	Doc("softmaxAVX2 sets s[j] to e^(s[j]·scale − m) / Σ, m the largest s[j]·scale and Σ the exponentials' float64 sum, for j below n (a multiple of 8), and returns m and Σ; scores more than 87 below m, −Inf among them, give 0.")
	sp := Load(Param("s"), GP64())
	n := Load(Param("n"), GP64())
	scale := YMM()
	VBROADCASTSS(paramAddr("scale"), scale)
	SHRQ(U8(3), n)
	p, i := GP64(), GP64()

	// Pass 1: the largest scaled score.
	mx, x := YMM(), YMM()
	VMULPS(Mem{Base: sp}, scale, mx)
	LEAQ(Mem{Base: sp, Disp: 32}, p)
	MOVQ(n, i)
	DECQ(i)
	JE(LabelRef("softmax2_maxed"))
	Label("softmax2_max")
	VMULPS(Mem{Base: p}, scale, x)
	VMAXPS(x, mx, mx)
	ADDQ(U8(32), p)
	DECQ(i)
	JNE(LabelRef("softmax2_max"))
	Label("softmax2_maxed")
	hx := XMM()
	VEXTRACTF128(U8(1), mx, hx)
	VMAXPS(hx, mx.AsX(), hx)
	t := XMM()
	VPERMILPS(U8(0x4e), hx, t)
	VMAXPS(t, hx, hx)
	VPERMILPS(U8(0xb1), hx, t)
	VMAXPS(t, hx, hx)
	VMOVSS(hx, retAddr(0))
	VBROADCASTSS(hx, mx)

	// Pass 2: exponentials and their sum.
	sumLo, sumHi := YMM(), YMM()
	VXORPD(sumLo, sumLo, sumLo)
	VXORPD(sumHi, sumHi, sumHi)
	MOVQ(sp, p)
	MOVQ(n, i)
	Label("softmax2_exp")
	VMULPS(Mem{Base: p}, scale, x)
	VSUBPS(mx, x, x)
	e := exp8(x)
	VMOVUPS(e, Mem{Base: p})
	lo, hi := YMM(), YMM()
	VCVTPS2PD(e.AsX(), lo)
	eh := XMM()
	VEXTRACTF128(U8(1), e, eh)
	VCVTPS2PD(eh, hi)
	VADDPD(lo, sumLo, sumLo)
	VADDPD(hi, sumHi, sumHi)
	ADDQ(U8(32), p)
	DECQ(i)
	JNE(LabelRef("softmax2_exp"))
	VADDPD(sumHi, sumLo, sumLo)
	dx := hsumPD(sumLo)
	VMOVSD(dx, retAddr(1))

	// Pass 3: times float32(1/sum).
	one := XMM()
	VMOVSD(exp8Consts.Offset(32*e8OneD), one)
	VDIVSD(dx, one, one)
	VCVTSD2SS(one, one, one)
	inv := YMM()
	VBROADCASTSS(one, inv)
	MOVQ(sp, p)
	MOVQ(n, i)
	Label("softmax2_scale")
	VMULPS(Mem{Base: p}, inv, x)
	VMOVUPS(x, Mem{Base: p})
	ADDQ(U8(32), p)
	DECQ(i)
	JNE(LabelRef("softmax2_scale"))
	VZEROUPPER()
	RET()
}

// gluAVX2 is gluAVX512 on 8-lane registers, with exp8 (whose 0 below
// its floor is the activation's limit there: v/(1+0)).
func gluAVX2(name string, gelu bool) {
	exp8Table()
	TEXT(name, NOSPLIT, "func(x, u *float32, n int)")
	Pragma("noescape")
	act := "x[i]/(1+e^−x[i])"
	if gelu {
		act = "x[i]/(1+e^−2·sqrt(2/π)·(x[i]+0.044715·x[i]³))"
	}
	Doc(name + " sets x[i] to " + act + "·u[i] for i below n (a multiple of 8).")
	c := func(e int) Mem { return exp8Consts.Offset(32 * e) }
	xp := Load(Param("x"), GP64())
	up := Load(Param("u"), GP64())
	n := Load(Param("n"), GP64())
	SHRQ(U8(3), n)
	zero, one := YMM(), YMM()
	VXORPS(zero, zero, zero)
	VMOVUPS(c(e8One), one)
	Label(name + "_loop")
	g, t := YMM(), YMM()
	VMOVUPS(Mem{Base: xp}, g)
	if gelu {
		// t = −2c·(v + 0.044715·v³) = −2c·v·(1 + 0.044715·v²)
		VMULPS(g, g, t)
		VFMADD132PS(c(e8Cube), one, t)
		VMULPS(g, t, t)
		VMULPS(c(e8TwoC), t, t)
		VSUBPS(t, zero, t)
	} else {
		VSUBPS(g, zero, t)
	}
	VMINPS(c(e8Ceil), t, t)
	e := exp8(t)
	VADDPS(one, e, e)
	VDIVPS(e, g, g)
	VMULPS(Mem{Base: up}, g, g)
	VMOVUPS(g, Mem{Base: xp})
	ADDQ(U8(32), xp)
	ADDQ(U8(32), up)
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}
