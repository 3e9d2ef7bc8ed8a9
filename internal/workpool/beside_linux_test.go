package workpool

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRunBeside: beside runs exactly once per step, before the step ends,
// on the caller's goroutine; a polling worker takes items while beside
// still runs (beside waits to see one finish), so the work overlaps the
// step rather than preceding it; a sleeping worker is woken only after
// beside; with no items or one thread it runs before them.
func TestRunBeside(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		threads int
		n       int
		spin    time.Duration
		overlap bool
	}{
		{"no items", 2, 0, 0, false},
		{"one thread", 1, 50, 0, false},
		{"one item", 2, 1, 0, false},
		// A worker that polls takes items while beside runs; one that
		// sleeps is woken after it.
		{"polling worker", 2, 200, time.Minute, true},
		{"sleeping worker", 2, 200, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.overlap && runtime.GOMAXPROCS(0) < 2 {
				t.Skip("one P: a step runs on its caller alone")
			}
			p, err := New(Options{Threads: tc.threads, Spin: tc.spin})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// The caller's thread is fixed, so beside's thread tells
			// whether the caller ran it.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			for round := range 20 {
				if tc.spin < 0 {
					// The worker must be asleep, not on its way there: one
					// that has yet to look at the step takes it unrung.
					for end := time.Now().Add(5 * time.Second); !p.workers[0].sleeping.Load() && time.Now().Before(end); {
						time.Sleep(100 * time.Microsecond)
					}
					time.Sleep(2 * time.Millisecond)
				}
				var done, calls atomic.Int32
				var before int32
				on := 0
				err := p.RunBeside(tc.n, func(w, i int) {
					if tc.overlap {
						for s := time.Now(); time.Since(s) < 5*time.Microsecond; {
						}
					}
					done.Add(1)
				}, func() {
					calls.Add(1)
					on = unix.Gettid()
					if tc.overlap {
						for end := time.Now().Add(2 * time.Second); done.Load() == 0 && time.Now().Before(end); {
							runtime.Gosched()
						}
					} else if tc.spin < 0 {
						time.Sleep(time.Millisecond) // a sleeper rung before beside would take items now
					}
					before = done.Load()
				})
				if err != nil {
					t.Fatal(err)
				}
				if c := calls.Load(); c != 1 {
					t.Fatalf("round %d: beside ran %d times", round, c)
				}
				if on != tid {
					t.Fatalf("round %d: beside ran on thread %d, the caller's is %d", round, on, tid)
				}
				if d := done.Load(); int(d) != tc.n {
					t.Fatalf("round %d: %d of %d items ran", round, d, tc.n)
				}
				if tc.overlap && before == 0 {
					t.Fatalf("round %d: no item finished while beside ran: it did not overlap the step", round)
				}
				if !tc.overlap && before != 0 {
					t.Fatalf("round %d: %d items ran before beside, want beside first", round, before)
				}
			}
		})
	}
}
