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
