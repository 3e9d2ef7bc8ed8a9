package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q4kAVX512 emits the Q4_K (or, with five, Q5_K) kernel for AVX-512 F/BW/VL:
// q4kAVX2's arithmetic on 32 int16 lanes at a time, two blocks at a time.
// A block's 128 bytes of nibbles widen 32 at a time into one zmm whose low
// nibbles are one sub-block and whose high nibbles are the next, so each
// zmm of weights has a single scale (broadcast from a stack slot that
// holds it twice, a plain load). The high nibbles stay where they are,
// sixteen times their value: that product with the scale still fits int16
// (16·31·63), each int32 lane of their accumulator stays below 2³¹ and
// is a multiple of sixteen, so one arithmetic shift a block divides it
// exactly, where shifting every nibble down would cost four. With vnni
// the multiply-add and the accumulation are one VPDPWSSD; without,
// VPMADDWD and VPADDD. Both wrap int32 exactly as the reference's sums do.
// Two blocks share one horizontal reduction, to [T₀ M₀ T₁ M₁], and one
// float tail, whose lanes compute what ref.go computes one scalar at a
// time (separate multiplies and subtractions, no FMA) and are added to
// the row's float64 sum in block order. An odd last block goes alone.
func q4kAVX512(name string, five, vnni bool) {
	k, wp, rows, y := openQ4K512(name, five, vnni, "(ref.go's contract)", 0)
	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	sp := Load(Param("s"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb) // blocks a row
	total := XMM()
	VPXORQ(total, total, total)

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	{
		prefetch(wp, 2*k.bb)
		mins := k.pairScales(wp)
		VPMULLD(Mem{Base: sp}, mins, mins) // m_s · S_s, exact

		a0 := k.block(wp, 0, qp, 0, 0)
		a1 := k.block(wp, k.bb, qp, 512, 32)
		tm := reducePairTM(a0, a1, mins)
		VCVTDQ2PS(tm, tm)
		// [d₀ dmin₀ d₁ dmin₁] from the two blocks' first dwords.
		d0, d1 := GP64(), GP64()
		MOVL(Mem{Base: wp}, d0.As32())
		MOVL(Mem{Base: wp, Disp: k.bb}, d1.As32())
		SHLQ(U8(32), d1)
		ORQ(d1, d0)
		dd := XMM()
		VMOVQ(d0, dd)
		VCVTPH2PS(dd, dd)
		VMULPS(dd, tm, tm)
		mm := XMM()
		VMOVSHDUP(tm, mm)
		VSUBPS(mm, tm, tm) // lanes 0 and 2
		dx := XMM()
		VPMOVZXDQ(Mem{Base: dp}, dx) // [dx₀ 0 dx₁ 0]
		VMULPS(dx, tm, tm)
		p := XMM()
		VCVTSS2SD(tm, tm, p)
		VADDSD(p, total, total)
		VMOVHLPS(tm, tm, tm)
		VCVTSS2SD(tm, tm, tm)
		VADDSD(tm, total, total)
	}
	ADDQ(U32(2*k.bb), wp)
	ADDQ(U32(2*2*256), qp)
	ADDQ(U8(8), dp)
	ADDQ(U8(64), sp)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	{
		mins := k.blockScales(wp)
		VPMULLD(Mem{Base: sp}, mins, mins)

		a := k.block(wp, 0, qp, 0, 0)
		tm := reduceTM(a, mins)
		VCVTDQ2PS(tm, tm)
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
		ADDQ(U32(k.bb), wp)
		ADDQ(U32(2*256), qp)
		ADDQ(U8(4), dp)
		ADDQ(U8(32), sp)
		DECQ(nb)
		JMP(LabelRef(name + "_pair"))
	}

	Label(name + "_end")
	rowEnd(name, total, nil, y, rows, wp, row0)
}

// openQ4K512 opens a Q4_K (Q5_K: five) kernel for AVX-512: its text
// (documented as contract says), the registers of w, rows and y, the
// staged scales' stack slot, the totals' of vectors > 0 vectors (the
// multi-vector kernels'), and the constants.
func openQ4K512(name string, five, vnni bool, contract string, vectors int) (k q4k512, wp, rows, y Register) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	fam := "AVX-512"
	if vnni {
		fam = "AVX-512 with VNNI"
	}
	Doc(name + " is the " + map[bool]string{false: "Q4_K", true: "Q5_K"}[five] + " kernel for " + fam + " " + contract + ".")
	k = q4k512{five: five, vnni: vnni}
	k.bb, k.qsOff = kBlock(five)
	wp = Load(Param("w"), GP64())
	rows = Load(Param("rows"), GP64())
	y = Load(Param("y"), GP64())

	// Each scale of two blocks as two int16 in a dword, so that
	// VPBROADCASTD (a load, no shuffle) fills a zmm with one of them.
	k.scd = AllocLocal(64)
	if vectors > 0 {
		k.tot = newRowTotals(vectors)
	}
	k.low = wordConst(0x000f)
	k.high = wordConst(0x00f0)
	if five {
		k.bit4 = wordConst(0x0010)
		k.bit8 = wordConst(0x0100)
	}
	return k, wp, rows, y
}

// q4k512 holds what q4kAVX512's block emitter shares across blocks.
type q4k512 struct {
	five, vnni bool
	bb, qsOff  int        // block bytes, offset of the nibbles
	scd        Mem        // the staged scales
	low, high  VecVirtual // 0x000f, 0x00f0 in every word
	bit4, bit8 VecVirtual // 0x0010, 0x0100 (Q5_K's fifth bit, low and high)
	tot        rowTotals  // a multi-vector kernel's
}

// scales returns the block at wp+off's scales (bytes 0-7) and mins, each
// as eight bytes in a 64-bit register.
func (k *q4k512) scales(wp Register, off int) (sc, m Register) {
	sc03, sc47, m03, m47 := kScalesGP(wp, off)
	return pack64(sc03, sc47), pack64(m03, m47)
}

// pairScales stages the scales of the two blocks at wp and returns their
// mins as sixteen int32 lanes (the first block's in lanes 0-7).
func (k *q4k512) pairScales(wp Register) VecVirtual {
	// Scales and mins of both blocks: eight bytes each.
	mx, t := XMM(), XMM()
	sc, m := k.scales(wp, 0)
	k.stage(sc, 0)
	VMOVQ(m, mx)
	sc, m = k.scales(wp, k.bb)
	k.stage(sc, 32)
	VMOVQ(m, t)
	VPUNPCKLQDQ(t, mx, mx)
	mins := ZMM()
	VPMOVZXBD(mx, mins)
	return mins
}

// blockScales is pairScales for the one block at wp: its mins in eight
// int32 lanes.
func (k *q4k512) blockScales(wp Register) VecVirtual {
	sc, m := k.scales(wp, 0)
	k.stage(sc, 0)
	mx := XMM()
	VMOVQ(m, mx)
	mins := YMM()
	VPMOVZXBD(mx, mins)
	return mins
}

// stage stores a block's eight scale bytes (in sc) at k.scd+so as eight
// dwords, each scale twice as int16.
func (k *q4k512) stage(sc Register, so int) {
	x := XMM()
	VMOVQ(sc, x)
	y, t := YMM(), YMM()
	VPMOVZXBD(x, y)
	VPSLLD(U8(16), y, t)
	VPORD(t, y, y)
	VMOVDQU32(y, k.scd.Offset(so))
}

// block emits the integer dot product of the block at wp+wo with the
// quants at qp+qo, its scales staged at k.scd+so, and returns its sixteen
// int32 lanes, which sum to T.
func (k *q4k512) block(wp Register, wo int, qp Register, qo, so int) VecVirtual {
	return k.blocks(wp, wo, qp, []int{qo}, so)[0]
}

// blocks is block for several vectors at once, their quants at qp+qos[i]:
// the weights are widened and scaled once, then multiplied into each
// vector's accumulators. It returns each vector's sixteen lanes.
func (k *q4k512) blocks(wp Register, wo int, qp Register, qos []int, so int) []VecVirtual {
	// With several vectors each accumulator starts at its first product
	// (VPMADDWD gives what VPDPWSSD into zero would), so none is live
	// before it is needed.
	zeroed := k.vnni && len(qos) == 1
	accs := make([][2]VecVirtual, len(qos)) // low nibbles; high ones, times 16
	for i := range accs {
		accs[i] = [2]VecVirtual{ZMM(), ZMM()}
		if zeroed {
			VPXORD(accs[i][0], accs[i][0], accs[i][0])
			VPXORD(accs[i][1], accs[i][1], accs[i][1])
		}
	}
	var qh VecVirtual
	if k.five {
		qh = ZMM()
		VPMOVZXBW(Mem{Base: wp, Disp: wo + 16}, qh)
	}
	for j := 0; j < 4; j++ {
		v, lo, hi := ZMM(), ZMM(), ZMM()
		VPMOVZXBW(Mem{Base: wp, Disp: wo + k.qsOff + 32*j}, v)
		VPANDD(k.low, v, lo)
		VPANDD(k.high, v, hi)
		if k.five {
			// Byte l of qh holds element l's fifth bit in bit 2j (low
			// nibbles) and 2j+1 (high nibbles): move it to bit 4 (bit
			// 8 for the high nibble, kept times 16) and merge it with
			// VPTERNLOGD (dst | hb&bit).
			b := 2 * j
			hb := qh
			if b != 4 {
				hb = ZMM()
				if b < 4 {
					VPSLLW(U8(4-b), qh, hb)
				} else {
					VPSRLW(U8(b-4), qh, hb)
				}
			}
			VPTERNLOGD(U8(0xf8), k.bit4, hb, lo)
			hb = ZMM()
			VPSLLW(U8(7-b), qh, hb)
			VPTERNLOGD(U8(0xf8), k.bit8, hb, hi)
		}
		for h, part := range []VecVirtual{lo, hi} {
			s := ZMM()
			VPBROADCASTD(k.scd.Offset(so+8*j+4*h), s)
			VPMULLW(s, part, part)
			for i, qo := range qos {
				acc := &accs[i]
				madd(k.vnni, j == 0, zeroed, len(qos) == 1, Mem{Base: qp, Disp: qo + 2*(64*j+32*h)}, part, acc[h])
			}
		}
	}
	out := make([]VecVirtual, len(qos))
	for i := range accs {
		VPSRAD(U8(4), accs[i][1], accs[i][1])
		VPADDD(accs[i][1], accs[i][0], accs[i][0])
		out[i] = accs[i][0]
	}
	return out
}

// wordConst returns a zmm with v in every int16 lane.
func wordConst(v uint16) VecVirtual {
	tmp := GP32()
	MOVL(U32(uint32(v)<<16|uint32(v)), tmp)
	z := ZMM()
	VPBROADCASTD(tmp, z)
	return z
}

// kScalesGP unpacks the Q4_K/Q5_K block at wp+off's eight 6-bit scales and
// mins (ref.go's kScales) into four dwords of four bytes each, with 32-bit
// scalar arithmetic: scales 0-3, scales 4-7, mins 0-3, mins 4-7.
func kScalesGP(wp Register, off int) (sc03, sc47, m03, m47 GPVirtual) {
	a, b, c, t1, t2 := GP32(), GP32(), GP32(), GP32(), GP32()
	MOVL(Mem{Base: wp, Disp: off + 4}, a)
	MOVL(Mem{Base: wp, Disp: off + 8}, b)
	MOVL(Mem{Base: wp, Disp: off + 12}, c)
	MOVL(a, t1)
	SHRL(U8(2), t1)
	ANDL(U32(0x30303030), t1)
	ANDL(U32(0x3f3f3f3f), a) // sc 0-3
	MOVL(c, t2)
	ANDL(U32(0x0f0f0f0f), t2)
	ORL(t1, t2) // sc 4-7
	MOVL(b, t1)
	SHRL(U8(2), t1)
	ANDL(U32(0x30303030), t1)
	ANDL(U32(0x3f3f3f3f), b) // m 0-3
	SHRL(U8(4), c)
	ANDL(U32(0x0f0f0f0f), c)
	ORL(t1, c) // m 4-7
	return a, t2, b, c
}

// pack64 joins two dwords (the low one first) in lo's 64-bit register: a
// VMOVQ then moves both, where VPINSRD would need AVX-512 DQ for the high
// registers.
func pack64(lo, hi GPVirtual) Register {
	SHLQ(U8(32), hi.As64())
	ORQ(hi.As64(), lo.As64())
	return lo.As64()
}

// reducePairTM sums two blocks' T lanes (zmm a0, a1) and their mins
// products (one zmm, block 0 in dwords 0-7) into an xmm [T₀ M₀ T₁ M₁].
func reducePairTM(a0, a1, m VecVirtual) VecVirtual {
	p, q := ZMM(), ZMM()
	VSHUFI64X2(U8(0x44), a1, a0, p) // halves 0-255 of a0, a1
	VSHUFI64X2(U8(0xee), a1, a0, q) // halves 256-511
	VPADDD(q, p, p)                 // [T₀ in 8 lanes | T₁ in 8 lanes]
	VPUNPCKLDQ(m, p, q)             // per 128 bits: [t m t m]
	VPUNPCKHDQ(m, p, p)
	VPADDD(q, p, p)
	VPSHUFD(U8(0x4e), p, q)
	VPADDD(q, p, p) // per 128 bits: [t m t m], twice the same
	VSHUFI64X2(U8(0xb1), p, p, q)
	VPADDD(q, p, p) // 128-bit lane 0: [T₀ M₀ T₀ M₀], lane 2: [T₁ M₁ T₁ M₁]
	x := XMM()
	VEXTRACTI32X4(U8(2), p, x)
	VPUNPCKLQDQ(x, p.AsX(), x)
	return x
}

// reduceTM sums the sixteen int32 lanes of t (a zmm) and the eight of m (a
// ymm) into an xmm [T M T M], with EVEX-encodable instructions only (the
// allocator may hand out registers 16-31, which VEX cannot name).
func reduceTM(t, m VecVirtual) VecVirtual {
	h := YMM()
	VEXTRACTI64X4(U8(1), t, h)
	VPADDD(h, t.AsY(), h) // T in eight lanes
	u, v := YMM(), YMM()
	VPUNPCKLDQ(m, h, u) // [t0 m0 t1 m1 | t4 m4 t5 m5]
	VPUNPCKHDQ(m, h, v) // [t2 m2 t3 m3 | t6 m6 t7 m7]
	VPADDD(v, u, u)
	VPSHUFD(U8(0x4e), u, v)
	VPADDD(v, u, u) // [ta ma ta ma | tb mb tb mb]
	x := XMM()
	VEXTRACTI32X4(U8(1), u, x)
	VPADDD(x, u.AsX(), x) // [T M T M]
	return x
}

// Tokens is how many vectors q4kAVX512x's kernels take at once: each
// block's weights are widened once for all of them.
const Tokens = 4

// q4kAVX512x emits the Q4_K (Q5_K: five) kernel for Tokens vectors at
// once (RowsBatch's), with q4kAVX512's arithmetic for each: bit for bit
// what Tokens calls of that kernel give. The vectors come packed as gemv's
// pack4 lays them out, pair of blocks by pair of blocks (a pair's quants,
// vector after vector, each vector's two blocks in a row; so too their
// scales and sums; a last odd block the same way alone), so one pointer
// and fixed offsets reach every vector's part; y takes each row's Tokens
// results in a row.
func q4kAVX512x(name string, five, vnni bool) {
	const T = Tokens
	k, wp, rows, y := openQ4K512(name, five, vnni, "over four packed vectors (ref.go's contract for each)", T)
	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	sp := Load(Param("s"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb)
	k.tot.zero()
	// addTotal adds float32 lane 0 of p, as float64, to vector t's total.
	addTotal := func(t int, p VecVirtual) {
		VCVTSS2SD(p, p, p)
		k.tot.add(t, p)
	}

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	{
		prefetch(wp, 2*k.bb)
		mins := k.pairScales(wp)
		a0 := k.blocks(wp, 0, qp, vectorOffsets(T, 2*512, 0), 0)
		a1 := k.blocks(wp, k.bb, qp, vectorOffsets(T, 2*512, 512), 32)
		// [d₀ dmin₀ d₁ dmin₁], the same for every vector.
		d0, d1 := GP64(), GP64()
		MOVL(Mem{Base: wp}, d0.As32())
		MOVL(Mem{Base: wp, Disp: k.bb}, d1.As32())
		SHLQ(U8(32), d1)
		ORQ(d1, d0)
		dd := XMM()
		VMOVQ(d0, dd)
		VCVTPH2PS(dd, dd)
		for t := 0; t < T; t++ {
			mt := ZMM()
			VPMULLD(Mem{Base: sp, Disp: 64 * t}, mins, mt)
			tm := reducePairTM(a0[t], a1[t], mt)
			VCVTDQ2PS(tm, tm)
			VMULPS(dd, tm, tm)
			mm := XMM()
			VMOVSHDUP(tm, mm)
			VSUBPS(mm, tm, tm)
			dx := XMM()
			VPMOVZXDQ(Mem{Base: dp, Disp: 8 * t}, dx)
			VMULPS(dx, tm, tm)
			p := XMM()
			VMOVAPS(tm, p)
			addTotal(t, p)
			VMOVHLPS(tm, tm, tm)
			addTotal(t, tm)
		}
	}
	ADDQ(U32(2*k.bb), wp)
	packedStep(2, qp, dp, sp)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	{
		mins := k.blockScales(wp)
		a := k.blocks(wp, 0, qp, vectorOffsets(T, 512, 0), 0)
		dd := XMM()
		VMOVD(Mem{Base: wp}, dd)
		VCVTPH2PS(dd, dd) // [d dmin 0 0]
		for t := 0; t < T; t++ {
			mt := YMM()
			VPMULLD(Mem{Base: sp, Disp: 32 * t}, mins, mt)
			tm := reduceTM(a[t], mt)
			VCVTDQ2PS(tm, tm)
			VMULPS(dd, tm, tm)
			mm := XMM()
			VMOVSHDUP(tm, mm)
			VSUBSS(mm, tm, tm)
			VMULSS(Mem{Base: dp, Disp: 4 * t}, tm, tm)
			addTotal(t, tm)
		}
		ADDQ(U32(k.bb), wp)
		packedStep(1, qp, dp, sp)
		DECQ(nb)
		JMP(LabelRef(name + "_pair"))
	}

	Label(name + "_end")
	k.tot.rowEnd(name, y, rows, wp, row0)
}
