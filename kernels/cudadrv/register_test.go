package cudadrv

import (
	"slices"
	"testing"
	"unsafe"
)

// TestMergePages: buffers that share a page become one page-aligned
// range; ranges that only touch, or lie apart, stay separate; the order
// of the buffers does not matter.
func TestMergePages(t *testing.T) {
	t.Parallel()
	const page = 4096
	for _, tc := range []struct {
		name  string
		spans []pageSpan
		want  []pageSpan
	}{
		{"one buffer inside a page", []pageSpan{{100, 200}}, []pageSpan{{0, page}}},
		{"neighbours in one page", []pageSpan{{100, 200}, {232, 4000}}, []pageSpan{{0, page}}},
		{"a run sharing pages", []pageSpan{{8192 + 10, 3*page + 5}, {3*page + 64, 5*page + 16}, {5*page + 32, 5*page + 40}}, []pageSpan{{2 * page, 6 * page}}},
		{"touching pages stay apart", []pageSpan{{0, page}, {page, 2 * page}}, []pageSpan{{0, page}, {page, 2 * page}}},
		{"apart, out of order", []pageSpan{{10 * page, 10*page + 1}, {3, 9}}, []pageSpan{{0, page}, {10 * page, 11 * page}}},
		{"nested", []pageSpan{{0, 5 * page}, {page + 3, page + 9}}, []pageSpan{{0, 5 * page}}},
	} {
		if got := mergePages(tc.spans, page); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHostMapAddr: a buffer inside a mapped range gets the range's device
// address plus its offset; one that runs past a range's end, or lies
// between or outside the ranges, is refused; overlapping ranges are
// refused when the map is made.
func TestHostMapAddr(t *testing.T) {
	t.Parallel()
	mem := make([]byte, 1<<16)
	base := uintptr(unsafe.Pointer(&mem[0]))
	// Two ranges with a gap: [0, 16K) at device 0x1000000 and [32K, 48K)
	// at 0x9000000, given out of order.
	m := &HostMap{ranges: []mappedRange{
		{lo: base + 32<<10, hi: base + 48<<10, dev: 0x9000000},
		{lo: base, hi: base + 16<<10, dev: 0x1000000},
	}}
	if err := m.sort(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		lo, hi int
		want   DevPtr // 0: refused
	}{
		{"first byte", 0, 1, 0x1000000},
		{"inside the first", 100, 4196, 0x1000000 + 100},
		{"the whole first", 0, 16 << 10, 0x1000000},
		{"the second's start", 32 << 10, 33 << 10, 0x9000000},
		{"inside the second", 40<<10 + 16, 48 << 10, 0x9000000 + 8<<10 + 16},
		{"past the first's end", 16<<10 - 8, 16<<10 + 8, 0},
		{"in the gap", 20 << 10, 21 << 10, 0},
		{"across the gap", 8 << 10, 40 << 10, 0},
		{"after the last", 48 << 10, 49 << 10, 0},
	} {
		got, err := m.Addr(mem[tc.lo:tc.hi])
		if tc.want == 0 {
			if err == nil {
				t.Errorf("%s: %#x, want an error", tc.name, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %#x %v, want %#x", tc.name, got, err, tc.want)
		}
	}
	if _, err := m.Addr(nil); err == nil {
		t.Error("an empty buffer got an address")
	}
	bad := &HostMap{ranges: []mappedRange{{lo: base, hi: base + 8192, dev: 1}, {lo: base + 4096, hi: base + 12288, dev: 2}}}
	if err := bad.sort(); err == nil {
		t.Error("overlapping ranges accepted")
	}
}

// TestMemcpy2DLayout: the 2D copy descriptor has the offsets of cuda.h's
// CUDA_MEMCPY2D on a 64-bit host (the driver reads it by them).
func TestMemcpy2DLayout(t *testing.T) {
	t.Parallel()
	var d memcpy2D
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"srcXInBytes", unsafe.Offsetof(d.srcXInBytes), 0},
		{"srcY", unsafe.Offsetof(d.srcY), 8},
		{"srcMemoryType", unsafe.Offsetof(d.srcMemoryType), 16},
		{"srcHost", unsafe.Offsetof(d.srcHost), 24},
		{"srcDevice", unsafe.Offsetof(d.srcDevice), 32},
		{"srcArray", unsafe.Offsetof(d.srcArray), 40},
		{"srcPitch", unsafe.Offsetof(d.srcPitch), 48},
		{"dstXInBytes", unsafe.Offsetof(d.dstXInBytes), 56},
		{"dstY", unsafe.Offsetof(d.dstY), 64},
		{"dstMemoryType", unsafe.Offsetof(d.dstMemoryType), 72},
		{"dstHost", unsafe.Offsetof(d.dstHost), 80},
		{"dstDevice", unsafe.Offsetof(d.dstDevice), 88},
		{"dstArray", unsafe.Offsetof(d.dstArray), 96},
		{"dstPitch", unsafe.Offsetof(d.dstPitch), 104},
		{"WidthInBytes", unsafe.Offsetof(d.widthInBytes), 112},
		{"Height", unsafe.Offsetof(d.height), 120},
		{"size", unsafe.Sizeof(d), 128},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, cuda.h has %d", f.name, f.got, f.want)
		}
	}
}
