package model

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// TestWarm: a warm-up left to run reads every byte of the layer's FFN
// weights once (parts not a whole number of chunks, gate and up apart or
// fused), and stop then says so, again if asked; one stopped at once ends
// and reads no more than the layer; a Run after it computes the bits of a
// device never warmed.
func TestWarm(t *testing.T) {
	t.Parallel()
	bytes := func(n int) Tensor { return Tensor{Name: "w", Type: quant.F32, Data: make([]byte, n)} }
	for _, tc := range []struct {
		name string
		w    Layer
	}{
		{"gate, up, down", Layer{Gate: bytes(100<<10 + 3), Up: bytes(70 << 10), Down: bytes(33<<10 + 1)}},
		{"fused gate-up", Layer{GateUp: bytes(3*warmChunk + 5), Down: bytes(warmChunk)}},
		{"one byte", Layer{Down: bytes(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := NewFFNDevice(Config{Arch: ArchLlama, Vocab: 8, Dim: 8, FFN: 8, Layers: 1, Heads: 1, KVHeads: 1, HeadDim: 8, Context: 8, RopeTheta: 1e4, NormEps: 1e-5, AttnScale: 1, EmbedScale: 1}, gemv.Go)
			if err != nil {
				t.Fatal(err)
			}
			want := FFNBytes(&tc.w)
			wu := d.startWarm(&tc.w)
			for deadline := time.Now().Add(time.Minute); wu.read.Load() < want; {
				if time.Now().After(deadline) {
					t.Fatalf("a minute on, %d of %d bytes read", wu.read.Load(), want)
				}
				time.Sleep(time.Millisecond)
			}
			for range 2 {
				if got := wu.stop(); got != want {
					t.Fatalf("stop says %d bytes read, want %d", got, want)
				}
			}
		})
	}
}

// TestWarmStopped: a warm-up of a large layer stopped at once ends, having
// read at most the layer, and the FFN computed after it has the bits of
// the same FFN on a device never warmed.
func TestWarmStopped(t *testing.T) {
	t.Parallel()
	cfg := Config{Arch: ArchLlama, Vocab: 256, Dim: 1024, FFN: 4096, Layers: 1, Heads: 8, KVHeads: 8, HeadDim: 128, Context: 64, RopeTheta: 5e5, NormEps: 1e-5, AttnScale: 0.088, EmbedScale: 1}
	ones := make([]float32, cfg.Dim)
	for i := range ones {
		ones[i] = 1
	}
	b := &testing.B{}
	w := Layer{
		FFNNorm: F32Tensor("ffn_norm", 1, cfg.Dim, ones),
		Gate:    randomQuantTensor(b, "gate", quant.Q4_K, cfg.FFN, cfg.Dim, 1),
		Up:      randomQuantTensor(b, "up", quant.Q4_K, cfg.FFN, cfg.Dim, 2),
		Down:    randomQuantTensor(b, "down", quant.Q6_K, cfg.Dim, cfg.FFN, 3),
	}
	run := func(warm bool) []float32 {
		d, err := NewFFNDevice(cfg, gemv.Detect())
		if err != nil {
			t.Fatal(err)
		}
		h := [][]float32{randomVector(cfg.Dim, 4)}
		if warm {
			if n := d.Warm(&w)(); n < 0 || n > FFNBytes(&w) {
				t.Fatalf("stopped at once, read %d bytes of %d", n, FFNBytes(&w))
			}
		}
		if err := d.Run(context.Background(), 0, &w, h); err != nil {
			t.Fatal(err)
		}
		return h[0]
	}
	if got, want := run(true), run(false); !slices.Equal(got, want) {
		t.Fatal("the FFN after a warm-up differs from one without")
	}
}

// TestWarmNext: a MoE device warms the experts layer 1's router picks for
// the residual it is given, those keep selects, each read once; the
// device's next call waits for stop and computes as if nothing had
// warmed; a dense model warms nothing.
func TestWarmNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := Open(synthModel(t, "qwen3moe", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := m.Config
	d, err := NewFFNDevice(cfg, gemv.Detect())
	if err != nil {
		t.Fatal(err)
	}
	ls := m.Weights.Layers
	h := randomVector(cfg.Dim, 9)
	row := func() [][]float32 { return [][]float32{slices.Clone(h)} }
	if err := d.Run(ctx, 0, &ls[0], row()); err != nil {
		t.Fatal(err)
	}
	// Layer 1's own picks for h: its routing counts over one FFN.
	before := d.ExpertCounts()
	if err := d.Run(ctx, 1, &ls[1], row()); err != nil {
		t.Fatal(err)
	}
	after := d.ExpertCounts()
	keep := func(e int) bool { return e%2 == 0 }
	var want int64
	for e := range after[1] {
		if after[1][e] > before[1][e] && keep(e) {
			x := &ls[1].Experts[e]
			want += int64(len(x.Gate.Data) + len(x.Up.Data) + len(x.Down.Data))
		}
	}
	if want == 0 {
		t.Fatalf("layer 1 picked none of the kept experts (counts %v -> %v): choose another h", before[1], after[1])
	}
	wu := d.warmNext(1, &ls[1], row(), keep)
	for deadline := time.Now().Add(time.Minute); wu.read.Load() < want; {
		if time.Now().After(deadline) {
			t.Fatalf("a minute on, %d of %d bytes read", wu.read.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	if got := wu.stop(); got != want {
		t.Fatalf("warmed %d bytes, the kept picks hold %d", got, want)
	}
	got, ref := row(), row()
	if err := d.Run(ctx, 1, &ls[1], got); err != nil {
		t.Fatal(err)
	}
	d2, _ := NewFFNDevice(cfg, gemv.Detect())
	if err := d2.Run(ctx, 1, &ls[1], ref); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0], ref[0]) {
		t.Fatal("the FFN after a warm-up differs from one without")
	}
	dense, err := Open(synthModel(t, "llama", "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer dense.Close()
	dd, _ := NewFFNDevice(dense.Config, gemv.Detect())
	if n := dd.WarmNext(1, &dense.Weights.Layers[1], [][]float32{randomVector(dense.Config.Dim, 1)}, nil)(); n != 0 {
		t.Fatalf("a dense model warmed %d bytes", n)
	}
}
