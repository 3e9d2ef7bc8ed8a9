package sched

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/sample"
)

// TestGenerate runs single requests through Generate, the in-process
// client of the scheduler that `strata run` is: the completion, its token
// ids and finish reason, MaxTokens cut to the context, stop strings, and
// the errors of an emit that fails, a cancelled context and a prompt that
// fills the context.
func TestGenerate(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	b, tok := e.Backend(), e.Tok
	prompt := []int32{7, 8, 9}
	base, err := Generate(context.Background(), b, tok, Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if base.CompletionTokens != len(base.Tokens) || base.CompletionTokens == 0 || base.PromptTokens != len(prompt) {
		t.Fatalf("counts: %+v", base)
	}
	if len(base.Text) < 6 {
		t.Skipf("greedy text too short to cut: %q", base.Text)
	}
	stop := base.Text[3:6]
	wantStop := base.Text[:strings.Index(base.Text, stop)]
	limit := b.MaxContext()
	errEmit := errors.New("output closed")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name       string
		ctx        context.Context
		req        Request
		emit       func(Event) error
		wantErr    error
		wantText   string
		wantFinish string
		wantTokens int // -1: not checked
	}{
		{name: "greedy", req: Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy()},
			wantText: base.Text, wantFinish: base.FinishReason, wantTokens: len(base.Tokens)},
		{name: "stop string", req: Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy(), Stop: []string{"\x00never", stop}},
			wantText: wantStop, wantFinish: "stop", wantTokens: -1},
		{name: "max tokens cut to the context", req: Request{Prompt: prompt, MaxTokens: 10 * limit, Sample: sample.Greedy()},
			wantFinish: "", wantTokens: -1},
		{name: "prompt fills the context", req: Request{Prompt: make([]int32, limit), MaxTokens: 1, Sample: sample.Greedy()},
			wantErr: ErrContext, wantTokens: 0},
		{name: "emit fails", req: Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy()},
			emit: func(Event) error { return errEmit }, wantErr: errEmit, wantTokens: -1},
		{name: "cancelled", ctx: cancelled, req: Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy()},
			wantErr: context.Canceled, wantTokens: 0},
		{name: "empty prompt", req: Request{MaxTokens: 4, Sample: sample.Greedy()}, wantErr: errAny, wantTokens: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			var streamed strings.Builder
			emit := func(ev Event) error {
				streamed.WriteString(ev.Text)
				if tc.emit != nil {
					return tc.emit(ev)
				}
				return nil
			}
			res, err := Generate(ctx, b, tok, tc.req, emit)
			switch {
			case tc.wantErr == errAny:
				if err == nil {
					t.Fatal("no error")
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
			if tc.wantErr == nil {
				if streamed.String() != res.Text {
					t.Errorf("streamed %q, result %q", streamed.String(), res.Text)
				}
				if tc.wantFinish != "" && (res.Text != tc.wantText || res.FinishReason != tc.wantFinish) {
					t.Errorf("got %q (%s), want %q (%s)", res.Text, res.FinishReason, tc.wantText, tc.wantFinish)
				}
				if tc.wantFinish == "" && res.PromptTokens+res.CompletionTokens > limit {
					t.Errorf("%d prompt and %d completion tokens exceed the context of %d", res.PromptTokens, res.CompletionTokens, limit)
				}
			}
			if tc.wantTokens >= 0 && len(res.Tokens) != tc.wantTokens {
				t.Errorf("%d tokens, want %d", len(res.Tokens), tc.wantTokens)
			}
		})
	}
}

// errAny stands for "some error" in TestGenerate's table.
var errAny = errors.New("any error")
