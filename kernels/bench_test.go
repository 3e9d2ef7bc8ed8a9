package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// d2dOnce caches the device-to-device copy bandwidth (bytes read + written
// per second, 1 GiB copies), the ceiling GEMV bandwidth is compared with.
var (
	d2dOnce sync.Once
	d2dBW   float64
)

func copyBandwidth(b *testing.B) float64 {
	d, _ := gpu(b)
	d2dOnce.Do(func() {
		const n = 1 << 30
		err := d.Do(func(c *cudadrv.Ctx) error {
			a := &arena{c: c}
			defer a.free()
			src, dst := a.alloc(n), a.alloc(n)
			must(c.MemsetD8(src, 1, n, 0))
			ms := timeIt(c, 10, func(int) error { return c.CopyDtoD(dst, src, n, 0) })
			d2dBW = 2 * n / (ms / 1e3)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	})
	return d2dBW
}

// timeIt runs fn once to warm up, then iters times between two events on
// the default stream; returns milliseconds per iteration.
func timeIt(c *cudadrv.Ctx, iters int, fn func(i int) error) float64 {
	return timeOn(c, 0, iters, fn)
}

// timeOn is timeIt on stream s, for launches that need a stream of their
// own (the integer GEMVs' scratch is reserved per stream).
func timeOn(c *cudadrv.Ctx, s cudadrv.Stream, iters int, fn func(i int) error) float64 {
	must(fn(0))
	must(c.Synchronize())
	e0, _ := c.NewEvent(0)
	e1, _ := c.NewEvent(0)
	defer c.DestroyEvent(e0)
	defer c.DestroyEvent(e1)
	must(c.Record(e0, s))
	for i := 0; i < iters; i++ {
		must(fn(i))
	}
	must(c.Record(e1, s))
	must(c.EventSync(e1))
	ms, err := c.Elapsed(e0, e1)
	must(err)
	return float64(ms) / float64(iters)
}

// BenchmarkGEMV measures decode GEMV on the 8b shape's largest matrices
// (14336x4096 and 4096x14336), cycling through enough copies that the
// weights come from HBM, not the 50 MB L2. Reported: effective weight
// bandwidth (GB/s) and its ratio to the device-to-device copy bandwidth.
func BenchmarkGEMV(b *testing.B) {
	ceiling := copyBandwidth(b)
	b.Logf("device-to-device copy: %.0f GB/s (read+write)", ceiling/1e9)
	for _, typ := range gemvTypes {
		for _, sh := range []struct{ rows, cols int }{{14336, 4096}, {4096, 14336}} {
			for _, nb := range []int{1, 2, 4, 8} {
				if nb > 1 && sh.rows != 14336 {
					continue
				}
				b.Run(fmt.Sprintf("%v/%dx%d/nb%d", typ, sh.rows, sh.cols, nb), func(b *testing.B) {
					d, k := gpu(b)
					err := d.Do(func(c *cudadrv.Ctx) error {
						a := &arena{c: c}
						defer a.free()
						rb, _ := typ.RowBytes(int64(sh.cols))
						size := rb * int64(sh.rows)
						copies := int(max(4, (512<<20)/size))
						one := make([]byte, size)
						must(quant.FillRandomParallel(typ, one, 1, 0.05))
						ws := make([]Matrix, copies)
						for i := range ws {
							ws[i] = Matrix{Type: typ, Rows: sh.rows, Cols: sh.cols, Ptr: a.alloc(size)}
							must(c.CopyHtoD(ws[i].Ptr, one, 0))
						}
						r := rand.New(rand.NewPCG(1, 1))
						x := put(a, randVec(r, nb*sh.cols, 1))
						y := a.alloc(int64(nb * sh.rows * 4))
						iters := max(b.N, 50)
						ms := timeIt(c, iters, func(i int) error { return k.GEMV(c, 0, ws[i%copies], x, y, nb) })
						bw := float64(size) / (ms / 1e3)
						b.ReportMetric(ms*1e3, "us/op")
						b.ReportMetric(bw/1e9, "GB/s")
						b.ReportMetric(bw/ceiling, "xD2D")
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}

// BenchmarkGEMM measures the tensor-core prefill GEMM: 512 tokens through
// a 14336x4096 weight matrix; reports TFLOP/s (2*M*N*K per product).
func BenchmarkGEMM(b *testing.B) {
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.F16, quant.Q4_0, quant.Q5_K, quant.BF16} {
		for _, m := range []int{64, 512} {
			b.Run(fmt.Sprintf("%v/m%d", typ, m), func(b *testing.B) {
				d, k := gpu(b)
				const n, kk = 14336, 4096
				err := d.Do(func(c *cudadrv.Ctx) error {
					a := &arena{c: c}
					defer a.free()
					rb, _ := typ.RowBytes(kk)
					one := make([]byte, rb*n)
					must(quant.FillRandomParallel(typ, one, 2, 0.05))
					w := Matrix{Type: typ, Rows: n, Cols: kk, Ptr: put(a, one)}
					r := rand.New(rand.NewPCG(2, 2))
					x := put(a, randVec(r, m*kk, 1))
					y := a.alloc(int64(m * n * 4))
					ms := timeIt(c, max(b.N, 20), func(int) error { return k.GEMM(c, 0, w, x, y, m) })
					b.ReportMetric(ms*1e3, "us/op")
					b.ReportMetric(2*float64(m)*n*kk/(ms/1e3)/1e12, "TFLOP/s")
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkLaunchOverhead compares 200 small kernel launches issued one by
// one with the same launches replayed from a CUDA graph: microseconds per
// kernel, the cost a decode step's ~15 kernels per layer pay.
func BenchmarkLaunchOverhead(b *testing.B) {
	d, k := gpu(b)
	const kernels = 200
	err := onStream(d, k, func(c *cudadrv.Ctx, a *arena, s cudadrv.Stream) error {
		y, x := a.alloc(1024*4), a.alloc(1024*4)
		must(c.MemsetD32(y, 0, 1024, s))
		must(c.MemsetD32(x, 0, 1024, s))
		seq := func() error {
			for i := 0; i < kernels; i++ {
				if err := k.Add(c, s, y, x, 1024); err != nil {
					return err
				}
			}
			return nil
		}
		must(c.BeginCapture(s, cudadrv.CaptureThreadLocal))
		if err := seq(); err != nil {
			c.EndCapture(s)
			return err
		}
		g, err := c.EndCapture(s)
		must(err)
		defer c.DestroyGraph(g)
		ge, err := c.Instantiate(g)
		must(err)
		defer c.DestroyGraphExec(ge)
		e0, _ := c.NewEvent(0)
		e1, _ := c.NewEvent(0)
		defer c.DestroyEvent(e0)
		defer c.DestroyEvent(e1)
		iters := max(b.N, 20)
		measure := func(fn func() error) float64 {
			must(fn())
			must(c.StreamSync(s))
			must(c.Record(e0, s))
			for i := 0; i < iters; i++ {
				must(fn())
			}
			must(c.Record(e1, s))
			must(c.EventSync(e1))
			ms, _ := c.Elapsed(e0, e1)
			return float64(ms) * 1e3 / float64(iters*kernels)
		}
		direct := measure(seq)
		graph := measure(func() error { return c.GraphLaunch(ge, s) })
		b.ReportMetric(direct, "us/kernel-direct")
		b.ReportMetric(graph, "us/kernel-graph")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
