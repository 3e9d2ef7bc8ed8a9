package model

import (
	"fmt"
	"math"
	"sync"

	"github.com/strata-llm/strata/engine/gemv"
)

// A prompt's attention on the fast path runs by blocks of four queries
// of one key-value head (engine/gemv's Scores4, Softmax and Mix4): the
// head's keys are laid out transposed once per run of prompt tokens and
// read by every block, each value row is read once for four queries, and
// the softmax runs in vectors. One query a call (DotRows, AddRows), a
// long prompt's attention grows with the square of its length and comes
// to take most of a prefill.
//
// A query's output does not depend on its block or on the run's span
// (gemv's attn.go): its scores are its own sums; its softmax runs over
// the positions from its window's start rounded down to a multiple of
// gemv.SoftmaxBlock to its own rounded up, the ones outside its window
// set to −Inf, so the vectors' lanes fall on the same positions whatever
// the run; and its mix adds the probability 0 for every other key of the
// block, which changes no bit. So a prompt token's results are the same
// whole, in pieces or batched (Step.Prompt); decode tokens keep DotRows
// and AddRows.

// attnRun is a run of a pass's prompt tokens of one sequence, [t0, t1) of
// the pass's tokens: the keys [kb, kb+keys) its queries see, transposed
// into panel columns of width (per key-value head in turn).
type attnRun struct {
	t0, t1         int
	kb, keys       int
	width, panelAt int
}

// attnPiece is how many keys one transposing call of a run's panel
// takes: a long context's panel is shared out across the pool.
const attnPiece = 512

// attnScratch is the prompt attention's scratch: the runs, the panels
// (one key-value head's at a time), and per worker a block's interleaved
// queries, score rows and outputs.
type attnScratch struct {
	runs      []attnRun
	panel     []float32
	q, s, out [][]float32
	// rest lists the pass's tokens the per-head loop takes.
	rest []int
}

// blockAttention reports whether layer l's prompt tokens take the
// four-query blocks: the fast path, heads the kernels take, no soft-cap
// of the scores (Gemma 2's takes a tanh the softmax kernel lacks).
func (m *Model) blockAttention() bool {
	c := &m.Config
	if !m.fast || c.AttnSoftcap > 0 || !gemv.AttnBlock(m.impl, c.HeadDim) {
		return false
	}
	for _, p := range m.sc.prompt {
		if p {
			return true
		}
	}
	return false
}

// promptAttention writes the attention output (sc.att) of every prompt
// token of the pass for layer l, whose keys and values are in the cache;
// window is the layer's sliding window (0: none).
func (m *Model) promptAttention(l, window int) error {
	c := &m.Config
	sc := &m.sc
	as := &sc.attn
	hd, kvd := c.HeadDim, c.KVDim()
	group := c.Heads / c.KVHeads
	lo := func(pos int) int {
		if window > 0 {
			return max(0, pos-window+1)
		}
		return 0
	}
	roundUp := func(x, b int) int { return (x + b - 1) / b * b }
	as.runs = as.runs[:0]
	panel, maxWidth, blocks, pieces := 0, 0, 0, 0
	for t := 0; t < len(sc.toks); {
		if !sc.prompt[t] {
			t++
			continue
		}
		u := t + 1
		for u < len(sc.toks) && sc.prompt[u] && sc.toks[u].seq == sc.toks[t].seq {
			u++
		}
		kb := lo(sc.toks[t].pos) / gemv.SoftmaxBlock * gemv.SoftmaxBlock
		keys := sc.toks[u-1].pos + 1 - kb
		r := attnRun{t0: t, t1: u, kb: kb, keys: keys, width: roundUp(keys, gemv.KeyBlock), panelAt: panel}
		as.runs = append(as.runs, r)
		panel += hd * r.width
		maxWidth = max(maxWidth, r.width)
		blocks += ((u-t)*group + 3) / 4
		pieces += (keys + attnPiece - 1) / attnPiece
		t = u
	}
	if len(as.panel) < panel {
		as.panel = make([]float32, panel)
	}
	nw := m.pool.Threads()
	if len(as.q) != nw {
		as.q, as.s, as.out = make([][]float32, nw), make([][]float32, nw), make([][]float32, nw)
	}
	for w := range nw {
		if len(as.q[w]) < 4*hd {
			as.q[w], as.out[w] = make([]float32, 4*hd), make([]float32, 4*hd)
		}
		if len(as.s[w]) < 4*maxWidth {
			as.s[w] = make([]float32, 4*maxWidth)
		}
	}
	var errMu sync.Mutex
	var first error
	fail := func(err error) {
		errMu.Lock()
		if first == nil {
			first = err
		}
		errMu.Unlock()
	}
	// locate maps item i of n per run (pieces or blocks, counted by per)
	// to its run and its index there.
	locate := func(i int, per func(r *attnRun) int) (*attnRun, int) {
		for k := range as.runs {
			r := &as.runs[k]
			if n := per(r); i < n {
				return r, i
			} else {
				i -= n
			}
		}
		return nil, 0
	}
	piecesOf := func(r *attnRun) int { return (r.keys + attnPiece - 1) / attnPiece }
	blocksOf := func(r *attnRun) int { return ((r.t1-r.t0)*group + 3) / 4 }
	negInf := float32(math.Inf(-1))
	for g := range c.KVHeads {
		off := g * hd
		m.parallel(pieces, func(_, i int) {
			r, p := locate(i, piecesOf)
			seq := sc.toks[r.t0].seq
			j0 := p * attnPiece
			n := min(attnPiece, r.keys-j0)
			kt := as.panel[r.panelAt+j0 : r.panelAt+hd*r.width]
			if err := gemv.TransposeKeys(kt, r.width, seq.k[l][(r.kb+j0)*kvd+off:], kvd, hd, n); err != nil {
				fail(fmt.Errorf("layer %d keys of head %d: %w", l, g, err))
			}
		})
		if first != nil {
			return first
		}
		m.parallel(blocks, func(w, i int) {
			r, b := locate(i, blocksOf)
			seq := sc.toks[r.t0].seq
			count := (r.t1 - r.t0) * group
			qp, s, out := as.q[w], as.s[w][:4*r.width], as.out[w]
			var ts, hs [4]int
			for k := range 4 {
				qi := min(4*b+k, count-1) // a short block repeats its last query
				ts[k], hs[k] = r.t0+qi/group, g*group+qi%group
				q := sc.q[ts[k]][hs[k]*hd : (hs[k]+1)*hd]
				for d, x := range q {
					qp[4*d+k] = x
				}
			}
			kt := as.panel[r.panelAt : r.panelAt+hd*r.width]
			if err := gemv.Scores4(m.impl, qp, hd, kt, r.width, r.width, s, r.width); err != nil {
				fail(fmt.Errorf("layer %d scores: %w", l, err))
				return
			}
			mix := 0
			for k := range 4 {
				mix = max(mix, sc.toks[ts[k]].pos+1-r.kb)
			}
			for k := range 4 {
				pos := sc.toks[ts[k]].pos
				from := lo(pos) - r.kb
				a := from / gemv.SoftmaxBlock * gemv.SoftmaxBlock
				z := roundUp(pos+1-r.kb, gemv.SoftmaxBlock)
				row := s[k*r.width : (k+1)*r.width]
				for j := a; j < from; j++ {
					row[j] = negInf
				}
				for j := pos + 1 - r.kb; j < z; j++ {
					row[j] = negInf
				}
				if err := gemv.Softmax(m.impl, row[a:z], c.AttnScale); err != nil {
					fail(fmt.Errorf("layer %d softmax: %w", l, err))
					return
				}
				clear(row[:a])
				if z < mix {
					clear(row[z:mix])
				}
			}
			if err := gemv.Mix4(m.impl, s, r.width, seq.v[l][r.kb*kvd+off:], kvd, mix, hd, out); err != nil {
				fail(fmt.Errorf("layer %d values: %w", l, err))
				return
			}
			for k := range 4 {
				if 4*b+k >= count {
					break
				}
				copy(sc.att[ts[k]][hs[k]*hd:(hs[k]+1)*hd], out[k*hd:(k+1)*hd])
			}
		})
		if first != nil {
			return first
		}
	}
	return nil
}
