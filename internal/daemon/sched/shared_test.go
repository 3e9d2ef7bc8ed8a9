package sched

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/sample"
)

// TestSharedPrompt: n requests of one prompt (a request's n choices, each
// its own seed) compute the prompt once: the scheduler counts the prompt's
// tokens plus one token for each other request, and every request's
// tokens are what it gets alone. With a batch of one the others wait for
// the first to end and compute the prompt again (a copy needs the first's
// cache), with the same results.
func TestSharedPrompt(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	prompt := e.Tok.Encode("one prompt, computed once for every choice that shares it", true, false)
	params := func(i int) sample.Params {
		return sample.Params{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1, Seed: uint64(40 + i)}
	}
	const n = 4
	want := make([][]int32, n)
	for i := range n {
		res, err := Generate(context.Background(), e.Backend(), e.Tok, Request{Prompt: prompt, MaxTokens: 12, Sample: params(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.Tokens
	}
	for _, tc := range []struct {
		batch      int
		promptToks uint64
	}{{n, uint64(len(prompt) + n - 1)}, {1, uint64(n * len(prompt))}} {
		s := New(e.Backend(), e.Tok, Config{MaxBatch: tc.batch})
		ctx, cancel := context.WithCancel(context.Background())
		go s.Run(ctx)
		sh := NewSharedPrompt()
		hs := make([]*Handle, n)
		for i := range n {
			h, err := s.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 12, Sample: params(i), Shared: sh})
			if err != nil {
				t.Fatal(err)
			}
			hs[i] = h
		}
		for i, h := range hs {
			if got := tokensOf(t, h); !slices.Equal(got, want[i]) {
				t.Fatalf("batch %d, request %d: %v, alone %v", tc.batch, i, got, want[i])
			}
		}
		if st := s.Stats(); st.PromptTokens != tc.promptToks {
			t.Errorf("batch %d: %d prompt tokens computed, want %d", tc.batch, st.PromptTokens, tc.promptToks)
		}
		s.Close(context.Canceled)
		cancel()
	}
}

// tokensOf collects a request's tokens, failing the test on an error event.
func tokensOf(t *testing.T, h *Handle) []int32 {
	t.Helper()
	var got []int32
	for ev := range h.Events {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ev.Token >= 0 {
			got = append(got, ev.Token)
		}
	}
	return got
}
