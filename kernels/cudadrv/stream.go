package cudadrv

import (
	"fmt"
	"time"
	"unsafe"
)

// Stream is a CUstream: an ordered queue of device work. The zero Stream is
// the legacy default stream.
type Stream uintptr

// Stream creation flags (CU_STREAM_*).
const (
	StreamDefault     = 0x0
	StreamNonBlocking = 0x1
)

// NewStream creates a stream.
func (c *Ctx) NewStream(flags uint32) (Stream, error) {
	var s uintptr
	if err := check("cuStreamCreate", call(drv.cuStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// DestroyStream destroys s once its work completes.
func (c *Ctx) DestroyStream(s Stream) error {
	if s == 0 {
		return nil
	}
	return check("cuStreamDestroy", call(drv.cuStreamDestroy, uintptr(s)))
}

// StreamSync waits for all work queued on s.
func (c *Ctx) StreamSync(s Stream) error {
	return check("cuStreamSynchronize", call(drv.cuStreamSynchronize, uintptr(s)))
}

// StreamDone reports whether all work on s has completed, without waiting.
func (c *Ctx) StreamDone(s Stream) (bool, error) {
	switch r := call(drv.cuStreamQuery, uintptr(s)); r {
	case success:
		return true, nil
	case ResultNotReady:
		return false, nil
	default:
		return false, newError("cuStreamQuery", r)
	}
}

// WaitEvent makes later work on s wait until e has completed (e.g. the
// compute stream waits for the copy stream's "slot loaded" event).
func (c *Ctx) WaitEvent(s Stream, e Event) error {
	return check("cuStreamWaitEvent", call(drv.cuStreamWaitEvent, uintptr(s), uintptr(e), 0))
}

// Event is a CUevent: a marker in a stream for ordering and timing.
type Event uintptr

// Event creation flags (CU_EVENT_*).
const (
	EventDefault       = 0x0
	EventBlockingSync  = 0x1
	EventDisableTiming = 0x2
)

// NewEvent creates an event. Use EventDisableTiming for pure ordering
// events: they are cheaper to record and wait on.
func (c *Ctx) NewEvent(flags uint32) (Event, error) {
	var e uintptr
	if err := check("cuEventCreate", call(drv.cuEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))); err != nil {
		return 0, err
	}
	return Event(e), nil
}

// DestroyEvent releases e.
func (c *Ctx) DestroyEvent(e Event) error {
	if e == 0 {
		return nil
	}
	return check("cuEventDestroy", call(drv.cuEventDestroy, uintptr(e)))
}

// Record enqueues e on s.
func (c *Ctx) Record(e Event, s Stream) error {
	return check("cuEventRecord", call(drv.cuEventRecord, uintptr(e), uintptr(s)))
}

// EventSync waits until e has completed.
func (c *Ctx) EventSync(e Event) error {
	return check("cuEventSynchronize", call(drv.cuEventSynchronize, uintptr(e)))
}

// EventDone reports whether e has completed, without waiting.
func (c *Ctx) EventDone(e Event) (bool, error) {
	switch r := call(drv.cuEventQuery, uintptr(e)); r {
	case success:
		return true, nil
	case ResultNotReady:
		return false, nil
	default:
		return false, newError("cuEventQuery", r)
	}
}

// Elapsed returns the device time in milliseconds between two completed
// timing events (resolution about half a microsecond).
func (c *Ctx) Elapsed(start, end Event) (float32, error) {
	var ms float32
	if err := check("cuEventElapsedTime", call(drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))); err != nil {
		return 0, fmt.Errorf("event timing: %w", err)
	}
	return ms, nil
}

// TimeEvents runs fn once to warm up, then iters times between two events
// recorded on s, and returns the device time per iteration: what the work
// fn enqueues costs the GPU, without the host's launch gaps at either end.
// fn must only enqueue on s.
func (c *Ctx) TimeEvents(s Stream, iters int, fn func() error) (per time.Duration, err error) {
	if iters < 1 {
		return 0, fmt.Errorf("timing with events: %d iterations", iters)
	}
	if err := fn(); err != nil {
		return 0, err
	}
	var ev [2]Event
	for i := range ev {
		if ev[i], err = c.NewEvent(EventDefault); err != nil {
			return 0, err
		}
		defer func(e Event) {
			if derr := c.DestroyEvent(e); err == nil {
				err = derr
			}
		}(ev[i])
	}
	if err := c.Record(ev[0], s); err != nil {
		return 0, err
	}
	for range iters {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := c.Record(ev[1], s); err != nil {
		return 0, err
	}
	if err := c.EventSync(ev[1]); err != nil {
		return 0, err
	}
	ms, err := c.Elapsed(ev[0], ev[1])
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * 1e6 / float64(iters)), nil
}

// DoOnStream runs fn like Do, with a non-blocking stream of its own that
// is destroyed after fn returns (fn's error first, then the destroy's):
// for one-off work such as measuring a link, off the streams a model uses.
func (d *Device) DoOnStream(fn func(c *Ctx, s Stream) error) error {
	return d.Do(func(c *Ctx) (err error) {
		s, err := c.NewStream(StreamNonBlocking)
		if err != nil {
			return err
		}
		defer func() {
			if derr := c.DestroyStream(s); err == nil {
				err = derr
			}
		}()
		return fn(c, s)
	})
}

// CanSignal reports whether the driver has the stream memory operations
// WaitValue32 and WriteValue32 use (CUDA 11.7 and later).
func CanSignal() bool { return drv.cuStreamWaitValue32 != 0 && drv.cuStreamWriteValue32 != 0 }

// WaitValue32 makes the work queued on s after it wait until the 32-bit
// word at addr has reached v, compared cyclically ((int32)(*addr - v) >=
// 0), so a counter that only grows may wrap. addr is device memory or the
// device address of mapped host memory (HostDevicePointer): a host thread
// that stores to such a word releases the stream without a call into the
// driver, which is what lets the device queue work ahead of a CPU result
// it waits for. The host's stores before the word's are visible to the
// work after the wait where that work reads host memory (x86 stores are
// ordered); writes the host makes into device memory need more (the
// driver's flush flag) and are not what this is for.
//
// A wait whose word never reaches v blocks s for good: whoever queues one
// must store the word on every path, errors included.
func (c *Ctx) WaitValue32(s Stream, addr DevPtr, v uint32) error {
	if !CanSignal() {
		return fmt.Errorf("cuStreamWaitValue32: %w", unavailable("the driver lacks the stream memory operations"))
	}
	const geq = 0 // CU_STREAM_WAIT_VALUE_GEQ
	return check("cuStreamWaitValue32", call(drv.cuStreamWaitValue32, uintptr(s), uintptr(addr), uintptr(v), geq))
}

// WriteValue32 stores v to the 32-bit word at addr once the work queued on
// s before it has completed; that work's memory writes are visible before
// the word is (the default memory barrier). With addr a mapped host word,
// a host thread that polls it learns that the work is done, and reads what
// it wrote, without a call into the driver.
func (c *Ctx) WriteValue32(s Stream, addr DevPtr, v uint32) error {
	if !CanSignal() {
		return fmt.Errorf("cuStreamWriteValue32: %w", unavailable("the driver lacks the stream memory operations"))
	}
	const barrier = 0 // CU_STREAM_WRITE_VALUE_DEFAULT
	return check("cuStreamWriteValue32", call(drv.cuStreamWriteValue32, uintptr(s), uintptr(addr), uintptr(v), barrier))
}
