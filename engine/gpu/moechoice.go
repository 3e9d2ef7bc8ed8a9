package gpu

import (
	"slices"
	"time"
)

// expertChoice decides, per batch size, whether a pass computes the picked
// resident experts on the GPU or leaves every pick to the CPU. With few
// tokens the GPU's share costs a launch per product and a host wait for
// the routing in every layer, and a CPU that reads the same experts from
// pinned memory can be faster (measured on the H200 host with Qwen3-30B-A3B
// at batch 1); with more tokens the GPU's products win. Which way is
// faster is measured, not modelled: the first passes of a batch size run
// a block of the GPU's way, then a block of the CPU's, each a warm-up
// pass and then choiceTrials timed ones, and the faster by the median is
// kept until the resident set changes (reset). Blocks rather than
// alternate passes, so that each way is timed as it runs once kept, pass
// after pass of the same way: a pass's cost can depend on the one before
// it (which experts the caches and the thread team's state were left
// with).
type expertChoice struct {
	sizes []choiceState // by batch size - 1, up to choiceMaxBatch
}

// choiceState is one batch size's trial or decision.
type choiceState struct {
	passes  int                // passes recorded, warm-ups included: the GPU's block, then the CPU's
	times   [2][]time.Duration // trial passes by way: 0 the CPU alone, 1 the GPU's experts too
	decided bool
	device  bool
}

const (
	// choiceMaxBatch is the largest batch size decided by trial: larger
	// passes compute the resident experts on the GPU.
	choiceMaxBatch = 8
	// choiceTrials is the passes timed each way; choiceWarm the passes
	// each way that are not (the first after the other way ran).
	choiceTrials = 4
	choiceWarm   = 1
)

// ExpertTrialPasses is how many passes of a batch size the trial takes
// before its way is kept: a benchmark of a model with resident experts
// warms up past them.
const ExpertTrialPasses = 2 * (choiceWarm + choiceTrials)

// ExpertChoice is a batch size's decision, for MoEStats.
type ExpertChoice struct {
	Batch int `json:"batch"`
	// Device is whether the GPU computes the resident experts' picks;
	// DevicePass and CPUPass are the median pass times each way that
	// decided it.
	Device     bool          `json:"device"`
	DevicePass time.Duration `json:"device_pass_ns"`
	CPUPass    time.Duration `json:"cpu_pass_ns"`
}

// device reports whether the next pass of T tokens should compute the
// resident experts on the GPU.
func (c *expertChoice) device(T int) bool {
	if T < 1 || T > choiceMaxBatch {
		return true
	}
	s := c.state(T)
	if s.decided {
		return s.device
	}
	// The GPU's block first, then the CPU's.
	return s.passes < choiceWarm+choiceTrials
}

// record counts a finished pass of T tokens that went the way device
// says in d.
func (c *expertChoice) record(T int, device bool, d time.Duration) {
	if T < 1 || T > choiceMaxBatch {
		return
	}
	s := c.state(T)
	if s.decided {
		return
	}
	if s.passes%(choiceWarm+choiceTrials) >= choiceWarm {
		w := 0
		if device {
			w = 1
		}
		s.times[w] = append(s.times[w], d)
	}
	s.passes++
	if len(s.times[0]) < choiceTrials || len(s.times[1]) < choiceTrials {
		return
	}
	cpu, dev := median(s.times[0]), median(s.times[1])
	s.decided, s.device = true, dev <= cpu
}

// decisions lists the decided batch sizes.
func (c *expertChoice) decisions() []ExpertChoice {
	var out []ExpertChoice
	for i, s := range c.sizes {
		if s.decided {
			out = append(out, ExpertChoice{Batch: i + 1, Device: s.device, DevicePass: median(s.times[1]), CPUPass: median(s.times[0])})
		}
	}
	return out
}

// reset forgets every decision (the resident experts changed).
func (c *expertChoice) reset() { c.sizes = nil }

func (c *expertChoice) state(T int) *choiceState {
	for len(c.sizes) < T {
		c.sizes = append(c.sizes, choiceState{})
	}
	return &c.sizes[T-1]
}

// median is the middle of ds (the mean of the two middle ones for an even
// count); 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
