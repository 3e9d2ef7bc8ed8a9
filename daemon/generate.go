package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// job is a validated generation ready for the scheduler.
type job struct {
	lm     *loaded
	req    sched.Request
	params openai.Params
}

// prepare checks a request's parameters against the model and the limits
// and builds the scheduler request.
func (s *Server) prepare(lm *loaded, p openai.Params, prompt []int32, promptParam string) (*job, error) {
	c := lm.eng.Model.Config
	c.Context = lm.eng.MaxContext() // the backend's: a GPU's KV-cache slot may be shorter than the trained context
	if len(prompt) == 0 {
		return nil, openai.BadRequest(promptParam, "the prompt encodes to no tokens")
	}
	for _, id := range prompt {
		if id < 0 || int(id) >= c.Vocab {
			return nil, openai.BadRequest(promptParam, "token id %d is outside the vocabulary (0..%d)", id, c.Vocab-1)
		}
	}
	lim := s.cfg.Limits
	if lim.MaxPromptTokens > 0 && len(prompt) > lim.MaxPromptTokens {
		return nil, openai.Errorf(http.StatusBadRequest, openai.TypeInvalidRequest, promptParam, "context_length_exceeded",
			"the prompt has %d tokens; this server accepts at most %d", len(prompt), lim.MaxPromptTokens)
	}
	if len(prompt) >= c.Context {
		return nil, openai.Errorf(http.StatusBadRequest, openai.TypeInvalidRequest, promptParam, "context_length_exceeded",
			"This model's maximum context length is %d tokens, but the prompt has %d tokens and leaves no room for a completion.", c.Context, len(prompt))
	}
	maxTok := p.MaxTokens
	if maxTok == 0 {
		maxTok = min(lim.MaxTokens, c.Context-len(prompt))
	} else {
		if maxTok > lim.MaxTokens {
			return nil, openai.BadRequest("max_tokens", "max_tokens is %d; this server allows at most %d", maxTok, lim.MaxTokens)
		}
		if len(prompt)+maxTok > c.Context {
			return nil, openai.Errorf(http.StatusBadRequest, openai.TypeInvalidRequest, "max_tokens", "context_length_exceeded",
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion).",
				c.Context, len(prompt)+maxTok, len(prompt), maxTok)
		}
	}
	sp := sample.Params{Temperature: float32(p.Temperature), TopP: float32(p.TopP), TopK: p.TopK, MinP: float32(p.MinP),
		RepeatPenalty: float32(p.RepeatPenalty), RepeatLastN: p.RepeatLastN}
	if p.TopP == 0 {
		sp.Temperature, sp.TopP = 0, 1 // an empty nucleus keeps only the top token
	}
	if p.SeedSet {
		sp.Seed = p.Seed
	} else {
		sp.Seed = randomSeed()
	}
	r := sched.Request{Prompt: prompt, MaxTokens: maxTok, Sample: sp, Stop: p.Stop,
		Logprobs: p.Logprobs, TopLogprobs: p.TopLogprobs, Presence: float32(p.Presence), Frequency: float32(p.Frequency),
		NoSpeculation: p.NoSpeculation}
	if p.Constraint != nil {
		m, err := lm.constraintMatcher(p.Constraint)
		if err != nil {
			return nil, err
		}
		r.Grammar = m
	}
	for id, b := range p.LogitBias {
		if int(id) >= c.Vocab {
			return nil, openai.BadRequest("logit_bias", "logit_bias token %d is outside the vocabulary (0..%d)", id, c.Vocab-1)
		}
		if r.LogitBias == nil {
			r.LogitBias = map[int32]float32{}
		}
		r.LogitBias[id] = float32(b)
	}
	j := &job{lm: lm, req: r, params: p}
	if err := s.applyToolSchema(j); err != nil {
		return nil, err
	}
	return j, nil
}

// submit queues a job, mapping scheduler refusals to API errors.
func (s *Server) submit(ctx context.Context, j *job) (*sched.Handle, error) {
	h, err := j.lm.sched.Submit(ctx, j.req)
	switch {
	case errors.Is(err, sched.ErrQueueFull):
		return nil, openai.Errorf(http.StatusTooManyRequests, openai.TypeRateLimit, "", "queue_full",
			"The server is busy: %v. Retry later.", err)
	case errors.Is(err, sched.ErrClosed):
		return nil, openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "model", "model_unavailable",
			"The model `%s` is being unloaded or the server is shutting down.", j.lm.name)
	case errors.Is(err, sched.ErrContext):
		return nil, openai.Errorf(http.StatusBadRequest, openai.TypeInvalidRequest, "max_tokens", "context_length_exceeded", "%v", err)
	case err != nil:
		return nil, openai.BadRequest("", "%v", err)
	}
	return h, nil
}

// gen is a request's n generations, their events merged in the order they
// come, each with its choice's index.
type gen struct {
	n      int
	events chan choiceEvent
}

type choiceEvent struct {
	i int
	sched.Event
}

// start checks a generation against the model and the limits and queues
// p.N of them (the n choices: the same prompt, seeds seed, seed+1, …
// when a seed is given; side by side they share every pass), under a
// context derived from r's. cancel ends them early (a streamer calls it
// when the client goes away); the caller must call it once the request is
// over. On error nothing is queued.
func (s *Server) start(r *http.Request, lm *loaded, p openai.Params, prompt []int32, promptParam string) (g *gen, cancel context.CancelFunc, err error) {
	n := max(p.N, 1)
	limit := s.cfg.Conn.MaxRequestsPerPeer
	if limit == 0 && lm.capacity > 0 {
		limit = max(lm.capacity*3/4, 1)
	}
	pr := peerOf(r)
	release, held, ok := s.conns.admitRequest(lm.name, peerID(pr), n, limit)
	if !ok {
		s.log.Warn("request refused: the peer holds its share of the model's queue", "peer", pr.String(), "model", lm.name, "held", held, "limit", limit)
		return nil, nil, openai.Errorf(http.StatusTooManyRequests, openai.TypeRateLimit, "", "peer_queue_share",
			"You have %d requests queued or running on `%s`, the most one client may hold (%d); retry when one finishes.", held, lm.name, limit)
	}
	ctx, cancelCtx := context.WithCancel(r.Context())
	cancel = func() { cancelCtx(); release() }
	hs := make([]*sched.Handle, 0, n)
	var shared *sched.SharedPrompt // the n choices compute their prompt once
	if n > 1 {
		shared = sched.NewSharedPrompt()
	}
	for i := range n {
		j, err := s.prepare(lm, p, prompt, promptParam)
		if err == nil {
			j.req.Shared = shared
			if p.SeedSet {
				j.req.Sample.Seed = p.Seed + uint64(i)
			}
			var h *sched.Handle
			if h, err = s.submit(ctx, j); err == nil {
				hs = append(hs, h)
			}
		}
		if err != nil {
			cancel() // the choices queued already end with it
			return nil, nil, err
		}
	}
	g = &gen{n: n, events: make(chan choiceEvent)}
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			for ev := range h.Events {
				select {
				case g.events <- choiceEvent{i, ev}:
				case <-ctx.Done():
					// The handler returned: drain so the scheduler's
					// buffered channel is released with the request.
				}
			}
		})
	}
	go func() { wg.Wait(); close(g.events) }()
	return g, cancel, nil
}

// total is the usage of a request's n choices once all have finished: the
// prompt once, every choice's completion.
type total struct {
	prompt, completion, finished int
}

func (t *total) add(ev sched.Event) {
	t.prompt = ev.PromptTokens
	t.completion += ev.CompletionTokens
	t.finished++
}

func (t *total) usage() *openai.Usage {
	return &openai.Usage{PromptTokens: t.prompt, CompletionTokens: t.completion, TotalTokens: t.prompt + t.completion}
}

// resultError is what a non-streamed request returns when generation
// fails: nil when the client is gone (nobody to tell), else the error.
func resultError(r *http.Request, err error) error {
	if r.Context().Err() != nil {
		return nil
	}
	return streamError(err)
}

// streamError is what a stream ends with when generation fails after the
// response has started.
func streamError(err error) *openai.Error {
	if errors.Is(err, ErrShuttingDown) {
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "server_shutting_down",
			"The server is shutting down: generation stopped before the end. Retry when it is back.")
	}
	if errors.Is(err, sched.ErrClosed) {
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "model_unavailable",
			"generation stopped: %v", err)
	}
	return openai.AsError(err)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	c, err := openai.DecodeChat(body)
	if err != nil {
		return err
	}
	lm, err := s.lookup(c.Model)
	if err != nil {
		return err
	}
	prompt, plan, err := toolPrompt(lm, c.Messages, c.Tools, "messages")
	if err != nil {
		return err
	}
	if plan != nil {
		c.ToolSchema = plan.schema
	}
	g, cancel, err := s.start(r, lm, c.Params, prompt, "messages")
	if err != nil {
		return err
	}
	defer cancel()
	return s.chatAnswer(w, r, c, lm, plan, g, cancel)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	c, err := openai.DecodeCompletion(body)
	if err != nil {
		return err
	}
	lm, err := s.lookup(c.Model)
	if err != nil {
		return err
	}
	prompt := c.Prompt.Tokens
	if prompt == nil {
		prompt = lm.eng.Tok.Encode(c.Prompt.Text, true, false)
	}
	g, cancel, err := s.start(r, lm, c.Params, prompt, "prompt")
	if err != nil {
		return err
	}
	defer cancel()
	id, created := newID("cmpl-"), time.Now().Unix()
	var tot total
	if !c.Stream {
		outs := make([]strings.Builder, g.n)
		lps := make([]*openai.CompletionLogprobs, g.n)
		choices := make([]openai.TextChoice, g.n)
		for i := range lps {
			if c.Logprobs {
				lps[i] = &openai.CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
			}
		}
		for ev := range g.events {
			if ev.Err != nil {
				return resultError(r, ev.Err)
			}
			if ev.Logprob != nil && lps[ev.i] != nil {
				s.appendLegacy(lm, lps[ev.i], ev.Logprob, outs[ev.i].Len())
			}
			outs[ev.i].WriteString(ev.Text)
			if ev.Finish == "" {
				continue
			}
			fr := ev.Finish
			choices[ev.i] = openai.TextChoice{Text: outs[ev.i].String(), Index: ev.i, Logprobs: lps[ev.i], FinishReason: &fr}
			if tot.add(ev.Event); tot.finished == g.n {
				u, _ := json.Marshal(tot.usage())
				return writeJSON(w, openai.TextCompletion{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: lm.name,
					Choices: choices, Usage: u})
			}
		}
		return openai.AsError(errors.New("generation ended without a result"))
	}
	st := newStreamer(w, cancel, c.IncludeUsage)
	offsets := make([]int, g.n)
	for ev := range g.events {
		if ev.Err != nil {
			if r.Context().Err() == nil {
				st.fail(s.logFailed(r, streamError(ev.Err)))
			}
			return nil
		}
		if ev.Text != "" || ev.Logprob != nil || ev.Finish != "" {
			ch := openai.TextChoice{Text: ev.Text, Index: ev.i}
			if ev.Logprob != nil {
				ch.Logprobs = &openai.CompletionLogprobs{}
				s.appendLegacy(lm, ch.Logprobs, ev.Logprob, offsets[ev.i])
			}
			offsets[ev.i] += len(ev.Text)
			if ev.Finish != "" {
				fr := ev.Finish
				ch.FinishReason = &fr
			}
			st.send(openai.TextCompletion{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: lm.name,
				Choices: []openai.TextChoice{ch}, Usage: st.nullUsage()})
		}
		if ev.Finish == "" {
			continue
		}
		if tot.add(ev.Event); tot.finished == g.n {
			if c.IncludeUsage {
				u, _ := json.Marshal(tot.usage())
				st.send(openai.TextCompletion{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: lm.name, Choices: []openai.TextChoice{}, Usage: u})
			}
			st.done()
			return nil
		}
	}
	return nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// tokenText is a token's text as OpenAI reports it: the token's bytes as a
// string (invalid UTF-8 replaced) plus the raw bytes.
func tokenText(lm *loaded, id int32) (string, []int) {
	b := lm.eng.Tok.Piece(id)
	ints := make([]int, len(b))
	for i, c := range b {
		ints[i] = int(c)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), ints
}

func (s *Server) tokenLogprob(lm *loaded, lp *sched.Logprob) openai.TokenLogprob {
	t, b := tokenText(lm, lp.Token)
	out := openai.TokenLogprob{Token: t, Logprob: float64(lp.Logprob), Bytes: b, TopLogprobs: []openai.TopLogprob{}}
	for _, alt := range lp.Top {
		at, ab := tokenText(lm, alt.ID)
		out.TopLogprobs = append(out.TopLogprobs, openai.TopLogprob{Token: at, Logprob: finite(alt.Logprob), Bytes: ab})
	}
	return out
}

func (s *Server) appendLegacy(lm *loaded, dst *openai.CompletionLogprobs, lp *sched.Logprob, offset int) {
	t, _ := tokenText(lm, lp.Token)
	dst.Tokens = append(dst.Tokens, t)
	dst.TokenLogprobs = append(dst.TokenLogprobs, float64(lp.Logprob))
	dst.TextOffset = append(dst.TextOffset, offset)
	top := map[string]float64{}
	for _, alt := range lp.Top {
		at, _ := tokenText(lm, alt.ID)
		if _, dup := top[at]; !dup {
			top[at] = finite(alt.Logprob)
		}
	}
	dst.TopLogprobs = append(dst.TopLogprobs, top)
}

// finite maps -Inf (a token the model rules out) to OpenAI's -9999
// sentinel, since JSON has no infinities.
func finite(v float32) float64 {
	if v < -9999 {
		return -9999
	}
	return float64(v)
}

// streamer writes server-sent events and notices a vanished client.
type streamer struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	cancel       context.CancelFunc
	includeUsage bool
	broken       bool
}

func newStreamer(w http.ResponseWriter, cancel context.CancelFunc, includeUsage bool) *streamer {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &streamer{w: w, rc: http.NewResponseController(w), cancel: cancel, includeUsage: includeUsage}
}

// nullUsage is the "usage" of a chunk that is not the last: null when
// the client asked for usage, absent otherwise.
func (st *streamer) nullUsage() json.RawMessage {
	if st.includeUsage {
		return json.RawMessage("null")
	}
	return nil
}

// send writes one event and flushes it. A write failure means the client
// went away: the request's context is cancelled so the scheduler drops
// the sequence before its next token.
func (st *streamer) send(v any) {
	if st.broken {
		return
	}
	if err := openai.WriteEvent(st.w, v); err != nil {
		st.broken = true
		st.cancel()
		return
	}
	if err := st.rc.Flush(); err != nil {
		st.broken = true
		st.cancel()
	}
}

// sendNamed writes one event with its type on an "event:" line (the
// Responses API's form) and flushes it, as send does.
func (st *streamer) sendNamed(name string, v any) {
	if st.broken {
		return
	}
	if err := openai.WriteNamedEvent(st.w, name, v); err != nil {
		st.broken = true
		st.cancel()
		return
	}
	if err := st.rc.Flush(); err != nil {
		st.broken = true
		st.cancel()
	}
}

func (st *streamer) done() {
	if st.broken {
		return
	}
	if openai.WriteDone(st.w) != nil || st.rc.Flush() != nil {
		st.broken = true
	}
}

// fail ends a started stream with an error event (no [DONE], so clients
// cannot mistake the truncated output for a complete one).
func (st *streamer) fail(e *openai.Error) { st.send(e.Body()) }
