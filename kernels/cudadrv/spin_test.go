package cudadrv

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestSpin: with SetSpin the hand-offs poll instead of sleeping but Do
// keeps its contract — results and errors come back to the right caller,
// concurrent callers are served in turn, and turning spinning off again
// (or calls arriving after the spin window ran out) still work. Every
// third call is DoSleeping's (its caller never polls), among the others.
func TestSpin(t *testing.T) {
	d := testDevice(t)
	defer d.SetSpin(0)
	boom := errors.New("boom")
	for _, spin := range []time.Duration{time.Millisecond, 0, 50 * time.Microsecond} {
		d.SetSpin(spin)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					want := error(nil)
					if (g+i)%7 == 0 {
						want = boom
					}
					do := d.Do
					if (g+i)%3 == 0 {
						do = d.DoSleeping
					}
					got := do(func(c *Ctx) error {
						if c.Device() != d {
							return errors.New("wrong device")
						}
						return want
					})
					if got != want {
						t.Errorf("spin %v, caller %d, call %d: %v, want %v", spin, g, i, got, want)
						return
					}
				}
			}()
		}
		wg.Wait()
		time.Sleep(3 * spin) // the device goroutine's window runs out: the next call wakes it
		if err := d.Do(func(*Ctx) error { return nil }); err != nil {
			t.Fatalf("spin %v: call after the window: %v", spin, err)
		}
	}
}
