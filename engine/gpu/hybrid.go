package gpu

import (
	"context"
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
// hybrid placement): a layer whose FFN the CPU takes has only its
// attention copied into a slot; the GPU computes the attention, the hidden
// state crosses to pinned host memory, the CPU computes the FFN from the
// layer's pinned copy (engine/model's FFNDevice on engine/gemv's kernels)
// and the state crosses back, while the copy stream keeps filling the
// slots with the next streamed layers. A pass then moves the off-GPU bytes
// over host DRAM and PCIe at once. No device memory is added.
type Hybrid struct {
	// Plans, when given, fix the placement: Plans[b-1] lists the layers
	// whose FFN the CPU computes in a pass of b tokens; passes of more
	// tokens than len(Plans) stream every layer. Each layer must be on
	// tier B and not packed. Nil plans at load from HostToDevice and the
	// CPU's FFN rate measured there, for passes of 1 to MaxSeqs tokens.
	Plans [][]int
	// HostToDevice is the pinned copy rate (bytes/s) the plans balance
	// the CPU against; 0 means tier.DefaultLinks'.
	HostToDevice float64
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
	// Busy is the CPU's time in FFNs; Hop the time spent handing the
	// hidden state over (waiting for the GPU to reach the layer and the
	// two copies).
	Busy time.Duration `json:"busy_ns"`
	Hop  time.Duration `json:"hop_ns"`
}

// hybrid is the model's CPU share (nil without Options.Hybrid).
type hybrid struct {
	dev     *model.FFNDevice
	host    map[int]*model.Layer // eligible layers' FFN tensors in tier B's pinned memory
	attn    map[int]int64        // eligible layers' bytes with the FFN on the CPU (whole: tierB.size)
	plans   []tier.HybridPlan    // by batch size - 1
	rates   []float64            // CPU FFN rate each plan was made for, by batch size - 1 (nil with given plans)
	planner *hybridPlanner       // what re-planning needs (nil with given plans)
	seen    []hybridSeen         // the CPU's FFNs in passes since the last plan, by batch size - 1
	lastT   int                  // the previous pass's tokens when the CPU took part in it, else 0
	last    int                  // the last streamed layer
	lastCPU time.Duration        // the previous pass's time in the last streamed layer's FFN on the CPU
	applied int                  // plan whose lengths the pipeline has; -1: every layer whole
	on      []bool               // per layer: FFN on the CPU this pass
	hand    []time.Duration      // per layer: this pass's hand-over wait before its FFN on the CPU
	ffn     []time.Duration      // per layer: this pass's FFN on the CPU
	buf     *cudadrv.HostMem     // hidden state, capT rows of Dim float32, mapped
	bufDev  cudadrv.DevPtr       // buf's device address
	rows    [][]float32          // buf's rows
	stats   HybridStats
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
	replanDrift  = 0.08
	maxReplans   = 3
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
	h := &hybrid{dev: dev, host: map[int]*model.Layer{}, attn: map[int]int64{}, applied: -1, on: make([]bool, cfg.Layers), last: -1,
		hand: make([]time.Duration, cfg.Layers), ffn: make([]time.Duration, cfg.Layers)}
	for i, s := range streamed {
		if s || m.tb.tierC[i] {
			h.last = i
		}
		if !s || m.tb.tierC[i] || m.pk.layer(i) != nil {
			continue
		}
		L := &w.Layers[i]
		var hl model.Layer
		off := base[i]
		for _, t := range layerTensors(L, lk) {
			view := *t
			view.Data = m.tb.hostBytes[off : off+int64(len(t.Data))]
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
	}
	maxT := len(m.slots)
	if o.Plans != nil {
		maxT = len(o.Plans)
		for b, ls := range o.Plans {
			for _, l := range ls {
				if h.host[l] == nil {
					return fmt.Errorf("hybrid: plan for %d tokens: layer %d is not a tier-B layer the CPU can read (resident, tier C or packed)", b+1, l)
				}
			}
			h.plans = append(h.plans, tier.HybridPlan{Batch: b + 1, CPU: slices.Sorted(slices.Values(ls))})
		}
	}
	if maxT > 0 {
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

// plan measures the CPU's FFN rate on an eligible layer at 1, 2, 4 and 8
// tokens (interpolating between) and plans each batch size from 1 to maxT.
func (h *hybrid) plan(ctx context.Context, m *Model, o *Hybrid, maxT int, streamed []bool) error {
	cfg := &m.Config
	var layers []tier.HybridLayer // every streamed layer (tiers B and C), in order
	var probe []model.FFNLayer    // the ones the CPU can take, to measure it on
	for i := range cfg.Layers {
		if !streamed[i] && !m.tb.tierC[i] {
			continue
		}
		hl := tier.HybridLayer{Index: i, Full: m.tb.size[i], Attn: m.tb.size[i], Stored: m.tb.tierC[i]}
		if _, ok := h.host[i]; ok {
			hl.Attn, hl.FFN = h.attn[i], m.tb.size[i]-h.attn[i]
			probe = append(probe, model.FFNLayer{Index: i, W: h.host[i]})
		}
		layers = append(layers, hl)
	}
	if len(probe) == 0 {
		return nil
	}
	points := map[int]float64{}
	for _, T := range []int{1, 2, 4, 8} {
		if T > maxT && T > 1 {
			break
		}
		rate, err := h.dev.Rate(ctx, probe, min(T, maxT))
		if err != nil {
			return fmt.Errorf("hybrid: measuring the CPU: %w", err)
		}
		points[T] = rate
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
		rate := interpolateRate(points, T)
		p, err := h.planner.plan(rate, T)
		if err != nil {
			return err
		}
		h.rates = append(h.rates, rate)
		h.plans = append(h.plans, p)
	}
	return nil
}

func (p *hybridPlanner) plan(rate float64, T int) (tier.HybridPlan, error) {
	return tier.PlanHybrid(p.layers, p.depth, tier.HybridRates{HostToDevice: p.h2d, CPU: rate, Hop: p.hop, Lead: p.lead, Tail: p.tail}, T)
}

// replan makes batch size T's plan again from the CPU's rate in the
// passes since it was made, when enough passes ran and that rate drifted
// from the planned one (see replanPasses).
func (h *hybrid) replan(T int) error {
	if h.planner == nil || T > len(h.seen) {
		return nil
	}
	s := &h.seen[T-1]
	if s.passes < replanPasses || s.busy <= 0 || s.replans >= maxReplans {
		return nil
	}
	seen := float64(s.bytes) / s.busy.Seconds()
	planned := h.rates[T-1]
	h2d := h.planner.h2d
	if s.copyBusy > 0 && s.copyBytes > 0 {
		h2d = float64(s.copyBytes) / s.copyBusy.Seconds()
	}
	lead, tail := s.lead/time.Duration(s.passes), s.tail/time.Duration(s.passes)
	outside := (lead + tail - h.planner.lead - h.planner.tail).Abs()
	s.passes, s.bytes, s.busy, s.copyBytes, s.copyBusy, s.lead, s.tail = 0, 0, 0, 0, 0, 0, 0
	if math.Abs(seen/planned-1) <= replanDrift && math.Abs(h2d/h.planner.h2d-1) <= replanDrift &&
		outside.Seconds() <= replanDrift/4*h.plans[T-1].Pass.Seconds() {
		return nil
	}
	h.planner.h2d, h.planner.lead, h.planner.tail = h2d, lead, tail
	p, err := h.planner.plan(seen, T)
	if err != nil {
		return fmt.Errorf("hybrid: re-planning %d tokens at CPU %.3g, H2D %.3g B/s: %w", T, seen, h2d, err)
	}
	s.replans++
	h.rates[T-1], h.plans[T-1] = seen, p
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
		s.lead += st.Lead
		// The pipeline's tail starts when the last streamed layer's slot
		// goes back, before its FFN when the CPU takes it: the planner
		// charges that FFN to the layer.
		s.tail += max(0, st.Tail-h.lastCPU)
	}
	if err := h.replan(T); err != nil {
		return err
	}
	want := -1
	if T <= len(h.plans) && len(h.plans[T-1].CPU) > 0 {
		want = T - 1
	}
	h.lastT, h.lastCPU = 0, 0
	if want >= 0 {
		h.lastT = T
	}
	if want == h.applied {
		return nil
	}
	clear(h.on)
	if want >= 0 {
		for _, l := range h.plans[want].CPU {
			h.on[l] = true
		}
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
	if l == h.last {
		h.lastCPU = time.Since(t0)
	}
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
	err := c.FreeHost(h.buf)
	h.buf, h.bufDev, h.rows = nil, 0, nil
	return err
}
