package model

import (
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
	for _, t := range []*Tensor{&w.Gate, &w.Up, &w.GateUp, &w.Down} {
		if len(t.Data) > 0 {
			wu.parts = append(wu.parts, t.Data)
		}
	}
	wu.starts = make([]int, len(wu.parts)+1)
	for i, p := range wu.parts {
		wu.starts[i+1] = wu.starts[i] + (len(p)+warmChunk-1)/warmChunk
	}
	wu.total = wu.starts[len(wu.parts)]
	pool := d.m.pool
	// Two of the processors stay free: the goroutine that waits for the
	// GPU (and stops this) and the one that waits for it. Were every
	// processor busy reading, the first would find none free when its
	// wait ended, and the reads would run on until the layer was read.
	threads := max(1, pool.Workers()-2)
	sums := make([]byte, pool.Threads())
	go func() {
		defer close(wu.done)
		// Only Close makes Run fail, and nothing closes the shared pool;
		// a failed warm-up only leaves the caches cold.
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
	}()
	return wu
}

// stop ends the reads and returns the bytes read once they have ended.
// It may be called again.
func (wu *warmup) stop() int64 {
	wu.stopped.Store(true)
	<-wu.done
	return wu.read.Load()
}
