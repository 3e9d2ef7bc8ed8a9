package model

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
)

// TestRunLayerMatchesForward: the device computing every layer whole over
// its own cache, from the embeddings, gives the hidden states Forward
// gives (the same kernels: the same bits), a prompt's pass then decode
// steps, across architectures with biases, q/k norms, post-norms, sliding
// windows, LongRoPE and fused tensors (those split as engine/gpu's host
// copy has them); its cache then holds Forward's keys and values (Rows),
// which PutRows carries into a fresh cache that decodes as the first
// does, and a cache sharing a layer (ShareLayer) leaves its source as it
// was when it writes.
func TestRunLayerMatchesForward(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, spec := range []testSpec{llamaSpec(), qwen2Spec(), qwen3Spec(), gemmaSpec(), gemma3Spec(), phi3Spec()} {
		t.Run(spec.arch, func(t *testing.T) {
			t.Parallel()
			m := newTestModel(t, spec, 7)
			impl := gemv.Detect()
			m.UseGEMV(impl)
			c := &m.Config
			dev, err := NewFFNDevice(*c, impl)
			if err != nil {
				t.Fatal(err)
			}
			keep := make([]bool, c.Layers)
			for l := range keep {
				keep[l] = true
			}
			cache, err := dev.NewCache(0, keep)
			if err != nil {
				t.Fatal(err)
			}
			layers := make([]Layer, c.Layers)
			for l := range layers {
				layers[l] = c.SplitFused(&m.Weights.Layers[l])
				if c.Fused() {
					layers[l].QKV, layers[l].GateUp = Tensor{}, Tensor{}
				}
			}
			// run is the device's pass over toks at positions from p0.
			run := func(cache *Sequence, toks []int32, p0 int) [][]float32 {
				t.Helper()
				var h [][]float32
				var lt []LayerToken
				for i, id := range toks {
					e := make([]float32, c.Dim)
					if err := m.embed(e, id); err != nil {
						t.Fatal(err)
					}
					h = append(h, e)
					lt = append(lt, LayerToken{cache, p0 + i})
				}
				for l := range layers {
					if err := dev.RunLayer(ctx, l, &layers[l], h, lt); err != nil {
						t.Fatal(err)
					}
				}
				return h
			}
			seq := m.NewSequence(0)
			want := func(toks []int32) [][]float32 {
				t.Helper()
				var out [][]float32
				m.mu.Lock()
				err := m.forward(ctx, []Step{{Seq: seq, Tokens: toks}}, func(h [][]float32) {
					for _, r := range h {
						out = append(out, slices.Clone(r))
					}
				})
				m.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			same := func(what string, got, exp [][]float32) {
				t.Helper()
				for r := range exp {
					if !slices.Equal(got[r], exp[r]) {
						t.Fatalf("%s: row %d differs from Forward's", what, r)
					}
				}
			}
			toks := randTokens(c.Context/2+3, c.Vocab, 3)
			p := 5
			same("prompt", run(cache, toks[:p], 0), want(toks[:p]))
			for ; p < len(toks)-1; p++ {
				same(fmt.Sprintf("decode at %d", p), run(cache, toks[p:p+1], p), want(toks[p:p+1]))
			}
			kvd := c.KVDim()
			k, v := make([]float32, p*kvd), make([]float32, p*kvd)
			wk, wv := make([]float32, p*kvd), make([]float32, p*kvd)
			moved, err := dev.NewCache(0, keep)
			if err != nil {
				t.Fatal(err)
			}
			for l := range layers {
				if err := cache.Rows(l, 0, k, v); err != nil {
					t.Fatal(err)
				}
				if err := seq.Rows(l, 0, wk, wv); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(k, wk) || !slices.Equal(v, wv) {
					t.Fatalf("layer %d: the device's cache rows differ from Forward's", l)
				}
				if err := moved.PutRows(l, 0, k, v); err != nil {
					t.Fatal(err)
				}
			}
			last := toks[p : p+1]
			shared, err := dev.NewCache(0, keep)
			if err != nil {
				t.Fatal(err)
			}
			for l := range layers {
				if err := shared.ShareLayer(l, cache, p); err != nil {
					t.Fatal(err)
				}
			}
			exp := want(last)
			same("decode from PutRows' cache", run(moved, last, p), exp)
			same("decode from a shared cache", run(shared, last, p), exp)
			// The shared cache wrote position p on a page of its own: the
			// source's page still holds zeros there.
			one := make([]float32, kvd)
			if err := cache.Rows(0, p, one, make([]float32, kvd)); err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(one, func(x float32) bool { return x != 0 }) {
				t.Fatal("the shared cache's write reached its source")
			}
		})
	}
}

// TestRunLayerRejects: bad calls fail naming what is wrong and leave the
// cache as it was.
func TestRunLayerRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestModel(t, llamaSpec(), 7)
	c := &m.Config
	dev, err := NewFFNDevice(*c, gemv.Detect())
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewFFNDevice(*c, gemv.Detect())
	if err != nil {
		t.Fatal(err)
	}
	keep := make([]bool, c.Layers)
	keep[1] = true
	cache, err := dev.NewCache(8, keep)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.NewCache(8, keep)
	if err != nil {
		t.Fatal(err)
	}
	row := func() [][]float32 { return [][]float32{make([]float32, c.Dim)} }
	bad := m.Weights.Layers[1]
	bad.Q.Rows--
	w := &m.Weights.Layers[1]
	for _, tc := range []struct {
		name string
		l    int
		w    *Layer
		h    [][]float32
		toks []LayerToken
		want string
	}{
		{"layer out of range", c.Layers, w, row(), []LayerToken{{cache, 0}}, "outside"},
		{"layer not kept", 0, &m.Weights.Layers[0], row(), []LayerToken{{cache, 0}}, "does not keep"},
		{"rows and positions", 1, w, row(), nil, "1 rows, 0 cache positions"},
		{"row width", 1, w, [][]float32{make([]float32, c.Dim-1)}, []LayerToken{{cache, 0}}, "width"},
		{"foreign cache", 1, w, row(), []LayerToken{{foreign, 0}}, "not the device's"},
		{"past the context", 1, w, row(), []LayerToken{{cache, 8}}, "outside [0, 8)"},
		{"positions out of order", 1, w, append(row(), row()...), []LayerToken{{cache, 3}, {cache, 5}}, "follows"},
		{"bad q shape", 1, &bad, row(), []LayerToken{{cache, 0}}, "attn_q"},
	} {
		err := dev.RunLayer(ctx, tc.l, tc.w, tc.h, tc.toks)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if cache.pages != 0 {
		t.Errorf("a rejected call grew the cache to %d pages", cache.pages)
	}
	kvd := c.KVDim()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"put to a layer not kept", cache.PutRows(0, 0, make([]float32, kvd), make([]float32, kvd)), "not in the cache"},
		{"put past the context", cache.PutRows(1, 7, make([]float32, 2*kvd), make([]float32, 2*kvd)), "outside [0, 8)"},
		{"put a partial row", cache.PutRows(1, 0, make([]float32, kvd+1), make([]float32, kvd+1)), "not rows"},
		{"read rows never stored", cache.Rows(1, 0, make([]float32, kvd), make([]float32, kvd)), "holds 0"},
		{"share from another model", cache.ShareLayer(1, foreign, 0), "another model"},
		{"share a layer not kept", cache.ShareLayer(0, cache, 0), "not in both"},
		{"bad layer marks", func() error { _, err := dev.NewCache(8, keep[1:]); return err }(), "layer marks"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, tc.err, tc.want)
		}
	}
}

// TestLayerRate: the whole-layer rate is measured (positive) for one and
// several rows at a position with a cache before it, and bad arguments
// are refused.
func TestLayerRate(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, llamaSpec(), 7)
	dev, err := NewFFNDevice(m.Config, gemv.Detect())
	if err != nil {
		t.Fatal(err)
	}
	ls := []FFNLayer{{Index: 0, W: &m.Weights.Layers[0]}, {Index: 1, W: &m.Weights.Layers[1]}}
	for _, T := range []int{1, 3} {
		r, err := dev.LayerRate(context.Background(), ls, T, 20)
		if err != nil || !(r > 0) {
			t.Errorf("%d rows: rate %g, %v", T, r, err)
		}
	}
	for _, tc := range []struct {
		name  string
		ls    []FFNLayer
		T, at int
	}{
		{"no rows", ls, 0, 1},
		{"past the context", ls, 1, m.Config.Context},
		{"layer out of range", []FFNLayer{{Index: m.Config.Layers, W: &m.Weights.Layers[0]}}, 1, 1},
		{"no layers", nil, 1, 1},
	} {
		if _, err := dev.LayerRate(context.Background(), tc.ls, tc.T, tc.at); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
