package hostmem

import "unsafe"

// PageSize is the unit of mappings and allocations and the alignment
// direct reads need of buffers, offsets and lengths. Linux direct I/O and
// NVMe logical blocks both accept 4 KiB units.
const PageSize = 4096

// Integer is any integer type AlignUp and AlignDown accept.
type Integer interface {
	~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64 | ~uintptr
}

// AlignUp rounds n up to a multiple of a (a > 0; any a, not only powers of
// two, since file formats choose their own alignment).
func AlignUp[T Integer](n, a T) T { return (n + a - 1) / a * a }

// AlignDown rounds n down to a multiple of a (a > 0).
func AlignDown[T Integer](n, a T) T { return n / a * a }

// Addr returns the address of b's first byte (0 for a slice with no
// capacity), for alignment checks only.
func Addr(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// Aligned reports whether b starts at a multiple of a (a > 0). An empty
// slice is aligned.
func Aligned(b []byte, a int) bool {
	return len(b) == 0 || Addr(b)%uintptr(a) == 0
}
