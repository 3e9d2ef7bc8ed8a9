package model

import (
	"fmt"
	"math"

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

// attnRun is a run of a pass's tokens of one sequence, [t0, t1) of the
// pass's tokens, whose queries see positions from kb (a multiple of
// gemv.KeyBlock) on, keys of them scored (whole key blocks); per is its
// blocks of four queries a key-value head.
type attnRun struct {
	t0, t1   int
	kb, keys int
	per      int
}

// attnScratch is the attention's scratch: the pass's runs, and per worker
// a block's interleaved queries, score rows and outputs, and the
// reference's key (gathered from its strip).
type attnScratch struct {
	runs           []attnRun
	q, s, out, key [][]float32
}

// size makes each worker's scratch hold heads of hd and score rows of
// keys.
func (as *attnScratch) size(workers, hd, keys int) {
	if len(as.q) != workers {
		as.q, as.s, as.out, as.key = make([][]float32, workers), make([][]float32, workers), make([][]float32, workers), make([][]float32, workers)
	}
	for w := range workers {
		if len(as.q[w]) < 4*hd {
			as.q[w], as.out[w], as.key[w] = make([]float32, 4*hd), make([]float32, 4*hd), make([]float32, hd)
		}
		if len(as.s[w]) < 4*keys {
			as.s[w] = make([]float32, 4*keys)
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
	as.runs = as.runs[:0]
	maxKeys, blocks := 0, 0
	for t := 0; t < len(sc.toks); {
		u := t + 1
		for u < len(sc.toks) && sc.toks[u].seq == sc.toks[t].seq {
			u++
		}
		kb := lo(sc.toks[t].pos) / gemv.KeyBlock * gemv.KeyBlock
		keys := roundUp(sc.toks[u-1].pos+1-kb, gemv.KeyBlock)
		r := attnRun{t0: t, t1: u, kb: kb, keys: keys, per: ((u-t)*group + 3) / 4}
		as.runs = append(as.runs, r)
		maxKeys = max(maxKeys, keys)
		blocks += c.KVHeads * r.per
		t = u
	}
	as.size(m.pool.Threads(), hd, maxKeys)
	var first firstError
	fail := first.set
	negInf := float32(math.Inf(-1))
	m.parallel(blocks, func(w, i int) {
		// Item i: a run's blocks, head after head.
		var r *attnRun
		for k := range as.runs {
			r = &as.runs[k]
			if n := c.KVHeads * r.per; i >= n {
				i -= n
				continue
			}
			break
		}
		count := (r.t1 - r.t0) * group
		g, b := i/r.per, i%r.per
		seq := sc.toks[r.t0].seq
		qp, s, out := as.q[w], as.s[w][:4*r.keys], as.out[w]
		var ts, hs [4]int
		for k := range 4 {
			qi := min(4*b+k, count-1) // a short block repeats its last query
			ts[k], hs[k] = r.t0+qi/group, g*group+qi%group
			for d, x := range sc.q[ts[k]][hs[k]*hd : (hs[k]+1)*hd] {
				qp[4*d+k] = x
			}
		}
		// A page of keys a call: each is one block of scores.
		p0 := r.kb / pagePositions
		for j := 0; j < r.keys; j += pagePositions {
			keys := seq.kPage(l, p0+j/pagePositions, g)
			if err := gemv.Scores4(m.impl, qp, hd, keys, gemv.KeyLanes, gemv.KeyLanes*hd, pagePositions, s[j:], r.keys); err != nil {
				fail(fmt.Errorf("layer %d scores: %w", l, err))
				return
			}
		}
		mix := 0
		for k := range 4 {
			mix = max(mix, sc.toks[ts[k]].pos+1-r.kb)
		}
		for k := range 4 {
			pos := sc.toks[ts[k]].pos
			from, to := lo(pos)-r.kb, pos+1-r.kb
			a := from / gemv.SoftmaxBlock * gemv.SoftmaxBlock
			z := roundUp(to, gemv.SoftmaxBlock)
			row := s[k*r.keys : (k+1)*r.keys]
			sm := scale
			if capv > 0 {
				// Gemma 2's soft-cap (a tanh) before the softmax, which
				// then takes the capped scores as they are.
				for j := from; j < to; j++ {
					row[j] = softcap(row[j]*scale, capv)
				}
				sm = 1
			}
			for j := a; j < from; j++ {
				row[j] = negInf
			}
			for j := to; j < z; j++ {
				row[j] = negInf
			}
			if err := gemv.Softmax(m.impl, row[a:z], sm); err != nil {
				fail(fmt.Errorf("layer %d softmax: %w", l, err))
				return
			}
			clear(row[:a])
			if z < mix {
				clear(row[z:mix])
			}
		}
		// A page of values a call, each continuing the sums.
		for j := 0; j < mix; j += pagePositions {
			vals := seq.vPage(l, p0+j/pagePositions, g)
			if err := gemv.Mix4(m.impl, s[j:], r.keys, vals, hd, min(pagePositions, mix-j), hd, out, j > 0); err != nil {
				fail(fmt.Errorf("layer %d values: %w", l, err))
				return
			}
		}
		for k := range 4 {
			if 4*b+k >= count {
				break
			}
			copy(sc.att[ts[k]][hs[k]*hd:(hs[k]+1)*hd], out[k*hd:(k+1)*hd])
		}
	})
	return first.get()
}
