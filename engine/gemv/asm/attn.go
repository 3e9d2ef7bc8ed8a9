package main

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Attention over a cache, four queries at a time (gemv's attn.go): the
// scores against keys laid out in 16-key vectors, a row's softmax, and
// the values' sum weighted by four rows of probabilities. Every sum
// runs one fused multiply-add a term in a fixed order per output, so an
// output's bits depend on its own inputs only, not on the queries beside
// it.

// attnISA is what the attention's generators need of a kernel family:
// its registers (lanes float32 lanes each; a block of keys or of value
// columns takes vecs of them for each of four rows), and its
// multiply-add of a memory float broadcast.
type attnISA struct {
	name       string // the kernels' suffix
	lanes      int
	vecs       int
	reg        func() VecVirtual
	wide       bool // AVX-512: VFMADD231PS broadcasts its memory operand itself
	labelInfix string
}

var (
	attn512 = attnISA{name: "AVX512", lanes: 16, vecs: 4, reg: func() VecVirtual { return ZMM() }, wide: true}
	attn2   = attnISA{name: "AVX2", lanes: 8, vecs: 2, reg: func() VecVirtual { return YMM() }, labelInfix: "2"}
)

// block is how many floats a row of accumulators holds.
func (a attnISA) block() int { return a.lanes * a.vecs }

// label is name's label in a's kernel.
func (a attnISA) label(name string) string {
	i := strings.Index(name, "_")
	return name[:i] + a.labelInfix + name[i:]
}

// mulAdd emits acc[c] += x·v[c] for every c, x the float at q.
func (a attnISA) mulAdd(q Mem, v, acc []VecVirtual) {
	if a.wide {
		for c := range v {
			VFMADD231PS_BCST(q, v[c], acc[c])
		}
		return
	}
	t := a.reg()
	VBROADCASTSS(q, t)
	for c := range v {
		VFMADD231PS(t, v[c], acc[c])
	}
}

// scores4 emits s[i][j] = Σ_d q[4d+i]·key j's element d for the four
// queries i of an interleaved block (q[4d+i] is query i's element d) and
// keys j below keys, a.block() at a time: 4·a.vecs accumulators (four
// queries by the block's registers), d in order. Keys lie in 16-key
// vectors: vector v's element d at k + v·vstride + d·dstride bytes, its
// 16 keys in lanes (a cache strip's layout, or a transposed panel's); a
// block is four vectors on AVX-512, one vector's two halves on AVX2.
func scores4(a attnISA) {
	name := "scores4" + a.name
	TEXT(name, NOSPLIT, "func(q *float32, n int, k *float32, dstride, vstride, keys int, s *float32, sstride int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets s[i][j] (rows sstride bytes apart) to Σ_d q[4d+i]·key j's element d over n elements d in order, for j below keys (a multiple of %d), the keys in 16-lane vectors vstride bytes apart whose elements lie dstride bytes apart.", name, a.block()))
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
	// A block's registers: four 16-key vectors, or one's two halves.
	vecs := []Mem{{}, {Disp: 32}}
	if a.wide {
		vs3 := GP64()
		LEAQ(Mem{Base: vs, Index: vs, Scale: 2}, vs3)
		vecs = []Mem{{}, {Index: vs, Scale: 1}, {Index: vs, Scale: 2}, {Index: vs3, Scale: 1}}
	}
	SHRQ(U8(bits.TrailingZeros(uint(a.block()))), keys)
	Label(a.label("scores_block"))
	acc := make([][]VecVirtual, 4)
	for i := range acc {
		acc[i] = make([]VecVirtual, a.vecs)
		for c := range acc[i] {
			acc[i][c] = a.reg()
			VXORPS(acc[i][c], acc[i][c], acc[i][c])
		}
	}
	qi, ki, d := GP64(), GP64(), GP64()
	MOVQ(qp, qi)
	MOVQ(kp, ki)
	MOVQ(n, d)
	Label(a.label("scores_d"))
	k := make([]VecVirtual, a.vecs)
	for c := range k {
		k[c] = a.reg()
		m := vecs[c]
		m.Base = ki
		VMOVUPS(m, k[c])
	}
	for i := range acc {
		a.mulAdd(Mem{Base: qi, Disp: 4 * i}, k, acc[i])
	}
	ADDQ(U8(16), qi)
	ADDQ(dstride, ki)
	DECQ(d)
	JNE(LabelRef(a.label("scores_d")))
	rows := []Mem{{Base: sp}, {Base: sp, Index: ss, Scale: 1}, {Base: sp, Index: ss, Scale: 2}, {Base: sp, Index: ss3, Scale: 1}}
	for i, row := range rows {
		for c := range k {
			VMOVUPS(acc[i][c], row.Offset(4*a.lanes*c))
		}
	}
	if a.wide {
		ADDQ(U32(4*a.block()), sp)
		LEAQ(Mem{Base: kp, Index: vs, Scale: 4}, kp)
	} else {
		ADDQ(U8(4*a.block()), sp)
		ADDQ(vs, kp)
	}
	DECQ(keys)
	JNE(LabelRef(a.label("scores_block")))
	VZEROUPPER()
	RET()
}

// mix4 emits out[i][c] (+)= Σ_j p[i][j]·v[j][c] for four rows of
// probabilities and keys j in order from the first, a.block() columns c
// at a time: 4·a.vecs accumulators that start at zero, or at out's
// values with acc set (a cache's pages in turn continue one chain of
// fused multiply-adds).
func mix4(a attnISA) {
	name := "mix4" + a.name
	TEXT(name, NOSPLIT, "func(p *float32, pstride int, v *float32, vstride, keys, n int, out *float32, acc bool)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[i][c] (rows n apart), or adds to it with acc, Σ_j p[i][j]·v[j][c] over keys rows j of v (vstride bytes apart) in order, for c below n (a multiple of %d), p's four rows pstride bytes apart.", name, a.block()))
	pp := Load(Param("p"), GP64())
	vp := Load(Param("v"), GP64())
	vstride := Load(Param("vstride"), GP64())
	n := Load(Param("n"), GP64())
	op := Load(Param("out"), GP64())
	nb := GP64() // a row of out in bytes
	MOVQ(n, nb)
	SHLQ(U8(2), nb)
	SHRQ(U8(bits.TrailingZeros(uint(a.block()))), n)
	var prow [4]GPVirtual
	for i := range prow {
		prow[i] = GP64()
	}
	Label(a.label("mix_group"))
	acc := make([][]VecVirtual, 4)
	for i := range acc {
		acc[i] = make([]VecVirtual, a.vecs)
		for c := range acc[i] {
			acc[i][c] = a.reg()
			VXORPS(acc[i][c], acc[i][c], acc[i][c])
		}
	}
	// Continuing: the accumulators start at out's values.
	flag := Load(Param("acc"), GP8())
	TESTB(flag, flag)
	JE(LabelRef(a.label("mix_start")))
	oi := GP64()
	MOVQ(op, oi)
	for i := range acc {
		if i > 0 {
			ADDQ(nb, oi)
		}
		for c := range acc[i] {
			VMOVUPS(Mem{Base: oi, Disp: 4 * a.lanes * c}, acc[i][c])
		}
	}
	Label(a.label("mix_start"))
	// pstride and keys are read afresh each group: sixteen general
	// registers do not hold everything the loop keeps.
	ps := Load(Param("pstride"), GP64())
	MOVQ(pp, prow[0])
	for i := 1; i < 4; i++ {
		LEAQ(Mem{Base: prow[i-1], Index: ps, Scale: 1}, prow[i])
	}
	vi, r := GP64(), GP64()
	MOVQ(vp, vi)
	Load(Param("keys"), r)
	TESTQ(r, r)
	JE(LabelRef(a.label("mix_store")))
	Label(a.label("mix_key"))
	v := make([]VecVirtual, a.vecs)
	for c := range v {
		v[c] = a.reg()
		VMOVUPS(Mem{Base: vi, Disp: 4 * a.lanes * c}, v[c])
	}
	for i := range acc {
		a.mulAdd(Mem{Base: prow[i]}, v, acc[i])
		ADDQ(U8(4), prow[i])
	}
	ADDQ(vstride, vi)
	DECQ(r)
	JNE(LabelRef(a.label("mix_key")))
	Label(a.label("mix_store"))
	o := GP64()
	MOVQ(op, o)
	for i := range acc {
		if i > 0 {
			ADDQ(nb, o)
		}
		for c := range acc[i] {
			VMOVUPS(acc[i][c], Mem{Base: o, Disp: 4 * a.lanes * c})
		}
	}
	if a.wide {
		ADDQ(U32(4*a.block()), op)
		ADDQ(U32(4*a.block()), vp)
	} else {
		ADDQ(U8(4*a.block()), op)
		ADDQ(U8(4*a.block()), vp)
	}
	DECQ(n)
	JNE(LabelRef(a.label("mix_group")))
	VZEROUPPER()
	RET()
}

// The softmax's exponential: e^x = 2^k·e^r with k = round(x/ln 2) and r
// = x − k·ln 2 (ln 2 in two parts, the first exact in a few bits, so
// k·ln2Hi is exact), e^r by its Taylor polynomial of degree 7 (on |r| <=
// ln2/2 its remainder is below a tenth of float32's unit in the last
// place), the power of two applied by VSCALEFPS. Arguments below
// expFloor give 0: the scores' padding (−Inf) takes that way.
const (
	ln2Hi    = 0.693359375
	ln2Lo    = -2.12194440e-4
	expFloor = -120
)

var expConsts Mem

// expTable lays out the constants AVX-512's softmax broadcasts: 1/ln 2,
// ln2Hi, ln2Lo, expFloor, then the polynomial's coefficients 1/7!
// down to 1/0!, and last a float64 1 (the sum's reciprocal).
func expTable() {
	if expConsts.Symbol.Name != "" {
		return
	}
	expConsts = GLOBL("expConsts", RODATA|NOPTR)
	vals := []float32{1 / math.Ln2, ln2Hi, ln2Lo, expFloor}
	vals = append(vals, expCoefs()...)
	for i, v := range vals {
		DATA(4*i, F32(v))
	}
	DATA(4*len(vals), F64(1))
	DATA(4*len(vals)+8, F32(expCeil))
	DATA(4*len(vals)+12, F32(1))
	DATA(4*len(vals)+16, F32(0.044715))
	DATA(4*len(vals)+20, F32(2*math.Sqrt(2/math.Pi)))
}

// expCoefs are the exponential's Taylor coefficients, 1/7! down to 1/0!.
func expCoefs() []float32 {
	fact := 1.0
	coef := make([]float32, 8)
	for i := range coef {
		if i > 0 {
			fact *= float64(i)
		}
		coef[7-i] = float32(1 / fact)
	}
	return coef
}

// expCeil bounds gluAVX512's exponent from above: e^88 is finite in
// float32, and v/(1+e^−v) is −0 to float32 long before −v reaches it.
const expCeil = 88

// expOffCeil, expOffOne, expOffCube and expOffTwoC are the table's
// offsets of expCeil, of a float32 1, and of GELU's 0.044715 and
// 2·sqrt(2/π).
const (
	expOffCeil = 56
	expOffOne  = 60
	expOffCube = 64
	expOffTwoC = 68
)

// expRegs are the constants expVec needs, broadcast once per kernel.
type expRegs struct {
	log2e, lnHi, lnLo, floor VecVirtual
	coef                     []VecVirtual
}

// loadExp broadcasts the table's constants into registers.
func loadExp() expRegs {
	var cs [12]VecVirtual
	for j := range cs {
		cs[j] = ZMM()
		VBROADCASTSS(expConsts.Offset(4*j), cs[j])
	}
	return expRegs{log2e: cs[0], lnHi: cs[1], lnLo: cs[2], floor: cs[3], coef: cs[4:]}
}

// expVec returns e^x (x clamped below at expFloor; x is overwritten).
func expVec(r expRegs, x VecVirtual) VecVirtual {
	VMAXPS(r.floor, x, x)
	k := ZMM()
	VMULPS(r.log2e, x, k)
	VRNDSCALEPS(U8(0), k, k)
	VFNMADD231PS(r.lnHi, k, x)
	VFNMADD231PS(r.lnLo, k, x)
	e := ZMM()
	VMOVAPS(r.coef[0], e)
	for _, c := range r.coef[1:] {
		VFMADD213PS(c, x, e)
	}
	VSCALEFPS(k, e, e)
	return e
}

// softmax emits a row's softmax in three passes of a.lanes lanes: the
// largest scaled score; each score's exponential (stored) and their sum
// in float64, lane by lane then across lanes; each exponential times
// float32(1/sum). It returns the largest scaled score and the sum, which
// merging softmaxes over parts of a row needs. AVX-512's exponential is
// expVec, AVX2's exp8.
func softmax(a attnISA) {
	name := "softmax" + a.name
	var er expRegs
	if a.wide {
		expTable()
	} else {
		exp8Table()
	}
	TEXT(name, NOSPLIT, "func(s *float32, n int, scale float32) (m float32, sum float64)")
	Pragma("noescape")
	zeros := "−Inf scores give 0"
	if !a.wide {
		zeros = "scores more than 87 below m, −Inf among them, give 0"
	}
	Doc(fmt.Sprintf("%s sets s[j] to e^(s[j]·scale − m) / Σ, m the largest s[j]·scale and Σ the exponentials' float64 sum, for j below n (a multiple of %d), and returns m and Σ; %s.", name, a.lanes, zeros))
	sp := Load(Param("s"), GP64())
	n := Load(Param("n"), GP64())
	scale := a.reg()
	VBROADCASTSS(paramAddr("scale"), scale)
	SHRQ(U8(bits.TrailingZeros(uint(a.lanes))), n)
	p, i := GP64(), GP64()
	step := U8(4 * a.lanes)

	// Pass 1: the largest scaled score.
	mx, x := a.reg(), a.reg()
	VMULPS(Mem{Base: sp}, scale, mx)
	LEAQ(Mem{Base: sp, Disp: 4 * a.lanes}, p)
	MOVQ(n, i)
	DECQ(i)
	JE(LabelRef(a.label("softmax_maxed")))
	Label(a.label("softmax_max"))
	VMULPS(Mem{Base: p}, scale, x)
	VMAXPS(x, mx, mx)
	ADDQ(step, p)
	DECQ(i)
	JNE(LabelRef(a.label("softmax_max")))
	Label(a.label("softmax_maxed"))
	var h VecVirtual = mx
	if a.wide {
		h = YMM()
		VEXTRACTF64X4(U8(1), mx, h)
		VMAXPS(h, mx.AsY(), h)
	}
	hx := XMM()
	VEXTRACTF128(U8(1), h.AsY(), hx)
	VMAXPS(hx, h.AsX(), hx)
	t := XMM()
	VPERMILPS(U8(0x4e), hx, t)
	VMAXPS(t, hx, hx)
	VPERMILPS(U8(0xb1), hx, t)
	VMAXPS(t, hx, hx)
	VMOVSS(hx, retAddr(0))
	VBROADCASTSS(hx, mx)

	// Pass 2: exponentials and their sum, each half of a register's lanes
	// in float64 lanes of its own.
	if a.wide {
		er = loadExp()
	}
	sumLo, sumHi := a.reg(), a.reg()
	VXORPD(sumLo, sumLo, sumLo)
	VXORPD(sumHi, sumHi, sumHi)
	MOVQ(sp, p)
	MOVQ(n, i)
	Label(a.label("softmax_exp"))
	VMULPS(Mem{Base: p}, scale, x)
	VSUBPS(mx, x, x)
	var e VecVirtual
	if a.wide {
		e = expVec(er, x)
	} else {
		e = exp8(x)
	}
	VMOVUPS(e, Mem{Base: p})
	lo, hi := a.reg(), a.reg()
	if a.wide {
		VCVTPS2PD(e.AsY(), lo)
		eh := YMM()
		VEXTRACTF64X4(U8(1), e, eh)
		VCVTPS2PD(eh, hi)
	} else {
		VCVTPS2PD(e.AsX(), lo)
		eh := XMM()
		VEXTRACTF128(U8(1), e, eh)
		VCVTPS2PD(eh, hi)
	}
	VADDPD(lo, sumLo, sumLo)
	VADDPD(hi, sumHi, sumHi)
	ADDQ(step, p)
	DECQ(i)
	JNE(LabelRef(a.label("softmax_exp")))
	VADDPD(sumHi, sumLo, sumLo)
	dh := sumLo
	if a.wide {
		dh = YMM()
		VEXTRACTF64X4(U8(1), sumLo, dh)
		VADDPD(dh, sumLo.AsY(), dh)
	}
	dx := hsumPD(dh)
	VMOVSD(dx, retAddr(1))

	// Pass 3: times float32(1/sum).
	one := XMM()
	if a.wide {
		VMOVSD(expConsts.Offset(48), one)
	} else {
		VMOVSD(exp8Consts.Offset(32*e8OneD), one)
	}
	VDIVSD(dx, one, one)
	VCVTSD2SS(one, one, one)
	inv := a.reg()
	VBROADCASTSS(one, inv)
	MOVQ(sp, p)
	MOVQ(n, i)
	Label(a.label("softmax_scale"))
	VMULPS(Mem{Base: p}, inv, x)
	VMOVUPS(x, Mem{Base: p})
	ADDQ(step, p)
	DECQ(i)
	JNE(LabelRef(a.label("softmax_scale")))
	VZEROUPPER()
	RET()
}

// glu emits x = act(x)·u, a.lanes lanes at a time, where act(v) =
// v/(1+e^−t): SwiGLU's silu with t = v, or (gelu) GeGLU's tanh-form GELU
// with t = 2·sqrt(2/π)·(v + 0.044715·v³), since 0.5(1+tanh(y)) =
// 1/(1+e^−2y). e^−t is the softmax's exponential (on AVX2, exp8: its 0
// below its floor is the activation's limit there, v/(1+0)), its
// argument also bounded above by expCeil.
func glu(a attnISA, gelu bool) {
	name := map[bool]string{false: "swiglu", true: "geglu"}[gelu] + a.name
	TEXT(name, NOSPLIT, "func(x, u *float32, n int)")
	Pragma("noescape")
	act := "x[i]/(1+e^−x[i])"
	if gelu {
		act = "x[i]/(1+e^−2·sqrt(2/π)·(x[i]+0.044715·x[i]³))"
	}
	Doc(fmt.Sprintf("%s sets x[i] to %s·u[i] for i below n (a multiple of %d).", name, act, a.lanes))
	xp := Load(Param("x"), GP64())
	up := Load(Param("u"), GP64())
	n := Load(Param("n"), GP64())
	SHRQ(U8(bits.TrailingZeros(uint(a.lanes))), n)
	// The constants: AVX-512 holds them in registers, AVX2 reads them
	// from memory (sixteen registers do not hold them beside the work).
	var er expRegs
	var ceil, cube, twoC Op
	one, zero := a.reg(), a.reg()
	if a.wide {
		expTable()
		er = loadExp()
		c := func(off int) Op {
			r := a.reg()
			VBROADCASTSS(expConsts.Offset(off), r)
			return r
		}
		ceil = c(expOffCeil)
		VBROADCASTSS(expConsts.Offset(expOffOne), one)
		if gelu {
			cube, twoC = c(expOffCube), c(expOffTwoC)
		}
	} else {
		exp8Table()
		c := func(e int) Op { return exp8Consts.Offset(32 * e) }
		ceil, cube, twoC = c(e8Ceil), c(e8Cube), c(e8TwoC)
		VMOVUPS(exp8Consts.Offset(32*e8One), one)
	}
	VXORPS(zero, zero, zero)
	Label(name + "_loop")
	g, t := a.reg(), a.reg()
	VMOVUPS(Mem{Base: xp}, g)
	if gelu {
		// t = −2c·(v + 0.044715·v³) = −2c·v·(1 + 0.044715·v²)
		VMULPS(g, g, t)
		VFMADD132PS(cube, one, t)
		VMULPS(g, t, t)
		VMULPS(twoC, t, t)
		VSUBPS(t, zero, t)
	} else {
		VSUBPS(g, zero, t)
	}
	VMINPS(ceil, t, t)
	var e VecVirtual
	if a.wide {
		e = expVec(er, t)
	} else {
		e = exp8(t)
	}
	VADDPS(one, e, e)
	VDIVPS(e, g, g)
	VMULPS(Mem{Base: up}, g, g)
	VMOVUPS(g, Mem{Base: xp})
	ADDQ(U8(4*a.lanes), xp)
	ADDQ(U8(4*a.lanes), up)
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}
