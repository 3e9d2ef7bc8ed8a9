package sched

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/grammar"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// Errors returned by Submit and in terminal events.
var (
	ErrQueueFull = errors.New("request queue is full")
	ErrClosed    = errors.New("scheduler is closed")
	ErrContext   = errors.New("context length exceeded")
)

// Config bounds the scheduler.
type Config struct {
	// MaxBatch is the most sequences advanced by one pass (default 16).
	MaxBatch int
	// MaxQueue is the most requests waiting for a batch slot; Submit
	// returns ErrQueueFull beyond it (default 64).
	MaxQueue int
	// PrefillChunk is the most prompt tokens one sequence feeds per pass,
	// so a long prompt does not stall the others' decoding (default 128).
	PrefillChunk int
	// Observer receives timing and counts; nil means none.
	Observer Observer
	// Drafter, when set, makes decode steps speculative (spec.go): it
	// guesses tokens that one pass then verifies. Requests may opt out.
	Drafter Drafter
	// MaxDraft caps the guesses a step verifies (default 8); the number
	// used is chosen from each sequence's acceptance and the measured
	// costs, and is 0 where speculation does not pay.
	MaxDraft int
	// Forward runs one batched pass; nil means the Backend's Forward
	// (which on a tiered engine streams every non-resident layer once for
	// all the batch's sequences, under the pass's context). Tests wrap it
	// to observe or fail passes.
	Forward func(ctx context.Context, batch []model.Step) error
}

// Observer is told what the scheduler does, for metrics. Its methods are
// called from the scheduler goroutine and must not block.
type Observer interface {
	// Pass reports one forward pass: sequences in it, prompt and decode
	// tokens fed, and how long it took.
	Pass(seqs, promptTokens, decodeTokens int, d time.Duration)
	// FirstToken reports the time from Submit to a request's first token.
	FirstToken(d time.Duration)
	// Finished reports a request that ended: reason "stop", "length",
	// "cancelled" or "error", and its token counts.
	Finished(reason string, promptTokens, completionTokens int)
	// CancelLag reports, for a cancelled sequence, how many tokens it
	// produced after its context was cancelled (the contract is <= 1).
	CancelLag(tokens int)
}

// Request is one generation.
type Request struct {
	// Prompt holds the encoded prompt (at least one token).
	Prompt []int32
	// MaxTokens is the completion limit (>= 1).
	MaxTokens int
	Sample    sample.Params
	// Stop strings end generation; the stop string itself is not sent.
	Stop []string
	// Logprobs asks for each token's log probability and, with
	// TopLogprobs > 0, that many alternatives.
	Logprobs    bool
	TopLogprobs int
	// Presence and Frequency are OpenAI's presence and frequency penalties
	// over the generated tokens; LogitBias is added to the logits.
	Presence, Frequency float32
	LogitBias           map[int32]float32
	// NoSpeculation keeps this request's steps plain when the scheduler
	// has a Drafter.
	NoSpeculation bool
	// Grammar, when set, constrains the output: before every draw the
	// tokens the grammar does not allow next get -Inf, end of generation
	// is allowed only where the grammar is complete, and generation stops
	// ("stop") as soon as nothing but its end may follow. Speculative
	// steps stay on: each guess is verified under the mask of the state
	// its predecessors lead to, so a guess the grammar forbids is simply
	// rejected. Logprobs stay the model's own distribution, as without a
	// grammar. The Matcher must be built over this model's tokenizer.
	Grammar *grammar.Matcher
	// Shared, when set, names the requests with the same prompt (a
	// request's n choices): the first to join the batch computes the
	// prompt, and the others copy its cache for all but the prompt's last
	// token (Sequence.CopyFrom) and feed only that one. A request that
	// finds the prompt's computer gone computes the prompt itself.
	Shared *SharedPrompt
}

// SharedPrompt groups requests whose prompt is computed once (Request.Shared).
// It is used only by the scheduler's pass loop.
type SharedPrompt struct{ leader *seq }

// NewSharedPrompt returns a group for the requests of one prompt.
func NewSharedPrompt() *SharedPrompt { return &SharedPrompt{} }

// Logprob is a sampled token's log probability under the model's
// distribution (before penalties and bias) and its top alternatives.
type Logprob struct {
	Token   int32
	Logprob float32
	Top     []sample.TokenLogprob
}

// Event is one step of a request's output. The last event of a request has
// Finish or Err set; the channel is closed after it.
type Event struct {
	// Token is the id of the token this event's step produced, or -1 for
	// an event that carries none (the final event, text released at the
	// end). The end-of-generation token is never sent.
	Token int32
	// Text is newly released text (may be empty: incomplete UTF-8, or
	// held back because it may begin a stop string).
	Text string
	// Logprob is set for every sampled token when requested.
	Logprob *Logprob
	// Finish is "stop" or "length" on the final event.
	Finish string
	// Err ends the request with an error (cancellation, shutdown, engine
	// failure).
	Err error
	// PromptTokens and CompletionTokens are set on the final event.
	PromptTokens, CompletionTokens int
}

// Stats is a snapshot of the scheduler's state and counters.
type Stats struct {
	Waiting, Active         int
	MaxBatch, MaxQueue      int
	Passes                  uint64
	PromptTokens, Generated uint64
	Finished, Cancelled     uint64
	Failed                  uint64
	KVPositions             int // positions held by active sequences' caches
	// Speculation: guesses judged (not those after the token a request
	// ended on), guesses accepted, and passes that verified guesses.
	Drafted, Accepted, VerifyPasses uint64
	// PassCost is the measured time of a decode pass by the tokens its
	// longest sequence fed (index n-1; 0 where not seen) and DraftCost a
	// drafted token's: what the choice of how many guesses weighs.
	PassCost  []time.Duration
	DraftCost time.Duration
}

// Scheduler runs requests against one model.
type Scheduler struct {
	b   engine.Backend
	tok *tokenizer.Tokenizer
	cfg Config

	mu      sync.Mutex
	queue   []*seq
	closed  error
	active  int
	kvPos   int
	wake    chan struct{}
	done    chan struct{}
	running atomic.Bool
	ended   int // requests the closing pass failed; read after done closes

	passes, promptToks, generated, finished, cancelled, failed atomic.Uint64
	drafted, accepted, verifyPasses                            atomic.Uint64
	costs                                                      specCosts // touched by Run only
	costsSeen                                                  specCosts // a copy of costs for Stats, under mu
}

// New returns a Scheduler for the model on backend b with tokenizer tok;
// Run must be called to start it. MaxBatch is capped at what b can hold
// at once (a GPU's KV-cache slots).
func New(b engine.Backend, tok *tokenizer.Tokenizer, cfg Config) *Scheduler {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 16
	}
	if n := b.MaxSeqs(); n > 0 && cfg.MaxBatch > n {
		cfg.MaxBatch = n
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 64
	}
	if cfg.PrefillChunk <= 0 {
		cfg.PrefillChunk = 128
	}
	if cfg.Forward == nil {
		cfg.Forward = b.Forward
	}
	if cfg.MaxDraft <= 0 {
		cfg.MaxDraft = 8
	}
	return &Scheduler{b: b, tok: tok, cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{}),
		costs: specCosts{pass: make([]float64, cfg.MaxDraft+1)}}
}

// Handle is a submitted request's output.
type Handle struct {
	// Events delivers the request's output; it is buffered for the whole
	// request, so the scheduler never waits for a slow reader.
	Events <-chan Event
}

// seq is one request in flight.
type seq struct {
	ctx       context.Context
	req       Request
	events    chan Event
	submitted time.Time

	s         engine.Sequence
	inBatch   bool // counted in Scheduler.active (touched only by the pass loop)
	smp       *sample.Sampler
	fed       int     // prompt tokens already fed
	history   []int32 // prompt + generated, for the repetition penalty
	last      int32   // last sampled token (fed next pass)
	counts    map[int32]int
	dec       *tokenizer.Decoder
	text      string // generated text not yet released
	out       int    // completion tokens
	firstSent bool
	step      model.Step
	scratch   []float32
	// greedy: the request's token is the raw logits' arg max (GreedyOnly,
	// no penalties, bias or logprobs), so its steps ask the backend for
	// Step.Token and the CUDA backend selects it on the device.
	greedy bool
	// spec is the sequence's speculation (nil: plain steps); toks the
	// step's tokens when it verifies guesses.
	spec *specState
	toks []int32
	// ended: the request has ended (its sequence released).
	ended bool
	// gstate is where the output stands in req.Grammar.
	gstate grammar.State

	produced    atomic.Int64 // tokens produced so far
	atCancel    atomic.Int64 // produced when ctx was cancelled (-1 until then)
	stopCancelF func() bool
}

// Submit queues r. ctx is the request's lifetime: when it is cancelled the
// sequence is dropped before its next token and its final event carries
// ctx's error. Submit fails with ErrQueueFull when the queue is at its
// limit, ErrClosed after Close, and ErrContext when prompt plus MaxTokens
// exceed the backend's context (engine.Backend.MaxContext).
func (s *Scheduler) Submit(ctx context.Context, r Request) (*Handle, error) {
	if len(r.Prompt) == 0 {
		return nil, errors.New("empty prompt")
	}
	if r.MaxTokens < 1 {
		return nil, fmt.Errorf("max tokens must be positive, got %d", r.MaxTokens)
	}
	if n := len(r.Prompt) + r.MaxTokens; n > s.b.MaxContext() {
		return nil, fmt.Errorf("%w: prompt (%d tokens) plus max tokens (%d) exceed the model's context of %d",
			ErrContext, len(r.Prompt), r.MaxTokens, s.b.MaxContext())
	}
	vocab := s.b.Config().Vocab
	for _, id := range r.Prompt {
		if id < 0 || int(id) >= vocab {
			return nil, fmt.Errorf("prompt token %d is outside the vocabulary (0..%d)", id, vocab-1)
		}
	}
	smp, err := sample.New(r.Sample)
	if err != nil {
		return nil, fmt.Errorf("sampling parameters: %w", err)
	}
	if r.Grammar != nil && r.Grammar.Vocab().Size() > vocab {
		return nil, fmt.Errorf("the grammar's vocabulary has %d tokens, the model %d", r.Grammar.Vocab().Size(), vocab)
	}
	q := &seq{
		ctx: ctx, req: r, submitted: time.Now(), smp: smp,
		events:  make(chan Event, r.MaxTokens+2),
		history: append(make([]int32, 0, len(r.Prompt)+r.MaxTokens), r.Prompt...),
		dec:     s.tok.NewDecoder(),
		greedy: GreedyOnly(r.Sample) && !r.Logprobs && len(r.LogitBias) == 0 &&
			r.Presence == 0 && r.Frequency == 0 && r.Grammar == nil,
	}
	if r.Grammar != nil {
		q.gstate = r.Grammar.Start()
	}
	q.atCancel.Store(-1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, s.closed)
	}
	if len(s.queue) >= s.cfg.MaxQueue {
		return nil, fmt.Errorf("%w (%d waiting)", ErrQueueFull, len(s.queue))
	}
	q.stopCancelF = context.AfterFunc(ctx, func() {
		q.atCancel.Store(q.produced.Load())
		s.poke()
	})
	s.queue = append(s.queue, q)
	s.poke()
	return &Handle{Events: q.events}, nil
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the scheduler.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	st := Stats{Waiting: len(s.queue), Active: s.active, KVPositions: s.kvPos}
	for _, c := range s.costsSeen.pass {
		st.PassCost = append(st.PassCost, time.Duration(c*float64(time.Second)))
	}
	st.DraftCost = time.Duration(s.costsSeen.draft * float64(time.Second))
	s.mu.Unlock()
	st.MaxBatch, st.MaxQueue = s.cfg.MaxBatch, s.cfg.MaxQueue
	st.Passes = s.passes.Load()
	st.PromptTokens = s.promptToks.Load()
	st.Generated = s.generated.Load()
	st.Finished = s.finished.Load()
	st.Cancelled = s.cancelled.Load()
	st.Failed = s.failed.Load()
	st.Drafted, st.Accepted, st.VerifyPasses = s.drafted.Load(), s.accepted.Load(), s.verifyPasses.Load()
	return st
}

// Close stops admitting requests and ends every queued and active one with
// an error wrapping ErrClosed and reason. It returns once the scheduler
// goroutine has stopped (no forward pass is running), so the model may be
// released afterwards, with the number of requests it ended: counted when
// they are failed, not from an earlier snapshot, so a request that
// finished while Close waited is not reported as cut short. Close before
// Run returns 0 at once.
func (s *Scheduler) Close(reason error) int {
	s.mu.Lock()
	if s.closed == nil {
		s.closed = reason
	}
	s.mu.Unlock()
	s.poke()
	if !s.running.Load() {
		return 0
	}
	<-s.done
	return s.ended
}

// Start runs s in a goroutine of its own, under ctx's values but not its
// cancellation, until the returned stop closes s with reason and waits
// for Run to return: for a caller that owns a scheduler for one job
// (Generate, the benchmarks), where a request's ctx ends the request and
// not the scheduler.
func (s *Scheduler) Start(ctx context.Context) (stop func(reason error)) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		s.Run(runCtx)
	}()
	return func(reason error) {
		s.Close(reason)
		cancel()
		<-ran
	}
}

// Run drives the scheduler until Close or ctx is done. Cancelling ctx
// fails in-flight requests like Close does.
func (s *Scheduler) Run(ctx context.Context) {
	s.running.Store(true)
	defer close(s.done)
	var active []*seq
	var batch []model.Step
	for {
		s.mu.Lock()
		closed := s.closed
		if closed == nil && ctx.Err() != nil {
			closed = ctx.Err()
			s.closed = closed
		}
		if closed != nil {
			queued := s.queue
			s.queue = nil
			s.active = 0
			s.kvPos = 0
			s.mu.Unlock()
			err := fmt.Errorf("%w: %w", ErrClosed, closed)
			cut := append(active, queued...)
			for _, q := range cut {
				s.fail(q, err)
			}
			s.ended = len(cut)
			return
		}
		for len(active) < s.cfg.MaxBatch && len(s.queue) > 0 {
			q := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			q.inBatch = true
			active = append(active, q)
		}
		s.active = len(active)
		s.mu.Unlock()

		// Drop cancelled sequences before spending a pass on them.
		active = s.dropCancelled(active)
		if len(active) == 0 {
			s.setActive(0, 0)
			select {
			case <-s.wake:
			case <-ctx.Done():
			}
			continue
		}

		// Sequences get their cache when they join the batch (a GPU has
		// a fixed number of slots, given back when a request ends).
		ready := active[:0]
		var held []*seq // waiting for their shared prompt to be computed
		for _, q := range active {
			if q.s == nil && q.req.Shared != nil && s.joinShared(q) {
				held = append(held, q)
				continue
			}
			if q.s == nil {
				sq, err := s.b.NewSequence(len(q.req.Prompt) + q.req.MaxTokens)
				if err != nil {
					s.fail(q, fmt.Errorf("allocating the sequence's KV cache: %w", err))
					continue
				}
				q.s = sq
				if s.cfg.Drafter != nil && !q.req.NoSpeculation {
					// A drafter that cannot start leaves the request plain.
					if d, err := s.cfg.Drafter.Open(len(q.req.Prompt)+q.req.MaxTokens+s.cfg.MaxDraft+1, len(q.req.Prompt)); err == nil {
						q.spec = &specState{draft: d, accept: 0.5}
					}
				}
			}
			ready = append(ready, q)
		}
		for i := len(ready); i < len(active); i++ {
			active[i] = nil
		}
		active = ready
		if len(active) == 0 {
			s.setActive(len(held), 0)
			active = append(active, held...)
			continue
		}

		batch = batch[:0]
		promptFed, decodeFed := 0, 0
		longest := 1 // the longest decode step, for the pass-cost table
		for _, q := range active {
			var toks []int32
			if q.fed < len(q.req.Prompt) {
				end := min(len(q.req.Prompt), q.fed+s.cfg.PrefillChunk)
				toks = q.req.Prompt[q.fed:end]
				promptFed += len(toks)
			} else {
				toks = []int32{q.last}
				decodeFed++
			}
			// Token -1: a backend (or a wrapper of one) that does not honour
			// Greedy leaves it so, and its logits are sampled instead.
			q.step.Seq, q.step.Tokens, q.step.Greedy, q.step.Token, q.step.AllLogits = q.s, toks, q.greedy, -1, false
			q.step.Prompt = q.fed < len(q.req.Prompt)
			if q.fed >= len(q.req.Prompt) && q.spec != nil {
				if g := s.guess(ctx, q); len(g) > 0 {
					q.toks = append(append(q.toks[:0], q.last), g...)
					q.step.Tokens, q.step.Greedy, q.step.AllLogits = q.toks, false, true
					decodeFed += len(g)
					longest = max(longest, len(q.toks))
				}
			}
			batch = append(batch, q.step)
		}
		t0 := time.Now()
		err := s.cfg.Forward(ctx, batch)
		d := time.Since(t0)
		if err != nil {
			if ctx.Err() != nil {
				continue // closing: handled at the top
			}
			err = fmt.Errorf("forward pass: %w", err)
			for _, q := range active {
				s.fail(q, err)
			}
			active = active[:0]
			continue
		}
		s.passes.Add(1)
		s.promptToks.Add(uint64(promptFed))
		if promptFed == 0 {
			s.costs.observePass(longest, d)
			s.mu.Lock()
			s.costsSeen.pass = append(s.costsSeen.pass[:0], s.costs.pass...)
			s.costsSeen.draft = s.costs.draft
			s.mu.Unlock()
		}
		if longest > 1 {
			s.verifyPasses.Add(1)
		}
		if o := s.cfg.Observer; o != nil {
			o.Pass(len(batch), promptFed, decodeFed, d)
		}
		kept := active[:0]
		kv := 0
		for i, q := range active {
			q.step.Logits = batch[i].Logits // keep the rows for reuse
			if q.fed < len(q.req.Prompt) {
				q.fed += len(batch[i].Tokens)
				if q.fed < len(q.req.Prompt) {
					kept = append(kept, q)
					kv += q.s.Pos()
					continue
				}
			}
			if q.ctx.Err() != nil {
				s.cancel(q)
				continue
			}
			if q.spec != nil && len(q.spec.guess) > 0 {
				if s.verify(q, batch[i].Logits) {
					kept = append(kept, q)
					kv += q.s.Pos()
				}
				continue
			}
			var logits []float32
			if n := len(batch[i].Logits); n > 0 {
				logits = batch[i].Logits[n-1]
			}
			if s.advance(q, logits, batch[i].Token) {
				kept = append(kept, q)
				kv += q.s.Pos()
			}
		}
		for i := len(kept); i < len(active); i++ {
			active[i] = nil
		}
		active = append(kept, held...)
		s.setActive(len(active), kv)
	}
}

// joinShared starts q, which shares its prompt, when the sequence that
// computes the prompt has its cache: q's sequence then copies all but the
// prompt's last token from it. It reports true while q must wait for that
// (the computing sequence is still feeding the prompt); with no computer
// yet, q becomes it, and where the copy cannot be made q computes the
// prompt itself (both false, q.s still nil).
func (s *Scheduler) joinShared(q *seq) (wait bool) {
	sh := q.req.Shared
	lead := sh.leader
	n := len(q.req.Prompt) - 1
	switch {
	case lead == nil || lead.ended:
		// No computer, or it has ended: q computes the prompt for the rest.
		sh.leader = q
		return false
	case lead.s == nil || lead.fed < n:
		return true
	case n <= 0:
		return false
	}
	sq, err := s.b.NewSequence(len(q.req.Prompt) + q.req.MaxTokens)
	if err != nil {
		return false // the caller's own attempt reports it
	}
	if err := sq.CopyFrom(lead.s, n); err != nil {
		sq.Close()
		sh.leader = q
		return false
	}
	q.s, q.fed = sq, n
	return false
}

func (s *Scheduler) setActive(n, kv int) {
	s.mu.Lock()
	s.active, s.kvPos = n, kv
	s.mu.Unlock()
}

func (s *Scheduler) dropCancelled(active []*seq) []*seq {
	kept := active[:0]
	for _, q := range active {
		if q.ctx.Err() != nil {
			s.cancel(q)
			continue
		}
		kept = append(kept, q)
	}
	for i := len(kept); i < len(active); i++ {
		active[i] = nil
	}
	return kept
}

// advance samples q's next token from logits and emits it. It reports
// whether q goes on. A greedy sequence takes the backend's token when it
// gave one (token >= 0: the arg max the sampler would pick; the CUDA
// backend then leaves the logits as they were).
func (s *Scheduler) advance(q *seq, logits []float32, token int32) bool {
	var id int32
	switch {
	case q.greedy && token >= 0:
		id = token
		if vocab := s.b.Config().Vocab; id < 0 || int(id) >= vocab {
			s.fail(q, fmt.Errorf("backend selected token %d outside the vocabulary (0..%d)", id, vocab-1))
			return false
		}
	case logits == nil:
		s.fail(q, errors.New("forward pass returned no logits"))
		return false
	default:
		l, err := s.constrain(q, s.adjust(q, logits))
		if err != nil {
			s.fail(q, err)
			return false
		}
		id = q.smp.Sample(l, q.history)
	}
	if id < 0 {
		s.fail(q, errors.New("sampler returned no token"))
		return false
	}
	return s.emit(q, logits, id)
}

// emit hands q's next token id (drawn from logits, the row it came from,
// for its logprob) to the request: text, stop strings, the end of
// generation and the length limit. It reports whether q goes on.
func (s *Scheduler) emit(q *seq, logits []float32, id int32) bool {
	q.produced.Add(1)
	s.generated.Add(1)
	if !q.firstSent {
		q.firstSent = true
		if o := s.cfg.Observer; o != nil {
			o.FirstToken(time.Since(q.submitted))
		}
	}
	var lp *Logprob
	if q.req.Logprobs {
		lp = logprobOf(logits, id, q.req.TopLogprobs)
	}
	q.history = append(q.history, id)
	done := false
	if g := q.req.Grammar; g != nil && !s.tok.IsEOG(id) {
		var err error
		if q.gstate, err = g.Accept(q.gstate, id); err != nil {
			s.fail(q, fmt.Errorf("constrained output: %w", err))
			return false
		}
		if done, err = g.Done(q.gstate); err != nil {
			s.fail(q, fmt.Errorf("constrained output: %w", err))
			return false
		}
	}
	if s.tok.IsEOG(id) {
		// Text held back for a possible stop string is real output. The
		// end-of-generation token itself is not part of the completion
		// (usage does not count it), so it carries no logprob either.
		if q.text != "" {
			q.events <- Event{Token: -1, Text: q.text}
		}
		q.text = ""
		s.finish(q, "stop")
		return false
	}
	q.out++
	q.last = id
	if q.counts == nil && (q.req.Presence != 0 || q.req.Frequency != 0) {
		q.counts = map[int32]int{}
	}
	if q.counts != nil {
		q.counts[id]++
	}
	q.text += q.dec.Add(id)
	if i, ok := firstStop(q.text, q.req.Stop); ok {
		q.events <- Event{Token: id, Text: q.text[:i], Logprob: lp}
		q.text = ""
		s.finish(q, "stop")
		return false
	}
	if done {
		// The grammar is complete and allows nothing more: the end of
		// generation is the only token left, so stop without a pass.
		q.events <- Event{Token: id, Text: q.text + q.dec.Flush(), Logprob: lp}
		q.text = ""
		s.finish(q, "stop")
		return false
	}
	release := len(q.text) - holdBack(q.text, q.req.Stop)
	q.events <- Event{Token: id, Text: q.text[:release], Logprob: lp}
	q.text = q.text[release:]
	if q.out >= q.req.MaxTokens {
		tail := q.text + q.dec.Flush()
		q.text = ""
		if tail != "" {
			q.events <- Event{Token: -1, Text: tail}
		}
		s.finish(q, "length")
		return false
	}
	return true
}

// adjust applies logit bias and presence/frequency penalties to a copy of
// logits (or returns logits itself when there are none).
func (s *Scheduler) adjust(q *seq, logits []float32) []float32 {
	if len(q.req.LogitBias) == 0 && q.counts == nil {
		return logits
	}
	q.scratch = append(q.scratch[:0], logits...)
	for id, b := range q.req.LogitBias {
		if int(id) < len(q.scratch) {
			q.scratch[id] += b
		}
	}
	for id, c := range q.counts {
		q.scratch[id] -= float32(c)*q.req.Frequency + q.req.Presence
	}
	return q.scratch
}

// constrain applies q's grammar mask to l (a copy: the logprobs are the
// model's own). Without a grammar it returns l.
func (s *Scheduler) constrain(q *seq, l []float32) ([]float32, error) {
	g := q.req.Grammar
	if g == nil {
		return l, nil
	}
	mask, err := g.Allowed(q.gstate)
	if err != nil {
		return nil, fmt.Errorf("constrained output: %w", err)
	}
	if mask.Count() == 0 {
		return nil, errors.New("constrained output: the grammar allows no token of this vocabulary here")
	}
	if len(q.scratch) == 0 || &q.scratch[0] != &l[0] {
		q.scratch = append(q.scratch[:0], l...)
	}
	mask.Apply(q.scratch)
	return q.scratch, nil
}

func logprobOf(logits []float32, id int32, top int) *Logprob {
	all := sample.Logprobs(logits)
	lp := &Logprob{Token: id, Logprob: all[id]}
	if math.IsInf(float64(lp.Logprob), -1) {
		lp.Logprob = -9999
	}
	if top > 0 {
		lp.Top, _ = sample.TopLogprobs(logits, top)
	}
	return lp
}

func (s *Scheduler) finish(q *seq, reason string) {
	q.stopCancelF()
	q.release()
	s.leave(q)
	s.finished.Add(1)
	q.events <- Event{Token: -1, Finish: reason, PromptTokens: len(q.req.Prompt), CompletionTokens: q.out}
	close(q.events)
	if o := s.cfg.Observer; o != nil {
		o.Finished(reason, len(q.req.Prompt), q.out)
	}
}

func (s *Scheduler) cancel(q *seq) {
	q.stopCancelF()
	q.release()
	lag := 0
	if at := q.atCancel.Load(); at >= 0 {
		lag = int(q.produced.Load() - at)
	}
	// The observer hears of it before Stats show it, so that whoever sees
	// the cancellation counted finds its metrics recorded too.
	if o := s.cfg.Observer; o != nil {
		o.CancelLag(lag)
		o.Finished("cancelled", len(q.req.Prompt), q.out)
	}
	s.leave(q)
	s.cancelled.Add(1)
	q.events <- Event{Token: -1, Err: context.Cause(q.ctx), PromptTokens: len(q.req.Prompt), CompletionTokens: q.out}
	close(q.events)
}

func (s *Scheduler) fail(q *seq, err error) {
	q.stopCancelF()
	q.release()
	s.leave(q)
	s.failed.Add(1)
	q.events <- Event{Token: -1, Err: err, PromptTokens: len(q.req.Prompt), CompletionTokens: q.out}
	close(q.events)
	if o := s.cfg.Observer; o != nil {
		o.Finished("error", len(q.req.Prompt), q.out)
	}
}

// leave takes an ending sequence out of the active count before its final
// event goes out, so a client that has its answer never sees itself still
// counted in Stats. The pass loop re-publishes the exact count after each
// pass.
func (s *Scheduler) leave(q *seq) {
	if !q.inBatch {
		return
	}
	q.inBatch = false
	s.mu.Lock()
	if s.active > 0 {
		s.active--
	}
	s.mu.Unlock()
}

// release gives the sequence's KV cache back to the backend (a GPU slot
// for the next request); the sequence has left the batch.
func (q *seq) release() {
	q.ended = true
	if q.s != nil {
		q.s.Close()
		q.s = nil
	}
	if q.spec != nil {
		q.spec.draft.Close()
		q.spec = nil
	}
}

// GreedyOnly reports whether a sampler with parameters p always picks the
// arg max of the raw logit row (the largest logit, the lowest id on ties,
// NaN never chosen): temperature 0 with no repetition penalty in effect
// (penalty 1, or a window of 0 tokens). Top-k, top-p, min-p and the seed
// play no part at temperature 0. For such a request (without logprobs,
// bias or penalties) the scheduler sets Step.Greedy, which lets the CUDA
// backend select the token on the device and download 4 bytes a step
// instead of a vocabulary-long row; the token is the one the sampler would
// have drawn, so the output is the same on either path. Any other
// parameters need the logits on the host.
func GreedyOnly(p sample.Params) bool {
	return p.Temperature == 0 && (p.RepeatPenalty == 1 || p.RepeatLastN == 0)
}

// firstStop returns the index of the earliest stop string in text: the one
// stop-string rule of every generation. Empty stop strings never match.
func firstStop(text string, stops []string) (int, bool) {
	best := -1
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(text, st); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}

// holdBack returns how many trailing bytes of text must be kept back
// because they could be the beginning of a stop string.
func holdBack(text string, stops []string) int {
	n := 0
	for _, st := range stops {
		for k := min(len(st)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, st[:k]) {
				n = k
				break
			}
		}
	}
	return n
}
