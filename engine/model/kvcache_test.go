package model

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKVCacheLayout: positions stored in the cache read back as they were
// written, key by key from its strip and value by value, across growth
// (a page at a time, the pages already written never moved) and after
// CopyFrom into another sequence, which shares the pages: a write of
// either sequence after it leaves the other's positions as they were.
func TestKVCacheLayout(t *testing.T) {
	t.Parallel()
	m, err := Open(synthModel(t, ArchLlama, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := &m.Config
	kvd, hd := c.KVDim(), c.HeadDim
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200
	keys, vals := make([][]float32, n), make([][]float32, n)
	s := m.NewSequence(0)
	for p := range n {
		keys[p], vals[p] = make([]float32, kvd), make([]float32, kvd)
		for i := range kvd {
			keys[p][i], vals[p][i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		var first *float32
		if len(s.k[0]) > 0 {
			first = &s.k[0][0][0]
		}
		s.reserve(p + 1)
		if first != nil && first != &s.k[0][0][0] {
			t.Fatalf("position %d: growing moved the first page", p)
		}
		for l := range c.Layers {
			s.store(l, p, keys[p], vals[p])
		}
		s.pos = p + 1
	}
	if got, want := len(s.k[0]), (n+pagePositions-1)/pagePositions; got != want {
		t.Fatalf("%d pages for %d positions, want %d", got, n, want)
	}
	check := func(name string, s *Sequence, upto int) {
		t.Helper()
		key := make([]float32, hd)
		for l := range c.Layers {
			for p := range upto {
				for g := range c.KVHeads {
					s.key(key, l, g, p)
					if !slices.Equal(key, keys[p][g*hd:(g+1)*hd]) {
						t.Fatalf("%s: layer %d position %d head %d: key differs", name, l, p, g)
					}
					if !slices.Equal(s.value(l, g, p), vals[p][g*hd:(g+1)*hd]) {
						t.Fatalf("%s: layer %d position %d head %d: value differs", name, l, p, g)
					}
				}
			}
		}
	}
	check("grown", s, n)
	o := m.NewSequence(0)
	if err := o.CopyFrom(s, 77); err != nil {
		t.Fatal(err)
	}
	check("copied", o, 77)
	if &o.k[0][0][0] != &s.k[0][0][0] || &o.v[1][1][0] != &s.v[1][1][0] {
		t.Fatal("CopyFrom copied the pages it could share")
	}
	// Each writes on past the shared positions: the other keeps its own.
	fresh := make([]float32, kvd)
	for i := range fresh {
		fresh[i] = 1e3 + float32(i)
	}
	o.reserve(78)
	o.store(0, 77, fresh, fresh)
	check("the source, after the copy wrote", s, n)
	s.store(1, 10, fresh, fresh)
	check("the copy, after the source wrote", o, 77)
	key := make([]float32, hd)
	o.key(key, 0, 1, 77)
	if !slices.Equal(key, fresh[hd:2*hd]) || !slices.Equal(o.value(0, 1, 77), fresh[hd:2*hd]) {
		t.Fatal("the copy's own write did not land")
	}
}
