package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/tier"
)

// expertDevice is the GPU side a deviceAdapter moves experts on
// (gpu.Model's).
type expertDevice interface {
	ExpertCounts() [][]uint64
	SwapResidentExperts(ctx context.Context, swaps []tier.DeviceSwap) ([]tier.DeviceSwap, error)
	ResidentExperts() [][]int
}

// Serving adaptation of the device's experts: every adaptEvery passes
// the adapter reads the routing counts; once a window of adaptWindow
// tokens' routing is in, it weighs moving experts (tier's DeviceSwaps: a
// placement made from the history of the windows before, each weighing
// adaptKeep of the one after it, against the device's on this window, held
// out), moves up to adaptSwaps of them, and starts the next window, unless
// the round moved all it may: then the next look goes on toward the same
// placement, the window growing, until a round moves fewer. A
// generation's routing drifts from the calibration text's as its text
// does, and short windows with a fading history follow it where long ones
// lag: replayed over a recorded 1024-token decode of a synthetic
// Qwen3-30B-A3B (the lab's moe/routing), the device's hit over the decode
// was 0.65 with the calibration's placement kept, 0.65 with windows of
// 512 tokens weighed against the one before, 0.83 with 128 and 0.90 with
// 32 and this history (5.79 GiB of experts on the device; 0.34, 0.34,
// 0.59 and 0.71 with 1.8 GiB). The held-out test compares two placements
// on tokens neither was made from, so a short window's noise costs both
// alike. A round's copies (adaptSwaps experts of a few MiB) hold one pass
// back by milliseconds, once in adaptEvery passes at the most. Rounds of
// 128 moves reach the new placement within a few windows where rounds of
// 32 took the whole decode to (the same replay: 0.935 against 0.904 at
// 5.79 GiB, 0.783 against 0.711 at 1.8 GiB; 256 gained nothing more).
// Windows of 16 tokens, one look each, followed the routing sooner than
// 32 did in the replay (0.948 against 0.935, 0.811 against 0.783) and on
// a GPU over 1024 tokens (the lab's moe/run46: 1.03x the decode's rate
// with 8 GiB for the model, 1.25x with 4 GiB).
const (
	adaptEvery  = 16
	adaptWindow = 16
	adaptSwaps  = 128
)

// adaptKeep is the weight (adaptKeepNum/adaptKeepDen) a window's routing
// keeps in the history at each window after it: the history weighs about
// four windows, the 64 tokens or so that read skew rather than noise.
const adaptKeepNum, adaptKeepDen = 3, 4

// deviceAdapter keeps a GPU's device experts placed by the routing the
// model serves, as the host's expert store does its own: the calibration
// text's routing places them at load, and requests may route otherwise.
// Moves happen between passes (gpu.Model's SwapResidentExperts) on the
// adapter's goroutine; requests keep running.
type deviceAdapter struct {
	dev   expertDevice
	sizes [][]int64
	cost  tier.DeviceCost // Used and Hop
	log   hclog.Logger
	// mu guards plan's device fields, which Engine.Experts reads.
	mu   *sync.Mutex
	plan *tier.ExpertPlan
	// every, window and swaps are adaptEvery, adaptWindow and adaptSwaps
	// (tests shorten them).
	every  uint64
	window uint64
	swaps  int
	passes atomic.Uint64
	wake   chan struct{}
	stop   context.CancelFunc
	done   chan struct{}
	// The adapter's goroutine's own: the counts where this window began,
	// and the windows before, faded (nil until one is in); more when the
	// last round moved all it may.
	last, hist [][]uint64
	more       bool
	// moved counts the experts moved.
	moved atomic.Uint64
}

// newDeviceAdapter makes an adapter of plan's device experts on dev,
// starting its window at the counts so far; start runs it.
func newDeviceAdapter(dev expertDevice, plan *tier.ExpertPlan, mu *sync.Mutex, sizes [][]int64, cost tier.DeviceCost, log hclog.Logger) *deviceAdapter {
	return &deviceAdapter{
		dev: dev, plan: plan, mu: mu, sizes: sizes, cost: cost, log: log,
		every: adaptEvery, window: adaptWindow, swaps: adaptSwaps,
		wake: make(chan struct{}, 1), last: dev.ExpertCounts(),
	}
}

// start runs the adapter until close.
func (a *deviceAdapter) start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.wake:
				a.look(ctx)
			}
		}
	}()
}

// close stops the adapter and waits for a round in progress; once
// stopped, it does nothing.
func (a *deviceAdapter) close() {
	if a.stop != nil {
		a.stop()
		<-a.done
		a.stop = nil
	}
}

// pass counts a pass that ran, waking the adapter every a.every passes.
func (a *deviceAdapter) pass() {
	if a.passes.Add(1)%a.every == 0 {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// look reads the counts and, once a window is in, weighs and makes a
// round of moves. A failed move is logged and the plan read back from the
// device; serving goes on.
func (a *deviceAdapter) look(ctx context.Context) {
	now := a.dev.ExpertCounts()
	win := tier.CountsSince(a.last, now)
	if !a.more && a.tokens(win) < a.window {
		return
	}
	if a.hist == nil {
		a.hist, a.last = win, now
		return
	}
	cost := a.cost
	cost.Holdout = win
	a.mu.Lock()
	swaps := a.plan.DeviceSwaps(a.sizes, a.hist, cost, a.swaps)
	a.mu.Unlock()
	a.more = len(swaps) == a.swaps
	var both [][]uint64 // the plan's hit is set by both windows (fold changes the history)
	if len(swaps) > 0 {
		both = tier.AddCounts(a.hist, win)
	}
	if !a.more {
		a.fold(win, now)
	}
	if len(swaps) == 0 {
		return
	}
	done, err := a.dev.SwapResidentExperts(ctx, swaps)
	a.mu.Lock()
	if err != nil {
		a.plan.SetDeviceLists(a.sizes, a.dev.ResidentExperts(), both)
	} else {
		a.plan.ApplyDeviceSwaps(a.sizes, done, both)
	}
	hit, whole := a.plan.DeviceHit, a.plan.DeviceWholeLayers()
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("moving experts in device memory", "error", err, "moved", len(done), "of", len(swaps))
		if a.more {
			a.more = false
			a.fold(win, now)
		}
	}
	if len(done) > 0 {
		a.moved.Add(uint64(len(done)))
		a.log.Debug("experts moved in device memory by the routing served", "moved", len(done), "whole_layers", whole, "window_hit", hit)
	}
}

// fold ends the window win (the counts now): the history fades by
// adaptKeep and takes it in, in place, and the next window starts.
func (a *deviceAdapter) fold(win, now [][]uint64) {
	for l := range a.hist {
		for e := range a.hist[l] {
			// Truncated: an expert no longer picked fades to nothing.
			a.hist[l][e] = a.hist[l][e]*adaptKeepNum/adaptKeepDen + win[l][e]
		}
	}
	a.last = now
}

// tokens is how many tokens' routing counts holds: its picks over the
// picks a token makes in every layer.
func (a *deviceAdapter) tokens(counts [][]uint64) uint64 {
	var n uint64
	for _, l := range counts {
		for _, c := range l {
			n += c
		}
	}
	per := uint64(max(1, a.cost.Used*len(counts)))
	return n / per
}

// cloneMask is a copy of a per-layer, per-expert mask (nil for nil).
func cloneMask(m [][]bool) [][]bool {
	if m == nil {
		return nil
	}
	out := make([][]bool, len(m))
	for l := range m {
		out[l] = slices.Clone(m[l])
	}
	return out
}

// startDeviceAdapter starts moving the device's experts by the routing
// served, when some experts are in device memory and some are not.
func (e *Engine) startDeviceAdapter(ctx context.Context, b *cudaBackend, log hclog.Logger) error {
	xp := e.expertPlan
	if e.cuda == nil || xp == nil || xp.Device == nil || xp.DeviceCount() == len(e.expertSizes)*e.Model.Config.Experts {
		return nil
	}
	hop, err := e.cuda.MoEHop(ctx)
	if err != nil {
		return err
	}
	a := newDeviceAdapter(e.cuda, xp, &e.xmu, e.expertSizes, tier.DeviceCost{Used: e.Model.Config.ExpertsUsed, Hop: hop}, log.Named("experts"))
	a.start()
	e.adapter = a
	b.adapt.Store(a)
	return nil
}
