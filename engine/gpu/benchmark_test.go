package gpu

import (
	"context"
	"math"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// TestMeasure runs the benchmark measurements (benchmark.go) on the tiny
// shape: each must produce positive, self-consistent figures, leave the
// model as it found it, and refuse what it cannot measure.
func TestMeasure(t *testing.T) {
	dev, _ := gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, MaxContext: 128})
	ctx := context.Background()
	V := cpu.Config.Vocab
	finite := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

	t.Run("ceilings", func(t *testing.T) {
		d2d, err := CopyBandwidth(dev, 64<<20, 4)
		if err != nil || !finite(d2d) {
			t.Fatalf("CopyBandwidth = %v, %v", d2d, err)
		}
		h2d, err := HostToDevicePeak(dev, 16<<20, 4)
		if err != nil || !finite(h2d) {
			t.Fatalf("HostToDevicePeak = %v, %v", h2d, err)
		}
		t.Logf("D2D %.0f GB/s, pinned H2D %.1f GB/s", d2d/1e9, h2d/1e9)
		for _, c := range []struct {
			n     int64
			iters int
		}{{0, 1}, {1 << 20, 0}, {-1, 4}} {
			if _, err := CopyBandwidth(dev, c.n, c.iters); err == nil {
				t.Errorf("CopyBandwidth(%d, %d) accepted", c.n, c.iters)
			}
			if _, err := HostToDevicePeak(dev, c.n, c.iters); err == nil {
				t.Errorf("HostToDevicePeak(%d, %d) accepted", c.n, c.iters)
			}
		}
	})

	t.Run("decode", func(t *testing.T) {
		o := DecodeOptions{Batch: 2, Prompt: 8, Warmup: 2, Steps: 4}
		a, err := g.TimeDecode(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if !a.Graph || a.Batch != 2 || a.Steps != 4 || !finite(a.TokensPerSecond) || len(a.PromptLogits) != V {
			t.Fatalf("graph run: %+v", a)
		}
		if got := 2 / a.PerPass.Seconds(); math.Abs(got-a.TokensPerSecond) > 1e-6*got {
			t.Errorf("tokens/s %v, want batch ÷ per-pass time %v", a.TokensPerSecond, got)
		}
		o.NoGraphs = true
		b, err := g.TimeDecode(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if b.Graph {
			t.Errorf("NoGraphs run replayed a graph")
		}
		// Same options, same prompt: the prompt pass is the same kernels.
		if e := quant.NMSE(b.PromptLogits, a.PromptLogits); e > 1e-12 {
			t.Errorf("prompt logits differ between runs: NMSE %.3g", e)
		}
		// The graph setting is restored, every sequence given back.
		if g.opts.NoGraphs {
			t.Error("TimeDecode left graphs off")
		}
		for i := range 2 {
			s, err := g.NewSequence(0)
			if err != nil {
				t.Fatalf("sequence %d after TimeDecode: %v", i, err)
			}
			defer s.Close()
		}
	})

	t.Run("prefill", func(t *testing.T) {
		p, err := g.TimePrefill(ctx, 64, 2)
		if err != nil {
			t.Fatal(err)
		}
		if p.Tokens != 64 || p.Iters != 2 || !finite(p.TokensPerSecond) {
			t.Fatalf("%+v", p)
		}
	})

	t.Run("profile", func(t *testing.T) {
		p, err := g.ProfileDecodeStep(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		w := cpu.Weights
		for i := range w.Layers {
			L := &w.Layers[i]
			for _, m := range []int{len(L.Q.Data), len(L.K.Data), len(L.V.Data), len(L.O.Data), len(L.Gate.Data), len(L.Up.Data), len(L.Down.Data)} {
				want += int64(m)
			}
		}
		want += int64(len(w.Output.Data))
		if p.WeightBytes != want {
			t.Errorf("weight bytes %d, want %d", p.WeightBytes, want)
		}
		// Per layer at least the seven matrix products, a norm and the
		// attention; plus embedding, output norm and projection.
		if p.Kernels < 9*cpu.Config.Layers+3 || p.Device <= 0 || p.GEMV <= 0 || p.HostEnqueue <= 0 || p.HostGraphLaunch <= 0 {
			t.Fatalf("%+v", p)
		}
		t.Logf("%+v", *p)
	})

	t.Run("refusals", func(t *testing.T) {
		for _, o := range []DecodeOptions{{Batch: 3}, {Batch: -1}, {Prompt: 100, Warmup: 20, Steps: 20}, {Warmup: -1}} {
			if _, err := g.TimeDecode(ctx, o); err == nil {
				t.Errorf("TimeDecode(%+v) accepted", o)
			}
		}
		for _, n := range []int{0, 129} {
			if _, err := g.TimePrefill(ctx, n, 1); err == nil {
				t.Errorf("TimePrefill(%d) accepted", n)
			}
		}
		if _, err := g.ProfileDecodeStep(ctx, 0); err == nil {
			t.Error("ProfileDecodeStep(0) accepted")
		}
		gs := loadGPU(t, cpu, Options{MaxSeqs: 1, StreamLayers: []int{1}})
		if _, err := gs.ProfileDecodeStep(ctx, 1); err == nil {
			t.Error("ProfileDecodeStep on a streamed model accepted")
		}
	})
}
