package model

import (
	"fmt"
	"sync"
)

// parallel runs fn(w, i) for every i in [0, n) on the model's threads
// (internal/workpool's process-wide pool, which every model shares) and
// returns when all calls have finished. Calls with the same w never
// overlap, so fn may use per-thread scratch indexed by w, w below
// m.pool.Threads().
//
// The first step of a routed call made with work beside it
// (FFNRoutedBeside) that has an item for every thread runs that work on
// the caller's thread once the step's workers are started: a smaller
// step (a narrow vector's quantization) would end before the work does
// and hold the next one back.
func (m *Model) parallel(n int, fn func(w, i int)) {
	var b func()
	if m.beside != nil && n >= m.pool.Workers() {
		b, m.beside = m.beside, nil
	}
	if err := m.pool.RunBeside(n, fn, b); err != nil {
		// Only Close makes Run fail, and nothing closes the shared pool.
		panic(fmt.Sprintf("model: %v", err))
	}
}

// parallelItems is parallel for work that needs no thread index (a
// layout's pieces, gemv.Packed.PackWith).
func (m *Model) parallelItems(n int, fn func(i int)) {
	m.parallel(n, func(_, i int) { fn(i) })
}

// firstError keeps the first error the calls of a parallel step report.
type firstError struct {
	mu  sync.Mutex
	err error
}

// set records err unless an error came first.
func (f *firstError) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

// get is the first error recorded, nil if none.
func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
