package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var q32Tables struct{ offs8, offs4, perm Mem }

// q32Consts returns the 32-element-block kernels' constant tables
// (emitted once): the byte offsets of eight consecutive blocks' scales
// (Q8_0's blocks 34 bytes apart, with four Q4_0's 18), for VPGATHERDD,
// and the VPERMD order that turns the reduction's [I₀ I₄ ..|I₁ I₅ ..|..]
// into [I₀ .. I₇].
func q32Consts(four bool) (offs, perm Mem) {
	if q32Tables.perm.Symbol.Name == "" {
		q32Tables.offs8 = GLOBL("q8Offs512", RODATA|NOPTR)
		for k := 0; k < 8; k++ {
			DATA(4*k, U32(34*k))
		}
		q32Tables.offs4 = GLOBL("q4Offs512", RODATA|NOPTR)
		for k := 0; k < 8; k++ {
			DATA(4*k, U32(18*k))
		}
		q32Tables.perm = GLOBL("q8Perm512", RODATA|NOPTR)
		for k, v := range []uint32{0, 4, 8, 12, 1, 5, 9, 13} {
			DATA(4*k, U32(v))
		}
	}
	if four {
		return q32Tables.offs4, q32Tables.perm
	}
	return q32Tables.offs8, q32Tables.perm
}

// q32AVX512x emits the Q8_0 (or, with four, Q4_0) kernel for AVX-512
// F/BW/VL over four packed vectors (gemv's pack; y takes each row's four
// results in a row). Each of the eight 32-element blocks inside one of
// the vectors' 256-element blocks is one zmm of its 32 weights as int16,
// built once for all four vectors (Q8_0: VPMOVSXBW; Q4_0: the sixteen
// bytes' low nibbles then their high ones, each less 8 taken off later
// as 8·S_k), and their eight scales come in one VPGATHERDD; then, a
// vector at a time, one VPMADDWD a block leaves sixteen int32 lanes that
// sum to I_k exactly, the eight blocks are reduced together to
// [I₀ .. I₇], and ref.go's float tail runs as the one-vector kernels run
// it: float32(dw_k·float32(I_k)) eight lanes at a time, their sum A in
// block order one scalar addition at a time, A·d, added to the vector's
// float64 total. So each vector's result is the one-vector kernels'
// bits. The weights and the gather, shared, are what a one-vector kernel
// spends most on besides the multiply-adds (the AVX-512 one-vector builds
// of this lost to AVX2's); rows must be whole 256-element blocks.
func q32AVX512x(name string, four bool) {
	const T = Tokens
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	format, bb := q32Format(four)
	Doc(name + " is the " + format + " kernel for AVX-512 over four packed vectors (ref.go's contract for each).")
	offsT, permT := q32Consts(four)
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	y := Load(Param("y"), GP64())
	offs, perm := YMM(), YMM()
	VMOVDQU32(offsT, offs)
	VMOVDQU32(permT, perm)
	kAll := K()
	var low4 VecVirtual
	if four {
		low4 = wordConst(0x000f)
	}
	tot := newRowTotals(T)

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	var sp Register
	if four {
		sp = Load(Param("s"), GP64())
	}
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb)
	tot.zero()

	// weights leaves block k's 32 weights as int16 in a zmm.
	weights := func(k int) VecVirtual {
		w := ZMM()
		if !four {
			VPMOVSXBW(Mem{Base: wp, Disp: bb*k + 2}, w)
			return w
		}
		v, hi := YMM(), YMM()
		VPMOVZXBW(Mem{Base: wp, Disp: bb*k + 2}, v)
		VPSRLW(U8(4), v, hi)
		VPANDD(low4.AsY(), v, v)
		VINSERTI64X4(U8(1), hi, v.AsZ(), w)
		return w
	}
	// group takes the eight blocks at wp against each vector's
	// 256-element block: its quants at qp+qOff[t], its scale at
	// dp+dOff[t], its eight 32-element sums at sp+sOff[t] (Q4_0).
	group := func(qOff, dOff, sOff []int) {
		prefetch(wp, 8*bb)
		var w [8]VecVirtual
		for k := range w {
			w[k] = weights(k)
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
			if four {
				st := YMM()
				VMOVDQU32(Mem{Base: sp, Disp: sOff[t]}, st)
				VPSLLD(U8(3), st, st)
				VPSUBD(st, i, i)
			}
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
	group(vectorOffsets(T, 2*512, 0), vectorOffsets(T, 8, 0), vectorOffsets(T, 2*32, 0))
	ADDQ(U32(8*bb), wp)
	group(vectorOffsets(T, 2*512, 512), vectorOffsets(T, 8, 4), vectorOffsets(T, 2*32, 32))
	ADDQ(U32(8*bb), wp)
	packedStep(2, qp, dp, sp)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	group(vectorOffsets(T, 512, 0), vectorOffsets(T, 4, 0), vectorOffsets(T, 32, 0))
	ADDQ(U32(8*bb), wp)

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
