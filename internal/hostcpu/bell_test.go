package hostcpu

import (
	"sync"
	"testing"
	"time"
)

// within fails the test if fn has not returned after d: a lost wake-up
// shows as a sleeper that never returns.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still asleep after %v", what, d)
	}
}

func TestBellSleepReturnsOnceMoved(t *testing.T) {
	t.Parallel()
	var b Bell
	seen := b.Load()
	b.Ring()
	within(t, 10*time.Second, "a sleep on a count already moved", func() { b.Sleep(seen) })
	if got := b.Load(); got != seen+1 {
		t.Fatalf("count %d after one ring from %d", got, seen)
	}
}

func TestBellWakesEverySleeper(t *testing.T) {
	t.Parallel()
	for _, sleepers := range []int{1, 4, 32} {
		var b Bell
		seen := b.Load()
		var asleep, woke sync.WaitGroup
		for range sleepers {
			asleep.Add(1)
			woke.Add(1)
			go func() {
				defer woke.Done()
				asleep.Done()
				b.Sleep(seen)
			}()
		}
		asleep.Wait()
		time.Sleep(10 * time.Millisecond) // let them reach the kernel
		b.Ring()
		within(t, 10*time.Second, "sleepers after one ring", woke.Wait)
	}
}

// TestBellPingPong hands a turn back and forth many times, each side
// reading the count before checking whose turn it is, as a pool's worker
// does: a ring lost between the check and the sleep hangs it.
func TestBellPingPong(t *testing.T) {
	t.Parallel()
	const rounds = 20000
	var ping, pong Bell
	var turn [2]int
	var mu sync.Mutex
	side := func(me int, mine, theirs *Bell) {
		for r := range rounds {
			for {
				seen := mine.Load()
				mu.Lock()
				// Side 0 takes round r after side 1's round r-1; side 1
				// takes it after side 0's.
				ready := turn[me] == r && turn[1-me] == r+me
				mu.Unlock()
				if ready {
					break
				}
				mine.Sleep(seen)
			}
			mu.Lock()
			turn[me]++
			mu.Unlock()
			theirs.Ring()
		}
	}
	within(t, 60*time.Second, "ping-pong", func() {
		var wg sync.WaitGroup
		wg.Go(func() { side(0, &ping, &pong) })
		wg.Go(func() { side(1, &pong, &ping) })
		wg.Wait()
	})
}
