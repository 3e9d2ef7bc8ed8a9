package model

import (
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// TestPadWidths: a llama with heads of 8 and an FFN of 44 (and llama3
// RoPE scaling, whose divisors the padding composes with), and the real
// stories260K where the machine has it, widened to multiples of 32 give
// the logits of the model as it is at every step; other architectures are
// refused.
func TestPadWidths(t *testing.T) {
	t.Parallel()
	spec := testSpec{
		arch: ArchLlama, vocab: 97, dim: 64, ffn: 44, layers: 2, heads: 8, kvHeads: 4, headDim: 8,
		context: 64, theta: 10000, llama3: &llama3Scaling{8, 1, 4, 16}, eps: 1e-5,
	}
	m := newTestModel(t, spec, 3)
	check := func(t *testing.T, m *Model, steps int) {
		t.Helper()
		if !NeedsPadding(m.Config, 32) {
			t.Fatalf("config %+v needs no padding", m.Config)
		}
		pc, pw, err := PadWidths(m.Config, m.Weights, 32)
		if err != nil {
			t.Fatal(err)
		}
		if pc.HeadDim%32 != 0 || pc.FFN%32 != 0 || NeedsPadding(pc, 32) || pc.AttnScale != m.Config.AttnScale {
			t.Fatalf("padded config %+v", pc)
		}
		p, err := New(pc, pw)
		if err != nil {
			t.Fatal(err)
		}
		toks := randTokens(steps, m.Config.Vocab, 4)
		want := forward(t, m, m.NewSequence(0), toks, true)
		got := forward(t, p, p.NewSequence(0), toks, true)
		for i := range want {
			if e := quant.NMSE(got[i], want[i]); !(e <= 1e-10) {
				t.Fatalf("step %d: logits NMSE %.3g between the padded and the original model", i, e)
			}
		}
	}
	check(t, m, 12)
	if path := os.Getenv("STRATA_STORIES_GGUF"); path != "" {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s, 24)
	}
	for _, tc := range []struct {
		name string
		spec testSpec
		want string
	}{
		{"rotate-half rope", gemmaSpec(), "not padded"},
		{"experts", mixtralSpec(), "not padded"},
	} {
		m := newTestModel(t, tc.spec, 1)
		if _, _, err := PadWidths(m.Config, m.Weights, 32); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
