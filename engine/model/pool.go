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
func (m *Model) parallel(n int, fn func(w, i int)) {
	m.run(n, fn, nil)
}

// parallelProducts is parallel for a step of matrix products (eachChunk).
// The first such step of a routed call made with work beside it
// (FFNRoutedBeside) that has an item for every thread runs that work on
// the caller's thread once the step's workers are started. Only products
// take it: a step of little work (the inputs' quantization, however many
// vectors a batch's experts bring, a packing) would end long before the
// work beside it and hold the products back until it did; a step of
// fewer items than threads would leave threads idle beside it.
func (m *Model) parallelProducts(n int, fn func(w, i int)) {
	var b func()
	if m.beside != nil && n >= m.pool.Workers() {
		b, m.beside = m.beside, nil
		m.besideSteps++
	}
	m.run(n, fn, b)
}

// run is a step on the pool with beside, when not nil, beside it.
func (m *Model) run(n int, fn func(w, i int), beside func()) {
	if err := m.pool.RunBeside(n, fn, beside); err != nil {
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
