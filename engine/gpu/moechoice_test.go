package gpu

import (
	"testing"
	"time"
)

// TestExpertChoice: a batch size's passes run a block of the GPU's way,
// then one of the CPU's, the first pass of each uncounted, until
// choiceTrials are timed each way;
// then the faster way by the median is kept (ties to the GPU), a slow
// outlier does not decide it, larger batches always use the GPU, and
// reset starts over.
func TestExpertChoice(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		cpu, dev  time.Duration
		outlier   bool // one CPU pass far slower
		wantDev   bool
		wantTrial int // passes before the decision
	}{
		{"the CPU faster", 30 * ms, 35 * ms, false, false, 2 * (choiceWarm + choiceTrials)},
		{"the GPU faster", 30 * ms, 20 * ms, false, true, 2 * (choiceWarm + choiceTrials)},
		{"a tie keeps the GPU", 30 * ms, 30 * ms, false, true, 2 * (choiceWarm + choiceTrials)},
		{"one slow CPU pass", 30 * ms, 32 * ms, true, false, 2 * (choiceWarm + choiceTrials)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c expertChoice
			for T := 1; T <= 2; T++ {
				n, ways := 0, map[bool]int{}
				for ; n < 100 && !c.decidedFor(T); n++ {
					dev := c.device(T)
					if want := n < choiceWarm+choiceTrials; dev != want {
						t.Fatalf("T=%d: pass %d went the GPU's way %v, want %v (its block)", T, n, dev, want)
					}
					ways[dev]++
					d := tc.cpu
					if dev {
						d = tc.dev
					}
					if !dev && tc.outlier && ways[dev] == choiceWarm+1 {
						d = 10 * tc.cpu
					}
					if n%(choiceWarm+choiceTrials) < choiceWarm {
						d *= 3 // warm-ups are slow and must not count
					}
					c.record(T, dev, d)
				}
				if n != tc.wantTrial || ways[true] != ways[false] {
					t.Fatalf("T=%d: decided after %d passes (%d the GPU's way, %d the CPU's), want %d, half each way", T, n, ways[true], ways[false], tc.wantTrial)
				}
				if got := c.device(T); got != tc.wantDev {
					t.Fatalf("T=%d: device %v, want %v", T, got, tc.wantDev)
				}
			}
			ds := c.decisions()
			if len(ds) != 2 || ds[0].Batch != 1 || ds[0].Device != tc.wantDev || ds[0].CPUPass != tc.cpu || ds[0].DevicePass != tc.dev {
				t.Fatalf("decisions %+v", ds)
			}
			if !c.device(choiceMaxBatch + 1) {
				t.Fatal("a batch past choiceMaxBatch left to the CPU")
			}
			c.record(choiceMaxBatch+1, false, ms) // ignored
			c.reset()
			if len(c.decisions()) != 0 || !c.device(1) {
				t.Fatalf("after reset: %+v", c.decisions())
			}
		})
	}
}

// decidedFor reports whether T's way is decided (tests only).
func (c *expertChoice) decidedFor(T int) bool { return c.trial().Decided(T) }
