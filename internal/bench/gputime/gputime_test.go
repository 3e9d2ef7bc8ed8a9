package gputime

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

var (
	devOnce sync.Once
	dev     *cudadrv.Device
	devK    *kernels.Kernels
	devErr  error
)

// device returns the test GPU and its kernels (loaded once per process),
// or skips the test where CUDA is not usable (CI has no GPU).
func device(t testing.TB) (*cudadrv.Device, *kernels.Kernels) {
	t.Helper()
	devOnce.Do(func() {
		if dev, devErr = cudadrv.Open(0); devErr != nil {
			return
		}
		devErr = dev.Do(func(c *cudadrv.Ctx) error {
			var err error
			devK, err = kernels.Load(c)
			return err
		})
	})
	if devErr != nil {
		if errors.Is(devErr, cudadrv.ErrUnavailable) {
			t.Skipf("skipping GPU test: %v", devErr)
		}
		t.Fatalf("GPU setup: %v", devErr)
	}
	return dev, devK
}

// tinyGPU writes a tiny synthetic llama in Q4_K_M, opens it on the CPU and
// uploads it to the test GPU with opts.
func tinyGPU(t *testing.T, opts gpu.Options) (*gpu.Model, *model.Model) {
	t.Helper()
	d, k := device(t)
	path := filepath.Join(t.TempDir(), "llama-q4_k_m.gguf")
	if err := synth.Write(path, synth.Options{Arch: "llama", Shape: "tiny", Type: "q4_k_m", Seed: 7}); err != nil {
		t.Fatal(err)
	}
	cpu, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpu.Close() })
	opts.Kernels = k
	g, err := gpu.Load(d, cpu.Config, cpu.Weights, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g, cpu
}

// TestMeasure runs the measurements on the tiny shape: each must produce
// positive, self-consistent figures, leave the model as it found it, and
// refuse what it cannot measure.
// Sequential: its subtests time one shared model on the GPU.
func TestMeasure(t *testing.T) {
	d, _ := device(t)
	g, cpu := tinyGPU(t, gpu.Options{MaxSeqs: 2, MaxContext: 128})
	ctx := context.Background()
	V := cpu.Config.Vocab
	finite := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

	t.Run("ceilings", func(t *testing.T) {
		d2d, err := CopyBandwidth(d, 64<<20, 4)
		if err != nil || !finite(d2d) {
			t.Fatalf("CopyBandwidth = %v, %v", d2d, err)
		}
		h2d, err := gpu.HostToDevicePeak(d, 16<<20, 4)
		if err != nil || !finite(h2d) {
			t.Fatalf("HostToDevicePeak = %v, %v", h2d, err)
		}
		hand, err := DeviceHandoff(d, 100)
		if err != nil || hand <= 0 {
			t.Fatalf("DeviceHandoff = %v, %v", hand, err)
		}
		t.Logf("D2D %.0f GB/s, pinned H2D %.1f GB/s, hand-off %v", d2d/1e9, h2d/1e9, hand)
		for _, c := range []struct {
			n     int64
			iters int
		}{{0, 1}, {1 << 20, 0}, {-1, 4}} {
			if _, err := CopyBandwidth(d, c.n, c.iters); err == nil {
				t.Errorf("CopyBandwidth(%d, %d) accepted", c.n, c.iters)
			}
			if _, err := gpu.HostToDevicePeak(d, c.n, c.iters); err == nil {
				t.Errorf("HostToDevicePeak(%d, %d) accepted", c.n, c.iters)
			}
		}
		if _, err := DeviceHandoff(d, 0); err == nil {
			t.Error("DeviceHandoff(0) accepted")
		}
	})

	t.Run("decode", func(t *testing.T) {
		o := DecodeOptions{Batch: 2, Prompt: 8, Warmup: 2, Steps: 4}
		a, err := TimeDecode(ctx, g, o)
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
		b, err := TimeDecode(ctx, g, o)
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
		if g.SetNoGraphs(false) {
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
		p, err := TimePrefill(ctx, g, 64, 2)
		if err != nil {
			t.Fatal(err)
		}
		if p.Tokens != 64 || p.Iters != 2 || !finite(p.TokensPerSecond) {
			t.Fatalf("%+v", p)
		}
	})

	t.Run("profile", func(t *testing.T) {
		p, err := ProfileDecodeStep(ctx, g, 5)
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
		if len(p.GEMVKinds) != 5 {
			t.Errorf("%d kinds, want 5", len(p.GEMVKinds))
		}
		for _, k := range p.GEMVKinds {
			if k.Time <= 0 || k.Bytes <= 0 {
				t.Errorf("kind %+v", k)
			}
		}
		// The model decodes as before the profile.
		if _, err := TimeDecode(ctx, g, DecodeOptions{Steps: 2}); err != nil {
			t.Fatalf("decode after the profile: %v", err)
		}
		t.Logf("%+v", *p)
	})

	t.Run("refusals", func(t *testing.T) {
		for _, o := range []DecodeOptions{{Batch: 3}, {Batch: -1}, {Prompt: 100, Warmup: 20, Steps: 20}, {Warmup: -1}} {
			if _, err := TimeDecode(ctx, g, o); err == nil {
				t.Errorf("TimeDecode(%+v) accepted", o)
			}
		}
		for _, n := range []int{0, 129} {
			if _, err := TimePrefill(ctx, g, n, 1); err == nil {
				t.Errorf("TimePrefill(%d) accepted", n)
			}
		}
		if _, err := ProfileDecodeStep(ctx, g, 0); err == nil {
			t.Error("ProfileDecodeStep(0) accepted")
		}
		gs, _ := tinyGPU(t, gpu.Options{MaxSeqs: 1, StreamLayers: []int{1}})
		if _, err := ProfileDecodeStep(ctx, gs, 1); err == nil {
			t.Error("ProfileDecodeStep on a streamed model accepted")
		}
	})
}

// TestTimeDecodeGreedy: TimeDecode's greedy mode selects on the device on
// every timed pass, replays graphs holding their copies, and its host
// phases add up to the measured pass (within the timer calls between
// them).
func TestTimeDecodeGreedy(t *testing.T) {
	g, _ := tinyGPU(t, gpu.Options{MaxSeqs: 2, MaxContext: 128})
	for _, greedy := range []bool{true, false} {
		r, err := TimeDecode(context.Background(), g, DecodeOptions{Batch: 2, Prompt: 8, Warmup: 2, Steps: 16, Greedy: greedy})
		if err != nil {
			t.Fatal(err)
		}
		h := r.Phases
		sum := h.ToDevice + h.Enqueue + h.Wait + h.FromDevice + h.Scatter
		if !r.Graph || r.DeviceSelect != greedy || !r.GraphCopies || r.CopiesNote != "" {
			t.Errorf("greedy %v: %+v", greedy, r)
		}
		if h.Wait <= 0 || h.Launch <= 0 || h.Launch > h.Enqueue || sum > r.PerPass || sum < r.PerPass/2 {
			t.Errorf("greedy %v: phases %+v add up to %v of a %v pass", greedy, h, sum, r.PerPass)
		}
		t.Logf("greedy %v: %.0f tok/s, %v per pass, phases %+v", greedy, r.TokensPerSecond, r.PerPass, h)
	}
}

// TestPhaseTrace: the tracer TimeDecode installs averages each phase over
// the passes it was told of, counts graph replays, graph copies and
// device selection per pass, and keeps the copies' failure; a pass
// without a graph launch has no Launch phase.
func TestPhaseTrace(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	// at stamps the pass's points at the given offsets (µs) from
	// TraceEnter; a negative offset leaves the point unmarked.
	pass := func(tr *phaseTrace, off [gpu.NumTracePoints]int, p gpu.PassTrace) {
		for ph, o := range off {
			if o >= 0 {
				tr.t[ph] = base.Add(time.Duration(o) * time.Microsecond)
			}
		}
		tr.Done(p)
	}
	copyErr := errors.New("refused")
	for _, c := range []struct {
		name   string
		passes [][gpu.NumTracePoints]int
		info   []gpu.PassTrace
		want   HostPhases
		sel    int
		graphs int
		copies int
		note   error
	}{
		{name: "none"},
		{
			name:   "graph replays",
			passes: [][gpu.NumTracePoints]int{{0, 10, 14, -1, -1, 20, 120, 130, 140}, {0, 20, 26, -1, -1, 30, 130, 150, 170}},
			info:   []gpu.PassTrace{{Graph: true, GraphCopies: true, DeviceSelect: true}, {Graph: true, GraphCopies: true, DeviceSelect: true}},
			want:   HostPhases{ToDevice: 15 * time.Microsecond, Launch: 5 * time.Microsecond, Enqueue: 10 * time.Microsecond, Wait: 100 * time.Microsecond, FromDevice: 15 * time.Microsecond, Scatter: 15 * time.Microsecond},
			sel:    2, graphs: 2, copies: 2,
		},
		{
			name:   "kernel by kernel",
			passes: [][gpu.NumTracePoints]int{{0, 10, -1, 15, 55, 60, 160, 170, 175}},
			info:   []gpu.PassTrace{{CopiesErr: copyErr}},
			want:   HostPhases{ToDevice: 10 * time.Microsecond, Enqueue: 50 * time.Microsecond, Setup: 5 * time.Microsecond, Head: 5 * time.Microsecond, Wait: 100 * time.Microsecond, FromDevice: 10 * time.Microsecond, Scatter: 5 * time.Microsecond},
			note:   copyErr,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr := &phaseTrace{}
			for i, off := range c.passes {
				pass(tr, off, c.info[i])
			}
			if got := tr.phases(); got != c.want {
				t.Errorf("phases %+v, want %+v", got, c.want)
			}
			if tr.passes != len(c.passes) || tr.sel != c.sel || tr.graphs != c.graphs || tr.copies != c.copies || tr.note != c.note {
				t.Errorf("counts %+v", tr)
			}
			if tr.t != ([gpu.NumTracePoints]time.Time{}) {
				t.Error("stamps left over after Done")
			}
		})
	}
}

func TestPrompt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ vocab, n, seed int }{{2, 5, 0}, {32000, 512, 1}, {256, 16, 7}} {
		p := Prompt(c.vocab, c.n, c.seed)
		if len(p) != c.n {
			t.Fatalf("%+v: %d ids", c, len(p))
		}
		for _, id := range p {
			if id < 1 || int(id) >= c.vocab {
				t.Fatalf("%+v: id %d outside [1, %d)", c, id, c.vocab)
			}
		}
	}
	if a, b := Prompt(1000, 8, 0), Prompt(1000, 8, 1); a[0] == b[0] {
		t.Errorf("seeds 0 and 1 start alike: %v, %v", a, b)
	}
}
