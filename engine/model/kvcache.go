package model

import (
	"slices"

	"github.com/strata-llm/strata/engine/gemv"
)

// A sequence's cache keeps each layer's keys and values a key-value head
// after another, in the layouts the attention's kernels read (engine/gemv's
// attn.go), alloc positions a head:
//
//   - keys in strips of gemv.KeyLanes positions, [alloc/KeyLanes][HeadDim]
//     [KeyLanes]: a strip holds each element's 16 positions side by side,
//     so one vector load takes an element of 16 keys (gemv.Scores4), and a
//     head's strips follow each other;
//   - values in rows, [alloc][HeadDim]: gemv.Mix4 reads a position's row
//     once for four queries.
//
// alloc is a multiple of gemv.KeyBlock, so a scoring call's whole blocks of
// keys lie in the cache (past the last position they hold zeros or older
// keys, whose scores are never read).

// headK is layer l's keys of key-value head g.
func (s *Sequence) headK(l, g int) []float32 {
	n := s.alloc * s.m.Config.HeadDim
	return s.k[l][g*n : (g+1)*n]
}

// headV is layer l's values of key-value head g.
func (s *Sequence) headV(l, g int) []float32 {
	n := s.alloc * s.m.Config.HeadDim
	return s.v[l][g*n : (g+1)*n]
}

// store writes position pos's keys and values of layer l (KVDim each, the
// heads one after another) into the cache.
func (s *Sequence) store(l, pos int, k, v []float32) {
	c := &s.m.Config
	hd := c.HeadDim
	strip, lane := pos/gemv.KeyLanes*gemv.KeyLanes*hd, pos%gemv.KeyLanes
	for g := range c.KVHeads {
		kh := s.headK(l, g)[strip+lane:]
		for d, x := range k[g*hd : (g+1)*hd] {
			kh[d*gemv.KeyLanes] = x
		}
		copy(s.headV(l, g)[pos*hd:(pos+1)*hd], v[g*hd:(g+1)*hd])
	}
}

// key writes layer l's key of head g at position pos to dst (HeadDim).
func (s *Sequence) key(dst []float32, l, g, pos int) {
	hd := s.m.Config.HeadDim
	kh := s.headK(l, g)[pos/gemv.KeyLanes*gemv.KeyLanes*hd+pos%gemv.KeyLanes:]
	for d := range dst[:hd] {
		dst[d] = kh[d*gemv.KeyLanes]
	}
}

// value is layer l's value row of head g at position pos.
func (s *Sequence) value(l, g, pos int) []float32 {
	hd := s.m.Config.HeadDim
	return s.headV(l, g)[pos*hd : (pos+1)*hd]
}

// reserve makes room for n positions (n <= s.max), preserving the cache.
func (s *Sequence) reserve(n int) {
	if n <= s.alloc {
		return
	}
	const b = gemv.KeyBlock
	c := max(n, 2*s.alloc, b)
	c = (min(c, s.max) + b - 1) / b * b
	kvd := s.m.Config.KVDim()
	old := &Sequence{m: s.m, alloc: s.alloc, k: slices.Clone(s.k), v: slices.Clone(s.v)}
	for l := range s.k {
		s.k[l], s.v[l] = make([]float32, c*kvd), make([]float32, c*kvd)
	}
	s.alloc = c
	if old.alloc > 0 && s.pos > 0 {
		for l := range s.k {
			s.copyHeads(l, old, s.pos)
		}
	}
}

// copyHeads copies layer l's first n positions of o's cache into s's (of
// the same model; s has room for them).
func (s *Sequence) copyHeads(l int, o *Sequence, n int) {
	c := &s.m.Config
	hd := c.HeadDim
	strips := (n + gemv.KeyLanes - 1) / gemv.KeyLanes * gemv.KeyLanes * hd
	for g := range c.KVHeads {
		copy(s.headK(l, g)[:strips], o.headK(l, g)[:strips])
		copy(s.headV(l, g)[:n*hd], o.headV(l, g)[:n*hd])
	}
}
