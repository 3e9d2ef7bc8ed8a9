package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// gemvSlicedRowRef is one row's result of gemvq_sk_* on x quantized to
// xq, as AddFixed reads it: for each 1024-column slice, its 16 units
// (unit: gemvq's unit emulation; the kernels' lanes 0-15) each from zero,
// added by the butterfly of xor shuffles 1, 2, 4, 8 (lane 0's order); each
// slice's sum in fixed point (common.cuh: 2^-32 a unit, rounded to
// nearest even), summed exactly, rounded once to float.
func gemvSlicedRowRef(unit func([]byte, int, []byte, int, float32) float32, row []byte, cols int, xq []byte) float32 {
	var acc int64
	for j := 0; j < cols/GEMVSliceCols; j++ {
		v := make([]float32, 16)
		for l := range v {
			v[l] = unit(row, 16*j+l, xq, cols, 0)
		}
		for o := 1; o < 16; o <<= 1 {
			nv := make([]float32, 16)
			for l := range v {
				nv[l] = v[l] + v[l^o]
			}
			v = nv
		}
		acc += int64(math.RoundToEven(float64(v[0]) * (1 << 32)))
	}
	return float32(float64(acc) / (1 << 32))
}

// TestGEMVSliced runs GEMVSliced on Q4_K and Q6KA matrices (rows not a
// multiple of a block's, odd, one slice, down's 4096x14336) with x shaped
// as down's (swigluLike), added by AddFixed to a vector h: h + y within
// 1e-6 of the CPU emulation of the kernel's sums (gemvSlicedRowRef), y
// within the integer path's bound of the float64 product of the
// dequantized weights, the accumulators zero after; the same bits on a
// second run; two products added before one AddFixed give exactly twice
// y; a product into other accumulators zeroes those it is told to and
// gives the same bits; AddFixedRMSNormQ gives AddRMSNorm's bits for that
// y, leaves it quantized and the accumulators as they were; a NaN in x
// makes every row NaN; with the integer path out of the tuning it
// enqueues nothing.
func TestGEMVSliced(t *testing.T) {
	t.Parallel()
	for ci, tc := range []struct {
		typ        quant.Type
		rows, cols int
	}{
		{quant.Q4_K, 999, 2048},
		{quant.Q4_K, 512, 1024},
		{quant.Q4_K, 1024, 14336},
		{quant.Q4_K, 4096, 14336},
		{quant.Q6_K, 999, 3072},
		{quant.Q6_K, 961, 14336},
		{quant.Q6_K, 4096, 14336},
	} {
		t.Run(fmt.Sprintf("%v/%dx%d", tc.typ, tc.rows, tc.cols), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 71))
			xs := swigluLike(r, 1, tc.cols)
			data, deq := randMatrix(tc.typ, tc.rows, tc.cols, uint64(300+ci))
			xq := gemvqQuantizeRef(xs)
			xd := gemvqDequantX(xq, tc.cols)
			unit := gemvqPairUnitRef
			if tc.typ == quant.Q6_K {
				unit = gemvq6UnitRef
			}
			hs, ws := randVec(r, tc.rows, 2), randVec(r, tc.rows, 1)
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, tc.rows)
				defer done()
				w := Matrix{Type: tc.typ, Rows: tc.rows, Cols: tc.cols, Ptr: put(a, data)}
				if tc.typ == quant.Q6_K {
					var err error
					w, err = k.RelayQ6K(c, s, w)
					must(err)
				}
				acc, acc2 := a.alloc(GEMVFixedBytes(tc.rows)), a.alloc(GEMVFixedBytes(tc.rows))
				must(c.MemsetD8(acc, 0, GEMVFixedBytes(tc.rows), s))
				must(c.MemsetD8(acc2, 0, GEMVFixedBytes(tc.rows), s))
				x := put(a, xs)
				sliced := func() {
					ok, err := k.GEMVSliced(c, s, w, x, acc, 0)
					must(err)
					if !ok {
						failOnDevice("GEMVSliced did not take %v %dx%d", w.Type, tc.rows, tc.cols)
					}
				}
				zeros := make([]float32, tc.rows)
				h1, h2, yz, y2 := put(a, hs), put(a, hs), put(a, zeros), put(a, zeros)
				sliced()
				must(k.AddFixed(c, s, h1, acc, int64(tc.rows)))
				sliced()
				must(k.AddFixed(c, s, h2, acc, int64(tc.rows)))
				sliced()
				must(k.AddFixed(c, s, yz, acc, int64(tc.rows)))
				sliced()
				sliced()
				must(k.AddFixed(c, s, y2, acc, int64(tc.rows)))
				must(c.StreamSync(s))
				for i, v := range get[int64](a, acc, tc.rows) {
					if v != 0 {
						failOnDevice("accumulator %d left at %d", i, v)
					}
				}
				g1, g2, gy, gy2 := get[float32](a, h1, tc.rows), get[float32](a, h2, tc.rows), get[float32](a, yz, tc.rows), get[float32](a, y2, tc.rows)
				rb := int(w.RowBytes())
				for row := 0; row < tc.rows; row++ {
					if math.Float32bits(g1[row]) != math.Float32bits(g2[row]) {
						failOnDevice("row %d: %v, then %v on the same inputs", row, g1[row], g2[row])
					}
					if math.Float32bits(gy2[row]) != math.Float32bits(2*gy[row]) {
						failOnDevice("row %d: two products add to %v, twice one is %v", row, gy2[row], 2*gy[row])
					}
					emu := gemvSlicedRowRef(unit, data[row*rb:(row+1)*rb], tc.cols, xq)
					ref, mag := refDot(deq, tc.cols, row, xs)
					if e := math.Abs(float64(g1[row]) - float64(hs[row]+emu)); !(e <= 1e-6*mag+1e-6*math.Abs(float64(hs[row]))) {
						failOnDevice("row %d: h + y = %v, h + emulation %v (err %.3g)", row, g1[row], hs[row]+emu, e)
					}
					var bound float64
					for j, wv := range deq[row*tc.cols : (row+1)*tc.cols] {
						bound += math.Abs(float64(wv)) * math.Abs(xd[j]-float64(xs[j]))
					}
					if e := math.Abs(float64(gy[row]) - ref); !(e <= bound*(1+1e-6)+gemvTol(mag)) {
						failOnDevice("row %d: y = %v, float64 ref %v (err %.3g > bound %.3g + %.3g)", row, gy[row], ref, e, bound, gemvTol(mag))
					}
				}
				// Into acc2, zeroing acc (which holds a product): acc zero
				// after, acc2 the product.
				sliced()
				if ok, err := k.GEMVSliced(c, s, w, x, acc2, acc); !ok || err != nil {
					failOnDevice("into acc2, zeroing acc: took it %v, error %v", ok, err)
				}
				if ok, err := k.GEMVSliced(c, s, w, x, acc2, acc2+8); ok || err == nil {
					failOnDevice("accumulators to zero overlapping the output: took it %v, error %v", ok, err)
				}
				y3 := put(a, zeros)
				must(k.AddFixed(c, s, y3, acc2, int64(tc.rows)))
				must(c.StreamSync(s))
				for i, v := range get[int64](a, acc, tc.rows) {
					if v != 0 {
						failOnDevice("accumulator %d not zeroed: %d", i, v)
					}
				}
				for i, v := range get[float32](a, y3, tc.rows) {
					if math.Float32bits(v) != math.Float32bits(gy[i]) {
						failOnDevice("row %d into acc2: %v, into acc %v", i, v, gy[i])
					}
				}
				if tc.rows%256 == 0 { // AddFixedRMSNormQ: the float4 path and the held x
					wp := put(a, ws)
					x1, x2, n1, n2 := put(a, hs), put(a, hs), a.alloc(int64(4*tc.rows)), a.alloc(int64(4*tc.rows))
					sliced()
					must(c.StreamSync(s))
					held := get[int64](a, acc, tc.rows)
					must(k.AddFixedRMSNormQ(c, s, x1, acc, wp, n1, 1, tc.rows, 1e-5))
					if k.gemvq.ws[s].held != n1 {
						failOnDevice("AddFixedRMSNormQ left y not held quantized")
					}
					must(c.StreamSync(s))
					xq1 := get[byte](a, k.gemvq.ws[s].ptr, int(gemvqBytes(tc.rows)))
					must(k.AddRMSNorm(c, s, x2, yz, wp, n2, 1, tc.rows, 1e-5))
					must(c.StreamSync(s))
					for _, v := range [][2]cudadrv.DevPtr{{x1, x2}, {n1, n2}} {
						v1, v2 := get[float32](a, v[0], tc.rows), get[float32](a, v[1], tc.rows)
						for i := range v1 {
							if math.Float32bits(v1[i]) != math.Float32bits(v2[i]) {
								failOnDevice("AddFixedRMSNormQ: [%d] = %v, AddRMSNorm of y %v", i, v1[i], v2[i])
							}
						}
					}
					want := gemvqQuantizeRef(get[float32](a, n2, tc.rows))
					for i := range want {
						if xq1[i] != want[i] {
							failOnDevice("AddFixedRMSNormQ: quantized byte %d = %#x, gemvq_x's %#x", i, xq1[i], want[i])
						}
					}
					for i, v := range get[int64](a, acc, tc.rows) {
						if v != held[i] {
							failOnDevice("AddFixedRMSNormQ changed accumulator %d: %d, was %d", i, v, held[i])
						}
					}
					must(k.AddFixed(c, s, n2, acc, int64(tc.rows)))
				}
				// A NaN in x: every row's first slice sum is NaN.
				xn := append([]float32(nil), xs...)
				xn[5] = float32(math.NaN())
				must(c.CopyHtoD(x, cudadrv.Bytes(xn), s))
				sliced()
				must(k.AddFixed(c, s, yz, acc, int64(tc.rows)))
				must(c.StreamSync(s))
				for row, v := range get[float32](a, yz, tc.rows) {
					if !math.IsNaN(float64(v)) {
						failOnDevice("x holds a NaN, row %d = %v", row, v)
					}
				}
				kf := tuned(k, func(tu *Tuning) { tu.IntegerGEMV = false })
				if ok, err := kf.GEMVSliced(c, s, w, x, acc, 0); ok || err != nil {
					failOnDevice("integer path off: took it %v, error %v", ok, err)
				}
			})
		})
	}
}

// TestGEMVSlicedGeometry pins which products GEMVSliced takes (host-only:
// a Kernels of 132 multiprocessors, two blocks each, both
// kernels present): Q4_K and Q6KA (not plain Q6_K or other types), columns
// a multiple of 1024 and at most 16 of them, x 8-byte aligned, one wave,
// the integer path in the tuning.
func TestGEMVSlicedGeometry(t *testing.T) {
	t.Parallel()
	const w16, x8 = cudadrv.DevPtr(1 << 20), cudadrv.DevPtr(1 << 21)
	for _, tc := range []struct {
		name       string
		typ        quant.Type
		rows, cols int
		ptr, x     cudadrv.DevPtr
		fast       bool
		kernel     string
		blocks     int
	}{
		{"down 8b Q4_K", quant.Q4_K, 4096, 14336, w16, x8, true, "gemvq_sk_p", 224},
		{"down 8b Q6KA", quant.Q6KA, 4096, 14336, w16 + 2, x8, true, "gemvq_sk_q6ka", 252},
		{"down 8b Q6_K (not re-laid)", quant.Q6_K, 4096, 14336, w16, x8, true, "", 0},
		{"down 8b Q8_0", quant.Q8_0, 4096, 14336, w16, x8, true, "", 0},
		{"integer path off", quant.Q4_K, 4096, 14336, w16, x8, false, "", 0},
		{"cols 1536", quant.Q4_K, 4096, 1536, w16, x8, true, "", 0},
		{"cols 1024", quant.Q4_K, 4096, 1024, w16, x8, true, "gemvq_sk_p", 16},
		{"x 4-byte aligned", quant.Q4_K, 4096, 14336, w16, x8 + 4, true, "", 0},
		{"Q4_K 8-byte aligned", quant.Q4_K, 4096, 14336, w16 + 8, x8, true, "", 0},
		{"down 70b: 28 slices, 896 blocks", quant.Q4_K, 8192, 28672, w16, x8, true, "", 0},
		{"17 slices", quant.Q4_K, 256, 17 * 1024, w16, x8, true, "", 0},
		{"16 slices", quant.Q4_K, 256, 16 * 1024, w16, x8, true, "gemvq_sk_p", 16},
		{"264 blocks", quant.Q4_K, 66 * 256, 4096, w16, x8, true, "gemvq_sk_p", 264},
		{"266 blocks", quant.Q4_K, 19 * 256, 14 * 1024, w16, x8, true, "", 0},
	} {
		k := testKernels(132)
		k.fns = map[string]cudadrv.Function{"gemvq_sk_p": 0, "gemvq_sk_q6ka": 0}
		k.tune.IntegerGEMV = tc.fast
		name, _, blocks, ok := k.gemvSKGeometry(Matrix{Type: tc.typ, Rows: tc.rows, Cols: tc.cols, Ptr: tc.ptr}, tc.x)
		if ok != (tc.kernel != "") || name != tc.kernel || blocks != tc.blocks {
			t.Errorf("%s: %q, %d blocks, %v; want %q, %d", tc.name, name, blocks, ok, tc.kernel, tc.blocks)
		}
	}
}
