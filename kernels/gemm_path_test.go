package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TestGEMMConfigsMirror checks gemmConfigs against gemm.cu's HGEMM lines
// (the launcher sizes grids and shared memory from the Go copy) and that
// every configuration satisfies the kernel's tiling constraints.
func TestGEMMConfigsMirror(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("gemm.cu")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^HGEMM\((\w+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)\)`)
	lines := re.FindAllStringSubmatch(string(src), -1)
	if len(lines) != len(gemmConfigs) {
		t.Fatalf("gemm.cu has %d HGEMM instances, gemmConfigs %d", len(lines), len(gemmConfigs))
	}
	for i, l := range lines {
		n := make([]int, 7)
		for j := range n {
			n[j], _ = strconv.Atoi(l[j+2])
		}
		g := gemmConfigs[i]
		if want := []int{g.bm, g.bn, g.bk, g.wm, g.wn, g.stages, g.minBlocks}; l[1] != g.name || fmt.Sprint(n) != fmt.Sprint(want) {
			t.Errorf("gemm.cu %s %v, gemmConfigs %s %v", l[1], n, g.name, want)
		}
		cpr := g.bk / 8
		switch {
		case g.bk != 32 && g.bk != 64:
			t.Errorf("%s: bk %d", g.name, g.bk)
		case g.bm%g.wm != 0 || g.bn%g.wn != 0 || g.wm%16 != 0 || g.wn%16 != 0:
			t.Errorf("%s: warp tile %dx%d does not divide %dx%d", g.name, g.wm, g.wn, g.bm, g.bn)
		case g.bm*cpr%g.threads() != 0 || g.bn*cpr%g.threads() != 0:
			t.Errorf("%s: %d threads do not divide the tile's chunks", g.name, g.threads())
		case 256%g.bn != 0 || 256%g.bm != 0:
			t.Errorf("%s: tile %dx%d does not fit planGEMM's 256-row panels and chunks", g.name, g.bm, g.bn)
		case g.smem() > 227<<10 || g.smem()*g.minBlocks > 228<<10:
			t.Errorf("%s: %d bytes of shared memory x %d blocks exceed a Hopper multiprocessor", g.name, g.smem(), g.minBlocks)
		}
	}
}

// TestPlanGEMM checks that chunks and panels respect the caps and that
// the workspace holds them.
func TestPlanGEMM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rows, cols, m int
		inPlace       bool
	}{{14336, 4096, 512, false}, {4096, 14336, 2048, false}, {128256, 4096, 16, false}, {4096, 4096, 100000, true}, {96, 512, 1, false}} {
		p := planGEMM(baseTuning().gemm, Matrix{Type: quant.Q4_K, Rows: tc.rows, Cols: tc.cols}, tc.m, tc.inPlace)
		xb := int64(p.mChunk) * int64(tc.cols) * 2
		if p.mChunk < 1 || p.mChunk > tc.m || (p.mChunk < tc.m && (xb > baseTuning().gemm.xBytes && p.mChunk > 256 || p.mChunk%256 != 0)) {
			t.Errorf("%+v: chunk %d tokens (%d bytes)", tc, p.mChunk, xb)
		}
		pb := int64(p.panelRows) * int64(tc.cols) * 2
		if tc.inPlace != (p.panelRows == 0) || (!tc.inPlace && p.panelRows < tc.rows && (pb > baseTuning().gemm.panelBytes && p.panelRows > 256 || p.panelRows%256 != 0)) {
			t.Errorf("%+v: panel %d rows (%d bytes)", tc, p.panelRows, pb)
		}
		if p.wsBytes < xb+pb || p.xBytes%256 != 0 {
			t.Errorf("%+v: workspace %d bytes for %d + %d", tc, p.wsBytes, xb, pb)
		}
	}
}

// withTuning runs fn with a view of k whose GEMM path follows k's tuning
// changed by set.
func withTuning(k *Kernels, set func(*gemmTuning), fn func(k *Kernels)) {
	t := k.Tuning()
	set(&t.gemm)
	fn(k.WithTuning(t))
}

// checkGEMMResult compares y (m x n) with float64 products of the
// dequantized weights; tolerance as TestGEMM (f16 operands: |err| <=
// 2e-3*sum|w x| + 1e-6, NMSE <= 1e-6).
func checkGEMMResult(t *testing.T, deq, xs, got []float32, m, n, k int) {
	t.Helper()
	var se, sr float64
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var ref, mag float64
			for e := 0; e < k; e++ {
				p := float64(deq[j*k+e]) * float64(xs[i*k+e])
				ref += p
				mag += math.Abs(p)
			}
			g := float64(got[i*n+j])
			if e := math.Abs(g - ref); !(e <= 2e-3*mag+1e-6) {
				t.Fatalf("y[%d][%d] = %v, ref %v (err %.3g, sum|wx| %.3g)", i, j, g, ref, e, mag)
			}
			se += (g - ref) * (g - ref)
			sr += ref * ref
		}
	}
	if nmse := se / sr; nmse > 1e-6 {
		t.Fatalf("NMSE %.3g > 1e-6", nmse)
	}
}

// TestGEMMPaths drives every f16 GEMM configuration and every split of the
// dequantize-then-GEMM path (weight panels, token chunks, ragged tiles, a k
// tail shorter than a tile step, misaligned F16 weights read through the
// dequantizer, unpaired output stores) and the on-the-fly kernel, each
// against the float64 reference.
func TestGEMMPaths(t *testing.T) {
	type tcase struct {
		name    string
		typ     quant.Type
		m, n, k int
		set     func(*gemmTuning)
		wOff    int64 // weight bytes offset from a 256-byte aligned allocation
		yOff    int64
	}
	var cases []tcase
	for _, g := range gemmConfigs {
		name := g.name
		cases = append(cases,
			tcase{"config-" + name, quant.Q4_K, 200, 300, 512, func(tu *gemmTuning) { tu.config = name }, 0, 0},
			tcase{"config-" + name + "-ktail", quant.F16, 33, 70, 96, func(tu *gemmTuning) { tu.config = name }, 0, 0})
	}
	cases = append(cases,
		tcase{"panels", quant.Q6_K, 77, 700, 1024, func(tu *gemmTuning) { tu.panelBytes = 256 * 1024 * 2 }, 0, 0},
		tcase{"chunks", quant.Q8_0, 600, 130, 512, func(tu *gemmTuning) { tu.xBytes = 256 * 512 * 2 }, 0, 0},
		tcase{"chunks+panels", quant.Q5_K, 530, 520, 256, func(tu *gemmTuning) { tu.xBytes = 256 * 256 * 2; tu.panelBytes = 256 * 256 * 2 }, 0, 0},
		tcase{"f16-in-place-chunks", quant.F16, 300, 258, 256, func(tu *gemmTuning) { tu.xBytes = 256 * 256 * 2 }, 0, 0},
		tcase{"f16-misaligned", quant.F16, 40, 130, 512, func(*gemmTuning) {}, 2, 0},
		tcase{"odd-rows", quant.Q4_0, 21, 97, 512, func(*gemmTuning) {}, 0, 0},
		tcase{"y-unaligned", quant.BF16, 19, 64, 512, func(*gemmTuning) {}, 0, 4},
		tcase{"int8", quant.INT8Row, 50, 100, 512, func(*gemmTuning) {}, 0, 0},
		tcase{"f32", quant.F32, 9, 33, 256, func(*gemmTuning) {}, 0, 0},
		tcase{"fused", quant.Q4_K, 40, 130, 512, func(tu *gemmTuning) { tu.fusedMaxM = 1 << 30 }, 0, 0},
	)
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%v/m%d_n%d_k%d", tc.name, tc.typ, tc.m, tc.n, tc.k), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.typ), uint64(tc.m*tc.n)))
			data, deq := randMatrix(tc.typ, tc.n, tc.k, uint64(tc.n*tc.k)+uint64(tc.m))
			xs := randVec(r, tc.m*tc.k, 1)
			// Skipped here: a Skip inside run's callback would end the
			// device goroutine (Device.Do returns that as an error).
			if _, k := gpu(t); !k.mma() && tc.name != "fused" {
				t.Skipf("the f16 GEMM path needs compute_80, device loaded %s", k.Arch)
			}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				buf := put(a, append(make([]byte, tc.wOff), data...))
				w := Matrix{Type: tc.typ, Rows: tc.n, Cols: tc.k, Ptr: buf.Add(tc.wOff)}
				x := put(a, xs)
				y := a.alloc(int64(tc.m*tc.n*4) + tc.yOff).Add(tc.yOff)
				poison(a, y, tc.m*tc.n)
				withTuning(k, tc.set, func(k *Kernels) { must(k.GEMM(c, 0, w, x, y, tc.m)) })
				checkGEMMResult(t, deq, xs, get[float32](a, y, tc.m*tc.n), tc.m, tc.n, tc.k)
			})
		})
	}
}

// TestGEMMDequant compares gemm_deq_<type> with engine/quant's
// DequantizeRows rounded to f16: the GPU decodes in float32 through the
// 0.5+q/256 trick (a few float32 ulps off), then rounds once, so values
// may differ by one f16 ulp: |gpu - ref| <= 2^-10 |ref| + 2^-24.
func TestGEMMDequant(t *testing.T) {
	// 33 rows of 24 parts (rows 5.. of 38): the last warp is ragged.
	const rows, cols = 38, 768
	for _, typ := range gemvTypes {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/direct=%v", typ, direct), func(t *testing.T) {
				data, deq := randMatrix(typ, rows, cols, uint64(typ)+99)
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					suf, err := (Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: 1}).check("test")
					must(err)
					w := Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: put(a, data)}
					n := (rows - 5) * cols
					out := a.alloc(int64(n+64) * 2)
					must(c.MemsetD8(out, 0xff, int64(n+64)*2, 0))
					// Rows 5.. only: checks the panel offset too.
					withTuning(k, func(tu *gemmTuning) { tu.deqDirect = direct }, func(k *Kernels) {
						must(k.gemmDequant(c, 0, suf, w, 5, rows-5, out))
					})
					got := get[uint16](a, out, n+64)
					for i, h := range got[:n] {
						ref := deq[5*cols+i]
						g := quant.F16ToF32(h)
						if e := math.Abs(float64(g - ref)); e > math.Abs(float64(ref))/1024+1.0/(1<<24) || math.IsNaN(float64(g)) {
							t.Fatalf("element %d: gpu %v, ref %v", i, g, ref)
						}
					}
					for i, h := range got[n:] {
						if h != 0xffff {
							t.Fatalf("wrote past the panel: element %d = %#x", n+i, h)
						}
					}
				})
			})
		}
	}
}

// TestGEMMPick pins the per-shape choice to the configurations that were
// fastest for the 8b shapes on a device of 132 multiprocessors.
func TestGEMMPick(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m, n int
		want string
	}{
		{512, 1024, "m64n64k32"}, {128, 4096, "m64n64k32"}, {16, 4096, "m64n64k32"},
		{512, 4096, "m128n128k64"}, {128, 14336, "m128n128k64"}, {64, 14336, "m128n128k64"}, {2048, 1024, "m128n128k64"},
		{512, 14336, "m128n128k32"}, {2048, 4096, "m128n128k32"}, {2048, 14336, "m128n128k32"},
	} {
		if got := gemmPick(baseTuning().gemm, tc.m, tc.n, 132).name; got != tc.want {
			t.Errorf("gemmPick(m %d, n %d) = %s, want %s", tc.m, tc.n, got, tc.want)
		}
	}
}
