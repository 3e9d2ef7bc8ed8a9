package hostcpu

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPin pins a goroutine to each allowed CPU in turn and checks the
// thread's mask while pinned and after restore.
func TestPin(t *testing.T) {
	t.Parallel()
	cpus, _, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		// The outer lock keeps the goroutine on one thread across
		// restore's unlock (locks nest), so its mask can be checked.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var before unix.CPUSet
		if err := unix.SchedGetaffinity(0, &before); err != nil {
			done <- err
			return
		}
		for _, c := range cpus {
			restore, err := Pin(c)
			if err != nil {
				done <- err
				return
			}
			var now unix.CPUSet
			if err := unix.SchedGetaffinity(0, &now); err != nil {
				done <- err
				return
			}
			if now.Count() != 1 || !now.IsSet(c) {
				t.Errorf("pinned to %d: mask has %d CPUs", c, now.Count())
			}
			if err := restore(); err != nil {
				done <- err
				return
			}
			if err := unix.SchedGetaffinity(0, &now); err != nil {
				done <- err
				return
			}
			if now != before {
				t.Errorf("after unpinning from %d: mask has %d CPUs, had %d", c, now.Count(), before.Count())
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := Pin(-1); err == nil {
		t.Error("Pin(-1) succeeded")
	}
}
