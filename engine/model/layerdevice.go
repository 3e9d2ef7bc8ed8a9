package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// A GPU's hybrid placement may leave whole layers to the CPU (engine/tier's
// WholeOnCPU): the device then computes the layer's attention too, over a
// KV cache of the layer's own kept in host memory. The cache is a Sequence
// of the device's model that holds pages only for the layers the device
// may compute (NewCache); the GPU keeps its own cache of every layer, and
// the caller moves the rows one side computed to the other before the
// other needs them (PutRows, Rows), since a layer's place can change with
// the batch size.

// LayerToken is one row of a whole-layer call: the cache its keys and
// values go to and whose earlier positions its attention reads, and its
// position there.
type LayerToken struct {
	Cache *Sequence
	Pos   int
}

// NewCache returns an empty KV cache of the device for the layers keep
// marks (keep has one entry per layer), growing to maxCtx positions
// (Sequence's limits).
func (d *FFNDevice) NewCache(maxCtx int, keep []bool) (*Sequence, error) {
	if len(keep) != d.m.Config.Layers {
		return nil, fmt.Errorf("device cache: %d layer marks for %d layers", len(keep), d.m.Config.Layers)
	}
	s := d.m.NewSequence(maxCtx)
	s.layers = slices.Clone(keep)
	return s, nil
}

// RunLayer runs layer l whole on the device, in place on the rows of h
// (Dim elements each): the attention (its keys and values stored in each
// row's cache at its position, the scores over that cache's positions up
// to it, as Forward computes them) and the FFN. w holds every tensor of
// the layer; a fused architecture's Q, K, V, gate and up may come split
// (engine/gpu's host copy). Rows of one cache must come in position order,
// one after another. Calls are serialised.
func (d *FFNDevice) RunLayer(ctx context.Context, l int, w *Layer, h [][]float32, toks []LayerToken) error {
	m := d.m
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &m.Config
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("layer %d on the CPU: %w", l, err)
	}
	switch {
	case l < 0 || l >= c.Layers:
		return fmt.Errorf("layer %d on the CPU: outside [0, %d)", l, c.Layers)
	case len(toks) != len(h):
		return fmt.Errorf("layer %d on the CPU: %d rows, %d cache positions", l, len(h), len(toks))
	case c.MoE():
		return fmt.Errorf("layer %d on the CPU: whole MoE layers are not computed here", l)
	}
	if err := c.checkWhole(l, w); err != nil {
		return fmt.Errorf("layer on the CPU: %w", err)
	}
	maxPos := 0
	for t, tk := range toks {
		switch s := tk.Cache; {
		case len(h[t]) != c.Dim:
			return fmt.Errorf("layer %d on the CPU: row %d has %d elements, the model's width is %d", l, t, len(h[t]), c.Dim)
		case s == nil || s.m != m:
			return fmt.Errorf("layer %d on the CPU: row %d: the cache is not the device's", l, t)
		case !s.keeps(l):
			return fmt.Errorf("layer %d on the CPU: row %d: the cache does not keep the layer", l, t)
		case tk.Pos < 0 || tk.Pos >= s.max:
			return fmt.Errorf("layer %d on the CPU: row %d: position %d outside [0, %d): %w", l, t, tk.Pos, s.max, ErrContextOverflow)
		case t > 0 && toks[t-1].Cache == s && toks[t-1].Pos != tk.Pos-1:
			return fmt.Errorf("layer %d on the CPU: row %d: position %d follows %d in its cache", l, t, tk.Pos, toks[t-1].Pos)
		}
		maxPos = max(maxPos, tk.Pos)
	}
	if len(h) == 0 {
		return nil
	}
	m.prepare(len(h), maxPos)
	sc := &m.sc
	sc.toks = sc.toks[:0]
	for t, tk := range toks {
		tk.Cache.reserve(tk.Pos + 1)
		sc.toks = append(sc.toks, tokRef{seq: tk.Cache, pos: tk.Pos})
		sc.prompt = append(sc.prompt, false)
		copy(sc.h[t], h[t])
		m.rotations(t, tk.Pos)
	}
	if err := m.layer(ctx, l, w); err != nil {
		return fmt.Errorf("layer %d on the CPU: %w", l, err)
	}
	for t, r := range h {
		copy(r, sc.h[t])
	}
	return nil
}

// checkWhole validates layer i's tensors against c, as checkLayer does,
// but for a fused architecture's Q, K and V, which may come split (their
// QKV empty) and are then checked as matrices of their own; the FFN as
// checkFFN checks it.
func (c *Config) checkWhole(i int, l *Layer) error {
	if l == nil {
		return fmt.Errorf("layer %d: nil", i)
	}
	var attn []LayerRole
	for _, r := range c.LayerRoles() {
		if r.FFN {
			continue
		}
		if c.Fused() && l.QKV.Data == nil && r.Field(l) == &l.QKV {
			q, kv, d := c.QDim(), c.KVDim(), c.Dim
			attn = append(attn,
				LayerRole{Suffix: "attn_qkv.weight[q]", Rows: q, Cols: d, Field: func(l *Layer) *Tensor { return &l.Q }},
				LayerRole{Suffix: "attn_qkv.weight[k]", Rows: kv, Cols: d, Field: func(l *Layer) *Tensor { return &l.K }},
				LayerRole{Suffix: "attn_qkv.weight[v]", Rows: kv, Cols: d, Field: func(l *Layer) *Tensor { return &l.V }})
			continue
		}
		attn = append(attn, r)
	}
	if err := runChecks(i, roleChecks(l, attn)); err != nil {
		return err
	}
	return c.checkFFN(i, l)
}

// PutRows stores positions p0 to p0+n-1 of layer l in the cache, from k
// and v: n rows of KVDim floats each (the keys after RoPE), the heads one
// after another in a row, as a GPU's cache holds them. The cache grows to
// hold them.
func (s *Sequence) PutRows(l, p0 int, k, v []float32) error {
	n, err := s.rowsCheck(l, p0, k, v)
	if err != nil {
		return fmt.Errorf("put cache rows: %w", err)
	}
	kvd := s.m.Config.KVDim()
	s.reserve(p0 + n)
	for i := range n {
		s.store(l, p0+i, k[i*kvd:(i+1)*kvd], v[i*kvd:(i+1)*kvd])
	}
	return nil
}

// Rows reads positions p0 to p0+n-1 of layer l from the cache into k and
// v, in PutRows' layout. The positions must have been stored.
func (s *Sequence) Rows(l, p0 int, k, v []float32) error {
	n, err := s.rowsCheck(l, p0, k, v)
	if err != nil {
		return fmt.Errorf("cache rows: %w", err)
	}
	if pages := (p0 + n + pagePositions - 1) / pagePositions; n > 0 && pages > len(s.k[l]) {
		return fmt.Errorf("cache rows: positions [%d, %d) of layer %d: the cache holds %d", p0, p0+n, l, len(s.k[l])*pagePositions)
	}
	c := &s.m.Config
	hd, kvd := c.HeadDim, c.KVDim()
	for i := range n {
		for g := range c.KVHeads {
			at := i*kvd + g*hd
			s.key(k[at:at+hd], l, g, p0+i)
			copy(v[at:at+hd], s.value(l, g, p0+i))
		}
	}
	return nil
}

// rowsCheck validates a PutRows or Rows call and returns its row count.
func (s *Sequence) rowsCheck(l, p0 int, k, v []float32) (int, error) {
	kvd := s.m.Config.KVDim()
	n := len(k) / kvd
	switch {
	case l < 0 || l >= len(s.k) || !s.keeps(l):
		return 0, fmt.Errorf("layer %d: not in the cache", l)
	case len(k)%kvd != 0 || len(v) != len(k):
		return 0, fmt.Errorf("layer %d: %d keys and %d values, not rows of %d", l, len(k), len(v), kvd)
	case p0 < 0 || p0+n > s.max:
		return 0, fmt.Errorf("layer %d: positions [%d, %d) outside [0, %d): %w", l, p0, p0+n, s.max, ErrContextOverflow)
	}
	return n, nil
}

// ShareLayer makes layer l of s hold o's first n positions (both the
// device's caches keeping the layer), sharing o's pages as CopyFrom does.
func (s *Sequence) ShareLayer(l int, o *Sequence, n int) error {
	switch {
	case o == nil || o.m != s.m:
		return errors.New("share cache layer: the source belongs to another model")
	case l < 0 || l >= len(s.k) || !s.keeps(l) || !o.keeps(l):
		return fmt.Errorf("share cache layer %d: not in both caches", l)
	case n < 0 || n > s.max || (n+pagePositions-1)/pagePositions > len(o.k[l]):
		return fmt.Errorf("share cache layer %d: %d positions, the source holds %d (capacity %d)", l, n, len(o.k[l])*pagePositions, s.max)
	}
	s.sharePages(l, o, n)
	return nil
}

// LayerRate measures the device's rate on whole layers for passes of T
// rows at position at (each row a cache of its own holding at earlier
// positions of random keys and values, so the attention reads what a
// decode there reads), in weight bytes per second: as Rate does for FFNs,
// one warm-up layer, then the layers in order until rateBytes are read or
// every layer was. The layers' weights must be whole (RunLayer's w).
func (d *FFNDevice) LayerRate(ctx context.Context, ls []FFNLayer, T, at int) (float64, error) {
	c := &d.m.Config
	if T < 1 || at < 0 || at >= c.Context {
		return 0, fmt.Errorf("layer rate: %d rows at position %d (context %d)", T, at, c.Context)
	}
	keep := make([]bool, c.Layers)
	var all int64
	for _, l := range ls {
		if l.Index < 0 || l.Index >= c.Layers {
			return 0, fmt.Errorf("layer rate: layer %d outside [0, %d)", l.Index, c.Layers)
		}
		keep[l.Index] = true
		all += FFNBytes(l.W) + AttnBytes(l.W)
	}
	if all == 0 {
		return 0, fmt.Errorf("layer rate: no weights in %d layers", len(ls))
	}
	r := rand.New(rand.NewPCG(uint64(ls[0].Index), uint64(T)))
	kv := make([]float32, at*c.KVDim())
	for i := range kv {
		kv[i] = float32(r.NormFloat64())
	}
	h := make([][]float32, T)
	toks := make([]LayerToken, T)
	for t := range h {
		h[t] = make([]float32, c.Dim)
		for i := range h[t] {
			h[t][i] = float32(r.NormFloat64())
		}
		cache, err := d.NewCache(at+1, keep)
		if err != nil {
			return 0, fmt.Errorf("layer rate: %w", err)
		}
		for _, l := range ls {
			if err := cache.PutRows(l.Index, 0, kv, kv); err != nil {
				return 0, fmt.Errorf("layer rate: %w", err)
			}
		}
		toks[t] = LayerToken{Cache: cache, Pos: at}
	}
	last := ls[len(ls)-1]
	if err := d.RunLayer(ctx, last.Index, last.W, h, toks); err != nil {
		return 0, fmt.Errorf("layer rate of layer %d: %w", last.Index, err)
	}
	var bytes int64
	t0 := time.Now()
	for i := 0; bytes < rateBytes && (i < len(ls) || bytes < rateBytes/8); i++ {
		l := ls[i%len(ls)]
		if err := d.RunLayer(ctx, l.Index, l.W, h, toks); err != nil {
			return 0, fmt.Errorf("layer rate of layer %d: %w", l.Index, err)
		}
		bytes += FFNBytes(l.W) + AttnBytes(l.W)
	}
	return float64(bytes) / max(time.Since(t0).Seconds(), 1e-9), nil
}
