package model

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// TestPromptTiles: prompt tokens (Step.Prompt) take the CPU's tile path
// where it exists, and a request's results do not depend on how its
// prompt is split into steps or what it is batched with: the last prompt
// token's logits are the same bits whether the prompt comes whole, in
// pieces of five, a token at a time, or beside another sequence's decode
// step. They stay within the reference's NMSE bound, and differ from the
// same tokens fed as generated ones (which take the integer path), which
// shows the tiles ran.
func TestPromptTiles(t *testing.T) {
	t.Parallel()
	impl := gemv.Detect()
	if !gemv.Tiled(impl, quant.Q4_K) {
		t.Skipf("no tile unit here (%v)", impl)
	}
	for _, c := range []struct{ arch, typ string }{{ArchLlama, "q4_k_m"}, {ArchLlama, "q8_0"}, {ArchQwen3MoE, "q4_k_m"}} {
		arch, typ := c.arch, c.typ
		t.Run(arch+"/"+typ, func(t *testing.T) {
			t.Parallel()
			m, err := Open(synthModel(t, arch, typ))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ref, err := Open(synthModel(t, arch, typ))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			m.UseGEMV(impl)
			ctx := context.Background()
			toks := randTokens(23, m.Config.Vocab, 9)
			// feed runs the prompt in pieces of n (beside another
			// sequence's one-token step when beside) and returns the last
			// token's logits.
			feed := func(n int, prompt, beside bool) []float32 {
				s := m.NewSequence(0)
				other := m.NewSequence(0)
				if beside {
					forward(t, m, other, toks[:3], false)
				}
				var last []float32
				for lo := 0; lo < len(toks); lo += n {
					b := []Step{{Seq: s, Tokens: toks[lo:min(lo+n, len(toks))], Prompt: prompt}}
					if beside {
						b = append(b, Step{Seq: other, Tokens: toks[lo%3 : lo%3+1]})
					}
					if err := m.Forward(ctx, b); err != nil {
						t.Fatal(err)
					}
					last = slices.Clone(b[0].Logits[0])
				}
				return last
			}
			whole := feed(len(toks), true, false)
			for _, c := range []struct {
				n      int
				beside bool
			}{{5, false}, {1, false}, {len(toks), true}, {4, true}} {
				if got := feed(c.n, true, c.beside); !slices.Equal(got, whole) {
					t.Fatalf("prompt in pieces of %d (beside a decode step: %v): the last token's logits differ from the whole prompt's (NMSE %.3g)", c.n, c.beside, quant.NMSE(got, whole))
				}
			}
			want := forward(t, ref, ref.NewSequence(0), toks, false)[0]
			if e := quant.NMSE(whole, want); !(e <= 1e-4) {
				t.Fatalf("tiled prompt: NMSE %.3g against the reference", e)
			}
			if slices.Equal(feed(len(toks), false, false), whole) {
				t.Fatal("the prompt's logits are the integer path's bits: the tiles did not run")
			}
		})
	}
}
