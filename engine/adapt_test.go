package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/tier"
)

// fakeExperts stands in for a GPU's expert side: routing counts the test
// adds, and a resident set that swaps as gpu.Model's does.
type fakeExperts struct {
	mu       sync.Mutex
	counts   [][]uint64
	resident [][]bool
	swapped  int
	failAt   int // the swap (counted from 1 over the fake's life) that fails; 0: none
	// hits and picks count the routed picks, and those of experts the
	// device held when routed.
	hits, picks int
}

func newFakeExperts(L, E int, dev [][]bool) *fakeExperts {
	f := &fakeExperts{counts: make([][]uint64, L), resident: cloneMask(dev)}
	for l := range f.counts {
		f.counts[l] = make([]uint64, E)
	}
	return f
}

// route adds n tokens' picks: used distinct experts a layer, drawn by
// weight.
func (f *fakeExperts) route(r *rand.Rand, n, used int, weight func(l, e int) float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		for l := range f.counts {
			E := len(f.counts[l])
			var picked []int
			for len(picked) < used {
				var sum float64
				for e := range E {
					if !slices.Contains(picked, e) {
						sum += weight(l, e)
					}
				}
				x := r.Float64() * sum
				for e := range E {
					if slices.Contains(picked, e) {
						continue
					}
					if x -= weight(l, e); x < 0 || e == E-1 {
						picked = append(picked, e)
						break
					}
				}
			}
			for _, e := range picked {
				f.counts[l][e]++
				f.picks++
				if l < len(f.resident) && f.resident[l][e] {
					f.hits++
				}
			}
		}
	}
}

func (f *fakeExperts) ExpertCounts() [][]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return tier.CountsSince(nil, f.counts)
}

func (f *fakeExperts) SwapResidentExperts(_ context.Context, swaps []tier.DeviceSwap) ([]tier.DeviceSwap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var done []tier.DeviceSwap
	for _, s := range swaps {
		if !f.resident[s.OutLayer][s.Out] || f.resident[s.Layer][s.In] {
			return done, errors.New("swap does not match the resident set")
		}
		f.swapped++
		f.resident[s.OutLayer][s.Out] = false
		if f.swapped == f.failAt {
			return done, errors.New("copy failed")
		}
		f.resident[s.Layer][s.In] = true
		done = append(done, s)
	}
	return done, nil
}

func (f *fakeExperts) ResidentExperts() [][]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]int, len(f.resident))
	for l := range f.resident {
		for e, on := range f.resident[l] {
			if on {
				out[l] = append(out[l], e)
			}
		}
	}
	return out
}

// TestDeviceAdapter: the adapter of a GPU's device experts, on a fake
// device whose routing the test sets:
//   - routing like the calibration's moves nothing, window after window;
//   - routing whose hot experts changed moves experts until the device
//     holds the new hot ones, the plan saying what the device holds, the
//     bytes never above the load's;
//   - a swap that fails leaves the plan what the device reports;
//   - passes wake the adapter's goroutine, which moves experts while the
//     routing goes on, and close stops it.
func TestDeviceAdapter(t *testing.T) {
	t.Parallel()
	const L, E, used, window = 4, 16, 2, 256
	sizes := make([][]int64, L)
	for l := range sizes {
		sizes[l] = make([]int64, E)
		for e := range sizes[l] {
			sizes[l][e] = 1000
		}
	}
	low := func(l, e int) float64 {
		if e < 3 {
			return 30
		}
		return 1
	}
	high := func(l, e int) float64 {
		if e >= E-3 {
			return 30
		}
		return 1
	}
	cost := tier.DeviceCost{Used: used, Hop: 500}
	setup := func(seed uint64) (*deviceAdapter, *fakeExperts, *rand.Rand) {
		r := rand.New(rand.NewPCG(seed, 1))
		cal := newFakeExperts(L, E, nil)
		cal.route(r, 256, used, low)
		plan := &tier.ExpertPlan{}
		plan.PlaceOnDevice(sizes, cal.counts, L*3*1000, cost)
		f := newFakeExperts(L, E, plan.Device)
		a := newDeviceAdapter(f, plan, &sync.Mutex{}, sizes, cost, hclog.NewNullLogger())
		a.window = window
		return a, f, r
	}
	held := func(f *fakeExperts, hot func(l, e int) float64) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for l := range f.resident {
			for e, on := range f.resident[l] {
				if on != (hot(l, e) > 1) {
					return false
				}
			}
		}
		return true
	}
	samePlan := func(t *testing.T, a *deviceAdapter, f *fakeExperts) {
		t.Helper()
		var got tier.ExpertPlan
		got.SetDeviceLists(sizes, f.ResidentExperts(), nil)
		if !slices.EqualFunc(a.plan.Device, got.Device, slices.Equal) {
			t.Fatalf("plan %v, device %v", a.plan.DeviceLists(), f.ResidentExperts())
		}
		if a.plan.DeviceBytes != got.DeviceBytes || a.plan.DeviceBytes > L*3*1000 {
			t.Fatalf("plan bytes %d, device's %d", a.plan.DeviceBytes, got.DeviceBytes)
		}
	}
	t.Run("steady", func(t *testing.T) {
		t.Parallel()
		a, f, r := setup(1)
		if !held(f, low) {
			t.Fatalf("calibration placed %v", f.ResidentExperts())
		}
		for range 8 {
			f.route(r, window, used, low)
			a.look(context.Background())
		}
		if a.moved.Load() != 0 || f.swapped != 0 {
			t.Fatalf("routing as calibrated moved %d experts", a.moved.Load())
		}
	})
	t.Run("shifted", func(t *testing.T) {
		t.Parallel()
		a, f, r := setup(2)
		for range 8 {
			f.route(r, window, used, high)
			a.look(context.Background())
		}
		if !held(f, high) {
			t.Fatalf("after the routing moved the device holds %v (moved %d)", f.ResidentExperts(), a.moved.Load())
		}
		samePlan(t, a, f)
		if a.moved.Load() != L*3 || a.plan.DeviceHit < 0.5 {
			t.Fatalf("moved %d experts, device hit %.2f", a.moved.Load(), a.plan.DeviceHit)
		}
	})
	t.Run("drifting", func(t *testing.T) {
		t.Parallel()
		// The hot experts move by one every four windows (slower than the
		// history fades): the adapter must follow, the device's hit over
		// the last windows well above that of a device that keeps the
		// calibration's placement.
		a, f, r := setup(6)
		_, still, _ := setup(6)
		const windows = 40
		for w := range windows {
			hot := func(l, e int) float64 {
				if e >= w/4 && e < w/4+3 {
					return 30
				}
				return 1
			}
			if w == windows-8 {
				f.hits, f.picks, still.hits, still.picks = 0, 0, 0, 0
			}
			f.route(r, window, used, hot)
			still.route(r, window, used, hot)
			a.look(context.Background())
		}
		got, kept := float64(f.hits)/float64(f.picks), float64(still.hits)/float64(still.picks)
		if got < 0.45 || got < kept+0.4 {
			t.Fatalf("device hit over the last eight windows %.2f, with the calibration's placement %.2f (moved %d)", got, kept, a.moved.Load())
		}
		samePlan(t, a, f)
	})
	t.Run("capped rounds go on", func(t *testing.T) {
		t.Parallel()
		a, f, r := setup(5)
		a.swaps = 4
		f.route(r, window, used, high)
		a.look(context.Background()) // the first window
		f.route(r, window, used, high)
		a.look(context.Background()) // the second: a round of 4
		if a.moved.Load() != 4 || !a.more {
			t.Fatalf("moved %d, more %v after the first round", a.moved.Load(), a.more)
		}
		// The next looks, a few passes apart, go on toward the same
		// placement without waiting for a window.
		for range 2 {
			f.route(r, 16, used, high)
			a.look(context.Background())
		}
		if !held(f, high) || a.moved.Load() != L*3 {
			t.Fatalf("after the capped rounds the device holds %v (moved %d)", f.ResidentExperts(), a.moved.Load())
		}
		f.route(r, 16, used, high)
		a.look(context.Background())
		if a.more || a.moved.Load() != L*3 {
			t.Fatalf("at the placement: more %v, moved %d", a.more, a.moved.Load())
		}
	})
	t.Run("failed swap", func(t *testing.T) {
		t.Parallel()
		a, f, r := setup(3)
		f.failAt = 2
		for range 3 {
			f.route(r, window, used, high)
			a.look(context.Background())
		}
		if f.swapped < 2 {
			t.Fatalf("%d swaps tried", f.swapped)
		}
		samePlan(t, a, f)
	})
	t.Run("serving", func(t *testing.T) {
		t.Parallel()
		a, f, r := setup(4)
		a.start()
		defer a.close()
		deadline := time.Now().Add(time.Minute)
		for !held(f, high) {
			if time.Now().After(deadline) {
				t.Fatalf("a minute of passes, and the device holds %v", f.ResidentExperts())
			}
			f.route(r, 16, used, high)
			for range 16 {
				a.pass()
			}
			time.Sleep(time.Millisecond)
		}
		a.close()
		a.mu.Lock()
		samePlan(t, a, f)
		a.mu.Unlock()
	})
}
