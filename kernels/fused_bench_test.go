package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// timeGraph captures iters calls of fn (call i on stream s) into one CUDA
// graph, replays it once to warm up, then times one replay: milliseconds
// per call, with no host launch cost in the way (decode steps run as
// graphs, and a 2 MB GEMV takes less device time than a host launch).
func timeGraph(c *cudadrv.Ctx, iters int, fn func(s cudadrv.Stream, i int) error) float64 {
	s, err := c.NewStream(cudadrv.StreamNonBlocking)
	must(err)
	defer c.DestroyStream(s)
	return timeGraphOn(c, s, iters, fn)
}

// timeGraphOn is timeGraph on the caller's stream s (one whose fast-GEMV
// scratch is reserved, say).
func timeGraphOn(c *cudadrv.Ctx, s cudadrv.Stream, iters int, fn func(s cudadrv.Stream, i int) error) float64 {
	must(c.BeginCapture(s, cudadrv.CaptureThreadLocal))
	for i := 0; i < iters; i++ {
		if err := fn(s, i); err != nil {
			c.EndCapture(s)
			panic(err)
		}
	}
	g, err := c.EndCapture(s)
	must(err)
	defer c.DestroyGraph(g)
	ge, err := c.Instantiate(g)
	must(err)
	defer c.DestroyGraphExec(ge)
	must(c.GraphLaunch(ge, s))
	must(c.StreamSync(s))
	e0, _ := c.NewEvent(0)
	e1, _ := c.NewEvent(0)
	defer c.DestroyEvent(e0)
	defer c.DestroyEvent(e1)
	must(c.Record(e0, s))
	must(c.GraphLaunch(ge, s))
	must(c.Record(e1, s))
	must(c.EventSync(e1))
	ms, err := c.Elapsed(e0, e1)
	must(err)
	return float64(ms) / float64(iters)
}

// BenchmarkDecodeShapes measures the 8b decode step's matrix products,
// one at a time and fused, replayed from CUDA graphs over several copies
// of a layer's matrices (so they come from HBM), as effective weight
// bandwidth ÷ the D2D copy bandwidth of the same run: q/k/v separately vs
// one gemv_fused launch; gate, up and SwiGLU vs one GEMVGLU launch; the
// Q6_K matrices (v, ffn_down, output); under three grid targets (warps
// per SM). Run with -test.benchtime 1x.
func BenchmarkDecodeShapes(b *testing.B) {
	ceiling := copyBandwidth(b)
	d, k := gpu(b)
	var out strings.Builder
	fmt.Fprintf(&out, "D2D copy %.0f GB/s; cells: us per launch sequence, ratio of its weight bytes/s to D2D\n", ceiling/1e9)
	err := d.Do(func(c *cudadrv.Ctx) error {
		a := &arena{c: c}
		defer a.free()
		shapes := []decodeShape{
			{"q", quant.Q4_K, 4096, 4096}, {"k", quant.Q4_K, 1024, 4096}, {"v6", quant.Q6_K, 1024, 4096},
			{"v4", quant.Q4_K, 1024, 4096}, {"o", quant.Q4_K, 4096, 4096}, {"gate", quant.Q4_K, 14336, 4096},
			{"up", quant.Q4_K, 14336, 4096}, {"down6", quant.Q6_K, 4096, 14336}, {"down4", quant.Q4_K, 4096, 14336},
			{"ffn6", quant.Q6_K, 14336, 4096}, {"out", quant.Q6_K, 128256, 4096},
		}
		mats := uploadDecodeShapes(c, a, shapes)
		r := rand.New(rand.NewPCG(3, 3))
		x := put(a, randVec(r, 2*14336, 1))
		y1, y2, y3 := decodeOutputs(a)
		m, bytes := mats.at, mats.bytes
		gemv := func(name string) func(s cudadrv.Stream, i int) error {
			return func(s cudadrv.Stream, i int) error { return k.GEMV(c, s, m(name, i), x, y1, 1) }
		}
		benches := []decodeBench{
			{"q alone", bytes("q"), gemv("q")},
			{"k alone", bytes("k"), gemv("k")},
			{"o alone", bytes("o"), gemv("o")},
			{"q,k,v6 separate", bytes("q", "k", "v6"), func(s cudadrv.Stream, i int) error {
				for _, nm := range []string{"q", "k", "v6"} {
					if err := k.GEMV(c, s, m(nm, i), x, y1, 1); err != nil {
						return err
					}
				}
				return nil
			}},
			{"q,k,v6 fused", bytes("q", "k", "v6"), func(s cudadrv.Stream, i int) error {
				return k.GEMVFused(c, s, x, 1, GEMVOut{m("q", i), y1}, GEMVOut{m("k", i), y2}, GEMVOut{m("v6", i), y3})
			}},
			{"q,k,v4 fused", bytes("q", "k", "v4"), func(s cudadrv.Stream, i int) error {
				return k.GEMVFused(c, s, x, 1, GEMVOut{m("q", i), y1}, GEMVOut{m("k", i), y2}, GEMVOut{m("v4", i), y3})
			}},
			{"gate,up,swiglu separate", bytes("gate", "up"), func(s cudadrv.Stream, i int) error {
				if err := k.GEMV(c, s, m("gate", i), x, y2, 1); err != nil {
					return err
				}
				if err := k.GEMV(c, s, m("up", i), x, y3, 1); err != nil {
					return err
				}
				return k.SwiGLU(c, s, y2, y3, y2, 14336)
			}},
			{"gate,up glu fused", bytes("gate", "up"), func(s cudadrv.Stream, i int) error {
				return k.GEMVGLU(c, s, m("gate", i), m("up", i), x, y2, 1, SwiGLU)
			}},
			{"gate,up glu fused nb2", 2 * bytes("gate", "up") / 2, func(s cudadrv.Stream, i int) error {
				return k.GEMVGLU(c, s, m("gate", i), m("up", i), x, y2, 2, SwiGLU)
			}},
			{"gate alone", bytes("gate"), gemv("gate")},
			{"down4 alone", bytes("down4"), gemv("down4")},
		}
		q6 := []decodeBench{
			{"v6", bytes("v6"), gemv("v6")},
			{"down6", bytes("down6"), gemv("down6")},
			{"ffn6 14336x4096", bytes("ffn6"), gemv("ffn6")},
			{"out 128256x4096", bytes("out"), gemv("out")},
		}
		// The benches read k: each sweep point rebinds it to a view.
		k0 := k
		cell := func(bn decodeBench) string {
			ms := timeGraph(c, 64, bn.fn)
			return fmt.Sprintf("%8.2f us %5.3f", ms*1e3, float64(bn.bytes)/(ms/1e3)/ceiling)
		}
		for _, wps := range []int{16, 32, 64} {
			tu := k0.Tuning()
			tu.gemvWarpsPerSM = wps
			k = k0.WithTuning(tu)
			for _, bn := range benches {
				fmt.Fprintf(&out, "w%-2d %-26s %s\n", wps, bn.name, cell(bn))
			}
			for _, bn := range q6 {
				fmt.Fprintf(&out, "w%-2d Q6_K %-16s %s\n", wps, bn.name, cell(bn))
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("\n%s", out.String())
}

// decodeShape is one matrix of an 8B Q4_K_M decode step.
type decodeShape struct {
	name       string
	typ        quant.Type
	rows, cols int
}

// uploadDecodeShapes puts random matrices of each shape on the device:
// enough copies of each to exceed 512 MiB (at least two, at most 64) so
// that a benchmark cycling through them reads from HBM rather than the
// 60 MB L2 (four copies of the 9 MB 4096x4096 matrix would fit in
// it).
func uploadDecodeShapes(c *cudadrv.Ctx, a *arena, shapes []decodeShape) decodeMats {
	mats := decodeMats{}
	for si, sh := range shapes {
		rb, _ := sh.typ.RowBytes(int64(sh.cols))
		one := make([]byte, rb*int64(sh.rows))
		must(quant.FillRandomParallel(sh.typ, one, uint64(si+1), 0.05))
		n := min(64, max(2, int((512<<20)/int64(len(one)))+1))
		for range n {
			m := Matrix{Type: sh.typ, Rows: sh.rows, Cols: sh.cols, Ptr: a.alloc(int64(len(one)))}
			must(c.CopyHtoD(m.Ptr, one, 0))
			mats[sh.name] = append(mats[sh.name], m)
		}
	}
	must(c.StreamSync(0))
	return mats
}

// decodeBench is one launch sequence of a decode-shape benchmark: the
// weight bytes it reads and how to enqueue its i-th repetition (cycling
// through the copies of decodeMats).
type decodeBench struct {
	name  string
	bytes int64
	fn    func(s cudadrv.Stream, i int) error
}

// decodeOutputs allocates a decode-shape benchmark's outputs for up to
// two vectors: y1 large enough for the output projection (128256 rows),
// y2 and y3 for the layers' matrices (up to 14336 rows).
func decodeOutputs(a *arena) (y1, y2, y3 cudadrv.DevPtr) {
	return a.alloc(2 * 128256 * 4), a.alloc(2 * 14336 * 4), a.alloc(2 * 14336 * 4)
}

// decodeMats are uploadDecodeShapes' copies of each matrix, by name.
type decodeMats map[string][]Matrix

// at is name's copy for iteration i, cycling through the copies.
func (d decodeMats) at(name string, i int) Matrix { l := d[name]; return l[i%len(l)] }

// bytes is the weight bytes one launch over the named matrices reads.
func (d decodeMats) bytes(names ...string) int64 {
	var n int64
	for _, nm := range names {
		n += d[nm][0].Bytes()
	}
	return n
}
