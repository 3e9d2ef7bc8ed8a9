package workpool

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSleepWakeRaces: steps from several callers, separated by pauses
// around the spin time so that the workers and the caller keep crossing
// between polling and sleeping, on more Ps than cores so that threads are
// preempted between reading a sleep flag and clearing it. A wake-up token
// meant for an earlier sleep once made a worker run a finished step again
// (and the caller return before a step ended); every step must run each
// item exactly once, and the race detector must see no access to a step
// after its Run returned.
func TestSleepWakeRaces(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	p, err := New(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 20000 {
				n := 1 + r.IntN(5)
				var ran atomic.Int32
				if err := p.Run(n, func(w, i int) { ran.Add(1) }); err != nil {
					t.Error(err)
					return
				}
				if int(ran.Load()) != n {
					t.Errorf("%d calls for a step of %d items", ran.Load(), n)
					return
				}
				time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
			}
		})
	}
	wg.Wait()
}
