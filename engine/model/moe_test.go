package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// TestPick: each token's top-k experts by score, highest first, ties to
// the lower index, with weights that are the softmax over the picked
// scores.
func TestPick(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		scores  []float32
		k       int
		experts []int
	}{
		{"top-2 of 4", []float32{0.1, 2, -1, 1.5}, 2, []int{1, 3}},
		{"ties go low", []float32{1, 3, 3, 3}, 2, []int{1, 2}},
		{"all", []float32{-2, 0, -1}, 3, []int{1, 2, 0}},
		{"top-1", []float32{5, 4, 6, 6}, 1, []int{2}},
		{"last is best", []float32{0, 0, 0, 9}, 2, []int{3, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs := pick(nil, [][]float32{tc.scores, tc.scores}, tc.k)
			if len(rs) != 2*tc.k {
				t.Fatalf("%d routes, want %d", len(rs), 2*tc.k)
			}
			var z float64
			for _, e := range tc.experts {
				z += math.Exp(float64(tc.scores[e]))
			}
			for i, r := range rs {
				tok, slot := i/tc.k, i%tc.k
				if r.t != tok || r.slot != slot || r.e != tc.experts[slot] {
					t.Fatalf("route %d = %+v, want token %d slot %d expert %d", i, r, tok, slot, tc.experts[slot])
				}
				want := math.Exp(float64(tc.scores[r.e])) / z
				if math.Abs(float64(r.w)-want) > 1e-6 {
					t.Fatalf("route %d weight %v, want %v", i, r.w, want)
				}
			}
		})
	}
}

// TestExpertCounts: the router's choices are counted per layer and expert,
// ExpertsUsed per token in every layer, and a dense model has none.
func TestExpertCounts(t *testing.T) {
	t.Parallel()
	spec := mixtralSpec()
	m := newTestModel(t, spec, 4)
	if c := m.ExpertCounts(); len(c) != spec.layers || slices.ContainsFunc(c, func(l []uint64) bool { return slices.Max(l) != 0 }) {
		t.Fatalf("fresh counts %v", c)
	}
	toks := randTokens(9, spec.vocab, 3)
	forward(t, m, m.NewSequence(0), toks, false)
	forward(t, m, m.NewSequence(0), toks[:4], false)
	counts := m.ExpertCounts()
	for l, c := range counts {
		var sum uint64
		for _, n := range c {
			sum += n
		}
		if want := uint64(13 * spec.used); sum != want {
			t.Fatalf("layer %d: %d routes counted, want %d (%v)", l, sum, want, c)
		}
		if slices.Max(c) == sum {
			t.Fatalf("layer %d: every route went to one expert (%v): the router is not in use", l, c)
		}
	}
	counts[0][0] += 100
	if m.ExpertCounts()[0][0] == counts[0][0] {
		t.Fatal("ExpertCounts returned the model's own counters")
	}
	if c := newTestModel(t, llamaSpec(), 1).ExpertCounts(); c != nil {
		t.Fatalf("dense model counts %v", c)
	}
}

// TestFFNDeviceExpertCounts: an FFN device (engine/gpu's CPU beside the
// GPU) counts the routing of the FFN blocks it runs, as the model counts
// its own: the same experts for the same rows, in the layer run only.
func TestFFNDeviceExpertCounts(t *testing.T) {
	t.Parallel()
	spec := mixtralSpec()
	m := newTestModel(t, spec, 4)
	dev, err := NewFFNDevice(m.Config, gemv.Detect())
	if err != nil {
		t.Fatal(err)
	}
	m.UseGEMV(gemv.Detect())
	rows := func() [][]float32 {
		return [][]float32{randomVector(m.Config.Dim, 1), randomVector(m.Config.Dim, 2), randomVector(m.Config.Dim, 3)}
	}
	if err := dev.Run(context.Background(), 1, &m.Weights.Layers[1], rows()); err != nil {
		t.Fatal(err)
	}
	if err := m.FFN(context.Background(), 1, &m.Weights.Layers[1], rows()); err != nil {
		t.Fatal(err)
	}
	got, want := dev.ExpertCounts(), m.ExpertCounts()
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("device counts %v, the model's %v", got, want)
	}
	if slices.Max(got[0]) != 0 || slices.Max(got[1]) == 0 {
		t.Fatalf("counts %v: want layer 1's routes only", got)
	}
}

// TestMoEFFN: Model.FFN of a MoE layer on a batch of rows is the float64
// reference's block for each row.
func TestMoEFFN(t *testing.T) {
	t.Parallel()
	spec := mixtralSpec()
	m := newTestModel(t, spec, 6)
	ref := newRef(t, refParamsOf(spec), m.Weights)
	rows := make([][]float32, 5)
	want := make([][]float64, len(rows))
	for i := range rows {
		rows[i] = randomVector(spec.dim, uint64(i+1))
		want[i] = make([]float64, spec.dim)
		for j, v := range rows[i] {
			want[i][j] = float64(v)
		}
		ref.ffn(1, want[i])
	}
	if err := m.FFN(context.Background(), 1, &m.Weights.Layers[1], rows); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if e := relErr(rows[i], want[i]); e > 1e-5 {
			t.Fatalf("row %d: relative error %.3g", i, e)
		}
	}
	bad := m.Weights.Layers[1]
	bad.Experts = bad.Experts[:3]
	if err := m.FFN(context.Background(), 1, &bad, rows); err == nil {
		t.Fatal("FFN of a layer missing experts succeeded")
	}
}

// TestRouterSkew: a Zipf skew concentrates the routing on each layer's
// first-ranked experts, 0 restores the model's own routing, and bad
// exponents and dense models are refused.
func TestRouterSkew(t *testing.T) {
	t.Parallel()
	spec := qwen3moeSpec()
	toks := randTokens(32, spec.vocab, 9)
	top := func(m *Model) float64 {
		before := m.ExpertCounts()
		forward(t, m, m.NewSequence(0), toks, false)
		after := m.ExpertCounts()
		var most, all uint64
		for l := range after {
			var mx uint64
			for e := range after[l] {
				n := after[l][e] - before[l][e]
				all += n
				mx = max(mx, n)
			}
			most += mx
		}
		return float64(most) / float64(all)
	}
	m := newTestModel(t, spec, 2)
	plain := top(m)
	if err := m.SetRouterSkew(3); err != nil {
		t.Fatal(err)
	}
	skewed := top(m)
	if err := m.SetRouterSkew(0); err != nil {
		t.Fatal(err)
	}
	again := top(m)
	// Each token takes 3 of 8 experts: the most used one takes at most a
	// third of a layer's routes.
	if !(skewed > plain+0.05) || skewed > 1.0/3+1e-9 || again != plain {
		t.Fatalf("share of the most used expert: plain %.3f, skewed %.3f, skew off %.3f", plain, skewed, again)
	}
	for _, s := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := m.SetRouterSkew(s); err == nil {
			t.Fatalf("skew %v accepted", s)
		}
	}
	if err := newTestModel(t, llamaSpec(), 1).SetRouterSkew(1); err == nil {
		t.Fatal("a dense model took a router skew")
	}
}

// TestFFNDeviceRouting: an FFN device counts the routes of the FFNs it
// runs and takes a router skew, as a model does: a GPU with its experts on
// the CPU reports and skews its routing through it.
func TestFFNDeviceRouting(t *testing.T) {
	t.Parallel()
	spec := mixtralSpec()
	m := newTestModel(t, spec, 5)
	d, err := NewFFNDevice(m.Config, m.impl)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, 64)
	for i := range rows {
		rows[i] = randomVector(spec.dim, uint64(i+10))
	}
	share := func() float64 {
		before := d.ExpertCounts()[1]
		runDevice(t, d, &m.Weights.Layers[1], rows)
		var sum, most uint64
		for e, n := range d.ExpertCounts()[1] {
			n -= before[e]
			sum += n
			most = max(most, n)
		}
		if want := uint64(len(rows) * spec.used); sum != want {
			t.Fatalf("%d routes counted, want %d", sum, want)
		}
		return float64(most) / float64(sum)
	}
	plain := share()
	if err := d.SetRouterSkew(3); err != nil {
		t.Fatal(err)
	}
	if skewed := share(); !(skewed > plain+0.05) {
		t.Fatalf("share of the most used expert: plain %.3f, skewed %.3f", plain, skewed)
	}
	if err := d.SetRouterSkew(-1); err == nil {
		t.Fatal("negative skew accepted")
	}
}

// TestFFNRouted: FFNRouted given the router's own routing gives FFN's
// bits; with a subset of the experts kept it equals the full routing with
// the others' weights zeroed (an expert left out adds nothing, and the
// sum keeps pick order); a kept set that no pick meets leaves h alone; bad
// routings are refused.
func TestFFNRouted(t *testing.T) {
	t.Parallel()
	for name, spec := range map[string]testSpec{"mixtral": mixtralSpec(), "qwen3moe": qwen3moeSpec()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := newTestModel(t, spec, 7)
			m.UseGEMV(gemv.Detect())
			ctx := context.Background()
			w := &m.Weights.Layers[1]
			rows := func() [][]float32 {
				r := make([][]float32, 5)
				for i := range r {
					r[i] = randomVector(spec.dim, uint64(i+20))
				}
				return r
			}
			want := rows()
			if err := m.FFN(ctx, 1, w, want); err != nil {
				t.Fatal(err)
			}
			k := m.Config.ExpertsUsed
			var rt Routing
			for _, r := range m.sc.moe.routes {
				if r.t*k+r.slot != len(rt.IDs) {
					t.Fatalf("route %+v out of order", r)
				}
				rt.IDs = append(rt.IDs, int32(r.e))
				rt.Weights = append(rt.Weights, r.w)
			}
			before := m.ExpertCounts()
			got := rows()
			if err := m.FFNRouted(ctx, 1, w, got, rt, nil); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatal("FFNRouted with the router's routing differs from FFN")
			}
			if !slices.EqualFunc(m.ExpertCounts(), before, slices.Equal) {
				t.Fatal("FFNRouted counted its routes")
			}
			even := func(e int) bool { return e%2 == 0 }
			zeroed := Routing{IDs: rt.IDs, Weights: slices.Clone(rt.Weights)}
			for i, e := range rt.IDs {
				if !even(int(e)) {
					zeroed.Weights[i] = 0
				}
			}
			sub, ref := rows(), rows()
			if err := m.FFNRouted(ctx, 1, w, sub, rt, even); err != nil {
				t.Fatal(err)
			}
			if err := m.FFNRouted(ctx, 1, w, ref, zeroed, nil); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(sub, ref, slices.Equal) {
				t.Fatal("FFNRouted of the even experts differs from the full routing with the odd ones' weights zeroed")
			}
			none := rows()
			if err := m.FFNRouted(ctx, 1, w, none, rt, func(int) bool { return false }); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(none, rows(), slices.Equal) {
				t.Fatal("FFNRouted with no expert kept changed h")
			}
			// Work beside the call runs once, whatever the call does, and
			// leaves its bits alone; where the call has products, inside
			// their first step (not the inputs' quantization before it,
			// which five rows routed to several experts make a step of
			// more items than threads), else at the end.
			for _, c := range []struct {
				name     string
				rt       Routing
				keep     func(int) bool
				want     [][]float32 // nil: the call fails
				products bool
			}{
				{"all kept", rt, nil, want, true},
				{"even kept", rt, even, ref, true},
				{"none kept", rt, func(int) bool { return false }, rows(), false},
				{"bad routing", Routing{IDs: rt.IDs[1:], Weights: rt.Weights[1:]}, nil, nil, false},
			} {
				calls, inProducts := 0, false
				got := rows()
				steps := m.besideSteps
				err := m.FFNRoutedBeside(ctx, 1, w, got, c.rt, c.keep, func() { calls++; inProducts = m.besideSteps == steps+1 })
				if (err != nil) != (c.want == nil) {
					t.Fatalf("%s beside: %v", c.name, err)
				}
				if c.want != nil && !slices.EqualFunc(got, c.want, slices.Equal) {
					t.Fatalf("%s: the call with work beside it differs from the call alone", c.name)
				}
				if calls != 1 {
					t.Fatalf("%s: the work beside ran %d times, want once", c.name, calls)
				}
				if inProducts != c.products {
					t.Errorf("%s: the work beside ran in a step of products: %v, want %v", c.name, inProducts, c.products)
				}
			}
			for name, bad := range map[string]Routing{
				"short":        {IDs: rt.IDs[1:], Weights: rt.Weights[1:]},
				"expert range": {IDs: append([]int32{int32(spec.experts)}, rt.IDs[1:]...), Weights: rt.Weights},
				"negative":     {IDs: append([]int32{-1}, rt.IDs[1:]...), Weights: rt.Weights},
			} {
				if err := m.FFNRouted(ctx, 1, w, rows(), bad, nil); err == nil {
					t.Errorf("%s routing accepted", name)
				}
			}
			// A call checks the experts it picks, not the layer's others:
			// an expert cut short fails a call that picks it, naming it,
			// and goes unread by one that does not.
			cut := *w
			cut.Experts = slices.Clone(w.Experts)
			e := int(rt.IDs[0])
			x := &cut.Experts[e]
			x.Down.Data = x.Down.Data[:len(x.Down.Data)/2]
			err := m.FFNRouted(ctx, 1, &cut, rows(), rt, nil)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("ffn_down_exps.weight[%d]", e)) {
				t.Errorf("a picked expert cut short: %v, want an error naming it", err)
			}
			others := rows()
			if err := m.FFNRouted(ctx, 1, &cut, others, rt, func(x int) bool { return x != e }); err != nil {
				t.Errorf("an expert cut short and not picked: %v", err)
			}
		})
	}
}

// aheadSource is an ExpertPrefetcher over a model's own experts, moved out
// of its layers; it records the experts each layer was asked to read
// ahead and the ones it then served, call by call.
type aheadSource struct {
	experts      [][]Expert
	norms, gates []Tensor
	ahead, asked [][][]int
}

func newAheadSource(m *Model) *aheadSource {
	s := &aheadSource{ahead: make([][][]int, len(m.Weights.Layers)), asked: make([][][]int, len(m.Weights.Layers))}
	for i := range m.Weights.Layers {
		l := &m.Weights.Layers[i]
		s.experts = append(s.experts, l.Experts)
		s.norms, s.gates = append(s.norms, l.FFNNorm), append(s.gates, l.Router)
		l.Experts = nil
	}
	return s
}

func (s *aheadSource) Experts(_ context.Context, l int, es []int, dst []*Expert) error {
	s.asked[l] = append(s.asked[l], slices.Clone(es))
	for j, e := range es {
		dst[j] = &s.experts[l][e]
	}
	return nil
}

func (s *aheadSource) Gate(l, _ int) (norm, router *Tensor, ok bool) {
	return &s.norms[l], &s.gates[l], true
}

func (s *aheadSource) Prefetch(_ context.Context, l int, es []int) {
	s.ahead[l] = append(s.ahead[l], slices.Clone(es))
}

// TestExpertPrefetch: each MoE layer asks an ExpertPrefetcher to read the
// next layer's predicted experts ahead, never the first layer's, without
// changing the logits; where attention and the experts add nothing to the
// residual (zero output and down projections), the prediction is exact:
// every layer asks for the experts it was told to expect.
func TestExpertPrefetch(t *testing.T) {
	t.Parallel()
	for _, spec := range []testSpec{mixtralSpec(), qwen3moeSpec()} {
		t.Run(spec.arch, func(t *testing.T) {
			t.Parallel()
			toks := randTokens(7, spec.vocab, 11)
			run := func(m *Model) [][]float32 {
				seq := m.NewSequence(0)
				defer seq.Close()
				out := forward(t, m, seq, toks[:5], true)
				for _, tok := range toks[5:] {
					out = append(out, forward(t, m, seq, []int32{tok}, false)...)
				}
				return out
			}
			own := run(newTestModel(t, spec, 8))
			m := newTestModel(t, spec, 8)
			src := newAheadSource(m)
			m.SetExpertSource(src)
			got := run(m)
			if !slices.EqualFunc(got, own, slices.Equal) {
				t.Fatal("logits with the experts read ahead differ from the model's own")
			}
			if len(src.ahead[0]) != 0 {
				t.Fatalf("layer 0 was read ahead: %v", src.ahead[0])
			}
			for l := 1; l < spec.layers; l++ {
				if len(src.ahead[l]) != len(src.asked[l]) {
					t.Fatalf("layer %d: %d reads ahead for %d passes", l, len(src.ahead[l]), len(src.asked[l]))
				}
			}

			// No change to the residual: the prediction is the routing.
			m = newTestModel(t, spec, 8)
			for i := range m.Weights.Layers {
				l := &m.Weights.Layers[i]
				clear(l.O.Data)
				for e := range l.Experts {
					clear(l.Experts[e].Down.Data)
				}
			}
			src = newAheadSource(m)
			m.SetExpertSource(src)
			run(m)
			for l := 1; l < spec.layers; l++ {
				if !slices.EqualFunc(src.ahead[l], src.asked[l], slices.Equal) {
					t.Fatalf("layer %d: read ahead %v, asked for %v", l, src.ahead[l], src.asked[l])
				}
			}
		})
	}
}

// TestFFNDeviceReadAhead: an FFN device told to read ahead (engine/gpu's
// CPU beside the GPU) predicts the next layer's picks from the rows it
// was given, by that layer's router, and asks its expert source for those
// the filter keeps (the ones the GPU does not hold); not for the layer
// after the last, and not once told to stop.
func TestFFNDeviceReadAhead(t *testing.T) {
	t.Parallel()
	spec := mixtralSpec()
	m := newTestModel(t, spec, 5)
	ref := newTestModel(t, spec, 5)
	src := newAheadSource(m)
	dev, err := NewFFNDevice(m.Config, gemv.Detect())
	if err != nil {
		t.Fatal(err)
	}
	dev.SetExpertSource(src)
	dev.ReadAhead(func(l, e int) bool { return e%2 == 0 })
	rows := func() [][]float32 {
		return [][]float32{randomVector(spec.dim, 1), randomVector(spec.dim, 2), randomVector(spec.dim, 3)}
	}
	k := spec.used
	r := Routing{}
	for t := range 3 {
		for j := range k {
			r.IDs, r.Weights = append(r.IDs, int32((t+j)%spec.experts)), append(r.Weights, 1/float32(k))
		}
	}

	// The prediction, by the reference model's own router.
	in := rows()
	xn := make([][]float32, len(in))
	scores := make([][]float32, len(in))
	for i := range in {
		xn[i], scores[i] = make([]float32, spec.dim), make([]float32, spec.experts)
	}
	next := &ref.Weights.Layers[1]
	ref.prepare(len(in), 0)
	ref.norm(xn, in, &next.FFNNorm)
	if err := ref.matmul(matOp{w: &next.Router, xs: xn, ys: scores}); err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, p := range pick(nil, scores, k) {
		if p.e%2 == 0 {
			want = append(want, p.e)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) == 0 {
		t.Fatal("the prediction keeps no expert: pick other rows")
	}

	ctx := context.Background()
	if err := dev.RunRouted(ctx, 0, &m.Weights.Layers[0], rows(), r, nil); err != nil {
		t.Fatal(err)
	}
	if len(src.ahead[0]) != 0 || len(src.ahead[1]) != 1 || !slices.Equal(src.ahead[1][0], want) {
		t.Fatalf("read ahead %v, want layer 1's %v", src.ahead, want)
	}
	if err := dev.RunRouted(ctx, spec.layers-1, &m.Weights.Layers[spec.layers-1], rows(), r, nil); err != nil {
		t.Fatal(err)
	}
	dev.ReadAhead(nil)
	if err := dev.RunRouted(ctx, 0, &m.Weights.Layers[0], rows(), r, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(src.ahead[1]); n != 1 || len(src.ahead[spec.layers-1]) != 0 {
		t.Fatalf("read ahead %v: want one call, for layer 1", src.ahead)
	}
}

// runDevice runs d's FFN of layer 1 (w) over copies of rows and returns
// them: rows stay as they were.
func runDevice(t *testing.T, d *FFNDevice, w *Layer, rows [][]float32) [][]float32 {
	t.Helper()
	in := make([][]float32, len(rows))
	for i := range rows {
		in[i] = slices.Clone(rows[i])
	}
	if err := d.Run(context.Background(), 1, w, in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestFFNRoutedSplit: an expert split at a column (Routing.Split) gives,
// with quant's reference products and engine/gemv's (Go and the machine's
// kernels), the bits of the same expert whose down has every column from
// there on zeroed: its part is exactly its first columns' share, which
// another device's part then completes. Splits off the down's blocks, at
// or past the FFN width, or of no expert are refused.
func TestFFNRoutedSplit(t *testing.T) {
	t.Parallel()
	const dim, eff, experts, cut = 256, 1024, 4, 512
	cfg := Config{Arch: ArchQwen3MoE, Vocab: 256, Dim: dim, FFN: eff, ExpertFFN: eff, Experts: experts, ExpertsUsed: 2,
		Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 128, Context: 16, RopeTheta: 1e6, NormEps: 1e-6, AttnScale: 0.088, EmbedScale: 1}
	ones := make([]float32, dim)
	for i := range ones {
		ones[i] = 1
	}
	layer := func(zeroFrom int) *Layer {
		w := &Layer{FFNNorm: F32Tensor("ffn_norm", 1, dim, ones), Router: F32Tensor("router", experts, dim, make([]float32, experts*dim))}
		for e := range experts {
			s := uint64(10 * e)
			x := Expert{
				Gate: randomQuantTensor(t, expertName("gate", e), quant.Q4_K, eff, dim, s),
				Up:   randomQuantTensor(t, expertName("up", e), quant.Q4_K, eff, dim, s+1),
				Down: randomQuantTensor(t, expertName("down", e), quant.Q6_K, dim, eff, s+2),
			}
			if zeroFrom > 0 {
				rb := x.Down.rowBytes()
				off, err := quant.Q6_K.RowBytes(int64(zeroFrom))
				if err != nil {
					t.Fatal(err)
				}
				for r := range x.Down.Rows {
					clear(x.Down.Data[r*rb+int(off) : (r+1)*rb])
				}
			}
			w.Experts = append(w.Experts, x)
		}
		return w
	}
	w, zeroed := layer(0), layer(cut)
	r := rand.New(rand.NewPCG(4, 4))
	h := make([]float32, dim)
	for i := range h {
		h[i] = float32(r.NormFloat64())
	}
	route := Routing{IDs: []int32{1, 3}, Weights: []float32{0.6, 0.4}}
	only3 := func(e int) bool { return e == 3 }
	for _, way := range []string{"reference", "gemv " + gemv.Go.String(), "gemv " + gemv.Detect().String()} {
		impl := gemv.Detect()
		if way == "gemv go" {
			impl = gemv.Go
		}
		dev, err := NewFFNDevice(cfg, impl)
		if err != nil {
			t.Fatal(err)
		}
		if way == "reference" {
			dev.m.UseReference() // quant's float32 products: a view's rows one by one
		}
		run := func(w *Layer, rt Routing) ([]float32, error) {
			out := slices.Clone(h)
			err := dev.RunRouted(context.Background(), 0, w, [][]float32{out}, rt, only3)
			return out, err
		}
		split := route
		split.Split = ExpertSplit{Expert: 3, Cols: cut}
		b0 := dev.ExpertBytes()
		got, err := run(w, split)
		if err != nil {
			t.Fatalf("%s: %v", way, err)
		}
		b1 := dev.ExpertBytes()
		want, err := run(zeroed, route)
		if err != nil {
			t.Fatal(err)
		}
		full, err := run(w, route)
		if err != nil {
			t.Fatal(err)
		}
		// What the blocks read: the split expert's part (its gate and up
		// rows, its down's first columns of every row), then expert 3
		// whole (expert 1 is not kept).
		x := &w.Experts[3]
		downPart, err := quant.Q6_K.RowBytes(cut)
		if err != nil {
			t.Fatal(err)
		}
		part := int64(cut*x.Gate.rowBytes()+cut*x.Up.rowBytes()) + int64(dim)*downPart
		if d := b1 - b0; d != part {
			t.Errorf("%s: the split block read %d expert bytes, want %d", way, d, part)
		}
		if d := dev.ExpertBytes() - b1; d != 2*x.Bytes() {
			t.Errorf("%s: two whole blocks read %d expert bytes, want %d", way, d, 2*x.Bytes())
		}
		// Rows picking the same expert read it once.
		b2 := dev.ExpertBytes()
		two := [][]float32{slices.Clone(h), slices.Clone(h)}
		if err := dev.RunRouted(context.Background(), 0, w, two, Routing{IDs: []int32{3, 1, 3, 0}, Weights: []float32{0.5, 0.5, 0.5, 0.5}}, nil); err != nil {
			t.Fatal(err)
		}
		if d, want := dev.ExpertBytes()-b2, w.Experts[0].Bytes()+w.Experts[1].Bytes()+x.Bytes(); d != want {
			t.Errorf("%s: two rows over experts {0, 1, 3} read %d expert bytes, want %d", way, d, want)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: element %d is %v split, %v with the rest of the down zeroed", way, i, got[i], want[i])
			}
		}
		if slices.Equal(got, full) {
			t.Errorf("%s: the split expert's part equals the whole expert's", way)
		}
		for _, bad := range []ExpertSplit{{3, 100}, {3, eff}, {3, -256}, {experts, cut}, {-1, cut}} {
			rt := route
			rt.Split = bad
			if _, err := run(w, rt); err == nil {
				t.Errorf("%s: split %+v accepted", way, bad)
			}
		}
	}
}
