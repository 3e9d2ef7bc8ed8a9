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

// q8AVX512x emits the Q8_0 kernel for AVX-512 F/BW/VL over four packed
// vectors (gemv's pack; y takes each row's four results in a row). Each
// of the eight 32-element blocks inside one of the vectors' 256-element
// blocks is one zmm, its int8 weights widened to int16 once (VPMOVSXBW)
// for all four vectors, and their eight scales come in one VPGATHERDD;
// then, a vector at a time, one VPMADDWD a block leaves sixteen int32
// lanes that sum to I_k exactly, the eight blocks are reduced together to
// [I₀ .. I₇], and ref.go's float tail runs as the one-vector kernels run
// it: float32(dw_k·float32(I_k)) eight lanes at a time, their sum A in
// block order one scalar addition at a time, A·d, added to the vector's
// float64 total. So each vector's result is the one-vector kernels'
// bits. The widening and the gather, shared, are what a one-vector
// kernel spends most on besides the multiply-adds (an AVX-512 build of
// that lost to AVX2's); rows must be whole 256-element blocks.
func q8AVX512x(name string) {
	const T = Tokens
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the Q8_0 kernel for AVX-512 over four packed vectors (ref.go's contract for each).")
	offsT, permT := q8Consts()
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	y := Load(Param("y"), GP64())
	offs, perm := YMM(), YMM()
	VMOVDQU32(offsT, offs)
	VMOVDQU32(permT, perm)
	kAll := K()
	tot := newRowTotals(T)

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb)
	tot.zero()

	// group takes the eight Q8_0 blocks at wp against each vector's
	// 256-element block: its quants at qp+qOff[t], its scale at
	// dp+dOff[t].
	group := func(qOff, dOff []int) {
		prefetch(wp, 8*34)
		var w [8]VecVirtual
		for k := range w {
			w[k] = ZMM()
			VPMOVSXBW(Mem{Base: wp, Disp: 34*k + 2}, w[k])
		}
		dw := YMM()
		KXNORW(kAll, kAll, kAll)
		VPGATHERDD(Mem{Base: wp, Index: offs, Scale: 1}, kAll, dw)
		dh := XMM()
		VPMOVDW(dw, dh)
		VCVTPH2PS(dh, dw)
		for t := range T {
			var acc [8]VecVirtual
			for k := range acc {
				acc[k] = ZMM()
				VPMADDWD(Mem{Base: qp, Disp: qOff[t] + 64*k}, w[k], acc[k])
			}
			i := reduce8(acc, perm)
			VCVTDQ2PS(i, i)
			VMULPS(dw, i, i) // float32(dw_k·float32(I_k))
			a := sum8(i)
			VMULSS(Mem{Base: dp, Disp: dOff[t]}, a, a)
			VCVTSS2SD(a, a, a)
			tot.add(t, a)
		}
	}

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	group(vectorOffsets(T, 2*512, 0), vectorOffsets(T, 8, 0))
	ADDQ(U32(8*34), wp)
	group(vectorOffsets(T, 2*512, 512), vectorOffsets(T, 8, 4))
	ADDQ(U32(8*34), wp)
	packedStep(2, qp, dp, nil)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	group(vectorOffsets(T, 512, 0), vectorOffsets(T, 4, 0))
	ADDQ(U32(8*34), wp)

	Label(name + "_end")
	tot.rowEnd(name, y, rows, wp, row0)
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
