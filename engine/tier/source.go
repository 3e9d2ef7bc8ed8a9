package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/strata-llm/strata/internal/hostmem"
)

// Source reads byte ranges of a pool into caller-provided buffers, keeping
// several reads in flight. It is the storage side of tier C.
//
// The interface is a blocking, context-aware ReadAt over buffers the source
// itself allocates. That shape fits every source strata has:
//
//   - engine/stream's FileSource splits the range into chunks and hands
//     them to a fixed set of goroutines that each issue pread (O_DIRECT),
//     so up to QueueDepth chunks are in flight.
//   - nvme/volume's Source, over the userspace NVMe driver, splits the
//     range into MDTS-bounded READ commands, submits them all to its I/O
//     queue pair, and polls completions until every command of the range
//     is done. Its buffers must be DMA-mapped, which is why buffers come
//     from Alloc rather than from the caller.
//
// Callers that want several ranges in flight call ReadAt from several
// goroutines; one ReadAt of a multi-megabyte extent already saturates the
// queue. A submit/complete pair with tickets would let a single goroutine
// do that too, but it pushes completion bookkeeping into every caller for
// no throughput the pipeline can use: stage 1 reads one extent at a time,
// each large enough to fill the device queue on its own.
type Source interface {
	// ReadAt fills dst with the bytes at off. dst must come from Alloc (or
	// otherwise satisfy Align), and off and len(dst) must be multiples of
	// Align. It returns only when no read into dst is still running, also
	// when ctx is cancelled or a read fails, so the caller may reuse dst
	// at once. A short read (past the end of the source) is an error.
	// ReadAt is safe for concurrent use.
	ReadAt(ctx context.Context, dst []byte, off int64) error
	// Alloc returns a buffer of n bytes (rounded up to Align) suitable as
	// ReadAt's dst: aligned for direct I/O, DMA-mapped for NVMe.
	Alloc(n int) (*Buffer, error)
	// Align is the alignment ReadAt requires of dst's address, off and
	// len(dst); 1 when it has no requirement.
	Align() int
	// Size is the number of readable bytes.
	Size() int64
	// Close waits for reads in flight and releases the source. Buffers
	// from Alloc stay valid until freed.
	Close() error
}

// ErrMisaligned is returned (wrapped) by ReadAt when dst, off or the length
// break the source's alignment rule.
var ErrMisaligned = errors.New("misaligned read")

// CheckAligned enforces a source's alignment rule (Align) for one ReadAt
// of dst at off: an error wrapping ErrMisaligned when off, len(dst) or
// dst's address is not a multiple of align. Every Source calls it, so the
// rule and its error read the same whatever the storage.
func CheckAligned(dst []byte, off int64, align int) error {
	if align <= 1 {
		return nil
	}
	a := int64(align)
	if off%a != 0 || int64(len(dst))%a != 0 || (len(dst) > 0 && !hostmem.Aligned(dst, align)) {
		return fmt.Errorf("read of %d bytes at %d into %#x: %w (need %d-byte alignment)", len(dst), off, hostmem.Addr(dst), ErrMisaligned, align)
	}
	return nil
}

// ErrClosed is returned (wrapped) when a closed source or pipeline is used.
var ErrClosed = errors.New("closed")

// Buffer is memory handed out by a Source or a Device: page-aligned, owned
// by whoever called Alloc until Free.
type Buffer struct {
	b    []byte
	once sync.Once
	free func([]byte) error
}

// NewBuffer wraps memory b whose release is free (nil: nothing to do), so
// every source and device (file, NVMe, CUDA host memory) hands out the
// same Buffer.
func NewBuffer(b []byte, free func([]byte) error) *Buffer {
	return &Buffer{b: b, free: free}
}

// Bytes returns the buffer's memory.
func (b *Buffer) Bytes() []byte { return b.b }

// Len is the buffer's length.
func (b *Buffer) Len() int { return len(b.b) }

// Free releases the memory; the buffer must not be used afterwards.
// Calling it again does nothing.
func (b *Buffer) Free() error {
	var err error
	b.once.Do(func() {
		if b.free != nil {
			err = b.free(b.b)
		}
		b.b = nil
	})
	return err
}
