package model

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// warmChunk is the bytes one thread reads between looks at the stop flag:
// a stop waits for at most one chunk a thread (a few microseconds), and
// the hardware prefetchers see a sequential run long enough to follow.
const warmChunk = 32 << 10

// cacheLine is the stride a warm-up reads at: one load a line brings it
// into the caches.
const cacheLine = 64

// Warm reads w's FFN weights (gate, up, or the fused gate-up, then down),
// from their start, into the CPU's caches on the device's threads but two,
// until the returned stop is called, and stop returns once they have
// stopped, with the bytes read. It is for the time the CPU would
// otherwise wait (for a GPU to reach the layer): a host whose last-level
// cache holds a good part of a layer then reads that part at the cache's
// rate when Run computes the layer, rather than at DRAM's. It changes
// nothing a Run computes; a Run called before stop waits for it.
func (d *FFNDevice) Warm(w *Layer) (stop func() int64) { return d.startWarm(w).stop }

// warmup is one Warm in progress.
type warmup struct {
	parts   [][]byte
	starts  []int // chunk k of the whole is in part i where starts[i] <= k < starts[i+1]
	total   int   // chunks
	stopped atomic.Bool
	next    atomic.Int64
	read    atomic.Int64 // bytes read so far
	done    chan struct{}
}

// startWarm starts Warm's reads.
func (d *FFNDevice) startWarm(w *Layer) *warmup {
	wu := &warmup{done: make(chan struct{})}
	var parts [][]byte
	for _, t := range []*Tensor{&w.Gate, &w.Up, &w.GateUp, &w.Down} {
		if len(t.Data) > 0 {
			parts = append(parts, t.Data)
		}
	}
	go wu.start(d.m, parts)
	return wu
}

// start reads parts, chunk by chunk in order, on m's threads but two
// until stopped or done, then closes wu.done.
func (wu *warmup) start(m *Model, parts [][]byte) {
	defer close(wu.done)
	wu.parts = parts
	wu.starts = make([]int, len(parts)+1)
	for i, p := range parts {
		wu.starts[i+1] = wu.starts[i] + (len(p)+warmChunk-1)/warmChunk
	}
	wu.total = wu.starts[len(parts)]
	if wu.total == 0 || wu.stopped.Load() {
		return
	}
	pool := m.pool
	// Two of the processors stay free: the goroutine that waits for the
	// GPU (and stops this) and the one that waits for it. Were every
	// processor busy reading, the first would find none free when its
	// wait ended, and the reads would run on until the layer was read.
	threads := max(1, pool.Workers()-2)
	sums := make([]byte, pool.Threads())
	// Only Close makes Run fail, and nothing closes the shared pool; a
	// failed warm-up only leaves the caches cold.
	_ = pool.Run(threads, func(wk, _ int) {
		var s byte
		for !wu.stopped.Load() {
			k := int(wu.next.Add(1) - 1)
			if k >= wu.total {
				break
			}
			i := 0
			for wu.starts[i+1] <= k {
				i++
			}
			off := (k - wu.starts[i]) * warmChunk
			b := wu.parts[i][off:min(off+warmChunk, len(wu.parts[i]))]
			for j := 0; j < len(b); j += cacheLine {
				s += b[j]
			}
			wu.read.Add(int64(len(b)))
		}
		// Kept, so that the loads are not dropped as unused.
		sums[wk] += s
	})
}

// stop ends the reads and returns the bytes read once they have ended.
// It may be called again.
func (wu *warmup) stop() int64 {
	wu.stopped.Store(true)
	<-wu.done
	return wu.read.Load()
}

// WarmNext, for a mixture-of-experts layer l whose experts next holds
// (the layer after the one the device just computed), predicts the picks
// of the rows h (the residual that layer left: next's router on it, as
// the expert store's read-ahead predicts them) and reads the predicted
// experts for which keep(e) holds (nil: all) into the CPU's caches, the
// first picks first, until stop is called; stop returns once the reads
// have stopped, with the bytes read. The device's next call waits for
// stop. It is for the wait before layer l's routing reaches the host: the
// CPU then reads what it predicted right at the cache's rate. A layer
// without its experts (an expert source serves them), a dense model, or a
// device that has run no FFN yet warms nothing.
func (d *FFNDevice) WarmNext(l int, next *Layer, h [][]float32, keep func(e int) bool) (stop func() int64) {
	return d.warmNext(l, next, h, keep).stop
}

// warmNext starts WarmNext's prediction and reads.
func (d *FFNDevice) warmNext(l int, next *Layer, h [][]float32, keep func(e int) bool) *warmup {
	m := d.m
	wu := &warmup{done: make(chan struct{})}
	m.mu.Lock() // held by the warm-up until it ends: the device's calls wait
	go func() {
		defer m.mu.Unlock()
		c := &m.Config
		if !c.MoE() || len(next.Experts) != c.Experts || len(h) == 0 || len(m.sc.normW) < c.Dim {
			close(wu.done)
			return
		}
		ms := &m.sc.moe
		ms.sizeAhead(c, len(h))
		m.norm(ms.aheadXn, h, &next.FFNNorm)
		var err error
		if ms.aheadRoutes, err = m.route(l, &next.Router, ms.aheadXn, ms.aheadScores, ms.aheadRoutes); err != nil {
			close(wu.done)
			return
		}
		// Every token's first picks before its later ones, once each.
		slices.SortStableFunc(ms.aheadRoutes, func(a, b route) int { return cmp.Compare(a.slot, b.slot) })
		ms.ahead = ms.ahead[:0]
		for _, r := range ms.aheadRoutes {
			if (keep == nil || keep(r.e)) && !slices.Contains(ms.ahead, r.e) {
				ms.ahead = append(ms.ahead, r.e)
			}
		}
		var parts [][]byte
		for _, e := range ms.ahead {
			x := &next.Experts[e]
			parts = append(parts, x.Gate.Data, x.Up.Data, x.Down.Data)
		}
		wu.start(m, parts)
	}()
	return wu
}
