package engine

import (
	"slices"
	"time"
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

// aheadTrial decides, per batch size, whether the expert store reads the
// experts predicted for the next layer ahead. A read ahead overlaps a
// layer's storage reads with the compute before it, but a wrong
// prediction's read is wasted: where storage is the bottleneck the waste
// costs more than the overlap gains (measured on a virtio disk with
// Qwen3-30B-A3B at batch 1: 0.98 against 1.28 tok/s), where compute is a
// large share it gains (the same disk at batch 4). Which way is faster is
// measured, not modelled: the first passes of a batch size run a block
// with reads ahead, then a block without, each a warm-up pass and then
// aheadTrials timed ones, and the way whose passes waited less for
// storage by the median is kept. A pass's time waiting for storage stands
// for its time: the compute is the same either way, and the gaps between
// passes (sampling, the scheduler) would only add noise.
type aheadTrial struct {
	sizes map[int]*aheadState
}

// aheadState is one batch size's trial or decision.
type aheadState struct {
	passes  int                // recorded, warm-ups included: the block with reads ahead, then the one without
	waits   [2][]time.Duration // timed passes' storage waits by way: 0 without, 1 with
	decided bool
	on      bool
}

const (
	// aheadMaxBatch is the largest batch size decided by trial: larger
	// passes (prefill chunks) compute long enough to hide reads ahead.
	aheadMaxBatch = 8
	aheadTrials   = 4
	aheadWarm     = 1
)

// AheadChoice is a batch size's decision, for ExpertStats.
type AheadChoice struct {
	Batch int `json:"batch"`
	// On is whether experts are read ahead; With and Without are the
	// median storage waits per pass each way that decided it.
	On      bool          `json:"on"`
	With    time.Duration `json:"with_ns"`
	Without time.Duration `json:"without_ns"`
}

// on reports whether the next pass of T rows reads ahead.
func (a *aheadTrial) on(T int) bool {
	if T < 1 || T > aheadMaxBatch {
		return true
	}
	s := a.state(T)
	if s.decided {
		return s.on
	}
	return s.passes < aheadWarm+aheadTrials
}

// record counts a finished pass of T rows that read ahead (or not, as on
// says) and waited wait for storage; the pass that completes the trial
// decides it.
func (a *aheadTrial) record(T int, on bool, wait time.Duration) {
	if T < 1 || T > aheadMaxBatch {
		return
	}
	s := a.state(T)
	if s.decided || on != (s.passes < aheadWarm+aheadTrials) {
		return // a pass begun before a reset, or out of turn
	}
	k := s.passes % (aheadWarm + aheadTrials)
	s.passes++
	if k >= aheadWarm {
		w := 0
		if on {
			w = 1
		}
		s.waits[w] = append(s.waits[w], wait)
	}
	if s.passes == 2*(aheadWarm+aheadTrials) {
		s.decided = true
		s.on = median(s.waits[1]) < median(s.waits[0])
	}
}

// choices lists the decided batch sizes.
func (a *aheadTrial) choices() []AheadChoice {
	var out []AheadChoice
	for T, s := range a.sizes {
		if s.decided {
			out = append(out, AheadChoice{Batch: T, On: s.on, With: median(s.waits[1]), Without: median(s.waits[0])})
		}
	}
	slices.SortFunc(out, func(x, y AheadChoice) int { return x.Batch - y.Batch })
	return out
}

func (a *aheadTrial) state(T int) *aheadState {
	if a.sizes == nil {
		a.sizes = map[int]*aheadState{}
	}
	s := a.sizes[T]
	if s == nil {
		s = &aheadState{}
		a.sizes[T] = s
	}
	return s
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}
