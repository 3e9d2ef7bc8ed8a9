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
func floatAVX2(name string, kind int) { floatKernel(name, kind, false) }

// floatAVX512 emits the F32, F16 or BF16 kernel for AVX-512 F/BW/VL (n a
// multiple of 16): floatAVX2's walk sixteen lanes wide, over 256-element
// chunks, each lane adding sixteen products in float32 before the
// float64 totals as floatAVX2's do over its 128-element chunks, so the
// result stays within ref.go's float tolerance at any row length. It
// prefetches the weights ahead, as the other AVX-512 kernels do. Rows of
// a multiple of 16 but not of 256 end with 16 elements at a time.
func floatAVX512(name string, kind int) { floatKernel(name, kind, true) }

// floatKernel emits floatAVX2's kernel, or with wide floatAVX512's.
func floatKernel(name string, kind int, wide bool) {
	family := map[bool]string{false: "AVX2", true: "AVX-512"}[wide]
	fw, wp, rows, y, chunks, rest := openFloat(name, kind, wide, "for "+family+" (ref.go's float path)")
	vec, chunk := fw.vec, fw.chunk()
	load := func(k int) VecVirtual { return fw.load(wp, k) }
	toTotal := fw.toTotal

	row0 := rowStart(name, rows, wp)
	fp := Load(Param("f"), GP64())
	t0, t1 := vec(), vec()
	VXORPD(t0, t0, t0)
	VXORPD(t1, t1, t1)
	nc := GP64()
	MOVQ(chunks, nc)
	TESTQ(nc, nc)
	JE(LabelRef(name + "_rest"))

	Label(name + "_chunk")
	if wide {
		prefetch(wp, chunk*fw.es)
	}
	var acc [4]VecVirtual
	for k := 0; k < 16; k++ {
		v := load(k)
		f := Mem{Base: fp, Disp: 4 * fw.lanes * k}
		if k < 4 {
			acc[k] = vec()
			VMULPS(f, v, acc[k])
		} else {
			VFMADD231PS(f, v, acc[k%4])
		}
	}
	toTotal(sum4(acc), t0, t1)
	ADDQ(U32(chunk*fw.es), wp)
	ADDQ(U32(4*chunk), fp)
	DECQ(nc)
	JNE(LabelRef(name + "_chunk"))

	Label(name + "_rest")
	TESTQ(rest, rest)
	JE(LabelRef(name + "_store"))
	nr := GP64()
	MOVQ(rest, nr)
	Label(name + "_step")
	a := vec()
	VMULPS(Mem{Base: fp}, load(0), a)
	if !wide {
		VFMADD231PS(Mem{Base: fp, Disp: 32}, load(1), a)
	}
	toTotal(a, t0, t1)
	ADDQ(U8(16*fw.es), wp)
	ADDQ(U8(4*16), fp)
	DECQ(nr)
	JNE(LabelRef(name + "_step"))

	Label(name + "_store")
	rowEnd(name, fw.total(t0, t1), nil, y, rows, wp, row0)
}

// openFloat opens a float kernel (kind's format, wide for AVX-512): its
// text, its doc (contract after the format), and the parameters and
// counts every float kernel starts from: the weights, rows and results,
// the whole chunks a row (16 loads of lanes each) and the 16-element
// steps after them.
func openFloat(name string, kind int, wide bool, contract string) (fw floatWalk, wp, rows, y, chunks, rest Register) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(name + " is the " + []string{"F32", "F16", "BF16"}[kind] + " kernel " + contract + ".")
	fw = floatWalk{kind: kind, wide: wide, lanes: 8, es: 2}
	if wide {
		fw.lanes = 16
	}
	if kind == fF32 {
		fw.es = 4
	}
	wp = Load(Param("w"), GP64())
	rows = Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y = Load(Param("y"), GP64())
	c := GP64()
	MOVQ(n, c)
	if wide {
		SHRQ(U8(8), c)
	} else {
		SHRQ(U8(7), c)
	}
	SHRQ(U8(4), n) // 16-element steps after the chunks
	ANDQ(U8(fw.chunk()/16-1), n)
	return fw, wp, rows, y, c, n
}

// chunk is the elements a chunk: 16 loads into 4 accumulators.
func (f floatWalk) chunk() int { return 16 * f.lanes }

// floatWalk is what the float kernels share: the format (kind), the
// width (wide: AVX-512's sixteen lanes, else AVX2's eight) and the bytes
// a weight, and the emitters of their loads and sums.
type floatWalk struct {
	kind, lanes, es int
	wide            bool
}

func (f floatWalk) vec() VecVirtual {
	if f.wide {
		return ZMM()
	}
	return YMM()
}

// load widens the lanes weights at wp+lanes·es·k to float32.
func (f floatWalk) load(wp Register, k int) VecVirtual {
	v := f.vec()
	m := Mem{Base: wp, Disp: f.lanes * f.es * k}
	switch f.kind {
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

// toTotal adds acc's float32 lanes to the float64 totals t0 and t1.
func (f floatWalk) toTotal(acc, t0, t1 VecVirtual) {
	lo, hi := f.vec(), f.vec()
	if f.wide {
		x := YMM()
		VCVTPS2PD(acc.AsY(), lo)
		VEXTRACTF32X8(U8(1), acc, x)
		VCVTPS2PD(x, hi)
	} else {
		x := XMM()
		VCVTPS2PD(acc.AsX(), lo)
		VEXTRACTF128(U8(1), acc, x)
		VCVTPS2PD(x, hi)
	}
	VADDPD(lo, t0, t0)
	VADDPD(hi, t1, t1)
}

// total sums the float64 totals t0 and t1 (t0 overwritten) into lane 0
// of an xmm.
func (f floatWalk) total(t0, t1 VecVirtual) VecVirtual {
	VADDPD(t1, t0, t0)
	sum := t0 // the ymm of the four sums (AVX2's t0 is one)
	if f.wide {
		h4 := YMM()
		VEXTRACTF64X4(U8(1), t0, h4)
		VADDPD(h4, t0.AsY(), h4)
		sum = h4
	}
	return hsumPD(sum)
}

// floatAVX512x emits floatAVX512's kernel over four vectors at once (the
// f parameter points to their four float pointers; y takes a row's four
// results in vector order): each 16 lanes of weights are widened once and
// multiplied into each vector's four accumulators, in the order
// floatAVX512 adds them for one vector, so every result is its bits. The
// 16 accumulators and 8 float64 totals fit AVX-512's 32 registers; AVX2's
// 16 would not hold them, so it has no such kernel. F16 and BF16 gain
// (their widening is shared); F32's, whose weights need no widening, lost
// to four one-vector passes and is not built.
func floatAVX512x(name string, kind int) {
	const T = Tokens
	fw, wp, rows, y, chunks, rest := openFloat(name, kind, true, "for AVX-512 over four vectors (ref.go's float path for each)")
	lanes, chunk := fw.lanes, fw.chunk()
	load := func(k int) VecVirtual { return fw.load(wp, k) }
	toTotal := fw.toTotal

	row0 := rowStart(name, rows, wp)
	fa := Load(Param("f"), GP64())
	var fp [T]GPVirtual
	for t := range fp {
		fp[t] = GP64()
		MOVQ(Mem{Base: fa, Disp: 8 * t}, fp[t])
	}
	var t0, t1 [T]VecVirtual
	for t := range t0 {
		t0[t], t1[t] = ZMM(), ZMM()
		VXORPD(t0[t], t0[t], t0[t])
		VXORPD(t1[t], t1[t], t1[t])
	}
	nc := GP64()
	MOVQ(chunks, nc)
	TESTQ(nc, nc)
	JE(LabelRef(name + "_rest"))

	Label(name + "_chunk")
	prefetch(wp, chunk*fw.es)
	var acc [T][4]VecVirtual
	for k := 0; k < 16; k++ {
		v := load(k)
		for t := range T {
			f := Mem{Base: fp[t], Disp: 4 * lanes * k}
			if k < 4 {
				acc[t][k] = ZMM()
				VMULPS(f, v, acc[t][k])
			} else {
				VFMADD231PS(f, v, acc[t][k%4])
			}
		}
	}
	for t := range T {
		toTotal(sum4(acc[t]), t0[t], t1[t])
		ADDQ(U32(4*chunk), fp[t])
	}
	ADDQ(U32(chunk*fw.es), wp)
	DECQ(nc)
	JNE(LabelRef(name + "_chunk"))

	Label(name + "_rest")
	TESTQ(rest, rest)
	JE(LabelRef(name + "_store"))
	nr := GP64()
	MOVQ(rest, nr)
	Label(name + "_step")
	v := load(0)
	for t := range T {
		a := ZMM()
		VMULPS(Mem{Base: fp[t]}, v, a)
		toTotal(a, t0[t], t1[t])
		ADDQ(U8(4*16), fp[t])
	}
	ADDQ(U8(16*fw.es), wp)
	DECQ(nr)
	JNE(LabelRef(name + "_step"))

	Label(name + "_store")
	for t := range T {
		x := fw.total(t0[t], t1[t])
		VCVTSD2SS(x, x, x)
		VMOVSS(x, Mem{Base: y, Disp: 4 * t})
	}
	ADDQ(U8(4*T), y)
	nextRow(name, rows, wp, row0)
}
