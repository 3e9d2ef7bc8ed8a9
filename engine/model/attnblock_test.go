package model

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// TestPromptAttention: attention by four-query blocks (attnblock.go),
// over architectures whose blocks hold one token's heads or several
// tokens' (groups of two query heads a key-value head, phi3's one),
// sliding windows shorter than the prompt (mistral, gemma3), and a prompt
// long enough to span several key blocks. Every prompt token's logits
// are the same bits whole, in pieces of 7, a token at a time, and beside
// another sequence's prompt and a decode step, and stay within the
// reference's NMSE bound. With float32 weights (no tile path for prompt
// tokens) the prompt fed as generated tokens, one a step, gives the same
// bits too: a token's attention does not depend on its step. Each case
// runs again with spans of one key block (attnSpan's 256 positions are
// more than the prompt), so that a decode step's spans are items of their
// own, merged after them, while a whole prompt's blocks take theirs in
// turn. Every vector kernel family here runs it (AVX2's softmax sums
// differently from AVX-512's: each family keeps its own bits).
func TestPromptAttention(t *testing.T) {
	t.Parallel()
	type tcase struct {
		arch, typ string
		span      int
		impl      gemv.Impl
	}
	var cases []tcase
	for _, impl := range gemv.Impls()[1:] {
		for _, c := range []tcase{
			{ArchLlama, "f32", 0, impl}, {"mistral", "f32", 0, impl}, {ArchGemma3, "f32", 0, impl}, {ArchPhi3, "f32", 0, impl}, {ArchQwen3, "f32", 0, impl}, {ArchLlama, "q4_k_m", 0, impl},
		} {
			cases = append(cases, c, tcase{c.arch, c.typ, gemv.KeyBlock, impl})
		}
	}
	if len(cases) == 0 {
		t.Skip("no vector kernels here")
	}
	for _, c := range cases {
		impl := c.impl
		t.Run(fmt.Sprintf("%v/%s/%s/span %d", impl, c.arch, c.typ, c.span), func(t *testing.T) {
			t.Parallel()
			m, err := Open(synthModel(t, c.arch, c.typ))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !gemv.AttnBlock(impl, m.Config.HeadDim) {
				t.Skipf("no block kernels for heads of %d here (%v)", m.Config.HeadDim, impl)
			}
			ref, err := Open(synthModel(t, c.arch, c.typ))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			m.UseGEMV(impl)
			m.sc.attn.span = c.span
			ctx := context.Background()
			toks := randTokens(75, m.Config.Vocab, 4)
			other := randTokens(30, m.Config.Vocab, 6)
			// feed runs the prompt in pieces of n, beside another
			// sequence's prompt and a third's decode steps when beside,
			// and returns every prompt token's logits.
			feed := func(n int, prompt, beside bool) [][]float32 {
				s, o, d := m.NewSequence(0), m.NewSequence(0), m.NewSequence(0)
				if beside {
					forward(t, m, d, other[:3], false)
				}
				var rows [][]float32
				for lo := 0; lo < len(toks); lo += n {
					b := []Step{{Seq: s, Tokens: toks[lo:min(lo+n, len(toks))], Prompt: prompt, AllLogits: true}}
					if beside {
						b = append(b, Step{Seq: d, Tokens: other[lo%3 : lo%3+1]})
						if lo < len(other) {
							b = append(b, Step{Seq: o, Tokens: other[lo:min(lo+n, len(other))], Prompt: true})
						}
					}
					if err := m.Forward(ctx, b); err != nil {
						t.Fatal(err)
					}
					for _, r := range b[0].Logits {
						rows = append(rows, slices.Clone(r))
					}
				}
				return rows
			}
			whole := feed(len(toks), true, false)
			for _, p := range []struct {
				n      int
				beside bool
			}{{7, false}, {1, false}, {len(toks), true}, {16, true}} {
				got := feed(p.n, true, p.beside)
				for i := range whole {
					if !slices.Equal(got[i], whole[i]) {
						t.Fatalf("prompt in pieces of %d (beside others: %v): token %d's logits differ from the whole prompt's (NMSE %.3g)", p.n, p.beside, i, quant.NMSE(got[i], whole[i]))
					}
				}
			}
			want := forward(t, ref, ref.NewSequence(0), toks, true)
			for i := range want {
				if e := quant.NMSE(whole[i], want[i]); !(e <= 1e-4) {
					t.Fatalf("token %d: NMSE %.3g against the reference", i, e)
				}
			}
			if c.typ == "f32" {
				got := feed(1, false, false)
				for i := range whole {
					if !slices.Equal(got[i], whole[i]) {
						t.Fatalf("token %d fed as a generated one: its logits differ from the whole prompt's (NMSE %.3g)", i, quant.NMSE(got[i], whole[i]))
					}
				}
			}
		})
	}
}
