package model

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool is a fixed set of goroutines that share out the independent pieces
// of one parallel step (row chunks of a matrix product, heads of
// attention). The goroutine that starts a step works on it too, so a step
// always makes progress even when every pooled goroutine is busy with
// another model's step.
type pool struct {
	n       int // most workers including the caller; worker ids are 0..n-1
	tickets chan ticket
}

// ticket invites one pooled goroutine to work on j as worker w.
type ticket struct {
	j *job
	w int
}

// job is one parallel step: items 0..n-1, handed out by an atomic counter.
type job struct {
	n    int64
	next atomic.Int64
	fn   func(w, i int)
	wg   sync.WaitGroup
}

var (
	sharedPoolOnce sync.Once
	sharedPool     *pool
)

// defaultPool returns the process-wide pool, sized at first use to the
// larger of NumCPU and GOMAXPROCS; each step uses as many workers as
// GOMAXPROCS allows at that moment. Its goroutines live for the life of the
// process, parked when idle, like the runtime's own workers.
func defaultPool() *pool {
	sharedPoolOnce.Do(func() { sharedPool = newPool(max(runtime.NumCPU(), runtime.GOMAXPROCS(0))) })
	return sharedPool
}

func newPool(n int) *pool {
	if n < 1 {
		n = 1
	}
	p := &pool{n: n, tickets: make(chan ticket, 4*n)}
	for i := 1; i < n; i++ {
		go p.worker()
	}
	return p
}

func (p *pool) worker() {
	for {
		t := p.next()
		t.j.loop(t.w)
		t.j.wg.Done()
	}
}

// spinFor is how long a worker that finished its share of a step looks
// for the next step before parking. A pass's steps follow one another
// within microseconds (a layer's products, its activation, the next
// input's quantization); a parked goroutine takes longer than that to
// wake, and on a memory-bound step every core that starts late leaves
// bandwidth unused. Spinning yields the processor between looks, so other
// goroutines still run.
const spinFor = 200 * time.Microsecond

// next returns the next ticket, spinning for up to spinFor before
// blocking.
func (p *pool) next() ticket {
	select {
	case t := <-p.tickets:
		return t
	default:
	}
	start := time.Now()
	for time.Since(start) < spinFor {
		select {
		case t := <-p.tickets:
			return t
		default:
			runtime.Gosched()
		}
	}
	return <-p.tickets
}

func (j *job) loop(w int) {
	for {
		i := j.next.Add(1) - 1
		if i >= j.n {
			return
		}
		j.fn(w, int(i))
	}
}

// workers is how many workers a step may use now (caller included).
func (p *pool) workers() int { return max(1, min(p.n, runtime.GOMAXPROCS(0))) }

// run calls fn(w, i) for every i in [0, n) across the pool and returns when
// all calls have finished. Calls with the same w never overlap, so fn may
// use per-worker scratch indexed by w (w < p.n).
func (p *pool) run(n int, fn func(w, i int)) {
	if n <= 0 {
		return
	}
	helpers := min(p.workers(), n) - 1
	if helpers <= 0 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	j := &job{n: int64(n), fn: fn}
	j.wg.Add(helpers)
	for w := 1; w <= helpers; w++ {
		p.tickets <- ticket{j, w}
	}
	j.loop(0)
	j.wg.Wait()
}
