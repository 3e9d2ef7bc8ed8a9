package cudadrv

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDoSurvivesGoexit: without a driver, a Device's goroutine loop with
// stand-in bind and release: a call that ends its goroutine
// (runtime.Goexit, as t.FailNow inside Do does) returns an error instead
// of leaving Do waiting, and a new goroutine (bound once) serves the
// calls after it; a panic is an error too; Close releases the context
// once. Where binding fails, every later call gets that error and Close
// still returns.
func TestDoSurvivesGoexit(t *testing.T) {
	t.Parallel()
	start := func(bind func() error) (*Device, *atomic.Int32) {
		d := &Device{work: make(chan job), exited: make(chan struct{})}
		d.ctx = newCtx(d, 0)
		var releases atomic.Int32
		d.bind = bind
		d.release = func() error { releases.Add(1); return nil }
		go func() {
			runtime.LockOSThread()
			d.loop()
		}()
		return d, &releases
	}
	var binds atomic.Int32
	d, releases := start(func() error { binds.Add(1); return nil })
	if err := d.Do(func(*Ctx) error { runtime.Goexit(); return nil }); err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Fatalf("a call that ended its goroutine: %v", err)
	}
	if err := d.Do(func(*Ctx) error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("a call that panicked: %v", err)
	}
	mine := errors.New("mine")
	if err := d.Do(func(*Ctx) error { return mine }); err != mine {
		t.Fatalf("a call's own error: %v", err)
	}
	if err := d.Do(func(*Ctx) error { runtime.Goexit(); return nil }); err == nil {
		t.Fatal("a second call that ended its goroutine: no error")
	}
	if err := d.Do(func(*Ctx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := binds.Load(); n != 2 {
		t.Fatalf("%d goroutines took over, want 2", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := releases.Load(); n != 1 {
		t.Fatalf("the context released %d times, want 1", n)
	}
	if err := d.Do(func(*Ctx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}

	unbound := errors.New("no current context")
	d, _ = start(func() error { return unbound })
	if err := d.Do(func(*Ctx) error { runtime.Goexit(); return nil }); err == nil {
		t.Fatal("a call that ended its goroutine: no error")
	}
	for range 2 {
		if err := d.Do(func(*Ctx) error { return nil }); !errors.Is(err, unbound) {
			t.Fatalf("a call after the take-over failed: %v", err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
