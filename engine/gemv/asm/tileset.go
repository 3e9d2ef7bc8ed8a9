package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tilesSetAVX512 emits the vector side of the tile path (gemv's
// Tiles.SetBlocks): each 32 elements of a vector as their bfloat16
// rounding (to nearest, ties to even, by VCVTNE2PS2BF16) and the rounding
// of what that leaves, element pair (2r, 2r+1) stored as one dword in
// row r of a hi and a lo tile (64-byte rows, the lo tile 1 KiB after the
// hi one), at the vector's column: a dword scatter a tile. A chunk with
// an element that is not finite stops the kernel, which returns how many
// chunks it laid out (the caller names the element). VCVTNE2PS2BF16 is
// written out as bytes, so the kernel uses physical vector registers.
func tilesSetAVX512() {
	TEXT("tilesSetAVX512", NOSPLIT, "func(f *float32, chunks int, dst *uint16, step int) int")
	Pragma("noescape")
	Doc("tilesSetAVX512 lays out chunks of 32 elements of f as hi and lo bfloat16 pairs into tiles step bytes apart, dst at the vector's column of the first; it returns the chunks laid out, fewer where an element is not finite.")
	fp := Load(Param("f"), GP64())
	n := Load(Param("chunks"), GP64())
	dp := Load(Param("dst"), GP64())
	step := Load(Param("step"), GP64())
	done := GP64()
	XORQ(done, done)
	// Z7: the scatter's byte offsets, a tile row (64 bytes) apart;
	// Z6: the exponent mask.
	rows := GLOBL("tilesetRows", RODATA|NOPTR)
	for r := range 16 {
		DATA(4*r, U32(64*r))
	}
	DATA(64, U32(0x7f800000))
	VMOVDQU32(rows, Z7)
	VPBROADCASTD(rows.Offset(64), Z6)
	Label("tileset_chunk")
	CMPQ(done, n)
	JE(LabelRef("tileset_done"))
	VMOVUPS(Mem{Base: fp}, Z0)
	VMOVUPS(Mem{Base: fp, Disp: 64}, Z1)
	// Not finite: every exponent bit set.
	VPANDD(Z6, Z0, Z2)
	VPCMPEQD(Z6, Z2, K1)
	VPANDD(Z6, Z1, Z2)
	VPCMPEQD(Z6, Z2, K2)
	KORW(K1, K2, K1)
	KORTESTW(K1, K1)
	JNE(LabelRef("tileset_done"))
	vcvtne2ps2bf16(Z3, Z1, Z0) // word k: bf16 of element k
	// The hi parts back to float32, element order: the residuals.
	VPMOVZXWD(Y3, Z4)
	VPSLLD(U8(16), Z4, Z4)
	VEXTRACTI64X4(U8(1), Z3, Y5)
	VPMOVZXWD(Y5, Z5)
	VPSLLD(U8(16), Z5, Z5)
	VSUBPS(Z4, Z0, Z0)
	VSUBPS(Z5, Z1, Z1)
	vcvtne2ps2bf16(Z2, Z1, Z0)
	KXNORW(K3, K3, K3)
	VPSCATTERDD(Z3, K3, Mem{Base: dp, Index: Z7, Scale: 1})
	KXNORW(K3, K3, K3)
	VPSCATTERDD(Z2, K3, Mem{Base: dp, Index: Z7, Scale: 1, Disp: 1024})
	ADDQ(U8(128), fp)
	ADDQ(step, dp)
	INCQ(done)
	JMP(LabelRef("tileset_chunk"))
	Label("tileset_done")
	Store(done, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
