package workpool

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-llm/strata/internal/hostcpu"
)

// TestRunsEveryItemOnce: every item of every step runs exactly once, no
// thread index runs two items at once, and indices stay below Threads;
// steps of fewer items than threads, and pools that never poll or sleep
// at once between steps, included.
func TestRunsEveryItemOnce(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Threads: 4}, {Threads: 3, Spin: -1}, {Threads: 5, Spin: time.Nanosecond}, {Threads: 1}} {
		p, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		busy := make([]atomic.Int32, p.Threads())
		for round := range 50 {
			for _, n := range []int{0, 1, 2, 3, 4, 5, 17, 1000} {
				hits := make([]atomic.Int32, n)
				if err := p.Run(n, func(w, i int) {
					if w < 0 || w >= p.Threads() {
						t.Errorf("thread index %d of %d", w, p.Threads())
						return
					}
					if busy[w].Add(1) != 1 {
						t.Errorf("thread %d ran two items at once", w)
					}
					hits[i].Add(1)
					busy[w].Add(-1)
				}); err != nil {
					t.Fatal(err)
				}
				for i := range hits {
					if h := hits[i].Load(); h != 1 {
						t.Fatalf("%+v round %d n=%d: item %d ran %d times", o, round, n, i, h)
					}
				}
			}
			if round%10 == 9 {
				time.Sleep(time.Millisecond) // let the workers fall asleep
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(3, func(int, int) {}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Run after Close: %v, want ErrClosed", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// TestUsesEveryThread: a step of many slow items reaches every thread (the
// workers do take part, polling or woken from sleep).
func TestUsesEveryThread(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one P: a step runs on its caller alone")
	}
	p, err := New(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, pause := range []time.Duration{0, 5 * time.Millisecond} {
		time.Sleep(pause)
		var seen [2]atomic.Bool
		for try := 0; try < 100 && !(seen[0].Load() && seen[1].Load()); try++ {
			if err := p.Run(64, func(w, i int) {
				seen[w].Store(true)
				time.Sleep(50 * time.Microsecond)
			}); err != nil {
				t.Fatal(err)
			}
		}
		if !seen[1].Load() {
			t.Fatalf("after %v idle: the worker thread never took an item", pause)
		}
	}
}

// TestConcurrentRuns starts steps from several goroutines at once (as
// separate models sharing Default would); each completes with all its
// items.
func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	p, err := New(Options{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				var sum atomic.Int64
				if err := p.Run(100, func(w, i int) { sum.Add(int64(i)) }); err != nil {
					t.Error(err)
					return
				}
				if s := sum.Load(); s != 4950 {
					t.Errorf("sum %d, want 4950", s)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestFewerProcs: a pool of more threads than GOMAXPROCS runs each step on
// at most GOMAXPROCS of them, and its idle workers give the Ps back (the
// test would hang or crawl if six pollers held the two Ps).
func TestFewerProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	p, err := New(Options{Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if w := p.Workers(); w != 2 {
		t.Fatalf("Workers = %d under GOMAXPROCS 2, want 2", w)
	}
	for range 200 {
		var most atomic.Int32
		var running atomic.Int32
		if err := p.Run(40, func(w, i int) {
			if w >= 2 {
				t.Errorf("thread %d took part under GOMAXPROCS 2", w)
			}
			r := running.Add(1)
			for {
				m := most.Load()
				if r <= m || most.CompareAndSwap(m, r) {
					break
				}
			}
			running.Add(-1)
		}); err != nil {
			t.Fatal(err)
		}
		if m := most.Load(); m > 2 {
			t.Fatalf("%d items at once under GOMAXPROCS 2", m)
		}
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Threads: -1}, {Threads: 2, CPUs: []int{0}}, {Threads: maxThreads + 1}} {
		if p, err := New(o); err == nil {
			p.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestPinned: a pool pinned to the CPUs hostcpu lists runs its steps and
// closes cleanly (putting its threads' affinity back).
func TestPinned(t *testing.T) {
	cpus, _, err := hostcpu.CPUs()
	if err != nil {
		t.Skip(err)
	}
	cpus = cpus[:min(len(cpus), 4)]
	p, err := New(Options{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	var sum atomic.Int64
	if err := p.Run(1000, func(w, i int) { sum.Add(int64(i)) }); err != nil {
		t.Fatal(err)
	}
	if s := sum.Load(); s != 499500 {
		t.Fatalf("sum %d", s)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSleepAndRing: an idle thread sleeps once the spin has passed, and
// each step rings it awake to take its share (a ring lost leaves the
// step to the caller alone, or the thread asleep for good).
func TestSleepAndRing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	p, err := New(Options{Threads: 2, Spin: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 20 {
		var by [2]atomic.Int32
		// Items long enough that a thread woken late still finds some.
		if err := p.Run(64, func(w, _ int) { by[w].Add(1); time.Sleep(time.Millisecond) }); err != nil {
			t.Fatal(err)
		}
		if by[0].Load()+by[1].Load() != 64 || by[1].Load() == 0 {
			t.Fatalf("step %d: items by thread %d and %d, want 64 with some on the woken thread", i, by[0].Load(), by[1].Load())
		}
		allAsleep(t, p, fmt.Sprintf("after step %d (spin 1 ms)", i))
	}
	// Every step after the first found the thread asleep (the first
	// may have found it polling still).
	if st := p.Stats(); st.Steps != 20 || st.Woken < 19 || st.Woken > 20 || st.WokenSteps != st.Woken {
		t.Errorf("stats %+v: want 20 steps, 19 or 20 of them waking the one thread", st)
	}
}

// TestSmallStepKeepsPolling: a worker that a step of few items leaves
// out keeps polling through the spin, as the ones taking part do, so the
// full step after it finds every thread awake; once the spin has passed
// with no step it sleeps.
func TestSmallStepKeepsPolling(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	p, err := New(Options{Threads: 4, Spin: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	last := p.workers[len(p.workers)-1] // thread 3
	for i := range 20 {
		if err := p.Run(4, func(int, int) {}); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(2, func(int, int) {}); err != nil { // threads 0 and 1
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if last.sleeping.Load() {
			t.Fatalf("round %d: the thread a two-item step left out went to sleep within the 2 s spin", i)
		}
	}
	before := p.Stats()
	if before.Steps != 40 || before.Woken != 0 || before.WokenSteps != 0 {
		t.Errorf("stats %+v: want 40 steps that woke no thread (all polling)", before)
	}
	if err := p.Run(4, func(int, int) {}); err != nil {
		t.Fatal(err)
	}
	if d := p.Stats().Sub(before); d != (Stats{Steps: 1}) {
		t.Errorf("one more step: %+v, want one step that woke none", d)
	}
}

// TestSmallStepWakesAll: a step of few items that finds the threads
// asleep wakes every thread a step may use, not only those it takes, so
// the full step after it wakes none (a second wake-up in series). The
// spin is long: a woken thread that the machine's load kept off a CPU
// for longer than it would sleep again, and the full step ring it.
func TestSmallStepWakesAll(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	p, err := New(Options{Threads: 4, Spin: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for round := range 2 {
		allAsleep(t, p, fmt.Sprintf("round %d (spin 500 ms)", round))
		before := p.Stats()
		if err := p.Run(2, func(int, int) {}); err != nil { // threads 0 and 1
			t.Fatal(err)
		}
		small := p.Stats().Sub(before)
		if err := p.Run(4, func(int, int) {}); err != nil {
			t.Fatal(err)
		}
		full := p.Stats().Sub(before).Sub(small)
		if small != (Stats{Steps: 1, Woken: 3, WokenSteps: 1}) || full != (Stats{Steps: 1}) {
			t.Fatalf("round %d: the two-item step %+v, the full step after it %+v; want the first to wake all 3 threads and the second none", round, small, full)
		}
	}
}

// allAsleep waits up to 5 s for every idle thread of p to sleep, failing
// the test (what says when) if one does not.
func allAsleep(t *testing.T, p *Pool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		asleep := 0
		for _, w := range p.workers {
			if w.sleeping.Load() {
				asleep++
			}
		}
		if asleep == len(p.workers) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d idle threads asleep after 5 s", what, asleep, len(p.workers))
		}
		time.Sleep(time.Millisecond)
	}
}
