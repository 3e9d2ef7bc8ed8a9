package tier

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestPlanExperts(t *testing.T) {
	t.Parallel()
	even := [][]int64{{100, 100, 100, 100}, {100, 100, 100, 100}}
	tests := []struct {
		name     string
		sizes    [][]int64
		counts   [][]uint64
		budget   int64
		resident [][]bool
		buffers  int
		hit      float64
		err      string
	}{
		{"all fit", even, nil, 800, [][]bool{{true, true, true, true}, {true, true, true, true}}, 0, 1, ""},
		{
			// 750: buffers for 4 leave 350, so the three hottest; with at
			// most 3 storage experts a layer one buffer goes, taking the
			// fourth hottest; then 2 a layer, and one more (by index).
			"hot ones first", even, [][]uint64{{0, 9, 0, 1}, {5, 0, 7, 0}}, 750,
			[][]bool{{true, true, false, true}, {true, false, true, false}}, 2, 22.0 / 22, "",
		},
		{
			"unmeasured: by index", even, nil, 650,
			[][]bool{{true, true, false, false}, {false, false, false, false}}, 4, 2.0 / 8, "",
		},
		{
			// A small expert used as often wins per byte.
			"per byte", [][]int64{{300, 100}, {100, 100}, {100, 100}, {100, 100}}, [][]uint64{{3, 3}, {0, 0}, {0, 0}, {0, 0}}, 900,
			[][]bool{{false, true}, {true, true}, {false, false}, {false, false}}, 2, 3.0 / 6, "",
		},
		{"buffers do not fit", even, nil, 399, nil, 0, 0, "read buffers"},
		{"counts shape", even, [][]uint64{{1, 2, 3, 4}}, 500, nil, 0, 0, "counts for 1 layers"},
		{"bad size", [][]int64{{100, 0}}, nil, 500, nil, 0, 0, "size 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := PlanExperts(tc.sizes, tc.counts, tc.budget)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				if tc.err == "read buffers" && !errors.Is(err, ErrNoFit) {
					t.Fatalf("err %v does not wrap ErrNoFit", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for l := range tc.resident {
				for e, want := range tc.resident[l] {
					if p.Resident[l][e] != want {
						t.Fatalf("resident %v, want %v", p.Resident, tc.resident)
					}
				}
			}
			if p.Buffers != tc.buffers || p.Hit != tc.hit {
				t.Fatalf("buffers %d hit %v, want %d and %v", p.Buffers, p.Hit, tc.buffers, tc.hit)
			}
			used := p.ResidentBytes + int64(p.Buffers)*p.BufferBytes
			if used > tc.budget {
				t.Fatalf("resident %d + buffers %d x %d exceed the budget %d", p.ResidentBytes, p.Buffers, p.BufferBytes, tc.budget)
			}
			var all int64
			for _, s := range tc.sizes {
				for _, n := range s {
					all += n
				}
			}
			if p.ResidentBytes+p.StorageBytes != all || p.AllResident() != (p.StorageBytes == 0) {
				t.Fatalf("resident %d + storage %d != %d", p.ResidentBytes, p.StorageBytes, all)
			}
		})
	}
}

// TestExpertBudget: the experts live in host memory, so a plan with a
// device beside the host leaves them the host budget less tier B and
// staging, and a shared memory what every other use leaves of it.
func TestExpertBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Plan
		want int64
	}{
		{"shared", Plan{Shared: true, Device: DeviceUse{Total: 300, Budget: 1000}, Host: HostUse{Staging: 50, Total: 50}}, 650},
		{"gpu", Plan{Device: DeviceUse{Total: 900, Budget: 1000}, Host: HostUse{Layers: 200, Staging: 100, Total: 300, Budget: 800}}, 500},
		{"gpu host full", Plan{Device: DeviceUse{Total: 10, Budget: 1000}, Host: HostUse{Layers: 800, Total: 800, Budget: 800}}, 0},
	} {
		if got := tc.p.ExpertBudget(); got != tc.want {
			t.Errorf("%s: ExpertBudget %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPlaceOnDevice: a GPU's budget takes the most used experts per byte,
// whatever the host side holds; the share of the counts they serve is
// DeviceHit; no budget places none.
func TestPlaceOnDevice(t *testing.T) {
	t.Parallel()
	sizes := [][]int64{{100, 100, 100, 100}, {100, 100, 100, 200}}
	counts := [][]uint64{{5, 40, 1, 0}, {3, 9, 30, 60}}
	tests := []struct {
		name   string
		counts [][]uint64
		budget int64
		device [][]int
		bytes  int64
		hit    float64
	}{
		{"hottest per byte", counts, 400, [][]int{{1}, {2, 3}}, 400, 130.0 / 148},
		{"one that does not fit is passed over", counts, 300, [][]int{{1}, {1, 2}}, 300, 79.0 / 148},
		{"per byte: the large one waits", counts, 250, [][]int{{1}, {2}}, 200, 70.0 / 148},
		{"unmeasured: by size, then order", nil, 250, [][]int{{0, 1}, nil}, 200, 2.0 / 8},
		{"everything", counts, 1 << 20, [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}}, 900, 1},
		{"no budget", counts, 0, nil, 0, 0},
		{"too small for any", counts, 50, nil, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := PlanExperts(sizes, tc.counts, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			p.PlaceOnDevice(sizes, tc.counts, tc.budget, DeviceCost{})
			got := p.DeviceLists()
			if len(got) != len(tc.device) {
				t.Fatalf("device %v, want %v", got, tc.device)
			}
			n := 0
			for l := range got {
				if len(got[l]) != len(tc.device[l]) {
					t.Fatalf("device %v, want %v", got, tc.device)
				}
				for i := range got[l] {
					if got[l][i] != tc.device[l][i] {
						t.Fatalf("device %v, want %v", got, tc.device)
					}
				}
				n += len(got[l])
			}
			if p.DeviceBytes != tc.bytes || p.DeviceCount() != n || p.DeviceHit < tc.hit-1e-9 || p.DeviceHit > tc.hit+1e-9 {
				t.Fatalf("%d bytes, %d experts, hit %v; want %d, %d, %v", p.DeviceBytes, p.DeviceCount(), p.DeviceHit, tc.bytes, n, tc.hit)
			}
			if !p.AllResident() {
				t.Fatal("the host side changed")
			}
		})
	}
}

// TestPlaceOnDeviceLayers: with a CPU layer's fixed cost (DeviceCost.Hop),
// a near-uniform routing is placed as whole layers (every layer takes as
// many picks, so the first ones), since a layer the device holds whole needs no host, where by use per
// byte alone the same budget spreads over every layer; a skewed routing
// still takes each layer's hot experts; the budget holds; no counts
// places whole layers in order.
func TestPlaceOnDeviceLayers(t *testing.T) {
	t.Parallel()
	const layers, experts, used = 4, 16, 2
	sizes := make([][]int64, layers)
	uniform := make([][]uint64, layers)
	skewed := make([][]uint64, layers)
	for l := range sizes {
		sizes[l] = make([]int64, experts)
		uniform[l] = make([]uint64, experts)
		skewed[l] = make([]uint64, experts)
		for e := range experts {
			sizes[l][e] = 100
			uniform[l][e] = 50 + uint64((e*7+l*3)%5) // noise around 52
			skewed[l][e] = 1
			if e < 2 {
				skewed[l][e] = 400
			}
		}
	}
	whole := func(p *ExpertPlan) (n []int) {
		for l, d := range p.Device {
			if !slices.Contains(d, false) {
				n = append(n, l)
			}
		}
		return n
	}
	hop := DeviceCost{Used: used, Hop: 300}
	for _, tc := range []struct {
		name   string
		counts [][]uint64
		cost   DeviceCost
		budget int64
		whole  []int // the layers held whole
		hot    bool  // every layer holds its experts 0 and 1
	}{
		{"uniform, fixed cost: whole layers", uniform, hop, 2 * experts * 100, []int{0, 1}, false},
		{"uniform, by use alone: spread", uniform, DeviceCost{}, 2 * experts * 100, nil, false},
		{"skewed, fixed cost: hot experts first", skewed, hop, 8 * 100, nil, true},
		{"no counts, fixed cost: whole layers in order", nil, hop, 2*experts*100 + 50, []int{0, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p ExpertPlan
			p.PlaceOnDevice(sizes, tc.counts, tc.budget, tc.cost)
			if p.DeviceBytes > tc.budget {
				t.Fatalf("%d bytes in a budget of %d", p.DeviceBytes, tc.budget)
			}
			if got := whole(&p); !slices.Equal(got, tc.whole) {
				t.Fatalf("whole layers %v, want %v (device %v)", got, tc.whole, p.DeviceLists())
			}
			if tc.hot {
				for l, d := range p.Device {
					if !d[0] || !d[1] {
						t.Fatalf("layer %d lacks a hot expert: %v", l, p.DeviceLists())
					}
				}
			}
			if tc.counts != nil && tc.cost.Hop == 0 {
				for l, d := range p.Device {
					if !slices.Contains(d, true) {
						t.Fatalf("by use alone, layer %d holds nothing: %v", l, p.DeviceLists())
					}
				}
			}
		})
	}
}

// TestLayerShares: counts drawn from a uniform routing read as equal
// shares (the shrinkage takes their noise for noise), a skewed routing's
// keep their order and most of their skew, and no counts are equal shares.
func TestLayerShares(t *testing.T) {
	t.Parallel()
	const E = 64
	r := rand.New(rand.NewPCG(5, 6))
	uniform, skewed := make([]uint64, E), make([]uint64, E)
	for range 50 * E {
		uniform[r.IntN(E)]++
	}
	for e := range skewed {
		skewed[e] = uint64(4000 / (e + 1))
	}
	for e, s := range layerShares([][]uint64{uniform}, 0, E) {
		if math.Abs(s-1.0/E) > 0.1/E {
			t.Fatalf("uniform counts: expert %d's share %v (count %d), want about %v", e, s, uniform[e], 1.0/E)
		}
	}
	sk := layerShares([][]uint64{skewed}, 0, E)
	if sk[0] < 0.15 || !slices.IsSortedFunc(sk, func(a, b float64) int { return cmp.Compare(b, a) }) {
		t.Fatalf("skewed counts: shares %v", sk[:4])
	}
	for _, s := range layerShares(nil, 0, E) {
		if s != 1.0/E {
			t.Fatalf("no counts: share %v", s)
		}
	}
}

// TestPlaceOnDeviceHoldout: counts that show a skew are placed by it only
// where held-out counts share the skew; where the held-out tokens route
// uniformly, whole layers win (they save the CPU a layer's every pick and
// its fixed cost). CPUCost ranks the two the same way, and whole layers
// go most routed first.
func TestPlaceOnDeviceHoldout(t *testing.T) {
	t.Parallel()
	const L, E = 8, 8
	sizes := make([][]int64, L)
	skewed, uniform := make([][]uint64, L), make([][]uint64, L)
	for l := range L {
		sizes[l] = make([]int64, E)
		skewed[l], uniform[l] = make([]uint64, E), make([]uint64, E)
		for e := range E {
			sizes[l][e] = 10
			skewed[l][e], uniform[l][e] = 1, 5
			if e < 4 {
				skewed[l][e] = 40
			}
		}
	}
	uniform[5][0]++ // layer 5 the most routed of the held-out tokens
	cost := DeviceCost{Used: 2, Hop: 15}
	whole := WholeLayers
	for _, c := range []struct {
		name    string
		holdout [][]uint64
		whole   int
	}{
		{"none", nil, 0},
		{"skewed", skewed, 0},
		{"uniform", uniform, 4},
	} {
		cost := cost
		cost.Holdout = c.holdout
		var p ExpertPlan
		p.PlaceOnDevice(sizes, skewed, 320, cost)
		if n := whole(p.Device); n != c.whole {
			t.Errorf("%s holdout: %d whole layers, want %d: %v", c.name, n, c.whole, p.Device)
		}
		if p.DeviceBytes != 320 || p.DeviceCount() != 32 {
			t.Errorf("%s holdout: %d bytes, %d experts, want 320 and 32", c.name, p.DeviceBytes, p.DeviceCount())
		}
	}
	var byUse ExpertPlan
	byUse.PlaceOnDevice(sizes, skewed, 320, cost)
	lay, left := WholeLayersFirst(sizes, uniform, 320)
	if left != 0 || whole(lay) != 4 || !slices.Contains(lay[5], true) {
		t.Fatalf("WholeLayersFirst: %v, %d left; want 4 whole layers, layer 5 among them", lay, left)
	}
	for _, c := range []struct {
		name      string
		counts    [][]uint64
		layersWin bool
	}{{"skewed", skewed, false}, {"uniform", uniform, true}} {
		cl, cu := CPUCost(sizes, c.counts, lay, cost), CPUCost(sizes, c.counts, byUse.Device, cost)
		if (cl < cu) != c.layersWin {
			t.Errorf("%s: CPUCost of whole layers %.1f, of the spread %.1f", c.name, cl, cu)
		}
	}
	all := newMask(sizes)
	for l := range all {
		for e := range all[l] {
			all[l][e] = true
		}
	}
	if got := CPUCost(sizes, uniform, all, cost); got != 0 {
		t.Errorf("CPUCost with every expert on the device = %v, want 0", got)
	}
	if got, want := CPUCost(sizes, nil, newMask(sizes), cost), float64(L)*(2*10+15); math.Abs(got-want) > 1e-9 {
		t.Errorf("CPUCost with none on the device = %v, want %v", got, want)
	}
}

// TestCountsSince: the counts added between two readings, an entry the
// first reading lacks counted from 0, the readings left as they were.
func TestCountsSince(t *testing.T) {
	t.Parallel()
	before, after := [][]uint64{{1, 2}, {0, 5}}, [][]uint64{{4, 2}, {3, 9}}
	if got, want := CountsSince(before, after), [][]uint64{{3, 0}, {3, 4}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("CountsSince = %v, want %v", got, want)
	}
	if after[0][0] != 4 || before[1][1] != 5 {
		t.Fatal("CountsSince changed its inputs")
	}
	if got, want := CountsSince([][]uint64{{1}}, [][]uint64{{4, 2}, {3}}), [][]uint64{{3, 2}, {3}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("CountsSince from a shorter reading = %v, want %v", got, want)
	}
}

// TestOffDevice: the experts the device holds count 0 (routing counts and
// sizes alike), the others as they were, a device list shorter than the
// counts holds nothing past its end, no device leaves the values, and the
// input is left alone.
func TestOffDevice(t *testing.T) {
	t.Parallel()
	counts := [][]uint64{{4, 2, 7}, {3, 9, 1}, {5, 5, 5}}
	device := [][]bool{{true, false, true}, {false, true}}
	if got, want := OffDevice(counts, device), [][]uint64{{0, 2, 0}, {3, 0, 1}, {5, 5, 5}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("OffDevice = %v, want %v", got, want)
	}
	if counts[0][0] != 4 || counts[1][1] != 9 {
		t.Fatal("OffDevice changed its input")
	}
	if got := OffDevice(counts, nil); !slices.EqualFunc(got, counts, slices.Equal) {
		t.Fatalf("no device: %v, want %v", got, counts)
	}
	sizes := [][]int64{{10, 20}, {30, 40}}
	off := OffDevice(sizes, [][]bool{{false, true}, {true, true}})
	if want := [][]int64{{10, 0}, {0, 0}}; !slices.EqualFunc(off, want, slices.Equal) {
		t.Fatalf("OffDevice of sizes = %v, want %v", off, want)
	}
	if sizes[0][1] != 20 {
		t.Fatal("OffDevice changed its sizes")
	}
	if off := OffDevice(sizes, nil); !slices.EqualFunc(off, sizes, slices.Equal) {
		t.Fatalf("OffDevice of sizes with nothing on the device = %v", off)
	}
}

// TestDeviceSwaps: while a model serves, the device's experts move only
// when recent routing, checked on the window after it, is worth it:
//   - routing that stays as it was moves nothing;
//   - hot experts that change move, round by round, until the device
//     holds the placement the new routing makes, every swap putting an
//     expert that was off in the place of one that was on and at least
//     as large, no round above max, the bytes never above the start's;
//   - an expert larger than every slot it could take stays off;
//   - no held-out window, or no device placement, moves nothing.
func TestDeviceSwaps(t *testing.T) {
	t.Parallel()
	const L, E = 6, 16
	cost := DeviceCost{Used: 2, Hop: 40}
	mk := func(hot func(l, e int) bool, n uint64) [][]uint64 {
		c := make([][]uint64, L)
		for l := range c {
			c[l] = make([]uint64, E)
			for e := range c[l] {
				c[l][e] = n
				if hot(l, e) {
					c[l][e] = 40 * n
				}
			}
		}
		return c
	}
	sizes := make([][]int64, L)
	for l := range sizes {
		sizes[l] = make([]int64, E)
		for e := range sizes[l] {
			sizes[l][e] = 100
		}
	}
	low := func(l, e int) bool { return e < 3 }
	high := func(l, e int) bool { return e >= E-3 }
	const budget = L * 3 * 100
	placed := func(counts [][]uint64) ExpertPlan {
		var p ExpertPlan
		p.PlaceOnDevice(sizes, counts, budget, cost)
		return p
	}
	t.Run("steady", func(t *testing.T) {
		t.Parallel()
		p := placed(mk(low, 3))
		c := cost
		c.Holdout = mk(low, 2)
		if s := p.DeviceSwaps(sizes, mk(low, 3), c, 8); len(s) != 0 {
			t.Fatalf("routing as it was: %d swaps %v", len(s), s)
		}
	})
	t.Run("shifted", func(t *testing.T) {
		t.Parallel()
		p := placed(mk(low, 3))
		start := p.DeviceBytes
		c := cost
		c.Holdout = mk(high, 2)
		counts := mk(high, 3)
		want := placed(AddCounts(counts, c.Holdout))
		before := CPUCost(sizes, c.Holdout, p.Device, c)
		rounds := 0
		for ; rounds < 10; rounds++ {
			s := p.DeviceSwaps(sizes, counts, c, 4)
			if len(s) == 0 {
				break
			}
			if len(s) > 4 {
				t.Fatalf("round %d: %d swaps, max 4", rounds, len(s))
			}
			for _, x := range s {
				if p.Device[x.Layer][x.In] || !p.Device[x.OutLayer][x.Out] || sizes[x.Layer][x.In] > sizes[x.OutLayer][x.Out] {
					t.Fatalf("round %d: swap %+v: in on %v, out on %v", rounds, x, p.Device[x.Layer][x.In], p.Device[x.OutLayer][x.Out])
				}
			}
			p.ApplyDeviceSwaps(sizes, s, AddCounts(counts, c.Holdout))
			if p.DeviceBytes > start {
				t.Fatalf("round %d: %d bytes, started with %d", rounds, p.DeviceBytes, start)
			}
		}
		// 18 experts move, four a round.
		if rounds != 5 {
			t.Fatalf("%d rounds, want 5", rounds)
		}
		for l := range p.Device {
			if !slices.Equal(p.Device[l], want.Device[l]) {
				t.Fatalf("after %d rounds layer %d holds %v, want %v", rounds, l, p.DeviceLists()[l], want.DeviceLists()[l])
			}
		}
		if after := CPUCost(sizes, c.Holdout, p.Device, c); after >= before || p.DeviceHit < 0.5 {
			t.Fatalf("CPU cost %.1f -> %.1f, device hit %.2f", before, after, p.DeviceHit)
		}
	})
	t.Run("whole layers", func(t *testing.T) {
		t.Parallel()
		// A routing gone uniform: whole layers save the CPU a layer's
		// fixed cost, so the moves complete one layer before the next.
		p := placed(mk(low, 3))
		uniform := func(n uint64) [][]uint64 {
			c := mk(func(int, int) bool { return false }, n)
			c[4][0]++ // layer 4 the most routed
			return c
		}
		c := cost
		c.Hop, c.Holdout = 200, uniform(20)
		s := p.DeviceSwaps(sizes, uniform(30), c, E-3)
		if len(s) != E-3 {
			t.Fatalf("%d swaps %v, want %d", len(s), s, E-3)
		}
		for _, x := range s {
			if x.Layer != s[0].Layer {
				t.Fatalf("swaps %v: want one layer completed first", s)
			}
		}
		p.ApplyDeviceSwaps(sizes, s, nil)
		if n := WholeLayers(p.Device); n != 1 {
			t.Fatalf("%d whole layers after the first round, want 1: %v", n, p.DeviceLists())
		}
	})
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		big := make([][]int64, L)
		for l := range big {
			big[l] = slices.Clone(sizes[l])
			big[l][E-1] = 150
		}
		var p ExpertPlan
		p.PlaceOnDevice(big, mk(low, 3), budget, cost)
		c := cost
		c.Holdout = mk(high, 2)
		s := p.DeviceSwaps(big, mk(high, 3), c, 100)
		if len(s) == 0 {
			t.Fatal("no swaps")
		}
		for _, x := range s {
			if x.In == E-1 {
				t.Fatalf("swap %+v: a 150-byte expert in a 100-byte place", x)
			}
		}
	})
	t.Run("nothing to check on", func(t *testing.T) {
		t.Parallel()
		p := placed(mk(low, 3))
		if s := p.DeviceSwaps(sizes, mk(high, 3), cost, 8); s != nil {
			t.Fatalf("no holdout: %v", s)
		}
		var none ExpertPlan
		c := cost
		c.Holdout = mk(high, 2)
		if s := none.DeviceSwaps(sizes, mk(high, 3), c, 8); s != nil {
			t.Fatalf("no device placement: %v", s)
		}
	})
}

// TestDeviceSwapsRandom: over random sizes (two kinds of expert, as a
// Q4_K_M model's layers differ), routings and placements, every set of
// swaps DeviceSwaps gives can be done one after another: each takes an
// expert that is off (and no other swap of the set takes it) into the
// place of one that is on (no other swap frees it), at least as large; no
// more than max; ApplyDeviceSwaps then holds no more bytes than before and
// DeviceCount stays.
func TestDeviceSwapsRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	swapped := 0
	defer func() {
		// Most trials' routings differ enough to move experts.
		if swapped < 200 {
			t.Errorf("%d swaps in 300 trials", swapped)
		}
	}()
	for trial := range 300 {
		L, E := 1+r.IntN(6), 2+r.IntN(14)
		sizes := make([][]int64, L)
		var all int64
		for l := range sizes {
			sizes[l] = make([]int64, E)
			big := r.IntN(3) == 0
			for e := range sizes[l] {
				sizes[l][e] = 100
				if big {
					sizes[l][e] = 130
				}
				all += sizes[l][e]
			}
		}
		routing := func() [][]uint64 {
			c := make([][]uint64, L)
			hot := r.IntN(E)
			for l := range c {
				c[l] = make([]uint64, E)
				for range 50 {
					e := r.IntN(E)
					if r.IntN(2) == 0 {
						e = (hot + r.IntN(3)) % E
					}
					c[l][e]++
				}
			}
			return c
		}
		cost := DeviceCost{Used: 1 + r.IntN(min(E, 4)), Hop: int64(r.IntN(300))}
		var p ExpertPlan
		p.PlaceOnDevice(sizes, routing(), 1+r.Int64N(all), cost)
		if p.Device == nil {
			continue
		}
		cost.Holdout = routing()
		max := 1 + r.IntN(8)
		before, n := p.DeviceBytes, p.DeviceCount()
		s := p.DeviceSwaps(sizes, routing(), cost, max)
		if len(s) > max {
			t.Fatalf("trial %d: %d swaps, max %d", trial, len(s), max)
		}
		ins, outs := map[[2]int]bool{}, map[[2]int]bool{}
		for _, x := range s {
			in, out := [2]int{x.Layer, x.In}, [2]int{x.OutLayer, x.Out}
			if p.Device[x.Layer][x.In] || !p.Device[x.OutLayer][x.Out] || ins[in] || outs[out] || sizes[x.Layer][x.In] > sizes[x.OutLayer][x.Out] {
				t.Fatalf("trial %d: swap %+v of %v: in on %v, out on %v, in taken %v, out freed %v", trial, x, s,
					p.Device[x.Layer][x.In], p.Device[x.OutLayer][x.Out], ins[in], outs[out])
			}
			ins[in], outs[out] = true, true
		}
		swapped += len(s)
		p.ApplyDeviceSwaps(sizes, s, nil)
		if p.DeviceBytes > before || p.DeviceCount() != n {
			t.Fatalf("trial %d: %d swaps: %d bytes, %d experts; were %d, %d", trial, len(s), p.DeviceBytes, p.DeviceCount(), before, n)
		}
	}
}

// TestSetDeviceLists: a placement read back from its lists (DeviceLists)
// is the placement: mask, bytes and hit; experts out of range are left
// out, and no list at all places none.
func TestSetDeviceLists(t *testing.T) {
	t.Parallel()
	sizes := [][]int64{{10, 20, 30}, {10, 10, 40}}
	counts := [][]uint64{{5, 1, 0}, {2, 9, 3}}
	var p ExpertPlan
	p.PlaceOnDevice(sizes, counts, 45, DeviceCost{})
	var q ExpertPlan
	q.SetDeviceLists(sizes, append(p.DeviceLists(), []int{7}), counts)
	if !slices.EqualFunc(q.Device, p.Device, slices.Equal) || q.DeviceBytes != p.DeviceBytes || q.DeviceHit != p.DeviceHit {
		t.Fatalf("read back %v (%d bytes, hit %v), placed %v (%d, %v)", q.Device, q.DeviceBytes, q.DeviceHit, p.Device, p.DeviceBytes, p.DeviceHit)
	}
	q.SetDeviceLists(sizes, [][]int{{-1, 3}}, nil)
	if q.Device != nil || q.DeviceBytes != 0 || q.DeviceHit != 0 {
		t.Fatalf("no expert in range: %v, %d bytes, hit %v", q.Device, q.DeviceBytes, q.DeviceHit)
	}
}
