package engine

import (
	"time"

	"github.com/strata-llm/strata/internal/waytrial"
)

// ReadAhead says when experts predicted for the next layer are read ahead
// (Options.ExpertReadAhead).
type ReadAhead int

const (
	// ReadAheadAuto reads ahead where a trial of both ways, per batch
	// size, measures it faster.
	ReadAheadAuto ReadAhead = iota
	// ReadAheadOn always reads ahead.
	ReadAheadOn
	// ReadAheadOff reads an expert only when its layer asks for it.
	ReadAheadOff
)

// aheadMaxBatch is the largest batch size whose reads ahead are decided
// by trial. A read ahead overlaps a layer's storage reads with the
// compute before it, but a wrong prediction's read is wasted: where
// storage is the bottleneck the waste costs more than the overlap gains
// (measured on a virtio disk with Qwen3-30B-A3B at batch 1: 0.98 against
// 1.28 tok/s), where compute is a large share it gains (the same disk at
// batch 4). So which way is faster is measured per batch size, not
// modelled (internal/waytrial: a block of passes reading ahead, then one
// without), by the time each pass waited for storage (inside the store's
// Experts calls): the compute is the same either way, and the gaps
// between passes (sampling, the scheduler) would only add noise. Larger
// passes (prefill chunks) compute long enough to hide their reads ahead
// and always read ahead.
const aheadMaxBatch = 8

// AheadChoice is a batch size's decision, for ExpertStats.
type AheadChoice struct {
	Batch int `json:"batch"`
	// On is whether experts are read ahead; With and Without are the
	// median storage waits per pass each way that decided it.
	On      bool          `json:"on"`
	With    time.Duration `json:"with_ns"`
	Without time.Duration `json:"without_ns"`
}

// aheadChoices is the read-ahead trial's decisions (reading ahead is its
// first way).
func aheadChoices(t *waytrial.Trial) []AheadChoice {
	var out []AheadChoice
	for _, d := range t.Decisions() {
		out = append(out, AheadChoice{Batch: d.Batch, On: d.First, With: d.FirstTime, Without: d.SecondTime})
	}
	return out
}
