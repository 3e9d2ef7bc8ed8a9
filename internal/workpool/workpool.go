// Package workpool is strata's team of compute threads: one parallel step
// at a time (the row chunks of a matrix product, the heads of attention,
// the pieces of an activation) shared out over threads that wait for the
// next step by polling a counter, not by the Go scheduler.
//
// A decode step on the CPU is a few hundred such steps a token, each tens
// of microseconds to a few milliseconds of memory-bound work. What a step
// costs beyond its work is the time its threads take to start and the
// time the caller takes to see them finish. Threads that wait on a channel
// sleep in the runtime and take microseconds each to wake; threads that
// poll a channel with runtime.Gosched take the scheduler's global lock on
// every look, and sixteen of them serialise on it, which costs most where
// steps are many and small (a mixture-of-experts block's products). Here
// a step is published by bumping a generation counter that idle threads
// read between pause instructions;
// the caller polls a count of unfinished threads the same way. Threads
// that see no step for Options.Spin sleep in the kernel, each on a bell
// of its own (hostcpu.Bell), and the next step rings the bells of every
// thread a step may use (a small step is often the first of a burst):
// one system call each, where a goroutine parked on a channel waits for
// the Go scheduler to start idle threads one after another.
package workpool

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-llm/strata/internal/hostcpu"
)

// DefaultSpin is how long an idle thread polls for the next step before it
// sleeps: long enough to span the vector work between the steps of a
// decode pass, short enough that an idle pool soon gives its CPUs back.
const DefaultSpin = 200 * time.Microsecond

// yieldEvery is how long an unpinned worker polls between runtime.Gosched
// calls. A polling thread holds one of the runtime's Ps; another
// goroutine (a storage reader, a request handler) gets one within this
// time rather than at the runtime's 10 ms preemption, and the scheduler's
// lock is taken a few times per poll instead of on every look. Pinned
// workers never yield: their goroutine is locked to its thread, and a
// locked goroutine that yields hands its P off and sleeps until the
// runtime hands one back; they own their CPUs anyway. The caller's wait
// never yields either: it waits for the tail of its own step.
const yieldEvery = 20 * time.Microsecond

// maxThreads is the most threads a pool has: a step's thread count is
// the low 16 bits of Pool.step.
const maxThreads = 1<<16 - 1

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("workpool: closed")

// Options configure New.
type Options struct {
	// Threads is how many threads run each step, the caller's included.
	// Zero means len(CPUs) when CPUs is set, else GOMAXPROCS.
	Threads int
	// CPUs, when set, pins thread i to CPUs[i] (hostcpu.CPUs lists them
	// one per physical core first). Thread 0 is the caller's own, which
	// the pool does not pin; threads 1 and up stay pinned for the pool's
	// life.
	CPUs []int
	// Spin is how long an idle thread polls before it sleeps: zero means
	// DefaultSpin, a negative value never polls.
	Spin time.Duration
}

// Pool runs steps on a fixed team of threads. Run calls fn(w, i) for each
// item i of a step, handing items out in increasing order by an atomic
// counter, with w the thread's index: the caller is thread 0, and calls
// with one w never overlap, so fn may use scratch indexed by w. A step
// uses at most GOMAXPROCS threads (the value when it starts), so a pool
// sized for the machine behaves under a lower GOMAXPROCS too. Steps run
// one at a time; Run is safe for concurrent use (a second caller waits
// for the first step to end), but fn must not call Run on its own pool.
// Run allocates nothing.
type Pool struct {
	mu      sync.Mutex // one step at a time; guards closed
	closed  bool
	threads int
	spin    time.Duration
	workers []*worker

	// The step in progress, written under mu before step is stored.
	fn   func(w, i int)
	n    int64
	next atomic.Int64

	// step is the generation, bumped to start each step and at Close, in
	// its high bits and the number of threads taking part (the caller
	// included) in its low 16: a worker reads both at once, so it never
	// takes a later step's thread count for the step it saw.
	step    atomic.Uint64
	stop    atomic.Bool  // set before Close's bump: the workers exit
	pending atomic.Int32 // workers still in the current step
	waiting atomic.Bool  // the caller sleeps on done
	done    hostcpu.Bell // rung by the last worker of a step the caller sleeps through
	exited  sync.WaitGroup

	// What Stats reports.
	steps, woken, wokenSteps atomic.Int64
}

// Stats counts a pool's steps of more than one thread and the sleeping
// threads they woke, since the pool started. A woken thread costs its
// step a system call and the thread's wake-up before it takes items: a
// caller whose steps come further apart than the pool's spin (a GPU's
// hand-over between two layers' CPU work) pays that before each.
type Stats struct {
	Steps      int64 // steps run on more than one thread
	Woken      int64 // threads those steps woke from sleep
	WokenSteps int64 // steps that woke at least one
}

// Stats is the pool's counts so far.
func (p *Pool) Stats() Stats {
	return Stats{Steps: p.steps.Load(), Woken: p.woken.Load(), WokenSteps: p.wokenSteps.Load()}
}

// Sub is s less an earlier count o: what happened between the two.
func (s Stats) Sub(o Stats) Stats {
	return Stats{Steps: s.Steps - o.Steps, Woken: s.Woken - o.Woken, WokenSteps: s.WokenSteps - o.WokenSteps}
}

type worker struct {
	index    int
	pinned   bool
	cpu      int
	sleeping atomic.Bool
	bell     hostcpu.Bell // rung by whoever ends a sleep (clears sleeping)
	unpinErr error        // read after exited
}

// New starts a pool's threads (pinned, when o.CPUs says where) and returns
// once every thread runs where it should.
func New(o Options) (*Pool, error) {
	threads := o.Threads
	if threads == 0 {
		threads = len(o.CPUs)
		if threads == 0 {
			threads = runtime.GOMAXPROCS(0)
		}
	}
	if threads < 1 || threads > maxThreads {
		return nil, fmt.Errorf("workpool: %d threads (1 to %d)", threads, maxThreads)
	}
	if o.CPUs != nil && len(o.CPUs) != threads {
		return nil, fmt.Errorf("workpool: %d threads given %d CPUs", threads, len(o.CPUs))
	}
	p := &Pool{threads: threads, spin: o.Spin}
	if p.spin == 0 {
		p.spin = DefaultSpin
	}
	started := make(chan error, threads)
	for i := 1; i < threads; i++ {
		w := &worker{index: i}
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
		return nil, errors.Join(fmt.Errorf("workpool: %w", err), p.Close())
	}
	return p, nil
}

var (
	sharedOnce sync.Once
	shared     *Pool
	sharedErr  error
)

// Default is the process-wide pool of unpinned threads that engine/model's
// CPU passes share, sized at first use to the larger of NumCPU and
// GOMAXPROCS; each step uses as many as GOMAXPROCS allows at that moment.
// It lives for the life of the process, its threads asleep when idle.
func Default() *Pool {
	sharedOnce.Do(func() {
		shared, sharedErr = New(Options{Threads: max(runtime.NumCPU(), runtime.GOMAXPROCS(0))})
	})
	if sharedErr != nil {
		// New fails only on pinning, which Default does not ask for.
		panic(sharedErr)
	}
	return shared
}

// Threads is how many threads the pool has, the caller's included: the
// most a step uses, and the bound of the w that fn sees.
func (p *Pool) Threads() int { return p.threads }

// Workers is how many threads a step started now would use.
func (p *Pool) Workers() int { return max(1, min(p.threads, runtime.GOMAXPROCS(0))) }

// Run calls fn(w, i) for every i in [0, n) across the pool's threads and
// returns once every call has returned.
func (p *Pool) Run(n int, fn func(w, i int)) error { return p.RunBeside(n, fn, nil) }

// RunBeside is Run with beside, when not nil, called once on the caller's
// goroutine after the step is published and before the caller takes
// items of its own: work only the caller can do (calls bound to its OS
// thread, such as a GPU context's launches) then overlaps the step on
// the workers that poll, where done before Run it would delay the step's
// start by its whole length. The workers asleep are woken after beside,
// so that its work does not wait for their wake-up calls. beside must
// not call Run on this pool. With no items, or one thread, beside runs
// first and the items after it.
func (p *Pool) RunBeside(n int, fn func(w, i int), beside func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	workers := p.Workers()
	active := min(workers, n)
	if active <= 1 {
		if beside != nil {
			beside()
		}
		for i := range n {
			fn(0, i)
		}
		return nil
	}
	p.fn, p.n = fn, int64(n)
	p.next.Store(0)
	p.pending.Store(int32(active - 1))
	// The polling workers start on the step, beside runs, and then the
	// sleeping ones are rung: ringing first would delay beside's work (the
	// issue of copies, which then start late) by a system call a sleeper.
	p.publish(active)
	if beside != nil {
		beside()
	}
	woken := p.ring(workers)
	p.steps.Add(1)
	if woken > 0 {
		p.woken.Add(int64(woken))
		p.wokenSteps.Add(1)
	}
	p.share(0)
	p.wait()
	p.fn = nil // hold no reference to the caller's closure
	return nil
}

// share takes items until none is left.
func (p *Pool) share(w int) {
	for {
		i := p.next.Add(1) - 1
		if i >= p.n {
			return
		}
		p.fn(w, int(i))
	}
}

// publish starts the step (the generation bump orders it before every
// worker's read) for the workers that poll: they take items at once; a
// sleeping one waits for ring.
func (p *Pool) publish(active int) {
	p.step.Store((p.step.Load()>>16+1)<<16 | uint64(active))
}

// ring wakes the workers of the first threads-1 that sleep through the
// published step (one system call each) and returns how many it woke.
// RunBeside rings every thread a step may use, not only those taking
// part: a step of few items (a few vectors' quantization) comes first in
// a burst whose next step needs every thread (the products), and a
// thread woken for that one instead would start it a wake-up late, a
// second wake-up in series after the first step's. Rung, a thread the
// step leaves out polls for the next one (await).
func (p *Pool) ring(threads int) int {
	n := 0
	for _, w := range p.workers[:threads-1] {
		if w.sleeping.Load() && w.sleeping.CompareAndSwap(true, false) {
			w.bell.Ring()
			n++
		}
	}
	return n
}

// wait returns once every taking-part worker has finished: it polls while
// the step's last items are about to finish, then sleeps.
func (p *Pool) wait() {
	if p.poll(false, func() bool { return p.pending.Load() == 0 }) {
		return
	}
	for {
		rung := p.done.Load()
		p.waiting.Store(true)
		if p.pending.Load() == 0 && p.waiting.CompareAndSwap(true, false) {
			return
		}
		// Either the step is not done, or its last worker saw the caller
		// about to sleep and rings (or has rung) the bell: the count moves
		// from rung either way.
		p.done.Sleep(rung)
		if p.pending.Load() == 0 {
			return
		}
		// A ring from the last worker of an earlier step that read the
		// flag then and was held up (preempted) until this sleep.
	}
}

// poll calls ready until it reports true (poll does too) or the pool's
// spin time has passed (poll reports false), yielding the processor every
// yieldEvery when yield is set.
func (p *Pool) poll(yield bool, ready func() bool) bool {
	if p.spin < 0 {
		return ready()
	}
	var start, yielded time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		hostcpu.Pause()
		if i%64 != 0 {
			continue
		}
		now := time.Now()
		switch {
		case i == 0:
			start, yielded = now, now
		case now.Sub(start) > p.spin:
			return false
		case yield && now.Sub(yielded) > yieldEvery:
			runtime.Gosched()
			yielded = now
		}
	}
}

// work is worker w's life: pin, then take part in every step that asks
// for it until Close.
func (p *Pool) work(w *worker, started chan<- error) {
	defer p.exited.Done()
	if w.pinned {
		restore, err := hostcpu.Pin(w.cpu)
		if err != nil {
			started <- fmt.Errorf("thread %d: %w", w.index, err)
			return
		}
		defer func() { w.unpinErr = restore() }()
	}
	started <- nil
	var seen uint64
	for {
		seen = p.await(w, seen)
		if p.stop.Load() {
			return
		}
		if !takesPart(w, seen) {
			continue // a step of fewer threads
		}
		p.share(w.index)
		if p.pending.Add(-1) == 0 && p.waiting.Load() && p.waiting.CompareAndSwap(true, false) {
			p.done.Ring()
		}
	}
}

// takesPart reports whether w is one of the threads of step s.
func takesPart(w *worker, s uint64) bool { return w.index < int(s&maxThreads) }

// await waits for a step after seen: polling, then asleep. A worker that
// a step of every thread GOMAXPROCS allows would use polls even when the
// last step left it out: a step of few items (a vector's quantization)
// comes between two that need every thread (the products before and
// after it), and a worker that slept through it would start the next
// one late. One beyond them sleeps at once: polling, it would hold a P
// that GOMAXPROCS did not give the pool.
func (p *Pool) await(w *worker, seen uint64) uint64 {
	var g uint64
	if seen == 0 || w.index < p.Workers() {
		if p.poll(!w.pinned, func() bool { g = p.step.Load(); return g != seen }) {
			return g
		}
	}
	for {
		rung := w.bell.Load()
		w.sleeping.Store(true)
		if g = p.step.Load(); g != seen && w.sleeping.CompareAndSwap(true, false) {
			return g
		}
		// Either no new step, or ring saw this worker about to sleep
		// and rings (or has rung) its bell: the count moves from rung.
		w.bell.Sleep(rung)
		if g = p.step.Load(); g != seen {
			return g
		}
		// A ring with no new step: an earlier step's ring that read this
		// worker's flag from an earlier sleep and was held up (preempted)
		// until this one. Taking it as a step would run the last step
		// twice.
	}
}

// Close stops the threads and puts their CPU affinity back; Run fails with
// ErrClosed afterwards. Closing twice does nothing.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.stop.Store(true)
	p.step.Store((p.step.Load()>>16 + 1) << 16)
	for _, w := range p.workers {
		if w.sleeping.Load() && w.sleeping.CompareAndSwap(true, false) {
			w.bell.Ring()
		}
	}
	p.exited.Wait()
	var errs []error
	for _, w := range p.workers {
		errs = append(errs, w.unpinErr)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("workpool: close: %w", err)
	}
	return nil
}
