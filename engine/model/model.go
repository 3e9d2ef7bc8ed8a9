package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/workpool"
)

// ErrContextOverflow is returned (wrapped) when a step would take a
// sequence past its context capacity.
var ErrContextOverflow = errors.New("context overflow")

// Model is a loaded model ready to run forward passes. Forward calls are
// serialised; any number of Sequences may share one Model.
type Model struct {
	// Config is the model's hyperparameters. Treat as read-only.
	Config Config
	// Weights are the resident weights. Treat as read-only.
	Weights *Weights

	mu       sync.Mutex
	src      LayerSource
	resident bool
	pool     *workpool.Pool
	ropeFreq []float64 // per rotary pair, radians per position
	// ropeFreqLocal is ropeFreq of the sliding-window layers when their
	// RoPE base differs (Config.RopeThetaLocal); nil otherwise.
	ropeFreqLocal []float64
	closer        func() error
	sc            scratch
	// keepScratch is the largest activation buffer (in float32s) kept
	// between passes: defaultKeptScratch, lowered by tests on their own
	// model.
	keepScratch int
	// fast says the matrix products run engine/gemv's kernels of impl
	// instead of quant's float reference (UseGEMV).
	fast bool
	impl gemv.Impl
	// skip marks the layers passes leave out (SetSkip); nil skips none.
	skip []bool
	// cosSum, when not nil, accumulates per layer the cosine of each
	// token's hidden state before and after the layer (LayerCosines).
	cosSum []float64
	// routeCounts counts, per MoE layer and expert, the tokens routed to
	// it (ExpertCounts); nil for a dense model.
	routeCounts [][]uint64
	// experts serves MoE layers whose Layer holds no experts
	// (SetExpertSource).
	experts ExpertSource
	// aheadKeep, set on an FFN device (FFNDevice.ReadAhead), makes its
	// routed FFNs read ahead the next layer's predicted experts it keeps.
	aheadKeep func(l, e int) bool
	// split is the routed call's split expert (Routing.Split) while it
	// runs; zero otherwise.
	split ExpertSplit
	// beside, set by a routed call (FFNRoutedBeside), is run by the
	// caller's thread in the call's first step of matrix products, once
	// that step's workers are started (parallelProducts clears it);
	// besideSteps counts the steps that took it.
	beside      func()
	besideSteps int
	// skew is added to the router's scores, per layer and expert
	// (SetRouterSkew); nil adds nothing.
	skew [][]float32
	// expertRead is the expert weight bytes the MoE blocks read
	// (FFNDevice.ExpertBytes).
	expertRead int64
}

// SetSkip makes later passes leave the given layers out: the hidden state
// passes them unchanged (layer skip, or a drafter made of the model's
// first layers). Nil or empty restores every layer. The quality it costs
// is the caller's to measure (strata bench quality).
func (m *Model) SetSkip(layers []int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(layers) == 0 {
		m.skip = nil
		return nil
	}
	skip := make([]bool, m.Config.Layers)
	for _, l := range layers {
		if l < 0 || l >= m.Config.Layers {
			return fmt.Errorf("skip layer %d: outside [0, %d)", l, m.Config.Layers)
		}
		skip[l] = true
	}
	m.skip = skip
	return nil
}

// LayerCosines runs tokens through a fresh sequence and returns, per
// layer, the mean over tokens of the cosine between the hidden state
// entering the layer and leaving it: a layer that barely turns the state
// (cosine near 1) is the one to skip first.
func (m *Model) LayerCosines(ctx context.Context, tokens []int32) ([]float64, error) {
	seq := m.NewSequence(len(tokens))
	defer seq.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cosSum = make([]float64, m.Config.Layers)
	defer func() { m.cosSum = nil }()
	if err := m.forward(ctx, []Step{{Seq: seq, Tokens: tokens}}, func([][]float32) {}); err != nil {
		return nil, fmt.Errorf("layer cosines: %w", err)
	}
	sum := m.cosSum
	for l := range sum {
		sum[l] /= float64(len(tokens))
	}
	return sum, nil
}

// BySimilarity orders layers by their cosines (LayerCosines), the one
// that turns the hidden state least first: the order in which layer skip
// leaves them out. Ties keep layer order.
func BySimilarity(cos []float64) []int {
	order := make([]int, len(cos))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cos[order[a]] > cos[order[b]] })
	return order
}

// Embed is tokens' embedding: the mean over them of the final hidden
// state after the output norm (what the output head reads), scaled to
// unit length. It runs a pass of its own (no cache kept) and is safe
// beside Forward (the passes are serialised).
func (m *Model) Embed(ctx context.Context, tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("embed: no tokens")
	}
	seq := m.NewSequence(len(tokens))
	defer seq.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &m.Config
	sum := make([]float64, c.Dim)
	row := make([]float32, c.Dim)
	err := m.forward(ctx, []Step{{Seq: seq, Tokens: tokens}}, func(h [][]float32) {
		decodeF32(m.sc.normW, m.Weights.OutputNorm.Data)
		for _, x := range h {
			rmsNorm(row, x, m.sc.normW, c.NormEps)
			for i, v := range row {
				sum[i] += float64(v)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	var norm float64
	for _, v := range sum {
		norm += v * v
	}
	out := make([]float32, c.Dim)
	if norm > 0 {
		inv := 1 / math.Sqrt(norm)
		for i, v := range sum {
			out[i] = float32(v * inv)
		}
	}
	return out, nil
}

// UseGEMV makes later passes compute their matrix products with
// engine/gemv's kernels of impl (a 12-bit vector, integer dot products,
// SIMD at memory speed) instead of quant's float32 reference. A Model
// starts on the reference, the one every other backend and kernel is
// checked against; the CPU backend switches to the best impl the machine
// has.
func (m *Model) UseGEMV(impl gemv.Impl) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fast, m.impl = true, impl
}

// UseReference puts later passes back on quant's float32 reference
// products (a Model's state from New).
func (m *Model) UseReference() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fast = false
}

// New builds a Model from a configuration and weights, validating every
// tensor against the configuration. The weights are used in place; for a
// tied model an empty Output is set to Embed.
func New(cfg Config, w *Weights) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new model: %w", err)
	}
	if err := cfg.check(w); err != nil {
		return nil, fmt.Errorf("new model: %w", err)
	}
	m := &Model{Config: cfg, Weights: w, pool: workpool.Default(), keepScratch: defaultKeptScratch, routeCounts: newRouteCounts(&cfg)}
	m.src, m.resident = residentSource{w}, true
	m.ropeFreq = RopeFrequencies(cfg.RopeTheta, cfg.HeadDim, cfg.RopeFreqs)
	if cfg.RopeThetaLocal > 0 {
		// The local layers' base comes without the global layers'
		// scaling (llama.cpp's rope_freq_scale_train_swa is 1).
		m.ropeFreqLocal = RopeFrequencies(cfg.RopeThetaLocal, cfg.HeadDim, nil)
	}
	return m, nil
}

// RopeFrequencies returns the angle per position, in radians, of each of
// headDim/2 rotary pairs: theta^(-2i/headDim), divided by divisors[i] when
// divisors is not nil (llama3 or linear scaling).
func RopeFrequencies(theta float64, headDim int, divisors []float32) []float64 {
	f := make([]float64, headDim/2)
	for i := range f {
		f[i] = math.Pow(theta, -2*float64(i)/float64(headDim))
		if divisors != nil {
			f[i] /= float64(divisors[i])
		}
	}
	return f
}

// SetLayerSource makes later forward passes take layer weights from src
// (nil restores the resident weights). Layers from a non-resident source
// are validated against the Config on every use.
func (m *Model) SetLayerSource(src LayerSource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if src == nil {
		m.src, m.resident = residentSource{m.Weights}, true
		return
	}
	m.src, m.resident = src, false
}

// Close releases resources the Model owns (the file mapping when it was
// made by Open). The Model must not be used afterwards.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closer == nil {
		return nil
	}
	c := m.closer
	m.closer = nil
	if err := c(); err != nil {
		return fmt.Errorf("close model: %w", err)
	}
	return nil
}

// Sequence is one stream of tokens with its own KV cache. It may only be
// used with the Model that made it, and not concurrently with a Forward
// call that includes it.
type Sequence struct {
	m   *Model
	pos int // tokens already in the cache
	max int // capacity in positions
	// k and v hold, per layer, the pages of keys (after RoPE) and values
	// (kvcache.go); own says which pages the sequence may write in place
	// (those CopyFrom shared it may not).
	k, v   [][][]float32
	own    [][]bool
	closed bool
}

// NewSequence returns an empty sequence whose KV cache may grow to maxCtx
// positions (maxCtx <= 0 or above Config.Context means Config.Context).
// Cache memory is allocated as the sequence grows.
func (m *Model) NewSequence(maxCtx int) *Sequence {
	if maxCtx <= 0 || maxCtx > m.Config.Context {
		maxCtx = m.Config.Context
	}
	return &Sequence{
		m:   m,
		max: maxCtx,
		k:   make([][][]float32, m.Config.Layers),
		v:   make([][][]float32, m.Config.Layers),
		own: make([][]bool, m.Config.Layers),
	}
}

// Pos is the number of tokens the sequence holds (the position the next
// token will take).
func (s *Sequence) Pos() int { return s.pos }

// MaxContext is the capacity of the sequence's KV cache in positions.
func (s *Sequence) MaxContext() int { return s.max }

// Close marks the sequence unusable: Forward refuses it from then on (its
// cache is garbage-collected; Close exists so that every backend's
// sequences end the same way). Closing twice is harmless.
func (s *Sequence) Close() { s.closed = true }

// Reset empties the sequence, keeping its cache memory for reuse.
func (s *Sequence) Reset() { s.pos = 0 }

// Truncate drops every token from position n on, so the next token takes
// position n. It allows reusing a shared prefix.
func (s *Sequence) Truncate(n int) error {
	if n < 0 || n > s.pos {
		return fmt.Errorf("truncate sequence to %d: out of range [0, %d]", n, s.pos)
	}
	s.pos = n
	return nil
}

// CopyFrom implements Seq.
func (s *Sequence) CopyFrom(src Seq, n int) error {
	o, ok := src.(*Sequence)
	switch {
	case !ok || o.m != s.m:
		return errors.New("copy sequence: the source belongs to another model")
	case s.closed || o.closed:
		return ErrSequenceClosed
	case n < 0 || n > o.pos || n > s.max:
		return fmt.Errorf("copy sequence: %d positions of %d (capacity %d)", n, o.pos, s.max)
	}
	s.pos = 0
	for l := range s.k {
		s.sharePages(l, o, n)
	}
	s.pos = n
	return nil
}

// Seq is a sequence as every backend keeps it: this package's Sequence on
// the CPU, engine/gpu's on a GPU. A Step names its sequence through it, so
// one Step type and one batch check (CheckBatch) serve every backend; each
// backend's Forward accepts only its own sequences.
type Seq interface {
	// Pos is the number of tokens held (the position of the next one).
	Pos() int
	// MaxContext is the cache's capacity in positions.
	MaxContext() int
	// Reset empties the sequence, keeping its cache.
	Reset()
	// Truncate drops every token from position n on.
	Truncate(n int) error
	// CopyFrom makes the sequence hold the first n tokens of src, a
	// sequence of the same model, their cache entries copied: what it
	// held is dropped. A prompt computed once serves several sequences so.
	CopyFrom(src Seq, n int) error
	// Close gives the cache back (on a GPU, its slot); a closed sequence
	// cannot be used in Forward. Closing twice is harmless.
	Close()
}

// Step is one sequence's share of a forward pass: it appends Tokens to Seq
// and receives logits, or only the next token where the backend can pick
// it on the device. It is the one step type of every backend (engine/gpu
// and the engine's Backend take it as it is), so a pass is never converted
// between backends' types.
type Step struct {
	// Seq is the sequence to advance; it must belong to the backend (and
	// model) the step is passed to.
	Seq Seq
	// Tokens are the token ids to append (at least one).
	Tokens []int32
	// Logits is filled by Forward: one Vocab-long row per token when
	// AllLogits is set, otherwise a single row for the last token. Rows
	// already present with the right shape are reused.
	Logits [][]float32
	// AllLogits asks for logits at every token instead of the last only.
	AllLogits bool
	// Greedy allows the backend to pick the step's next token itself, as
	// the greedy choice of its last logit row (the largest logit, the
	// lowest id on ties, NaN never chosen: engine/sample at temperature 0).
	// A backend that can (the GPU, when every step of the pass asks and
	// none wants AllLogits) writes it to Token and may leave Logits as it
	// was; one that cannot leaves Token alone and fills Logits. The caller
	// sets Token to -1 first and samples the logits when it stays so: the
	// scheduler's sampler is the one place that picks tokens, and this is
	// its fast path.
	Greedy bool
	// Token is the token a backend picked for a Greedy step; Forward does
	// not touch it otherwise.
	Token int32
	// Prompt says the tokens are a request's prompt, not tokens the model
	// generated or a draft's guesses. A backend may compute prompt tokens
	// on a faster path whose results differ (within stated bounds) from
	// those of generated tokens, the CPU's tile path (engine/gemv's
	// RowsTiled): it does so for every prompt token, however the prompt
	// was split into steps or batched, so a request's output does not
	// depend on either. Tokens not marked so always take the path decoding
	// takes, whose bits do not depend on the batch: a verify pass's
	// results are plain decoding's.
	Prompt bool
}

// ErrSequenceClosed is wrapped by Forward when a step's sequence was
// closed.
var ErrSequenceClosed = errors.New("sequence is closed")

// CheckBatch is the one validation of a forward pass's batch, run by
// every backend's Forward before anything changes: the batch is not empty,
// every step names a sequence that own accepts (it returns an error when
// the sequence belongs to another backend or model, or is closed), has
// tokens inside the vocabulary [0, vocab) and fits the sequence's context
// (ErrContextOverflow), and no sequence appears twice. Errors name the
// step and read "forward: …".
func CheckBatch(batch []Step, vocab int, own func(Seq) error) error {
	if len(batch) == 0 {
		return errors.New("forward: empty batch")
	}
	seen := make(map[Seq]int, len(batch))
	for i := range batch {
		st := &batch[i]
		s := st.Seq
		if s == nil {
			return fmt.Errorf("forward: step %d: nil sequence", i)
		}
		if err := own(s); err != nil {
			return fmt.Errorf("forward: step %d: %w", i, err)
		}
		if len(st.Tokens) == 0 {
			return fmt.Errorf("forward: step %d: no tokens", i)
		}
		if j, dup := seen[s]; dup {
			return fmt.Errorf("forward: steps %d and %d use the same sequence", j, i)
		}
		seen[s] = i
		if pos, capacity := s.Pos(), s.MaxContext(); pos+len(st.Tokens) > capacity {
			return fmt.Errorf("forward: step %d: %w: sequence at position %d cannot take %d more tokens (capacity %d)",
				i, ErrContextOverflow, pos, len(st.Tokens), capacity)
		}
		for j, id := range st.Tokens {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("forward: step %d: token %d is id %d, outside vocabulary [0, %d)", i, j, id, vocab)
			}
		}
	}
	return nil
}

// own accepts the sequences this model made that are still open.
func (m *Model) own(s Seq) error {
	ms, ok := s.(*Sequence)
	switch {
	case !ok || ms == nil:
		return errors.New("the sequence belongs to another backend")
	case ms.m != m:
		return errors.New("sequence belongs to another model")
	case ms.closed:
		return ErrSequenceClosed
	}
	return nil
}

// tokRef locates one token of the batch.
type tokRef struct {
	seq *Sequence
	pos int
	id  int32
}

// scratch holds the activations of one pass, reused across calls.
type scratch struct {
	bufs                               []float32
	h, xn, q, k, v, att, tmp, gate, up [][]float32
	cos, sin                           [][]float32
	// cosL and sinL are the rotations of local (sliding-window) layers
	// when they have a RoPE base of their own (Gemma 3).
	cosL, sinL [][]float32
	normW      []float32
	// vec holds a layer's decoded bias or q/k norm weights.
	vec []float32
	// split is the layer of a fused architecture with its views set
	// (Config.SplitFused).
	split      Layer
	toks       []tokRef
	ysub       [][][]float32 // per worker
	scores     [][]float32   // per worker
	chunks     []chunk
	outX, outY [][]float32
	// hPrev and prevBuf keep the hidden states entering a layer while
	// LayerCosines measures.
	hPrev   [][]float32
	prevBuf []float32
	// xq holds the quantized inputs of one matmul (engine/gemv): xq[k]
	// the vectors of its k-th distinct input, xqBuf their storage.
	xq    [][]*gemv.X
	xqBuf []*gemv.X
	moe   moeScratch
	// inputs, which and xqAt index matmulGEMV's distinct inputs: which[o]
	// is op o's input, xqAt[i] the (input, row) of quantized vector i.
	inputs [][][]float32
	which  []int
	// inputOp[k] is the first op taking distinct input k (its glu).
	inputOp []int
	xqAt    [][2]int
	// packed[k] holds distinct input k's vectors packed for the
	// multi-vector kernels (gemv.Packed) when inPacked[k]: a batch of
	// several vectors taken by an op whose format has such a kernel.
	packed   []gemv.Packed
	inPacked []bool
	// tiles[k] holds distinct input k's vectors for the tile path
	// (gemv.Tiles) when inTiled[k]: the prompt rows of an op splitPrompt
	// marked tiled; onlyTiled[k] says no other op takes them.
	tiles     []gemv.Tiles
	inTiled   []bool
	onlyTiled []bool
	// prompt marks the pass's rows that are prompt tokens (Step.Prompt);
	// splitOps and gathered hold splitPrompt's ops and their rows.
	prompt   []bool
	splitOps []matOp
	gathered [][]float32
	// attn is the attention's (attnblock.go).
	attn attnScratch
}

// sameRows reports whether a and b are the same rows (the same vectors in
// the same order), so one quantization serves both.
func sameRows(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) || (len(a[i]) > 0 && &a[i][0] != &b[i][0]) {
			return false
		}
	}
	return true
}

// prepare sizes the scratch for T tokens with at most maxPos+1 cached
// positions per sequence.
func (m *Model) prepare(T, maxPos int) {
	c := &m.Config
	sc := &m.sc
	sc.prompt = sc.prompt[:0] // forward marks a pass's prompt rows
	half := c.HeadDim / 2
	widths := []int{c.Dim, c.Dim, c.QDim(), c.KVDim(), c.KVDim(), c.QDim(), c.Dim, c.FFN, c.FFN, half, half, half, half}
	total := 0
	for _, w := range widths {
		total += w * T
	}
	if cap(sc.bufs) < total {
		sc.bufs = make([]float32, total)
	}
	buf := sc.bufs[:total]
	views := []*[][]float32{&sc.h, &sc.xn, &sc.q, &sc.k, &sc.v, &sc.att, &sc.tmp, &sc.gate, &sc.up, &sc.cos, &sc.sin, &sc.cosL, &sc.sinL}
	for i, w := range widths {
		vs := (*views[i])[:0]
		for t := 0; t < T; t++ {
			vs = append(vs, buf[:w:w])
			buf = buf[w:]
		}
		*views[i] = vs
	}
	if len(sc.normW) != c.Dim {
		sc.normW = make([]float32, c.Dim)
	}
	if n := max(c.QDim(), 2*c.HeadDim); len(sc.vec) != n {
		sc.vec = make([]float32, n)
	}
	if len(sc.ysub) != m.pool.Threads() {
		sc.ysub = make([][][]float32, m.pool.Threads())
		sc.scores = make([][]float32, m.pool.Threads())
	}
	// Each thread writes its own scratch on every chunk and head: each
	// piece is at least a few cache lines long (a slice header is 24 bytes,
	// a score 4), so that no two threads write one line.
	const line = 64
	for w := range sc.ysub {
		if cap(sc.ysub[w]) < T {
			sc.ysub[w] = make([][]float32, T, max(T, 8)) // 8 headers: 192 bytes, three whole lines
		}
		if len(sc.scores[w]) < maxPos+1 {
			sc.scores[w] = make([]float32, max(maxPos+1, line/4))
		}
	}
}

// Forward advances every sequence of the batch by its step's tokens in one
// pass over the layers and fills each step's Logits (it never picks a
// Greedy step's Token: the CPU has no faster way to than the caller's
// sampler). Each weight row is decoded once and applied to all tokens of
// the batch. The batch is checked by CheckBatch before anything changes: a
// bad token, a foreign or closed sequence, a sequence listed twice or a
// step that would overflow a sequence's context (ErrContextOverflow)
// returns an error with every sequence untouched. Cancellation is checked between
// layers; a cancelled or failed pass leaves every sequence at its old
// position (cache slots past it are overwritten by the next pass).
func (m *Model) Forward(ctx context.Context, batch []Step) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forward(ctx, batch, nil)
}

// forward is Forward with m.mu held. A non-nil hidden receives the final
// hidden states (one row a token, before the output norm) instead of the
// output head running.
func (m *Model) forward(ctx context.Context, batch []Step, hidden func(h [][]float32)) error {
	c := &m.Config
	if len(batch) == 0 {
		return errors.New("forward: empty batch")
	}
	if err := CheckBatch(batch, c.Vocab, m.own); err != nil {
		return err
	}
	T, maxPos := 0, 0
	for i := range batch {
		s := batch[i].Seq.(*Sequence)
		T += len(batch[i].Tokens)
		maxPos = max(maxPos, s.pos+len(batch[i].Tokens)-1)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forward: %w", err)
	}

	m.prepare(T, maxPos)
	sc := &m.sc
	sc.toks = sc.toks[:0]
	for i := range batch {
		st := &batch[i]
		s := st.Seq.(*Sequence)
		s.reserve(s.pos + len(st.Tokens))
		for j, id := range st.Tokens {
			sc.toks = append(sc.toks, tokRef{s, s.pos + j, id})
			sc.prompt = append(sc.prompt, st.Prompt)
		}
	}

	// Embeddings and per-token RoPE angles.
	for t, tr := range sc.toks {
		if err := m.embed(sc.h[t], tr.id); err != nil {
			return fmt.Errorf("forward: %w", err)
		}
		for i, f := range m.ropeFreq {
			a := float64(tr.pos) * f
			sc.cos[t][i] = float32(math.Cos(a))
			sc.sin[t][i] = float32(math.Sin(a))
		}
		if af := c.RopeAttnFactor; af != 0 && af != 1 {
			for i := range m.ropeFreq {
				sc.cos[t][i] *= af
				sc.sin[t][i] *= af
			}
		}
		for i, f := range m.ropeFreqLocal {
			a := float64(tr.pos) * f
			sc.cosL[t][i] = float32(math.Cos(a))
			sc.sinL[t][i] = float32(math.Sin(a))
		}
	}

	for l := 0; l < c.Layers; l++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("forward: cancelled before layer %d: %w", l, err)
		}
		lw, err := m.src.Layer(l)
		if err != nil {
			return fmt.Errorf("forward: layer %d: %w", l, err)
		}
		if m.skip != nil && m.skip[l] {
			// Taken from the source and given back unread, so a streamed
			// source still sees every layer in order.
			m.src.Release(l)
			continue
		}
		if m.cosSum != nil {
			m.sc.hPrev = append(m.sc.hPrev[:0], m.sc.h...)
			for t, h := range m.sc.h {
				if cap(m.sc.prevBuf) < len(m.sc.h)*len(h) {
					m.sc.prevBuf = make([]float32, len(m.sc.h)*len(h))
				}
				p := m.sc.prevBuf[t*len(h) : (t+1)*len(h)]
				copy(p, h)
				m.sc.hPrev[t] = p
			}
		}
		if !m.resident {
			if err := c.checkLayer(l, lw); err != nil {
				m.src.Release(l)
				return fmt.Errorf("forward: layer source: %w", err)
			}
		}
		if c.Fused() {
			m.sc.split = c.SplitFused(lw)
			lw = &m.sc.split
		}
		err = m.layer(ctx, l, lw)
		m.src.Release(l)
		if err != nil {
			return fmt.Errorf("forward: layer %d: %w", l, err)
		}
		if m.cosSum != nil {
			for t, h := range m.sc.h {
				m.cosSum[l] += cosine(m.sc.hPrev[t], h)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forward: cancelled before output: %w", err)
	}
	if hidden != nil {
		hidden(sc.h)
	} else if err := m.output(batch); err != nil {
		return fmt.Errorf("forward: output: %w", err)
	}
	for i := range batch {
		batch[i].Seq.(*Sequence).pos += len(batch[i].Tokens)
	}
	if cap(sc.bufs) > m.keepScratch {
		// A long prefill needed a large activation buffer; do not keep
		// it alive for the decode steps that follow.
		*sc = scratch{}
	}
	return nil
}

// defaultKeptScratch is the largest activation buffer (in float32s, 256
// MiB) a model keeps between passes: a long prefill's buffer is dropped
// rather than held through the decode steps that follow.
const defaultKeptScratch = 64 << 20

// embed writes token id's embedding row, scaled by EmbedScale, to dst.
func (m *Model) embed(dst []float32, id int32) error {
	e := &m.Weights.Embed
	rb := e.rowBytes()
	row := e.Data[int(id)*rb : (int(id)+1)*rb]
	if err := quant.DequantizeRows(e.Type, row, e.Cols, dst); err != nil {
		return fmt.Errorf("embedding of token %d: %w", id, err)
	}
	if s := m.Config.EmbedScale; s != 1 {
		for i := range dst {
			dst[i] *= s
		}
	}
	return nil
}

// norm applies RMSNorm with weight vector w to every row of xs, writing
// the result to ys.
func (m *Model) norm(ys, xs [][]float32, w *Tensor) {
	decodeF32(m.sc.normW, w.Data)
	for t := range xs {
		rmsNorm(ys[t], xs[t], m.sc.normW, m.Config.NormEps)
	}
}

// layer runs transformer block l over the batch held in the scratch.
func (m *Model) layer(ctx context.Context, l int, w *Layer) error {
	c := &m.Config
	sc := &m.sc
	hd := c.HeadDim

	m.norm(sc.xn, sc.h, &w.AttnNorm)
	if err := m.matmul(matOp{w: &w.Q, xs: sc.xn, ys: sc.q, prompt: sc.prompt}, matOp{w: &w.K, xs: sc.xn, ys: sc.k, prompt: sc.prompt}, matOp{w: &w.V, xs: sc.xn, ys: sc.v, prompt: sc.prompt}); err != nil {
		return err
	}
	if c.QKVBias() {
		for _, b := range []struct {
			t  *Tensor
			xs [][]float32
		}{{&w.QBias, sc.q}, {&w.KBias, sc.k}, {&w.VBias, sc.v}} {
			bias := sc.vec[:b.t.Cols]
			decodeF32(bias, b.t.Data)
			for _, x := range b.xs {
				axpy(x, 1, bias)
			}
		}
	}
	var qn, kn []float32
	if c.QKNorm() {
		qn, kn = sc.vec[:hd], sc.vec[hd:2*hd]
		decodeF32(qn, w.QNorm.Data)
		decodeF32(kn, w.KNorm.Data)
	}
	cos, sin := sc.cos, sc.sin
	if m.ropeFreqLocal != nil && c.Sliding(l) {
		cos, sin = sc.cosL, sc.sinL
	}
	rope := ropeInterleaved
	if c.NeoX() {
		rope = ropeNeoX
	}
	for t, tr := range sc.toks {
		for h := 0; h < c.Heads; h++ {
			x := sc.q[t][h*hd : (h+1)*hd]
			if qn != nil {
				rmsNorm(x, x, qn, c.NormEps)
			}
			rope(x, cos[t], sin[t])
		}
		for h := 0; h < c.KVHeads; h++ {
			x := sc.k[t][h*hd : (h+1)*hd]
			if kn != nil {
				rmsNorm(x, x, kn, c.NormEps)
			}
			rope(x, cos[t], sin[t])
		}
		tr.seq.store(l, tr.pos, sc.k[t], sc.v[t])
	}
	if err := m.attention(l); err != nil {
		return err
	}
	if err := m.matmul(matOp{w: &w.O, xs: sc.att, ys: sc.tmp, prompt: sc.prompt}); err != nil {
		return err
	}
	if c.PostNorms() {
		m.norm(sc.tmp, sc.tmp, &w.PostAttnNorm)
	}
	for t := range sc.h {
		axpy(sc.h[t], 1, sc.tmp[t])
	}

	return m.ffn(ctx, l, w)
}

// FFNDevice is the CPU as a second compute device beside a GPU: it runs
// layers' feed-forward blocks for rows of hidden state another device
// brought (engine/gpu's hybrid placement computes a layer's attention on
// the GPU and its FFN here, straight from the layer's pinned host copy).
// It holds no weights, only its scratch; calls are serialised.
type FFNDevice struct{ m *Model }

// NewFFNDevice returns an FFN device for cfg on engine/gemv's impl
// kernels.
func NewFFNDevice(cfg Config, impl gemv.Impl) (*FFNDevice, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ffn device: %w", err)
	}
	return &FFNDevice{&Model{Config: cfg, pool: workpool.Default(), keepScratch: defaultKeptScratch, fast: true, impl: impl, routeCounts: newRouteCounts(&cfg)}}, nil
}

// SetExpertSource makes the device take the experts of MoE layers that
// do not hold their own from src (Model.SetExpertSource).
func (d *FFNDevice) SetExpertSource(src ExpertSource) { d.m.SetExpertSource(src) }

// SetRouterSkew skews the device's routing as Model.SetRouterSkew does:
// a benchmark of a GPU with its experts on the CPU sets it here, where the
// routing runs.
func (d *FFNDevice) SetRouterSkew(s float64) error { return d.m.SetRouterSkew(s) }

// ExpertCounts is Model.ExpertCounts of the device's passes: the routing
// of the FFN blocks it ran (nil for a dense model).
func (d *FFNDevice) ExpertCounts() [][]uint64 { return d.m.ExpertCounts() }

// ExpertBytes is the expert weight bytes the device's FFN blocks have
// read: each picked expert once a block, however many of the block's
// tokens picked it (a split expert's part only). What the CPU's share of
// a GPU's experts moves out of host memory.
func (d *FFNDevice) ExpertBytes() int64 {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	return d.m.expertRead
}

// Run is Model.FFN on the device.
func (d *FFNDevice) Run(ctx context.Context, l int, w *Layer, h [][]float32) error {
	return d.m.FFN(ctx, l, w, h)
}

// ReadAhead makes RunRouted, once a layer's experts are at hand, have
// the device's expert source (a model.ExpertPrefetcher) read ahead those
// of the next layer's predicted experts for which keep(layer, expert)
// holds (the ones the GPU does not hold), as the model's own passes do.
// nil turns it off.
func (d *FFNDevice) ReadAhead(keep func(l, e int) bool) {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	d.m.aheadKeep = keep
}

// RunRouted is Model.FFNRouted on the device: the experts of a routing
// made on the GPU, those keep selects (the ones the GPU does not hold).
func (d *FFNDevice) RunRouted(ctx context.Context, l int, w *Layer, h [][]float32, r Routing, keep func(e int) bool) error {
	return d.m.FFNRouted(ctx, l, w, h, r, keep)
}

// RunRoutedBeside is Model.FFNRoutedBeside on the device: the GPU's
// host thread issues its share of the layer (beside) while the device's
// threads compute the CPU's.
func (d *FFNDevice) RunRoutedBeside(ctx context.Context, l int, w *Layer, h [][]float32, r Routing, keep func(e int) bool, beside func()) error {
	return d.m.FFNRoutedBeside(ctx, l, w, h, r, keep, beside)
}

// FFNLayer names one layer's FFN weights for Rate.
type FFNLayer struct {
	Index int
	W     *Layer
}

// rateBytes is how many weight bytes Rate reads per measurement when the
// layers hold that many: enough that the clock's resolution and one
// worker's late start do not show. rateRounds is how many rounds it is
// timed in.
const (
	rateBytes  = 2 << 30
	rateRounds = 4
)

// Rate measures the device's FFN rate for passes of T rows over ls, in
// weight bytes per second: one warm-up FFN, then the layers in order,
// each once, until rateBytes are read or every layer was; only when all
// of them together are smaller does it go round again. Each layer is
// read once because a streamed pass reads each once: repeating one layer
// would time the last-level cache for any FFN it partly holds. It is the
// CPU's link speed the hybrid planner (engine/tier's PlanHybrid) balances
// against PCIe.
//
// The reads are timed in rateRounds rounds of equal bytes and the fastest
// round is the rate: a model measures at load, beside the load's other
// work and with cores that were idle, and one slow stretch there would
// otherwise set the whole figure. A plan that gives the CPU no layer never
// shows it a faster rate in passes, so a low figure would stay.
func (d *FFNDevice) Rate(ctx context.Context, ls []FFNLayer, T int) (float64, error) {
	if T < 1 {
		return 0, fmt.Errorf("ffn rate: %d rows", T)
	}
	var all int64
	for _, l := range ls {
		all += FFNBytes(l.W)
	}
	if all == 0 {
		return 0, fmt.Errorf("ffn rate: no FFN weights in %d layers", len(ls))
	}
	r := rand.New(rand.NewPCG(uint64(ls[0].Index), uint64(T)))
	h := make([][]float32, T)
	for t := range h {
		h[t] = make([]float32, d.m.Config.Dim)
		for i := range h[t] {
			h[t][i] = float32(r.NormFloat64())
		}
	}
	last := ls[len(ls)-1]
	if err := d.Run(ctx, last.Index, last.W, h); err != nil {
		return 0, fmt.Errorf("ffn rate of layer %d: %w", last.Index, err)
	}
	var bytes int64
	var rs rateTimer
	t0 := time.Now()
	for i := 0; bytes < rateBytes && (i < len(ls) || bytes < rateBytes/8); i++ {
		l := ls[i%len(ls)]
		if err := d.Run(ctx, l.Index, l.W, h); err != nil {
			return 0, fmt.Errorf("ffn rate of layer %d: %w", l.Index, err)
		}
		n := FFNBytes(l.W)
		bytes += n
		now := time.Now()
		rs.add(n, now.Sub(t0))
		t0 = now
	}
	return rs.fastest(), nil
}

// rateTimer groups Rate's reads into rounds of rateBytes/rateRounds
// bytes or more and keeps the fastest round's rate.
type rateTimer struct {
	bytes, best float64 // the open round's bytes; the best closed round's rate
	took        time.Duration
}

// add counts one read of n bytes that took d.
func (r *rateTimer) add(n int64, d time.Duration) {
	r.bytes += float64(n)
	r.took += d
	if r.bytes >= rateBytes/rateRounds {
		r.best = max(r.best, r.bytes/max(r.took.Seconds(), 1e-9))
		r.bytes, r.took = 0, 0
	}
}

// fastest is the best round's rate, or the open round's when none closed
// (layers smaller in all than a round).
func (r *rateTimer) fastest() float64 {
	if r.best > 0 {
		return r.best
	}
	return r.bytes / max(r.took.Seconds(), 1e-9)
}

// FFNBytes is the size of a layer's feed-forward weights (its norms
// included): what the CPU reads to compute it.
func FFNBytes(w *Layer) int64 {
	var n int64
	for _, t := range []*Tensor{&w.FFNNorm, &w.Gate, &w.Up, &w.GateUp, &w.Down, &w.PostFFNNorm} {
		n += int64(len(t.Data))
	}
	return n
}

// AttnBytes is the size of a layer's attention weights (its norms
// included).
func AttnBytes(w *Layer) int64 {
	var n int64
	for _, t := range []*Tensor{&w.AttnNorm, &w.Q, &w.K, &w.V, &w.QKV, &w.QBias, &w.KBias, &w.VBias, &w.QNorm, &w.KNorm, &w.O, &w.PostAttnNorm} {
		n += int64(len(t.Data))
	}
	return n
}

// FFN runs layer l's feed-forward block, with the weights in w (only its
// FFN tensors are read), on the CPU for every row of h (Dim elements
// each), in place: h += FFN(norm(h)), on this model's kernels (UseGEMV or
// the reference). It is safe for concurrent use with Forward (calls are
// serialised).
func (m *Model) FFN(ctx context.Context, l int, w *Layer, h [][]float32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &m.Config
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ffn of layer %d: %w", l, err)
	}
	if l < 0 || l >= c.Layers {
		return fmt.Errorf("ffn of layer %d: outside [0, %d)", l, c.Layers)
	}
	if err := c.checkFFN(l, w); err != nil {
		return fmt.Errorf("ffn: %w", err)
	}
	for t, r := range h {
		if len(r) != c.Dim {
			return fmt.Errorf("ffn of layer %d: row %d has %d elements, the model's width is %d", l, t, len(r), c.Dim)
		}
	}
	if len(h) == 0 {
		return nil
	}
	m.prepare(len(h), 0)
	sc := &m.sc
	for t, r := range h {
		copy(sc.h[t], r)
	}
	if c.Fused() {
		sc.split = c.SplitFused(w)
		w = &sc.split
	}
	if err := m.ffn(ctx, l, w); err != nil {
		return fmt.Errorf("ffn of layer %d: %w", l, err)
	}
	for t, r := range h {
		copy(r, sc.h[t])
	}
	return nil
}

// ffn runs layer w's feed-forward block over the batch in the scratch:
// h += FFN(norm(h)).
func (m *Model) ffn(ctx context.Context, l int, w *Layer) error {
	c := &m.Config
	sc := &m.sc
	gemma := c.PostNorms()
	m.norm(sc.xn, sc.h, &w.FFNNorm)
	if c.MoE() {
		return m.moe(ctx, l, w)
	}
	if err := m.matmul(matOp{w: &w.Gate, xs: sc.xn, ys: sc.gate, prompt: sc.prompt}, matOp{w: &w.Up, xs: sc.xn, ys: sc.up, prompt: sc.prompt}); err != nil {
		return err
	}
	if err := m.matmul(matOp{w: &w.Down, xs: sc.gate, ys: sc.tmp, glu: sc.up, gelu: gemma, prompt: sc.prompt}); err != nil {
		return err
	}
	if gemma {
		m.norm(sc.tmp, sc.tmp, &w.PostFFNNorm)
	}
	for t := range sc.h {
		axpy(sc.h[t], 1, sc.tmp[t])
	}
	return nil
}

// attention computes causal (and, on sliding layers, windowed) attention
// for every token and query head of the batch over each token's own
// sequence cache, writing sc.att: by four-query blocks on the fast path
// (attnblock.go), a (token, head) a work item in the reference.
func (m *Model) attention(l int) error {
	c := &m.Config
	sc := &m.sc
	window := 0
	if c.Sliding(l) {
		window = c.SlidingWindow
	}
	if m.fast {
		return m.blockAttention(l, window)
	}
	// The reference: a query head at a time, in plain loops.
	hd := c.HeadDim
	group := c.Heads / c.KVHeads
	scale, capv := c.AttnScale, c.AttnSoftcap
	sc.attn.size(m.pool.Threads(), hd, 0)
	m.parallel(len(sc.toks)*c.Heads, func(w, i int) {
		t, h := i/c.Heads, i%c.Heads
		tr := sc.toks[t]
		q := sc.q[t][h*hd : (h+1)*hd]
		out := sc.att[t][h*hd : (h+1)*hd]
		g := h / group
		lo := 0
		if window > 0 {
			lo = max(0, tr.pos-window+1)
		}
		n := tr.pos - lo + 1
		s := sc.scores[w][:n]
		key := sc.attn.key[w][:hd]
		for j := range s {
			tr.seq.key(key, l, g, lo+j)
			s[j] = dot(q, key)
		}
		mx := float32(math.Inf(-1))
		for j, v := range s {
			v *= scale
			if capv > 0 {
				v = softcap(v, capv)
			}
			s[j] = v
			mx = max(mx, v)
		}
		var sum float64
		for j, v := range s {
			e := float32(math.Exp(float64(v - mx)))
			s[j] = e
			sum += float64(e)
		}
		inv := float32(1 / sum)
		clear(out)
		for j, e := range s {
			axpy(out, e*inv, tr.seq.value(l, g, lo+j))
		}
	})
	return nil
}

// output normalises the hidden state of every token that needs logits and
// projects it to the vocabulary.
func (m *Model) output(batch []Step) error {
	c := &m.Config
	sc := &m.sc
	sc.outX, sc.outY = sc.outX[:0], sc.outY[:0]
	decodeF32(sc.normW, m.Weights.OutputNorm.Data)
	t0 := 0
	for i := range batch {
		st := &batch[i]
		n := len(st.Tokens)
		first := n - 1
		if st.AllLogits {
			first = 0
		}
		if len(st.Logits) != n-first {
			st.Logits = make([][]float32, n-first)
		}
		for j := range st.Logits {
			if len(st.Logits[j]) != c.Vocab {
				st.Logits[j] = make([]float32, c.Vocab)
			}
			// sc.xn is free after the last layer: reuse it for the
			// normalised hidden states.
			t := t0 + first + j
			rmsNorm(sc.xn[t], sc.h[t], sc.normW, c.NormEps)
			sc.outX = append(sc.outX, sc.xn[t])
			sc.outY = append(sc.outY, st.Logits[j])
		}
		t0 += n
	}
	if err := m.matmul(matOp{w: &m.Weights.Output, xs: sc.outX, ys: sc.outY}); err != nil {
		return err
	}
	if fc := c.FinalSoftcap; fc > 0 {
		for _, y := range sc.outY {
			for i, v := range y {
				y[i] = softcap(v, fc)
			}
		}
	}
	return nil
}

// matOp is one matrix-times-batch product: ys[t] = W xs[t]. With glu
// set, the inputs are first made act(xs[t])·glu[t] in place (act SiLU, or
// GELU-tanh with gelu): a GLU FFN's activation done by the product that
// takes it, where engine/gemv's quantization of the inputs applies it
// piece by piece in the same pass over the cores, rather than a pass of
// its own (one handing out of work and one wait fewer a block, which
// counts in a MoE layer's small products). The activation is
// element-wise, so its bits do not depend on how it is split.
type matOp struct {
	w *Tensor
	// stride, when not 0, is the bytes from one of w's rows to the next:
	// w is a view of the first columns of a wider matrix (a split
	// expert's down), Data running from the first row's start to the
	// last row's end.
	stride int
	xs, ys [][]float32
	glu    [][]float32
	gelu   bool
	// prompt, where it is as long as xs, marks the rows that are prompt
	// tokens (Step.Prompt), which may take the tile path; tiled says an
	// op (one splitPrompt made) takes it.
	prompt []bool
	tiled  bool
}

// rowStride is the bytes from one of op's rows to the next.
func (op *matOp) rowStride() int {
	if op.stride > 0 {
		return op.stride
	}
	return op.w.rowBytes()
}

// activate makes x act(x)·u element by element (matOp's glu).
func activate(x, u []float32, gelu bool) {
	u = u[:len(x)]
	if gelu {
		for i := range x {
			x[i] = geluTanh(x[i]) * u[i]
		}
		return
	}
	for i := range x {
		x[i] = silu(x[i]) * u[i]
	}
}

// chunk is a range of rows of one matOp.
type chunk struct{ op, lo, hi int }

// matmul computes all ops, splitting their rows into chunks shared out
// across the pool. Every row is decoded once and dotted with all tokens.
// Shapes are validated before a pass, so an error here means a kernel
// rejected its input; the first one is returned.
func (m *Model) matmul(ops ...matOp) error {
	if m.fast {
		return m.matmulGEMV(ops)
	}
	// The reference activates its inputs in a pass of their own, in
	// pieces of 1024 across the pool: on one core it would cost as much
	// as a fifth of a decode step's matrix products.
	for _, op := range ops {
		if op.glu == nil {
			continue
		}
		const piece = 1024
		per := 0
		for _, x := range op.xs {
			per = max(per, (len(x)+piece-1)/piece)
		}
		m.parallel(len(op.xs)*per, func(_, i int) {
			x := op.xs[i/per]
			if lo := (i % per) * piece; lo < len(x) {
				hi := min(lo+piece, len(x))
				activate(x[lo:hi], op.glu[i/per][lo:hi], op.gelu)
			}
		})
	}
	return m.eachChunk(ops, func(oi int, rows []byte, ys [][]float32) error {
		op := &ops[oi]
		if op.stride == 0 {
			return quant.DotRowsBatch(op.w.Type, rows, op.w.Cols, op.xs, ys)
		}
		// A view's rows one at a time: the reference takes packed rows.
		rb, st := op.w.rowBytes(), op.rowStride()
		one := make([][]float32, len(ys))
		for r := range ys[0] {
			for j := range ys {
				one[j] = ys[j][r : r+1]
			}
			if err := quant.DotRowsBatch(op.w.Type, rows[r*st:r*st+rb], op.w.Cols, op.xs, one); err != nil {
				return err
			}
		}
		return nil
	})
}

// eachChunk shares every op's rows out across the pool (splitRows) and
// calls product for each chunk: its op's index, its rows' bytes and the
// outputs' slices for them. It returns the first error, naming the tensor
// and rows.
func (m *Model) eachChunk(ops []matOp, product func(oi int, rows []byte, ys [][]float32) error) error {
	sc := &m.sc
	m.splitRows(ops)
	var first firstError
	m.parallelProducts(len(sc.chunks), func(w, i int) {
		ch := sc.chunks[i]
		op := &ops[ch.op]
		ys := sc.ysub[w][:len(op.ys)]
		for j := range ys {
			ys[j] = op.ys[j][ch.lo:ch.hi]
		}
		rb, st := op.w.rowBytes(), op.rowStride()
		if err := product(ch.op, op.w.Data[ch.lo*st:(ch.hi-1)*st+rb], ys); err != nil {
			first.set(fmt.Errorf("tensor %s rows [%d, %d): %w", op.w.Name, ch.lo, ch.hi, err))
		}
	})
	return first.get()
}

// splitPrompt returns ops with each op that has prompt rows
// (matOp.prompt) in a format the tile path takes split in two: one over
// the prompt rows, marked tiled, and one over the others (where there are
// any). Every prompt row takes the tile path, however few there are, so
// its results do not depend on how its prompt was split or batched
// (Step.Prompt). The split ops' rows live in the scratch until the next
// call.
func (m *Model) splitPrompt(ops []matOp) []matOp {
	if !slices.ContainsFunc(ops, func(op matOp) bool { return m.tileable(&op) }) {
		return ops
	}
	sc := &m.sc
	sc.splitOps, sc.gathered = sc.splitOps[:0], sc.gathered[:0]
	// gather returns rows' entries whose prompt mark is want, from the
	// gathered buffer (the same rows give the same entries, so ops that
	// share an input still share its quantization).
	gather := func(rows [][]float32, mark []bool, want bool) [][]float32 {
		if rows == nil {
			return nil
		}
		at := len(sc.gathered)
		for t, r := range rows {
			if mark[t] == want {
				sc.gathered = append(sc.gathered, r)
			}
		}
		return sc.gathered[at:len(sc.gathered):len(sc.gathered)]
	}
	for i := range ops {
		op := ops[i]
		if !m.tileable(&op) {
			sc.splitOps = append(sc.splitOps, op)
			continue
		}
		p := op
		p.xs, p.ys, p.glu, p.tiled = gather(op.xs, op.prompt, true), gather(op.ys, op.prompt, true), gather(op.glu, op.prompt, true), true
		sc.splitOps = append(sc.splitOps, p)
		if len(p.xs) < len(op.xs) {
			d := op
			d.xs, d.ys, d.glu = gather(op.xs, op.prompt, false), gather(op.ys, op.prompt, false), gather(op.glu, op.prompt, false)
			sc.splitOps = append(sc.splitOps, d)
		}
	}
	return sc.splitOps
}

// tileable reports whether op's prompt rows take the tile path: it has
// some (marked for its rows), in a format the tile path takes, on rows of
// whole tiles.
func (m *Model) tileable(op *matOp) bool {
	if len(op.prompt) != len(op.xs) || !slices.Contains(op.prompt, true) {
		return false
	}
	return op.stride == 0 && op.w.Cols%gemv.TileCols == 0 && gemv.Tiled(m.impl, op.w.Type)
}

// A chunk's work is its weights' elements times the vectors they meet.
// A chunk costs more than its work: handing it out, the kernel's start on
// its rows, the hardware prefetchers' start on a new run of memory. A
// mixture-of-experts step is dozens of small matrices (a Qwen3-30B-A3B
// expert's gate is 768 rows of 2048), whose chunks at minChunkWork read
// 18 KB each, and spend a good part of their time on those costs: sized
// by the step's work instead, up to maxChunkWork while every worker still
// gets chunksPerWorker of them (BenchmarkMoEFFN's third/T8 and
// BenchmarkMoEFFNGap's batch8 measure it). A large matrix keeps sixteen
// chunks a worker whatever these say (splitRows).
const (
	minChunkWork    = 1 << 15
	maxChunkWork    = 1 << 19
	chunksPerWorker = 8
)

// splitRows shares out every op's rows as chunks: many per worker for
// balance, each large enough that its fixed costs stay small.
func (m *Model) splitRows(ops []matOp) {
	sc := &m.sc
	sc.chunks = sc.chunks[:0]
	nw := m.pool.Workers()
	work := 0
	for oi := range ops {
		work += ops[oi].w.Rows * ops[oi].w.Cols * max(1, len(ops[oi].xs))
	}
	target := min(maxChunkWork, max(minChunkWork, work/(chunksPerWorker*nw)))
	for oi := range ops {
		op := &ops[oi]
		rows := op.w.Rows
		// Sixteen chunks a worker keep a large op's tail short (a core
		// that finishes early takes another), while each chunk stays
		// large enough that its fixed costs stay small.
		minRows := max(1, target/max(1, op.w.Cols*len(op.xs)))
		cs := max(minRows, (rows+16*nw-1)/(16*nw))
		if op.tiled {
			// The tile path computes panels of gemv.TileRows rows: a
			// chunk of whole panels leaves none part empty.
			cs = (cs + gemv.TileRows - 1) / gemv.TileRows * gemv.TileRows
		}
		for lo := 0; lo < rows; lo += cs {
			sc.chunks = append(sc.chunks, chunk{oi, lo, min(lo+cs, rows)})
		}
	}
}

// matmulGEMV is matmul on engine/gemv's kernels: each distinct input is
// quantized once (every token's vector, across the pool), then the rows
// are shared out as in matmul, each chunk read from memory once for the
// whole batch.
func (m *Model) matmulGEMV(ops []matOp) error {
	sc := &m.sc
	ops = m.splitPrompt(ops)
	// Ops that share an input (q, k and v; gate and up; an expert's gate
	// and up) share its quantization, and its activation (glu) is applied
	// once.
	sc.inputs, sc.which, sc.inputOp = sc.inputs[:0], sc.which[:0], sc.inputOp[:0]
	for oi := range ops {
		k := 0
		for ; k < len(sc.inputs); k++ {
			if sameRows(sc.inputs[k], ops[oi].xs) {
				break
			}
		}
		if k == len(sc.inputs) {
			sc.inputs, sc.inputOp = append(sc.inputs, ops[oi].xs), append(sc.inputOp, oi)
		}
		sc.which = append(sc.which, k)
	}
	inputs, which, ni := sc.inputs, sc.which, len(sc.inputs)
	// Inputs may differ in length (a MoE block's experts each take the
	// tokens routed to them): each gets its own run of quantized vectors.
	n := 0
	for _, in := range inputs {
		n += len(in)
	}
	for len(sc.xqBuf) < n {
		sc.xqBuf = append(sc.xqBuf, new(gemv.X))
	}
	sc.xq = sc.xq[:0]
	sc.xqAt = sc.xqAt[:0]
	n = 0
	for k := 0; k < ni; k++ {
		sc.xq = append(sc.xq, sc.xqBuf[n:n+len(inputs[k])])
		for t := range inputs[k] {
			sc.xqAt = append(sc.xqAt, [2]int{k, t})
		}
		n += len(inputs[k])
	}
	var first firstError
	fail := first.set
	// The prompt rows' ops take the tile path (splitPrompt); their input
	// is laid out for the tiles as it is quantized.
	for len(sc.tiles) < ni {
		sc.tiles = append(sc.tiles, gemv.Tiles{})
	}
	sc.inTiled = slices.Grow(sc.inTiled[:0], ni)[:ni]
	clear(sc.inTiled)
	// onlyTiled[k]: every op taking input k is tiled, so its integer
	// quantization is never read.
	sc.onlyTiled = slices.Grow(sc.onlyTiled[:0], ni)[:ni]
	for k := range sc.onlyTiled {
		sc.onlyTiled[k] = true
	}
	for oi := range ops {
		op, k := &ops[oi], which[oi]
		sc.onlyTiled[k] = sc.onlyTiled[k] && op.tiled
		if op.tiled && !sc.inTiled[k] {
			if err := sc.tiles[k].Size(len(inputs[k]), op.w.Cols); err != nil {
				return err
			}
			sc.inTiled[k] = true
		}
	}
	// Each vector is quantized in pieces of setBlocks blocks across the
	// pool: one core would take a tenth of a decode step's GEMV time on
	// the FFN's wide input.
	const setBlocks = 8
	per := 0
	for k := 0; k < ni; k++ {
		for t := range inputs[k] {
			sc.xq[k][t].Size(len(inputs[k][t]))
			per = max(per, (sc.xq[k][t].Blocks()+setBlocks-1)/setBlocks)
		}
	}
	m.parallel(n*per, func(_, i int) {
		at, p := sc.xqAt[i/per], i%per
		k, t := at[0], at[1]
		x := sc.xq[k][t]
		if b0 := p * setBlocks; b0 < x.Blocks() {
			b1 := min(b0+setBlocks, x.Blocks())
			v := inputs[k][t]
			if op := &ops[sc.inputOp[k]]; op.glu != nil {
				if lo, hi := b0*gemv.Block, min(b1*gemv.Block, len(v)); lo < hi {
					act := gemv.SwiGLU
					if op.gelu {
						act = gemv.GeGLU
					}
					if err := act(m.impl, v[lo:hi], op.glu[t][lo:hi]); err != nil {
						fail(err)
						return
					}
				}
			}
			if !sc.onlyTiled[k] {
				if err := x.SetBlocks(v, b0, b1); err != nil {
					fail(err)
					return
				}
			}
			if sc.inTiled[k] {
				if err := sc.tiles[k].SetBlocks(t, v, b0, b1); err != nil {
					fail(err)
				}
			}
		}
	})
	if err := first.get(); err != nil {
		return err
	}
	// A batch whose weights a multi-vector kernel takes is packed once
	// for every chunk of every op that reads it: the kernel widens each
	// block's weights once for four vectors.
	for len(sc.packed) < ni {
		sc.packed = append(sc.packed, gemv.Packed{})
	}
	sc.inPacked = slices.Grow(sc.inPacked[:0], ni)[:ni]
	clear(sc.inPacked)
	for oi := range ops {
		if k := which[oi]; !ops[oi].tiled && !sc.inPacked[k] && gemv.Worth(len(inputs[k])) && gemv.Packs(m.impl, ops[oi].w.Type) {
			if err := sc.packed[k].PackWith(sc.xq[k], m.parallelItems); err != nil {
				return err
			}
			sc.inPacked[k] = true
		}
	}
	return m.eachChunk(ops, func(oi int, rows []byte, ys [][]float32) error {
		op := &ops[oi]
		if op.tiled {
			return gemv.RowsTiled(m.impl, op.w.Type, rows, op.rowStride(), op.w.Cols, &sc.tiles[which[oi]], ys)
		}
		if k := which[oi]; sc.inPacked[k] {
			return gemv.RowsPacked(m.impl, op.w.Type, rows, op.rowStride(), op.w.Cols, &sc.packed[k], ys)
		}
		if op.stride != 0 {
			return gemv.RowsBatchStride(m.impl, op.w.Type, rows, op.stride, op.w.Cols, sc.xq[which[oi]], ys)
		}
		return gemv.RowsBatch(m.impl, op.w.Type, rows, op.w.Cols, sc.xq[which[oi]], ys)
	})
}
