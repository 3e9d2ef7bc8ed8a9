package model

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/quant"
)

func mapFile(t *testing.T, path string) *gguf.Mapped {
	t.Helper()
	mp, err := gguf.Map(path)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	t.Cleanup(func() { mp.Close() })
	return mp
}

// TestLoadGGUFRoundTrip writes in-memory models as GGUF, loads them back
// and checks the config and that logits are unchanged.
func TestLoadGGUFRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range specs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := newTestModel(t, tc.spec, 21)
			path := planFor(tc.spec, mem.Weights).write(t, t.TempDir())
			m, err := LoadGGUF(mapFile(t, path))
			if err != nil {
				t.Fatalf("LoadGGUF: %v", err)
			}
			if !reflect.DeepEqual(m.Config, mem.Config) {
				t.Fatalf("config\n got %+v\nwant %+v", m.Config, mem.Config)
			}
			toks := randTokens(12, tc.spec.vocab, 22)
			got := forward(t, m, m.NewSequence(0), toks, true)
			want := forward(t, mem, mem.NewSequence(0), toks, true)
			if !reflect.DeepEqual(got, want) {
				t.Fatal("logits of the loaded model differ from the in-memory model")
			}
		})
	}
	t.Run("llama3 freqs times linear scaling", func(t *testing.T) {
		t.Parallel()
		spec := llamaSpec()
		p := planFor(spec, randomWeights(spec, 1))
		p.setKV("llama.rope.scaling.factor", float32(2))
		m, err := LoadGGUF(mapFile(t, p.write(t, t.TempDir())))
		if err != nil {
			t.Fatal(err)
		}
		want := llama3Factors(spec.headDim, spec.theta, *spec.llama3)
		for i := range want {
			if got := m.Config.RopeFreqs[i]; got != 2*want[i] {
				t.Fatalf("RopeFreqs[%d] = %v, want 2 x %v", i, got, want[i])
			}
		}
	})
	t.Run("open and close", func(t *testing.T) {
		t.Parallel()
		spec := llamaSpec()
		path := planFor(spec, randomWeights(spec, 1)).write(t, t.TempDir())
		m, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		forward(t, m, m.NewSequence(0), []int32{1, 2, 3}, false)
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func TestLoadGGUFErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec testSpec
		mod  func(p *ggufPlan)
		want string
	}{
		{"missing layer tensor", llamaSpec(), func(p *ggufPlan) { p.dropTensor("blk.1.ffn_gate.weight") }, "missing tensor blk.1.ffn_gate.weight"},
		{"missing output", gemmaSpec(), func(p *ggufPlan) { p.dropTensor("output_norm.weight") }, "missing tensor output_norm.weight"},
		{"missing gemma post norm", gemmaSpec(), func(p *ggufPlan) { p.dropTensor("blk.3.post_ffw_norm.weight") }, "missing tensor blk.3.post_ffw_norm.weight"},
		{"missing embedding", llamaSpec(), func(p *ggufPlan) { p.dropTensor("token_embd.weight") }, "token_embd.weight"},
		{"wrong dims", llamaSpec(), func(p *ggufPlan) {
			d := p.tensor("blk.0.attn_k.weight").dims
			d[0], d[1] = d[1], d[0]
		}, "blk.0.attn_k.weight has dims [32 64], want [64 32]"},
		{"extra dim", llamaSpec(), func(p *ggufPlan) {
			pt := p.tensor("blk.1.attn_v.weight")
			pt.dims = append(pt.dims, 2)
		}, "blk.1.attn_v.weight"},
		{"quantized norm", llamaSpec(), func(p *ggufPlan) { p.tensor("blk.0.ffn_norm.weight").typ = quant.F16 }, "blk.0.ffn_norm.weight: type F16, want F32"},
		{"embedding width", gemmaSpec(), func(p *ggufPlan) { p.setKV("gemma2.embedding_length", uint32(128)) }, "row length 64 differs from embedding length 128"},
		{"missing block count", llamaSpec(), func(p *ggufPlan) { p.dropKV("llama.block_count") }, "llama.block_count"},
		{"missing eps", gemmaSpec(), func(p *ggufPlan) { p.dropKV("gemma2.attention.layer_norm_rms_epsilon") }, "layer_norm_rms_epsilon"},
		{"kv heads", llamaSpec(), func(p *ggufPlan) { p.setKV("llama.attention.head_count_kv", uint32(3)) }, "not divisible"},
		{"vocab size", llamaSpec(), func(p *ggufPlan) { p.setKV("llama.vocab_size", uint32(100)) }, "vocab_size 100 differs"},
		{"architecture", llamaSpec(), func(p *ggufPlan) { p.setKV("general.architecture", "mamba") }, `unsupported architecture "mamba": strata runs llama, gemma2, gemma3, phi3, qwen2, qwen3`},
		{"partial rotary", llamaSpec(), func(p *ggufPlan) { p.setKV("llama.rope.dimension_count", uint32(8)) }, "partial rotary"},
		{"rope freqs length", llamaSpec(), func(p *ggufPlan) { p.tensor("rope_freqs.weight").dims = []uint64{4} }, "rope_freqs.weight"},
		{"string for int", llamaSpec(), func(p *ggufPlan) { p.setKV("llama.context_length", "many") }, "llama.context_length"},
		{"zero layers", llamaSpec(), func(p *ggufPlan) { p.setKV("llama.block_count", uint32(0)) }, "layers 0 out of range"},
		{"experts without top-k", mixtralSpec(), func(p *ggufPlan) { p.dropKV("llama.expert_used_count") }, "llama.expert_used_count is missing"},
		{"top-k above experts", mixtralSpec(), func(p *ggufPlan) { p.setKV("llama.expert_used_count", uint32(7)) }, "expert_used_count 7 out of range [1, 6]"},
		{"shared experts", mixtralSpec(), func(p *ggufPlan) { p.setKV("llama.expert_shared_count", uint32(1)) }, "shared experts are not supported"},
		{"sigmoid gating", mixtralSpec(), func(p *ggufPlan) { p.setKV("llama.expert_gating_func", uint32(2)) }, "only softmax gating"},
		{"unnormalised weights", mixtralSpec(), func(p *ggufPlan) { p.setKV("llama.expert_weights_norm", false) }, "only renormalised expert weights"},
		{"missing router", mixtralSpec(), func(p *ggufPlan) { p.dropTensor("blk.2.ffn_gate_inp.weight") }, "missing tensor blk.2.ffn_gate_inp.weight"},
		{"missing experts", mixtralSpec(), func(p *ggufPlan) { p.dropTensor("blk.1.ffn_down_exps.weight") }, "missing tensor blk.1.ffn_down_exps.weight"},
		{"expert count of a tensor", mixtralSpec(), func(p *ggufPlan) { p.tensor("blk.0.ffn_up_exps.weight").dims[2] = 5 }, "blk.0.ffn_up_exps.weight has dims [64 48 5], want [64 48 6]"},
		{"router rows", mixtralSpec(), func(p *ggufPlan) { p.tensor("blk.0.ffn_gate_inp.weight").dims[1] = 5 }, "blk.0.ffn_gate_inp.weight has dims [64 5]"},
		{"experts in a dense file", llamaSpec(), func(p *ggufPlan) {
			p.setKV("llama.expert_count", uint32(4))
			p.setKV("llama.expert_used_count", uint32(2))
		}, "missing tensor blk.0.ffn_gate_inp.weight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planFor(tc.spec, randomWeights(tc.spec, 1))
			tc.mod(p)
			_, err := LoadGGUF(mapFile(t, p.write(t, t.TempDir())))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := LoadGGUF(nil); err == nil {
		t.Fatal("LoadGGUF(nil) succeeded")
	}
	if _, err := ConfigFromGGUF(nil); err == nil {
		t.Fatal("ConfigFromGGUF(nil) succeeded")
	}
	if _, err := Open(t.TempDir() + "/absent.gguf"); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
}

// TestConfigDefaults checks llama.cpp's fallbacks for optional keys. Only
// the metadata and token_embd.weight are needed for ConfigFromGGUF.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	headerOnly := func(s testSpec, mod func(p *ggufPlan)) Config {
		t.Helper()
		p := planFor(s, randomWeights(s, 1))
		p.tensors = p.tensors[:1] // token_embd.weight
		mod(p)
		c, err := ConfigFromGGUF(mapFile(t, p.write(t, t.TempDir())).File)
		if err != nil {
			t.Fatalf("ConfigFromGGUF: %v", err)
		}
		return c
	}
	g := gemmaSpec()
	t.Run("gemma2 optional keys absent", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(g, func(p *ggufPlan) {
			for _, k := range []string{"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
				"gemma2.attention.sliding_window", "gemma2.attention.query_pre_attn_scalar",
				"gemma2.rope.freq_base", "gemma2.attention.head_count_kv"} {
				p.dropKV(k)
			}
		})
		if c.AttnSoftcap != 50 || c.FinalSoftcap != 30 || c.SlidingWindow != 4096 || c.RopeTheta != 10000 || c.KVHeads != c.Heads {
			t.Fatalf("defaults: %+v", c)
		}
		if want := float32(1 / math.Sqrt(float64(g.headDim))); c.AttnScale != want {
			t.Fatalf("AttnScale %v, want 1/sqrt(head_dim) = %v", c.AttnScale, want)
		}
		if !c.TiedOutput || c.EmbedScale != 8 {
			t.Fatalf("TiedOutput %v EmbedScale %v", c.TiedOutput, c.EmbedScale)
		}
	})
	t.Run("gemma2 27b scaling rule", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(g, func(p *ggufPlan) {
			p.dropKV("gemma2.attention.query_pre_attn_scalar")
			p.setKV("gemma2.block_count", uint32(46))
			p.setKV("gemma2.attention.key_length", uint32(8)) // dim/heads = 16 differs
			p.setKV("gemma2.attention.value_length", uint32(8))
		})
		if want := float32(1 / math.Sqrt(16)); c.AttnScale != want {
			t.Fatalf("AttnScale %v, want (n_embd/n_head)^-0.5 = %v", c.AttnScale, want)
		}
	})
	t.Run("gemma2 float query_pre_attn_scalar", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(g, func(p *ggufPlan) { p.setKV("gemma2.attention.query_pre_attn_scalar", float32(144)) })
		if want := float32(1.0 / 12); c.AttnScale != want {
			t.Fatalf("AttnScale %v, want %v", c.AttnScale, want)
		}
	})
	g3 := gemma3Spec()
	t.Run("gemma3 as llama.cpp reads it", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(g3, func(p *ggufPlan) { p.dropKV("gemma3.attention.query_pre_attn_scalar") })
		if want := float32(1 / math.Sqrt(float64(g3.headDim))); c.AttnScale != want {
			t.Fatalf("AttnScale %v, want head_dim^-0.5 = %v", c.AttnScale, want)
		}
		if c.RopeThetaLocal != 10000 || c.SlidingWindow != g3.window || c.EmbedScale != 8 || c.AttnSoftcap != 0 || c.FinalSoftcap != 0 {
			t.Fatalf("config %+v", c)
		}
		if len(c.RopeFreqs) != g3.headDim/2 || c.RopeFreqs[0] != 8 {
			t.Fatalf("linear factor of the global layers: RopeFreqs %v", c.RopeFreqs)
		}
	})
	t.Run("gemma3 27b scaling rule", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(g3, func(p *ggufPlan) {
			p.dropKV("gemma3.attention.query_pre_attn_scalar")
			p.setKV("gemma3.block_count", uint32(62))
		})
		if want := float32(1 / math.Sqrt(16)); c.AttnScale != want {
			t.Fatalf("AttnScale %v, want (n_embd/n_head)^-0.5 = %v", c.AttnScale, want)
		}
	})
	t.Run("phi3 window and attention factor", func(t *testing.T) {
		t.Parallel()
		s := phi3Spec()
		c := headerOnly(s, func(p *ggufPlan) {})
		if c.SlidingWindow != s.window || c.RopeAttnFactor != float32(s.attnFactor) || !c.Fused() {
			t.Fatalf("config %+v", c)
		}
		c = headerOnly(s, func(p *ggufPlan) {
			p.dropKV("phi3.attention.sliding_window")
			p.dropKV("phi3.rope.scaling.attn_factor")
		})
		if c.SlidingWindow != 0 || c.RopeAttnFactor != 0 {
			t.Fatalf("without the keys: window %d, attention factor %v", c.SlidingWindow, c.RopeAttnFactor)
		}
	})
	t.Run("mistral window only when the file says so", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(mistralSpec(), func(p *ggufPlan) {})
		if c.SlidingWindow != 5 || c.HeadDim != 24 {
			t.Fatalf("window %d head dim %d", c.SlidingWindow, c.HeadDim)
		}
		c = headerOnly(mistralSpec(), func(p *ggufPlan) { p.dropKV("llama.attention.sliding_window") })
		if c.SlidingWindow != 0 {
			t.Fatalf("window %d without the key", c.SlidingWindow)
		}
	})
	t.Run("llama head dim from heads", func(t *testing.T) {
		t.Parallel()
		c := headerOnly(llamaSpec(), func(p *ggufPlan) {
			p.dropKV("llama.rope.dimension_count")
			p.dropKV("llama.vocab_size")
		})
		if c.HeadDim != 16 || c.Vocab != 97 {
			t.Fatalf("HeadDim %d Vocab %d", c.HeadDim, c.Vocab)
		}
		if !c.TiedOutput { // output.weight was left out of the file
			t.Fatal("no output.weight but TiedOutput false")
		}
	})
	t.Run("llama linear rope scaling", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			kvs  []any
			want float32 // every divisor; 0: none (nil)
		}{
			{"absent", nil, 0},
			{"factor", []any{"llama.rope.scaling.factor", float32(4)}, 4},
			{"linear", []any{"llama.rope.scaling.type", "linear", "llama.rope.scaling.factor", float32(2)}, 2},
			{"none with a factor", []any{"llama.rope.scaling.type", "none", "llama.rope.scaling.factor", float32(2)}, 2},
			{"old key", []any{"llama.rope.scale_linear", float32(8)}, 8},
			{"factor 0 is none", []any{"llama.rope.scaling.factor", float32(0)}, 0},
			{"yarn factor 1", []any{"llama.rope.scaling.type", "yarn", "llama.rope.scaling.factor", float32(1)}, 0},
		} {
			c := headerOnly(llamaSpec(), func(p *ggufPlan) {
				for i := 0; i < len(tc.kvs); i += 2 {
					p.setKV(tc.kvs[i].(string), tc.kvs[i+1])
				}
			})
			switch {
			case tc.want == 0 && c.RopeFreqs != nil:
				t.Errorf("%s: RopeFreqs %v, want none", tc.name, c.RopeFreqs)
			case tc.want != 0 && (len(c.RopeFreqs) != c.HeadDim/2 || c.RopeFreqs[0] != tc.want || c.RopeFreqs[len(c.RopeFreqs)-1] != tc.want):
				t.Errorf("%s: RopeFreqs %v, want %d x %v", tc.name, c.RopeFreqs, c.HeadDim/2, tc.want)
			}
		}
	})
}

// TestRopeScalingRefused: RoPE scaling this engine does not implement, or
// a nonsensical factor, is a clear error instead of wrong positions.
func TestRopeScalingRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kvs  []any
		want string
	}{
		{[]any{"llama.rope.scaling.type", "yarn", "llama.rope.scaling.factor", float32(4)}, `RoPE scaling "yarn" (factor 4`},
		{[]any{"llama.rope.scaling.type", "longrope", "llama.rope.scaling.factor", float32(2)}, `"longrope"`},
		{[]any{"llama.rope.scaling.factor", float32(-2)}, "must be positive"},
		{[]any{"llama.rope.scaling.type", uint32(1), "llama.rope.scaling.factor", float32(2)}, "want a string"},
	} {
		p := planFor(llamaSpec(), randomWeights(llamaSpec(), 1))
		p.tensors = p.tensors[:1]
		for i := 0; i < len(tc.kvs); i += 2 {
			p.setKV(tc.kvs[i].(string), tc.kvs[i+1])
		}
		_, err := ConfigFromGGUF(mapFile(t, p.write(t, t.TempDir())).File)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.kvs, err, tc.want)
		}
	}
}

// TestPhi3RopeFactors: LongRoPE's long factors apply when the trained
// context exceeds the original one, the short ones otherwise; a file with
// only one of the two tensors is refused, one with neither rotates
// unscaled, and a zero original context is refused.
func TestPhi3RopeFactors(t *testing.T) {
	t.Parallel()
	s := phi3Spec()
	load := func(mod func(p *ggufPlan)) (*Model, error) {
		p := planFor(s, randomWeights(s, 1))
		mod(p)
		return LoadGGUF(mapFile(t, p.write(t, t.TempDir())))
	}
	for _, tc := range []struct {
		name string
		mod  func(p *ggufPlan)
		want []float32
		err  string
	}{
		{"long", func(p *ggufPlan) {}, s.longFactors, ""},
		{"short", func(p *ggufPlan) { p.setKV("phi3.rope.scaling.original_context_length", uint32(s.context)) }, s.shortFactors, ""},
		{"no original context: short", func(p *ggufPlan) { p.dropKV("phi3.rope.scaling.original_context_length") }, s.shortFactors, ""},
		{"none", func(p *ggufPlan) { p.dropTensor("rope_factors_long.weight"); p.dropTensor("rope_factors_short.weight") }, nil, ""},
		{"long missing", func(p *ggufPlan) { p.dropTensor("rope_factors_long.weight") }, nil, "missing tensor rope_factors_long.weight"},
		{"zero original context", func(p *ggufPlan) { p.setKV("phi3.rope.scaling.original_context_length", uint32(0)) }, nil, "original_context_length is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := load(tc.mod)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m.Config.RopeFreqs, tc.want) {
				t.Fatalf("RopeFreqs %v, want %v", m.Config.RopeFreqs, tc.want)
			}
		})
	}
}
