package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Hybrid puts the CPU beside the GPU for tier-B layers (engine/tier's
// hybrid placement). A layer whose FFN the CPU takes has only its
// attention copied into a slot; the GPU computes the attention, the hidden
// state crosses to pinned host memory, the CPU computes the FFN from the
// layer's pinned copy (engine/model's FFNDevice on engine/gemv's kernels)
// and the state crosses back. A layer the CPU computes whole is not copied
// at all: its attention runs over a KV cache of the layer's own in host
// memory (engine/model's NewCache), and a run of such layers hands the
// state over once. Meanwhile the copy stream keeps filling the slots with
// the next streamed layers, so a pass moves the off-GPU bytes over host
// DRAM and PCIe at once. No device memory is added: the GPU's cache keeps
// every layer as before, and the rows one side computed are moved to the
// other before a pass needs them there (a layer's place changes with the
// batch size).
type Hybrid struct {
	// Plans, when given, fix the placement: Plans[b-1] lists the layers
	// whose FFN the CPU computes in a pass of b tokens and Whole[b-1]
	// (when Whole has that many entries) those it computes whole; passes
	// of more tokens than len(Plans) stream every layer. Each layer must
	// be on tier B and not packed, and a whole one of a dense model. Nil
	// plans at load from HostToDevice and the CPU's FFN rate measured
	// there, for passes of 1 to MaxSeqs tokens.
	Plans [][]int
	Whole [][]int
	// HostToDevice is the pinned copy rate (bytes/s) the plans balance
	// the CPU against; 0 means tier.DefaultLinks'.
	HostToDevice float64
	// FFNOnly keeps the CPU to FFNs: every layer's attention, and its KV
	// cache, stays on the GPU (no host copy of the cache).
	FFNOnly bool
	// Hop is the cost of one layer's trip to the CPU (the wait for the
	// GPU and the hidden state's copies both ways) the planner charges;
	// 0 means tier.DefaultHop.
	Hop time.Duration
}

// HybridStats counts the CPU's share of the passes.
type HybridStats struct {
	// Passes is the passes that computed some FFN on the CPU; Layers the
	// FFNs it computed and Bytes the weight bytes it read for them.
	Passes int   `json:"passes"`
	Layers int64 `json:"layers"`
	Bytes  int64 `json:"bytes"`
	// Whole is the layers it computed whole (their bytes in Bytes too).
	Whole int64 `json:"whole_layers"`
	// Busy is the CPU's time in FFNs and whole layers; Hop the time spent
	// handing the hidden state over (waiting for the GPU to reach the
	// layer and the two copies).
	Busy time.Duration `json:"busy_ns"`
	Hop  time.Duration `json:"hop_ns"`
	// Synced is the KV-cache rows moved between the GPU's cache and the
	// CPU's (when a layer's place changed) and SyncTime the time it took.
	Synced   int64         `json:"kv_rows_synced"`
	SyncTime time.Duration `json:"kv_sync_ns"`
}

// hybrid is the model's CPU share (nil without Options.Hybrid).
type hybrid struct {
	dev    *model.FFNDevice
	host   map[int]*model.Layer // eligible layers' FFN tensors in tier B's pinned memory
	layers map[int]*model.Layer // the same layers' every tensor (nil for a model the CPU cannot take whole)
	attn   map[int]int64        // eligible layers' bytes with the FFN on the CPU (whole: tierB.size)
	plans  []tier.HybridPlan    // by batch size - 1
	rates  []float64            // CPU FFN rate each plan was made for, by batch size - 1 (nil with given plans)
	// wholeRates is the CPU's rate on whole layers each plan was made
	// for (their bytes over their time, the attention's work in it).
	wholeRates []float64
	planner    *hybridPlanner // what re-planning needs (nil with given plans)
	seen       []hybridSeen   // the CPU's FFNs in passes since the last plan, by batch size - 1
	lastT      int            // the previous pass's tokens when the CPU took part in it, else 0
	// The CPU's time (its work and hand-overs) in a pass before compute
	// reached the first layer the pipeline moves (beforeRing), and since
	// it released the last one so far (sinceRing); ringSeen says one was.
	beforeRing, sinceRing time.Duration
	ringSeen              bool
	applied               int                // plan whose lengths the pipeline has; -1: every layer whole
	on                    []bool             // per layer: FFN on the CPU this pass
	whole                 []bool             // per layer: the whole layer on the CPU this pass
	onHost                bool               // in a pass: the hidden state is in buf, not on the device
	toks                  []model.LayerToken // this pass's rows' caches and positions, for whole layers
	stage                 *cudadrv.HostMem   // mapped rows of keys and values moving between the caches
	stageK                []float32          // stage's key rows
	stageV                []float32          // stage's value rows
	stageAt               cudadrv.DevPtr     // stage's device address
	hand                  []time.Duration    // per layer: this pass's hand-over wait before its FFN on the CPU
	ffn                   []time.Duration    // per layer: this pass's FFN on the CPU
	buf                   *cudadrv.HostMem   // hidden state, capT rows of Dim float32, mapped
	bufDev                cudadrv.DevPtr     // buf's device address
	rows                  [][]float32        // buf's rows
	stats                 HybridStats
}

// hybridPlanner holds what PlanHybrid is given, so that a batch size's
// plan can be made again from the rate the CPU shows in passes.
type hybridPlanner struct {
	layers     []tier.HybridLayer
	depth      int
	h2d        float64
	hop        time.Duration
	lead, tail time.Duration // the GPU's time outside the streamed layers, from passes
}

// hybridSeen is the CPU's FFN work at one batch size in passes since that
// size's plan was made.
type hybridSeen struct {
	passes  int
	bytes   int64
	busy    time.Duration
	replans int
	// The same for the whole layers the CPU computed.
	wholeBytes int64
	wholeBusy  time.Duration
	// The copy stage's bytes and busy time in those passes: PCIe's rate
	// while the CPU reads the same DRAM.
	copyBytes int64
	copyBusy  time.Duration
	// The GPU's time before the first streamed layer and after the last,
	// summed over those passes (engine/stream's Stats.Lead and Tail).
	lead, tail time.Duration
}

// Re-planning: once a batch size's plan has run replanPasses passes, the
// CPU's rate in them (weight bytes over time in FFNs) and the copy
// stage's replace the rates the plan was made for if either differs by
// more than replanDrift, or the GPU's time outside the streamed layers
// (Lead and Tail, unknown at load) differs from the planned by more than
// replanDrift/4 of the pass. In a pass the CPU shares DRAM with the copy
// engine, which reads the streamed layers from the same memory, so both
// run slower than when measured alone; the plan made for the rates seen
// is the one that balances the two links. Each batch size is re-planned
// at most maxReplans times, so a rate that moves with the plan cannot
// make it oscillate.
const (
	replanPasses = 3
	// wholeRateAt is the position at which the CPU's rate on whole
	// layers is measured at load: a short conversation's, whose attention
	// reads a cache of that many positions.
	wholeRateAt = 256
	replanDrift = 0.08
	maxReplans  = 3
)

// setupHybrid builds the CPU share after tier B is loaded: the FFN views
// of every tier-B layer the CPU can read (not packed), the pinned buffer
// of the hidden state, and the plans (given, or made from the CPU's rate
// measured here).
func (m *Model) setupHybrid(ctx context.Context, c *cudadrv.Ctx, w *model.Weights, streamed []bool, base []int64) error {
	o := m.opts.Hybrid
	if o == nil {
		return nil
	}
	if m.tb == nil || m.tb.pipe == nil {
		return fmt.Errorf("hybrid: no tier-B layers for the CPU to share")
	}
	cfg := &m.Config
	lk := kindOf(cfg)
	dev, err := model.NewFFNDevice(*cfg, gemv.Detect())
	if err != nil {
		return fmt.Errorf("hybrid: %w", err)
	}
	h := &hybrid{dev: dev, host: map[int]*model.Layer{}, layers: map[int]*model.Layer{}, attn: map[int]int64{}, applied: -1,
		on: make([]bool, cfg.Layers), whole: make([]bool, cfg.Layers),
		hand: make([]time.Duration, cfg.Layers), ffn: make([]time.Duration, cfg.Layers)}
	for i, s := range streamed {
		if !s || m.tb.tierC[i] || m.pk.layer(i) != nil {
			continue
		}
		L := &w.Layers[i]
		var hl model.Layer
		var whole model.Layer
		wts := layerTensors(&whole, lk)
		off := base[i]
		for j, t := range layerTensors(L, lk) {
			view := *t
			view.Data = m.tb.hostBytes[off : off+int64(len(t.Data))]
			*wts[j] = view
			switch t {
			case &L.FFNNorm:
				h.attn[i] = off - base[i]
				hl.FFNNorm = view
			case &L.Gate:
				hl.Gate = view
			case &L.Up:
				hl.Up = view
			case &L.Down:
				hl.Down = view
			case &L.PostFFNNorm:
				hl.PostFFNNorm = view
			}
			off += alignUp(int64(len(t.Data)))
		}
		h.host[i] = &hl
		if !o.FFNOnly && !cfg.MoE() {
			h.layers[i] = &whole
		}
	}
	maxT := len(m.slots)
	if o.Plans != nil {
		maxT = len(o.Plans)
		if len(o.Whole) > len(o.Plans) {
			return fmt.Errorf("hybrid: %d plans of whole layers for %d plans", len(o.Whole), len(o.Plans))
		}
		for b, ls := range o.Plans {
			p := tier.HybridPlan{Batch: b + 1, CPU: slices.Sorted(slices.Values(ls))}
			if b < len(o.Whole) {
				p.Whole = slices.Sorted(slices.Values(o.Whole[b]))
			}
			for _, l := range append(slices.Clone(p.CPU), p.Whole...) {
				if h.host[l] == nil {
					return fmt.Errorf("hybrid: plan for %d tokens: layer %d is not a tier-B layer the CPU can read (resident, tier C or packed)", b+1, l)
				}
				if slices.Contains(p.Whole, l) && h.layers[l] == nil {
					return fmt.Errorf("hybrid: plan for %d tokens: layer %d whole on the CPU, which takes FFNs only", b+1, l)
				}
				if slices.Contains(p.CPU, l) && slices.Contains(p.Whole, l) {
					return fmt.Errorf("hybrid: plan for %d tokens: layer %d both whole and by its FFN on the CPU", b+1, l)
				}
			}
			h.plans = append(h.plans, p)
		}
	}
	if maxT > 0 {
		if err := h.allocStage(c, cfg); err != nil {
			return err
		}
		if h.buf, err = c.HostAlloc(maxT*cfg.Dim*4, cudadrv.HostAllocDeviceMap); err != nil {
			return fmt.Errorf("hybrid: hidden-state buffer: %w", err)
		}
		if h.bufDev, err = c.HostDevicePointer(h.buf); err != nil {
			return fmt.Errorf("hybrid: hidden-state buffer: %w", err)
		}
		vals, err := cudadrv.Values[float32](h.buf.Bytes())
		if err != nil {
			return fmt.Errorf("hybrid: %w", err)
		}
		for t := range maxT {
			h.rows = append(h.rows, vals[t*cfg.Dim:(t+1)*cfg.Dim])
		}
	}
	m.hy = h
	if o.Plans != nil {
		return nil
	}
	return h.plan(ctx, m, o, maxT, streamed)
}

// plan measures the CPU's rates on the eligible layers at 1, 2, 4 and 8
// tokens (interpolating between), on their FFNs and on the whole layers
// (at position wholeRateAt), and plans each batch size from 1 to maxT.
func (h *hybrid) plan(ctx context.Context, m *Model, o *Hybrid, maxT int, streamed []bool) error {
	cfg := &m.Config
	var layers []tier.HybridLayer // every streamed layer (tiers B and C), in order
	var probe []model.FFNLayer    // the ones the CPU can take, to measure it on
	var wholeProbe []model.FFNLayer
	for i := range cfg.Layers {
		if !streamed[i] && !m.tb.tierC[i] {
			continue
		}
		hl := tier.HybridLayer{Index: i, Full: m.tb.size[i], Attn: m.tb.size[i], Stored: m.tb.tierC[i]}
		if _, ok := h.host[i]; ok {
			hl.Attn, hl.FFN = h.attn[i], m.tb.size[i]-h.attn[i]
			probe = append(probe, model.FFNLayer{Index: i, W: h.host[i]})
		}
		if w, ok := h.layers[i]; ok {
			hl.Whole = true
			wholeProbe = append(wholeProbe, model.FFNLayer{Index: i, W: w})
		}
		layers = append(layers, hl)
	}
	if len(probe) == 0 {
		return nil
	}
	points, wholePoints := map[int]float64{}, map[int]float64{}
	at := min(wholeRateAt, m.maxCtx-1)
	for _, T := range []int{1, 2, 4, 8} {
		if T > maxT && T > 1 {
			break
		}
		rate, err := h.dev.Rate(ctx, probe, min(T, maxT))
		if err != nil {
			return fmt.Errorf("hybrid: measuring the CPU: %w", err)
		}
		points[T] = rate
		if len(wholeProbe) > 0 {
			if rate, err = h.dev.LayerRate(ctx, wholeProbe, min(T, maxT), at); err != nil {
				return fmt.Errorf("hybrid: measuring the CPU on whole layers: %w", err)
			}
			wholePoints[T] = rate
		}
	}
	h2d := o.HostToDevice
	if h2d <= 0 {
		h2d = tier.DefaultLinks().HostToDevice
	}
	hop := o.Hop
	if hop <= 0 {
		hop = tier.DefaultHop
	}
	h.planner = &hybridPlanner{layers: layers, depth: m.tb.pipe.Depth(), h2d: h2d, hop: hop}
	h.seen = make([]hybridSeen, maxT)
	for T := 1; T <= maxT; T++ {
		rate, whole := interpolateRate(points, T), 0.0
		if len(wholePoints) > 0 {
			whole = interpolateRate(wholePoints, T)
		}
		p, err := h.planner.plan(rate, whole, T)
		if err != nil {
			return err
		}
		h.rates = append(h.rates, rate)
		h.wholeRates = append(h.wholeRates, whole)
		h.plans = append(h.plans, p)
	}
	return nil
}

func (p *hybridPlanner) plan(rate, whole float64, T int) (tier.HybridPlan, error) {
	return tier.PlanHybrid(p.layers, p.depth, tier.HybridRates{HostToDevice: p.h2d, CPU: rate, CPUWhole: whole, Hop: p.hop, Lead: p.lead, Tail: p.tail}, T)
}

// replan makes batch size T's plan again from the CPU's rates in the
// passes since it was made (on FFNs and on whole layers, each its own:
// a whole layer's attention does work its bytes do not count), when
// enough passes ran and a rate drifted from the planned one (see
// replanPasses).
func (h *hybrid) replan(T int) error {
	if h.planner == nil || T > len(h.seen) {
		return nil
	}
	s := &h.seen[T-1]
	if s.passes < replanPasses || s.busy+s.wholeBusy <= 0 || s.replans >= maxReplans {
		return nil
	}
	seen, planned := h.rates[T-1], h.rates[T-1]
	if s.busy > 0 {
		seen = float64(s.bytes) / s.busy.Seconds()
	}
	whole, plannedWhole := h.wholeRates[T-1], h.wholeRates[T-1]
	if s.wholeBusy > 0 {
		whole = float64(s.wholeBytes) / s.wholeBusy.Seconds()
	}
	h2d := h.planner.h2d
	if s.copyBusy > 0 && s.copyBytes > 0 {
		h2d = float64(s.copyBytes) / s.copyBusy.Seconds()
	}
	lead, tail := s.lead/time.Duration(s.passes), s.tail/time.Duration(s.passes)
	outside := (lead + tail - h.planner.lead - h.planner.tail).Abs()
	s.passes, s.bytes, s.busy, s.wholeBytes, s.wholeBusy, s.copyBytes, s.copyBusy, s.lead, s.tail = 0, 0, 0, 0, 0, 0, 0, 0, 0
	wholeDrift := 0.0
	if plannedWhole > 0 {
		wholeDrift = math.Abs(whole/plannedWhole - 1)
	}
	if math.Abs(seen/planned-1) <= replanDrift && wholeDrift <= replanDrift && math.Abs(h2d/h.planner.h2d-1) <= replanDrift &&
		outside.Seconds() <= replanDrift/4*h.plans[T-1].Pass.Seconds() {
		return nil
	}
	h.planner.h2d, h.planner.lead, h.planner.tail = h2d, lead, tail
	p, err := h.planner.plan(seen, whole, T)
	if err != nil {
		return fmt.Errorf("hybrid: re-planning %d tokens at CPU %.3g (whole layers %.3g), H2D %.3g B/s: %w", T, seen, whole, h2d, err)
	}
	s.replans++
	h.rates[T-1], h.wholeRates[T-1], h.plans[T-1] = seen, whole, p
	if h.applied == T-1 {
		h.applied = -2 // set the lengths again
	}
	return nil
}

// interpolateRate is the CPU's rate at T tokens from the measured points:
// time per pass is interpolated linearly between them, and past the last
// one it grows in proportion to the tokens.
func interpolateRate(points map[int]float64, T int) float64 {
	if r, ok := points[T]; ok {
		return r
	}
	lo, hi := 0, 0
	for p := range points {
		if p < T && p > lo {
			lo = p
		}
		if p > T && (hi == 0 || p < hi) {
			hi = p
		}
	}
	if hi == 0 {
		return points[lo] * float64(lo) / float64(T)
	}
	// Seconds per byte, linear in T between lo and hi.
	a, b := 1/points[lo], 1/points[hi]
	f := float64(T-lo) / float64(hi-lo)
	return 1 / (a + f*(b-a))
}

// apply sets the pipeline's copy lengths and the per-layer flags for a
// pass of T tokens, between passes.
func (h *hybrid) apply(tb *tierB, T int) error {
	if h.lastT > 0 && h.lastT <= len(h.seen) {
		st := tb.pipe.LastPass()
		s := &h.seen[h.lastT-1]
		s.copyBytes += st.Copy.Bytes
		s.copyBusy += st.Copy.Busy
		// The pipeline's lead ends at the first layer it moves, after
		// the whole CPU layers before it; its tail starts when the last
		// one's slot goes back, before its FFN when the CPU takes it and
		// the whole CPU layers after it: the planner charges those to
		// their layers.
		s.lead += max(0, st.Lead-h.beforeRing)
		s.tail += max(0, st.Tail-h.sinceRing)
	}
	h.beforeRing, h.sinceRing, h.ringSeen = 0, 0, false
	if err := h.replan(T); err != nil {
		return err
	}
	want := -1
	if T <= len(h.plans) && len(h.plans[T-1].CPU)+len(h.plans[T-1].Whole) > 0 {
		want = T - 1
	}
	h.lastT = 0
	if want >= 0 {
		h.lastT = T
	}
	if want == h.applied {
		return nil
	}
	clear(h.on)
	clear(h.whole)
	var skip []int
	if want >= 0 {
		for _, l := range h.plans[want].CPU {
			h.on[l] = true
		}
		for _, l := range h.plans[want].Whole {
			h.whole[l] = true
		}
		skip = h.plans[want].Whole
	}
	// The pipeline neither copies nor waits for a whole CPU layer.
	if err := tb.pipe.SetSkip(skip); err != nil {
		h.applied = -2
		return fmt.Errorf("hybrid: %w", err)
	}
	for l := range h.host {
		n := tb.size[l]
		if h.on[l] {
			n = h.attn[l]
		}
		if err := tb.pipe.SetLength(l, n); err != nil {
			h.applied = -2 // unknown: set every length again next pass
			return fmt.Errorf("hybrid: %w", err)
		}
	}
	h.applied = want
	return nil
}

// cpuFFN runs layer l's FFN on the CPU for the pass's T rows of the
// hidden state: the state goes to mapped pinned memory, the compute
// stream drains, the CPU adds the FFN, and the way back is enqueued
// before the next layer's kernels. Both ways are kernels reading or
// writing the mapped buffer (kernels.Copy), not copies: a copy on the
// compute stream can wait behind the copy stream's bulk copies of
// streamed layers (measured: up to the whole queue, tens of
// milliseconds; BenchmarkHandoffBesideBulk), and every CPU layer hands
// over twice.
func (m *Model) cpuFFN(ctx context.Context, c *cudadrv.Ctx, l, T int) error {
	h := m.hy
	if ctx == nil {
		ctx = context.Background()
	}
	n := int64(T * m.Config.Dim)
	t0 := time.Now()
	if err := m.k.Copy(c, m.stream, h.bufDev, m.act.h, n); err != nil {
		return err
	}
	if err := c.StreamSync(m.stream); err != nil {
		return err
	}
	t1 := time.Now()
	if err := h.dev.Run(ctx, l, h.host[l], h.rows[:T]); err != nil {
		return err
	}
	t2 := time.Now()
	if err := m.k.Copy(c, m.stream, m.act.h, h.bufDev, n); err != nil {
		return err
	}
	h.stats.Layers++
	h.stats.Bytes += m.tb.size[l] - h.attn[l]
	h.stats.Busy += t2.Sub(t1)
	if T <= len(h.seen) {
		h.seen[T-1].bytes += m.tb.size[l] - h.attn[l]
		h.seen[T-1].busy += t2.Sub(t1)
	}
	h.stats.Hop += t1.Sub(t0) + time.Since(t2)
	h.hand[l], h.ffn[l] = t1.Sub(t0), t2.Sub(t1)
	h.cpuTime(time.Since(t0))
	return nil
}

// HybridPlans returns the CPU's placement per batch size (index b-1 for b
// tokens) and the CPU FFN rate measured for each (nil when the plans were
// given); ok is false without Options.Hybrid.
func (m *Model) HybridPlans() (plans []tier.HybridPlan, rates []float64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hy == nil {
		return nil, nil, false
	}
	return slices.Clone(m.hy.plans), slices.Clone(m.hy.rates), true
}

// HybridStats returns the CPU's share of the passes so far.
func (m *Model) HybridStats() HybridStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hy == nil {
		return HybridStats{}
	}
	return m.hy.stats
}

// release frees the pinned hidden-state buffer.
func (h *hybrid) release(c *cudadrv.Ctx) error {
	if h == nil {
		return nil
	}
	err := errors.Join(c.FreeHost(h.buf), c.FreeHost(h.stage))
	h.buf, h.bufDev, h.rows = nil, 0, nil
	h.stage, h.stageAt, h.stageK, h.stageV = nil, 0, nil, nil
	return err
}

// stageRows is how many positions of one layer's keys and values a
// synchronisation of the two caches moves at a time.
const stageRows = 1024

// allocStage allocates the mapped buffer the KV-cache rows cross in.
func (h *hybrid) allocStage(c *cudadrv.Ctx, cfg *model.Config) error {
	n := stageRows * cfg.KVDim()
	var err error
	if h.stage, err = c.HostAlloc(2*n*4, cudadrv.HostAllocDeviceMap); err != nil {
		return fmt.Errorf("hybrid: KV staging buffer: %w", err)
	}
	if h.stageAt, err = c.HostDevicePointer(h.stage); err != nil {
		return fmt.Errorf("hybrid: KV staging buffer: %w", err)
	}
	vals, err := cudadrv.Values[float32](h.stage.Bytes())
	if err != nil {
		return fmt.Errorf("hybrid: %w", err)
	}
	h.stageK, h.stageV = vals[:n], vals[n:2*n]
	return nil
}

// hostKV is a sequence's cache on the CPU's side, for the layers the CPU
// may compute whole, and how far each side's cache holds each layer's
// positions (a layer's place can differ between passes).
type hostKV struct {
	cache *model.Sequence
	// host[l] and dev[l]: the positions of layer l the CPU's cache and
	// the GPU's hold, from 0 (never past the sequence's Pos).
	host, dev []int
}

// newHostKV returns a sequence's empty CPU-side cache, or nil when the
// CPU computes no layer whole.
func (h *hybrid) newHostKV(layers, maxCtx int) (*hostKV, error) {
	if h == nil || len(h.layers) == 0 {
		return nil, nil
	}
	keep := make([]bool, layers)
	for l := range h.layers {
		keep[l] = true
	}
	c, err := h.dev.NewCache(maxCtx, keep)
	if err != nil {
		return nil, err
	}
	return &hostKV{cache: c, host: make([]int, layers), dev: make([]int, layers)}, nil
}

// cut forgets every position from n on, on both sides.
func (k *hostKV) cut(n int) {
	if k == nil {
		return
	}
	for l := range k.host {
		k.host[l], k.dev[l] = min(k.host[l], n), min(k.dev[l], n)
	}
}

// syncKV makes, before a pass, each step's cache hold every position
// before the step's on the side that computes each layer this pass: rows
// the GPU computed in earlier passes go to the CPU's cache for the layers
// the CPU takes whole now, and rows the CPU computed to the GPU's for the
// layers the GPU computes now. It runs on the device goroutine, the
// compute stream idle but for the pass's first kernels.
func (m *Model) syncKV(c *cudadrv.Ctx, steps []stepRef) error {
	h := m.hy
	cfg := &m.Config
	kvd := int64(cfg.KVDim())
	// LongRoPE's attention factor scales the CPU's keys (engine/model
	// rotates them by cosines and sines it multiplied); the GPU's stay
	// unscaled and its attention scale carries the factor.
	ks := float32(1)
	if af := cfg.RopeAttnFactor; af != 0 && af != 1 {
		ks = af
	}
	for _, st := range steps {
		kv := st.seq.kv
		if kv == nil {
			continue
		}
		pos := st.seq.pos
		for l := range h.layers {
			from, toHost := kv.dev[l], false
			if h.whole[l] {
				from, toHost = kv.host[l], true
			}
			for p0 := from; p0 < pos; p0 += stageRows {
				n := min(stageRows, pos-p0)
				t0 := time.Now()
				off := (int64(st.seq.slot)*int64(m.maxCtx) + int64(p0)) * kvd * 4
				sk, sv := h.stageK[:int64(n)*kvd], h.stageV[:int64(n)*kvd]
				kAt, vAt := h.stageAt, h.stageAt.Add(int64(len(h.stageK))*4)
				if toHost {
					if err := m.k.Copy(c, m.stream, kAt, m.kvK[l].Add(off), int64(n)*kvd); err != nil {
						return fmt.Errorf("keys of layer %d to the CPU: %w", l, err)
					}
					if err := m.k.Copy(c, m.stream, vAt, m.kvV[l].Add(off), int64(n)*kvd); err != nil {
						return fmt.Errorf("values of layer %d to the CPU: %w", l, err)
					}
					if err := c.StreamSync(m.stream); err != nil {
						return err
					}
					scaleRows(sk, ks)
					if err := kv.cache.PutRows(l, p0, sk, sv); err != nil {
						return err
					}
				} else {
					if err := kv.cache.Rows(l, p0, sk, sv); err != nil {
						return err
					}
					scaleRows(sk, 1/ks)
					if err := m.k.Copy(c, m.stream, m.kvK[l].Add(off), kAt, int64(n)*kvd); err != nil {
						return fmt.Errorf("keys of layer %d to the GPU: %w", l, err)
					}
					if err := m.k.Copy(c, m.stream, m.kvV[l].Add(off), vAt, int64(n)*kvd); err != nil {
						return fmt.Errorf("values of layer %d to the GPU: %w", l, err)
					}
					// The staging buffer is read before it is written again.
					if err := c.StreamSync(m.stream); err != nil {
						return err
					}
				}
				h.stats.Synced += int64(n)
				h.stats.SyncTime += time.Since(t0)
			}
			if toHost {
				kv.host[l] = pos
			} else {
				kv.dev[l] = pos
			}
		}
	}
	return nil
}

// scaleRows multiplies xs by f in place (nothing when f is 1).
func scaleRows(xs []float32, f float32) {
	if f == 1 {
		return
	}
	for i := range xs {
		xs[i] *= f
	}
}

// advanceKV records, after a full pass, which side's cache holds the
// positions the pass added for each layer the CPU may compute whole.
func (h *hybrid) advanceKV(steps []stepRef) {
	if h == nil {
		return
	}
	for _, st := range steps {
		kv := st.seq.kv
		if kv == nil {
			continue
		}
		end := st.seq.pos + st.n
		for l := range h.layers {
			if h.whole[l] {
				kv.host[l] = end
			} else {
				kv.dev[l] = end
			}
		}
	}
}

// cpuLayer runs layer l whole on the CPU for the pass's T rows: the hidden
// state goes to mapped pinned memory when it is on the device (the first
// of a run of CPU layers), and comes back after the last of the run (the
// next layer is the GPU's, or its attention is).
func (m *Model) cpuLayer(ctx context.Context, c *cudadrv.Ctx, l, T int) error {
	h := m.hy
	if ctx == nil {
		ctx = context.Background()
	}
	n := int64(T * m.Config.Dim)
	t0 := time.Now()
	if !h.onHost {
		if err := m.k.Copy(c, m.stream, h.bufDev, m.act.h, n); err != nil {
			return err
		}
		if err := c.StreamSync(m.stream); err != nil {
			return err
		}
		h.onHost = true
	}
	t1 := time.Now()
	if err := h.dev.RunLayer(ctx, l, h.layers[l], h.rows[:T], h.toks[:T]); err != nil {
		return err
	}
	t2 := time.Now()
	if l+1 >= len(h.whole) || !h.whole[l+1] {
		if err := m.k.Copy(c, m.stream, m.act.h, h.bufDev, n); err != nil {
			return err
		}
		h.onHost = false
	}
	b := m.tb.size[l]
	h.stats.Whole++
	h.stats.Bytes += b
	h.stats.Busy += t2.Sub(t1)
	if T <= len(h.seen) {
		h.seen[T-1].wholeBytes += b
		h.seen[T-1].wholeBusy += t2.Sub(t1)
	}
	h.stats.Hop += t1.Sub(t0) + time.Since(t2)
	h.hand[l], h.ffn[l] = t1.Sub(t0), t2.Sub(t1)
	h.cpuTime(time.Since(t0))
	return nil
}

// passTokens sets, for a pass's whole CPU layers, each row's CPU-side
// cache and position.
func (h *hybrid) passTokens(steps []stepRef) error {
	h.onHost = false
	h.toks = h.toks[:0]
	if !slices.Contains(h.whole, true) {
		return nil
	}
	for _, st := range steps {
		kv := st.seq.kv
		if kv == nil {
			return fmt.Errorf("hybrid: a sequence without a CPU-side cache")
		}
		for j := range st.n {
			h.toks = append(h.toks, model.LayerToken{Cache: kv.cache, Pos: st.seq.pos + j})
		}
	}
	return nil
}

// cpuTime counts d of the CPU's work in a pass for the lead and tail the
// pipeline measures (apply).
func (h *hybrid) cpuTime(d time.Duration) {
	if !h.ringSeen {
		h.beforeRing += d
	}
	h.sinceRing += d
}

// ringDone notes that compute released a layer the pipeline moved.
func (h *hybrid) ringDone() {
	h.ringSeen, h.sinceRing = true, 0
}
