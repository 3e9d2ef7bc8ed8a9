package prefab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/synth"
)

// testDir holds the synthetic models the tests share (made once per run).
var (
	testDir   string
	synthMu   sync.Mutex
	synthMade = map[string]string{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "tier-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// synthModel returns the path of a tiny synthetic GGUF of arch and type,
// writing it on first use.
func synthModel(t testing.TB, arch, typ string) string {
	t.Helper()
	synthMu.Lock()
	defer synthMu.Unlock()
	key := arch + "-" + typ
	if p, ok := synthMade[key]; ok {
		return p
	}
	p := filepath.Join(testDir, key+".gguf")
	if err := synth.Write(p, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: 7}); err != nil {
		t.Fatalf("synth %s: %v", key, err)
	}
	synthMade[key] = p
	return p
}

// prefab writes a pool of the tiny arch/srcType model converted to typ
// into dir and returns the pool's path and the mapped GGUF (closed at the
// end of the test).
func prefab(t testing.TB, dir, arch, srcType, typ string) (string, *gguf.Mapped) {
	t.Helper()
	src := synthModel(t, arch, srcType)
	m, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	out := filepath.Join(dir, fmt.Sprintf("%s-%s-%s.pool", arch, srcType, typ))
	if err := WritePool(m, out, Options{Type: typ, Source: filepath.Base(src)}); err != nil {
		t.Fatalf("WritePool %s %s -> %s: %v", arch, srcType, typ, err)
	}
	return out, m
}

// logitsRun runs a fixed prompt and then fixed single-token steps on m (the
// same tokens whatever m predicts, so two models stay comparable) and
// returns the logits of every step.
func logitsRun(t testing.TB, m *model.Model, steps int) [][]float32 {
	t.Helper()
	seq := m.NewSequence(64)
	tokens := []int32{1, 17, 42, 99, 3, 250, 7, 11}
	var out [][]float32
	for s := 0; s < steps; s++ {
		b := []model.Step{{Seq: seq, Tokens: tokens}}
		if err := m.Forward(context.Background(), b); err != nil {
			t.Fatalf("forward step %d: %v", s, err)
		}
		out = append(out, append([]float32(nil), b[0].Logits[0]...))
		tokens = []int32{int32(5 + 61*s)}
	}
	return out
}

// miniModel builds a very small llama in memory (2 layers, dim 32) with a
// byte vocabulary, for fuzz seeds and fast format tests.
func miniModel(t testing.TB) (*model.Model, *tokenizer.Vocab) {
	t.Helper()
	cfg := model.Config{
		Arch: model.ArchLlama, Vocab: 8, Dim: 32, FFN: 64, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16,
		Context: 16, RopeTheta: 10000, NormEps: 1e-5, AttnScale: 0.25, EmbedScale: 1,
	}
	rnd := uint32(1)
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			rnd = rnd*1664525 + 1013904223
			v[i] = float32(int32(rnd>>8)%2000) / 20000
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	d, q, kv, f := cfg.Dim, cfg.QDim(), cfg.KVDim(), cfg.FFN
	w := &model.Weights{
		Embed:      model.F32Tensor("token_embd.weight", cfg.Vocab, d, vals(cfg.Vocab*d)),
		OutputNorm: model.F32Tensor("output_norm.weight", 1, d, ones(d)),
		Output:     model.F32Tensor("output.weight", cfg.Vocab, d, vals(cfg.Vocab*d)),
	}
	for range cfg.Layers {
		w.Layers = append(w.Layers, model.Layer{
			AttnNorm: model.F32Tensor("", 1, d, ones(d)),
			Q:        model.F32Tensor("", q, d, vals(q*d)),
			K:        model.F32Tensor("", kv, d, vals(kv*d)),
			V:        model.F32Tensor("", kv, d, vals(kv*d)),
			O:        model.F32Tensor("", d, q, vals(d*q)),
			FFNNorm:  model.F32Tensor("", 1, d, ones(d)),
			Gate:     model.F32Tensor("", f, d, vals(f*d)),
			Up:       model.F32Tensor("", f, d, vals(f*d)),
			Down:     model.F32Tensor("", d, f, vals(d*f)),
		})
	}
	m, err := model.New(cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	v := &tokenizer.Vocab{
		Model: tokenizer.ModelGPT2, Pre: "llama-bpe",
		Tokens: []string{"a", "b", "c", "ab", "bc", "\xff\xfe", "<s>", "</s>"},
		Types:  []int32{1, 1, 1, 1, 1, 1, 3, 3}, Merges: []string{"a b", "b c"},
		BOS: 6, EOS: 7, EOT: -1, PAD: -1, UNK: -1, AddBOS: true, ChatTemplate: "{{ x }}",
	}
	return m, v
}
