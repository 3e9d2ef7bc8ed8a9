package vfio

import (
	"fmt"
	"unsafe"
)

// MMIO gives 32-bit access to a device register window (a BAR mapping from
// Device.MapRegion). Device registers are not memory: every access must
// reach the device, exactly once, at its natural width. So MMIO performs
// only aligned 32-bit loads and stores, each in its own function that is
// never inlined (the compiler cannot merge, split or drop them), 64-bit
// registers are split into two 32-bit accesses (QEMU's NVMe rejects accesses
// wider than 8 bytes and real devices differ on 64-bit atomicity), and
// nothing here uses sync/atomic (atomic.Store compiles to XCHG, a locked
// read-modify-write the device does not expect). On x86 ordinary loads and
// stores to the uncached (UC) memory the kernel maps BARs as are not
// reordered with each other.
//
// Offsets that are misaligned or outside the window are programming errors
// and panic, like an out-of-range slice index.
type MMIO struct {
	base unsafe.Pointer
	size uintptr
}

// NewMMIO wraps a BAR mapping.
func NewMMIO(bar []byte) (*MMIO, error) {
	if len(bar) < 4 {
		return nil, fmt.Errorf("MMIO window of %d bytes", len(bar))
	}
	return &MMIO{base: unsafe.Pointer(unsafe.SliceData(bar)), size: uintptr(len(bar))}, nil
}

// Len is the window size in bytes.
func (m *MMIO) Len() int { return int(m.size) }

func (m *MMIO) addr(off uintptr) unsafe.Pointer {
	if off%4 != 0 || off > m.size-4 {
		panic(fmt.Sprintf("vfio: MMIO access at %#x outside or misaligned in a %#x-byte window", off, m.size))
	}
	return unsafe.Add(m.base, off)
}

// Read32 loads the 32-bit register at off.
//
//go:noinline
func (m *MMIO) Read32(off uintptr) uint32 {
	return *(*uint32)(m.addr(off))
}

// Write32 stores v to the 32-bit register at off.
//
//go:noinline
func (m *MMIO) Write32(off uintptr, v uint32) {
	*(*uint32)(m.addr(off)) = v
}

// Read64 reads a 64-bit register as two 32-bit loads, low word first.
func (m *MMIO) Read64(off uintptr) uint64 {
	lo := m.Read32(off)
	hi := m.Read32(off + 4)
	return uint64(hi)<<32 | uint64(lo)
}

// Write64 writes a 64-bit register as two 32-bit stores, low word first (the
// order NVMe expects for ASQ/ACQ).
func (m *MMIO) Write64(off uintptr, v uint64) {
	m.Write32(off, uint32(v))
	m.Write32(off+4, uint32(v>>32))
}
