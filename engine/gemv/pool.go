package gemv

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/workpool"
)

// DefaultSpin is how long an idle thread of a Pool polls for the next
// product before it sleeps (internal/workpool's default).
const DefaultSpin = workpool.DefaultSpin

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
	// (hostcpu.Pin) for as long as it uses the pool. The other threads stay
	// pinned for the pool's life.
	CPUs []int
	// Spin is how long an idle thread polls for the next product before
	// it sleeps: zero means DefaultSpin, a negative value never polls.
	Spin time.Duration
}

// Pool computes products on a team of threads (internal/workpool's, which
// engine/model's passes use too). Rows and RowsBatch split the rows into
// chunksPerThread contiguous chunks per thread, in whole groups of 16 rows
// (so no two threads write one cache line of y), which the threads take
// in turn until none is left. Every row of a format costs the same, but
// not every core runs at the same speed all the time (another process's
// thread, a virtual CPU the host is running elsewhere): with one share per
// thread a product waits for the slowest core, with several the others
// take over its remaining chunks.
//
// A Pool allocates nothing per product (RowsBatch only when a product has
// more vectors than any before it). Its methods are safe for concurrent
// use; products run one at a time. Close releases the threads.
type Pool struct {
	mu      sync.Mutex // one product at a time; guards the job and scratch
	team    *workpool.Pool
	job     poolJob
	chunkFn func(w, c int) // computes chunk c on thread w: made once, so Run allocates nothing
	scratch [][][]float32  // per thread, its cut of RowsBatch's outputs
	errs    []error        // per thread, its first error in the product
}

// poolJob is the product in progress: what Rows or RowsBatch was given
// and where each chunk starts.
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
}

// NewPool starts a pool's threads (pinned, when o.CPUs says where) and
// returns once every thread runs where it should.
func NewPool(o PoolOptions) (*Pool, error) {
	team, err := workpool.New(workpool.Options{Threads: o.Threads, CPUs: o.CPUs, Spin: o.Spin})
	if err != nil {
		return nil, fmt.Errorf("gemv: pool: %w", err)
	}
	n := team.Threads()
	p := &Pool{team: team, scratch: make([][][]float32, n), errs: make([]error, n)}
	p.job.bounds = make([]int, chunksPerThread*n+1)
	p.chunkFn = func(w, c int) {
		if err := p.job.chunk(c, p.scratch[w]); err != nil && p.errs[w] == nil {
			p.errs[w] = err
		}
	}
	return p, nil
}

// Threads is how many threads compute each product.
func (p *Pool) Threads() int { return p.team.Threads() }

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
	p.job = poolJob{impl: impl, t: t, rows: rows, rb: rb, n: n, x: x, y: y, bounds: p.job.bounds}
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
	if cap(p.scratch[0]) < len(ys) {
		for w := range p.scratch {
			p.scratch[w] = make([][]float32, len(ys))
		}
	}
	p.job = poolJob{impl: impl, t: t, rows: rows, rb: rb, n: n, xs: xs, ys: ys, bounds: p.job.bounds}
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

// checkStride is RowsStride's shape check: nr rows of n elements (rb
// bytes, returned) whose starts lie stride >= rb bytes apart, rows
// running from the first's start to the last's end.
func checkStride(t quant.Type, rows []byte, stride, n, nr int) (int, error) {
	if !refKnown(t) {
		return 0, fmt.Errorf("%w: %v", ErrUnsupported, t)
	}
	rb, err := t.RowBytes(int64(n))
	if err != nil {
		return 0, fmt.Errorf("gemv: %w", err)
	}
	if int64(stride) < rb {
		return 0, fmt.Errorf("gemv: rows %d bytes apart, each is %d bytes (%d %v elements)", stride, rb, n, t)
	}
	want := int64(0)
	if nr > 0 {
		want = int64(nr-1)*int64(stride) + rb
	}
	if int64(len(rows)) != want {
		return 0, fmt.Errorf("gemv: %d bytes for %d rows of %d %v elements %d bytes apart (want %d)", len(rows), nr, n, t, stride, want)
	}
	return int(rb), nil
}

// chunksPerThread is how many chunks a product's rows are cut into per
// thread: enough that a slow core's remainder spreads over the others,
// few enough that a chunk of a small matrix still streams whole cache
// lines for a while (16-row groups at the least).
const chunksPerThread = 8

// run cuts nr rows into chunks and computes them on the team. p.mu is
// held.
func (p *Pool) run(nr int) error {
	groups := (nr + shareRows - 1) / shareRows
	// No more chunks than row groups: a small product wakes no thread
	// that would find its chunk empty, and one group runs on the caller.
	chunks := min(len(p.job.bounds)-1, groups)
	for c := range chunks + 1 {
		p.job.bounds[c] = min(nr, groups*c/max(chunks, 1)*shareRows)
	}
	clear(p.errs)
	err := p.team.Run(chunks, p.chunkFn)
	p.job.x, p.job.y, p.job.xs, p.job.ys, p.job.rows = nil, nil, nil, nil, nil // hold none of the caller's memory
	if errors.Is(err, workpool.ErrClosed) {
		return ErrPoolClosed
	}
	for _, e := range p.errs {
		err = errors.Join(err, e)
	}
	return err
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

// Close stops the threads and puts their CPU affinity back; the pool's
// products fail with ErrPoolClosed afterwards. Closing twice does nothing.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.team.Close(); err != nil {
		return fmt.Errorf("gemv: pool close: %w", err)
	}
	return nil
}
