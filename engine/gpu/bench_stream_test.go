package gpu_test

import (
	"context"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/internal/bench/gputime"
)

// BenchmarkStreamed8B: the 8b shape with layers 16..31 on tier B (pinned
// host memory, streamed into 2 device slots every pass). Reports decode
// tok/s at batch 1 and 8, prefill tok/s of a 512-token prompt, achieved
// H2D GB/s ÷ the pinned H2D peak measured in the same run, and time per
// token ÷ (streamed bytes ÷ that peak).
func BenchmarkStreamed8B(b *testing.B) {
	cpu, _ := gpu.OpenBig(b, "STRATA_8B_GGUF", "8b")
	var half []int
	for l := cpu.Config.Layers / 2; l < cpu.Config.Layers; l++ {
		half = append(half, l)
	}
	g := gpu.LoadGPU(b, cpu, gpu.Options{MaxSeqs: 8, MaxContext: 1024, StreamLayers: half})
	streamBench(b, g, "8b, 16 of 32 layers streamed", 16, 6, true)
}

// Benchmark70B: the 70b shape (STRATA_70B_GGUF, synthetic llama 70b
// q4_k_m) with a 24 GiB device budget, as `--vram 24GiB` would give: the
// leading layers that fit stay resident, the rest stream from tier B.
func Benchmark70B(b *testing.B) {
	cpu, _ := gpu.OpenBig(b, "STRATA_70B_GGUF", "70b")
	const budget = 24 << 30
	const maxSeqs, maxCtx, slots = 8, 512, 2
	stream := gpu.FitLayers(cpu, budget, maxSeqs, maxCtx, slots)
	t0 := time.Now()
	g := gpu.LoadGPU(b, cpu, gpu.Options{MaxSeqs: maxSeqs, MaxContext: maxCtx, StreamLayers: stream, Slots: slots})
	b.Logf("70b: %d of %d layers resident (%.2f GiB), %d streamed (%.2f GiB per pass); loaded in %v",
		cpu.Config.Layers-len(stream), cpu.Config.Layers, gib(g.WeightBytes()), len(stream), gib(g.StreamedBytes()), time.Since(t0).Round(time.Second))
	streamBench(b, g, "70b, --vram 24GiB", 4, 3, false)
}

// streamBench measures a streamed model: the pinned H2D peak, decode at
// batch 1 and 8, and optionally a 512-token prefill. (Other systems'
// figures to compare with: `strata bench engine --peers FILE`.)
func streamBench(b *testing.B, g *gpu.Model, label string, steps1, steps8 int, prefill bool) {
	ctx := context.Background()
	peak, err := gpu.HostToDevicePeak(g.Device(), 256<<20, 8)
	if err != nil {
		b.Fatal(err)
	}
	sb := float64(g.StreamedBytes())
	b.Logf("%s: pinned H2D peak %.1f GB/s; %.2f GiB streamed per pass → PCIe limit %.2f ms per pass", label, peak/1e9, sb/(1<<30), sb/peak*1e3)

	// A 4-token prompt and one untimed decode pass, then the timed ones.
	decode := func(n, steps int) time.Duration {
		r, err := gputime.TimeDecode(ctx, g, gputime.DecodeOptions{Batch: n, Prompt: 4, Warmup: 1, Steps: steps})
		if err != nil {
			b.Fatal(err)
		}
		return r.PerPass
	}
	d1 := decode(1, steps1)
	d8 := decode(8, steps8)
	h2d := sb / d1.Seconds()
	tps1, tps8 := 1/d1.Seconds(), 8/d8.Seconds()
	b.ReportMetric(tps1, "decode-tok/s")
	b.ReportMetric(tps8, "decode-b8-tok/s")
	b.ReportMetric(h2d/peak, "H2D/peak")
	b.ReportMetric(d1.Seconds()/(sb/peak), "step/PCIe-limit")
	b.Logf("%s: decode batch 1 %.2f tok/s (%.1f ms/token); H2D during decode %.1f GB/s = %.3f of peak; time per token ÷ (streamed bytes ÷ peak) = %.3f",
		label, tps1, ms(d1), h2d/1e9, h2d/peak, d1.Seconds()/(sb/peak))
	b.Logf("%s: decode batch 8 %.2f tok/s aggregate (%.1f ms/pass) = %.2fx batch 1", label, tps8, ms(d8), tps8/tps1)
	if prefill {
		pf, err := gputime.TimePrefill(ctx, g, 512, 2)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(pf.TokensPerSecond, "prefill-tok/s")
		b.Logf("%s: prefill 512 %.0f tok/s (%.1f ms)", label, pf.TokensPerSecond, ms(pf.PerPass))
	}
}
