package sched

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
)

// deviceGreedy stands in for the CUDA backend's device-side arg max: for a
// pass whose steps all ask for Greedy it picks Step.Token by the greedy
// rule and leaves every logit row NaN, so a scheduler that sampled the logits of a
// greedy request would go wrong; other passes fill the logits as usual.
type deviceGreedy struct {
	engine.Backend
	greedyPasses, logitPasses int
}

func (b *deviceGreedy) Forward(ctx context.Context, batch []model.Step) error {
	all := true
	for _, st := range batch {
		all = all && st.Greedy
	}
	if err := b.Backend.Forward(ctx, batch); err != nil || !all {
		b.logitPasses++
		return err
	}
	b.greedyPasses++
	g, err := sample.New(sample.Greedy())
	if err != nil {
		return err
	}
	for i := range batch {
		batch[i].Token = g.Sample(batch[i].Logits[len(batch[i].Logits)-1], nil)
		for _, row := range batch[i].Logits {
			for j := range row {
				row[j] = float32(math.NaN())
			}
		}
	}
	return nil
}

// TestGreedyTakesBackendToken: a temperature-0 request without penalties,
// bias or logprobs takes the backend's token (and the same text as the
// CPU backend, which leaves every token to the sampler); one that needs the logits (logprobs, a presence penalty) is
// sampled from them on the host as before.
func TestGreedyTakesBackendToken(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	prompt := e.Tok.Encode("greedy on the device", true, false)
	res, err := Generate(context.Background(), e.Backend(), e.Tok, Request{Prompt: prompt, MaxTokens: 12, Sample: sample.Greedy()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		req    Request
		device bool
	}{
		{"greedy", Request{Prompt: prompt, MaxTokens: 12, Sample: sample.Greedy()}, true},
		{"logprobs", Request{Prompt: prompt, MaxTokens: 12, Sample: sample.Greedy(), Logprobs: true}, false},
		{"presence", Request{Prompt: prompt, MaxTokens: 12, Sample: sample.Greedy(), Presence: 0.5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := &deviceGreedy{Backend: e.Backend()}
			s := New(b, e.Tok, Config{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go s.Run(ctx)
			text, last, _ := collect(mustSubmit(t, s, tc.req))
			if last.Err != nil {
				t.Fatal(last.Err)
			}
			if tc.device {
				if b.greedyPasses == 0 {
					t.Errorf("no pass asked for the backend's token (%d logit passes)", b.logitPasses)
				}
				if text != res.Text {
					t.Errorf("text %q, want the sampled %q", text, res.Text)
				}
			} else if b.greedyPasses != 0 {
				t.Errorf("%d passes took the backend's token for a request that needs the logits", b.greedyPasses)
			}
		})
	}
}

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
// GreedyOnly allows it, the greedy rule's token (engine/sample's greedy
// sampler, which the GPU's device-side arg max is tested against in
// kernels and engine/gpu) equals what the request's
// own sampler draws from the same logits and history — on rows with ties,
// NaN and infinities — and for every parameter set it refuses there is a
// row where the two differ, so the refusal is needed.
func TestGreedyOnly(t *testing.T) {
	t.Parallel()
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
			t.Parallel()
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
				g, err := sample.New(sample.Greedy())
				if err != nil {
					t.Fatal(err)
				}
				if tok := g.Sample(row, nil); tok != want {
					differ = true
					if tc.want {
						t.Errorf("row %d %v: greedy token %d, the sampler draws %d", i, row, tok, want)
					}
				}
			}
			if !tc.want && !differ {
				t.Errorf("refused, but the sampler drew the greedy token on all %d rows: the refusal is not shown to be needed", len(rows))
			}
		})
	}
}

// passRecorder is a Backend that records which passes asked for Greedy.
type passRecorder struct {
	engine.Backend
	mu     sync.Mutex
	greedy []bool
}

func (r *passRecorder) Forward(ctx context.Context, batch []model.Step) error {
	r.mu.Lock()
	r.greedy = append(r.greedy, batch[0].Greedy)
	r.mu.Unlock()
	return r.Backend.Forward(ctx, batch)
}

// TestGreedyDispatch: the scheduler asks the backend for its greedy token
// exactly when GreedyOnly allows it, on every pass, and its tokens equal a
// loop that samples the full logits on the host.
func TestGreedyDispatch(t *testing.T) {
	t.Parallel()
	prompt := []int32{1, 17, 42, 9}
	for _, tc := range greedyCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := openTiny(t)
			rec := &passRecorder{Backend: e.Backend()}
			ctx := context.Background()
			res, err := Generate(ctx, rec, e.Tok, Request{Prompt: prompt, MaxTokens: 12, Sample: tc.p}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Tokens
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
			b := []model.Step{{Seq: seq, Tokens: prompt}}
			var want []int32
			for len(want) < res.CompletionTokens {
				if err := e.Forward(ctx, b); err != nil {
					t.Fatal(err)
				}
				id := smp.Sample(b[0].Logits[len(b[0].Logits)-1], history)
				history = append(history, id)
				want = append(want, id)
				b[0] = model.Step{Seq: seq, Tokens: []int32{id}, Logits: b[0].Logits}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("generated %v, reference %v", got, want)
			}
		})
	}
}
