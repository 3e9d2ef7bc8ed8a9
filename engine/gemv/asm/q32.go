package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q32AVX2 emits the Q8_0 (or, with four, Q4_0) kernel for AVX2. Both
// formats are 32-element blocks behind an fp16 scale dw: Q8_0's 32 int8
// quants (34 bytes), or Q4_0's sixteen bytes whose low nibbles are
// elements 0-15 and high nibbles 16-31, each less 8 (18 bytes). Each
// block's integer sum I_k is exact in int32 lanes (Q4_0's −8 comes off
// as 8·S_k, the vector's 32-element sum). The eight blocks inside one
// 256-element block of the vector are taken together: their sums are
// reduced to one vector of eight I_k, scaled by their dw_k in one
// multiply (each lane one float32 product, as in ref.go), then added one
// lane at a time in block order. A row whose length is not a multiple of
// 256 ends with up to seven blocks taken one at a time, so nothing past
// the row is read.
func q32AVX2(name string, four bool) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	format, bb := q32Format(four)
	Doc(name + " is the " + format + " kernel for AVX2 (ref.go's contract).")
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	full := GP64() // whole 256-element blocks a row
	MOVQ(n, full)
	SHRQ(U8(8), full)
	tail := n // 32-element blocks after them
	SHRQ(U8(5), tail)
	ANDQ(U8(7), tail)

	var low4 VecVirtual
	if four {
		low4 = splat16(0x000f)
	}

	// sum32 leaves block k's eight int32 partial sums in a new register
	// (k counts blocks from wp; the vector's quants from qp).
	sum32 := func(qp Register, k int) VecVirtual {
		s := YMM()
		if four {
			v, hi := YMM(), YMM()
			VPMOVZXBW(Mem{Base: wp, Disp: bb*k + 2}, v)
			VPSRLW(U8(4), v, hi)
			VPAND(low4, v, s)
			VPMADDWD(Mem{Base: qp, Disp: 64 * k}, s, s)
			VPMADDWD(Mem{Base: qp, Disp: 64*k + 32}, hi, hi)
			VPADDD(hi, s, s)
			return s
		}
		hi := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: bb*k + 2}, s)
		VPMOVSXBW(Mem{Base: wp, Disp: bb*k + 18}, hi)
		VPMADDWD(Mem{Base: qp, Disp: 64 * k}, s, s)
		VPMADDWD(Mem{Base: qp, Disp: 64*k + 32}, hi, hi)
		VPADDD(hi, s, s)
		return s
	}

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	var sp Register
	if four {
		sp = Load(Param("s"), GP64())
	}
	total := XMM()
	VXORPD(total, total, total)
	nb := GP64()
	MOVQ(full, nb)
	TESTQ(nb, nb)
	JE(LabelRef(name + "_tail"))

	Label(name + "_block")
	prefetch(wp, 8*bb)
	// Eight blocks' partial sums, reduced pairwise: lane k of i is I_k.
	var s [8]VecVirtual
	for k := range s {
		s[k] = sum32(qp, k)
	}
	for k := 0; k < 8; k += 2 {
		VPHADDD(s[k+1], s[k], s[k])
	}
	VPHADDD(s[2], s[0], s[0]) // [I0 I1 I2 I3] halves: low lane sums 0-3, high 4-7
	VPHADDD(s[6], s[4], s[4]) // the same for blocks 4-7
	i, t := YMM(), YMM()
	VPERM2I128(U8(0x21), s[4], s[0], i)
	VPBLENDD(U8(0xf0), s[4], s[0], t)
	VPADDD(t, i, i)
	if four {
		st := YMM()
		VMOVDQU(Mem{Base: sp}, st)
		VPSLLD(U8(3), st, st)
		VPSUBD(st, i, i)
	}
	p := YMM()
	VCVTDQ2PS(i, p)
	// The eight scales, 34 (18) bytes apart.
	dw, hw := XMM(), GP32()
	MOVWLZX(Mem{Base: wp}, hw)
	VMOVD(hw, dw)
	for k := 1; k < 8; k++ {
		VPINSRW(U8(k), Mem{Base: wp, Disp: bb * k}, dw, dw)
	}
	dws := YMM()
	VCVTPH2PS(dw, dws)
	VMULPS(dws, p, p) // lane k: float32(dw_k·float32(I_k))
	// A = ((p0 + p1) + p2) + … + p7 in float32. ref.go starts from 0,
	// which differs only in the sign of a zero A, and a zero P_b leaves
	// the float64 total (never −0) as it was.
	a, e, hiP := XMM(), XMM(), XMM()
	VEXTRACTF128(U8(1), p, hiP)
	for k := 1; k < 8; k++ {
		switch {
		case k == 4:
			VADDSS(hiP, a, a)
		case k < 4:
			VPERMILPS(U8(k), p.AsX(), e)
			if k == 1 {
				VADDSS(e, p.AsX(), a)
			} else {
				VADDSS(e, a, a)
			}
		default:
			VPERMILPS(U8(k-4), hiP, e)
			VADDSS(e, a, a)
		}
	}
	VMULSS(Mem{Base: dp}, a, a)
	addBlock(a, total)

	ADDQ(U32(8*bb), wp)
	ADDQ(U32(2*256), qp)
	ADDQ(U8(4), dp)
	if four {
		ADDQ(U8(32), sp)
	}
	DECQ(nb)
	JNE(LabelRef(name + "_block"))

	Label(name + "_tail")
	TESTQ(tail, tail)
	JE(LabelRef(name + "_store"))
	MOVQ(tail, nb)
	ta := XMM()
	VXORPS(ta, ta, ta)
	Label(name + "_one")
	one := hsumD(sum32(qp, 0))
	if four {
		subEightS(sp, one)
	}
	VCVTDQ2PS(one, one)
	hw1, d1 := GP32(), XMM()
	MOVWLZX(Mem{Base: wp}, hw1)
	VMOVD(hw1, d1)
	VCVTPH2PS(d1, d1)
	VMULSS(d1, one, one)
	VADDSS(one, ta, ta)
	ADDQ(U8(bb), wp)
	ADDQ(U8(64), qp)
	if four {
		ADDQ(U8(4), sp)
	}
	DECQ(nb)
	JNE(LabelRef(name + "_one"))
	VMULSS(Mem{Base: dp}, ta, ta)
	addBlock(ta, total)

	Label(name + "_store")
	rowEnd(name, total, nil, y, rows, wp, row0)
}
