package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/synth"
)

// greedyCases are sampler parameters and whether GreedyOnly must allow
// the backend's greedy token for them.
var greedyCases = []struct {
	name string
	p    sample.Params
	want bool
}{
	{"sample.Greedy", sample.Greedy(), true},
	{"temperature 0, top-k/top-p/min-p and a seed", sample.Params{Temperature: 0, TopK: 40, TopP: 0.5, MinP: 0.2, RepeatPenalty: 1, RepeatLastN: 64, Seed: 9}, true},
	{"temperature 0, penalty over an empty window", sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1.3, RepeatLastN: 0}, true},
	{"temperature 0, penalty over the last 64", sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1.3, RepeatLastN: 64}, false},
	{"temperature 0, penalty over the whole history", sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 0.8, RepeatLastN: -1}, false},
	{"llama.cpp defaults", sample.DefaultParams(1), false},
	{"a tiny temperature", sample.Params{Temperature: 1e-6, TopP: 1, RepeatPenalty: 1}, false},
}

// TestGreedyOnly checks the decision and that it is sound: wherever
// GreedyOnly allows it, the token hostGreedy (and the GPU's argmax, which
// kernels tests against the same rule) chooses equals what the request's
// own sampler draws from the same logits and history — on rows with ties,
// NaN and infinities — and for every parameter set it refuses there is a
// row where the two differ, so the refusal is needed.
func TestGreedyOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rows := [][]float32{
		{1, 3, 3, 2},                  // tie: the lower id
		{float32(math.NaN()), -1, -1}, // NaN is never chosen
		{float32(math.Inf(-1)), float32(math.NaN())},
		{float32(math.Inf(1)), float32(math.Inf(1)), 0},
		{2, 1.9, 0.5, 0.4}, // a penalty on id 0 flips it
	}
	for range 200 {
		r := make([]float32, 64)
		for i := range r {
			r[i] = float32(rng.IntN(6)) / 4 // many ties
		}
		if rng.IntN(4) == 0 {
			r[rng.IntN(len(r))] = float32(math.NaN())
		}
		rows = append(rows, r)
	}
	history := []int32{0, 5, 0, 3}
	for _, tc := range greedyCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := GreedyOnly(tc.p); got != tc.want {
				t.Fatalf("GreedyOnly(%+v) = %v, want %v", tc.p, got, tc.want)
			}
			differ := false
			for i, row := range rows {
				s, err := sample.New(tc.p)
				if err != nil {
					t.Fatal(err)
				}
				want := s.Sample(row, history)
				b := []Step{{Logits: [][]float32{{9, 9}, row}, Greedy: true}}
				hostGreedy(b)
				if b[0].Token != want {
					differ = true
					if tc.want {
						t.Errorf("row %d %v: greedy token %d, the sampler draws %d", i, row, b[0].Token, want)
					}
				}
			}
			if !tc.want && !differ {
				t.Errorf("refused, but the sampler drew the greedy token on all %d rows: the refusal is not shown to be needed", len(rows))
			}
		})
	}
}

// recorder is a Backend that records which passes asked for Greedy.
type recorder struct {
	Backend
	greedy []bool
}

func (r *recorder) Forward(ctx context.Context, batch []Step) error {
	r.greedy = append(r.greedy, batch[0].Greedy)
	return r.Backend.Forward(ctx, batch)
}

// TestGenerateGreedyDispatch: Generate asks the backend for its greedy
// token exactly when GreedyOnly allows it, on every pass, and its tokens
// equal a loop that samples the full logits on the host.
func TestGenerateGreedyDispatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := synth.Write(path, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 5}); err != nil {
		t.Fatal(err)
	}
	e, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rec := &recorder{Backend: e.backend}
	e.backend = rec
	ctx := context.Background()
	prompt := []int32{1, 17, 42, 9}
	for _, tc := range greedyCases {
		t.Run(tc.name, func(t *testing.T) {
			rec.greedy = nil
			var got []int32
			res, err := e.Generate(ctx, Request{Tokens: prompt, MaxTokens: 12, Sample: tc.p}, func(tok Token) error {
				if tok.ID >= 0 {
					got = append(got, tok.ID)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.CompletionTokens < 4 || len(rec.greedy) == 0 {
				t.Fatalf("%d tokens generated in %d passes: too few to compare", res.CompletionTokens, len(rec.greedy))
			}
			for i, g := range rec.greedy {
				if g != tc.want {
					t.Fatalf("pass %d: Greedy %v, want %v", i, g, tc.want)
				}
			}
			// The reference: full logits, the request's sampler on the host.
			smp, err := sample.New(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			seq, err := e.NewSequence(0)
			if err != nil {
				t.Fatal(err)
			}
			defer seq.Close()
			history := append([]int32(nil), prompt...)
			b := []Step{{Seq: seq, Tokens: prompt}}
			var want []int32
			for len(want) < res.CompletionTokens {
				if err := rec.Backend.Forward(ctx, b); err != nil {
					t.Fatal(err)
				}
				id := smp.Sample(b[0].Logits[len(b[0].Logits)-1], history)
				history = append(history, id)
				want = append(want, id)
				b[0] = Step{Seq: seq, Tokens: []int32{id}, Logits: b[0].Logits}
			}
			if len(got) != len(want) {
				t.Fatalf("generated %v, reference %v", got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("token %d: generated %v, reference %v", i, got, want)
				}
			}
		})
	}
}
