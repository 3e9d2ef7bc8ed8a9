package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func specs() []struct {
	name string
	spec testSpec
} {
	return []struct {
		name string
		spec testSpec
	}{{"llama", llamaSpec()}, {"gemma2", gemmaSpec()}, {"gemma3", gemma3Spec()}, {"mistral", mistralSpec()}, {"phi3", phi3Spec()}, {"qwen2", qwen2Spec()}, {"qwen3", qwen3Spec()}, {"mixtral", mixtralSpec()}, {"qwen3moe", qwen3moeSpec()}}
}

// TestForwardMatchesReference runs prompts token by token and as one
// prefill through the engine and the float64 reference.
func TestForwardMatchesReference(t *testing.T) {
	t.Parallel()
	for _, tc := range specs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newTestModel(t, tc.spec, 1)
			toks := randTokens(20, tc.spec.vocab, 2) // longer than gemma's window
			ref := newRef(t, refParamsOf(tc.spec), m.Weights)
			want := make([][]float64, len(toks))
			for i, tok := range toks {
				want[i] = ref.step(tok)
			}
			seq := m.NewSequence(0)
			worst := 0.0
			for i, tok := range toks {
				got := forward(t, m, seq, []int32{tok}, false)[0]
				e := relErr(got, want[i])
				if e > 1e-4 {
					t.Fatalf("token %d: relative error %.3g vs reference", i, e)
				}
				worst = math.Max(worst, e)
			}
			t.Logf("worst relative error vs float64 reference: %.3g", worst)
			seq = m.NewSequence(0)
			all := forward(t, m, seq, toks, true)
			for i := range toks {
				if e := relErr(all[i], want[i]); e > 1e-4 {
					t.Fatalf("prefill token %d: relative error %.3g vs reference", i, e)
				}
			}
		})
	}
}

// TestReferenceIsSensitive guards the reference comparison itself: a
// deliberately wrong convention must be caught at the same tolerance.
func TestReferenceIsSensitive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec testSpec
		mod  func(c *Config)
	}{
		{"llama without rope scaling", llamaSpec(), func(c *Config) { c.RopeFreqs = nil }},
		{"gemma2 head_dim scaling", gemmaSpec(), func(c *Config) { c.AttnScale = 0.25 }},
		{"gemma2 without attention softcap", gemmaSpec(), func(c *Config) { c.AttnSoftcap = 0 }},
		{"gemma2 without window", gemmaSpec(), func(c *Config) { c.SlidingWindow = 0 }},
		{"gemma2 as llama rope", gemmaSpec(), func(c *Config) { c.Arch = ArchLlama; c.TiedOutput = false }},
		{"mixtral top-1", mixtralSpec(), func(c *Config) { c.ExpertsUsed = 1 }},
		{"mixtral every expert", mixtralSpec(), func(c *Config) { c.ExpertsUsed = c.Experts }},
		{"qwen3moe top-2", qwen3moeSpec(), func(c *Config) { c.ExpertsUsed = 2 }},
		{"qwen3moe without q/k norms", qwen3moeSpec(), nil},
		{"qwen2 as llama rope", qwen2Spec(), func(c *Config) { c.Arch = ArchLlama }},
		{"mistral without window", mistralSpec(), func(c *Config) { c.SlidingWindow = 0 }},
		{"gemma3 with one rope base", gemma3Spec(), func(c *Config) { c.RopeThetaLocal = 0 }},
		{"gemma3 local base 80000", gemma3Spec(), func(c *Config) { c.RopeThetaLocal = 80000 }},
		{"gemma3 without q/k norms", gemma3Spec(), nil},
		{"gemma3 without window", gemma3Spec(), func(c *Config) { c.SlidingWindow = 0 }},
		{"gemma3 without linear scaling", gemma3Spec(), func(c *Config) { c.RopeFreqs = nil }},
		{"phi3 short factors", phi3Spec(), func(c *Config) { c.RopeFreqs = phi3Spec().shortFactors }},
		{"phi3 without attention factor", phi3Spec(), func(c *Config) { c.RopeAttnFactor = 0 }},
		{"phi3 without window", phi3Spec(), func(c *Config) { c.SlidingWindow = 0 }},
		{"qwen2 without biases", qwen2Spec(), nil},
		{"qwen3 without q/k norms", qwen3Spec(), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := randomWeights(tc.spec, 1)
			cfg := tc.spec.config()
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			for i := range w.Layers {
				l := &w.Layers[i]
				switch {
				case cfg.Arch == ArchLlama: // llama has no post norms, biases, q/k norms
					*l = Layer{AttnNorm: l.AttnNorm, Q: l.Q, K: l.K, V: l.V, O: l.O, FFNNorm: l.FFNNorm, Gate: l.Gate, Up: l.Up, Down: l.Down,
						Router: l.Router, Experts: l.Experts}
				case tc.mod == nil && cfg.Arch == ArchQwen2:
					for _, b := range []*Tensor{&l.QBias, &l.KBias, &l.VBias} {
						*b = F32Tensor(b.Name, 1, b.Cols, make([]float32, b.Cols))
					}
				case tc.mod == nil && (cfg.Arch == ArchQwen3 || cfg.Arch == ArchQwen3MoE || cfg.Arch == ArchGemma3):
					for _, n := range []*Tensor{&l.QNorm, &l.KNorm} {
						ones := make([]float32, n.Cols)
						for j := range ones {
							ones[j] = 1
						}
						*n = F32Tensor(n.Name, 1, n.Cols, ones)
					}
				}
			}
			m, err := New(cfg, w)
			if err != nil {
				t.Fatal(err)
			}
			ref := newRef(t, refParamsOf(tc.spec), randomWeights(tc.spec, 1))
			toks := randTokens(20, tc.spec.vocab, 2)
			seq := m.NewSequence(0)
			worst := 0.0
			for _, tok := range toks {
				got := forward(t, m, seq, []int32{tok}, false)[0]
				worst = math.Max(worst, relErr(got, ref.step(tok)))
			}
			if worst < 1e-3 {
				t.Fatalf("wrong convention only reached relative error %.3g; the comparison is blind to it", worst)
			}
		})
	}
}

// TestBatchInvariance checks that a sequence's logits are bit-for-bit the
// same whether it runs alone or batched with others of different lengths.
func TestBatchInvariance(t *testing.T) {
	t.Parallel()
	for _, tc := range specs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newTestModel(t, tc.spec, 3)
			// Per-sequence chunks: a prefill, then decode steps; the
			// middle one also gets a second multi-token chunk.
			plans := [][][]int32{
				{randTokens(5, 97, 10), {1}, {2}, {3}},
				{randTokens(11, 97, 11), randTokens(4, 97, 12), {7}, {8}},
				{{42}, {43}, {44}},
			}
			type key struct{ seq, chunk int }
			alone := map[key][][]float32{}
			for si, plan := range plans {
				seq := m.NewSequence(32)
				for ci, chunk := range plan {
					alone[key{si, ci}] = forward(t, m, seq, chunk, true)
				}
			}
			seqs := []*Sequence{m.NewSequence(32), m.NewSequence(32), m.NewSequence(32)}
			for ci := 0; ci < 4; ci++ {
				var batch []Step
				var who []int
				for si, plan := range plans {
					if ci < len(plan) {
						batch = append(batch, Step{Seq: seqs[si], Tokens: plan[ci], AllLogits: true})
						who = append(who, si)
					}
				}
				if err := m.Forward(context.Background(), batch); err != nil {
					t.Fatal(err)
				}
				for bi, st := range batch {
					want := alone[key{who[bi], ci}]
					for r := range want {
						for v := range want[r] {
							if math.Float32bits(st.Logits[r][v]) != math.Float32bits(want[r][v]) {
								t.Fatalf("seq %d chunk %d token %d logit %d: batched %v, alone %v",
									who[bi], ci, r, v, st.Logits[r][v], want[r][v])
							}
						}
					}
				}
			}
		})
	}
}

// TestPrefillEqualsSteps compares a prefill of N tokens with N single-token
// steps.
func TestPrefillEqualsSteps(t *testing.T) {
	t.Parallel()
	for _, tc := range specs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newTestModel(t, tc.spec, 4)
			toks := randTokens(17, tc.spec.vocab, 5)
			all := forward(t, m, m.NewSequence(0), toks, true)
			seq := m.NewSequence(0)
			for i, tok := range toks {
				one := forward(t, m, seq, []int32{tok}, false)[0]
				for v := range one {
					if d := math.Abs(float64(one[v] - all[i][v])); d > 1e-5*math.Max(1, math.Abs(float64(one[v]))) {
						t.Fatalf("token %d logit %d: prefill %v, step %v", i, v, all[i][v], one[v])
					}
				}
			}
			if seq.Pos() != len(toks) {
				t.Fatalf("Pos = %d, want %d", seq.Pos(), len(toks))
			}
			// Without AllLogits only the last token's logits come back.
			last := forward(t, m, m.NewSequence(0), toks, false)
			if len(last) != 1 {
				t.Fatalf("got %d logit rows, want 1", len(last))
			}
			for v := range last[0] {
				if last[0][v] != all[len(toks)-1][v] {
					t.Fatalf("last-only logits differ from AllLogits at %d", v)
				}
			}
		})
	}
}

// TestSlidingWindowMasks changes one token just outside and one just
// inside the window of the last position.
func TestSlidingWindowMasks(t *testing.T) {
	t.Parallel()
	spec := gemmaSpec()
	toks := randTokens(12, spec.vocab, 6)
	last := len(toks) - 1
	outside := last - spec.window // qpos - kpos == window: masked
	inside := outside + 1
	run := func(m *Model, change int) []float32 {
		tk := append([]int32(nil), toks...)
		if change >= 0 {
			tk[change] = (tk[change] + 1) % int32(spec.vocab)
		}
		return forward(t, m, m.NewSequence(0), tk, false)[0]
	}
	same := func(a, b []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				return false
			}
		}
		return true
	}
	t.Run("one sliding layer", func(t *testing.T) {
		t.Parallel()
		s := spec
		s.layers = 1 // layer 0 is a sliding layer
		m := newTestModel(t, s, 7)
		base := run(m, -1)
		if !same(base, run(m, outside)) {
			t.Fatalf("token at distance %d (outside window %d) changed the output", spec.window, spec.window)
		}
		if same(base, run(m, inside)) {
			t.Fatalf("token at distance %d (inside window %d) did not change the output", spec.window-1, spec.window)
		}
	})
	t.Run("global layer sees it", func(t *testing.T) {
		t.Parallel()
		s := spec
		s.layers = 2 // layer 1 is global
		m := newTestModel(t, s, 7)
		if same(run(m, -1), run(m, outside)) {
			t.Fatal("global layer did not see a token outside the sliding window")
		}
	})
}

func TestContextOverflow(t *testing.T) {
	t.Parallel()
	spec := llamaSpec()
	m := newTestModel(t, spec, 8)
	toks := randTokens(8, spec.vocab, 9)
	ctx := context.Background()

	seq := m.NewSequence(8)
	forward(t, m, seq, toks[:6], false)
	err := m.Forward(ctx, []Step{{Seq: seq, Tokens: toks[6:8:8]}, {Seq: m.NewSequence(2), Tokens: toks[:3]}})
	if !errors.Is(err, ErrContextOverflow) {
		t.Fatalf("overflowing batch: err %v, want ErrContextOverflow", err)
	}
	if seq.Pos() != 6 {
		t.Fatalf("Pos after failed batch = %d, want 6", seq.Pos())
	}
	err = m.Forward(ctx, []Step{{Seq: seq, Tokens: toks[:3]}})
	if !errors.Is(err, ErrContextOverflow) || !strings.Contains(err.Error(), "capacity 8") {
		t.Fatalf("overflow: err %v, want ErrContextOverflow naming the capacity", err)
	}
	// Filling exactly to capacity still works and matches a fresh run.
	got := forward(t, m, seq, toks[6:8], false)[0]
	want := forward(t, m, m.NewSequence(0), toks, false)[0]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d after overflow attempts: %v, fresh %v", i, got[i], want[i])
		}
	}
	if err := m.Forward(ctx, []Step{{Seq: seq, Tokens: toks[:1]}}); !errors.Is(err, ErrContextOverflow) {
		t.Fatalf("full sequence: err %v, want ErrContextOverflow", err)
	}
	if s := m.NewSequence(1 << 30); s.MaxContext() != spec.context {
		t.Fatalf("NewSequence above Context: capacity %d, want %d", s.MaxContext(), spec.context)
	}
}

func TestForwardRejectsBadBatches(t *testing.T) {
	t.Parallel()
	spec := llamaSpec()
	m := newTestModel(t, spec, 10)
	other := newTestModel(t, spec, 10)
	s := m.NewSequence(0)
	tests := []struct {
		name  string
		batch []Step
		want  string
	}{
		{"empty batch", nil, "empty batch"},
		{"nil sequence", []Step{{Tokens: []int32{1}}}, "nil sequence"},
		{"foreign sequence", []Step{{Seq: other.NewSequence(0), Tokens: []int32{1}}}, "another model"},
		{"no tokens", []Step{{Seq: s}}, "no tokens"},
		{"negative token", []Step{{Seq: s, Tokens: []int32{1, -1}}}, "outside vocabulary"},
		{"token past vocab", []Step{{Seq: s, Tokens: []int32{int32(spec.vocab)}}}, "outside vocabulary"},
		{"duplicate sequence", []Step{{Seq: s, Tokens: []int32{1}}, {Seq: s, Tokens: []int32{2}}}, "same sequence"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := m.Forward(context.Background(), tc.batch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if s.Pos() != 0 {
				t.Fatalf("sequence advanced to %d by a rejected batch", s.Pos())
			}
		})
	}
}

// cancellingSource cancels a context when the pass reaches a given layer.
type cancellingSource struct {
	LayerSource
	at     int
	cancel context.CancelFunc
}

func (c *cancellingSource) Layer(i int) (*Layer, error) {
	if i == c.at {
		c.cancel()
	}
	return c.LayerSource.Layer(i)
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	spec := gemmaSpec()
	m := newTestModel(t, spec, 11)
	toks := randTokens(10, spec.vocab, 12)
	want := forward(t, m, m.NewSequence(0), toks, false)[0]

	seq := m.NewSequence(0)
	forward(t, m, seq, toks[:4], false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Forward(ctx, []Step{{Seq: seq, Tokens: toks[4:]}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: err %v, want context.Canceled", err)
	}
	// Cancel in the middle of a pass: layer 0 has written the cache.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	m.SetLayerSource(&cancellingSource{LayerSource: residentSource{m.Weights}, at: 1, cancel: cancel})
	err := m.Forward(ctx, []Step{{Seq: seq, Tokens: toks[4:]}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "layer 2") {
		t.Fatalf("mid-pass cancel: err %v, want context.Canceled before layer 2", err)
	}
	m.SetLayerSource(nil)
	if seq.Pos() != 4 {
		t.Fatalf("Pos after cancelled passes = %d, want 4", seq.Pos())
	}
	got := forward(t, m, seq, toks[4:], false)[0]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d after cancellation: %v, uninterrupted %v", i, got[i], want[i])
		}
	}
}

// copyingSource simulates a streaming tier: every Layer call hands out a
// fresh copy of the layer's bytes, and it tracks Layer/Release pairing.
type copyingSource struct {
	w        *Weights
	held     int
	layers   int
	releases int
	bad      func(i int, l *Layer) // optional corruption
	fail     int                   // layer index whose fetch fails (-1 none)
}

func (c *copyingSource) Layer(i int) (*Layer, error) {
	if c.held != -1 {
		return nil, fmt.Errorf("layer %d requested while layer %d is held", i, c.held)
	}
	if i == c.fail {
		return nil, errors.New("fetch failed")
	}
	src := c.w.Layers[i]
	l := src
	for _, t := range []*Tensor{&l.AttnNorm, &l.Q, &l.K, &l.V, &l.O, &l.PostAttnNorm, &l.FFNNorm, &l.Gate, &l.Up, &l.Down, &l.PostFFNNorm} {
		t.Data = append([]byte(nil), t.Data...)
	}
	if c.bad != nil {
		c.bad(i, &l)
	}
	c.held = i
	c.layers++
	return &l, nil
}

func (c *copyingSource) Release(i int) {
	if c.held == i {
		c.held = -1
	}
	c.releases++
}

func TestLayerSource(t *testing.T) {
	t.Parallel()
	spec := gemmaSpec()
	m := newTestModel(t, spec, 13)
	toks := randTokens(9, spec.vocab, 14)
	want := forward(t, m, m.NewSequence(0), toks, true)

	src := &copyingSource{w: m.Weights, held: -1, fail: -1}
	m.SetLayerSource(src)
	got := forward(t, m, m.NewSequence(0), toks, true)
	for r := range want {
		for v := range want[r] {
			if got[r][v] != want[r][v] {
				t.Fatalf("streamed logits differ at token %d id %d", r, v)
			}
		}
	}
	if src.layers != spec.layers || src.releases != spec.layers || src.held != -1 {
		t.Fatalf("source saw %d fetches, %d releases, held %d; want %d, %d, none",
			src.layers, src.releases, src.held, spec.layers, spec.layers)
	}

	tests := []struct {
		name string
		src  *copyingSource
		want string
	}{
		{"fetch error", &copyingSource{w: m.Weights, held: -1, fail: 2}, "fetch failed"},
		{"short tensor", &copyingSource{w: m.Weights, held: -1, fail: -1, bad: func(i int, l *Layer) {
			if i == 1 {
				l.Up.Data = l.Up.Data[:len(l.Up.Data)-4]
			}
		}}, "blk.1.ffn_up.weight"},
		{"wrong shape", &copyingSource{w: m.Weights, held: -1, fail: -1, bad: func(i int, l *Layer) {
			l.K.Rows, l.K.Cols = l.K.Cols, l.K.Rows
		}}, "blk.0.attn_k.weight"},
		{"missing post norm", &copyingSource{w: m.Weights, held: -1, fail: -1, bad: func(i int, l *Layer) {
			l.PostFFNNorm = Tensor{}
		}}, "post_ffw_norm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m.SetLayerSource(tc.src)
			defer m.SetLayerSource(nil)
			seq := m.NewSequence(0)
			err := m.Forward(context.Background(), []Step{{Seq: seq, Tokens: toks}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
			if seq.Pos() != 0 {
				t.Fatalf("failed pass advanced the sequence to %d", seq.Pos())
			}
			if tc.src.held != -1 {
				t.Fatalf("layer %d not released after failure", tc.src.held)
			}
		})
	}
}

func TestSequenceResetTruncate(t *testing.T) {
	t.Parallel()
	spec := llamaSpec()
	m := newTestModel(t, spec, 15)
	a, b := randTokens(6, spec.vocab, 16), randTokens(3, spec.vocab, 17)
	seq := m.NewSequence(0)
	forward(t, m, seq, append(append([]int32(nil), a...), b...), false)
	if err := seq.Truncate(6); err != nil {
		t.Fatal(err)
	}
	c := []int32{5, 6}
	got := forward(t, m, seq, c, false)[0]
	want := forward(t, m, m.NewSequence(0), append(append([]int32(nil), a...), c...), false)[0]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after Truncate logit %d: %v, want %v", i, got[i], want[i])
		}
	}
	if err := seq.Truncate(9); err == nil {
		t.Fatal("Truncate past Pos succeeded")
	}
	seq.Reset()
	if seq.Pos() != 0 {
		t.Fatalf("Pos after Reset = %d", seq.Pos())
	}
	got = forward(t, m, seq, c, false)[0]
	want = forward(t, m, m.NewSequence(0), c, false)[0]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after Reset logit %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestLogitsBufferReuse(t *testing.T) {
	t.Parallel()
	spec := llamaSpec()
	m := newTestModel(t, spec, 18)
	seq := m.NewSequence(0)
	buf := [][]float32{make([]float32, spec.vocab)}
	b := []Step{{Seq: seq, Tokens: []int32{1, 2}, Logits: buf}}
	if err := m.Forward(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if &b[0].Logits[0][0] != &buf[0][0] {
		t.Fatal("caller's logits buffer was not reused")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(c *Config)
	}{
		{"arch", func(c *Config) { c.Arch = "mistral" }},
		{"zero vocab", func(c *Config) { c.Vocab = 0 }},
		{"huge dim", func(c *Config) { c.Dim = 1 << 20 }},
		{"heads not divisible", func(c *Config) { c.KVHeads = 3 }},
		{"odd head dim", func(c *Config) { c.HeadDim = 15 }},
		{"zero eps", func(c *Config) { c.NormEps = 0 }},
		{"nan theta", func(c *Config) { c.RopeTheta = math.NaN() }},
		{"rope freqs length", func(c *Config) { c.RopeFreqs = []float32{1} }},
		{"rope freqs zero", func(c *Config) { c.RopeFreqs = make([]float32, c.HeadDim/2) }},
		{"negative softcap", func(c *Config) { c.AttnSoftcap = -1 }},
		{"zero scale", func(c *Config) { c.AttnScale = 0 }},
		{"negative window", func(c *Config) { c.SlidingWindow = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := llamaSpec().config()
			tc.mod(&c)
			if err := c.Validate(); err == nil {
				t.Fatal("Validate accepted a bad config")
			}
			if _, err := New(c, randomWeights(llamaSpec(), 1)); err == nil {
				t.Fatal("New accepted a bad config")
			}
		})
	}
}

func TestNewRejectsBadWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(w *Weights)
		want string
	}{
		{"layer count", func(w *Weights) { w.Layers = w.Layers[:1] }, "layers"},
		{"missing tensor", func(w *Weights) { w.Layers[1].Down = Tensor{} }, "blk.1.ffn_down.weight"},
		{"quantized norm", func(w *Weights) { w.OutputNorm.Type = 8 }, "output_norm.weight"},
		{"short data", func(w *Weights) { w.Embed.Data = w.Embed.Data[:10] }, "token_embd.weight"},
		{"transposed", func(w *Weights) { l := &w.Layers[0].Down; l.Rows, l.Cols = l.Cols, l.Rows }, "blk.0.ffn_down.weight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := randomWeights(llamaSpec(), 1)
			tc.mod(w)
			_, err := New(llamaSpec().config(), w)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestLargeScratchIsDropped(t *testing.T) {
	t.Parallel()
	spec := llamaSpec()
	m := newTestModel(t, spec, 19)
	toks := randTokens(20, spec.vocab, 20)
	want := forward(t, m, m.NewSequence(0), toks, true)

	m.keepScratch = 1000 // floats: a 20-token pass needs far more
	got := forward(t, m, m.NewSequence(0), toks, true)
	if m.sc.bufs != nil || m.sc.h != nil {
		t.Fatal("oversized scratch kept after the pass")
	}
	again := forward(t, m, m.NewSequence(0), toks, true)
	for r := range want {
		for v := range want[r] {
			if got[r][v] != want[r][v] || again[r][v] != want[r][v] {
				t.Fatalf("token %d logit %d differs after dropping scratch", r, v)
			}
		}
	}
}
