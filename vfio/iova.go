package vfio

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
)

// ErrIOVAExhausted is returned when no free IOVA span of the requested size
// and alignment is left in the valid ranges.
var ErrIOVAExhausted = errors.New("IOVA space exhausted")

// DefaultRanges are used when the kernel reports no valid IOVA ranges (type1
// before Linux 5.4): 39 bits, the lowest address width of Intel IOMMUs, with
// the x86 MSI window 0xfee00000-0xfeefffff cut out.
var DefaultRanges = []Range{{0, 0xfedfffff}, {0xfef00000, 1<<39 - 1}}

// Allocator hands out IOVAs from the valid ranges an IOMMU reports, so that a
// device address never falls into a reserved window (the MSI doorbell, an
// RMRR) and never depends on the process's virtual addresses. IOVA 0 is never
// handed out: the first page of the lowest range is withheld, so a zeroed
// address in a command faults instead of reaching a buffer.
//
// Allocations are first fit, aligned and rounded up to the page size. The
// allocator is not safe for concurrent use; Container and IOAS lock around it.
type Allocator struct {
	page  uint64
	free  []span            // sorted, disjoint, coalesced; inclusive ends
	used  map[uint64]uint64 // iova → allocated size
	inUse uint64
	total uint64
}

// span is an inclusive interval [start, last]; inclusive so that a range
// ending at 2^64-1 needs no overflowing end.
type span struct{ start, last uint64 }

// NewAllocator returns an allocator over ranges with the given page size (a
// power of two, typically the IOMMU's smallest page). Range ends are trimmed
// inward to whole pages.
func NewAllocator(ranges []Range, page uint64) (*Allocator, error) {
	if page == 0 || page&(page-1) != 0 {
		return nil, fmt.Errorf("IOVA allocator: page size %#x is not a power of two", page)
	}
	rs, err := normalizeRanges(append([]Range(nil), ranges...))
	if err != nil {
		return nil, err
	}
	a := &Allocator{page: page, used: map[uint64]uint64{}}
	for _, r := range rs {
		start, ok := alignUp(r.Start, page)
		if !ok {
			continue
		}
		if start == 0 {
			start = page // withhold IOVA 0
		}
		// last: the last byte of the last whole page inside r.
		last := ^uint64(0)
		if r.End != ^uint64(0) {
			if r.End+1 < page {
				continue
			}
			last = (r.End+1)&^(page-1) - 1
		}
		if start > r.End || last < start {
			continue
		}
		if n := len(a.free); n > 0 && a.free[n-1].last+1 == start {
			a.free[n-1].last = last // adjacent ranges form one span
		} else {
			a.free = append(a.free, span{start, last})
		}
		a.total += last - start + 1
	}
	if len(a.free) == 0 {
		return nil, fmt.Errorf("IOVA allocator: no whole %#x-byte page in ranges %v", page, ranges)
	}
	return a, nil
}

// alignUp rounds v up to a multiple of align (a power of two); ok is false on
// overflow.
func alignUp(v, align uint64) (uint64, bool) {
	r := (v + align - 1) &^ (align - 1)
	return r, r >= v
}

// PageSize is the allocation granule.
func (a *Allocator) PageSize() uint64 { return a.page }

// InUse is the number of bytes allocated.
func (a *Allocator) InUse() uint64 { return a.inUse }

// Free is the number of bytes left.
func (a *Allocator) Free() uint64 { return a.total - a.inUse }

// Count is the number of live allocations.
func (a *Allocator) Count() int { return len(a.used) }

// Alloc reserves size bytes (rounded up to the page size) at an address
// aligned to align (rounded up to the page size; 0 means the page size).
func (a *Allocator) Alloc(size, align uint64) (uint64, error) {
	size, align, err := a.normalize(size, align)
	if err != nil {
		return 0, err
	}
	for i, s := range a.free {
		start, ok := alignUp(s.start, align)
		if !ok || start > s.last || s.last-start < size-1 {
			continue
		}
		a.take(i, start, size)
		return start, nil
	}
	return 0, fmt.Errorf("allocating %#x bytes aligned to %#x (%#x of %#x bytes in use): %w", size, align, a.inUse, a.total, ErrIOVAExhausted)
}

// Reserve takes the exact span [iova, iova+size) if it is free, for callers
// that need a fixed IOVA.
func (a *Allocator) Reserve(iova, size uint64) error {
	size, _, err := a.normalize(size, 0)
	if err != nil {
		return err
	}
	if iova%a.page != 0 {
		return fmt.Errorf("IOVA %#x is not aligned to the %#x-byte page", iova, a.page)
	}
	for i, s := range a.free {
		if iova >= s.start && iova <= s.last && s.last-iova >= size-1 {
			a.take(i, iova, size)
			return nil
		}
	}
	return fmt.Errorf("IOVA span %#x+%#x is not free or not in a valid range", iova, size)
}

// Release returns the allocation that starts at iova and reports its size.
func (a *Allocator) Release(iova uint64) (uint64, error) {
	size, ok := a.used[iova]
	if !ok {
		return 0, fmt.Errorf("IOVA %#x was not allocated", iova)
	}
	delete(a.used, iova)
	a.inUse -= size
	n := span{iova, iova + size - 1}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].start > iova })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = n
	// coalesce with the neighbours
	if i+1 < len(a.free) && a.free[i].last+1 == a.free[i+1].start && a.free[i].last != ^uint64(0) {
		a.free[i].last = a.free[i+1].last
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].last+1 == a.free[i].start {
		a.free[i-1].last = a.free[i].last
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	return size, nil
}

// SizeOf reports the size of the allocation at iova.
func (a *Allocator) SizeOf(iova uint64) (uint64, bool) {
	s, ok := a.used[iova]
	return s, ok
}

func (a *Allocator) normalize(size, align uint64) (uint64, uint64, error) {
	if size == 0 {
		return 0, 0, errors.New("IOVA allocation of 0 bytes")
	}
	size, ok := alignUp(size, a.page)
	if !ok {
		return 0, 0, fmt.Errorf("IOVA allocation of %#x bytes overflows", size)
	}
	if align < a.page {
		align = a.page
	}
	if align&(align-1) != 0 {
		align = 1 << (64 - bits.LeadingZeros64(align))
		if align == 0 {
			return 0, 0, errors.New("IOVA alignment overflows")
		}
	}
	return size, align, nil
}

// take carves [start, start+size) out of free span i.
func (a *Allocator) take(i int, start, size uint64) {
	s := a.free[i]
	last := start + size - 1
	var repl []span
	if start > s.start {
		repl = append(repl, span{s.start, start - 1})
	}
	if last < s.last {
		repl = append(repl, span{last + 1, s.last})
	}
	a.free = append(a.free[:i], append(repl, a.free[i+1:]...)...)
	a.used[start] = size
	a.inUse += size
}

// Spans returns the free spans as inclusive Ranges, for diagnostics and tests.
func (a *Allocator) Spans() []Range {
	out := make([]Range, len(a.free))
	for i, s := range a.free {
		out[i] = Range{s.start, s.last}
	}
	return out
}
