package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// AMX's instructions are not in avo's (nor Go's assembler's) tables: they
// are written out as bytes, from the Intel SDM's encodings (VEX, map 0F38,
// W0, L0). Every operand is a physical register the kernel loads itself.

// The VEX pp field: the legacy prefix each instruction implies.
const (
	ppNone = 0
	pp66   = 1
	ppF3   = 2
	ppF2   = 3
)

// gpNum is a general register's number in the encoding.
func gpNum(r Register) int {
	for i, g := range []Register{RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8, R9, R10, R11, R12, R13, R14, R15} {
		if g == r {
			return i
		}
	}
	panic(fmt.Sprintf("amx: %v is not a general register", r))
}

// emitBytes writes bs into the text as data.
func emitBytes(bs ...byte) {
	for _, b := range bs {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}})
	}
}

// vex3 is the three-byte VEX prefix and the opcode: x and b set where the
// index and base registers are R8-R15, vvvv the second source (a tile
// register) or 0 where unused.
func vex3(pp byte, op byte, x, b bool, vvvv int) []byte {
	b1 := byte(0b11100010) // R̄ X̄ B̄ set (registers 0-7), map 0F38
	if x {
		b1 &^= 0b01000000
	}
	if b {
		b1 &^= 0b00100000
	}
	b2 := byte(^vvvv&0xF)<<3 | pp // W0, vvvv inverted, L0
	return []byte{0xC4, b1, b2, op}
}

// sibMem is the ModRM, SIB and displacement of [base + index*1 + disp]
// with reg in ModRM's reg field: a tile load's or store's operand, whose
// index register holds the row stride.
func sibMem(reg int, base, index Register, disp int) (x, b bool, tail []byte) {
	bn, in := gpNum(base), gpNum(index)
	if in == 4 {
		panic("amx: RSP cannot be an index")
	}
	mod := byte(0b00)
	switch {
	case disp == 0 && bn&7 != 5: // RBP and R13 need a displacement
	case disp >= -128 && disp < 128:
		mod = 0b01
	default:
		mod = 0b10
	}
	tail = []byte{mod<<6 | byte(reg&7)<<3 | 0b100, byte(in&7)<<3 | byte(bn&7)}
	switch mod {
	case 0b01:
		tail = append(tail, byte(int8(disp)))
	case 0b10:
		tail = append(tail, byte(disp), byte(disp>>8), byte(disp>>16), byte(disp>>24))
	}
	return in >= 8, bn >= 8, tail
}

// LDTILECFG [base]: the tiles' shapes from a 64-byte configuration.
func ldtilecfg(base Register) {
	bn := gpNum(base)
	if bn&7 == 4 || bn&7 == 5 {
		panic("amx: ldtilecfg's base must not need a SIB or displacement")
	}
	emitBytes(append(vex3(ppNone, 0x49, false, bn >= 8, 0), byte(bn&7))...)
}

// TILERELEASE: the tiles back to their initial state, so that the
// kernel's context switches no longer save them.
func tilerelease() { emitBytes(0xC4, 0xE2, 0x78, 0x49, 0xC0) }

// TILELOADD tmm, [base + stride + disp].
func tileloadd(tmm int, base, stride Register, disp int) {
	x, b, tail := sibMem(tmm, base, stride, disp)
	emitBytes(append(vex3(ppF2, 0x4B, x, b, 0), tail...)...)
}

// TILESTORED [base + stride + disp], tmm.
func tilestored(tmm int, base, stride Register, disp int) {
	x, b, tail := sibMem(tmm, base, stride, disp)
	emitBytes(append(vex3(ppF3, 0x4B, x, b, 0), tail...)...)
}

// TDPBF16PS c, a, b: c (M×N float32) += a (M×K bf16) · b (K/2 rows of N
// bf16 pairs).
func tdpbf16ps(c, a, b int) {
	emitBytes(append(vex3(ppF3, 0x5C, false, false, b), 0xC0|byte(c)<<3|byte(a))...)
}

// The tile registers tilesAMX uses: C for token tiles 0-3 in tmm0-tmm3,
// the weights, the vectors' high and low parts.
const (
	tmmW   = 4
	tmmXHi = 6
	tmmXLo = 7
)

// tilesAMX emits the AMX product of a panel of up to 16 weight rows in
// bfloat16 with up to 64 vectors laid out as gemv.Tiles holds them (each
// element as a high and a low bfloat16 part, 16 significant bits in all),
// over chunks of 32 columns:
//
//	c[j] += w·xhi[j] + w·xlo[j]   for token tiles j < tiles
//
// c holds tiles of 16 rows × 16 float32, 64 bytes a row, and is read and
// written back, so a row's columns may come in several calls. The tile
// shapes (the panel's rows) are cfg's, written by gemv; the tiles are
// released before returning.
func tilesAMX() {
	tilesKernel("tilesAMX", 1, "func(cfg *byte, w *uint16, wstride int, x *uint16, xstep int, c *float32, chunks, tiles int)",
		"tilesAMX adds a bfloat16 panel's products with up to four tiles of vectors to c (see the generator, asm/amx.go).")
}

// tilesAMX2 emits tilesAMX for two panels at once (the second wnext bytes
// after the first) and up to two tiles of vectors: four accumulators, C
// for panel p and token tile j in tmm(2j+p), at c + (2j+p)·1024. Each
// vector tile loaded serves both panels, where tilesAMX loads it for one.
func tilesAMX2() {
	tilesKernel("tilesAMX2", 2, "func(cfg *byte, w *uint16, wstride, wnext int, x *uint16, xstep int, c *float32, chunks, tiles int)",
		"tilesAMX2 is tilesAMX for two panels and up to two tiles of vectors (see the generator, asm/amx.go).")
}

// tilesKernel emits tilesAMX (panels 1) or tilesAMX2 (panels 2): the
// accumulator of panel p and token tile j is tmm(j·panels+p), at c +
// (j·panels+p)·1024, four in all; panel p's weights are in tmm(4+p).
func tilesKernel(name string, panels int, signature, doc string) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(doc)
	Load(Param("cfg"), RAX)
	ldtilecfg(RAX)
	Load(Param("w"), RSI)
	Load(Param("wstride"), RCX)
	if panels == 2 {
		Load(Param("wnext"), RDX)
		ADDQ(RSI, RDX)
	}
	Load(Param("x"), RDI)
	Load(Param("xstep"), R9)
	Load(Param("c"), R8)
	Load(Param("chunks"), R10)
	Load(Param("tiles"), R11)
	MOVQ(U32(64), RBX)
	most := 4 / panels // token tiles a call
	label := func(n int, what string) string { return fmt.Sprintf("%s_%d%s", name, n, what) }
	for n := most; n >= 2; n-- {
		CMPQ(R11, U8(n))
		JEQ(LabelRef(label(n, "")))
	}
	for n := 1; n <= most; n++ {
		Label(label(n, ""))
		for t := range panels * n {
			tileloadd(t, R8, RBX, t*1024)
		}
		Label(label(n, "_chunk"))
		for p, base := range []Register{RSI, RDX}[:panels] {
			tileloadd(tmmW+p, base, RCX, 0)
		}
		for j := range n {
			tileloadd(tmmXHi, RDI, RBX, j*2048)
			tileloadd(tmmXLo, RDI, RBX, j*2048+1024)
			for p := range panels {
				tdpbf16ps(j*panels+p, tmmW+p, tmmXHi)
				tdpbf16ps(j*panels+p, tmmW+p, tmmXLo)
			}
		}
		for _, base := range []Register{RSI, RDX}[:panels] {
			ADDQ(U8(64), base)
		}
		ADDQ(R9, RDI)
		DECQ(R10)
		JNE(LabelRef(label(n, "_chunk")))
		for t := range panels * n {
			tilestored(t, R8, RBX, t*1024)
		}
		JMP(LabelRef(name + "_done"))
	}
	Label(name + "_done")
	tilerelease()
	RET()
}
