package model

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/internal/synth"
)

// The tiny catalogue shapes, transcribed from the model conventions rather
// than taken from package synth, so these tests also check what synth
// writes.
var catalogue = map[string]testSpec{
	ArchLlama: {
		arch: ArchLlama, vocab: 512, dim: 256, ffn: 512, layers: 2, heads: 4, kvHeads: 2, headDim: 64,
		context: 256, theta: 500000, llama3: &llama3Scaling{8, 1, 4, 32}, eps: 1e-5,
	},
	ArchGemma2: {
		arch: ArchGemma2, vocab: 512, dim: 256, ffn: 512, layers: 4, heads: 4, kvHeads: 2, headDim: 64,
		context: 256, theta: 10000, qpas: 64, attnCap: 50, finalCap: 30, window: 8, eps: 1e-6,
	},
	ArchQwen3MoE: {
		arch: ArchQwen3MoE, vocab: 512, dim: 256, ffn: 256, layers: 2, heads: 4, kvHeads: 2, headDim: 128,
		context: 256, theta: 1000000, eps: 1e-6, experts: 8, used: 4, denseFFN: 512,
	},
	"mixtral": {
		arch: ArchLlama, vocab: 512, dim: 256, ffn: 256, layers: 2, heads: 4, kvHeads: 2, headDim: 64,
		context: 256, theta: 1e6, eps: 1e-5, experts: 8, used: 2,
	},
	ArchGemma3: {
		arch: ArchGemma3, vocab: 512, dim: 256, ffn: 512, layers: 6, heads: 4, kvHeads: 2, headDim: 128,
		context: 256, theta: 1000000, qpas: 128, window: 8, eps: 1e-6, tied: true, linear: 8,
	},
	ArchPhi3: func() testSpec {
		long, short := make([]float32, 32), make([]float32, 32)
		for i := range long {
			x := float64(i) / 31
			long[i], short[i] = float32(1+7*x*x), float32(1+0.25*x)
		}
		return testSpec{
			arch: ArchPhi3, vocab: 512, dim: 256, ffn: 512, layers: 2, heads: 4, kvHeads: 4, headDim: 64,
			context: 256, theta: 10000, eps: 1e-5, longFactors: long, shortFactors: short, origContext: 32,
			attnFactor: float64(float32(math.Sqrt(1 + math.Log(8)/math.Log(32)))),
		}
	}(),
	"mistral": {
		arch: ArchLlama, vocab: 512, dim: 256, ffn: 512, layers: 2, heads: 4, kvHeads: 2, headDim: 128,
		context: 256, theta: 1000000, window: 8, eps: 1e-5,
	},
	ArchQwen2: {
		arch: ArchQwen2, vocab: 512, dim: 256, ffn: 512, layers: 2, heads: 4, kvHeads: 2, headDim: 64,
		context: 256, theta: 1000000, eps: 1e-6, tied: true,
	},
	ArchQwen3: {
		arch: ArchQwen3, vocab: 512, dim: 256, ffn: 512, layers: 2, heads: 4, kvHeads: 2, headDim: 128,
		context: 256, theta: 1000000, eps: 1e-6,
	},
}

var synthTypes = []string{"f32", "f16", "q8_0", "q4_k_m"}

var (
	synthMu    sync.Mutex
	synthFiles = map[string]string{}
	synthDir   string // made by TestMain, removed when the tests end
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-model-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "model tests:", err)
		os.Exit(1)
	}
	synthDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// synthModel writes (once per test binary) a tiny synthetic model and
// returns its path.
func synthModel(tb testing.TB, arch, typ string) string {
	tb.Helper()
	synthMu.Lock()
	defer synthMu.Unlock()
	key := arch + "/" + typ
	if p, ok := synthFiles[key]; ok {
		return p
	}
	p := filepath.Join(synthDir, fmt.Sprintf("%s-%s.gguf", arch, typ))
	if err := synth.Write(p, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: 1}); err != nil {
		tb.Fatalf("synth.Write %s: %v", key, err)
	}
	synthFiles[key] = p
	return p
}

// TestSynthMatchesReference loads every tiny synthetic model and compares
// the engine with the float64 reference over a prompt longer than gemma2's
// window, token by token and as a prefill.
func TestSynthMatchesReference(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{ArchLlama, ArchGemma2, ArchGemma3, "mistral", ArchPhi3, ArchQwen2, ArchQwen3, "mixtral", ArchQwen3MoE} {
		for _, typ := range synthTypes {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				if raceEnabled && arch != ArchLlama && arch != ArchGemma2 && typ != "q4_k_m" {
					t.Skip("the race detector's run checks the newer architectures in Q4_K_M only")
				}
				spec := catalogue[arch]
				m, err := Open(synthModel(t, arch, typ))
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer m.Close()
				want := spec.config()
				want.TiedOutput = arch == ArchGemma2 || spec.tied
				if !configsEqual(m.Config, want) {
					t.Fatalf("config from synth file\n got %+v\nwant %+v", m.Config, want)
				}
				ref := newRef(t, refParamsOf(spec), m.Weights)
				toks := randTokens(14, spec.vocab, 31)
				seq := m.NewSequence(0)
				worst := 0.0
				refLogits := make([][]float64, len(toks))
				for i, tok := range toks {
					refLogits[i] = ref.step(tok)
					got := forward(t, m, seq, []int32{tok}, false)[0]
					worst = math.Max(worst, relErr(got, refLogits[i]))
				}
				if worst > 1e-4 {
					t.Fatalf("worst relative error %.3g vs reference", worst)
				}
				all := forward(t, m, m.NewSequence(0), toks, true)
				for i := range toks {
					if e := relErr(all[i], refLogits[i]); e > 1e-4 {
						t.Fatalf("prefill token %d: relative error %.3g", i, e)
					}
				}
				t.Logf("worst relative error %.3g", worst)
			})
		}
	}
}

// configsEqual compares configs, RopeFreqs within float32 rounding of the
// converter formula.
func configsEqual(a, b Config) bool {
	if len(a.RopeFreqs) != len(b.RopeFreqs) {
		return false
	}
	for i := range a.RopeFreqs {
		if math.Abs(float64(a.RopeFreqs[i]-b.RopeFreqs[i])) > 1e-6*float64(b.RopeFreqs[i]) {
			return false
		}
	}
	a.RopeFreqs, b.RopeFreqs = nil, nil
	return reflect.DeepEqual(a, b)
}

// planFromFile turns a mapped GGUF back into an editable plan.
func planFromFile(mp *gguf.Mapped) *ggufPlan {
	p := &ggufPlan{kv: append([]gguf.KV(nil), mp.KV...)}
	for i := range mp.Tensors {
		ti := &mp.Tensors[i]
		p.tensors = append(p.tensors, planTensor{ti.Name, ti.Type, append([]uint64(nil), ti.Dims...), mp.Data(ti)})
	}
	return p
}

// TestSynthLoadErrors edits a synthetic q4_k_m model: a missing tensor and
// a tensor with the wrong dims must each be named in LoadGGUF's error.
func TestSynthLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		arch string
		mod  func(p *ggufPlan)
		want string
	}{
		{"missing attn_v", ArchLlama, func(p *ggufPlan) { p.dropTensor("blk.1.attn_v.weight") }, "missing tensor blk.1.attn_v.weight"},
		{"missing post norm", ArchGemma2, func(p *ggufPlan) { p.dropTensor("blk.2.post_attention_norm.weight") }, "missing tensor blk.2.post_attention_norm.weight"},
		{"wrong ffn dims", ArchLlama, func(p *ggufPlan) { p.tensor("blk.0.ffn_up.weight").dims[1] = 256 }, "blk.0.ffn_up.weight has dims [256 256], want [256 512]"},
		{"wrong output dims", ArchLlama, func(p *ggufPlan) { p.tensor("output.weight").dims[1] = 256 }, "output.weight"},
		{"missing bias", ArchQwen2, func(p *ggufPlan) { p.dropTensor("blk.1.attn_k.bias") }, "missing tensor blk.1.attn_k.bias"},
		{"wrong bias dims", ArchQwen2, func(p *ggufPlan) { p.tensor("blk.0.attn_q.bias").dims[0] = 128 }, "blk.0.attn_q.bias has dims [128], want [256]"},
		{"gemma3 without window", ArchGemma3, func(p *ggufPlan) { p.dropKV("gemma3.attention.sliding_window") }, "missing or non-integer gemma3.attention.sliding_window"},
		{"missing k norm", ArchQwen3, func(p *ggufPlan) { p.dropTensor("blk.0.attn_k_norm.weight") }, "missing tensor blk.0.attn_k_norm.weight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mp := mapFile(t, synthModel(t, tc.arch, "q4_k_m"))
			p := planFromFile(mp)
			tc.mod(p)
			_, err := LoadGGUF(mapFile(t, p.write(t, t.TempDir())))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("unedited copy loads", func(t *testing.T) {
		t.Parallel()
		p := planFromFile(mapFile(t, synthModel(t, ArchLlama, "q4_k_m")))
		if _, err := LoadGGUF(mapFile(t, p.write(t, t.TempDir()))); err != nil {
			t.Fatalf("LoadGGUF of an unedited copy: %v", err)
		}
	})
}
