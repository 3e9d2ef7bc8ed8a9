package gpu

import (
	"time"

	"github.com/strata-llm/strata/internal/waytrial"
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
type expertChoice struct{ t, mapped waytrial.Trial }

const (
	// choiceMaxBatch is the largest batch size decided by trial: larger
	// passes compute the resident experts on the GPU.
	choiceMaxBatch = 8
	// choiceTrials is the passes timed each way; choiceWarm the passes
	// each way that are not (the first after the other way ran).
	choiceTrials = waytrial.Timed
	choiceWarm   = waytrial.Warm
)

// ExpertTrialPasses is how many passes of a batch size the trial takes
// before its way is kept: a benchmark of a model with resident experts
// warms up past them.
const ExpertTrialPasses = waytrial.Passes

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

// trial is c's trial, the GPU's way first.
func (c *expertChoice) trial() *waytrial.Trial {
	c.t.MaxBatch = choiceMaxBatch
	return &c.t
}

// device reports whether the next pass of T tokens should compute the
// resident experts on the GPU.
func (c *expertChoice) device(T int) bool { return c.trial().First(T) }

// record counts a finished pass of T tokens that went the way device
// says in d.
func (c *expertChoice) record(T int, device bool, d time.Duration) { c.trial().Record(T, device, d) }

// decisions lists the decided batch sizes.
func (c *expertChoice) decisions() []ExpertChoice {
	var out []ExpertChoice
	for _, d := range c.trial().Decisions() {
		out = append(out, ExpertChoice{Batch: d.Batch, Device: d.First, DevicePass: d.FirstTime, CPUPass: d.SecondTime})
	}
	return out
}

// reset forgets every decision (the resident experts changed).
func (c *expertChoice) reset() {
	c.trial().Reset()
	c.mappedTrial().Reset()
}

// mappedTrial is the trial of mapped experts at one token
// (SetMappedExperts's MappedTrial): the host's way first, then pulling
// them.
func (c *expertChoice) mappedTrial() *waytrial.Trial {
	c.mapped.MaxBatch = 1
	return &c.mapped
}

// mappedDecision is mappedTrial's decision, once made.
func (c *expertChoice) mappedDecision() (waytrial.Decision, bool) {
	for _, d := range c.mappedTrial().Decisions() {
		return d, true
	}
	return waytrial.Decision{}, false
}
