package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q6kShuf512 is the VPSHUFB control that spreads two of a Q6_K block's
// sixteen int16 scales over a zmm of weights (16 words of one group, 16 of
// the next): entry m (64 bytes) picks words 2m and 2m+1 of a 128-bit lane.
var q6kShuf512 Mem

func q6kShufTable() Mem {
	if q6kShuf512.Symbol.Name != "" {
		return q6kShuf512
	}
	q6kShuf512 = GLOBL("q6kShuf512", RODATA|NOPTR)
	for m := 0; m < 4; m++ {
		for i := 0; i < 64; i += 2 {
			w := 2 * m
			if i >= 32 {
				w++
			}
			DATA(64*m+i, U8(2*w))
			DATA(64*m+i+1, U8(2*w+1))
		}
	}
	return q6kShuf512
}

// q6kAVX512 emits the Q6_K kernel for AVX-512 F/BW/VL (with vnni, VNNI's
// VPDPWSSD in place of VPMADDWD and VPADDD). A block is two halves of 128
// elements; each half widens 32 bytes of ql twice to int16 and builds four
// zmm of weights w = q6 − 32:
//
//   - the low four bits are a nibble of ql (low nibbles for elements 0-63
//     of the half, high nibbles, shifted down, for 64-127);
//   - the two high bits are field f (bits 2f, 2f+1) of qh's 32 bytes: a
//     VPSHUFB looks each byte's nibble holding it up in a table of
//     16·(field − 2) as int8 (so the −32 costs nothing), and VPMOVSXBW
//     widens that with its sign, 16·(high − 2) in bits 4-15;
//   - one VPTERNLOGD takes bits 0-3 from the nibble and 4-15 from that.
//
// The lookup and the widening are shuffles, where a shift pair would
// compete with the multiplies for Intel's one 512-bit multiply port. Each
// zmm is multiplied (VPMULLW, |w·sc| ≤ 4096) by its two groups' scales,
// spread by a VPSHUFB from the block's sixteen sign-extended scales, and
// multiply-added with the vector's quants. The sum is within int32 (x.go's
// Range). Two blocks share one horizontal reduction, to [T₀ T₁], and one
// float tail whose lanes compute ref.go's scalar products (no FMA), added
// to the row's float64 sum in block order; an odd last block goes alone.
func q6kAVX512(name string, vnni bool) {
	k, wp, rows, y := openQ6K512(name, vnni, "(ref.go's contract)", 0)
	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb) // blocks a row
	total := XMM()
	VPXORQ(total, total, total)

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	{
		prefetch(wp, 2*210)
		a0 := k.block(wp, 0, qp, 0, 0)
		a1 := k.block(wp, 210, qp, 512, 32)
		t := reducePairT(a0, a1)
		VCVTDQ2PS(t, t)
		dd := q6kPairScales(wp)
		VMULPS(dd, t, t)
		dx := XMM()
		VMOVQ(Mem{Base: dp}, dx)
		VMULPS(dx, t, t) // [P₀ P₁]
		VCVTPS2PD(t, t)
		VADDSD(t, total, total)
		VPERMILPD(U8(1), t, t)
		VADDSD(t, total, total)
	}
	ADDQ(U32(2*210), wp)
	ADDQ(U32(2*2*256), qp)
	ADDQ(U8(8), dp)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	{
		a := k.block(wp, 0, qp, 0, 0)
		t := reduceT(a)
		VCVTDQ2PS(t, t)
		dd := XMM()
		VPBROADCASTW(Mem{Base: wp, Disp: 208}, dd)
		VCVTPH2PS(dd, dd)
		VMULSS(dd, t, t)
		VMULSS(Mem{Base: dp}, t, t)
		VCVTSS2SD(t, t, t)
		VADDSD(t, total, total)
		ADDQ(U32(210), wp)
		ADDQ(U32(2*256), qp)
		ADDQ(U8(4), dp)
		DECQ(nb)
		JMP(LabelRef(name + "_pair"))
	}

	Label(name + "_end")
	rowEnd(name, total, nil, y, rows, wp, row0)
}

// openQ6K512 opens a Q6_K kernel for AVX-512 as openQ4K512 opens Q4_K's.
func openQ6K512(name string, vnni bool, contract string, vectors int) (k q6k512, wp, rows, y Register) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	fam := "AVX-512"
	if vnni {
		fam = "AVX-512 with VNNI"
	}
	Doc(name + " is the Q6_K kernel for " + fam + " " + contract + ".")
	k = q6k512{vnni: vnni, shuf: q6kShufTable()}
	wp = Load(Param("w"), GP64())
	rows = Load(Param("rows"), GP64())
	y = Load(Param("y"), GP64())

	k.sw = AllocLocal(64) // two blocks' scales as int16
	if vectors > 0 {
		k.tot = newRowTotals(vectors)
	}
	k.low4 = wordConst(0x000f)
	lt := q6kHighTable()
	k.tab01, k.tab23 = YMM(), YMM()
	VMOVDQU32(lt, k.tab01)
	VMOVDQU32(lt.Offset(32), k.tab23)
	tmp := GP32()
	MOVL(U32(0x0f0f0f0f), tmp)
	k.nibB = YMM()
	VPBROADCASTD(tmp, k.nibB)
	return k, wp, rows, y
}

// q6k512 holds what q6kAVX512's block emitter shares across blocks.
type q6k512 struct {
	vnni  bool
	tab01 VecVirtual // ymm: 16·(bits 0-1 − 2) of a nibble, per byte
	tab23 VecVirtual // ymm: 16·(bits 2-3 − 2)
	nibB  VecVirtual // ymm: 0x0f in every byte
	low4  VecVirtual // 0x000f in every word
	shuf  Mem        // q6kShuf512
	sw    Mem        // the staged scales
	tot   rowTotals  // a multi-vector kernel's
}

// block emits the integer dot product of the block at wp+wo with the
// quants at qp+qo, staging its scales at k.sw+so, and returns its
// sixteen int32 lanes, which sum to T.
func (k *q6k512) block(wp Register, wo int, qp Register, qo, so int) VecVirtual {
	return k.blocks(wp, wo, qp, []int{qo}, so)[0]
}

// blocks is block for several vectors at once, their quants at qp+qos[i]:
// the weights are built and scaled once, then multiplied into each
// vector's accumulators. It returns each vector's sixteen lanes.
func (k *q6k512) blocks(wp Register, wo int, qp Register, qos []int, so int) []VecVirtual {
	scw := YMM()
	VPMOVSXBW(Mem{Base: wp, Disp: wo + 192}, scw)
	VMOVDQU32(scw, k.sw.Offset(so))

	// With several vectors each accumulator starts at its first
	// product (VPMADDWD gives what VPDPWSSD into zero would), so none is
	// live before it is needed: zeroed up front, they would not fit.
	zeroed := k.vnni && len(qos) == 1
	accs := make([][2]VecVirtual, len(qos))
	for i := range accs {
		accs[i] = [2]VecVirtual{ZMM(), ZMM()}
		if zeroed {
			VPXORD(accs[i][0], accs[i][0], accs[i][0])
			VPXORD(accs[i][1], accs[i][1], accs[i][1])
		}
	}
	for h := 0; h < 2; h++ {
		a, b := ZMM(), ZMM()
		VPMOVZXBW(Mem{Base: wp, Disp: wo + 64*h}, a)
		VPMOVZXBW(Mem{Base: wp, Disp: wo + 64*h + 32}, b)
		// The nibbles of qh's bytes: fields 0 and 1 in the low ones,
		// 2 and 3 in the high ones.
		qhm := Mem{Base: wp, Disp: wo + 128 + 32*h}
		idxLo, idxHi := YMM(), YMM()
		VPANDD(qhm, k.nibB, idxLo)
		highs := func() {
			VPSRLW(U8(4), qhm, idxHi)
			VPANDD(k.nibB, idxHi, idxHi)
		}
		nibs := []VecVirtual{a, b, a, b} // several vectors: the high nibbles in place, when due
		if len(qos) == 1 {
			highs()
			a4, b4 := ZMM(), ZMM()
			VPSRLW(U8(4), a, a4)
			VPSRLW(U8(4), b, b4)
			nibs = []VecVirtual{a, b, a4, b4}
		}
		lanes := ZMM() // scales 8h..8h+7 in every 128-bit lane
		VBROADCASTI32X4(k.sw.Offset(so+16*h), lanes)
		for m, nib := range nibs {
			if len(qos) > 1 && m >= 2 {
				if m == 2 {
					highs()
				}
				VPSRLW(U8(4), nib, nib)
			}
			idx, tab := idxLo, k.tab01
			if m >= 2 {
				idx = idxHi
			}
			if m&1 == 1 {
				tab = k.tab23
			}
			tb, w := YMM(), ZMM()
			VPSHUFB(idx, tab, tb)
			VPMOVSXBW(tb, w)
			VPTERNLOGD(U8(0xd8), k.low4, nib, w) // nib&0xf | w&^0xf
			s := ZMM()
			VPSHUFB(k.shuf.Offset(64*m), lanes, s)
			VPMULLW(s, w, w)
			i := m & 1
			for v, qo := range qos {
				acc := &accs[v]
				madd(k.vnni, h == 0 && m < 2, zeroed, len(qos) == 1, Mem{Base: qp, Disp: qo + 2*(128*h+32*m)}, w, acc[i])
			}
		}
	}
	out := make([]VecVirtual, len(qos))
	for v := range accs {
		VPADDD(accs[v][1], accs[v][0], accs[v][0])
		out[v] = accs[v][0]
	}
	return out
}

// q6kAVX512x emits the Q6_K kernel for Tokens packed vectors at once, as
// q4kAVX512x does Q4_K's: q6kAVX512's arithmetic for each vector, the
// weights built once a block for all of them.
func q6kAVX512x(name string, vnni bool) {
	const T = Tokens
	k, wp, rows, y := openQ6K512(name, vnni, "over four packed vectors (ref.go's contract for each)", T)
	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb)
	k.tot.zero()

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	{
		prefetch(wp, 2*210)
		a0 := k.blocks(wp, 0, qp, vectorOffsets(T, 2*512, 0), 0)
		a1 := k.blocks(wp, 210, qp, vectorOffsets(T, 2*512, 512), 32)
		dd := q6kPairScales(wp)
		for t := 0; t < T; t++ {
			x := reducePairT(a0[t], a1[t])
			VCVTDQ2PS(x, x)
			VMULPS(dd, x, x)
			dx := XMM()
			VMOVQ(Mem{Base: dp, Disp: 8 * t}, dx)
			VMULPS(dx, x, x) // [P₀ P₁]
			VCVTPS2PD(x, x)
			p := XMM()
			VMOVAPD(x, p)
			k.tot.add(t, p)
			VPERMILPD(U8(1), x, x)
			k.tot.add(t, x)
		}
	}
	ADDQ(U32(2*210), wp)
	packedStep(2, qp, dp, nil)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	{
		a := k.blocks(wp, 0, qp, vectorOffsets(T, 512, 0), 0)
		dd := XMM()
		VPBROADCASTW(Mem{Base: wp, Disp: 208}, dd)
		VCVTPH2PS(dd, dd)
		for t := 0; t < T; t++ {
			x := reduceT(a[t])
			VCVTDQ2PS(x, x)
			VMULSS(dd, x, x)
			VMULSS(Mem{Base: dp, Disp: 4 * t}, x, x)
			VCVTSS2SD(x, x, x)
			k.tot.add(t, x)
		}
		ADDQ(U32(210), wp)
		packedStep(1, qp, dp, nil)
		DECQ(nb)
		JMP(LabelRef(name + "_pair"))
	}

	Label(name + "_end")
	k.tot.rowEnd(name, y, rows, wp, row0)
}

// reducePairT sums two blocks' sixteen int32 lanes (zmm a0, a1) into
// lanes 0 and 1 of an xmm.
func reducePairT(a0, a1 VecVirtual) VecVirtual {
	p, q := ZMM(), ZMM()
	VSHUFI64X2(U8(0x44), a1, a0, p)
	VSHUFI64X2(U8(0xee), a1, a0, q)
	VPADDD(q, p, p) // [T₀ in 8 lanes | T₁ in 8 lanes]
	VSHUFI64X2(U8(0xb1), p, p, q)
	VPADDD(q, p, p) // 128-bit lane 0: T₀ in 4 lanes, lane 2: T₁
	VPSHUFD(U8(0x4e), p, q)
	VPADDD(q, p, p)
	VPSHUFD(U8(0xb1), p, q)
	VPADDD(q, p, p)
	x := XMM()
	VEXTRACTI32X4(U8(2), p, x)
	VPUNPCKLDQ(x, p.AsX(), x) // [T₀ T₁ T₀ T₁]
	return x
}

// reduceT sums the sixteen int32 lanes of t (a zmm) into every lane of an
// xmm, with EVEX-encodable instructions only.
func reduceT(t VecVirtual) VecVirtual {
	h := YMM()
	VEXTRACTI64X4(U8(1), t, h)
	VPADDD(h, t.AsY(), h)
	x, u := XMM(), XMM()
	VEXTRACTI32X4(U8(1), h, x)
	VPADDD(x, h.AsX(), x)
	VPSHUFD(U8(0x4e), x, u)
	VPADDD(u, x, x)
	VPSHUFD(U8(0xb1), x, u)
	VPADDD(u, x, x)
	return x
}

var q6kHigh Mem

// q6kHighTable returns the two 32-byte VPSHUFB tables (emitted once) that
// map a nibble of qh to 16·(field − 2) as int8, for the field in its bits
// 0-1 and in its bits 2-3; each repeats its sixteen bytes in both 128-bit
// lanes.
func q6kHighTable() Mem {
	if q6kHigh.Symbol.Name != "" {
		return q6kHigh
	}
	q6kHigh = GLOBL("q6kHigh512", RODATA|NOPTR)
	for t := 0; t < 2; t++ {
		for i := 0; i < 32; i++ {
			f := (i % 16 >> (2 * t)) & 3
			DATA(32*t+i, U8(uint8(int8(16*(f-2)))))
		}
	}
	return q6kHigh
}

// q6kPairScales loads the fp16 scales d of the two Q6_K blocks at wp and
// wp+210 as [d₀ d₁] in float32 lanes 0 and 1 of an xmm.
func q6kPairScales(wp Register) VecVirtual {
	d0, d1 := GP32(), GP32()
	MOVWLZX(Mem{Base: wp, Disp: 208}, d0)
	MOVWLZX(Mem{Base: wp, Disp: 210 + 208}, d1)
	SHLL(U8(16), d1)
	ORL(d1, d0)
	dd := XMM()
	VMOVD(d0, dd)
	VCVTPH2PS(dd, dd)
	return dd
}
