// Package waytrial decides, per batch size, between two ways of running a
// pass by timing both: the first passes of a batch size run a block of the
// first way, then a block of the second, each a warm-up pass and then
// Timed timed ones, and the way with the smaller median time is kept (a
// tie keeps the first). Blocks rather than alternate passes, so that each
// way is timed as it runs once kept, pass after pass of the same way: a
// pass's cost can depend on the one before it (what the caches, the
// storage queue and the threads were left with). Engine/gpu decides so
// whether the GPU computes its resident experts, engine whether the
// expert store reads ahead.
package waytrial

import (
	"slices"
	"time"
)

const (
	// Warm is the passes of each block that are not timed (the first
	// after the other way ran); Timed the passes that are.
	Warm  = 1
	Timed = 4
	// Passes is how many passes of a batch size a trial takes before its
	// way is kept: a benchmark warms up past them.
	Passes = 2 * (Warm + Timed)
)

// Trial holds the trials and decisions of every batch size up to
// MaxBatch; larger batches always take the first way. The zero Trial
// with MaxBatch set is ready; it is not safe for concurrent use.
type Trial struct {
	MaxBatch int
	sizes    map[int]*state
}

type state struct {
	passes  int                // recorded, warm-ups included: the first way's block, then the second's
	times   [2][]time.Duration // timed passes by way: 0 the first, 1 the second
	decided bool
	first   bool
}

// Decision is a decided batch size: the way kept and the median pass
// times that decided it.
type Decision struct {
	Batch                 int
	First                 bool
	FirstTime, SecondTime time.Duration
}

// First reports whether the next pass of T rows takes the first way.
func (t *Trial) First(T int) bool {
	if T < 1 || T > t.MaxBatch {
		return true
	}
	s := t.state(T)
	if s.decided {
		return s.first
	}
	return s.passes < Warm+Timed
}

// Record counts a finished pass of T rows that took the first way or not
// and lasted d; a pass out of its block's turn (begun before a Reset) is
// ignored, and the pass that ends the second block decides.
func (t *Trial) Record(T int, first bool, d time.Duration) {
	if T < 1 || T > t.MaxBatch {
		return
	}
	s := t.state(T)
	if s.decided || first != (s.passes < Warm+Timed) {
		return
	}
	if s.passes%(Warm+Timed) >= Warm {
		w := 1
		if first {
			w = 0
		}
		s.times[w] = append(s.times[w], d)
	}
	s.passes++
	if s.passes == Passes {
		s.decided = true
		s.first = median(s.times[0]) <= median(s.times[1])
	}
}

// Decided reports whether T's way is kept.
func (t *Trial) Decided(T int) bool {
	s, ok := t.sizes[T]
	return ok && s.decided
}

// Decisions lists the decided batch sizes in increasing order.
func (t *Trial) Decisions() []Decision {
	var out []Decision
	for T, s := range t.sizes {
		if s.decided {
			out = append(out, Decision{Batch: T, First: s.first, FirstTime: median(s.times[0]), SecondTime: median(s.times[1])})
		}
	}
	slices.SortFunc(out, func(a, b Decision) int { return a.Batch - b.Batch })
	return out
}

// Reset forgets every trial and decision (what they measured changed).
func (t *Trial) Reset() { t.sizes = nil }

func (t *Trial) state(T int) *state {
	if t.sizes == nil {
		t.sizes = map[int]*state{}
	}
	s := t.sizes[T]
	if s == nil {
		s = &state{}
		t.sizes[T] = s
	}
	return s
}

// median is the middle of ds (the mean of the two middle ones for an even
// count); 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
