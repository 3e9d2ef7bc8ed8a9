package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q6kAVX2 emits the Q6_K kernel for AVX2. A Q6_K block (210 bytes, only
// 2-byte aligned, so every load is unaligned) holds ql[128] at 0, qh[64]
// at 128, sixteen int8 scales at 192 and d (fp16) at 208. Element
// 128h+32j+l (l < 32) takes its low four bits from ql[64h+l] (j = 0, 2:
// low and high nibble) or ql[64h+32+l] (j = 1, 3) and its top two from
// bits 2j, 2j+1 of qh[32h+l]. The 32 elements of one (h, j) are built
// together as bytes, w = q6 − 32 (the top bits and the −32 come from one
// table lookup), then widened to two int16 vectors, one 16-element group
// each: scaled by the group's scale (|w·sc| ≤ 4096, still int16) and
// multiply-added with the vector's quants into eight int32 lanes, whose
// total is T exactly (x.go's bound). The float tail is ref.go's, one
// scalar operation at a time.
func q6kAVX2(name string) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the Q6_K kernel for AVX2 (ref.go's contract).")
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	SHRQ(U8(8), n) // blocks a row

	scw := AllocLocal(32) // the block's sixteen scales as int16
	low4, lut := q6kAVX2Consts()

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := GP64()
	MOVQ(n, nb)
	total := XMM()
	VXORPD(total, total, total)

	// body emits a block's integer work at wp+wo (its x quants at
	// qp+qo) and returns eight int32 lanes that sum to T.
	body := func(wo, qo int) VecVirtual {
		prefetchAt(wp, wo, 210)
		sc := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: wo + 192}, sc)
		VMOVDQU(sc, scw)
		acc := [2]VecVirtual{YMM(), YMM()}
		VPXOR(acc[0], acc[0], acc[0])
		VPXOR(acc[1], acc[1], acc[1])
		for h := 0; h < 2; h++ {
			hn := q6kAVX2Highs(wp, wo, h, low4)
			ql := [2]VecVirtual{YMM(), YMM()}
			VMOVDQU(Mem{Base: wp, Disp: wo + 64*h}, ql[0])
			VMOVDQU(Mem{Base: wp, Disp: wo + 64*h + 32}, ql[1])
			for j := 0; j < 4; j++ {
				// The 32 elements 128h+32j+l as int8 w = q6 − 32.
				w, t := YMM(), YMM()
				if j < 2 {
					VPAND(ql[j], low4, w)
				} else {
					VPSRLW(U8(4), ql[j-2], w)
					VPAND(low4, w, w)
				}
				VPSHUFB(hn[j/2], lut[j%2], t)
				VPADDB(t, w, w)
				for half := 0; half < 2; half++ {
					v := q6kAVX2Scaled(w, t, half, scw.Offset(2*(8*h+2*j+half)))
					VPMADDWD(Mem{Base: qp, Disp: qo + 2*(128*h+32*j+16*half)}, v, v)
					VPADDD(v, acc[half], acc[half])
				}
			}
		}
		VPADDD(acc[1], acc[0], acc[0])
		return acc[0]
	}

	// Eight blocks at a time, their sums and float steps side by side
	// (q4kAVX2's reason): the eight blocks' lanes reduced together to
	// their T's in block order (a transpose by horizontal adds; integer
	// sums, exact in any order), then d·T times the x's block scale lane
	// by lane in float32, added to the row's float64 total in block
	// order.
	Label(name + "_oct")
	CMPQ(nb, Imm(8))
	JB(LabelRef(name + "_block"))
	var four [2]VecVirtual
	for h := 0; h < 2; h++ {
		var pair [2]VecVirtual
		for p := 0; p < 2; p++ {
			b := 4*h + 2*p
			v0 := body(b*210, b*512)
			v1 := body((b+1)*210, (b+1)*512)
			VPHADDD(v1, v0, v0) // per half [b01 b23 (b+1)01 (b+1)23]
			pair[p] = v0
		}
		VPHADDD(pair[1], pair[0], pair[0]) // per half the four blocks' partial T's
		four[h] = pair[0]
	}
	p8 := YMM()
	VPERM2I128(U8(0x20), four[1], four[0], p8) // blocks 0-7's low halves' T's
	VPERM2I128(U8(0x31), four[1], four[0], four[0])
	VPADDD(four[0], p8, p8) // T of the eight, in order
	VCVTDQ2PS(p8, p8)
	dh := XMM()
	VPXOR(dh, dh, dh)
	for b := 0; b < 8; b++ {
		VPINSRW(U8(b), Mem{Base: wp, Disp: 210*b + 208}, dh, dh)
	}
	d8 := YMM()
	VCVTPH2PS(dh, d8)
	VMULPS(d8, p8, p8)
	VMULPS(Mem{Base: dp}, p8, p8)
	addBlocks8(p8, total)
	ADDQ(U32(8*210), wp)
	ADDQ(U32(8*2*256), qp)
	ADDQ(U8(32), dp)
	SUBQ(Imm(8), nb)
	JMP(LabelRef(name + "_oct"))

	// The blocks past the last eight, one at a time.
	Label(name + "_block")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	tx := hsumD(body(0, 0))
	p := XMM()
	VCVTDQ2PS(tx, p)
	dw, dx := GP32(), XMM()
	MOVWLZX(Mem{Base: wp, Disp: 208}, dw)
	VMOVD(dw, dx)
	VCVTPH2PS(dx, dx)
	VMULSS(dx, p, p)
	VMULSS(Mem{Base: dp}, p, p)
	addBlock(p, total)

	ADDQ(U32(210), wp)
	ADDQ(U32(2*256), qp)
	ADDQ(U8(4), dp)
	DECQ(nb)
	JMP(LabelRef(name + "_block"))

	Label(name + "_end")
	rowEnd(name, total, nil, y, rows, wp, row0)
}

// q6kAVX2Highs returns the nibbles of half h of the qh of the block at
// wp+wo: pairs 0, 1 and pairs 2, 3. (Shifts take registers: their memory
// forms are AVX-512 only.)
func q6kAVX2Highs(wp Register, wo, h int, low4 VecVirtual) [2]VecVirtual {
	hn := [2]VecVirtual{YMM(), YMM()}
	VMOVDQU(Mem{Base: wp, Disp: wo + 128 + 32*h}, hn[1])
	VPAND(low4, hn[1], hn[0])
	VPSRLW(U8(4), hn[1], hn[1])
	VPAND(low4, hn[1], hn[1])
	return hn
}

// q6kAVX2Consts emits q6kAVX2's constants: 0x0f in every byte, and the
// two VPSHUFB tables that give the top two bits of q6 less 32 from a
// nibble of qh holding two of them (lut[0] the nibble's low pair, lut[1]
// its high pair, each to 16·pair − 32).
func q6kAVX2Consts() (low4 VecVirtual, lut [2]VecVirtual) {
	low4 = splat8(0x0f)
	lut = [2]VecVirtual{YMM(), YMM()}
	t64 := GP64()
	MOVL(U32(0x1000f0e0), t64.As32())
	VMOVD(t64.As32(), lut[0].AsX())
	VPBROADCASTD(lut[0].AsX(), lut[0])
	MOVQ(U64(0xf0f0f0f0e0e0e0e0), t64)
	VMOVQ(t64, lut[1].AsX())
	MOVQ(U64(0x1010101000000000), t64)
	VPINSRQ(U8(1), t64, lut[1].AsX(), lut[1].AsX())
	VINSERTI128(U8(1), lut[1].AsX(), lut[1], lut[1])
	return low4, lut
}

// q6kAVX2x emits the Q6_K kernel for AVX2 over Tokens packed vectors, as
// q4kAVX2x does Q4_K's: q6kAVX2's arithmetic for each vector (one int32
// accumulator a vector: the lanes' exact sums do not depend on the
// order), the weights built once a block.
func q6kAVX2x(name string) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the Q6_K kernel for AVX2 over four packed vectors (ref.go's contract for each).")
	const T = Tokens
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	y := Load(Param("y"), GP64())
	scw := AllocLocal(32)
	tot := newRowTotals(T)
	low4, lut := q6kAVX2Consts()

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := Load(Param("n"), GP64())
	SHRQ(U8(8), nb)
	tot.zero()

	block := func(wo int, qo, do func(t int) int) {
		sc := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: wo + 192}, sc)
		VMOVDQU(sc, scw)
		acc := make([]VecVirtual, T)
		for t := range acc {
			acc[t] = YMM()
			VPXOR(acc[t], acc[t], acc[t])
		}
		for h := 0; h < 2; h++ {
			hn := q6kAVX2Highs(wp, wo, h, low4)
			for j := 0; j < 4; j++ {
				w, t := YMM(), YMM()
				VMOVDQU(Mem{Base: wp, Disp: wo + 64*h + 32*(j%2)}, w)
				if j >= 2 {
					VPSRLW(U8(4), w, w)
				}
				VPAND(low4, w, w)
				VPSHUFB(hn[j/2], lut[j%2], t)
				VPADDB(t, w, w)
				for half := 0; half < 2; half++ {
					v := q6kAVX2Scaled(w, t, half, scw.Offset(2*(8*h+2*j+half)))
					for k := 0; k < T; k++ {
						p := YMM()
						VPMADDWD(Mem{Base: qp, Disp: qo(k) + 2*(128*h+32*j+16*half)}, v, p)
						VPADDD(p, acc[k], acc[k])
					}
				}
			}
		}
		dw, dx := GP32(), XMM()
		MOVWLZX(Mem{Base: wp, Disp: wo + 208}, dw)
		VMOVD(dw, dx)
		VCVTPH2PS(dx, dx)
		for k := 0; k < T; k++ {
			tx := hsumD(acc[k])
			p := XMM()
			VCVTDQ2PS(tx, p)
			VMULSS(dx, p, p)
			VMULSS(Mem{Base: dp, Disp: do(k)}, p, p)
			VCVTSS2SD(p, p, p)
			tot.add(k, p)
		}
	}

	Label(name + "_pair")
	CMPQ(nb, Imm(2))
	JB(LabelRef(name + "_single"))
	prefetch(wp, 2*210)
	for b := 0; b < 2; b++ {
		block(b*210, func(t int) int { return t*2*512 + b*512 }, func(t int) int { return t*8 + b*4 })
	}
	ADDQ(U32(2*210), wp)
	packedStep(2, qp, dp, nil)
	SUBQ(Imm(2), nb)
	JMP(LabelRef(name + "_pair"))

	Label(name + "_single")
	CMPQ(nb, Imm(0))
	JE(LabelRef(name + "_end"))
	block(0, func(t int) int { return t * 512 }, func(t int) int { return t * 4 })

	Label(name + "_end")
	tot.rowEnd(name, y, rows, wp, row0)
}

// q6kAVX2Scaled widens half (0: the low 16, 1: the high 16) of w's int8
// weights to int16 and multiplies them by the group's int16 scale at sc,
// broadcast into t.
func q6kAVX2Scaled(w, t VecVirtual, half int, sc Mem) VecVirtual {
	v := YMM()
	if half == 0 {
		VPMOVSXBW(w.AsX(), v)
	} else {
		VEXTRACTI128(U8(1), w, v.AsX())
		VPMOVSXBW(v.AsX(), v)
	}
	VPBROADCASTW(sc, t)
	VPMULLW(t, v, v)
	return v
}
