package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// Result summarises one request that Generate ran.
type Result struct {
	PromptTokens     int
	CompletionTokens int
	// FinishReason is "stop" (end-of-generation token or stop string) or
	// "length".
	FinishReason string
	// Text is the completion (the stop string, if any, cut off).
	Text string
	// Tokens are the completion's token ids, without the
	// end-of-generation token.
	Tokens []int32
	// PromptTime is the time of the passes that read the prompt,
	// DecodeTime the time from the end of the last of them to the end.
	PromptTime, DecodeTime time.Duration
	// PassCost and DraftCost are the scheduler's measured costs (Stats).
	PassCost  []time.Duration
	DraftCost time.Duration
	// Passes is the forward passes run; Drafted and Accepted count the
	// speculative guesses (GenerateOptions.Drafter) and those kept.
	Passes, Drafted, Accepted int
}

// GenerateOptions are Generate's optional settings.
type GenerateOptions struct {
	// Drafter makes the decode steps speculative (Config.Drafter);
	// MaxDraft caps the guesses a step (Config.MaxDraft).
	Drafter  Drafter
	MaxDraft int
}

// Generate runs r alone through a scheduler of its own over backend b, in
// this process, and returns when it has finished: what `strata run` does,
// through the same decode loop, token choice and stop strings as the
// daemon's requests. MaxTokens is cut to what the backend's context leaves
// after the prompt (a prompt that fills the context fails with an error
// wrapping ErrContext). emit, when not nil, receives every event that
// carries a token or text, in order; an error from it (a closed output,
// say) cancels the request and is returned. Cancelling ctx cancels the
// request. What was generated is returned even on error.
func Generate(ctx context.Context, b engine.Backend, tok *tokenizer.Tokenizer, r Request, emit func(Event) error) (Result, error) {
	return GenerateWith(ctx, b, tok, r, GenerateOptions{}, emit)
}

// GenerateWith is Generate with options.
func GenerateWith(ctx context.Context, b engine.Backend, tok *tokenizer.Tokenizer, r Request, o GenerateOptions, emit func(Event) error) (Result, error) {
	res := Result{PromptTokens: len(r.Prompt)}
	if limit := b.MaxContext(); len(r.Prompt) > 0 && r.MaxTokens > 0 && len(r.Prompt)+r.MaxTokens > limit {
		if len(r.Prompt) >= limit {
			return res, fmt.Errorf("%w: prompt has %d tokens, the model's context is %d", ErrContext, len(r.Prompt), limit)
		}
		r.MaxTokens = limit - len(r.Prompt)
	}
	var tm passTimer
	s := New(b, tok, Config{MaxBatch: 1, MaxQueue: 1, Observer: &tm, Drafter: o.Drafter, MaxDraft: o.MaxDraft})
	defer s.Start(ctx)(errors.New("generation finished"))
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h, err := s.Submit(reqCtx, r)
	if err != nil {
		return res, err
	}
	var emitErr error
	for ev := range h.Events {
		if ev.Token >= 0 {
			res.Tokens = append(res.Tokens, ev.Token)
		}
		res.Text += ev.Text
		switch {
		case ev.Finish != "":
			res.FinishReason = ev.Finish
		case ev.Err != nil:
			err = ev.Err
		case emitErr == nil && emit != nil:
			if emitErr = emit(ev); emitErr != nil {
				cancel(emitErr)
			}
		}
	}
	res.CompletionTokens = len(res.Tokens)
	res.PromptTime, res.DecodeTime = tm.times()
	st := s.Stats()
	res.Passes, res.Drafted, res.Accepted = int(st.Passes), int(st.Drafted), int(st.Accepted)
	res.PassCost, res.DraftCost = st.PassCost, st.DraftCost
	if emitErr != nil {
		return res, emitErr
	}
	return res, err
}

// passTimer is Generate's Observer: it adds up the prompt passes' time and
// notes when the last of them ended.
type passTimer struct {
	mu         sync.Mutex
	prompt     time.Duration
	prefillEnd time.Time
}

func (t *passTimer) Pass(_, promptTokens, _ int, d time.Duration) {
	if promptTokens == 0 {
		return
	}
	t.mu.Lock()
	t.prompt += d
	t.prefillEnd = time.Now()
	t.mu.Unlock()
}

func (t *passTimer) FirstToken(time.Duration)  {}
func (t *passTimer) Finished(string, int, int) {}
func (t *passTimer) CancelLag(int)             {}

// times returns the prompt time and the decode time up to now.
func (t *passTimer) times() (prompt, decode time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.prefillEnd.IsZero() {
		return t.prompt, 0
	}
	return t.prompt, time.Since(t.prefillEnd)
}
