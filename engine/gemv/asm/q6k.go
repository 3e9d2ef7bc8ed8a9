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
// bits 2j, 2j+1 of qh[32h+l]. Sixteen consecutive elements share a scale,
// so each int16 vector of sixteen quants is one group: w = q6 − 32 is
// scaled by its group's scale (|w·sc| ≤ 4096, still int16) and
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

	low4 := splat16(0x000f)
	top2 := splat16(0x0030)
	bias := splat16(32)

	Label(name + "_row")
	CMPQ(rows, Imm(0))
	JE(LabelRef(name + "_done"))
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	nb := GP64()
	MOVQ(n, nb)
	total := XMM()
	VXORPD(total, total, total)

	Label(name + "_block")
	sc := YMM()
	VPMOVSXBW(Mem{Base: wp, Disp: 192}, sc)
	VMOVDQU(sc, scw)
	acc := [2]VecVirtual{YMM(), YMM()}
	VPXOR(acc[0], acc[0], acc[0])
	VPXOR(acc[1], acc[1], acc[1])
	for h := 0; h < 2; h++ {
		for half := 0; half < 2; half++ {
			a, b, hb := YMM(), YMM(), YMM()
			VPMOVZXBW(Mem{Base: wp, Disp: 64*h + 16*half}, a)      // j = 0, 2
			VPMOVZXBW(Mem{Base: wp, Disp: 64*h + 32 + 16*half}, b) // j = 1, 3
			VPMOVZXBW(Mem{Base: wp, Disp: 128 + 32*h + 16*half}, hb)
			for j := 0; j < 4; j++ {
				w, t := YMM(), YMM()
				src := a
				if j%2 == 1 {
					src = b
				}
				if j < 2 {
					VPAND(low4, src, w)
				} else {
					VPSRLW(U8(4), src, w)
				}
				// Bits 2j, 2j+1 of qh to bits 4, 5.
				switch {
				case 2*j < 4:
					VPSLLW(U8(4-2*j), hb, t)
					VPAND(top2, t, t)
				case 2*j == 4:
					VPAND(top2, hb, t)
				default:
					VPSRLW(U8(2*j-4), hb, t)
					VPAND(top2, t, t)
				}
				VPOR(t, w, w)
				VPSUBW(bias, w, w)
				g := 8*h + 2*j + half
				VPBROADCASTW(scw.Offset(2*g), t)
				VPMULLW(t, w, w)
				VPMADDWD(Mem{Base: qp, Disp: 2 * (128*h + 32*j + 16*half)}, w, w)
				VPADDD(w, acc[j%2], acc[j%2])
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

	VCVTSD2SS(total, total, total)
	VMOVSS(total, Mem{Base: y})
	ADDQ(U8(4), y)
	DECQ(rows)
	JMP(LabelRef(name + "_row"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}
