package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-llm/strata/engine/gemv"
)

// The fast path's attention runs by blocks of four queries of one
// key-value head (engine/gemv's Scores4, Softmax and Mix4) straight from
// the cache's pages (kvcache.go), a page a call: each key strip and
// value row is read once for four queries, and the softmax runs in
// vectors. A decode token's block is its heads of one group (a query
// group of eight takes two blocks, of two or one a block padded with
// copies); a step of several tokens (a prompt, a verify pass) fills
// blocks across its tokens.
//
// A query's output does not depend on its block or on the keys the block
// spans past its own (gemv's attn.go): its scores are its own sums; its
// softmax runs over the positions from its window's start rounded down to
// a multiple of gemv.SoftmaxBlock to its own rounded up, those outside its
// window set to −Inf, so the vectors' lanes fall on the same positions
// whatever the block; and its mix adds the probability 0 for every other
// key of the block, which changes no bit. So a token's results do not
// depend on the batch, on how a prompt was split into steps, or on
// whether its step was a prompt.

// A long context's keys are taken in spans of attnSpan positions (at
// multiples of it): each span's scores get a softmax of their own, its
// values are mixed by it, and a query's spans merge by their softmaxes'
// largest scores and sums in span order (mergeSpans). A decode step has
// only KVHeads·⌈group/4⌉ blocks a layer (8 for a llama 8b), fewer than a
// many-core host's threads; spans make a block's work several items, so
// every thread reads the cache at long contexts. A query's spans are set
// by its own positions alone, so its bits do not depend on how its spans
// were shared out: a step of few blocks makes each (block, span) an item
// and merges after them; a step of many blocks (a prompt) takes a block
// an item, its spans in turn.
const attnSpan = 4 * pagePositions

// attnRun is a run of a pass's tokens of one sequence, [t0, t1) of the
// pass's tokens, whose queries see positions from kb (a multiple of
// gemv.KeyBlock) on, keys of them scored (whole key blocks); per is its
// blocks of four queries a key-value head, sp0 its first span and spans
// how many its keys reach, items its work items.
type attnRun struct {
	t0, t1   int
	kb, keys int
	per      int
	sp0      int
	spans    int
	items    int
}

// attnScratch is the attention's scratch: the pass's runs and its span
// length (attnSpan; tests shorten it), per worker a block's interleaved
// queries and score rows, its spans' outputs, largest scores and sums
// (spanOut, spanMax, spanSum), and the reference's key (gathered from its
// strip); and where spans are items (split), every item's span results.
type attnScratch struct {
	span             int
	runs             []attnRun
	q, s, key        [][]float32
	spanOut, spanMax [][]float32
	spanSum          [][]float64
	itemOut, itemMax []float32
	itemSum          []float64
}

// size makes each worker's scratch hold heads of hd, four score rows of
// as.span (0 in the reference, which keeps none) and a block's spans (at
// most spans of them).
func (as *attnScratch) size(workers, hd, spans int) {
	if len(as.q) != workers {
		as.q, as.s, as.key = make([][]float32, workers), make([][]float32, workers), make([][]float32, workers)
		as.spanOut, as.spanMax, as.spanSum = make([][]float32, workers), make([][]float32, workers), make([][]float64, workers)
	}
	for w := range workers {
		if len(as.q[w]) < 4*hd {
			as.q[w], as.key[w] = make([]float32, 4*hd), make([]float32, hd)
		}
		if len(as.s[w]) < 4*as.span {
			as.s[w] = make([]float32, 4*as.span)
		}
		if len(as.spanOut[w]) < spans*4*hd {
			as.spanOut[w] = make([]float32, spans*4*hd)
		}
		if len(as.spanMax[w]) < spans*4 {
			as.spanMax[w], as.spanSum[w] = make([]float32, spans*4), make([]float64, spans*4)
		}
	}
}

// blockAttention writes the attention output (sc.att) of every token of
// the pass for layer l, whose keys and values are in the cache; window is
// the layer's sliding window (0: none).
func (m *Model) blockAttention(l, window int) error {
	c := &m.Config
	sc := &m.sc
	as := &sc.attn
	hd := c.HeadDim
	group := c.Heads / c.KVHeads
	scale, capv := c.AttnScale, c.AttnSoftcap
	lo := func(pos int) int {
		if window > 0 {
			return max(0, pos-window+1)
		}
		return 0
	}
	roundUp := func(x, b int) int { return (x + b - 1) / b * b }
	if as.span == 0 {
		as.span = attnSpan
	}
	S := as.span
	as.runs = as.runs[:0]
	blocks, maxSpans := 0, 0
	for t := 0; t < len(sc.toks); {
		u := t + 1
		for u < len(sc.toks) && sc.toks[u].seq == sc.toks[t].seq {
			u++
		}
		kb := lo(sc.toks[t].pos) / gemv.KeyBlock * gemv.KeyBlock
		keys := roundUp(sc.toks[u-1].pos+1-kb, gemv.KeyBlock)
		r := attnRun{t0: t, t1: u, kb: kb, keys: keys, per: ((u-t)*group + 3) / 4, sp0: kb / S}
		r.spans = (kb+keys-1)/S - r.sp0 + 1
		as.runs = append(as.runs, r)
		maxSpans = max(maxSpans, r.spans)
		blocks += c.KVHeads * r.per
		t = u
	}
	// Spans are items of their own where blocks are too few to keep
	// every thread busy for long.
	split := maxSpans > 1 && blocks < 4*m.pool.Workers()
	items := 0
	for k := range as.runs {
		r := &as.runs[k]
		r.items = c.KVHeads * r.per
		if split {
			r.items *= r.spans
		}
		items += r.items
	}
	if split {
		as.size(m.pool.Threads(), hd, 1)
		as.itemOut = slices.Grow(as.itemOut[:0], items*4*hd)[:items*4*hd]
		as.itemMax = slices.Grow(as.itemMax[:0], items*4)[:items*4]
		as.itemSum = slices.Grow(as.itemSum[:0], items*4)[:items*4]
	} else {
		as.size(m.pool.Threads(), hd, maxSpans)
	}
	// find is item i's run, block (head g, block b of it) and span, and
	// the item's index within the pass.
	find := func(i int) (r *attnRun, g, b, sp int) {
		for k := range as.runs {
			r = &as.runs[k]
			if i >= r.items {
				i -= r.items
				continue
			}
			break
		}
		if split {
			i, sp = i/r.spans, i%r.spans
		}
		return r, i / r.per, i % r.per, sp
	}
	var first firstError
	fail := first.set
	negInf := float32(math.Inf(-1))
	// block is block (r, g, b)'s tokens and heads; a short block repeats
	// its last query.
	block := func(r *attnRun, g, b int) (ts, hs [4]int) {
		count := (r.t1 - r.t0) * group
		for k := range 4 {
			qi := min(4*b+k, count-1)
			ts[k], hs[k] = r.t0+qi/group, g*group+qi%group
		}
		return ts, hs
	}
	// queries interleaves the queries of ts and hs into w's scratch.
	queries := func(w int, ts, hs [4]int) {
		qp := as.q[w]
		for k := range 4 {
			for d, x := range sc.q[ts[k]][hs[k]*hd : (hs[k]+1)*hd] {
				qp[4*d+k] = x
			}
		}
	}
	// span computes span sp (of r's) of block (r, g) for the queries in
	// w's scratch: out gets each query's output over the span (its
	// softmax over the span's keys in its window), mx and sum its
	// softmax's largest score and sum, sum 0 where the span holds none
	// of its keys.
	span := func(w int, r *attnRun, g int, ts [4]int, sp int, out, mx []float32, sum []float64) error {
		seq := sc.toks[r.t0].seq
		a := max(r.kb, (r.sp0+sp)*S)
		n := min(r.kb+r.keys, (r.sp0+sp+1)*S) - a
		// The positions [from, to) of each query in the span, and how far
		// the block's queries reach into it.
		var from, to [4]int
		reach := 0
		for k := range 4 {
			pos := sc.toks[ts[k]].pos
			from[k], to[k] = max(lo(pos)-a, 0), min(pos+1-a, n)
			if from[k] < to[k] {
				reach = max(reach, to[k])
			} else {
				sum[k] = 0
			}
		}
		if reach == 0 {
			return nil
		}
		s := as.s[w][:4*n]
		for j := 0; j < reach; j += pagePositions {
			keys := seq.kPage(l, (a+j)/pagePositions, g)
			if err := gemv.Scores4(m.impl, as.q[w], hd, keys, gemv.KeyLanes, gemv.KeyLanes*hd, pagePositions, s[j:], n); err != nil {
				return fmt.Errorf("layer %d scores: %w", l, err)
			}
		}
		for k := range 4 {
			row := s[k*n : (k+1)*n]
			if from[k] >= to[k] {
				clear(row[:reach])
				continue
			}
			// The softmax's lanes start and end on multiples of
			// gemv.SoftmaxBlock, which span edges are too.
			z := roundUp(to[k], gemv.SoftmaxBlock)
			a16 := from[k] / gemv.SoftmaxBlock * gemv.SoftmaxBlock
			sm := scale
			if capv > 0 {
				// Gemma 2's soft-cap (a tanh) before the softmax, which
				// then takes the capped scores as they are.
				for j := from[k]; j < to[k]; j++ {
					row[j] = softcap(row[j]*scale, capv)
				}
				sm = 1
			}
			for j := a16; j < from[k]; j++ {
				row[j] = negInf
			}
			for j := to[k]; j < z; j++ {
				row[j] = negInf
			}
			var err error
			if mx[k], sum[k], err = gemv.Softmax(m.impl, row[a16:z], sm); err != nil {
				return fmt.Errorf("layer %d softmax: %w", l, err)
			}
			clear(row[:a16])
			if z < reach {
				clear(row[z:reach])
			}
		}
		// A page of values a call, each continuing the sums.
		for j := 0; j < reach; j += pagePositions {
			vals := seq.vPage(l, (a+j)/pagePositions, g)
			if err := gemv.Mix4(m.impl, s[j:], n, vals, hd, min(pagePositions, reach-j), hd, out, j > 0); err != nil {
				return fmt.Errorf("layer %d values: %w", l, err)
			}
		}
		return nil
	}
	// merge writes block (r, g, b)'s outputs from its spans' results.
	merge := func(r *attnRun, ts, hs [4]int, b, spans int, out, mx []float32, sum []float64) {
		count := (r.t1 - r.t0) * group
		for k := range 4 {
			if 4*b+k >= count {
				break
			}
			mergeSpans(sc.att[ts[k]][hs[k]*hd:(hs[k]+1)*hd], k, spans, out, mx, sum)
		}
	}
	m.parallel(items, func(w, i int) {
		r, g, b, sp := find(i)
		ts, hs := block(r, g, b)
		queries(w, ts, hs)
		if split {
			if err := span(w, r, g, ts, sp, as.itemOut[i*4*hd:(i+1)*4*hd], as.itemMax[i*4:(i+1)*4], as.itemSum[i*4:(i+1)*4]); err != nil {
				fail(err)
			}
			return
		}
		out, mx, sum := as.spanOut[w], as.spanMax[w], as.spanSum[w]
		for sp := range r.spans {
			if err := span(w, r, g, ts, sp, out[sp*4*hd:(sp+1)*4*hd], mx[sp*4:(sp+1)*4], sum[sp*4:(sp+1)*4]); err != nil {
				fail(err)
				return
			}
		}
		merge(r, ts, hs, b, r.spans, out, mx, sum)
	})
	if err := first.get(); err != nil || !split {
		return err
	}
	// A block's span items are consecutive: merge each block's.
	m.parallel(blocks, func(w, i int) {
		base := 0 // the run's first item
		for k := range as.runs {
			r := &as.runs[k]
			if n := c.KVHeads * r.per; i >= n {
				i -= n
				base += r.items
				continue
			}
			item := base + i*r.spans
			ts, hs := block(r, i/r.per, i%r.per)
			merge(r, ts, hs, i%r.per, r.spans, as.itemOut[item*4*hd:], as.itemMax[item*4:], as.itemSum[item*4:])
			return
		}
	})
	return nil
}

// mergeSpans sets dst to query k's attention output from its spans'
// results (out: a span's four outputs of len(dst) after another; mx and
// sum: each span's four softmax maxima and sums): each span whose sum is
// not 0 weighs sum·e^(its max − the largest) over those weights' total,
// added in span order. A query of one span takes its output as it is.
func mergeSpans(dst []float32, k, spans int, out, mx []float32, sum []float64) {
	hd := len(dst)
	top, n, last := float32(math.Inf(-1)), 0, 0
	for sp := range spans {
		if sum[sp*4+k] != 0 {
			top, n, last = max(top, mx[sp*4+k]), n+1, sp
		}
	}
	if n == 1 {
		copy(dst, out[(last*4+k)*hd:(last*4+k+1)*hd])
		return
	}
	weight := func(sp int) float64 { return sum[sp*4+k] * math.Exp(float64(mx[sp*4+k]-top)) }
	var total float64
	for sp := range spans {
		if sum[sp*4+k] != 0 {
			total += weight(sp)
		}
	}
	clear(dst)
	for sp := range spans {
		if sum[sp*4+k] != 0 {
			axpy(dst, float32(weight(sp)/total), out[(sp*4+k)*hd:(sp*4+k+1)*hd])
		}
	}
}
