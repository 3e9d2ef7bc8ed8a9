package gemv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostcpu"
)

// DefaultSpin is how long an idle worker of a Pool polls for the next
// product before it sleeps: long enough to span the vector work between
// the GEMVs of a decode step, short enough that an idle pool soon gives
// its CPUs back.
const DefaultSpin = 200 * time.Microsecond

// shareRows is the granularity of a Pool's split: 16 float32 outputs fill
// one 64-byte cache line, so no two threads write the same line of y.
const shareRows = 16

// ErrPoolClosed is returned by a Pool's products after Close.
var ErrPoolClosed = errors.New("gemv: pool closed")

// PoolOptions configure NewPool.
type PoolOptions struct {
	// Threads is how many threads compute each product, the caller's
	// included. Zero means len(CPUs) when CPUs is set, else GOMAXPROCS.
	Threads int
	// CPUs, when set, pins thread i to CPUs[i] (hostcpu.CPUs lists them
	// one per physical core first). Thread 0 is the caller's own, which
	// the pool does not pin: a caller that wants it pinned pins itself
	// (hostcpu.Pin) for as long as it uses the pool. The workers, threads
	// 1 and up, stay pinned for the pool's life.
	CPUs []int
	// Spin is how long an idle worker polls for the next product before
	// it sleeps: zero means DefaultSpin, a negative value never polls.
	// Workers never poll when Threads exceeds GOMAXPROCS, since a polling
	// worker holds one of the runtime's Ps and the others would wait.
	Spin time.Duration
}

// Pool computes products on several threads. Rows and RowsBatch split the
// rows into chunksPerThread contiguous chunks per thread, in whole groups
// of 16 rows (so no two threads write one cache line of y), which the
// calling goroutine and the pool's workers take in turn until none is
// left. Every row of a format costs the same, but not every core runs at
// the same speed all the time (another process's thread, a virtual CPU
// the host is running elsewhere): with one share per thread a product
// waits for the slowest core, with several the others take over its
// remaining chunks.
//
// Between products a worker polls for the next one (PoolOptions.Spin)
// before it sleeps, because waking a sleeping thread takes the OS several
// microseconds, a good part of a small matrix's time at memory speed. The
// caller computing a share itself keeps a pool of GOMAXPROCS threads from
// ever wanting more Ps than the runtime has while its workers poll. While
// products follow one another within Spin, though, such a pool holds
// every P, and other goroutines run only when the runtime preempts a
// worker; a process with other work to do leaves a P free (Threads below
// GOMAXPROCS).
//
// A Pool allocates nothing per product (RowsBatch only when a product has
// more vectors than any before it). Its methods are safe for concurrent
// use; products run one at a time. Close releases the workers.
type Pool struct {
	mu      sync.Mutex // one product at a time; guards closed and the job
	closed  bool
	threads int
	spin    time.Duration
	workers []*poolWorker
	job     poolJob
	scratch [][]float32 // the caller's share of RowsBatch's outputs

	gen     atomic.Uint64 // bumped to start each product, and at Close
	stop    atomic.Bool   // set before Close's bump: the workers exit
	pending atomic.Int32  // workers still computing the current product
	waiting atomic.Bool   // the caller sleeps on done
	done    chan struct{}
	exited  sync.WaitGroup
}

// poolJob is the product in progress: what Rows or RowsBatch was given
// and where each thread's share starts.
type poolJob struct {
	impl   Impl
	t      quant.Type
	rows   []byte
	rb     int
	n      int
	x      *X
	y      []float32
	xs     []*X // RowsBatch's, nil for Rows
	ys     [][]float32
	bounds []int // chunk c's rows are [bounds[c], bounds[c+1])
	next   *atomic.Int64 // the next chunk to take
}

type poolWorker struct {
	index    int
	pinned   bool
	cpu      int
	sleeping atomic.Bool
	wake     chan struct{} // one token per sleep the pool ended
	scratch  [][]float32   // its share of RowsBatch's outputs
	err      error         // the share's error, read after pending drops to 0
	unpinErr error         // read after exited
}

// NewPool starts a pool's workers (pinned, when o.CPUs says where) and
// returns once every worker runs where it should.
func NewPool(o PoolOptions) (*Pool, error) {
	threads := o.Threads
	if threads == 0 {
		threads = len(o.CPUs)
		if threads == 0 {
			threads = runtime.GOMAXPROCS(0)
		}
	}
	if threads < 1 {
		return nil, fmt.Errorf("gemv: pool of %d threads", o.Threads)
	}
	if o.CPUs != nil && len(o.CPUs) != threads {
		return nil, fmt.Errorf("gemv: pool of %d threads given %d CPUs", threads, len(o.CPUs))
	}
	p := &Pool{threads: threads, spin: o.Spin, done: make(chan struct{}, 1)}
	if p.spin == 0 {
		p.spin = DefaultSpin
	}
	if threads > runtime.GOMAXPROCS(0) {
		p.spin = -1
	}
	p.job.bounds = make([]int, chunksPerThread*threads+1)
	p.job.next = new(atomic.Int64)
	started := make(chan error, threads)
	for i := 1; i < threads; i++ {
		w := &poolWorker{index: i, wake: make(chan struct{}, 1)}
		if o.CPUs != nil {
			w.pinned, w.cpu = true, o.CPUs[i]
		}
		p.workers = append(p.workers, w)
		p.exited.Add(1)
		go p.work(w, started)
	}
	var errs []error
	for range p.workers {
		errs = append(errs, <-started)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(fmt.Errorf("gemv: pool: %w", err), p.Close())
	}
	return p, nil
}

// Threads is how many threads compute each product.
func (p *Pool) Threads() int { return p.threads }

// Rows is package-level Rows with the rows split across the pool's
// threads: the same results, bit for bit.
func (p *Pool) Rows(impl Impl, t quant.Type, rows []byte, n int, x *X, y []float32) error {
	rb, err := checkRows(t, rows, n, len(y))
	if err != nil {
		return err
	}
	if x.N != n {
		return fmt.Errorf("gemv: vector has %d elements, rows have %d", x.N, n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPoolClosed
	}
	p.job = poolJob{impl: impl, t: t, rows: rows, rb: rb, n: n, x: x, y: y, bounds: p.job.bounds, next: p.job.next}
	return p.run(len(y))
}

// RowsBatch is package-level RowsBatch with the rows split across the
// pool's threads: the same results, bit for bit.
func (p *Pool) RowsBatch(impl Impl, t quant.Type, rows []byte, n int, xs []*X, ys [][]float32) error {
	nr, err := checkBatch(xs, ys, n)
	if err != nil || len(xs) == 0 {
		return err
	}
	rb, err := checkRows(t, rows, n, nr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPoolClosed
	}
	if cap(p.scratch) < len(ys) {
		p.scratch = make([][]float32, len(ys))
		for _, w := range p.workers {
			w.scratch = make([][]float32, len(ys))
		}
	}
	p.job = poolJob{impl: impl, t: t, rows: rows, rb: rb, n: n, xs: xs, ys: ys, bounds: p.job.bounds, next: p.job.next}
	return p.run(nr)
}

// checkRows is Rows' shape check, made once before the rows are split.
func checkRows(t quant.Type, rows []byte, n, nr int) (int, error) {
	if !refKnown(t) {
		return 0, fmt.Errorf("%w: %v", ErrUnsupported, t)
	}
	rb, err := t.RowBytes(int64(n))
	if err != nil {
		return 0, fmt.Errorf("gemv: %w", err)
	}
	if int64(len(rows)) != rb*int64(nr) {
		return 0, fmt.Errorf("gemv: %d bytes for %d rows of %d %v elements (want %d)", len(rows), nr, n, t, rb*int64(nr))
	}
	return int(rb), nil
}

// chunksPerThread is how many chunks a product's rows are cut into per
// thread: enough that a slow core's remainder spreads over the others,
// few enough that a chunk of a small matrix still streams whole cache
// lines for a while (16-row groups at the least).
const chunksPerThread = 8

// run cuts nr rows into chunks, starts the workers, takes chunks itself
// and waits for the rest. p.mu is held.
func (p *Pool) run(nr int) error {
	groups := (nr + shareRows - 1) / shareRows
	chunks := len(p.job.bounds) - 1
	for c := range p.job.bounds {
		p.job.bounds[c] = min(nr, groups*c/chunks*shareRows)
	}
	p.job.next.Store(0)
	if len(p.workers) > 0 && groups > 1 {
		p.pending.Store(int32(len(p.workers)))
		p.start()
		err := p.job.share(p.scratch)
		p.wait()
		for _, w := range p.workers {
			err = errors.Join(err, w.err)
		}
		return err
	}
	return p.job.share(p.scratch)
}

// share takes chunks until none is left and computes them, cutting
// RowsBatch's outputs into scratch; it returns the first error.
func (j *poolJob) share(scratch [][]float32) error {
	var first error
	for {
		c := int(j.next.Add(1) - 1)
		if c >= len(j.bounds)-1 {
			return first
		}
		if err := j.chunk(c, scratch); err != nil && first == nil {
			first = err
		}
	}
}

// chunk computes chunk c's rows.
func (j *poolJob) chunk(c int, scratch [][]float32) error {
	lo, hi := j.bounds[c], j.bounds[c+1]
	if lo == hi {
		return nil
	}
	rows := j.rows[lo*j.rb : hi*j.rb]
	if j.xs == nil {
		return Rows(j.impl, j.t, rows, j.n, j.x, j.y[lo:hi])
	}
	s := scratch[:len(j.ys)]
	for k, y := range j.ys {
		s[k] = y[lo:hi]
	}
	err := RowsBatch(j.impl, j.t, rows, j.n, j.xs, s)
	clear(s) // hold no reference to the caller's outputs
	return err
}

// start publishes the job (the generation bump orders it before every
// worker's read) and wakes the workers that sleep.
func (p *Pool) start() {
	p.gen.Add(1)
	for _, w := range p.workers {
		if w.sleeping.Load() && w.sleeping.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
}

// wait returns once every worker has finished its share: it polls while
// the shares, equal in size, are about to finish, then sleeps.
func (p *Pool) wait() {
	if p.poll(func() bool { return p.pending.Load() == 0 }) {
		return
	}
	p.waiting.Store(true)
	if p.pending.Load() == 0 {
		if p.waiting.CompareAndSwap(true, false) {
			return
		}
		// The last worker saw the caller about to sleep and sent a token.
	}
	<-p.done
}

// poll calls ready until it reports true (poll does too) or the pool's
// spin time has passed (poll reports false).
func (p *Pool) poll(ready func() bool) bool {
	if p.spin < 0 {
		return ready()
	}
	var start time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		hostcpu.Pause()
		if i%64 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > p.spin {
				return false
			}
		}
	}
}

// work is worker w's life: pin, then compute a share of every product
// until Close.
func (p *Pool) work(w *poolWorker, started chan<- error) {
	defer p.exited.Done()
	if w.pinned {
		restore, err := hostcpu.Pin(w.cpu)
		if err != nil {
			started <- fmt.Errorf("worker %d: %w", w.index, err)
			return
		}
		defer func() { w.unpinErr = restore() }()
	}
	started <- nil
	var seen uint64
	for {
		seen = p.next(w, seen)
		if p.stop.Load() {
			return
		}
		w.err = p.job.share(w.scratch)
		if p.pending.Add(-1) == 0 && p.waiting.Load() && p.waiting.CompareAndSwap(true, false) {
			p.done <- struct{}{}
		}
	}
}

// next waits for a generation after seen: polling, then asleep.
func (p *Pool) next(w *poolWorker, seen uint64) uint64 {
	var g uint64
	if p.poll(func() bool { g = p.gen.Load(); return g != seen }) {
		return g
	}
	w.sleeping.Store(true)
	if g = p.gen.Load(); g != seen {
		if w.sleeping.CompareAndSwap(true, false) {
			return g
		}
		// start saw this worker about to sleep and sent a token.
	}
	<-w.wake
	return p.gen.Load()
}

// Close stops the workers and puts their threads' CPU affinity back; the
// pool's products fail with ErrPoolClosed afterwards. Closing twice does
// nothing.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.stop.Store(true)
	p.start()
	p.exited.Wait()
	var errs []error
	for _, w := range p.workers {
		errs = append(errs, w.unpinErr)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gemv: pool close: %w", err)
	}
	return nil
}
