package stream

import (
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/tier"
)

// Device is the compute side of the pipeline, the seam every backend
// implements: it owns the slots streamed layers are copied into, the copy
// engine that fills them, and the fences between copying into a slot and
// computing on it. The CPU backend's slots are host memory filled by
// memmove and its fences are trivial (CPUDevice); the CUDA backend's slots
// are device memory filled on a copy stream, and its fences are events the
// other stream waits for on the device, so the host never blocks on a
// layer it has only to enqueue work for.
//
// The pipeline drives a device in one of two ways, which the device
// chooses with IssueOnCompute:
//
//   - Off the compute goroutine (the CPU): a copy goroutine of the
//     pipeline's own issues each CopyIn as soon as the layer's bytes and a
//     free slot are there, waits for its Op and hands compute a slot whose
//     bytes have landed.
//   - From the compute goroutine (CUDA, whose context is current on one OS
//     thread): the pipeline issues copies inside Acquire and Done, as many
//     as the ring allows, without waiting for them; Await makes compute
//     wait for a copy on the device and Release leaves the fence the next
//     copy into the slot waits for.
//
// In both, the streamed layers of a pass land in one slot of the device's
// memory used as a ring (engine/tier's Ring): the n-th in a region of its
// own, copied only after compute has released (Done) every earlier layer
// whose bytes that region overwrites, the last of which the copy names
// as its fence. Stage 1 (the storage reads) runs on a goroutine of its
// own, touching no device state. Driven from compute, the pipeline also
// carries copies over into the next pass: once a pass has issued its own,
// the next pass's first layers (those whose regions no earlier layer of
// their pass overwrites) are copied as soon as compute releases the last
// layer of this pass that each region overlaps, which the copy names as
// its fence; the copy engine then works through the pass's tail and the
// next pass's resident layers instead of idling there.
type Device interface {
	// Name identifies the device in stats and errors.
	Name() string
	// AllocSlot returns a slot of n bytes.
	AllocSlot(n int) (Slot, error)
	// Region returns the n bytes of slot (from AllocSlot) at off as a
	// slot of its own, with its own fences; freeing it leaves slot's
	// memory alone.
	Region(slot Slot, off, n int) (Slot, error)
	// Pin prepares a staging buffer (from the Source's Alloc) for the
	// device's copy engine, for as long as the pipeline lives: CUDA
	// page-locks it so copies out of it run at full link speed. unpin
	// undoes it before the buffer is freed; nil when there is nothing to
	// undo.
	Pin(b []byte) (unpin func() error, err error)
	// CopyIn starts copying src into the start of slot and returns at
	// once; the returned Op completes when the bytes have landed. The copy
	// must not start before compute has released after (Release's fence;
	// nil: no fence), the last layer whose bytes it overwrites. src must
	// stay untouched until the Op completes. n is the copy's index, for
	// devices that time their copies: the streamed layers of a pass are
	// numbered from 0 or, in alternate passes, from the number of streamed
	// layers, so that a pass's carried copies (see the type's doc) never
	// reuse the numbers of the pass still being timed; a device keeps
	// twice the streamed layers' count of per-copy state.
	CopyIn(n int, slot, after Slot, src []byte) (Op, error)
	// Await makes compute wait for op, copy n, into slot: work
	// compute issues afterwards sees the slot's new bytes. CUDA makes the
	// compute stream wait for the copy's event and returns at once; the
	// CPU blocks until the copy is done.
	Await(n int, slot Slot, op Op) error
	// Release records that compute is done with slot (CUDA: its kernels
	// are enqueued, and an event recorded after them is the fence the next
	// copy into the slot waits for; the CPU: nothing to record).
	Release(slot Slot) error
	// Sync waits until every copy issued has completed: the pipeline
	// calls it when a pass of a device driven off compute ends, before its
	// staging buffers are reused, and before it frees its slots. (Driven
	// from compute, a pass waits for its own copies' Ops instead: the
	// copies carried into the next pass keep running.)
	Sync() error
	// IssueOnCompute reports whether CopyIn, Await and Release must be
	// called from the goroutine that computes (see the type's doc).
	IssueOnCompute() bool
}

// Clock is implemented by a Device whose copies and compute run
// asynchronously to the host (a GPU's streams): host clocks would only
// time how long enqueueing took, so the pipeline takes the copy stage's
// busy and stall time, and compute's stall, from the device. The
// pipeline calls Start and Waiting from the compute goroutine, and Times
// once the pass has drained.
type Clock interface {
	// Start marks the pass's start on the compute side.
	Start() error
	// Waiting marks that compute begins waiting for streamed layer n
	// (numbered as CopyIn's n); Await marks the end of the wait. It comes
	// before the pipeline waits on the host for the layer's read, so a
	// compute side that ran dry meanwhile counts as stalled.
	Waiting(n int) error
	// Released marks compute's release of the pass's last streamed layer.
	Released() error
	// Times returns the device's figures for a pass whose copies are
	// numbered from base: the first copies copies and waits waits.
	Times(base, copies, waits int) (ClockTimes, error)
}

// ClockTimes is what a Clock measured of one pass.
type ClockTimes struct {
	// CopyBusy is the copy stage's time copying; CopyStall its idle time
	// before each copy from Start (waiting for its read, its slot or the
	// host; a copy carried over from the previous pass has none).
	CopyBusy, CopyStall time.Duration
	// ComputeStall is the time compute waited for copies.
	ComputeStall time.Duration
	// Lead is compute's time from Start to its first wait for a streamed
	// layer (the layers before it); Span from there to Released (zero
	// when Released was not marked).
	Lead, Span time.Duration
}

// Slot is a region of device memory that holds a layer's extent (or, from
// AllocSlot, the ring the streamed layers' regions are cut from).
type Slot interface {
	// Len is the slot's size in bytes.
	Len() int
	// Host returns a host-addressable view of the slot, or nil when the
	// device's memory is not host-visible. The CPU backend computes over
	// it (Decode runs on these bytes).
	Host() []byte
	// Free releases the slot.
	Free() error
}

// Op is an asynchronous device operation.
type Op interface {
	// Wait blocks until the operation is complete and returns its error.
	Wait() error
	// Done reports, without blocking, whether the operation is complete.
	Done() (bool, error)
}

// CPUDevice is the CPU backend's Device: slots are page-aligned host
// memory and copies run as parallel memmoves on a goroutine. It is the
// reference the CUDA backend's device is checked against.
type CPUDevice struct{}

// Name implements Device.
func (CPUDevice) Name() string { return "cpu" }

// AllocSlot implements Device.
func (CPUDevice) AllocSlot(n int) (Slot, error) {
	b, err := AllocAligned(n)
	if err != nil {
		return nil, fmt.Errorf("cpu slot: %w", err)
	}
	return cpuSlot{b}, nil
}

// Region implements Device.
func (CPUDevice) Region(s Slot, off, n int) (Slot, error) {
	b := s.Host()
	if off < 0 || n < 0 || off+n > len(b) {
		return nil, fmt.Errorf("cpu region [%d, %d) of a %d-byte slot", off, off+n, len(b))
	}
	return cpuRegion(b[off : off+n : off+n]), nil
}

// Pin implements Device: host memory needs no pinning for a memmove.
func (CPUDevice) Pin([]byte) (func() error, error) { return nil, nil }

// CopyIn implements Device. Compute is done with a region when it
// releases it, so there is no fence to wait for.
func (CPUDevice) CopyIn(_ int, s, _ Slot, src []byte) (Op, error) {
	dst := s.Host()
	if len(src) > len(dst) {
		return nil, fmt.Errorf("cpu copy: %d bytes into a %d-byte slot", len(src), len(dst))
	}
	op := make(cpuOp)
	go func() {
		parallelCopy(dst, src)
		close(op)
	}()
	return op, nil
}

// Await implements Device: the host is the compute side, so it waits.
func (CPUDevice) Await(_ int, _ Slot, op Op) error { return op.Wait() }

// Release implements Device: nothing outlives the compute call.
func (CPUDevice) Release(Slot) error { return nil }

// Sync implements Device: the pipeline's copy goroutine waits for every
// copy it issues.
func (CPUDevice) Sync() error { return nil }

// IssueOnCompute implements Device: any goroutine may copy.
func (CPUDevice) IssueOnCompute() bool { return false }

type cpuSlot struct{ b *tier.Buffer }

func (s cpuSlot) Len() int     { return s.b.Len() }
func (s cpuSlot) Host() []byte { return s.b.Bytes() }
func (s cpuSlot) Free() error  { return s.b.Free() }

// cpuRegion is a part of a cpuSlot; the slot owns the memory.
type cpuRegion []byte

func (r cpuRegion) Len() int     { return len(r) }
func (r cpuRegion) Host() []byte { return r }
func (r cpuRegion) Free() error  { return nil }

type cpuOp chan struct{}

func (o cpuOp) Wait() error { <-o; return nil }

func (o cpuOp) Done() (bool, error) {
	select {
	case <-o:
		return true, nil
	default:
		return false, nil
	}
}

var _ Device = CPUDevice{}
