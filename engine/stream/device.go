package stream

import (
	"fmt"

	"github.com/strata-llm/strata/engine/tier"
)

// Device is the compute side of the pipeline: it owns the slots streamed
// layers are copied into and the copy engine that fills them. The CPU
// backend's slots are host memory filled by memmove; the CUDA backend's
// are device memory filled on a copy stream, with an event per copy.
type Device interface {
	// Name identifies the device in stats and errors.
	Name() string
	// AllocSlot returns a slot of n bytes.
	AllocSlot(n int) (Slot, error)
	// CopyIn starts copying src into the start of slot and returns at
	// once; the returned Op completes when the bytes have landed. src
	// must stay untouched until then.
	CopyIn(slot Slot, src []byte) (Op, error)
}

// Slot is a region of device memory that holds one layer's extent.
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

// CopyIn implements Device.
func (CPUDevice) CopyIn(s Slot, src []byte) (Op, error) {
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

type cpuSlot struct{ b *tier.Buffer }

func (s cpuSlot) Len() int     { return s.b.Len() }
func (s cpuSlot) Host() []byte { return s.b.Bytes() }
func (s cpuSlot) Free() error  { return s.b.Free() }

type cpuOp chan struct{}

func (o cpuOp) Wait() error { <-o; return nil }

var _ Device = CPUDevice{}
