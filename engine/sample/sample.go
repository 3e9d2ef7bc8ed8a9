package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params configures a Sampler.
type Params struct {
	// Temperature divides logits before the draw; 0 means greedy
	// (arg max). Must be finite and >= 0.
	Temperature float32
	// TopP is the nucleus mass to keep, in (0, 1]; 1 disables it.
	TopP float32
	// MinP drops tokens below MinP times the top probability, in [0, 1];
	// 0 disables it.
	MinP float32
	// TopK keeps the K most likely tokens; 0 disables it. Must be >= 0.
	TopK int
	// RepeatPenalty penalises recently seen tokens; 1 disables it. Must
	// be positive and finite.
	RepeatPenalty float32
	// RepeatLastN is how many trailing history tokens the penalty
	// considers; 0 disables it, -1 means the whole history.
	RepeatLastN int
	// Seed seeds the PCG generator used for draws.
	Seed uint64
}

// DefaultParams returns llama.cpp's default sampling settings with the
// given seed: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no
// repetition penalty (1.0) over the last 64 tokens.
func DefaultParams(seed uint64) Params {
	return Params{Temperature: 0.8, TopP: 0.95, MinP: 0.05, TopK: 40, RepeatPenalty: 1, RepeatLastN: 64, Seed: seed}
}

// Greedy returns parameters that always pick the arg max.
func Greedy() Params {
	return Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
}

// Validate reports the first out-of-range parameter.
func (p Params) Validate() error {
	finite := func(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }
	switch {
	case !finite(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("temperature %v must be finite and >= 0", p.Temperature)
	case !finite(p.TopP) || p.TopP <= 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v must be in (0, 1]", p.TopP)
	case !finite(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("min_p %v must be in [0, 1]", p.MinP)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d must be >= 0 (0 disables it)", p.TopK)
	case !finite(p.RepeatPenalty) || p.RepeatPenalty <= 0:
		return fmt.Errorf("repeat_penalty %v must be positive and finite (1 disables it)", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("repeat_last_n %d must be >= -1 (-1 = whole history, 0 disables it)", p.RepeatLastN)
	}
	return nil
}

// Sampler draws tokens according to Params. It keeps scratch buffers and
// its generator's state, so it is not safe for concurrent use; use one per
// sequence.
type Sampler struct {
	p     Params
	rng   *rand.Rand
	cands []cand
	buf   []float32
	seen  map[int32]struct{}
}

// cand is a candidate token and its (penalised, scaled) logit.
type cand struct {
	id    int32
	logit float32
}

// New validates p and returns a Sampler.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	return &Sampler{
		p:    p,
		rng:  rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15)),
		seen: make(map[int32]struct{}),
	}, nil
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// Sample picks the next token from logits given the tokens generated or
// read so far (history, oldest first; used by the repetition penalty). It
// does not modify logits. NaN logits count as -Inf. A token whose logit
// is -Inf is never chosen while any other is finite, whatever the
// parameters: that is how a grammar's mask (engine/grammar) forbids
// tokens, before any of the filters here. It returns -1 only when logits
// is empty.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	if len(logits) == 0 {
		return -1
	}
	l := s.penalised(logits, history)
	if s.p.Temperature == 0 {
		return Argmax(l)
	}
	return s.draw(s.candidates(l))
}

// candidates are the tokens the temperature draw chooses among (top-k,
// top-p, min-p applied), from penalised logits l.
func (s *Sampler) candidates(l []float32) []cand {
	c := s.cands[:0]
	for i, v := range l {
		if math.IsNaN(float64(v)) {
			v = float32(math.Inf(-1))
		}
		c = append(c, cand{int32(i), v})
	}
	s.cands = c
	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = topN(c, k)
		sorted = true
	}
	if s.p.TopP < 1 {
		c = s.topP(c, sorted)
	}
	if s.p.MinP > 0 {
		c = minP(c, s.p.MinP)
	}
	return c
}

// SampleDraft is Sample for speculative decoding: it verifies draft, a
// token another model (or a lookup) proposed deterministically, against
// this sampler's distribution p over logits. At temperature 0 it returns
// the arg max, accepted when that is draft. Above 0 it accepts draft with
// probability p(draft) and otherwise draws from p with draft removed and
// renormalised, so the token returned follows p exactly, whatever the
// draft (speculative sampling's rule for a drafter that puts all its
// mass on one token). It returns -1 only when logits is empty.
func (s *Sampler) SampleDraft(logits []float32, history []int32, draft int32) (int32, bool) {
	if len(logits) == 0 {
		return -1, false
	}
	l := s.penalised(logits, history)
	if s.p.Temperature == 0 {
		id := Argmax(l)
		return id, id == draft
	}
	c := s.candidates(l)
	mx, _ := softmaxDenom(c)
	if math.IsInf(float64(mx), -1) {
		return c[0].id, c[0].id == draft
	}
	t := float64(s.p.Temperature)
	var sum, pd float64
	for _, x := range c {
		e := math.Exp(float64(x.logit-mx) / t)
		sum += e
		if x.id == draft {
			pd = e
		}
	}
	if s.rng.Float64()*sum < pd {
		return draft, true
	}
	rest := c[:0:0]
	for _, x := range c {
		if x.id != draft {
			rest = append(rest, x)
		}
	}
	if len(rest) == 0 { // p(draft) = 1: the draw above always accepts
		return draft, true
	}
	return s.draw(rest), false
}

// penalised returns logits with the repetition penalty applied, copying
// only when the penalty is active.
func (s *Sampler) penalised(logits []float32, history []int32) []float32 {
	n := s.p.RepeatLastN
	if s.p.RepeatPenalty == 1 || n == 0 || len(history) == 0 {
		return logits
	}
	if n < 0 || n > len(history) {
		n = len(history)
	}
	s.buf = append(s.buf[:0], logits...)
	clear(s.seen)
	pen := s.p.RepeatPenalty
	for _, id := range history[len(history)-n:] {
		if id < 0 || int(id) >= len(s.buf) {
			continue
		}
		if _, done := s.seen[id]; done {
			continue
		}
		s.seen[id] = struct{}{}
		if s.buf[id] <= 0 {
			s.buf[id] *= pen
		} else {
			s.buf[id] /= pen
		}
	}
	return s.buf
}

// Argmax is the greedy choice: the index of the largest value, the lowest
// on ties; NaN is never chosen over a number. All-NaN input yields 0.
func Argmax(l []float32) int32 {
	best := 0
	for i, v := range l {
		if v > l[best] || (math.IsNaN(float64(l[best])) && !math.IsNaN(float64(v))) {
			best = i
		}
	}
	return int32(best)
}

// better orders candidates highest logit first, lower id first on ties.
func better(a, b cand) int {
	switch {
	case a.logit > b.logit:
		return -1
	case a.logit < b.logit:
		return 1
	}
	return int(a.id) - int(b.id)
}

// topN moves the n best candidates to the front of c in sorted order and
// returns them. It selects with a min-heap of size n (O(len(c) log n)).
func topN(c []cand, n int) []cand {
	if n <= 0 {
		return c[:0]
	}
	if n >= len(c) {
		slices.SortFunc(c, better)
		return c
	}
	h := c[:n]
	// Build a heap whose root is the worst of the kept candidates.
	worse := func(i, j int) bool { return better(h[i], h[j]) > 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= n {
				return
			}
			w := l
			if r := l + 1; r < n && worse(r, l) {
				w = r
			}
			if !worse(w, i) {
				return
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
	for i := n/2 - 1; i >= 0; i-- {
		down(i)
	}
	for i := n; i < len(c); i++ {
		if better(c[i], h[0]) < 0 {
			h[0], c[i] = c[i], h[0]
			down(0)
		}
	}
	slices.SortFunc(h, better)
	return h
}

// softmaxDenom returns the maximum logit and sum(exp(l - max)) over c.
func softmaxDenom(c []cand) (mx float32, sum float64) {
	mx = float32(math.Inf(-1))
	for _, x := range c {
		mx = max(mx, x.logit)
	}
	if math.IsInf(float64(mx), -1) {
		return mx, 0
	}
	for _, x := range c {
		sum += math.Exp(float64(x.logit - mx))
	}
	return mx, sum
}

// topP keeps the smallest best-first prefix whose probability reaches
// TopP. Unsorted input is sorted lazily: only as many of the best
// candidates as needed, starting from 256 and growing eightfold (a full
// sort once that reaches a quarter of the candidates).
func (s *Sampler) topP(c []cand, sorted bool) []cand {
	mx, sum := softmaxDenom(c)
	if sum == 0 {
		return c[:1]
	}
	target := float64(s.p.TopP) * sum
	for m := 256; ; m *= 8 {
		pre := c
		if !sorted {
			if m >= len(c)/4 {
				m = len(c)
			}
			pre = topN(c, m)
		}
		var cum float64
		for i, x := range pre {
			cum += math.Exp(float64(x.logit - mx))
			if cum >= target {
				return pre[:i+1]
			}
		}
		if sorted || len(pre) == len(c) {
			return pre
		}
	}
}

// minP keeps candidates whose probability is at least p times the largest,
// preserving order.
func minP(c []cand, p float32) []cand {
	mx, _ := softmaxDenom(c)
	if math.IsInf(float64(mx), -1) {
		return c[:1]
	}
	cut := float64(mx) + math.Log(float64(p))
	out := c[:0]
	for _, x := range c {
		if float64(x.logit) >= cut {
			out = append(out, x)
		}
	}
	return out
}

// draw applies the temperature, normalises and draws one candidate. The
// scaling is done in float64 on logit-max differences so that tiny
// temperatures cannot overflow.
func (s *Sampler) draw(c []cand) int32 {
	mx, _ := softmaxDenom(c)
	if math.IsInf(float64(mx), -1) {
		return c[0].id
	}
	t := float64(s.p.Temperature)
	w := func(x cand) float64 { return math.Exp(float64(x.logit-mx) / t) }
	var sum float64
	for _, x := range c {
		sum += w(x)
	}
	u := s.rng.Float64() * sum
	var cum float64
	last := c[0].id
	for _, x := range c {
		e := w(x)
		if e == 0 {
			continue
		}
		cum += e
		last = x.id
		if u < cum {
			return x.id
		}
	}
	// Rounding left u at the total: take the last token with weight.
	return last
}

// Logprobs returns the log-softmax of logits (natural log), computed in
// float64. NaN logits get -Inf.
func Logprobs(logits []float32) []float32 {
	out := make([]float32, len(logits))
	mx := math.Inf(-1)
	for _, v := range logits {
		if !math.IsNaN(float64(v)) {
			mx = math.Max(mx, float64(v))
		}
	}
	if math.IsInf(mx, -1) {
		for i := range out {
			out[i] = float32(math.Inf(-1))
		}
		return out
	}
	var sum float64
	for _, v := range logits {
		if !math.IsNaN(float64(v)) {
			sum += math.Exp(float64(v) - mx)
		}
	}
	lse := mx + math.Log(sum)
	for i, v := range logits {
		if math.IsNaN(float64(v)) {
			out[i] = float32(math.Inf(-1))
			continue
		}
		out[i] = float32(float64(v) - lse)
	}
	return out
}

// TokenLogprob is a token id with its log probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// ErrBadK is returned by TopLogprobs for a negative k.
var ErrBadK = errors.New("top logprobs: k must be >= 0")

// TopLogprobs returns the k most likely tokens with their log
// probabilities, most likely first (lower id first on ties). k larger
// than the vocabulary returns every token.
func TopLogprobs(logits []float32, k int) ([]TokenLogprob, error) {
	if k < 0 {
		return nil, fmt.Errorf("%w (got %d)", ErrBadK, k)
	}
	lp := Logprobs(logits)
	c := make([]cand, len(lp))
	for i, v := range lp {
		c[i] = cand{int32(i), v}
	}
	c = topN(c, min(k, len(c)))
	out := make([]TokenLogprob, len(c))
	for i, x := range c {
		out[i] = TokenLogprob{x.id, x.logit}
	}
	return out, nil
}
