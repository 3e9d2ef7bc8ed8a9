package gpu_test

import (
	"context"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/internal/bench/gputime"
)

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// BenchmarkResident8B measures the resident 8b shape at batch 1 (set
// STRATA_8B_GGUF to a synthetic llama 8b q4_k_m file): decode tok/s with
// and without the CUDA graph, prefill tok/s of a 512-token prompt, the
// device time of a decode step and of its GEMVs alone, their effective
// weight bandwidth ÷ the device-to-device copy bandwidth measured in the
// same run, and the per-step launch overhead, for the fused launches (the
// default) and, in the same run, the unfused ones and the float GEMVs.
// Run with -test.benchtime 1x: each metric is averaged over a fixed number
// of steps.
func BenchmarkResident8B(b *testing.B) {
	cpu, dev := gpu.OpenBig(b, "STRATA_8B_GGUF", "8b")
	t0 := time.Now()
	g := gpu.LoadGPU(b, cpu, gpu.Options{MaxSeqs: 1, MaxContext: 1024})
	b.Logf("%s: loaded %.2f GiB of weights in %v", dev.Name(), gib(g.WeightBytes()), time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()

	d2d, err := gputime.CopyBandwidth(dev, 1<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("device-to-device copy: %.0f GB/s (read+write)", d2d/1e9)

	pf, err := gputime.TimePrefill(ctx, g, 512, 4)
	if err != nil {
		b.Fatal(err)
	}

	decode := func(noGraphs bool) time.Duration {
		r, err := gputime.TimeDecode(ctx, g, gputime.DecodeOptions{Prompt: 16, Warmup: 8, Steps: 128, NoGraphs: noGraphs})
		if err != nil {
			b.Fatal(err)
		}
		return r.PerPass
	}
	type result struct {
		graph, direct time.Duration
		prof          *gputime.StepProfile
	}
	// The model's own tuning (helpers_test.go's variants): the integer
	// GEMVs or the float ones, with Q6_K's or without.
	def := gpu.DecodeVariantOf(g)
	fast, fastQ6 := def.IntegerGEMV, def.IntegerQ6K
	defer func() {
		if _, err := gpu.SetDecodeVariant(g, def); err != nil {
			b.Error(err)
		}
	}()
	measure := func(gemvFused, ewFused, fastGEMV, fastQ6K bool) result {
		v := def
		v.FuseGEMV, v.FuseElementwise = gemvFused, ewFused
		v.IntegerGEMV, v.IntegerQ6K = fastGEMV, fastQ6K
		if _, err := gpu.SetDecodeVariant(g, v); err != nil {
			b.Fatal(err)
		}
		var r result
		r.direct = decode(true)
		r.graph = decode(false)
		prof, err := gputime.ProfileDecodeStep(ctx, g, 50)
		if err != nil {
			b.Fatal(err)
		}
		r.prof = prof
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
	b.Logf("integer GEMV (Tuning.IntegerGEMV): %v, with Q6_K (IntegerQ6K): %v", fast, fastQ6)
	for _, cfgs := range cfgList {
		r := measure(cfgs.gemv, cfgs.elemwise, cfgs.fast, cfgs.fastQ6)
		p := r.prof
		decTPS := 1 / r.graph.Seconds()
		gemvBW := float64(p.WeightBytes) / p.GEMV.Seconds()
		stepBW := float64(p.WeightBytes) / p.Device.Seconds()
		if cfgs.name == "fused" {
			b.ReportMetric(decTPS, "decode-tok/s")
			b.ReportMetric(1/r.direct.Seconds(), "decode-nograph-tok/s")
			b.ReportMetric(gemvBW/d2d, "gemv-BW/D2D")
			b.ReportMetric(float64(r.direct-r.graph)/1e3, "us-saved-by-graph/step")
		}
		b.Logf("[%s] decode batch 1: %.1f tok/s with the graph (%.3f ms/step), %.1f tok/s without (%.3f ms/step)",
			cfgs.name, decTPS, ms(r.graph), 1/r.direct.Seconds(), ms(r.direct))
		b.Logf("[%s] decode step on the device: %.3f ms (weights %.2f GiB → %.0f GB/s, %.3f of D2D); its GEMVs alone (graph) %.3f ms → %.0f GB/s = %.3f of D2D; the rest %.3f ms",
			cfgs.name, ms(p.Device), gib(p.WeightBytes), stepBW/1e9, stepBW/d2d, ms(p.GEMV), gemvBW/1e9, gemvBW/d2d, ms(p.Device-p.GEMV))
		b.Logf("[%s] launch overhead per decode step (%d kernels): host enqueue %.1f us direct vs %.1f us graph launch; wall − device time: %.1f us direct, %.1f us graph",
			cfgs.name, p.Kernels, us(p.HostEnqueue), us(p.HostGraphLaunch), us(r.direct-p.Device), us(r.graph-p.Device))
	}
	b.ReportMetric(pf.TokensPerSecond, "prefill-tok/s")
	b.Logf("prefill 512: %.0f tok/s (%.1f ms)", pf.TokensPerSecond, ms(pf.PerPass))
}
