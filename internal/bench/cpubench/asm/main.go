// Command asm generates package cpubench's memory read loops
// (zread_amd64.s and their Go declarations, zread_amd64.go) with avo. Run
// it through go generate in internal/bench/cpubench.
//
// Each loop reads n bytes from p with the widest loads the CPU has, into
// eight independent accumulators (so no load waits on the one before it),
// and returns their XOR folded to 64 bits, which keeps the loads live for
// any reader of the result. Besides the loads, the loop only prefetches
// every line prefetchAhead bytes ahead: one thread's read rate is bounded
// by how many lines it has in flight, and the prefetches add to the
// hardware prefetchers' (a few per cent on a Sapphire Rapids core, none
// once every core reads). A probe of memory bandwidth must be limited by
// memory, never by itself.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("amd64")
	read("readAVX2", 32)
	read("readAVX512", 64)
	Generate()
}

// accumulators is how many loads each round issues, one per accumulator.
const accumulators = 8

// prefetchAhead is how far ahead of the loads the loop prefetches: the
// best of 1, 2, 4 and 8 KiB on a Sapphire Rapids core, where 4 and 8 KiB
// tied.
const prefetchAhead = 8 << 10

// read emits a loop of width-byte loads (32: AVX2's YMM, 64: AVX-512's
// ZMM). n must be a multiple of accumulators·width.
func read(name string, width int) {
	TEXT(name, NOSPLIT, "func(p *byte, n int) uint64")
	Pragma("noescape")
	step := accumulators * width
	Doc(fmt.Sprintf("%s XORs the n bytes at p (a multiple of %d) into eight %d-bit accumulators and returns them folded to 64 bits.", name, step, 8*width))
	p := Load(Param("p"), GP64())
	n := Load(Param("n"), GP64())
	end := GP64()
	LEAQ(Mem{Base: p, Index: n, Scale: 1}, end)

	acc := make([]VecVirtual, accumulators)
	for i := range acc {
		if width == 64 {
			acc[i] = ZMM()
			VPXORQ(acc[i], acc[i], acc[i])
		} else {
			acc[i] = YMM()
			VPXOR(acc[i], acc[i], acc[i])
		}
	}

	Label(name + "_loop")
	CMPQ(p, end)
	JAE(LabelRef(name + "_fold"))
	for o := 0; o < step; o += 64 {
		PREFETCHT0(Mem{Base: p, Disp: prefetchAhead + o})
	}
	for i, a := range acc {
		if width == 64 {
			VPXORQ(Mem{Base: p, Disp: i * width}, a, a)
		} else {
			VPXOR(Mem{Base: p, Disp: i * width}, a, a)
		}
	}
	ADDQ(U32(step), p)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_fold")
	// Pairwise to one accumulator, then halve it to 64 bits.
	for k := accumulators / 2; k >= 1; k /= 2 {
		for i := 0; i < k; i++ {
			if width == 64 {
				VPXORQ(acc[i+k], acc[i], acc[i])
			} else {
				VPXOR(acc[i+k], acc[i], acc[i])
			}
		}
	}
	y := acc[0]
	if width == 64 {
		hi := YMM()
		VEXTRACTI64X4(U8(1), acc[0], hi)
		y = YMM()
		VPXOR(hi, acc[0].AsY(), y)
	}
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	lo := XMM()
	VPXOR(x, y.AsX(), lo)
	a, b := GP64(), GP64()
	VMOVQ(lo, a)
	VPEXTRQ(U8(1), lo, b)
	XORQ(b, a)
	VZEROUPPER()
	Store(a, ReturnIndex(0))
	RET()
}
