package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// i8AVX2 emits the INT8Row kernel for AVX2: a row is its float32 scale
// then n int8 quants (n a multiple of 256, which gemv's blockOf asks of
// this format). Each 256-element block's quants are widened to int16 and
// multiply-added with the vector's into eight int32 lanes, whose total is
// I exactly; the float tail is ref.go's, one scalar operation at a time,
// and the row's scale multiplies the float32 total last.
func i8AVX2(name string) { i8Kernel(name, false, false) }

// i8AVX512 emits the INT8Row kernel for AVX-512 F/BW/VL: i8AVX2's walk
// with each block's quants widened 32 at a time into zmm registers, and
// the weights prefetched ahead; with vnni, VPDPWSSD multiplies and
// accumulates the int16 pairs in one instruction where VPMADDWD and
// VPADDD take two. Both sum the same exact int32 lanes, so the bits are
// ref.go's either way.
func i8AVX512(name string, vnni bool) { i8Kernel(name, true, vnni) }

// i8Kernel emits i8AVX2's kernel, or with wide i8AVX512's.
func i8Kernel(name string, wide, vnni bool) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	family, lanes, vec := "AVX2", 16, func() VecVirtual { return YMM() }
	if wide {
		family, lanes, vec = "AVX-512", 32, func() VecVirtual { return ZMM() }
	}
	Doc(name + " is the INT8Row kernel for " + family + " (ref.go's contract).")
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	SHRQ(U8(8), n) // blocks a row

	row0 := rowStart(name, rows, wp)
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	scale := XMM()
	VMOVSS(Mem{Base: wp}, scale)
	ADDQ(U8(4), wp)
	nb := GP64()
	MOVQ(n, nb)
	total := XMM()
	VXORPD(total, total, total)

	Label(name + "_block")
	if wide {
		prefetch(wp, 256)
	}
	acc := [2]VecVirtual{vec(), vec()}
	for k := 0; k < 256/lanes; k++ {
		v := vec()
		VPMOVSXBW(Mem{Base: wp, Disp: lanes * k}, v)
		a := acc[k%2]
		q := Mem{Base: qp, Disp: 2 * lanes * k}
		switch {
		case k < 2:
			VPMADDWD(q, v, a)
		case vnni:
			VPDPWSSD(q, v, a)
		default:
			VPMADDWD(q, v, v)
			VPADDD(v, a, a)
		}
	}
	VPADDD(acc[1], acc[0], acc[0])
	var p VecVirtual
	if wide {
		p = reduceT(acc[0])
	} else {
		p = hsumD(acc[0])
	}
	VCVTDQ2PS(p, p)
	VMULSS(Mem{Base: dp}, p, p)
	addBlock(p, total)

	ADDQ(U32(256), wp)
	ADDQ(U32(2*256), qp)
	ADDQ(U8(4), dp)
	DECQ(nb)
	JNE(LabelRef(name + "_block"))

	rowEnd(name, total, scale, y, rows, wp, row0)
}
