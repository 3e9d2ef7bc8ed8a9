package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkGEMVQDecodeShapes compares, in one process, the float GEMV
// path with the integer Q4_K path (Tuning.IntegerGEMV) on the 8b decode launches,
// replayed from CUDA graphs over copies of a layer's matrices (so they
// come from HBM), as effective weight bandwidth ÷ the D2D copy bandwidth of
// the same run: q/k/v (v Q6_K, as in the 16 use_more_bits layers, or
// Q4_K), o, gate+up+SwiGLU (one and two vectors), ffn_down, the output,
// and a whole layer's launch sequence of each kind, each with the float
// path, the integer path for Q4_K only and for Q4_K and Q6_K
// (Tuning.IntegerQ6K); the integer path's x quantization alone; and the
// integer path with one and two units per lane in flight forced
// (Tuning.unroll), and under two more grid targets (warps per SM).
// Integer-path cells include their gemvq_x launch. Run with
// -test.benchtime 1x.
func BenchmarkGEMVQDecodeShapes(b *testing.B) {
	ceiling := copyBandwidth(b)
	d, k := gpu(b)
	var out strings.Builder
	fmt.Fprintf(&out, "D2D copy %.0f GB/s; cells: us per launch sequence, ratio of its weight bytes/s to D2D\n", ceiling/1e9)
	// The benches read k: each variant rebinds it to a view of the load.
	k0 := k
	tuned := func(set func(*Tuning)) {
		t := baseTuning()
		t.Cubin, t.Overlap = k0.tune.Cubin, k0.tune.Overlap
		set(&t)
		k = k0.WithTuning(t)
	}
	err := onStream(d, k, func(c *cudadrv.Ctx, a *arena, s cudadrv.Stream) error {
		tuned(func(*Tuning) {})
		must(k.ReserveFastGEMV(c, s, 14336))
		mats := uploadDecodeShapes(c, a, decodeShapes8B)
		r := rand.New(rand.NewPCG(3, 3))
		x := put(a, normLike(r, 2, 14336))
		y1, y2, y3 := decodeOutputs(a)
		m, bytes := mats.at, mats.bytes
		gemv := func(name string) func(s cudadrv.Stream, i int) error {
			return func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m(name, i), x, y1, 1) }
		}
		layer := func(v, down string) func(s cudadrv.Stream, i int) error {
			return func(s cudadrv.Stream, i int) error {
				if err := k.GEMVFused(c, s, x, 1, GEMVOut{m("q", i), y1}, GEMVOut{m("k", i), y2}, GEMVOut{m(v, i), y3}); err != nil {
					return err
				}
				if err := k.GEMV(c, s, m("o", i), x, y1, 1); err != nil {
					return err
				}
				if err := k.GEMVGLU(c, s, m("gate", i), m("up", i), x, y2, 1, SwiGLU); err != nil {
					return err
				}
				return k.GEMV(c, s, m(down, i), x, y1, 1)
			}
		}
		benches := []decodeBench{
			{"q,k,v6 fused", bytes("q", "k", "v6"), func(s cudadrv.Stream, i int) error {
				return k.GEMVFused(c, s, x, 1, GEMVOut{m("q", i), y1}, GEMVOut{m("k", i), y2}, GEMVOut{m("v6", i), y3})
			}},
			{"q,k,v4 fused", bytes("q", "k", "v4"), func(s cudadrv.Stream, i int) error {
				return k.GEMVFused(c, s, x, 1, GEMVOut{m("q", i), y1}, GEMVOut{m("k", i), y2}, GEMVOut{m("v4", i), y3})
			}},
			{"o 4096x4096", bytes("o"), gemv("o")},
			{"gate,up glu", bytes("gate", "up"), func(s cudadrv.Stream, i int) error {
				return k.GEMVGLU(c, s, m("gate", i), m("up", i), x, y2, 1, SwiGLU)
			}},
			{"gate,up glu nb2", bytes("gate", "up"), func(s cudadrv.Stream, i int) error {
				return k.GEMVGLU(c, s, m("gate", i), m("up", i), x, y2, 2, SwiGLU)
			}},
			{"gate 14336x4096", bytes("gate"), gemv("gate")},
			{"down4 4096x14336", bytes("down4"), gemv("down4")},
			{"down6 4096x14336", bytes("down6"), gemv("down6")},
			{"v6 1024x4096", bytes("v6"), gemv("v6")},
			{"out 128256x4096", bytes("out"), gemv("out")},
			{"layer v4,down4", bytes("q", "k", "v4", "o", "gate", "up", "down4"), layer("v4", "down4")},
			{"layer v6,down6", bytes("q", "k", "v6", "o", "gate", "up", "down6"), layer("v6", "down6")},
		}
		cell := func(bn decodeBench) string {
			ms := timeGraphOn(c, s, 64, bn.fn)
			return fmt.Sprintf("%8.2f us %5.3f", ms*1e3, float64(bn.bytes)/(ms/1e3)/ceiling)
		}
		fmt.Fprintf(&out, "%-26s %-22s %-22s %s\n", "launch", "float", "integer Q4_K", "integer Q4_K+Q6_K")
		for _, bn := range benches {
			tuned(func(t *Tuning) { t.IntegerGEMV = false })
			old := cell(bn)
			tuned(func(t *Tuning) { t.IntegerQ6K = false })
			q4 := cell(bn)
			tuned(func(*Tuning) {})
			fmt.Fprintf(&out, "%-26s %s   %s   %s\n", bn.name, old, q4, cell(bn))
		}
		for _, cols := range []int{4096, 14336} {
			ms := timeGraphOn(c, s, 64, func(s cudadrv.Stream, i int) error {
				return k.quantizeX(c, s, x, cols, 1, k.gemvq.ws[s].ptr)
			})
			fmt.Fprintf(&out, "gemvq_x alone, %5d columns: %6.2f us\n", cols, ms*1e3)
		}
		for _, v := range []struct{ wps, unroll int }{{32, 1}, {32, 2}, {16, 0}, {64, 0}} {
			tuned(func(t *Tuning) { t.gemvWarpsPerSM, t.unroll = v.wps, v.unroll })
			for _, bn := range benches {
				fmt.Fprintf(&out, "integer+q6k w%-2d unroll %d %-26s %s\n", v.wps, v.unroll, bn.name, cell(bn))
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("\n%s", out.String())
}

// BenchmarkGEMVQWarps sweeps the integer launches' warps per block
// (Tuning.warps; 0 = gemvqGeometry's rule) over the 8b decode shapes, each
// timed as 64 launches from a graph over enough copies of its weights to
// exceed the L2 (>= 512 MiB per shape), with x quantized by a launch of
// its own and, for the rule, also with x held as a norm leaves it
// (MarkQuantized). Ratio: weight bytes/s ÷ the D2D copy. Run with
// -test.benchtime 1x.
func BenchmarkGEMVQWarps(b *testing.B) {
	ceiling := copyBandwidth(b)
	d, k := gpu(b)
	k0 := k
	warps := func(w int) {
		t := baseTuning()
		t.Cubin, t.Overlap = k0.tune.Cubin, k0.tune.Overlap
		t.warps = w
		k = k0.WithTuning(t)
	}
	warps(0)
	var out strings.Builder
	fmt.Fprintf(&out, "D2D copy %.0f GB/s; cells: us per launch, ratio of weight bytes/s to D2D\n", ceiling/1e9)
	err := onStream(d, k, func(c *cudadrv.Ctx, a *arena, s cudadrv.Stream) error {
		must(k.ReserveFastGEMV(c, s, 14336))
		mats := uploadDecodeShapes(c, a, decodeShapes8B)
		m, bytes := mats.at, mats.bytes
		r := rand.New(rand.NewPCG(3, 3))
		x := put(a, normLike(r, 2, 14336))
		y1, y2, y3 := decodeOutputs(a)
		benches := []decodeBench{
			{"q,k,v6 fused", bytes("q", "k", "v6"), func(s cudadrv.Stream, i int) error {
				return k.GEMVFused(c, s, x, 1, GEMVOut{m("q", i), y1}, GEMVOut{m("k", i), y2}, GEMVOut{m("v6", i), y3})
			}},
			{"o 4096x4096", bytes("o"), func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m("o", i), x, y1, 1) }},
			{"gate,up glu", bytes("gate", "up"), func(s cudadrv.Stream, i int) error {
				return k.GEMVGLU(c, s, m("gate", i), m("up", i), x, y2, 1, SwiGLU)
			}},
			{"down4 4096x14336", bytes("down4"), func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m("down4", i), x, y1, 1) }},
			{"down6 4096x14336", bytes("down6"), func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m("down6", i), x, y1, 1) }},
			{"v6 1024x4096", bytes("v6"), func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m("v6", i), x, y1, 1) }},
			{"out 128256x4096", bytes("out"), func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m("out", i), x, y1, 1) }},
		}
		cell := func(bn decodeBench, held bool) string {
			fn := bn.fn
			if held {
				cols := 4096
				if strings.HasPrefix(bn.name, "down") {
					cols = 14336
				}
				fn = func(s cudadrv.Stream, i int) error {
					k.MarkQuantized(s, x, 1, cols)
					return bn.fn(s, i)
				}
			}
			ms := timeGraphOn(c, s, 64, fn)
			return fmt.Sprintf("%8.2f us %5.3f", ms*1e3, float64(bn.bytes)/(ms/1e3)/ceiling)
		}
		fmt.Fprintf(&out, "%-18s %-20s %-20s %-20s %-20s %-20s %s\n", "launch", "rule", "rule, x held", "1 warp", "2 warps", "4 warps", "8 warps")
		for _, bn := range benches {
			warps(0)
			fmt.Fprintf(&out, "%-18s %s %s", bn.name, cell(bn, false), cell(bn, true))
			for _, w := range []int{1, 2, 4, 8} {
				warps(w)
				fmt.Fprintf(&out, " %s", cell(bn, false))
			}
			warps(0)
			fmt.Fprintln(&out)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + out.String())
}

// decodeShapes8B are the matrices of the 8b shape's decode step (Q4_K_M:
// v and down in Q6_K in half the layers, Q4_K in the others).
var decodeShapes8B = []decodeShape{
	{"q", quant.Q4_K, 4096, 4096}, {"k", quant.Q4_K, 1024, 4096}, {"v6", quant.Q6_K, 1024, 4096},
	{"v4", quant.Q4_K, 1024, 4096}, {"o", quant.Q4_K, 4096, 4096}, {"gate", quant.Q4_K, 14336, 4096},
	{"up", quant.Q4_K, 14336, 4096}, {"down6", quant.Q6_K, 4096, 14336}, {"down4", quant.Q4_K, 4096, 14336},
	{"out", quant.Q6_K, 128256, 4096},
}
