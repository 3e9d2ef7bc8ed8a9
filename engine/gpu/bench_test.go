package gpu

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// llama.cpp's figures on the machine the goals were set on: resident 8b
// Q4_K_M, batch 1.
const (
	peerDecode  = 261.4
	peerPrefill = 9391.0
)

// BenchmarkResident8B measures the resident 8b shape at batch 1 (set
// STRATA_8B_GGUF to a synthetic llama 8b q4_k_m file): decode tok/s with
// and without the CUDA graph, prefill tok/s of a 512-token prompt, the
// device time of a decode step and of its GEMVs alone, their effective
// weight bandwidth ÷ the device-to-device copy bandwidth measured in the
// same run, and the per-step launch overhead. Run with -test.benchtime 1x:
// each metric is averaged over a fixed number of steps.
func BenchmarkResident8B(b *testing.B) {
	cpu, dev := openBig(b, "STRATA_8B_GGUF", "8b")
	t0 := time.Now()
	g := loadGPU(b, cpu, Options{MaxSeqs: 1, MaxContext: 1024})
	b.Logf("%s: loaded %.2f GiB of weights in %v", dev.Name(), gib(g.WeightBytes()), time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()
	V := cpu.Config.Vocab

	d2d := copyBandwidth(b, g)
	b.Logf("device-to-device copy: %.0f GB/s (read+write)", d2d/1e9)

	s, err := g.NewSequence(0)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	// Prefill: a 512-token prompt into an empty sequence, once to warm up
	// (buffers, GEMM), then timed.
	prompt := promptTokens(V, 512, 1)
	const prefillIters = 4
	var prefill time.Duration
	for i := 0; i <= prefillIters; i++ {
		s.Reset()
		st := time.Now()
		if err := g.Forward(ctx, []Step{{Seq: s, Tokens: prompt}}); err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			prefill += time.Since(st)
		}
	}
	prefillTPS := float64(prefillIters*len(prompt)) / prefill.Seconds()

	// Decode: steps after a short prompt, the graph captured in warm-up.
	decode := func(graphs bool, steps int) time.Duration {
		g.opts.NoGraphs = !graphs
		s.Reset()
		batch := []Step{{Seq: s, Tokens: promptTokens(V, 16, 2)}}
		var el time.Duration
		for i := 0; i < steps+8; i++ {
			st := time.Now()
			if err := g.Forward(ctx, batch); err != nil {
				b.Fatal(err)
			}
			if i >= 8 {
				el += time.Since(st)
			}
			batch[0].Tokens = []int32{sample.Argmax(batch[0].Logits[0])}
		}
		return el / time.Duration(steps)
	}
	var wbytes int64
	for _, l := range g.layers {
		for _, mt := range []int64{l.q.Bytes(), l.k.Bytes(), l.v.Bytes(), l.o.Bytes(), l.gate.Bytes(), l.up.Bytes(), l.down.Bytes()} {
			wbytes += mt
		}
	}
	wbytes += g.output.Bytes()

	// Each configuration: the fused launches (the default) and, for
	// comparison in the same run, every kernel separate; the decode step's
	// graphs are dropped between them.
	type result struct {
		graph, direct, stepGPU, gemvGPU, hostDirect, hostGraph time.Duration
		nodes                                                  int
	}
	// The model's kernels' tuning (helpers_test.go's variants): the
	// integer or the float GEMVs, or Q6_K's.
	k0 := g.k
	fast, fastQ6 := k0.Tuning().IntegerGEMV, k0.Tuning().IntegerQ6K
	defer func() { g.k, g.pass = k0, defaultPassTuning }()
	measure := func(gemvFused, ewFused, fastGEMV, fastQ6K bool) result {
		g.pass.fuseGEMV, g.pass.fuseElementwise = gemvFused, ewFused
		t := k0.Tuning()
		t.IntegerGEMV, t.IntegerQ6K = fastGEMV, fastQ6K
		g.k = k0.WithTuning(t)
		if err := g.dev.Do(func(c *cudadrv.Ctx) error { g.dropGraphs(c); return nil }); err != nil {
			b.Fatal(err)
		}
		const steps = 128
		var r result
		r.direct = decode(false, steps)
		r.graph = decode(true, steps)
		g.opts.NoGraphs = false
		r.stepGPU, r.gemvGPU, r.hostDirect, r.hostGraph = deviceTimes(b, g, s)
		r.nodes = g.Stats().GraphNodes
		return r
	}
	type config struct {
		name                         string
		gemv, elemwise, fast, fastQ6 bool
	}
	cfgList := []config{{"unfused", false, false, fast, fastQ6}, {"gemv-fused", true, false, fast, fastQ6}, {"fused", true, true, fast, fastQ6}}
	if fast {
		// The integer path's variants and the float GEMVs in the same
		// process, for comparison.
		if fastQ6 {
			cfgList = append(cfgList, config{"fused-int-q4k-only", true, true, true, false})
		}
		cfgList = append(cfgList, config{"fused-float-gemv", true, true, false, false})
	}
	b.Logf("integer GEMV (kernels.Tuning.IntegerGEMV): %v, with Q6_K (IntegerQ6K): %v", fast, fastQ6)
	for _, cfgs := range cfgList {
		r := measure(cfgs.gemv, cfgs.elemwise, cfgs.fast, cfgs.fastQ6)
		decTPS := 1 / r.graph.Seconds()
		gemvBW := float64(wbytes) / r.gemvGPU.Seconds()
		stepBW := float64(wbytes) / r.stepGPU.Seconds()
		if cfgs.name == "fused" {
			b.ReportMetric(decTPS, "decode-tok/s")
			b.ReportMetric(1/r.direct.Seconds(), "decode-nograph-tok/s")
			b.ReportMetric(gemvBW/d2d, "gemv-BW/D2D")
			b.ReportMetric(float64(r.direct-r.graph)/1e3, "us-saved-by-graph/step")
		}
		b.Logf("[%s] decode batch 1: %.1f tok/s with the graph (%.3f ms/step), %.1f tok/s without (%.3f ms/step); llama.cpp %.1f tok/s → %.2fx",
			cfgs.name, decTPS, ms(r.graph), 1/r.direct.Seconds(), ms(r.direct), peerDecode, decTPS/peerDecode)
		b.Logf("[%s] decode step on the device: %.3f ms (weights %.2f GiB → %.0f GB/s, %.3f of D2D); its GEMVs alone (graph) %.3f ms → %.0f GB/s = %.3f of D2D; the rest %.3f ms",
			cfgs.name, ms(r.stepGPU), gib(wbytes), stepBW/1e9, stepBW/d2d, ms(r.gemvGPU), gemvBW/1e9, gemvBW/d2d, ms(r.stepGPU-r.gemvGPU))
		b.Logf("[%s] launch overhead per decode step (%d kernels): host enqueue %.1f us direct vs %.1f us graph launch; wall − device time: %.1f us direct, %.1f us graph",
			cfgs.name, r.nodes, us(r.hostDirect), us(r.hostGraph), us(r.direct-r.stepGPU), us(r.graph-r.stepGPU))
	}
	b.ReportMetric(prefillTPS, "prefill-tok/s")
	b.Logf("prefill 512: %.0f tok/s (%.1f ms); llama.cpp %.0f tok/s → %.2fx", prefillTPS, ms(prefill/prefillIters), peerPrefill, prefillTPS/peerPrefill)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }

// copyBandwidth is CopyBandwidth with 1 GiB copies, failing b on error.
func copyBandwidth(b *testing.B, g *Model) float64 {
	bw, err := CopyBandwidth(g.dev, 1<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	return bw
}

// deviceTimes measures, for the batch-1 decode step of s (whose meta
// buffer the last Forward filled): the device time of a graph replay, of
// the step's matrix products alone, and the host time to enqueue the step
// kernel by kernel and to launch the graph.
func deviceTimes(b *testing.B, g *Model, s *Sequence) (step, gemv, hostDirect, hostGraph time.Duration) {
	const iters = 50
	p := pass{T: 1, R: 1, decode: true, maxPos: s.pos,
		attn: []attnRun{{t0: 0, n: 1, span: s.pos + 1}}, out: []outRun{{t0: 0, n: 1}}}
	err := g.dev.Do(func(c *cudadrv.Ctx) (err error) {
		defer func() {
			if rerr := g.resetFixed(c); err == nil {
				err = rerr
			}
		}()
		key := graphKey{n: 1, span: spanBucket(p.maxPos+1, g.maxCtx)}
		gr, ok := g.graphs[key]
		if !ok {
			return fmt.Errorf("no decode graph for %+v", key)
		}
		if step, err = measureEvents(c, g.stream, iters, func() error { return c.GraphLaunch(gr.exec, g.stream) }); err != nil {
			return err
		}
		// The GEMVs alone, as the step launches them, replayed from their
		// own graph (launched one by one, the small ones would measure
		// the host's launch rate, not the device).
		if err := c.BeginCapture(g.stream, cudadrv.CaptureThreadLocal); err != nil {
			return err
		}
		cerr := g.enqueueGEMVs(c, gemvAll)
		mg, err := c.EndCapture(g.stream)
		if cerr != nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		defer c.DestroyGraph(mg)
		mexec, err := c.Instantiate(mg)
		if err != nil {
			return err
		}
		defer c.DestroyGraphExec(mexec)
		mats := func() error { return c.GraphLaunch(mexec, g.stream) }
		if gemv, err = measureEvents(c, g.stream, iters, mats); err != nil {
			return err
		}
		// Host cost of issuing the step: kernel by kernel vs one graph
		// launch (the stream is drained between samples so the queue
		// never fills).
		for i := 0; i < iters; i++ {
			t := time.Now()
			if err := g.enqueue(nil, c, &p); err != nil {
				return err
			}
			hostDirect += time.Since(t)
			if err := c.StreamSync(g.stream); err != nil {
				return err
			}
			t = time.Now()
			if err := c.GraphLaunch(gr.exec, g.stream); err != nil {
				return err
			}
			hostGraph += time.Since(t)
			if err := c.StreamSync(g.stream); err != nil {
				return err
			}
		}
		hostDirect /= iters
		hostGraph /= iters
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return step, gemv, hostDirect, hostGraph
}
