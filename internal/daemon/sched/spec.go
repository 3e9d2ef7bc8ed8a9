package sched

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
)

// Speculative decoding. When layers stream, a pass costs nearly the same
// for one position as for ten: the bytes cross the link once. A drafter
// guesses the next k tokens cheaply; one pass feeds the last token and the
// k guesses and yields logits at every one; the target's own sampler then
// walks them, accepting each guess its distribution agrees with
// (sample.SampleDraft: the arg max at temperature 0, the exact rejection
// rule above it) and emitting its own token at the first disagreement, or
// a bonus token after the last guess. The output is the output plain
// decoding gives; rejected positions are rolled back from the cache.

// Drafter proposes tokens for speculative decoding; Open starts one
// request's drafting.
type Drafter interface {
	// Name says what drafts ("lookup", "model").
	Name() string
	// Open returns the drafting state of a request whose tokens will
	// reach at most maxLen (prompt, generated and guesses), the first
	// prompt of them its prompt: a draft model reads those as prompt
	// tokens (model.Step.Prompt), as the target does, so that a draft of
	// the target's own weights computes what the target computes.
	Open(maxLen, prompt int) (Draft, error)
}

// Draft is one request's drafter.
type Draft interface {
	// Propose returns up to k tokens likely to follow history (the prompt
	// and every token generated so far, the last of which the target has
	// not yet read). Fewer, or none, when it has no better guess.
	Propose(ctx context.Context, history []int32, k int) ([]int32, error)
	// Close releases the drafter's state (a draft model's cache).
	Close()
}

// Lookup drafts by prompt lookup: the longest recent n-gram (MaxN down to
// MinN tokens) that ends the history and occurred earlier in it proposes
// the tokens that followed that occurrence. It costs nothing but a scan
// and guesses well wherever text repeats (code edits, summaries, lists).
type Lookup struct{ MinN, MaxN int }

// Name implements Drafter.
func (Lookup) Name() string { return "lookup" }

// Open implements Drafter.
func (l Lookup) Open(int, int) (Draft, error) {
	if l.MinN < 1 || l.MaxN < l.MinN {
		return nil, fmt.Errorf("prompt lookup: n-gram sizes %d..%d", l.MinN, l.MaxN)
	}
	return l, nil
}

// Propose implements Draft: the latest earlier occurrence of the longest
// matching suffix wins.
func (l Lookup) Propose(_ context.Context, h []int32, k int) ([]int32, error) {
	for n := min(l.MaxN, len(h)-1); n >= l.MinN; n-- {
		suf := h[len(h)-n:]
		for j := len(h) - n - 1; j >= 0; j-- {
			if equal(h[j:j+n], suf) {
				return h[j+n : min(j+n+k, len(h))], nil
			}
		}
	}
	return nil, nil
}

// Close implements Draft.
func (Lookup) Close() {}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ModelDrafter drafts with a smaller model of the same vocabulary on its
// own backend (on the CPU, or resident on a GPU), or with the model's own
// first layers (engine.OpenSelfDraft): greedy tokens, one pass each, from
// a cache kept in step with the accepted history.
type ModelDrafter struct {
	B engine.Backend
	// Label names the drafter in stats ("model" when empty; "self" for
	// the model's own early exit).
	Label string
}

// Name implements Drafter.
func (d ModelDrafter) Name() string {
	if d.Label != "" {
		return d.Label
	}
	return "model"
}

// Open implements Drafter.
func (d ModelDrafter) Open(maxLen, prompt int) (Draft, error) {
	s, err := d.B.NewSequence(maxLen)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	return &modelDraft{b: d.B, s: s, prompt: prompt}, nil
}

type modelDraft struct {
	b      engine.Backend
	s      engine.Sequence
	prompt int // the history's first prompt tokens are the request's prompt
	steps  []model.Step
}

// Propose implements Draft: the history the cache lacks goes in one pass
// (two where it ends the prompt and goes on: the prompt's tokens marked
// so), each guess in one more; the guesses leave the cache afterwards, so
// it holds exactly the history for the next call.
func (d *modelDraft) Propose(ctx context.Context, h []int32, k int) ([]int32, error) {
	n := len(h)
	if d.s.Pos() > n { // cannot happen: the history only grows
		if err := d.s.Truncate(n); err != nil {
			return nil, err
		}
	}
	if d.s.Pos() == n { // re-read the last token for its logits
		if err := d.s.Truncate(n - 1); err != nil {
			return nil, err
		}
	}
	k = min(k, d.s.MaxContext()-n)
	out := make([]int32, 0, k)
	toks := h[d.s.Pos():]
	if len(d.steps) == 0 {
		d.steps = make([]model.Step, 1)
	}
	if p := d.s.Pos(); p < d.prompt && d.prompt < n {
		// The prompt's rest, then what followed it.
		d.steps[0] = model.Step{Seq: d.s, Tokens: h[p:d.prompt], Prompt: true, Logits: d.steps[0].Logits}
		if err := d.b.Forward(ctx, d.steps); err != nil {
			return nil, fmt.Errorf("draft model: %w", err)
		}
		toks = h[d.prompt:]
	}
	for len(out) < k {
		d.steps[0] = model.Step{Seq: d.s, Tokens: toks, Prompt: d.s.Pos()+len(toks) <= d.prompt, Greedy: true, Token: -1, Logits: d.steps[0].Logits}
		if err := d.b.Forward(ctx, d.steps); err != nil {
			return nil, fmt.Errorf("draft model: %w", err)
		}
		t := d.steps[0].Token
		if t < 0 {
			t = sample.Argmax(d.steps[0].Logits[len(d.steps[0].Logits)-1])
		}
		out = append(out, t)
		toks = out[len(out)-1:]
	}
	if err := d.s.Truncate(min(d.s.Pos(), n)); err != nil {
		return nil, err
	}
	return out, nil
}

// Close implements Draft.
func (d *modelDraft) Close() { d.s.Close() }

// specState is one sequence's speculation: its drafter, the acceptance it
// has seen and the guesses of the pass in flight.
type specState struct {
	draft Draft
	// accept is the estimated chance that a guess is accepted given the
	// ones before it were: accepted guesses over guesses judged (the
	// accepted ones and the first rejected one), as moving sums.
	accept       float64
	hits, judged float64
	off          int     // rounds left before trying again after speculation stopped paying
	guess        []int32 // this pass's guesses
}

// specCosts are the scheduler's measured costs: a pass's time by the
// tokens its longest step fed (index n-1), and a drafted token's time.
type specCosts struct {
	pass   []float64 // seconds, moving averages; 0 = not seen
	draft  float64
	rounds int // speculative decisions taken
}

// plainEvery is how often (in decisions) a step goes plain to re-measure
// the plain pass's cost.
const plainEvery = 32

// alphaWeight is the weight of the newest observation in the moving
// averages.
const alphaWeight = 0.2

func (c *specCosts) observePass(tokens int, d time.Duration) {
	if tokens < 1 || tokens > len(c.pass) {
		return
	}
	c.pass[tokens-1] = ema(c.pass[tokens-1], d.Seconds())
}

func ema(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return old + alphaWeight*(v-old)
}

// passCost is the expected time of a pass whose longest step feeds n
// tokens: measured where seen, else the nearest shorter one's (a streamed
// pass costs nearly the same for any small n).
func (c *specCosts) passCost(n int) float64 {
	for i := min(n, len(c.pass)) - 1; i >= 0; i-- {
		if c.pass[i] > 0 {
			return c.pass[i]
		}
	}
	return 0
}

// chooseK picks the number of guesses that maximises expected tokens per
// second for a sequence accepting a fraction a of guesses: (1 − a^(k+1)) /
// (1 − a) tokens per pass of passCost(k+1) plus k drafted tokens. 0 when
// no k beats plain decoding.
func (c *specCosts) chooseK(a float64, maxK int) int {
	base := c.passCost(1)
	if base == 0 {
		return 0
	}
	best, bestRate := 0, 1/base
	for k := 1; k <= maxK; k++ {
		tokens := float64(k + 1)
		if a < 1 {
			tokens = (1 - math.Pow(a, float64(k+1))) / (1 - a)
		}
		t := c.passCost(k+1) + float64(k)*c.draft
		if t <= 0 {
			continue
		}
		if r := tokens / t; r > bestRate*1.02 {
			best, bestRate = k, r
		}
	}
	return best
}

// guess asks q's drafter for this step's guesses: as many as chooseK
// finds worth verifying, within the sequence's cache and token limits.
func (s *Scheduler) guess(ctx context.Context, q *seq) []int32 {
	sp := q.spec
	sp.guess = sp.guess[:0]
	if sp.off > 0 {
		sp.off--
		return nil
	}
	// A plain step now and then keeps the cost it is weighed against
	// measured (the first one measures it).
	s.costs.rounds++
	if s.costs.pass[0] == 0 || s.costs.rounds%plainEvery == 0 {
		return nil
	}
	k := s.costs.chooseK(sp.accept, s.cfg.MaxDraft)
	k = min(k, q.s.MaxContext()-q.s.Pos()-1, q.req.MaxTokens-q.out-1)
	if k <= 0 {
		// Not paying now: look again after a while, with a fresh
		// estimate of acceptance.
		sp.off, sp.accept = 16, max(sp.accept, 0.5)
		return nil
	}
	t0 := time.Now()
	g, err := sp.draft.Propose(ctx, q.history, k)
	if err != nil {
		// A drafter that fails leaves the request plain; the request
		// itself is unharmed.
		sp.draft.Close()
		q.spec = nil
		return nil
	}
	if len(g) > 0 {
		s.costs.draft = ema(s.costs.draft, time.Since(t0).Seconds()/float64(len(g)))
	}
	sp.guess = append(sp.guess, g[:min(len(g), k)]...)
	return sp.guess
}

// verify walks a speculative step's logit rows (row j follows the step's
// j-th token: the last token, then each guess): each guess is checked
// with the request's sampler, accepted ones are emitted, and the first
// rejection emits the sampler's own token; after the last guess the final
// row gives a bonus token. The cache then drops the positions of rejected
// guesses. It reports whether q goes on.
func (s *Scheduler) verify(q *seq, rows [][]float32) bool {
	sp := q.spec
	g := sp.guess
	if len(rows) != len(g)+1 {
		s.fail(q, fmt.Errorf("speculative step: %d logit rows for %d tokens", len(rows), len(g)+1))
		return false
	}
	pos0 := q.s.Pos() - len(g) - 1 // where the step's first token went
	accepted := 0
	for j, row := range rows {
		var id int32
		ok := false
		l, err := s.constrain(q, s.adjust(q, row))
		if err != nil {
			s.fail(q, err)
			return false
		}
		if j < len(g) {
			id, ok = q.smp.SampleDraft(l, q.history, g[j])
		} else {
			id = q.smp.Sample(l, q.history)
		}
		if id < 0 {
			s.fail(q, fmt.Errorf("sampler returned no token"))
			return false
		}
		if !s.emit(q, row, id) {
			// The request ended on this token: the guesses after it
			// were never judged, and an accepted one still counts.
			judged := min(j+1, len(g))
			if ok {
				accepted++
			}
			s.countSpec(sp, judged, accepted)
			return false
		}
		if !ok {
			break
		}
		accepted++
	}
	s.countSpec(sp, len(g), accepted)
	if err := q.s.Truncate(pos0 + 1 + accepted); err != nil {
		s.fail(q, fmt.Errorf("rolling back rejected guesses: %w", err))
		return false
	}
	sp.guess = sp.guess[:0]
	return true
}

func (s *Scheduler) countSpec(sp *specState, drafted, accepted int) {
	s.drafted.Add(uint64(drafted))
	s.accepted.Add(uint64(accepted))
	if drafted == 0 {
		return
	}
	judged := accepted
	if accepted < drafted {
		judged++ // the guess that was rejected
	}
	sp.hits = (1-alphaWeight)*sp.hits + float64(accepted)
	sp.judged = (1-alphaWeight)*sp.judged + float64(judged)
	sp.accept = sp.hits / sp.judged
}
