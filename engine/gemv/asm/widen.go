package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The widening kernels decode quantized rows into bfloat16 for the tile
// path (gemv's tiles.go): each weight as the reference decodes it in
// float32 (quant's dequant.go), rounded to nearest bfloat16, ties to
// even, by AVX512_BF16's VCVTNE2PS2BF16. That instruction is not in
// avo's tables: it is written out as bytes, so these kernels use
// physical vector registers only (the allocator cannot see what the bytes
// write). Signature: nb blocks of each of rows rows, stride bytes apart,
// into rows of out ld bytes apart.
const widenSignature = "func(w *byte, stride, rows, nb int, out *uint16, ld int)"

// zmmNum is a ZMM register's number.
func zmmNum(z Register) int {
	zs := []Register{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
	for i, r := range zs {
		if r == z {
			return i
		}
	}
	panic("widen: not a ZMM register")
}

// vcvtne2ps2bf16 emits VCVTNE2PS2BF16 dst, hi, lo (EVEX.512.F2.0F38.W0 72
// /r): dst's 32 words are lo's 16 floats rounded to bfloat16, then hi's.
func vcvtne2ps2bf16(dst, hi, lo Register) {
	d, v, r := zmmNum(dst), zmmNum(hi), zmmNum(lo)
	p0 := byte(0b0000_0010) // map 0F38
	if d&8 == 0 {
		p0 |= 0x80 // R̄
	}
	if r&16 == 0 {
		p0 |= 0x40 // X̄: the r/m register's fifth bit
	}
	if r&8 == 0 {
		p0 |= 0x20 // B̄
	}
	if d&16 == 0 {
		p0 |= 0x10 // R̄'
	}
	p1 := byte(^v&0xF)<<3 | 0b100 | ppF2 // W0, vvvv inverted, 1, pp
	p2 := byte(0b0100_0000)              // z0, L'L = 512 bits, b0
	if v&16 == 0 {
		p2 |= 0x08 // V̄'
	}
	emitBytes(0x62, p0, p1, p2, 0x72, 0xC0|byte(d&7)<<3|byte(r&7))
}

// openWiden opens a widening kernel: the parameters, and the row loop
// (label name_row) that ends at name_done. The block loop runs nb blocks
// from wp, writing from op.
func openWiden(name, format string) (wp, op, nb, rows, stride, ld, w0, o0 Register) {
	TEXT(name, NOSPLIT, widenSignature)
	Pragma("noescape")
	Doc(name + " widens " + format + " rows to bfloat16 for the tile path (see the generator, asm/widen.go).")
	w0 = Load(Param("w"), GP64())
	stride = Load(Param("stride"), GP64())
	rows = Load(Param("rows"), GP64())
	o0 = Load(Param("out"), GP64())
	ld = Load(Param("ld"), GP64())
	wp, op, nb = GP64(), GP64(), GP64()
	Label(name + "_row")
	CMPQ(rows, Imm(0))
	JE(LabelRef(name + "_done"))
	MOVQ(w0, wp)
	MOVQ(o0, op)
	Load(Param("nb"), nb)
	return
}

// closeWiden ends the block loop (advancing wp and op by a block), then
// the row.
func closeWiden(name string, wp, op, nb, rows, stride, ld, w0, o0 Register, blockBytes, outBytes int) {
	ADDQ(U32(blockBytes), wp)
	ADDQ(U32(outBytes), op)
	DECQ(nb)
	JNE(LabelRef(name + "_block"))
	ADDQ(stride, w0)
	ADDQ(ld, o0)
	DECQ(rows)
	JMP(LabelRef(name + "_row"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// q4kWiden emits the Q4_K kernel: y = (d·sc)·q − (dmin·m) a sub-block.
// A nibble has sixteen values, so each pair of sub-blocks' sixteen
// possible results are computed once, rounded into one zmm of 32
// bfloat16 (the first sub-block's table, then the second's), and the
// nibbles, widened to words, index it (VPERMW): the high nibbles' indices
// have 16 added to reach the second table. Each block's scale and min
// products are computed once into stack slots.
func q4kWiden(name string) {
	wp, op, nb, rows, stride, ld, w0, o0 := openWiden(name, "Q4_K")
	scf, mf := AllocLocal(32), AllocLocal(32)
	c := GP32()
	MOVL(U32(0x000f000f), c)
	VPBROADCASTD(c, Z31) // the low nibble of each word
	MOVL(U32(0x00100010), c)
	VPBROADCASTD(c, Z25) // 16 in each word: the second table
	// 0, 1, ..., 15 as floats: every value a nibble takes.
	MOVL(U32(0x03020100), c)
	VMOVD(c, X30)
	MOVL(U32(0x07060504), c)
	VPINSRD(U8(1), c, X30, X30)
	MOVL(U32(0x0b0a0908), c)
	VPINSRD(U8(2), c, X30, X30)
	MOVL(U32(0x0f0e0d0c), c)
	VPINSRD(U8(3), c, X30, X30)
	VPMOVZXBD(X30, Z30)
	VCVTDQ2PS(Z30, Z30)
	Label(name + "_block")
	{
		dd := GP32()
		MOVL(Mem{Base: wp}, dd)
		VMOVD(dd, X29)
		VCVTPH2PS(X29, X29) // d, dmin
		VBROADCASTSS(X29, Y28)
		VMOVSHDUP(X29, X29)
		VBROADCASTSS(X29, Y29)
		sc03, sc47, m03, m47 := kScalesGP(wp, 0)
		sc, m := pack64(sc03, sc47), pack64(m03, m47)
		VMOVQ(sc, X27)
		VPMOVZXBD(X27, Y27)
		VCVTDQ2PS(Y27, Y27)
		VMULPS(Y28, Y27, Y27)
		VMOVUPS(Y27, scf)
		VMOVQ(m, X26)
		VPMOVZXBD(X26, Y26)
		VCVTDQ2PS(Y26, Y26)
		VMULPS(Y29, Y26, Y26)
		VMOVUPS(Y26, mf)
		for j := range 4 {
			// The pair's tables: y for every nibble value.
			VBROADCASTSS(scf.Offset(8*j), Z3)
			VBROADCASTSS(scf.Offset(8*j+4), Z4)
			VMOVAPS(Z30, Z5)
			VMOVAPS(Z30, Z6)
			VFMSUB213PS_BCST(mf.Offset(8*j), Z3, Z5)
			VFMSUB213PS_BCST(mf.Offset(8*j+4), Z4, Z6)
			vcvtne2ps2bf16(Z7, Z6, Z5)
			// The nibbles as indices: element l of the first sub-block
			// is byte l's low nibble, of the second its high one.
			VPMOVZXBW(Mem{Base: wp, Disp: 16 + 32*j}, Z0)
			VPANDD(Z31, Z0, Z1)
			VPSRLW(U8(4), Z0, Z2)
			VPORD(Z25, Z2, Z2)
			VPERMW(Z7, Z1, Z1)
			VPERMW(Z7, Z2, Z2)
			VMOVDQU32(Z1, Mem{Base: op, Disp: 128 * j})
			VMOVDQU32(Z2, Mem{Base: op, Disp: 128*j + 64})
		}
	}
	closeWiden(name, wp, op, nb, rows, stride, ld, w0, o0, 144, 512)
}

// q6kWiden emits the Q6_K kernel: y = (d·sc)·q − 32·(d·sc), q the six bits
// of ql's nibble and qh's pair (ref.go's element order), the sixteen scale
// products and their biases computed once a block into stack slots.
func q6kWiden(name string) {
	wp, op, nb, rows, stride, ld, w0, o0 := openWiden(name, "Q6_K")
	scf, bias := AllocLocal(64), AllocLocal(64)
	c := GP32()
	MOVL(U32(0x0f), c)
	VPBROADCASTD(c, Z31)
	MOVL(U32(0x03), c)
	VPBROADCASTD(c, Z30)
	MOVL(U32(0xc2000000), c) // -32.0
	VPBROADCASTD(c, Z29)
	Label(name + "_block")
	{
		dd := GP32()
		MOVWLZX(Mem{Base: wp, Disp: 208}, dd)
		VMOVD(dd, X28)
		VCVTPH2PS(X28, X28)
		VBROADCASTSS(X28, Z28)
		VPMOVSXBD(Mem{Base: wp, Disp: 192}, Z27)
		VCVTDQ2PS(Z27, Z27)
		VMULPS(Z28, Z27, Z27)
		VMOVUPS(Z27, scf)
		VMULPS(Z29, Z27, Z27)
		VMOVUPS(Z27, bias)
		for half := range 2 {
			ql, qh := 64*half, 128+32*half
			// Each kind k of element (ref.go's q1-q4: ql's low or high
			// nibble of the first or second 32 bytes, qh's bits 2k) is 32
			// elements from y[128·half + 32k], in two groups of 16.
			var out [4][2]Register
			regs := []Register{Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15}
			for g := range 2 {
				VPMOVZXBD(Mem{Base: wp, Disp: ql + 16*g}, Z0)
				VPMOVZXBD(Mem{Base: wp, Disp: ql + 32 + 16*g}, Z1)
				VPMOVZXBD(Mem{Base: wp, Disp: qh + 16*g}, Z2)
				for k := range 4 {
					q := regs[2*k+g]
					q6Quarter(k, Z0, Z1, Z2, q, Z3, Z31, Z30, VPSRLD, VPSLLD)
					VCVTDQ2PS(q, q)
					s := 8*half + g + 2*k // the scale of these 16
					VBROADCASTSS(scf.Offset(4*s), Z4)
					VFMADD213PS_BCST(bias.Offset(4*s), Z4, q)
					out[k][g] = q
				}
			}
			for k := range 4 {
				vcvtne2ps2bf16(Z16, out[k][1], out[k][0])
				VMOVDQU32(Z16, Mem{Base: op, Disp: 2 * (128*half + 32*k)})
			}
		}
	}
	closeWiden(name, wp, op, nb, rows, stride, ld, w0, o0, 210, 512)
}

// q8Widen emits the Q8_0 kernel: y = d·q, a 32-element block at a time.
func q8Widen(name string) {
	wp, op, nb, rows, stride, ld, w0, o0 := openWiden(name, "Q8_0")
	Label(name + "_block")
	{
		dd := GP32()
		MOVWLZX(Mem{Base: wp}, dd)
		VMOVD(dd, X2)
		VCVTPH2PS(X2, X2)
		VBROADCASTSS(X2, Z2)
		VPMOVSXBD(Mem{Base: wp, Disp: 2}, Z0)
		VPMOVSXBD(Mem{Base: wp, Disp: 18}, Z1)
		VCVTDQ2PS(Z0, Z0)
		VCVTDQ2PS(Z1, Z1)
		VMULPS(Z2, Z0, Z0)
		VMULPS(Z2, Z1, Z1)
		vcvtne2ps2bf16(Z3, Z1, Z0)
		VMOVDQU32(Z3, Mem{Base: op})
	}
	closeWiden(name, wp, op, nb, rows, stride, ld, w0, o0, 34, 64)
}
