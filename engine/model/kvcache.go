package model

import (
	"slices"

	"github.com/strata-llm/strata/engine/gemv"
)

// A sequence's cache holds each layer's keys and values in pages of
// pagePositions positions, allocated as the sequence grows: growing never
// copies what the cache holds, nor holds two copies of it at once. A
// page keeps its positions a key-value head after another, in the layouts
// the attention's kernels read (engine/gemv's attn.go):
//
//   - keys in strips of gemv.KeyLanes positions, [KVHeads][strips]
//     [HeadDim][KeyLanes]: a strip holds each element's 16 positions side
//     by side, so one vector load takes an element of 16 keys
//     (gemv.Scores4), a page's strips of a head one after another;
//   - values in rows, [KVHeads][pagePositions][HeadDim]: gemv.Mix4 reads
//     a position's row once for four queries.
//
// A page is one scoring call's block of keys (gemv.KeyBlock), so a block
// never straddles two pages; past the last position a page holds zeros or
// older keys, whose scores are never read.
//
// CopyFrom shares the source's pages rather than copying them (a prompt
// computed once for several completions): a page a sequence did not
// allocate itself is copied the first time the sequence writes to it, so
// neither sequence sees the other's later positions.

// pagePositions is how many positions a cache page holds.
const pagePositions = gemv.KeyBlock

// kPage is layer l's page p of keys, head g's part.
func (s *Sequence) kPage(l, p, g int) []float32 {
	n := pagePositions * s.m.Config.HeadDim
	return s.k[l][p][g*n : (g+1)*n]
}

// vPage is layer l's page p of values, head g's part.
func (s *Sequence) vPage(l, p, g int) []float32 {
	n := pagePositions * s.m.Config.HeadDim
	return s.v[l][p][g*n : (g+1)*n]
}

// store writes position pos's keys and values of layer l (KVDim each, the
// heads one after another) into the cache.
func (s *Sequence) store(l, pos int, k, v []float32) {
	c := &s.m.Config
	hd := c.HeadDim
	if p := pos / pagePositions; !s.own[l][p] {
		s.k[l][p], s.v[l][p] = slices.Clone(s.k[l][p]), slices.Clone(s.v[l][p])
		s.own[l][p] = true
	}
	for g := range c.KVHeads {
		kh := s.keyAt(l, g, pos)
		for d, x := range k[g*hd : (g+1)*hd] {
			kh[d*gemv.KeyLanes] = x
		}
		copy(s.value(l, g, pos), v[g*hd:(g+1)*hd])
	}
}

// keyAt is layer l's page of head g from position pos's first element
// on: the key's elements lie gemv.KeyLanes apart there.
func (s *Sequence) keyAt(l, g, pos int) []float32 {
	hd := s.m.Config.HeadDim
	at := pos % pagePositions
	return s.kPage(l, pos/pagePositions, g)[at/gemv.KeyLanes*gemv.KeyLanes*hd+at%gemv.KeyLanes:]
}

// key writes layer l's key of head g at position pos to dst (HeadDim).
func (s *Sequence) key(dst []float32, l, g, pos int) {
	kh := s.keyAt(l, g, pos)
	for d := range dst[:s.m.Config.HeadDim] {
		dst[d] = kh[d*gemv.KeyLanes]
	}
}

// value is layer l's value row of head g at position pos.
func (s *Sequence) value(l, g, pos int) []float32 {
	hd := s.m.Config.HeadDim
	at := pos % pagePositions
	return s.vPage(l, pos/pagePositions, g)[at*hd : (at+1)*hd]
}

// reserve makes room for n positions (n <= s.max): the pages they need
// that the cache lacks.
func (s *Sequence) reserve(n int) {
	pages := (n + pagePositions - 1) / pagePositions
	if len(s.k) == 0 || len(s.k[0]) >= pages {
		return
	}
	size := pagePositions * s.m.Config.KVDim()
	for l := range s.k {
		for len(s.k[l]) < pages {
			s.k[l] = append(s.k[l], make([]float32, size))
			s.v[l] = append(s.v[l], make([]float32, size))
			s.own[l] = append(s.own[l], true)
		}
	}
}

// sharePages makes layer l's pages holding o's first n positions s's
// too (of the same model), in place of what s held there, neither
// sequence owning them from then on.
func (s *Sequence) sharePages(l int, o *Sequence, n int) {
	for p := range (n + pagePositions - 1) / pagePositions {
		if p == len(s.k[l]) {
			s.k[l], s.v[l], s.own[l] = append(s.k[l], nil), append(s.v[l], nil), append(s.own[l], false)
		}
		s.k[l][p], s.v[l][p] = o.k[l][p], o.v[l][p]
		s.own[l][p], o.own[l][p] = false, false
	}
}
