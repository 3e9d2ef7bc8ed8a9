package tier

import (
	"testing"
	"time"
)

// hybridLayers returns n streamed layers of the 8b Q4_K_M shape's proportions.
func hybridLayers(n int) []HybridLayer {
	ls := make([]HybridLayer, n)
	for i := range ls {
		ls[i] = HybridLayer{Index: 16 + i, Full: 120 << 20, Attn: 22 << 20, FFN: 98 << 20}
	}
	return ls
}

func TestPlanHybrid(t *testing.T) {
	t.Parallel()
	const h2d = 55e9
	for _, tc := range []struct {
		name      string
		layers    []HybridLayer
		cpu       float64
		wantSome  bool
		maxRatio  float64 // plan's pass over the all-streamed pass
		minToCPUs int
	}{
		// A CPU as fast as PCIe: about half the bytes go to it, the pass
		// approaches bytes / (cpu + h2d) (0.5 of streaming).
		{"balanced", hybridLayers(16), 55e9, true, 0.62, 6},
		// A CPU far slower than PCIe (a large batch): nothing or little.
		{"slow cpu", hybridLayers(16), 2e9, false, 1, 0},
		// No CPU at all.
		{"no cpu", hybridLayers(16), 0, false, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := PlanHybrid(tc.layers, 2, HybridRates{HostToDevice: h2d, CPU: tc.cpu, Hop: 50 * time.Microsecond}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if (len(p.CPU) > 0) != tc.wantSome || len(p.CPU) < tc.minToCPUs {
				t.Fatalf("%d CPU layers (%v)", len(p.CPU), p.CPU)
			}
			if r := float64(p.Pass) / float64(p.Streamed); r > tc.maxRatio {
				t.Fatalf("pass %v is %.2f of streaming's %v", p.Pass, r, p.Streamed)
			}
			var full int64
			for _, l := range tc.layers {
				full += l.Full
			}
			if !tc.wantSome && (p.Moved != full || p.CPUBytes != 0) {
				t.Fatalf("moved %d, cpu %d; want %d, 0", p.Moved, p.CPUBytes, full)
			}
			if tc.wantSome {
				// The bound: every off-GPU byte over both links at once.
				bound := time.Duration(float64(full) / (h2d + tc.cpu) * 1e9)
				if p.Pass < bound {
					t.Fatalf("pass %v beats the combined-link bound %v", p.Pass, bound)
				}
				if p.Moved+p.CPUBytes != full {
					t.Fatalf("moved %d + cpu %d != %d", p.Moved, p.CPUBytes, full)
				}
			}
		})
	}
}

func TestPlanHybridSkipsIneligible(t *testing.T) {
	t.Parallel()
	ls := hybridLayers(8)
	for i := range ls {
		if i%2 == 0 {
			ls[i].FFN = 0
		}
	}
	p, err := PlanHybrid(ls, 2, HybridRates{HostToDevice: 55e9, CPU: 70e9}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.CPU) == 0 {
		t.Fatal("no CPU layers")
	}
	for _, i := range p.CPU {
		if (i-16)%2 == 0 {
			t.Fatalf("layer %d cannot compute on the CPU but was placed there", i)
		}
	}
}

func TestPlanHybridRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		layers []HybridLayer
		depth  int
		r      HybridRates
	}{
		{"depth", hybridLayers(2), 0, HybridRates{HostToDevice: 1, CPU: 1}},
		{"h2d", hybridLayers(2), 2, HybridRates{CPU: 1}},
		{"attention past the layer", []HybridLayer{{Full: 10, Attn: 11}}, 2, HybridRates{HostToDevice: 1, CPU: 1}},
	} {
		if _, err := PlanHybrid(tc.layers, tc.depth, tc.r, 1); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestPlanHybridNearTheBound: on the 8b and 70b shapes' streamed layers at
// the rates measured on the H200 host, the plan's simulated pass is within
// 1.15 of the combined-link bound (every off-GPU byte over PCIe and the
// CPU at once), and local search never loses to the even spread it starts
// from.
func TestPlanHybridNearTheBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		n               int
		full, attn, ffn int64
		h2d, cpu        float64
	}{
		{"8b", 16, 131 << 20, 23 << 20, 108 << 20, 55.5e9, 47e9},
		{"70b", 43, 466 << 20, 83 << 20, 383 << 20, 55.4e9, 49.6e9},
	} {
		ls := make([]HybridLayer, tc.n)
		var full int64
		for i := range ls {
			ls[i] = HybridLayer{Index: i, Full: tc.full, Attn: tc.attn, FFN: tc.ffn}
			full += tc.full
		}
		r := HybridRates{HostToDevice: tc.h2d, CPU: tc.cpu, Hop: 60 * time.Microsecond}
		p, err := PlanHybrid(ls, 2, r, 1)
		if err != nil {
			t.Fatal(err)
		}
		bound := time.Duration(float64(full) / (tc.h2d + tc.cpu) * 1e9)
		if ratio := float64(p.Pass) / float64(bound); ratio > 1.15 {
			t.Errorf("%s: pass %v is %.3f of the bound %v", tc.name, p.Pass, ratio, bound)
		}
		on := make([]bool, len(ls))
		eligible := make([]int, len(ls))
		for i := range eligible {
			eligible[i] = i
		}
		spread := 0
		for x := 1; x <= len(ls); x++ {
			clear(on)
			for j := 0; j < x; j++ {
				on[(2*j+1)*len(ls)/(2*x)] = true
			}
			if t := simulateHybrid(ls, on, 2, r); spread == 0 || t < time.Duration(spread) {
				spread = int(t)
			}
		}
		if p.Pass > time.Duration(spread) {
			t.Errorf("%s: the refined plan %v loses to the best even spread %v", tc.name, p.Pass, time.Duration(spread))
		}
	}
}

// TestPlanHybridCarriesThroughTheTail: in a run of passes the copy engine
// fills the ring with the next pass's first layers during the GPU's tail
// (the pipeline carries them over), so a tail costs a pass only what the
// ring cannot hide; a layer read from storage carries nothing, nor does
// any after it. Eight 100 MB layers at 50 GB/s, a ring of two, and a 5 ms
// tail: 16 ms of copies, of which two layers (4 ms) run in the tail.
func TestPlanHybridCarriesThroughTheTail(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	mk := func(stored int) []HybridLayer {
		var ls []HybridLayer
		for i := range 8 {
			ls = append(ls, HybridLayer{Index: i, Full: 100e6, Attn: 20e6, Stored: i == stored})
		}
		return ls
	}
	for _, tc := range []struct {
		name   string
		stored int
		lead   time.Duration
		want   time.Duration
	}{
		{"tier B", -1, 0, 17 * ms},
		// The ring is full when the pass starts: a lead adds to the pass.
		{"with a lead", -1, 3 * ms, 20 * ms},
		{"the second layer stored", 1, 0, 19 * ms},
		{"the first layer stored", 0, 0, 21 * ms},
	} {
		p, err := PlanHybrid(mk(tc.stored), 2, HybridRates{HostToDevice: 50e9, Hop: DefaultHop, Lead: tc.lead, Tail: 5 * ms}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Streamed - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: %v a pass streamed, want %v", tc.name, p.Streamed, tc.want)
		}
	}
}

// TestPlanHybridWantsAClearGain: a placement with CPU layers is taken only
// when it simulates at least minHybridGain faster than streaming alone;
// a CPU slow enough that one layer on it gains less keeps every layer
// streamed.
func TestPlanHybridWantsAClearGain(t *testing.T) {
	t.Parallel()
	var ls []HybridLayer
	for i := range 16 {
		ls = append(ls, HybridLayer{Index: i, Full: 100e6, Attn: 20e6, FFN: 80e6})
	}
	sawSmallGain := false
	for cpu := 1e9; cpu <= 200e9; cpu *= 1.05 {
		r := HybridRates{HostToDevice: 50e9, CPU: cpu, Hop: DefaultHop, Lead: time.Millisecond, Tail: time.Millisecond}
		p, err := PlanHybrid(ls, 2, r, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.CPU) > 0 && p.Pass > time.Duration(float64(p.Streamed)*(1-minHybridGain)) {
			t.Errorf("CPU %.3g B/s: %d CPU layers for %v against %v streamed", cpu, len(p.CPU), p.Pass, p.Streamed)
		}
		if len(p.CPU) == 0 && (p.Pass != p.Streamed || p.CPUBytes != 0) {
			t.Errorf("CPU %.3g B/s: no CPU layer, yet %v a pass against %v streamed, %d bytes on the CPU", cpu, p.Pass, p.Streamed, p.CPUBytes)
		}
		for i := range ls {
			one := make([]bool, len(ls))
			one[i] = true
			if g := 1 - float64(simulateHybrid(ls, one, 2, r))/float64(p.Streamed); g > 0 && g < minHybridGain && len(p.CPU) == 0 {
				sawSmallGain = true
			}
		}
	}
	if !sawSmallGain {
		t.Error("no CPU rate in the sweep where one CPU layer gains a little and the plan keeps them all streamed")
	}
}
