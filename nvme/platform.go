package nvme

import "context"

// MMIO is the controller's register file (BAR0). Only 32-bit accesses are
// used: QEMU's controller rejects wider ones and 64-bit registers are
// written as two halves, low first. Implementations must perform each call as
// exactly one uncached access of the given width, in program order.
type MMIO interface {
	Read32(off uint32) uint32
	Write32(off uint32, v uint32)
}

// Buffer is memory the controller can reach by DMA: Bytes is the CPU view
// and IOVA the address the controller uses for Bytes[0]. The platform keeps
// the mapping alive until the buffer is freed.
type Buffer struct {
	Bytes []byte
	IOVA  uint64
}

// Len is the number of bytes in the buffer.
func (b Buffer) Len() int { return len(b.Bytes) }

// Slice returns the region [off, off+n) of b with its IOVA adjusted, so that a
// request can target part of a larger mapped buffer. It panics like a slice
// expression when the range is outside b: callers pass ranges they computed.
func (b Buffer) Slice(off, n int) Buffer {
	return Buffer{Bytes: b.Bytes[off : off+n : off+n], IOVA: b.IOVA + uint64(off)}
}

// DMA allocates memory mapped for the controller's DMA. Allocations are
// page-aligned (both the CPU address and the IOVA) and zeroed.
type DMA interface {
	Alloc(size int) (Buffer, error)
	Free(Buffer) error
}

// Interrupts waits for MSI-X vectors. Wait returns when the vector has fired
// at least once since the previous Wait returned (eventfd semantics: an
// interrupt that arrives before Wait is not lost), or with ctx's error.
// A nil Interrupts selects polled completion.
type Interrupts interface {
	Wait(ctx context.Context, vector int) error
}
