package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var q8Tables struct{ offs, perm Mem }

// q8Consts returns the Q8_0 kernel's two constant tables (emitted once):
// the byte offsets of eight consecutive blocks' scales, for VPGATHERDD,
// and the VPERMD order that turns the reduction's [I₀ I₄ ..|I₁ I₅ ..|..]
// into [I₀ .. I₇].
func q8Consts() (offs, perm Mem) {
	if q8Tables.offs.Symbol.Name == "" {
		q8Tables.offs = GLOBL("q8Offs512", RODATA|NOPTR)
		for k := 0; k < 8; k++ {
			DATA(4*k, U32(34*k))
		}
		q8Tables.perm = GLOBL("q8Perm512", RODATA|NOPTR)
		for k, v := range []uint32{0, 4, 8, 12, 1, 5, 9, 13} {
			DATA(4*k, U32(v))
		}
	}
	return q8Tables.offs, q8Tables.perm
}

// q8AVX512 emits the Q8_0 kernel for AVX-512 F/BW/VL. Each 32-element
// block is one zmm: its int8 weights widen to int16 (VPMOVSXBW) and one
// VPMADDWD with the vector's quants leaves sixteen int32 lanes that sum to
// I_k exactly (a block's sum is far inside int32; VNNI would save nothing,
// since no accumulation follows). Eight blocks, one of X's 256-element
// blocks, are reduced together by a tree of lane shuffles to [I₀ .. I₇];
// their eight scales come in one VPGATHERDD. ref.go's float tail then runs
// eight lanes at a time for the products float32(dw_k·float32(I_k)), and
// in block order, one scalar addition at a time, for their sum A. A row
// whose length is not a whole number of 256-element blocks ends with its
// last few 32-element blocks one at a time.
func q8AVX512(name string) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the Q8_0 kernel for AVX-512 (ref.go's contract).")
	offsT, permT := q8Consts()
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	y := Load(Param("y"), GP64())

	offs, perm := YMM(), YMM()
	VMOVDQU32(offsT, offs)
	VMOVDQU32(permT, perm)
	kAll := K()

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(5), nb) // 32-element blocks a row
	total := XMM()
	VPXORQ(total, total, total)

	Label(name + "_group")
	CMPQ(nb, Imm(8))
	JB(LabelRef(name + "_tail"))
	{
		prefetch(wp, 8*34)
		var acc [8]VecVirtual
		for k := range acc {
			w := ZMM()
			VPMOVSXBW(Mem{Base: wp, Disp: 34*k + 2}, w)
			acc[k] = ZMM()
			VPMADDWD(Mem{Base: qp, Disp: 64 * k}, w, acc[k])
		}
		i := reduce8(acc, perm)
		dw := YMM()
		KXNORW(kAll, kAll, kAll)
		VPGATHERDD(Mem{Base: wp, Index: offs, Scale: 1}, kAll, dw)
		dh := XMM()
		VPMOVDW(dw, dh)
		VCVTPH2PS(dh, dw)
		VCVTDQ2PS(i, i)
		VMULPS(dw, i, i) // float32(dw_k·float32(I_k))
		a := sum8(i)
		VMULSS(Mem{Base: dp}, a, a)
		VCVTSS2SD(a, a, a)
		VADDSD(a, total, total)
	}
	ADDQ(U32(8*34), wp)
	ADDQ(U32(2*256), qp)
	ADDQ(U8(4), dp)
	SUBQ(Imm(8), nb)
	JMP(LabelRef(name + "_group"))

	// Fewer than eight blocks left: one at a time, into one A.
	Label(name + "_tail")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	a := XMM()
	VPXORQ(a, a, a)
	Label(name + "_one")
	{
		w, acc := ZMM(), ZMM()
		VPMOVSXBW(Mem{Base: wp, Disp: 2}, w)
		VPMADDWD(Mem{Base: qp}, w, acc)
		i := reduceT(acc)
		VCVTDQ2PS(i, i)
		dd := XMM()
		VPBROADCASTW(Mem{Base: wp}, dd)
		VCVTPH2PS(dd, dd)
		VMULSS(dd, i, i)
		VADDSS(i, a, a)
	}
	ADDQ(U8(34), wp)
	ADDQ(U8(64), qp)
	DECQ(nb)
	JNE(LabelRef(name + "_one"))
	VMULSS(Mem{Base: dp}, a, a)
	VCVTSS2SD(a, a, a)
	VADDSD(a, total, total)

	Label(name + "_end")
	rowEnd(name, total, nil, y, rows, wp, row0)
}

// reduce8 sums each of eight zmm of sixteen int32 lanes: the result is a
// ymm [I₀ .. I₇]. Pairs are halved and joined (256-bit halves, then
// 128-bit lanes) until one zmm holds, in 128-bit lane j, four partial sums
// of blocks j and j+4 interleaved; two in-lane steps finish them and perm
// orders them.
func reduce8(acc [8]VecVirtual, perm VecVirtual) Register {
	var z4 [4]VecVirtual
	for i := range z4 {
		a, b := acc[2*i], acc[2*i+1]
		p := ZMM()
		VSHUFI64X2(U8(0x44), b, a, p)
		VSHUFI64X2(U8(0xee), b, a, b)
		VPADDD(b, p, p) // [a in 8 lanes | b in 8 lanes]
		z4[i] = p
	}
	var z2 [2]VecVirtual
	for i := range z2 {
		a, b := z4[2*i], z4[2*i+1]
		p := ZMM()
		VSHUFI64X2(U8(0x88), b, a, p)
		VSHUFI64X2(U8(0xdd), b, a, b)
		VPADDD(b, p, p) // 128-bit lane j: block 4i+j in 4 lanes
		z2[i] = p
	}
	u, v := ZMM(), ZMM()
	VPUNPCKLDQ(z2[1], z2[0], u)
	VPUNPCKHDQ(z2[1], z2[0], v)
	VPADDD(v, u, u)
	VPSHUFD(U8(0x4e), u, v)
	VPADDD(v, u, u) // lane j: [I_j I_j+4 I_j I_j+4]
	// perm's indices reach into lanes 2 and 3 (blocks 2, 3, 6, 7), so
	// the permutation is of the full zmm.
	rz := ZMM()
	VPERMD(u, perm.AsZ(), rz)
	return rz.AsY()
}

// sum8 adds the eight float32 lanes of p in lane order, one scalar
// addition at a time (A = ((p₀+p₁)+p₂)+…), into lane 0 of an xmm.
func sum8(p Register) VecVirtual {
	lo := p.(VecVirtual).AsX()
	hi := XMM()
	VEXTRACTF32X4(U8(1), p, hi)
	a, t := XMM(), XMM()
	VMOVSHDUP(lo, t)
	VADDSS(t, lo, a)
	VMOVHLPS(lo, lo, t)
	VADDSS(t, a, a)
	VPERMILPS(U8(0xff), lo, t)
	VADDSS(t, a, a)
	VADDSS(hi, a, a)
	VMOVSHDUP(hi, t)
	VADDSS(t, a, a)
	VMOVHLPS(hi, hi, t)
	VADDSS(t, a, a)
	VPERMILPS(U8(0xff), hi, t)
	VADDSS(t, a, a)
	return a
}
