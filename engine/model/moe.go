package model

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/strata-llm/strata/engine/gguf"
)

// Mixture-of-experts feed-forward blocks (Mixtral; Qwen3-MoE): a router
// scores every expert for each token, the top ExpertsUsed are run and their
// outputs summed with the softmax weights renormalised over the picked
// experts. Tokens are grouped by expert, so an expert several tokens of a
// batch picked is read from memory once for all of them.

// expertsFromGGUF reads the expert hyperparameters (llama.cpp's keys) into
// c. A file without an expert count, or with a count of 0, is dense.
// Routing variants strata does not implement (shared experts, sigmoid
// gating, scaled or unnormalised expert weights) are refused by name
// rather than run wrong.
func expertsFromGGUF(f *gguf.File, arch string, c *Config) error {
	n, ok := f.Uint(arch + ".expert_count")
	if !ok || n == 0 {
		return nil
	}
	if n > maxExperts {
		return fmt.Errorf("%s.expert_count %d out of range [1, %d]", arch, n, maxExperts)
	}
	used, ok := f.Uint(arch + ".expert_used_count")
	if !ok {
		return fmt.Errorf("%s.expert_count is %d but %s.expert_used_count is missing", arch, n, arch)
	}
	if used == 0 || used > n {
		return fmt.Errorf("%s.expert_used_count %d out of range [1, %d]", arch, used, n)
	}
	c.Experts, c.ExpertsUsed, c.ExpertFFN = int(n), int(used), c.FFN
	if v, ok := f.Uint(arch + ".expert_feed_forward_length"); ok {
		if v == 0 || v > maxFFN {
			return fmt.Errorf("%s.expert_feed_forward_length %d out of range [1, %d]", arch, v, maxFFN)
		}
		c.ExpertFFN = int(v)
	}
	if v, ok := f.Uint(arch + ".expert_shared_count"); ok && v > 0 {
		return fmt.Errorf("%s.expert_shared_count %d: shared experts are not supported", arch, v)
	}
	if v, ok := f.Uint(arch + ".expert_gating_func"); ok && v != 1 {
		// llama.cpp's numbering: 1 softmax, 2 sigmoid.
		return fmt.Errorf("%s.expert_gating_func %d: only softmax gating (1) is supported", arch, v)
	}
	if v, ok := f.Float(arch + ".expert_weights_scale"); ok && v != 1 && v != 0 {
		return fmt.Errorf("%s.expert_weights_scale %v: scaled expert weights are not supported", arch, v)
	}
	if v, ok := f.Lookup(arch + ".expert_weights_norm"); ok {
		if b, isBool := v.(bool); !isBool || !b {
			return fmt.Errorf("%s.expert_weights_norm %v: only renormalised expert weights are supported", arch, v)
		}
	}
	return nil
}

// expertName names expert e's slice of a merged expert tensor in errors.
func expertName(tensor string, e int) string { return fmt.Sprintf("%s[%d]", tensor, e) }

// expertChecks are the checks of every expert a MoE layer holds (its
// router and norm are LayerRoles; checkExpertCount checks that the layer
// has the config's number of experts, or none).
func expertChecks(c *Config, l *Layer) []tensorCheck {
	var checks []tensorCheck
	for e := range l.Experts {
		cs := oneExpertChecks(c, e, &l.Experts[e])
		checks = append(checks, cs[:]...)
	}
	return checks
}

// expertPart is one of an expert's three matrices: the merged GGUF tensor
// holding it for every expert, its shape and its place in an Expert.
type expertPart struct {
	merged     string
	rows, cols int
	field      func(x *Expert) *Tensor
}

// expertParts lists an expert's gate, up and down under c.
func expertParts(c *Config) [3]expertPart {
	d, f := c.Dim, c.ExpertFFN
	return [3]expertPart{
		{"ffn_gate_exps.weight", f, d, func(x *Expert) *Tensor { return &x.Gate }},
		{"ffn_up_exps.weight", f, d, func(x *Expert) *Tensor { return &x.Up }},
		{"ffn_down_exps.weight", d, f, func(x *Expert) *Tensor { return &x.Down }},
	}
}

// oneExpertChecks are the checks of expert e's tensors in x: an array,
// which stays off the heap where a pass checks its picked experts.
func oneExpertChecks(c *Config, e int, x *Expert) [3]tensorCheck {
	parts := expertParts(c)
	var checks [3]tensorCheck
	for k, pt := range parts {
		checks[k] = tensorCheck{pt.field(x), pt.merged, pt.rows, pt.cols, false, e}
	}
	return checks
}

// checkExpertCount checks that layer i has experts exactly when c says so,
// and as many; a MoE layer may also have none, its experts then coming
// from the model's ExpertSource.
func (c *Config) checkExpertCount(i int, l *Layer) error {
	if len(l.Experts) != c.Experts && (len(l.Experts) != 0 || !c.MoE()) {
		return fmt.Errorf("layer %d: %d experts, want %d", i, len(l.Experts), c.Experts)
	}
	return nil
}

// ExpertSource serves a MoE layer's experts when its Layer does not hold
// them: the experts a pass routed tokens to, resident or read from storage
// on demand. Forward calls it once per MoE layer per pass, with the
// distinct experts picked, in increasing order.
type ExpertSource interface {
	// Experts sets dst[j] to layer's expert experts[j]; the weights stay
	// valid until the next call.
	Experts(ctx context.Context, layer int, experts []int, dst []*Expert) error
}

// ExpertPrefetcher is an ExpertSource that can start reading a layer's
// experts before the layer asks for them. Right after a MoE layer's own
// experts are at hand, a pass predicts the next layer's picks by that
// layer's router on the residual this layer's FFN receives (what the next
// router sees, less this layer's FFN and the next attention, which a
// residual stream changes little), and hands them over: the reads then
// overlap this layer's experts and the next layer's attention instead of
// stalling the next layer's routing.
type ExpertPrefetcher interface {
	ExpertSource
	// Gate returns layer's FFN norm and router, which the prediction
	// needs before the layer's weights arrive, for a pass of rows tokens;
	// ok is false where no prediction pays (every expert of the layer at
	// hand) or none is wanted.
	Gate(layer, rows int) (norm, router *Tensor, ok bool)
	// Prefetch starts reading those of layer's experts (increasing) that
	// are not at hand and returns at once; the layer's Experts call waits
	// for them. A failed read ahead is read again by that call where the
	// layer needs the expert.
	Prefetch(ctx context.Context, layer int, experts []int)
}

// SetExpertSource makes MoE layers without experts of their own take them
// from src (nil: none). Experts from a source are checked against the
// config on every use.
func (m *Model) SetExpertSource(src ExpertSource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.experts = src
}

// pickedExperts returns layer l's experts listed in es (increasing) as
// pointers into dst's storage: the layer's own, or the expert source's,
// each checked against the config before a product reads it.
func (m *Model) pickedExperts(ctx context.Context, l int, w *Layer, es []int, dst []*Expert) error {
	c := &m.Config
	if len(w.Experts) == c.Experts {
		for j, e := range es {
			dst[j] = &w.Experts[e]
			cs := oneExpertChecks(c, e, dst[j])
			if err := runChecks(l, cs[:]); err != nil {
				return err
			}
		}
		return nil
	}
	if m.experts == nil {
		return fmt.Errorf("layer %d holds no experts and the model has no expert source", l)
	}
	if err := m.experts.Experts(ctx, l, es, dst); err != nil {
		return fmt.Errorf("experts: %w", err)
	}
	for j, e := range es {
		x := dst[j]
		if x == nil {
			return fmt.Errorf("layer %d: the expert source returned no expert %d", l, e)
		}
		cs := oneExpertChecks(c, e, x)
		if err := runChecks(l, cs[:]); err != nil {
			return err
		}
	}
	return nil
}

// loadExperts sets layer i's router and experts from m's merged expert
// tensors: ffn_gate_exps and ffn_up_exps hold Experts slabs of ExpertFFN
// rows of Dim, ffn_down_exps Experts slabs of Dim rows of ExpertFFN (GGUF
// dims [cols, rows, experts]). Each expert's tensors are views of its slab.
func loadExperts(m *gguf.Mapped, cfg *Config, i int, l *Layer) error {
	n := cfg.Experts
	p := fmt.Sprintf("blk.%d.", i)
	l.Experts = make([]Expert, n)
	for _, s := range expertParts(cfg) {
		name := p + s.merged
		ti, ok := m.Tensor(name)
		if !ok {
			return fmt.Errorf("missing tensor %s", name)
		}
		want := []uint64{uint64(s.cols), uint64(s.rows), uint64(n)}
		if len(ti.Dims) != 3 || !slices.Equal(ti.Dims, want) {
			return fmt.Errorf("tensor %s has dims %v, want %v", name, ti.Dims, want)
		}
		if !ti.Type.Known() {
			return fmt.Errorf("tensor %s: unsupported type %v", name, ti.Type)
		}
		rb, err := ti.Type.RowBytes(int64(s.cols))
		if err != nil {
			return fmt.Errorf("tensor %s: %w", name, err)
		}
		data := m.Data(ti)
		slab := int(rb) * s.rows
		if len(data) != slab*n {
			return fmt.Errorf("tensor %s: %d bytes of data, want %d", name, len(data), slab*n)
		}
		for e := range l.Experts {
			*s.field(&l.Experts[e]) = Tensor{Name: expertName(name, e), Type: ti.Type, Rows: s.rows, Cols: s.cols,
				Data: data[e*slab : (e+1)*slab : (e+1)*slab]}
		}
	}
	return nil
}

// route is one token's choice of one expert.
type route struct {
	t, slot int     // the token and which of its picks this is
	e       int     // the expert
	w       float32 // its renormalised weight
}

// moeScratch holds a MoE block's activations: router scores per token,
// and per (token, pick) pair the expert's hidden and output rows.
type moeScratch struct {
	scores         [][]float32
	routes, sorted []route // as picked, and grouped by expert
	gate, up, out  [][]float32
	buf            []float32
	xs, gs, us, os [][]float32 // views grouped by expert
	prompt         []bool      // whether each grouped pair's token is a prompt's (Step.Prompt)
	ops            []matOp
	picked, starts []int     // the distinct experts picked, increasing, and where each's run starts
	weights        []*Expert // their weights
	// A split expert's part (Routing.Split): views of its gate and up's
	// first rows and its down's first columns, and its pairs' inputs to
	// the down cut to them.
	part           Expert
	partGs, partUs [][]float32
	// The next layer's prediction (prefetchNext): the normed residual,
	// the router's scores, the picks and the distinct experts.
	aheadBuf    []float32
	aheadXn     [][]float32
	aheadScores [][]float32
	aheadRoutes []route
	ahead       []int
}

// sizeAhead makes room for predicting T tokens' picks.
func (s *moeScratch) sizeAhead(c *Config, T int) {
	n := T * (c.Dim + c.Experts)
	if cap(s.aheadBuf) < n {
		s.aheadBuf = make([]float32, n)
	}
	buf := s.aheadBuf[:n]
	s.aheadXn = carveRows(s.aheadXn, &buf, T, c.Dim)
	s.aheadScores = carveRows(s.aheadScores, &buf, T, c.Experts)
}

// promptOf is the prompt marks of grouped pairs [lo, hi), nil where the
// pass marked none (an FFN called alone).
func (s *moeScratch) promptOf(lo, hi int) []bool {
	if len(s.prompt) == 0 {
		return nil
	}
	return s.prompt[lo:hi]
}

// carveRows sets dst to n rows of w elements cut from the front of *buf,
// which keeps the rest.
func carveRows(dst [][]float32, buf *[]float32, n, w int) [][]float32 {
	dst = dst[:0]
	for range n {
		dst = append(dst, (*buf)[:w:w])
		*buf = (*buf)[w:]
	}
	return dst
}

// size makes room for T tokens.
func (s *moeScratch) size(c *Config, T int) {
	k := c.ExpertsUsed
	widths := []int{c.Experts * T, c.ExpertFFN * T * k, c.ExpertFFN * T * k, c.Dim * T * k}
	total := 0
	for _, w := range widths {
		total += w
	}
	if cap(s.buf) < total {
		s.buf = make([]float32, total)
	}
	buf := s.buf[:total]
	s.scores = carveRows(s.scores, &buf, T, c.Experts)
	s.gate = carveRows(s.gate, &buf, T*k, c.ExpertFFN)
	s.up = carveRows(s.up, &buf, T*k, c.ExpertFFN)
	s.out = carveRows(s.out, &buf, T*k, c.Dim)
}

// pick fills routes with each token's top-k experts by router score and
// their weights: the softmax over all experts, renormalised over the picked
// ones (equal to a softmax over the picked scores). Ties go to the lower
// expert index.
func pick(routes []route, scores [][]float32, k int) []route {
	routes = routes[:0]
	for t, sc := range scores {
		first := len(routes)
		for e, v := range sc {
			// Insertion into the token's sorted top-k.
			n := len(routes) - first
			if n == k && !(v > sc[routes[len(routes)-1].e]) {
				continue
			}
			if n < k {
				routes = append(routes, route{})
			}
			j := len(routes) - 1
			for ; j > first && v > sc[routes[j-1].e]; j-- {
				routes[j] = routes[j-1]
			}
			routes[j] = route{t: t, e: e}
		}
		top := routes[first:]
		mx := sc[top[0].e]
		var sum float64
		for i := range top {
			sum += math.Exp(float64(sc[top[i].e] - mx))
		}
		for i := range top {
			top[i].slot = i
			top[i].w = float32(math.Exp(float64(sc[top[i].e]-mx)) / sum)
		}
	}
	return routes
}

// moe runs a MoE feed-forward block over the batch in the scratch, whose
// sc.xn holds the normalised hidden states: sc.h += Σ w·expert(xn).
func (m *Model) moe(ctx context.Context, l int, w *Layer) error {
	c := &m.Config
	sc := &m.sc
	ms := &sc.moe
	T := len(sc.h)
	ms.size(c, T)
	var err error
	if ms.routes, err = m.route(l, &w.Router, sc.xn, ms.scores, ms.routes); err != nil {
		return err
	}
	if m.routeCounts != nil {
		for _, r := range ms.routes {
			m.routeCounts[l][r.e]++
		}
	}
	return m.moeRouted(ctx, l, w, true)
}

// route scores the rows xn by layer l's router into scores, adds the
// router skew (SetRouterSkew), and picks each row's top experts into
// routes: a layer's routing, and prefetchNext's prediction of it.
func (m *Model) route(l int, router *Tensor, xn, scores [][]float32, routes []route) ([]route, error) {
	if err := m.matmul(matOp{w: router, xs: xn, ys: scores}); err != nil {
		return routes, err
	}
	if m.skew != nil {
		for _, row := range scores {
			for e, v := range m.skew[l] {
				row[e] += v
			}
		}
	}
	return pick(routes, scores, m.Config.ExpertsUsed), nil
}

// prefetchNext predicts layer l's picks from the residual in the scratch
// (the one the layer before feeds its FFN) and asks the expert source,
// when it is an ExpertPrefetcher with l's gate, to read them ahead (on
// an FFN device, those m.aheadKeep keeps).
func (m *Model) prefetchNext(ctx context.Context, l int) error {
	c := &m.Config
	pf, ok := m.experts.(ExpertPrefetcher)
	if !ok || l >= c.Layers {
		return nil
	}
	T := len(m.sc.h)
	norm, router, ok := pf.Gate(l, T)
	if !ok {
		return nil
	}
	if err := runChecks(l, []tensorCheck{
		{norm, "ffn_norm.weight", 1, c.Dim, true, -1},
		{router, "ffn_gate_inp.weight", c.Experts, c.Dim, false, -1},
	}); err != nil {
		return fmt.Errorf("predicting layer %d's experts: %w", l, err)
	}
	ms := &m.sc.moe
	ms.sizeAhead(c, T)
	m.norm(ms.aheadXn, m.sc.h, norm)
	var err error
	if ms.aheadRoutes, err = m.route(l, router, ms.aheadXn, ms.aheadScores, ms.aheadRoutes); err != nil {
		return fmt.Errorf("predicting layer %d's experts: %w", l, err)
	}
	ms.ahead = ms.ahead[:0]
	for _, r := range ms.aheadRoutes {
		if m.aheadKeep == nil || m.aheadKeep(l, r.e) {
			ms.ahead = append(ms.ahead, r.e)
		}
	}
	slices.Sort(ms.ahead)
	ms.ahead = slices.Compact(ms.ahead)
	pf.Prefetch(ctx, l, ms.ahead)
	return nil
}

// moeRouted runs the experts of ms.routes (sized for the batch, each
// route's slot its place among its token's ExpertsUsed picks) over the
// batch in the scratch: sc.h += Σ w·expert(xn) over the routes listed.
//
// With ahead set (the model's own routing), once the layer's experts are
// at hand it has the next layer's predicted experts read ahead
// (prefetchNext).
func (m *Model) moeRouted(ctx context.Context, l int, w *Layer, ahead bool) error {
	c := &m.Config
	sc := &m.sc
	ms := &sc.moe
	// Group the pairs by expert (stable: tokens keep their order), so each
	// picked expert is one product over all of its tokens.
	ms.sorted = append(ms.sorted[:0], ms.routes...)
	byExpert := ms.sorted
	slices.SortStableFunc(byExpert, func(a, b route) int { return cmp.Compare(a.e, b.e) })
	ms.xs, ms.gs, ms.us, ms.os = ms.xs[:0], ms.gs[:0], ms.us[:0], ms.os[:0]
	ms.prompt = ms.prompt[:0]
	for _, r := range byExpert {
		pair := r.t*c.ExpertsUsed + r.slot
		if len(sc.prompt) > 0 {
			ms.prompt = append(ms.prompt, sc.prompt[r.t])
		}
		ms.xs = append(ms.xs, sc.xn[r.t])
		ms.gs = append(ms.gs, ms.gate[pair])
		ms.us = append(ms.us, ms.up[pair])
		ms.os = append(ms.os, ms.out[pair])
	}
	// Each picked expert's pairs are one run of byExpert: starts[j] is
	// where expert picked[j]'s run starts (and starts[len] the end).
	ms.picked, ms.starts = ms.picked[:0], ms.starts[:0]
	for i, r := range byExpert {
		if i == 0 || byExpert[i-1].e != r.e {
			ms.picked, ms.starts = append(ms.picked, r.e), append(ms.starts, i)
		}
	}
	if len(ms.picked) == 0 {
		return nil
	}
	ms.starts = append(ms.starts, len(byExpert))
	ms.weights = slices.Grow(ms.weights[:0], len(ms.picked))[:len(ms.picked)]
	clear(ms.weights)
	if err := m.pickedExperts(ctx, l, w, ms.picked, ms.weights); err != nil {
		return err
	}
	if ahead && m.experts != nil {
		if err := m.prefetchNext(ctx, l+1); err != nil {
			return err
		}
	}
	// The weight bytes this block reads: each picked expert once, whatever
	// its tokens (a split expert's part only, added below).
	for j, x := range ms.weights {
		if ms.picked[j] != m.split.Expert || m.split.Cols == 0 {
			m.expertRead += x.Bytes()
		}
	}
	// A split expert's part: its gate and up's first cols rows, its
	// down's first cols columns (rows a full row apart), on its pairs'
	// activations cut to as many.
	split, cols, stride := -1, m.split.Cols, 0
	if cols > 0 {
		if j, ok := slices.BinarySearch(ms.picked, m.split.Expert); ok {
			split = j
			x := ms.weights[j]
			ms.part = Expert{
				Gate: Tensor{Name: x.Gate.Name, Type: x.Gate.Type, Rows: cols, Cols: x.Gate.Cols, Data: x.Gate.Data[:cols*x.Gate.rowBytes()]},
				Up:   Tensor{Name: x.Up.Name, Type: x.Up.Type, Rows: cols, Cols: x.Up.Cols, Data: x.Up.Data[:cols*x.Up.rowBytes()]},
			}
			stride = x.Down.rowBytes()
			d := &ms.part.Down
			*d = Tensor{Name: x.Down.Name, Type: x.Down.Type, Rows: x.Down.Rows, Cols: cols}
			d.Data = x.Down.Data[:(d.Rows-1)*stride+d.rowBytes()]
			// The down's part is its rows' first cols columns, not the
			// span they lie in.
			m.expertRead += int64(len(ms.part.Gate.Data)+len(ms.part.Up.Data)) + int64(d.Rows)*int64(d.rowBytes())
			lo, hi := ms.starts[j], ms.starts[j+1]
			ms.partGs, ms.partUs = ms.partGs[:0], ms.partUs[:0]
			for i := lo; i < hi; i++ {
				ms.partGs, ms.partUs = append(ms.partGs, ms.gs[i][:cols]), append(ms.partUs, ms.us[i][:cols])
			}
		}
	}
	// One matmul for every picked expert's gate and up, one for the downs.
	ms.ops = ms.ops[:0]
	for j, x := range ms.weights {
		lo, hi := ms.starts[j], ms.starts[j+1]
		if j == split {
			x = &ms.part
		}
		pr := ms.promptOf(lo, hi)
		ms.ops = append(ms.ops, matOp{w: &x.Gate, xs: ms.xs[lo:hi], ys: ms.gs[lo:hi], prompt: pr}, matOp{w: &x.Up, xs: ms.xs[lo:hi], ys: ms.us[lo:hi], prompt: pr})
	}
	if err := m.matmul(ms.ops...); err != nil {
		return err
	}
	ms.ops = ms.ops[:0]
	for j, x := range ms.weights {
		lo, hi := ms.starts[j], ms.starts[j+1]
		if j == split {
			ms.ops = append(ms.ops, matOp{w: &ms.part.Down, stride: stride, xs: ms.partGs, ys: ms.os[lo:hi], glu: ms.partUs})
			continue
		}
		ms.ops = append(ms.ops, matOp{w: &x.Down, xs: ms.gs[lo:hi], ys: ms.os[lo:hi], glu: ms.us[lo:hi], prompt: ms.promptOf(lo, hi)})
	}
	if err := m.matmul(ms.ops...); err != nil {
		return err
	}
	// Sum each token's picks in pick order, so a token's result does not
	// depend on the batch it ran in, then add the sum to the residual.
	for t := range sc.tmp {
		clear(sc.tmp[t])
	}
	for _, r := range ms.routes {
		axpy(sc.tmp[r.t], r.w, ms.out[r.t*c.ExpertsUsed+r.slot])
	}
	for t := range sc.h {
		axpy(sc.h[t], 1, sc.tmp[t])
	}
	return nil
}

// Routing is a batch's choice of experts made elsewhere (engine/gpu routes
// on the device): token t's j-th pick is expert IDs[t*k+j] with weight
// Weights[t*k+j], k being the config's ExpertsUsed, in the order the
// router ranked them (the order FFN sums them in).
type Routing struct {
	IDs     []int32
	Weights []float32
	// Split, where its Cols is not 0, has expert Split.Expert computed
	// over the first Split.Cols of its FFN width only: gate and up's
	// first rows, the down's first columns. Another device computes the
	// rest of it, and the two parts' outputs add up to the expert's.
	Split ExpertSplit
}

// ExpertSplit names an expert computed in part (Routing.Split): the first
// Cols of its FFN width, a whole number of its down's blocks.
type ExpertSplit struct{ Expert, Cols int }

// FFNRouted is FFN for a MoE layer whose routing r was computed elsewhere:
// h += Σ w·expert(norm(h)) over each token's picks for which keep(expert)
// holds (nil keeps all), in pick order. With the router's own routing and
// keep nil it gives FFN's bits; a GPU that computes the experts it holds
// passes the rest here. The routes are not counted in ExpertCounts (the
// router that made them counts them).
func (m *Model) FFNRouted(ctx context.Context, l int, w *Layer, h [][]float32, r Routing, keep func(e int) bool) error {
	return m.FFNRoutedBeside(ctx, l, w, h, r, keep, nil)
}

// FFNRoutedBeside is FFNRouted with beside, when not nil, run exactly
// once on the caller's goroutine: in the call's first step of matrix
// products that has an item for every thread, after that step's workers
// have started, or at the end when the call has no such step (nothing
// kept, or an error first). A GPU's host thread passes the launches of
// its own share of the layer, which then overlap the CPU's work instead
// of delaying its start; beside must not use the model.
func (m *Model) FFNRoutedBeside(ctx context.Context, l int, w *Layer, h [][]float32, r Routing, keep func(e int) bool, beside func()) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.beside = beside
	defer func() {
		if b := m.beside; b != nil {
			m.beside = nil
			b()
		}
	}()
	c := &m.Config
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("routed ffn of layer %d: %w", l, err)
	}
	if !c.MoE() {
		return fmt.Errorf("routed ffn of layer %d: not a mixture-of-experts model", l)
	}
	if l < 0 || l >= c.Layers {
		return fmt.Errorf("routed ffn of layer %d: outside [0, %d)", l, c.Layers)
	}
	if err := c.checkFFN(l, w); err != nil {
		return fmt.Errorf("routed ffn: %w", err)
	}
	k := c.ExpertsUsed
	if len(r.IDs) != len(h)*k || len(r.Weights) != len(h)*k {
		return fmt.Errorf("routed ffn of layer %d: %d ids and %d weights for %d rows of %d picks", l, len(r.IDs), len(r.Weights), len(h), k)
	}
	for t, row := range h {
		if len(row) != c.Dim {
			return fmt.Errorf("routed ffn of layer %d: row %d has %d elements, the model's width is %d", l, t, len(row), c.Dim)
		}
	}
	for i, e := range r.IDs {
		if e < 0 || int(e) >= c.Experts {
			return fmt.Errorf("routed ffn of layer %d: row %d's pick %d is expert %d of %d", l, i/k, i%k, e, c.Experts)
		}
	}
	if sp := r.Split; sp.Cols != 0 {
		if err := m.checkSplit(l, w, sp); err != nil {
			return fmt.Errorf("routed ffn of layer %d: %w", l, err)
		}
	}
	if len(h) == 0 {
		return nil
	}
	m.prepare(len(h), 0)
	sc := &m.sc
	ms := &sc.moe
	ms.size(c, len(h))
	ms.routes = ms.routes[:0]
	for i, e := range r.IDs {
		if keep == nil || keep(int(e)) {
			ms.routes = append(ms.routes, route{t: i / k, slot: i % k, e: int(e), w: r.Weights[i]})
		}
	}
	if len(ms.routes) == 0 {
		return nil
	}
	for t, row := range h {
		copy(sc.h[t], row)
	}
	m.norm(sc.xn, sc.h, &w.FFNNorm)
	m.split = r.Split
	err := m.moeRouted(ctx, l, w, m.aheadKeep != nil)
	m.split = ExpertSplit{}
	if err != nil {
		return fmt.Errorf("routed ffn of layer %d: %w", l, err)
	}
	for t, row := range h {
		copy(row, sc.h[t])
	}
	return nil
}

// checkSplit checks a routed call's split expert sp against layer l's
// experts (w's, or the expert source's: their shapes are the config's):
// inside the FFN width and a whole number of the down's blocks.
func (m *Model) checkSplit(l int, w *Layer, sp ExpertSplit) error {
	c := &m.Config
	if sp.Expert < 0 || sp.Expert >= c.Experts {
		return fmt.Errorf("split expert %d of %d", sp.Expert, c.Experts)
	}
	if sp.Cols < 0 || sp.Cols >= c.ExpertFFN {
		return fmt.Errorf("expert %d split at %d of its %d FFN columns", sp.Expert, sp.Cols, c.ExpertFFN)
	}
	if len(w.Experts) > 0 {
		d := &w.Experts[0].Down
		if _, err := d.Type.RowBytes(int64(sp.Cols)); err != nil {
			return fmt.Errorf("expert %d split at column %d: not a whole number of %v blocks: %w", sp.Expert, sp.Cols, d.Type, err)
		}
	}
	return nil
}

// SetRouterSkew makes later passes add s·ln(1/(r+1)) to each expert's
// router score, r being the expert's rank in a fixed order of each layer's
// experts (a permutation seeded by the layer): the routing then follows a
// Zipf law of exponent s over the experts, on top of the model's own
// preference. It is a benchmark's stand-in for the skew trained routers
// have, where random weights route almost uniformly, and says nothing of
// a real model. 0 turns it off; a dense model refuses it.
func (m *Model) SetRouterSkew(s float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.Config.MoE() {
		return errors.New("router skew: not a mixture-of-experts model")
	}
	if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return fmt.Errorf("router skew %v: want a finite exponent >= 0", s)
	}
	if s == 0 {
		m.skew = nil
		return nil
	}
	m.skew = RouterSkewBias(&m.Config, s)
	return nil
}

// RouterSkewBias is the table SetRouterSkew adds to each layer's router
// scores for exponent s > 0 (per layer, per expert): exported so that a
// device routing on its own (engine/gpu) skews its routing identically.
func RouterSkewBias(c *Config, s float64) [][]float32 {
	skew := make([][]float32, c.Layers)
	for l := range skew {
		r := rand.New(rand.NewPCG(uint64(l), 0x5ca1ab1e))
		skew[l] = make([]float32, c.Experts)
		for rank, e := range r.Perm(c.Experts) {
			skew[l][e] = float32(-s * math.Log(float64(rank+1)))
		}
	}
	return skew
}

// newRouteCounts returns zeroed routing counters for a MoE config, nil
// for a dense one.
func newRouteCounts(c *Config) [][]uint64 {
	if !c.MoE() {
		return nil
	}
	counts := make([][]uint64, c.Layers)
	flat := make([]uint64, c.Layers*c.Experts)
	for l := range counts {
		counts[l] = flat[l*c.Experts : (l+1)*c.Experts : (l+1)*c.Experts]
	}
	return counts
}

// ExpertCounts returns, per layer and expert, how many tokens the router
// sent to the expert since the model was made: the expected use from
// which expert placement is chosen. Nil for a dense model.
func (m *Model) ExpertCounts() [][]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.routeCounts == nil {
		return nil
	}
	out := newRouteCounts(&m.Config)
	for l := range out {
		copy(out[l], m.routeCounts[l])
	}
	return out
}
