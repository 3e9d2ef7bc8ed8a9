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

	low4 := splat8(0x0f)
	// The top two bits of q6 less 32 by table lookup (VPSHUFB), from a
	// nibble of qh that holds two of them: lut[0] maps the nibble's low
	// pair, lut[1] its high pair, each to 16·pair − 32.
	lut := [2]VecVirtual{YMM(), YMM()}
	t64 := GP64()
	MOVL(U32(0x1000f0e0), t64.As32())
	VMOVD(t64.As32(), lut[0].AsX())
	VPBROADCASTD(lut[0].AsX(), lut[0])
	MOVQ(U64(0xf0f0f0f0e0e0e0e0), t64)
	VMOVQ(t64, lut[1].AsX())
	MOVQ(U64(0x1010101000000000), t64)
	VPINSRQ(U8(1), t64, lut[1].AsX(), lut[1].AsX())
	VINSERTI128(U8(1), lut[1].AsX(), lut[1], lut[1])

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := GP64()
	MOVQ(n, nb)
	total := XMM()
	VXORPD(total, total, total)

	Label(name + "_block")
	prefetch(wp, 210)
	sc := YMM()
	VPMOVSXBW(Mem{Base: wp, Disp: 192}, sc)
	VMOVDQU(sc, scw)
	acc := [2]VecVirtual{YMM(), YMM()}
	VPXOR(acc[0], acc[0], acc[0])
	VPXOR(acc[1], acc[1], acc[1])
	for h := 0; h < 2; h++ {
		// The nibbles of qh: pairs 0, 1 and pairs 2, 3.
		// (Shifts take registers: their memory forms are AVX-512 only.)
		hn := [2]VecVirtual{YMM(), YMM()}
		VMOVDQU(Mem{Base: wp, Disp: 128 + 32*h}, hn[1])
		VPAND(low4, hn[1], hn[0])
		VPSRLW(U8(4), hn[1], hn[1])
		VPAND(low4, hn[1], hn[1])
		ql := [2]VecVirtual{YMM(), YMM()}
		VMOVDQU(Mem{Base: wp, Disp: 64 * h}, ql[0])
		VMOVDQU(Mem{Base: wp, Disp: 64*h + 32}, ql[1])
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
				v := YMM()
				if half == 0 {
					VPMOVSXBW(w.AsX(), v)
				} else {
					VEXTRACTI128(U8(1), w, v.AsX())
					VPMOVSXBW(v.AsX(), v)
				}
				g := 8*h + 2*j + half
				VPBROADCASTW(scw.Offset(2*g), t)
				VPMULLW(t, v, v)
				VPMADDWD(Mem{Base: qp, Disp: 2 * (128*h + 32*j + 16*half)}, v, v)
				VPADDD(v, acc[half], acc[half])
			}
		}
	}
	VPADDD(acc[1], acc[0], acc[0])
	tx := hsumD(acc[0])
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
	JNE(LabelRef(name + "_block"))

	rowEnd(name, total, nil, y, rows, wp, row0)
}
