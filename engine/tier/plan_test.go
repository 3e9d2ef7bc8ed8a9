package tier

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const mib = 1 << 20

// testLinks are round numbers: storage 1 GB/s, h2d 10 GB/s, compute
// 100 GB/s, no latency or overhead unless a case sets them.
func testLinks() Links {
	return Links{StorageToHost: 1e9, HostToDevice: 10e9, Compute: 100e9}
}

func uniform(n int, b int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = b
	}
	return s
}

func tiersOf(p *Plan) string {
	var b strings.Builder
	for _, l := range p.Layers {
		b.WriteString(l.Tier.String())
	}
	return b.String()
}

func TestPlan(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		req   Request
		tiers string // expected tier per layer
		depth int
		bound Link
		check func(t *testing.T, p *Plan)
	}{
		{
			name: "everything fits: all A, no slots",
			req: Request{Sizes: Sizes{Layers: uniform(4, 100*mib), Globals: 50 * mib, Output: 30 * mib},
				DeviceBudget: 1000 * mib, HostBudget: 1000 * mib, KVBytes: 10 * mib, ScratchBytes: 5 * mib, Links: testLinks()},
			tiers: "AAAA", depth: 0, bound: LinkCompute,
			check: func(t *testing.T, p *Plan) {
				if p.SlotBytes != 0 || p.Device.Total != 465*mib || p.Moved != (LinkBytes{}) {
					t.Errorf("slots %d, device %d, moved %+v", p.SlotBytes, p.Device.Total, p.Moved)
				}
				if want := seconds(430 * mib / 100e9); p.Time.Compute != want {
					t.Errorf("compute time %v, want %v (layers + output)", p.Time.Compute, want)
				}
			},
		},
		{
			name: "tiny VRAM, ample RAM: everything B",
			req: Request{Sizes: Sizes{Layers: uniform(4, 100*mib), Globals: 50 * mib},
				DeviceBudget: 260 * mib, HostBudget: 1000 * mib, Links: testLinks()},
			tiers: "BBBB", depth: 2, bound: LinkHostToDevice,
			check: func(t *testing.T, p *Plan) {
				if p.SlotBytes != 100*mib || p.Device.Slots != 200*mib || p.Host.Layers != 400*mib || p.Host.Staging != 0 {
					t.Errorf("slot %d, device slots %d, host %+v", p.SlotBytes, p.Device.Slots, p.Host)
				}
			},
		},
		{
			name: "tiny VRAM, RAM for two layers plus staging: B then C",
			req: Request{Sizes: Sizes{Layers: uniform(6, 100*mib), Globals: 50 * mib},
				DeviceBudget: 260 * mib, HostBudget: 450 * mib, Links: testLinks()},
			tiers: "BBCCCC", depth: 2, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.Host.Staging != 200*mib || p.StagingBytes != 100*mib {
					t.Errorf("host %+v", p.Host)
				}
				if p.Moved.Storage != 400*mib || p.Moved.HostToDevice != 600*mib {
					t.Errorf("moved %+v", p.Moved)
				}
			},
		},
		{
			name: "RAM only for staging: all C",
			req: Request{Sizes: Sizes{Layers: uniform(4, 100*mib), Globals: 50 * mib},
				DeviceBudget: 260 * mib, HostBudget: 250 * mib, Links: testLinks()},
			tiers: "CCCC", depth: 2, bound: LinkStorage,
		},
		{
			name: "device fits two layers besides slots: two A, rest B",
			req: Request{Sizes: Sizes{Layers: uniform(6, 100*mib)},
				DeviceBudget: 400 * mib, HostBudget: 1000 * mib, Links: testLinks()},
			tiers: "AABBBB", depth: 2, bound: LinkHostToDevice,
		},
		{
			// Two slots and two staging buffers (tier-C reads land in
			// staging, then are copied into a slot) leave room for two
			// resident layers in 650 MiB.
			name: "shared memory (CPU): A then C, no B, no h2d, staging in the budget",
			req: Request{Sizes: Sizes{Layers: uniform(10, 100*mib)}, Shared: true,
				DeviceBudget: 650 * mib, HostBudget: 1 << 40, Links: testLinks()},
			tiers: "AACCCCCCCC", depth: 2, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.Moved.HostToDevice != 0 || p.Host.Layers != 0 {
					t.Errorf("shared plan moves %+v over h2d, host %+v", p.Moved, p.Host)
				}
				if p.StagingBytes != 100*mib || p.Host.Staging != 200*mib || p.Host.Total != 200*mib || p.Device.Total != 400*mib ||
					p.Device.Budget != 650*mib || p.Host.Budget != 0 {
					t.Errorf("staging %d, device %+v, host %+v: want 2 x 100 MiB staging beside 400 MiB in the 650 MiB budget",
						p.StagingBytes, p.Device, p.Host)
				}
			},
		},
		{
			// Storage latency makes a deeper pipeline faster, and four
			// slots fit the budget, but not four slots and their staging:
			// the planner must pay for staging when it compares depths
			// (it once chose the depth by the slots alone and left no room
			// for the buffers, so a load whose links were measured under
			// load failed to fit where the default links fit).
			name: "shared memory (CPU): staging decides the depth",
			req: Request{Sizes: Sizes{Layers: uniform(6, 100*mib)}, Shared: true,
				DeviceBudget: 450 * mib, HostBudget: 1 << 40,
				Links: Links{StorageToHost: 1e9, HostToDevice: 10e9, Compute: 100e9, StorageLatency: 500 * time.Millisecond}},
			tiers: "CCCCCC", depth: 2, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.Device.Total+p.Host.Total > p.Device.Budget || p.Host.Staging != 200*mib {
					t.Errorf("device %+v, host %+v: over the budget", p.Device, p.Host)
				}
			},
		},
		{
			// Q4_K_M-like: layers 1 and 3 are bigger (Q6_K tensors). With
			// 720 MiB, keeping the big ones makes the slots (and staging
			// buffers) small: 300 + 2x2x100 fits and 500 MiB stream. With
			// 150 MiB slots no big layer fits beside them and staging (all
			// 800 MiB stream); "first N" fits only layer 0 beside 2x2x150.
			name: "unequal sizes: the big layers stay, slots shrink",
			req: Request{Sizes: Sizes{Layers: []int64{100 * mib, 150 * mib, 100 * mib, 150 * mib, 100 * mib, 100 * mib, 100 * mib}}, Shared: true,
				DeviceBudget: 720 * mib, Links: testLinks()},
			tiers: "CACACCC", depth: 2, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.SlotBytes != 100*mib || p.Moved.Storage != 500*mib {
					t.Errorf("slot %d, moved %+v", p.SlotBytes, p.Moved)
				}
			},
		},
		{
			// 150 MiB left beside the slots and staging holds one big
			// layer or both small ones. Without per-transfer overhead the
			// big layer saves more (more bytes off the link)...
			name: "leftover budget: one big layer beats two small",
			req: Request{Sizes: Sizes{Layers: []int64{150 * mib, 10 * mib, 150 * mib, 10 * mib, 150 * mib, 150 * mib, 150 * mib, 150 * mib}}, Shared: true,
				DeviceBudget: 750 * mib, Depth: 2, Links: testLinks()},
			tiers: "ACCCCCCC", depth: 2, bound: LinkStorage,
		},
		{
			// ...with 200 ms per transfer two small layers save 421 ms and
			// one big one 357 ms.
			name: "leftover budget, per-transfer overhead: two small beat one big",
			req: Request{Sizes: Sizes{Layers: []int64{150 * mib, 10 * mib, 150 * mib, 10 * mib, 150 * mib, 150 * mib, 150 * mib, 150 * mib}}, Shared: true,
				DeviceBudget: 750 * mib, Depth: 2,
				Links: Links{StorageToHost: 1e9, HostToDevice: 10e9, Compute: 100e9, StorageOverhead: 200 * time.Millisecond}},
			tiers: "CACACCCC", depth: 2, bound: LinkStorage,
		},
		{
			name: "KV cache takes budget: one layer fewer resident",
			req: Request{Sizes: Sizes{Layers: uniform(6, 100*mib)},
				DeviceBudget: 400 * mib, HostBudget: 1000 * mib, KVBytes: 100 * mib, Links: testLinks()},
			tiers: "ABBBBB", depth: 2, bound: LinkHostToDevice,
		},
		{
			// 10 MiB at 1 GB/s is 10.5 ms per layer. A slot is refilled
			// when the compute of its previous layer ends; the read then
			// takes 10.5 ms of link time plus 30 ms of latency, while the
			// link serves the k-1 layers ahead: k·10.5 >= 40.6, so k = 4
			// (4 slots and 4 staging buffers). The budget also allows 3
			// slots + 2 resident layers, or 2 + 4: both stall more than the
			// resident layers save.
			name: "depth covers latency",
			req: Request{Sizes: Sizes{Layers: uniform(16, 10*mib), Globals: 25 * mib}, Shared: true,
				DeviceBudget: 105 * mib, Links: Links{StorageToHost: 1e9, HostToDevice: 1e10, Compute: 1e11, StorageLatency: 30 * time.Millisecond}},
			tiers: "CCCCCCCCCCCCCCCC", depth: 4, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.Stall != 0 {
					t.Errorf("stall %v with depth %d", p.Stall, p.Depth)
				}
			},
		},
		{
			// With 22 ms of latency a read and its latency take 32.6 ms, so
			// 3 slots fall a little behind the link (a third of that per
			// layer) and 4 keep up. The planner trades that depth for
			// residency where it wins: 3 slots (and staging) + 8 resident
			// layers stream 8 with a stall, 4 slots + 6 resident stream 10
			// without one, and lose.
			name: "depth traded for residency",
			req: Request{Sizes: Sizes{Layers: uniform(16, 10*mib), Globals: 25 * mib}, Shared: true,
				DeviceBudget: 165 * mib, Links: Links{StorageToHost: 1e9, HostToDevice: 1e10, Compute: 1e11, StorageLatency: 22 * time.Millisecond}},
			tiers: "AAAAAAAACCCCCCCC", depth: 3, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.Stall <= 0 || p.PassTime >= seconds(10*10*mib/1e9) {
					t.Errorf("stall %v, pass %v", p.Stall, p.PassTime)
				}
			},
		},
		{
			name: "depth limited by memory: stall reported",
			req: Request{Sizes: Sizes{Layers: uniform(8, 10*mib)}, Shared: true,
				DeviceBudget: 60 * mib, Links: Links{StorageToHost: 1e9, HostToDevice: 1e10, Compute: 1e11, StorageLatency: 30 * time.Millisecond}},
			tiers: "CCCCCCCC", depth: 3, bound: LinkStorage,
			check: func(t *testing.T, p *Plan) {
				if p.Stall <= 0 || p.PassTime != p.Time.Storage+p.Stall || p.Device.Total+p.Host.Total > 60*mib {
					t.Errorf("stall %v, pass %v, storage %v", p.Stall, p.PassTime, p.Time.Storage)
				}
			},
		},
		{
			name: "fixed depth",
			req: Request{Sizes: Sizes{Layers: uniform(8, 100*mib)}, Shared: true, Depth: 3,
				DeviceBudget: 700 * mib, Links: testLinks()},
			tiers: "ACCCCCCC", depth: 3, bound: LinkStorage,
		},
		{
			name: "compute bound: fast links keep streaming cheap",
			req: Request{Sizes: Sizes{Layers: uniform(4, 100*mib)},
				DeviceBudget: 260 * mib, HostBudget: 1000 * mib,
				Links: Links{StorageToHost: 1e9, HostToDevice: 50e9, Compute: 10e9}},
			tiers: "BBBB", depth: 2, bound: LinkCompute,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPlan(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := tiersOf(p); got != c.tiers {
				t.Errorf("tiers %s, want %s", got, c.tiers)
			}
			if p.Depth != c.depth {
				t.Errorf("depth %d, want %d", p.Depth, c.depth)
			}
			if p.Bound != c.bound {
				t.Errorf("bound by %v, want %v (times %+v)", p.Bound, c.bound, p.Time)
			}
			if p.Device.Total > c.req.DeviceBudget || (!c.req.Shared && p.Host.Total > c.req.HostBudget) {
				t.Errorf("plan exceeds budgets: device %+v host %+v", p.Device, p.Host)
			}
			// Totals agree with the layers.
			var tot [3]TierTotal
			var moved LinkBytes
			for _, l := range p.Layers {
				tot[l.Tier].Layers++
				tot[l.Tier].Bytes += l.Bytes
				moved.Storage += l.Moved.Storage
				moved.HostToDevice += l.Moved.HostToDevice
			}
			if tot != p.Tiers || moved != p.Moved {
				t.Errorf("totals %+v / %+v disagree with layers %+v / %+v", p.Tiers, p.Moved, tot, moved)
			}
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		req  Request
		want string
	}{
		{"no layers", Request{Links: testLinks()}, "no layers"},
		{"globals do not fit", Request{Sizes: Sizes{Layers: uniform(2, mib), Globals: 10 * mib}, DeviceBudget: 5 * mib, Links: testLinks()}, "exceed the device budget"},
		{"KV does not fit", Request{Sizes: Sizes{Layers: uniform(2, mib)}, KVBytes: 10 * mib, DeviceBudget: 5 * mib, Links: testLinks()}, "KV cache"},
		{"not even two slots", Request{Sizes: Sizes{Layers: uniform(4, 10*mib)}, Shared: true, DeviceBudget: 15 * mib, Links: testLinks()}, "2 slots"},
		{"no staging", Request{Sizes: Sizes{Layers: uniform(4, 10*mib)}, DeviceBudget: 25 * mib, HostBudget: 5 * mib, Links: testLinks()}, "host staging"},
		{"zero bandwidth", Request{Sizes: Sizes{Layers: uniform(2, mib)}, DeviceBudget: 5 * mib, Links: Links{StorageToHost: 1, HostToDevice: 1}}, "compute bandwidth"},
		{"bad layer", Request{Sizes: Sizes{Layers: []int64{mib, 0}}, DeviceBudget: 5 * mib, Links: testLinks()}, "layer 1 has 0 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPlan(c.req)
			if err == nil {
				t.Fatalf("plan %s accepted", tiersOf(p))
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to mention %q", err, c.want)
			}
			if strings.Contains(c.want, "budget") || strings.Contains(c.want, "slots") {
				if !errors.Is(err, ErrNoFit) {
					t.Errorf("error does not wrap ErrNoFit")
				}
			}
		})
	}
}

// TestPlanNeverWorseThanFirstN compares the planner with the "first N
// layers resident" rule on random unequal layer sizes and budgets: the
// chosen plan must never be slower or move more bytes.
func TestPlanNeverWorseThanFirstN(t *testing.T) {
	t.Parallel()
	rnd := uint64(12345)
	next := func(n uint64) uint64 {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		return (rnd >> 33) % n
	}
	for it := 0; it < 300; it++ {
		n := 2 + int(next(10))
		sizes := make([]int64, n)
		for i := range sizes {
			sizes[i] = int64(50+next(3)*25) * mib
		}
		req := Request{Sizes: Sizes{Layers: sizes}, Shared: it%2 == 0, Depth: 2,
			DeviceBudget: int64(200+next(800)) * mib, HostBudget: int64(300+next(800)) * mib, Links: testLinks()}
		p, err := NewPlan(req)
		if err != nil {
			continue
		}
		// First N: as many leading layers on A as fit, then B, then C.
		for a := n; a >= 0; a-- {
			tiers := make([]Tier, n)
			for i := range tiers {
				tiers[i] = TierC
				if i < a {
					tiers[i] = TierA
				}
			}
			if !req.Shared {
				// leading streamed layers on B while the host budget allows
				var rest []int
				for i := a; i < n; i++ {
					rest = append(rest, i)
				}
				tiers, _ = fillFirst(req, tiers, rest)
			}
			q := req.evaluate(tiers, 2)
			if q == nil {
				continue
			}
			if better(q, p) {
				t.Fatalf("sizes %v budgets %d/%d shared %v: first-N %s (%v, %d moved) beats the planner's %s (%v, %d moved)",
					sizes, req.DeviceBudget/mib, req.HostBudget/mib, req.Shared, tiersOf(q), q.PassTime, q.Moved.Storage+q.Moved.HostToDevice,
					tiersOf(p), p.PassTime, p.Moved.Storage+p.Moved.HostToDevice)
			}
			break
		}
	}
}

// fillFirst puts the leading layers of rest on B while the host budget
// (minus staging for the rest) allows.
func fillFirst(r Request, tiers []Tier, rest []int) ([]Tier, bool) {
	for b := len(rest); b >= 0; b-- {
		t := append([]Tier(nil), tiers...)
		var used, stage int64
		for j, i := range rest {
			if j < b {
				t[i] = TierB
				used += r.Sizes.Layers[i]
			} else {
				stage = max(stage, r.Sizes.Layers[i])
			}
		}
		if used+2*stage <= r.HostBudget {
			return t, true
		}
	}
	return tiers, false
}

func TestParseMemInfo(t *testing.T) {
	t.Parallel()
	good := "MemTotal:       24684092 kB\nMemFree:        18072224 kB\nMemAvailable:   23697856 kB\n"
	mi, err := parseMemInfo(strings.NewReader(good))
	if err != nil || mi.Total != 24684092*1024 || mi.Available != 23697856*1024 {
		t.Fatalf("parseMemInfo = %+v, %v", mi, err)
	}
	if got := DefaultHostBudget(mi); got != mi.Available-mi.Total/10 {
		t.Errorf("DefaultHostBudget = %d", got)
	}
	if got := DefaultHostBudget(MemInfo{Total: 4 << 30, Available: 512 << 20}); got != 0 {
		t.Errorf("DefaultHostBudget of a starved host = %d, want 0", got)
	}
	for _, bad := range []string{"MemTotal: 1 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n", "MemTotal: 1 MB\nMemAvailable: 1 kB\n"} {
		if _, err := parseMemInfo(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMemInfo(%q) accepted", bad)
		}
	}
	if _, err := ReadMemInfo(); err != nil {
		t.Logf("no /proc/meminfo here: %v", err)
	}
}
