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
func i8AVX2(name string) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the INT8Row kernel for AVX2 (ref.go's contract).")
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
	acc := [2]VecVirtual{YMM(), YMM()}
	for k := 0; k < 16; k++ {
		v := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: 16 * k}, v)
		a := acc[k%2]
		if k < 2 {
			VPMADDWD(Mem{Base: qp, Disp: 32 * k}, v, a)
			continue
		}
		VPMADDWD(Mem{Base: qp, Disp: 32 * k}, v, v)
		VPADDD(v, a, a)
	}
	VPADDD(acc[1], acc[0], acc[0])
	p := hsumD(acc[0])
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

// i8AVX512 emits the INT8Row kernel for AVX-512 F/BW/VL: i8AVX2's walk
// with each 256-element block's quants widened 32 at a time into zmm
// registers; with vnni, VPDPWSSD multiplies and accumulates the int16
// pairs in one instruction where VPMADDWD and VPADDD take two. Both sum
// the same exact int32 lanes, so the bits are ref.go's either way.
func i8AVX512(name string, vnni bool) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the INT8Row kernel for AVX-512 (ref.go's contract).")
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
	prefetch(wp, 256)
	acc := [2]VecVirtual{ZMM(), ZMM()}
	for k := 0; k < 8; k++ {
		v := ZMM()
		VPMOVSXBW(Mem{Base: wp, Disp: 32 * k}, v)
		a := acc[k%2]
		q := Mem{Base: qp, Disp: 64 * k}
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
	p := reduceT(acc[0])
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
