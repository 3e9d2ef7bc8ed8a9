package model

import (
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// TestGEMVMatchesReference: a model on engine/gemv's kernels (every kernel
// family this machine runs) against the same model on quant's float
// reference: logits NMSE at most 1e-4 at every step of a decode and a
// prefill, and the same greedy token at every step.
func TestGEMVMatchesReference(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{ArchLlama, ArchGemma2} {
		for _, typ := range synthTypes {
			for _, impl := range gemv.Impls() {
				t.Run(arch+"/"+typ+"/"+impl.String(), func(t *testing.T) {
					t.Parallel()
					ref, err := Open(synthModel(t, arch, typ))
					if err != nil {
						t.Fatal(err)
					}
					defer ref.Close()
					fast, err := Open(synthModel(t, arch, typ))
					if err != nil {
						t.Fatal(err)
					}
					defer fast.Close()
					fast.UseGEMV(impl)
					toks := randTokens(12, ref.Config.Vocab, 5)
					rs, fs := ref.NewSequence(0), fast.NewSequence(0)
					worst := 0.0
					for i, tok := range toks {
						want := forward(t, ref, rs, []int32{tok}, false)[0]
						got := forward(t, fast, fs, []int32{tok}, false)[0]
						e := quant.NMSE(got, want)
						worst = max(worst, e)
						if !(e <= 1e-4) {
							t.Fatalf("step %d: logits NMSE %.3g", i, e)
						}
						if a, b := argmax(got), argmax(want); a != b {
							t.Fatalf("step %d: greedy token %d, reference %d (NMSE %.3g)", i, a, b, e)
						}
					}
					all := forward(t, fast, fast.NewSequence(0), toks, true)
					allRef := forward(t, ref, ref.NewSequence(0), toks, true)
					for i := range toks {
						if e := quant.NMSE(all[i], allRef[i]); !(e <= 1e-4) {
							t.Fatalf("prefill token %d: NMSE %.3g", i, e)
						}
					}
					t.Logf("worst decode NMSE %.3g", worst)
				})
			}
		}
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
