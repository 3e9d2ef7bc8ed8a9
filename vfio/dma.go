package vfio

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// Perm says what the device may do with a mapping.
type Perm uint8

const (
	// PermRead lets the device read the buffer (host → device data).
	PermRead Perm = 1 << iota
	// PermWrite lets the device write the buffer (device → host data).
	PermWrite
	// PermReadWrite is both, the default of MapDMA.
	PermReadWrite = PermRead | PermWrite
)

// MapOptions tune Map.
type MapOptions struct {
	// Perm is the device's access; zero means PermReadWrite.
	Perm Perm
	// IOVA, when FixedIOVA is set, is used instead of an allocated address.
	IOVA      uint64
	FixedIOVA bool
}

// DMAStats is the accounting of one DMA address space.
type DMAStats struct {
	Mappings    int    // live mappings
	Bytes       uint64 // bytes mapped now
	PeakBytes   uint64 // most bytes mapped at once
	Maps        uint64 // successful maps so far
	Unmaps      uint64 // successful unmaps so far
	FreeIOVA    uint64 // IOVA bytes left in the valid ranges
	DMAAvail    int64  // kernel's remaining mapping budget at the last info query, -1 unknown
	IOVARanges  []Range
	IOMMUPageSz uint64
}

// DMAMapper is what a device driver needs from an IOMMU address space: map
// host memory (or another device's mmapped BAR) for DMA at an IOVA the
// address space picks, and unmap it. *Container (type1), *IOAS (iommufd)
// and *Domain (either) implement it.
type DMAMapper interface {
	MapDMA(buf []byte) (uint64, error)
	Map(buf []byte, opts MapOptions) (uint64, error)
	UnmapDMA(iova uint64) error
	Stats() DMAStats
}

// mapping is one live DMA mapping. buf keeps the memory referenced while the
// device may access it, so a Go-heap buffer cannot be freed under DMA.
type mapping struct {
	buf  []byte
	size uint64
	perm Perm
}

// dmaSpace is the bookkeeping shared by the type1 and iommufd backends: the
// IOVA allocator, the mapping table and the counters. The backend supplies
// the map and unmap calls.
type dmaSpace struct {
	mu       sync.Mutex
	alloc    *Allocator
	maps     map[uint64]*mapping
	stats    DMAStats
	doMap    func(vaddr, iova, size uint64, perm Perm) error
	doUnmap  func(iova, size uint64) error
	ready    func() error // refreshes alloc before the first map; nil once ready
	closed   bool
	pageSize uint64
}

// setRanges (re)builds the allocator over new valid ranges, keeping the live
// mappings reserved; used when a device joins and its reserved regions shrink
// the space. A live mapping outside the new ranges is an error.
func (s *dmaSpace) setRanges(rs []Range, page uint64, avail int64) error {
	if len(rs) == 0 {
		rs = DefaultRanges
	}
	a, err := NewAllocator(rs, page)
	if err != nil {
		return err
	}
	for iova, m := range s.maps {
		if err := a.Reserve(iova, m.size); err != nil {
			return fmt.Errorf("live mapping at IOVA %#x no longer fits the valid ranges %v: %w", iova, rs, err)
		}
	}
	s.alloc = a
	s.pageSize = page
	s.stats.IOVARanges = append([]Range(nil), rs...)
	s.stats.IOMMUPageSz = page
	s.stats.DMAAvail = avail
	return nil
}

func (s *dmaSpace) mapBuf(buf []byte, opts MapOptions) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errors.New("DMA map: address space is closed")
	}
	if s.ready != nil {
		if err := s.ready(); err != nil {
			return 0, err
		}
		s.ready = nil
	}
	if s.alloc == nil {
		return 0, errors.New("DMA map: no IOVA ranges known yet (attach a device first)")
	}
	if len(buf) == 0 {
		return 0, errors.New("DMA map: empty buffer")
	}
	page := s.pageSize
	va := bufAddr(buf)
	size := uint64(len(buf))
	if va%page != 0 || size%page != 0 {
		return 0, fmt.Errorf("DMA map: buffer at %#x of %#x bytes is not aligned to the %#x-byte IOMMU page (use AllocDMA or an mmap)", va, size, page)
	}
	perm := opts.Perm
	if perm == 0 {
		perm = PermReadWrite
	}
	var iova uint64
	var err error
	if opts.FixedIOVA {
		err = s.alloc.Reserve(opts.IOVA, size)
		iova = opts.IOVA
	} else {
		// Align the IOVA like the buffer (up to 1 GiB) so the IOMMU can use
		// large pages for large, aligned buffers.
		align := page
		for a := uint64(1 << 30); a > page; a >>= 1 {
			if size >= a && va%a == 0 {
				align = a
				break
			}
		}
		iova, err = s.alloc.Alloc(size, align)
	}
	if err != nil {
		return 0, fmt.Errorf("DMA map of %#x bytes: %w", size, err)
	}
	if err := s.doMap(va, iova, size, perm); err != nil {
		if _, rerr := s.alloc.Release(iova); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return 0, fmt.Errorf("DMA map of %#x bytes at vaddr %#x to IOVA %#x: %w", size, va, iova, err)
	}
	s.maps[iova] = &mapping{buf: buf, size: size, perm: perm}
	s.stats.Maps++
	s.stats.Mappings++
	s.stats.Bytes += size
	if s.stats.Bytes > s.stats.PeakBytes {
		s.stats.PeakBytes = s.stats.Bytes
	}
	if s.stats.DMAAvail > 0 {
		s.stats.DMAAvail--
	}
	return iova, nil
}

func (s *dmaSpace) unmap(iova uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unmapLocked(iova)
}

func (s *dmaSpace) unmapLocked(iova uint64) error {
	m, ok := s.maps[iova]
	if !ok {
		return fmt.Errorf("DMA unmap: IOVA %#x is not mapped", iova)
	}
	if err := s.doUnmap(iova, m.size); err != nil {
		return fmt.Errorf("DMA unmap of IOVA %#x (%#x bytes): %w", iova, m.size, err)
	}
	delete(s.maps, iova)
	if _, err := s.alloc.Release(iova); err != nil {
		return fmt.Errorf("DMA unmap: accounting out of step: %w", err)
	}
	s.stats.Unmaps++
	s.stats.Mappings--
	s.stats.Bytes -= m.size
	if s.stats.DMAAvail >= 0 {
		s.stats.DMAAvail++
	}
	return nil
}

// unmapAll removes every mapping (on Close) and marks the space closed.
func (s *dmaSpace) unmapAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for iova := range s.maps {
		if err := s.unmapLocked(iova); err != nil {
			errs = append(errs, err)
		}
	}
	s.closed = true
	return errors.Join(errs...)
}

func (s *dmaSpace) snapshot() DMAStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.IOVARanges = append([]Range(nil), s.stats.IOVARanges...)
	if s.alloc != nil {
		st.FreeIOVA = s.alloc.Free()
	}
	return st
}

// lowestPage returns the smallest page size in an IOMMU page-size bitmap.
func lowestPage(bitmap uint64) uint64 {
	if bitmap == 0 {
		return 4096
	}
	return 1 << bits.TrailingZeros64(bitmap)
}

// bufAddr is the user virtual address of b's first byte.
func bufAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
