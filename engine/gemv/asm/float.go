package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Float formats the float path takes.
const (
	fF32 = iota
	fF16
	fBF16
)

// floatAVX2 emits the F32, F16 or BF16 kernel for AVX2 (n a multiple of
// 16): weights widened to float32 (F16 by VCVTPH2PS, BF16 by zero
// extension and a 16-bit shift, which is exact) and fused-multiply-added
// with the float vector into four 8-lane float32 accumulators. Every 128
// elements the accumulators are summed and added to float64 totals, so no
// float32 sum runs over more than a handful of terms: the result stays
// within ref.go's float tolerance at any row length. Rows of a multiple
// of 16 but not of 128 end with 16 elements at a time.
func floatAVX2(name string, kind int) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	format := []string{"F32", "F16", "BF16"}[kind]
	Doc(name + " is the " + format + " kernel for AVX2 (ref.go's float path).")
	es := 2 // bytes a weight
	if kind == fF32 {
		es = 4
	}
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	chunks := GP64()
	MOVQ(n, chunks)
	SHRQ(U8(7), chunks)
	rest := n // 16-element steps after the chunks
	SHRQ(U8(4), rest)
	ANDQ(U8(7), rest)

	// load widens the 8 weights at wp+8·es·k to float32.
	load := func(k int) VecVirtual {
		v := YMM()
		m := Mem{Base: wp, Disp: 8 * es * k}
		switch kind {
		case fF32:
			VMOVUPS(m, v)
		case fF16:
			VCVTPH2PS(m, v)
		default:
			VPMOVZXWD(m, v)
			VPSLLD(U8(16), v, v)
		}
		return v
	}
	// toTotal adds acc's eight float32 lanes to the float64 totals.
	toTotal := func(acc, t0, t1 VecVirtual) {
		lo, hi, x := YMM(), YMM(), XMM()
		VCVTPS2PD(acc.AsX(), lo)
		VEXTRACTF128(U8(1), acc, x)
		VCVTPS2PD(x, hi)
		VADDPD(lo, t0, t0)
		VADDPD(hi, t1, t1)
	}

	row0 := rowStart(name, rows, wp)
	fp := Load(Param("f"), GP64())
	t0, t1 := YMM(), YMM()
	VXORPD(t0, t0, t0)
	VXORPD(t1, t1, t1)
	nc := GP64()
	MOVQ(chunks, nc)
	TESTQ(nc, nc)
	JE(LabelRef(name + "_rest"))

	Label(name + "_chunk")
	var acc [4]VecVirtual
	for k := 0; k < 16; k++ {
		v := load(k)
		f := Mem{Base: fp, Disp: 32 * k}
		if k < 4 {
			acc[k] = YMM()
			VMULPS(f, v, acc[k])
		} else {
			VFMADD231PS(f, v, acc[k%4])
		}
	}
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	toTotal(acc[0], t0, t1)
	ADDQ(U32(128*es), wp)
	ADDQ(U32(4*128), fp)
	DECQ(nc)
	JNE(LabelRef(name + "_chunk"))

	Label(name + "_rest")
	TESTQ(rest, rest)
	JE(LabelRef(name + "_store"))
	nr := GP64()
	MOVQ(rest, nr)
	Label(name + "_step")
	a := YMM()
	VMULPS(Mem{Base: fp}, load(0), a)
	VFMADD231PS(Mem{Base: fp, Disp: 32}, load(1), a)
	toTotal(a, t0, t1)
	ADDQ(U8(16*es), wp)
	ADDQ(U8(4*16), fp)
	DECQ(nr)
	JNE(LabelRef(name + "_step"))

	Label(name + "_store")
	VADDPD(t1, t0, t0)
	x := XMM()
	VEXTRACTF128(U8(1), t0, x)
	VADDPD(x, t0.AsX(), x)
	h := XMM()
	VPERMILPD(U8(1), x, h)
	VADDSD(h, x, x)
	rowEnd(name, x, nil, y, rows, wp, row0)
}

// floatAVX512 emits the F32, F16 or BF16 kernel for AVX-512 F/BW/VL (n a
// multiple of 16): floatAVX2's walk sixteen lanes wide. Weights widen to
// float32 in zmm registers and fuse-multiply-add with the float vector
// into four accumulators over 256-element chunks, whose sum goes to
// float64 totals: each lane adds sixteen products in float32 before
// that, as floatAVX2's do over its 128-element chunks, so the result
// stays within ref.go's float tolerance at any row length. Rows of a
// multiple of 16 but not of 256 end with 16 elements at a time.
func floatAVX512(name string, kind int) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	format := []string{"F32", "F16", "BF16"}[kind]
	Doc(name + " is the " + format + " kernel for AVX-512 (ref.go's float path).")
	es := 2 // bytes a weight
	if kind == fF32 {
		es = 4
	}
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	chunks := GP64()
	MOVQ(n, chunks)
	SHRQ(U8(8), chunks)
	rest := n // 16-element steps after the chunks
	SHRQ(U8(4), rest)
	ANDQ(U8(15), rest)

	// load widens the 16 weights at wp+16·es·k to float32.
	load := func(k int) VecVirtual {
		v := ZMM()
		m := Mem{Base: wp, Disp: 16 * es * k}
		switch kind {
		case fF32:
			VMOVUPS(m, v)
		case fF16:
			VCVTPH2PS(m, v)
		default:
			VPMOVZXWD(m, v)
			VPSLLD(U8(16), v, v)
		}
		return v
	}
	// toTotal adds acc's sixteen float32 lanes to the float64 totals.
	toTotal := func(acc, t0, t1 VecVirtual) {
		lo, hi, x := ZMM(), ZMM(), YMM()
		VCVTPS2PD(acc.AsY(), lo)
		VEXTRACTF32X8(U8(1), acc, x)
		VCVTPS2PD(x, hi)
		VADDPD(lo, t0, t0)
		VADDPD(hi, t1, t1)
	}

	row0 := rowStart(name, rows, wp)
	fp := Load(Param("f"), GP64())
	t0, t1 := ZMM(), ZMM()
	VXORPD(t0, t0, t0)
	VXORPD(t1, t1, t1)
	nc := GP64()
	MOVQ(chunks, nc)
	TESTQ(nc, nc)
	JE(LabelRef(name + "_rest"))

	Label(name + "_chunk")
	prefetch(wp, 256*es)
	var acc [4]VecVirtual
	for k := 0; k < 16; k++ {
		v := load(k)
		f := Mem{Base: fp, Disp: 64 * k}
		if k < 4 {
			acc[k] = ZMM()
			VMULPS(f, v, acc[k])
		} else {
			VFMADD231PS(f, v, acc[k%4])
		}
	}
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	toTotal(acc[0], t0, t1)
	ADDQ(U32(256*es), wp)
	ADDQ(U32(4*256), fp)
	DECQ(nc)
	JNE(LabelRef(name + "_chunk"))

	Label(name + "_rest")
	TESTQ(rest, rest)
	JE(LabelRef(name + "_store"))
	nr := GP64()
	MOVQ(rest, nr)
	Label(name + "_step")
	a := ZMM()
	VMULPS(Mem{Base: fp}, load(0), a)
	toTotal(a, t0, t1)
	ADDQ(U8(16*es), wp)
	ADDQ(U8(4*16), fp)
	DECQ(nr)
	JNE(LabelRef(name + "_step"))

	Label(name + "_store")
	VADDPD(t1, t0, t0)
	h4 := YMM()
	VEXTRACTF64X4(U8(1), t0, h4)
	VADDPD(h4, t0.AsY(), h4)
	x := XMM()
	VEXTRACTF128(U8(1), h4, x)
	VADDPD(x, h4.AsX(), x)
	h := XMM()
	VPERMILPD(U8(1), x, h)
	VADDSD(h, x, x)
	rowEnd(name, x, nil, y, rows, wp, row0)
}
