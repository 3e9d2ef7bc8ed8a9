package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/strata-llm/strata/engine/tier"
)

// ErrInjected is the error FaultySource returns for an injected fault.
var ErrInjected = errors.New("injected I/O error")

// FaultySource wraps a Source and fails chosen reads, so tests can prove
// that a failing disk fails one pass cleanly and leaves the pipeline
// usable. Faults are armed and cleared at run time; it is safe for
// concurrent use.
type FaultySource struct {
	tier.Source

	mu     sync.Mutex
	reads  int64 // ReadAt calls so far
	failN  int64 // fail the read with this 1-based number; 0: off
	ranges []tier.Extent
	once   bool
}

// NewFaulty wraps s with no fault armed.
func NewFaulty(s tier.Source) *FaultySource { return &FaultySource{Source: s} }

// FailNth arms a fault on the nth ReadAt from now (1 = the next one).
func (f *FaultySource) FailNth(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN = f.reads + n
}

// FailExtent makes every read overlapping e fail until Clear (or, when
// once is set, only the first such read).
func (f *FaultySource) FailExtent(e tier.Extent, once bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ranges = append(f.ranges, e)
	f.once = once
}

// Clear disarms every fault.
func (f *FaultySource) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.ranges = 0, nil
}

// Reads is the number of ReadAt calls seen.
func (f *FaultySource) Reads() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// ReadAt implements Source, failing with ErrInjected where a fault is armed.
func (f *FaultySource) ReadAt(ctx context.Context, dst []byte, off int64) error {
	f.mu.Lock()
	f.reads++
	fail := f.failN != 0 && f.reads == f.failN
	if fail {
		f.failN = 0
	}
	for i, e := range f.ranges {
		if off < e.End() && off+int64(len(dst)) > e.Offset {
			fail = true
			if f.once {
				f.ranges = append(f.ranges[:i], f.ranges[i+1:]...)
			}
			break
		}
	}
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("faulty source: read [%d, +%d): %w", off, len(dst), ErrInjected)
	}
	return f.Source.ReadAt(ctx, dst, off)
}
