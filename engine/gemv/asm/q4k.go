package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q4kAVX2 emits the Q4_K (or, with five, Q5_K) kernel for AVX2: per
// 256-element block, the 4- or 5-bit quants are widened to int16, scaled
// by their sub-block's 6-bit scale (at most 31·63, still int16) and
// multiply-added with the vector's int16 quants into eight int32 lanes
// (VPMADDWD), which sum to T exactly; M is the mins times the vector's
// 32-element sums. The float tail is ref.go's, one scalar operation at a
// time.
func q4kAVX2(name string, five bool) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the " + map[bool]string{false: "Q4_K", true: "Q5_K"}[five] + " kernel for AVX2 (ref.go's contract).")
	blockBytes, qsOff := kBlock(five)
	// One pointer walks a row; rowEnd moves it to the next by the stride.
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	SHRQ(U8(8), n) // blocks a row

	scw := AllocLocal(16) // the block's eight scales as int16

	mask := YMM()
	tmp := GP32()
	MOVL(U32(0x000f000f), tmp)
	VMOVD(tmp, mask.AsX())
	VPBROADCASTD(mask.AsX(), mask)
	var one VecVirtual
	if five {
		one = YMM()
		MOVL(U32(0x00100010), tmp)
		VMOVD(tmp, one.AsX())
		VPBROADCASTD(one.AsX(), one)
	}

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	sp := Load(Param("s"), GP64())
	nb := GP64()
	MOVQ(n, nb)
	total := XMM()
	VXORPD(total, total, total)

	// body emits a block's integer work at wp+wo (its x quants at
	// qp+qo, sums at sp+so) and returns [t01 t23 m01 m23 | t45 t67 m45
	// m67]: lanes whose low pairs sum to T and high pairs to M in each
	// half.
	body := func(wo, qo, so int) VecVirtual {
		prefetchAt(wp, wo, blockBytes)
		mins := q4kAVX2Scales(wp, wo, scw)
		VPMULLD(Mem{Base: sp, Disp: so}, mins, mins) // m_s · S_s, exact
		acc := YMM()
		VPXOR(acc, acc, acc)
		q4kAVX2Products(wp, wo, qsOff, scw, mask, one, five, qp, func(int) int { return qo }, []VecVirtual{acc})
		// acc's lanes sum to T, mins' to M.
		VPHADDD(mins, acc, acc) // [t01 t23 m01 m23 | t45 t67 m45 m67]
		return acc
	}
	// tmOf finishes one block's body to [T M T M].
	tmOf := func(v VecVirtual) VecVirtual {
		hiX := XMM()
		VEXTRACTI128(U8(1), v, hiX)
		VPADDD(hiX, v.AsX(), hiX) // [ta tb ma mb]
		VPHADDD(hiX, hiX, hiX)    // [T M T M]
		return hiX
	}

	// Eight blocks at a time, their sums and float steps side by side:
	// four blocks' lanes are reduced together to their [T M] pairs
	// (integer sums, exact in any order) and go to tm8; once the eight
	// are in, lane by lane as one block's were (d·T − dmin·M, times the
	// x's block scale, in float32, no fused multiply-add), then into the
	// row's float64 total in block order, so the bits stay ref.go's. A
	// block's steps one at a time are a serial chain its neighbours
	// could not overlap, and a block's own horizontal sums cost as much
	// as four blocks' together.
	tm8 := AllocLocal(64)
	Label(name + "_oct")
	CMPQ(nb, Imm(8))
	JB(LabelRef(name + "_block"))
	for quad := 0; quad < 2; quad++ {
		var pair [2]VecVirtual
		for p := 0; p < 2; p++ {
			b := 4*quad + 2*p
			v0 := body(b*blockBytes, b*512, b*32)
			v1 := body((b+1)*blockBytes, (b+1)*512, (b+1)*32)
			// [T0lo M0lo T1lo M1lo | T0hi M0hi T1hi M1hi]
			VPHADDD(v1, v0, v0)
			pair[p] = v0
		}
		lo, hi := YMM(), YMM()
		VPERM2I128(U8(0x20), pair[1], pair[0], lo) // the four blocks' low halves
		VPERM2I128(U8(0x31), pair[1], pair[0], hi) // and their high ones
		VPADDD(hi, lo, lo)                         // [T M] of the four, in order
		VMOVDQU(lo, tm8.Offset(32*quad))
	}
	for half := 0; half < 2; half++ {
		// [T M] and [d dmin] of four blocks, as [f32 pair] lanes.
		tm := YMM()
		VCVTDQ2PS(tm8.Offset(32*half), tm)
		dx := XMM()
		VMOVD(Mem{Base: wp, Disp: 4 * half * blockBytes}, dx)
		for k := 1; k < 4; k++ {
			VPINSRD(U8(k), Mem{Base: wp, Disp: (4*half + k) * blockBytes}, dx, dx)
		}
		dd := YMM()
		VCVTPH2PS(dx, dd)  // [d dmin] of each
		VMULPS(dd, tm, tm) // [d·T dmin·M]
		mm := YMM()
		VMOVSHDUP(tm, mm)
		VSUBPS(mm, tm, tm) // d·T − dmin·M in the even lanes
		sx := YMM()
		VPMOVZXDQ(Mem{Base: dp, Disp: 16 * half}, sx) // the x's scales in the even lanes
		VMULPS(sx, tm, tm)
		// The four products' even lanes to the low ones, as float64.
		pk := YMM()
		VSHUFPS(U8(0x88), tm, tm, pk) // [p0 p1 p0 p1 | p2 p3 p2 p3]
		VPERMQ(U8(0xd8), pk, pk)      // [p0 p1 p2 p3 | ...]
		pd := YMM()
		VCVTPS2PD(pk.AsX(), pd)
		addPD4(pd, total)
	}
	ADDQ(U32(8*blockBytes), wp)
	ADDQ(U32(8*2*256), qp)
	ADDQ(U8(32), dp)
	ADDQ(U32(8*32), sp)
	SUBQ(Imm(8), nb)
	JMP(LabelRef(name + "_oct"))

	// The blocks past the last eight, one at a time.
	Label(name + "_block")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	hiX := tmOf(body(0, 0, 0))
	tm := XMM()
	VCVTDQ2PS(hiX, tm)
	dd := XMM()
	VMOVD(Mem{Base: wp}, dd)
	VCVTPH2PS(dd, dd) // [d dmin 0 0]
	VMULPS(dd, tm, tm)
	mm := XMM()
	VMOVSHDUP(tm, mm)
	VSUBSS(mm, tm, tm)
	VMULSS(Mem{Base: dp}, tm, tm)
	VCVTSS2SD(tm, tm, tm)
	VADDSD(tm, total, total)

	ADDQ(U32(blockBytes), wp)
	ADDQ(U32(2*256), qp)
	ADDQ(U8(4), dp)
	ADDQ(U8(32), sp)
	DECQ(nb)
	JMP(LabelRef(name + "_block"))

	Label(name + "_end")
	rowEnd(name, total, nil, y, rows, wp, row0)
}

// q4kAVX2x emits the Q4_K (Q5_K: five) kernel for AVX2 over Tokens packed
// vectors (gemv's pack layout, as q4kAVX512x reads it): q4kAVX2's
// arithmetic for each vector, each block's weights widened and scaled
// once for all of them. It walks the pack's pairs of blocks one block at
// a time, each block with its own float tail, as q4kAVX2 does.
func q4kAVX2x(name string, five bool) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the " + map[bool]string{false: "Q4_K", true: "Q5_K"}[five] + " kernel for AVX2 over four packed vectors (ref.go's contract for each).")
	const T = Tokens
	blockBytes, qsOff := kBlock(five)
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	y := Load(Param("y"), GP64())
	scw := AllocLocal(16)
	tot := newRowTotals(T)
	mask := splat16(0x000f)
	var one VecVirtual
	if five {
		one = splat16(0x0010)
	}

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	sp := Load(Param("s"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb)
	tot.zero()

	// block emits the block at wp+wo against each vector's quants at
	// qp+qo(t), scale at dp+do(t) and sums at sp+so(t).
	block := func(wo int, qo, do, so func(t int) int) {
		mins := q4kAVX2Scales(wp, wo, scw)
		acc := make([]VecVirtual, T)
		for t := range acc {
			acc[t] = YMM()
			VPXOR(acc[t], acc[t], acc[t])
		}
		q4kAVX2Products(wp, wo, qsOff, scw, mask, one, five, qp, qo, acc)
		dd := XMM()
		VMOVD(Mem{Base: wp, Disp: wo}, dd)
		VCVTPH2PS(dd, dd) // [d dmin 0 0]
		for t := 0; t < T; t++ {
			mt := YMM()
			VPMULLD(Mem{Base: sp, Disp: so(t)}, mins, mt)
			a := acc[t]
			VPHADDD(mt, a, a)
			hiX := XMM()
			VEXTRACTI128(U8(1), a, hiX)
			VPADDD(hiX, a.AsX(), hiX)
			VPHADDD(hiX, hiX, hiX) // [T M T M]
			tm := XMM()
			VCVTDQ2PS(hiX, tm)
			VMULPS(dd, tm, tm)
			mm := XMM()
			VMOVSHDUP(tm, mm)
			VSUBSS(mm, tm, tm)
			VMULSS(Mem{Base: dp, Disp: do(t)}, tm, tm)
			VCVTSS2SD(tm, tm, tm)
			tot.add(t, tm)
		}
	}

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	prefetch(wp, 2*blockBytes)
	for b := 0; b < 2; b++ {
		block(b*blockBytes,
			func(t int) int { return t*2*512 + b*512 },
			func(t int) int { return t*8 + b*4 },
			func(t int) int { return t*64 + b*32 })
	}
	ADDQ(U32(2*blockBytes), wp)
	packedStep(2, qp, dp, sp)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	block(0, func(t int) int { return t * 512 }, func(t int) int { return t * 4 }, func(t int) int { return t * 32 })

	Label(name + "_end")
	tot.rowEnd(name, y, rows, wp, row0)
}

// q4kAVX2Products adds the products of the Q4_K (Q5_K: five) block at
// wp+wo, its scales in scw, with each vector's int16 quants at
// qp+qo(t) into acc[t]: each part of the weights widened and scaled once
// for every vector. One vector takes its products in the weights' own
// registers; several need a register for each product.
func q4kAVX2Products(wp Register, wo, qsOff int, scw Mem, mask, one VecVirtual, five bool, qp Register, qo func(t int) int, acc []VecVirtual) {
	var qh VecVirtual
	if five {
		qh = YMM()
	}
	for j := 0; j < 4; j++ {
		slo, shi := YMM(), YMM()
		VPBROADCASTW(scw.Offset(4*j), slo)
		VPBROADCASTW(scw.Offset(4*j+2), shi)
		for h := 0; h < 2; h++ {
			lo, hi := q4kAVX2Weights(wp, wo, qsOff, j, h, mask, one, qh, slo, shi)
			if len(acc) == 1 {
				VPMADDWD(Mem{Base: qp, Disp: qo(0) + 2*(64*j+16*h)}, lo, lo)
				VPMADDWD(Mem{Base: qp, Disp: qo(0) + 2*(64*j+32+16*h)}, hi, hi)
				VPADDD(lo, acc[0], acc[0])
				VPADDD(hi, acc[0], acc[0])
				continue
			}
			for t := range acc {
				p := YMM()
				VPMADDWD(Mem{Base: qp, Disp: qo(t) + 2*(64*j+16*h)}, lo, p)
				VPADDD(p, acc[t], acc[t])
				VPMADDWD(Mem{Base: qp, Disp: qo(t) + 2*(64*j+32+16*h)}, hi, p)
				VPADDD(p, acc[t], acc[t])
			}
		}
	}
}

// q4kAVX2Scales unpacks the scales and mins of the block at wp+wo (ref.go's
// kScales) with 32-bit words: the eight scales as int16 into scw, the
// mins returned as eight int32 lanes.
func q4kAVX2Scales(wp Register, wo int, scw Mem) VecVirtual {
	sc03, sc47, m03, m47 := kScalesGP(wp, wo)
	scx, mx := XMM(), XMM()
	VMOVD(sc03, scx)
	VPINSRD(U8(1), sc47, scx, scx)
	VPMOVZXBW(scx, scx)
	VMOVDQU(scx, scw)
	VMOVD(m03, mx)
	VPINSRD(U8(1), m47, mx, mx)
	mins := YMM()
	VPMOVZXBD(mx, mins)
	return mins
}

// q4kAVX2Weights emits half h of part j of the block at wp+wo (its quants
// at qsOff): sixteen low-nibble and sixteen high-nibble weights widened
// to int16 and scaled by their sub-blocks' scales (slo, shi). With a
// fifth bit (one not nil: Q5_K) it comes from qh (a scratch register):
// byte l of the block's qh holds bit 2j (low nibbles) and 2j+1 (high) of
// element l's.
func q4kAVX2Weights(wp Register, wo, qsOff, j, h int, mask, one, qh, slo, shi VecVirtual) (lo, hi VecVirtual) {
	v := YMM()
	lo, hi = YMM(), YMM()
	VPMOVZXBW(Mem{Base: wp, Disp: wo + qsOff + 32*j + 16*h}, v)
	VPAND(mask, v, lo)
	VPSRLW(U8(4), v, hi)
	if one != nil {
		VPMOVZXBW(Mem{Base: wp, Disp: wo + 16 + 16*h}, qh)
		hb := YMM()
		if 2*j < 4 {
			VPSLLW(U8(4-2*j), qh, hb)
		} else if 2*j > 4 {
			VPSRLW(U8(2*j-4), qh, hb)
		} else {
			VMOVDQA(qh, hb)
		}
		VPAND(one, hb, hb)
		VPOR(hb, lo, lo)
		if 2*j+1 < 4 {
			VPSLLW(U8(4-2*j-1), qh, hb)
		} else {
			VPSRLW(U8(2*j+1-4), qh, hb)
		}
		VPAND(one, hb, hb)
		VPOR(hb, hi, hi)
	}
	VPMULLW(slo, lo, lo)
	VPMULLW(shi, hi, hi)
	return lo, hi
}
