package sched

import (
	"context"
	"math"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/sample"
)

// deviceGreedy stands in for the CUDA backend's device-side arg max: for a
// pass whose steps all ask for Greedy it returns only Step.Token and
// leaves every logit row NaN, so a scheduler that sampled the logits of a
// greedy request would go wrong; other passes fill the logits as usual.
type deviceGreedy struct {
	engine.Backend
	greedyPasses, logitPasses int
}

func (b *deviceGreedy) Forward(ctx context.Context, batch []engine.Step) error {
	all := true
	for _, st := range batch {
		all = all && st.Greedy
	}
	if err := b.Backend.Forward(ctx, batch); err != nil || !all {
		b.logitPasses++
		return err
	}
	b.greedyPasses++
	for i := range batch {
		for _, row := range batch[i].Logits {
			for j := range row {
				row[j] = float32(math.NaN())
			}
		}
	}
	return nil
}

// TestGreedyTakesBackendToken: a temperature-0 request without penalties,
// bias or logprobs takes the backend's token (and the same text as
// Generate); one that needs the logits (logprobs, a presence penalty) is
// sampled from them on the host as before.
func TestGreedyTakesBackendToken(t *testing.T) {
	e := openTiny(t)
	prompt := e.Encode(&engine.Request{Prompt: "greedy on the device"})
	res, err := e.Generate(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 12, Sample: sample.Greedy()}, func(engine.Token) error { return nil })
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
					t.Errorf("text %q, want Generate's %q", text, res.Text)
				}
			} else if b.greedyPasses != 0 {
				t.Errorf("%d passes took the backend's token for a request that needs the logits", b.greedyPasses)
			}
		})
	}
}
