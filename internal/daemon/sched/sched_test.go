package sched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/internal/synth"
)

// tinyPath is a tiny synthetic model; tinyPath2 another one (a different
// seed: the same vocabulary, another network), a drafter that guesses
// mostly wrong.
var tinyPath, tinyPath2 string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sched-test")
	if err != nil {
		panic(err)
	}
	tinyPath = filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(tinyPath, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		panic(err)
	}
	tinyPath2 = filepath.Join(dir, "tiny2.gguf")
	if err := synth.Write(tinyPath2, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 2}); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func openTiny(t *testing.T) *engine.Engine { return openEngine(t, tinyPath) }

// openEngine opens the model at path on the CPU for the rest of the test.
func openEngine(t *testing.T, path string) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

type recorder struct {
	mu       sync.Mutex
	lags     []int
	passes   int
	maxSeqs  int
	finished map[string]int
	// onPass, when set before the scheduler runs, is called on the
	// scheduler's goroutine after each pass with the passes so far.
	onPass func(passes int)
}

func (r *recorder) Pass(seqs, p, d int, _ time.Duration) {
	r.mu.Lock()
	r.passes++
	n := r.passes
	r.maxSeqs = max(r.maxSeqs, seqs)
	r.mu.Unlock()
	if r.onPass != nil {
		r.onPass(n)
	}
}
func (r *recorder) FirstToken(time.Duration) {}
func (r *recorder) Finished(reason string, _, _ int) {
	r.mu.Lock()
	if r.finished == nil {
		r.finished = map[string]int{}
	}
	r.finished[reason]++
	r.mu.Unlock()
}
func (r *recorder) CancelLag(n int) { r.mu.Lock(); r.lags = append(r.lags, n); r.mu.Unlock() }

func start(t *testing.T, e *engine.Engine, cfg Config) *Scheduler {
	s := New(e.Backend(), e.Tok, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	t.Cleanup(func() { s.Close(errors.New("test over")); cancel() })
	return s
}

func collect(h *Handle) (text string, last Event, n int) {
	for ev := range h.Events {
		text += ev.Text
		last = ev
		if ev.Finish == "" && ev.Err == nil {
			n++
		}
	}
	return
}

// TestBatchedMatchesSolo checks continuous batching against the same
// request run alone (Generate, a scheduler of its own): every request, run concurrently with
// others of different lengths (joining and leaving the batch at different
// passes, prompts fed in chunks), must produce exactly the text it
// produces alone.
func TestBatchedMatchesSolo(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	rec := &recorder{}
	s := start(t, e, Config{MaxBatch: 8, PrefillChunk: 5, Observer: rec})
	const n = 12
	type result struct {
		text   string
		finish string
	}
	want := make([]result, n)
	reqs := make([]Request, n)
	for i := range reqs {
		prompt := fmt.Sprintf("request %d says hello to the batch", i)
		maxTok := 4 + 3*i
		params := sample.Greedy()
		if i%3 == 1 {
			params = sample.Params{Temperature: 0.9, TopP: 0.95, RepeatPenalty: 1, Seed: uint64(i)}
		}
		reqs[i] = Request{Prompt: e.Tok.Encode(prompt, true, false), MaxTokens: maxTok, Sample: params}
		res, err := Generate(context.Background(), e.Backend(), e.Tok, reqs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = result{res.Text, res.FinishReason}
	}
	got := make([]result, n)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := s.Submit(context.Background(), reqs[i])
			if err != nil {
				t.Error(err)
				return
			}
			text, last, _ := collect(h)
			if last.Err != nil {
				t.Error(last.Err)
			}
			got[i] = result{text, last.Finish}
		}()
	}
	wg.Wait()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: batched %+v, solo %+v", i, got[i], want[i])
		}
	}
	if rec.maxSeqs < 2 {
		t.Errorf("no pass held more than one sequence (max %d): not batching", rec.maxSeqs)
	}
	st := s.Stats()
	if st.Active != 0 || st.Waiting != 0 || st.Finished != n {
		t.Errorf("stats after run: %+v", st)
	}
}

// TestCancelWithinOneToken: a request cancelled while it generates ends
// with context.Canceled, dropped from the batch within a pass of the
// cancel (the observer's cancel lag), beside a request that goes on. The
// cancel comes from the observer on the scheduler's own goroutine, a few
// passes after the request is in: a client cancelling once it had read
// some tokens raced the scheduler, which buffers every event and could
// finish the greedy sequence (its stop token comes at 78) before it saw
// the cancel.
func TestCancelWithinOneToken(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The cancel comes at the first pass from armAt on, once the request
	// is in (0: not yet).
	var armAt atomic.Int64
	rec := &recorder{onPass: func(n int) {
		if a := armAt.Load(); a > 0 && int64(n) >= a {
			cancel()
		}
	}}
	s := start(t, e, Config{Observer: rec})
	// A companion keeps the batch busy so the cancelled one is dropped
	// while passes continue.
	other, err := s.Submit(context.Background(), Request{Prompt: []int32{1, 2, 3}, MaxTokens: 200, Sample: sample.Greedy()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Submit(ctx, Request{Prompt: []int32{4, 5, 6}, MaxTokens: 200, Sample: sample.Greedy()})
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	armAt.Store(int64(rec.passes) + 4)
	rec.mu.Unlock()
	seen := 0
	var last Event
	for ev := range h.Events {
		last = ev
		if ev.Err != nil || ev.Finish != "" {
			break
		}
		seen++
	}
	if !errors.Is(last.Err, context.Canceled) {
		t.Fatalf("final event %+v, want context.Canceled", last)
	}
	// The events channel is buffered, so the scheduler may have produced
	// tokens the client had not read yet when it cancelled: the final
	// event's count is bounded by what was produced by then (the observer's
	// cancel lag, checked below), not by what the client had seen.
	if last.CompletionTokens < seen {
		t.Errorf("final event counts %d tokens, the client saw %d", last.CompletionTokens, seen)
	}
	collect(other)
	// The scheduler delivers the final event before it finishes its own
	// bookkeeping (observer, stats); wait for that to settle, bounded.
	var lags []int
	var st Stats
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		rec.mu.Lock()
		lags = append(lags[:0], rec.lags...)
		rec.mu.Unlock()
		st = s.Stats()
		if (len(lags) >= 1 && st.Active == 0) || time.Now().After(deadline) {
			break
		}
	}
	if len(lags) != 1 || lags[0] > 1 {
		t.Errorf("cancel lags %v, want one entry <= 1", lags)
	}
	if st.Cancelled != 1 || st.Active != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestStopStringsHeldBack(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	s := start(t, e, Config{})
	prompt := []int32{7, 8, 9}
	base, _, _ := collect(mustSubmit(t, s, Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy()}))
	if len(base) < 6 {
		t.Skipf("greedy text too short to cut: %q", base)
	}
	stop := base[3:6]
	text, last, _ := collect(mustSubmit(t, s, Request{Prompt: prompt, MaxTokens: 24, Sample: sample.Greedy(), Stop: []string{"\x00never", stop}}))
	want := base[:3]
	if i := indexOf(base, stop); i < 3 {
		want = base[:i]
	}
	if text != want || last.Finish != "stop" {
		t.Fatalf("with stop %q: got %q (%s), want %q", stop, text, last.Finish, want)
	}
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func mustSubmit(t *testing.T, s *Scheduler, r Request) *Handle {
	t.Helper()
	h, err := s.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestSubmitLimits(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	s := New(e.Backend(), e.Tok, Config{MaxQueue: 2}) // not running: the queue only fills
	ok := Request{Prompt: []int32{1}, MaxTokens: 1, Sample: sample.Greedy()}
	for i := 0; i < 2; i++ {
		if _, err := s.Submit(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"queue full", ok, ErrQueueFull},
		{"context", Request{Prompt: []int32{1}, MaxTokens: e.Model.Config.Context, Sample: sample.Greedy()}, ErrContext},
	}
	for _, tc := range tests {
		if _, err := s.Submit(context.Background(), tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v want %v", tc.name, err, tc.want)
		}
	}
	for _, r := range []Request{
		{Prompt: nil, MaxTokens: 1},
		{Prompt: []int32{1}, MaxTokens: 0},
		{Prompt: []int32{-1}, MaxTokens: 1},
		{Prompt: []int32{1 << 20}, MaxTokens: 1},
		{Prompt: []int32{1}, MaxTokens: 1, Sample: sample.Params{Temperature: -1}},
	} {
		if _, err := s.Submit(context.Background(), r); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	s.Close(errors.New("bye"))
	if _, err := s.Submit(context.Background(), ok); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

func TestCloseFailsInFlight(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	s := New(e.Backend(), e.Tok, Config{})
	go s.Run(context.Background())
	h := mustSubmit(t, s, Request{Prompt: []int32{1, 2}, MaxTokens: 250, Sample: sample.Greedy()})
	<-h.Events // running
	n := s.Close(errors.New("shutting down"))
	_, last, _ := collect(h)
	// Close counts what it ended: the request is cut (n == 1, ErrClosed)
	// unless it finished first (n == 0, a finish reason).
	switch {
	case n == 1 && !errors.Is(last.Err, ErrClosed):
		t.Fatalf("Close reported 1 ended, final event %+v", last)
	case n == 0 && (last.Err != nil || last.Finish == ""):
		t.Fatalf("Close reported none ended, final event %+v", last)
	case n != 0 && n != 1:
		t.Fatalf("Close reported %d ended of one request", n)
	}
	if n2 := s.Close(errors.New("again")); n2 != n {
		t.Fatalf("second Close reported %d, first %d", n2, n)
	}
}

func TestLogprobsAndPenalties(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	s := start(t, e, Config{})
	h := mustSubmit(t, s, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 5, Sample: sample.Greedy(), Logprobs: true, TopLogprobs: 3,
		LogitBias: map[int32]float32{}, Frequency: 2, Presence: 2})
	seen := map[int32]bool{}
	for ev := range h.Events {
		if ev.Finish != "" || ev.Err != nil {
			break
		}
		lp := ev.Logprob
		if lp == nil || len(lp.Top) != 3 || lp.Logprob > 0 {
			t.Fatalf("logprob %+v", lp)
		}
		if lp.Top[0].Logprob < lp.Top[1].Logprob {
			t.Fatalf("top not sorted: %+v", lp.Top)
		}
		if seen[lp.Token] {
			t.Errorf("token %d repeated despite strong penalties", lp.Token)
		}
		seen[lp.Token] = true
	}
	// A +100 bias forces a token.
	h = mustSubmit(t, s, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 3, Sample: sample.Greedy(), Logprobs: true, LogitBias: map[int32]float32{42: 100}})
	for ev := range h.Events {
		if ev.Logprob != nil && ev.Logprob.Token != 42 {
			t.Fatalf("bias ignored: token %d", ev.Logprob.Token)
		}
	}
}
