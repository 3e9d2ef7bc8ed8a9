package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The attention's float kernels (gemv's rowsf.go): a query's dot product
// with rows of a cache a stride apart, and a weighted sum of such rows.
// Both take n a multiple of 64 (a head's width: 64, 128, 256).

// dotRowsAVX512 emits y[r] = q · row r for rows rows of n float32 stride
// bytes apart: four accumulators over the row's 16-lane blocks (block i
// into accumulator i mod 4), summed pairwise, then across lanes.
func dotRowsAVX512() {
	TEXT("dotRowsAVX512", NOSPLIT, "func(q *float32, k *float32, stride, rows, n int, y *float32)")
	Pragma("noescape")
	Doc("dotRowsAVX512 sets y[r] to q's dot product with each of rows rows of n float32 (n a multiple of 64) stride bytes apart.")
	qp := Load(Param("q"), GP64())
	kp := Load(Param("k"), GP64())
	stride := Load(Param("stride"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	SHRQ(U8(6), n) // 64-element groups
	Label("dot_row")
	CMPQ(rows, Imm(0))
	JE(LabelRef("dot_done"))
	acc := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
	for _, a := range acc {
		VXORPS(a, a, a)
	}
	qi, ki, g := GP64(), GP64(), GP64()
	MOVQ(qp, qi)
	MOVQ(kp, ki)
	MOVQ(n, g)
	Label("dot_group")
	for i, a := range acc {
		v := ZMM()
		VMOVUPS(Mem{Base: ki, Disp: 64 * i}, v)
		VFMADD231PS(Mem{Base: qi, Disp: 64 * i}, v, a)
	}
	ADDQ(U32(256), qi)
	ADDQ(U32(256), ki)
	DECQ(g)
	JNE(LabelRef("dot_group"))
	sum := sum4(acc)
	h := YMM()
	VEXTRACTF64X4(U8(1), sum, h)
	VADDPS(h, sum.AsY(), h)
	x := XMM()
	VEXTRACTF128(U8(1), h, x)
	VADDPS(x, h.AsX(), x)
	t := XMM()
	VPERMILPS(U8(0x4e), x, t)
	VADDPS(t, x, x)
	VPERMILPS(U8(0xb1), x, t)
	VADDSS(t, x, x)
	VMOVSS(x, Mem{Base: y})
	ADDQ(U8(4), y)
	ADDQ(stride, kp)
	DECQ(rows)
	JMP(LabelRef("dot_row"))
	Label("dot_done")
	VZEROUPPER()
	RET()
}

// addRowsAVX512 emits out += Σ w[r]·row r over rows rows of n float32
// stride bytes apart, 64 columns at a time: four accumulators start at
// out's values and take each row's fused multiply-add in row order.
func addRowsAVX512() {
	TEXT("addRowsAVX512", NOSPLIT, "func(out *float32, w *float32, v *float32, stride, rows, n int)")
	Pragma("noescape")
	Doc("addRowsAVX512 adds w[r] times each of rows rows of n float32 (n a multiple of 64) stride bytes apart to out, in row order.")
	op := Load(Param("out"), GP64())
	wp := Load(Param("w"), GP64())
	vp := Load(Param("v"), GP64())
	stride := Load(Param("stride"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	SHRQ(U8(6), n)
	Label("add_group")
	acc := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
	for i, a := range acc {
		VMOVUPS(Mem{Base: op, Disp: 64 * i}, a)
	}
	wi, vi, r := GP64(), GP64(), GP64()
	MOVQ(wp, wi)
	MOVQ(vp, vi)
	MOVQ(rows, r)
	TESTQ(r, r)
	JE(LabelRef("add_store"))
	Label("add_row")
	b := ZMM()
	VBROADCASTSS(Mem{Base: wi}, b)
	for i, a := range acc {
		VFMADD231PS(Mem{Base: vi, Disp: 64 * i}, b, a)
	}
	ADDQ(U8(4), wi)
	ADDQ(stride, vi)
	DECQ(r)
	JNE(LabelRef("add_row"))
	Label("add_store")
	for i, a := range acc {
		VMOVUPS(a, Mem{Base: op, Disp: 64 * i})
	}
	ADDQ(U32(256), op)
	ADDQ(U32(256), vp)
	DECQ(n)
	JNE(LabelRef("add_group"))
	VZEROUPPER()
	RET()
}
