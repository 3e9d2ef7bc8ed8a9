package vfio

import (
	"errors"
	"math/rand"
	"reflect"
	"testing"
)

// guestRanges are the valid IOVA ranges the test-bed guest reported
// (intel-iommu, 39 bits, the MSI window cut out).
var guestRanges = []Range{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}

func TestNewAllocatorTrims(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ranges []Range
		page   uint64
		spans  []Range
		err    bool
	}{
		{"guest ranges, IOVA 0 withheld", guestRanges, 4096,
			[]Range{{0x1000, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}, false},
		{"unaligned ends trimmed inward", []Range{{0x1001, 0x5fff}, {0x10000, 0x10ffe}}, 4096,
			[]Range{{0x2000, 0x5fff}}, false},
		{"overlapping", []Range{{0x100000, 0x1fffff}, {0x1000, 0xfff0fff}}, 4096, nil, true},
		{"unsorted input", []Range{{0x100000, 0x1fffff}, {0x1000, 0xfffff}}, 4096, []Range{{0x1000, 0x1fffff}}, false},
		{"whole 64-bit space", []Range{{0, ^uint64(0)}}, 4096, []Range{{0x1000, ^uint64(0)}}, false},
		{"range too small for a page", []Range{{0x1000, 0x1ffe}}, 4096, nil, true},
		{"inverted", []Range{{0x5000, 0x1000}}, 4096, nil, true},
		{"page not power of two", guestRanges, 3000, nil, true},
		{"2 MiB pages", []Range{{0, 0x7fffff}}, 2 << 20, []Range{{0x200000, 0x7fffff}}, false},
		{"range below one page", []Range{{0, 0x7ff}}, 4096, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := NewAllocator(tc.ranges, tc.page)
			if tc.err {
				if err == nil {
					t.Fatalf("want an error, got spans %v", a.Spans())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Spans(); !reflect.DeepEqual(got, tc.spans) {
				t.Fatalf("spans %v, want %v", got, tc.spans)
			}
		})
	}
}

func TestAllocatorAllocFree(t *testing.T) {
	t.Parallel()
	type op struct {
		alloc     uint64 // size to allocate (0: free `free`)
		align     uint64
		free      int // index of an earlier allocation to free
		want      uint64
		wantErr   error
		wantInUse uint64
	}
	tests := []struct {
		name   string
		ranges []Range
		ops    []op
	}{
		{"first fit skips page 0", guestRanges, []op{
			{alloc: 4096, want: 0x1000, wantInUse: 0x1000},
			{alloc: 1, want: 0x2000, wantInUse: 0x2000}, // rounded to a page
			{alloc: 2 << 20, align: 2 << 20, want: 0x200000, wantInUse: 0x202000},
		}},
		{"free coalesces and is reused", []Range{{0, 0x4fff}}, []op{
			{alloc: 0x1000, want: 0x1000, wantInUse: 0x1000},
			{alloc: 0x1000, want: 0x2000, wantInUse: 0x2000},
			{alloc: 0x1000, want: 0x3000, wantInUse: 0x3000},
			{free: 0, wantInUse: 0x2000},
			{free: 1, wantInUse: 0x1000},
			{alloc: 0x2000, want: 0x1000, wantInUse: 0x3000},
		}},
		{"exhaustion", []Range{{0, 0x2fff}}, []op{
			{alloc: 0x2000, want: 0x1000, wantInUse: 0x2000},
			{alloc: 0x1000, wantErr: ErrIOVAExhausted, wantInUse: 0x2000},
		}},
		{"allocation spans the MSI hole never", guestRanges, []op{
			{alloc: 0xfed00000, want: 0x100000, align: 1 << 20, wantInUse: 0xfed00000},
			// only 0xff000 left below the hole; 2 MiB must go above it
			{alloc: 2 << 20, want: 0xff000000, align: 2 << 20, wantInUse: 0xfef00000},
		}},
		{"odd alignment rounds up to a power of two", guestRanges, []op{
			{alloc: 0x1000, align: 0x3000, want: 0x4000, wantInUse: 0x1000},
		}},
		{"zero size", guestRanges, []op{
			{alloc: 0, free: -1, wantErr: errAny},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := NewAllocator(tc.ranges, 4096)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for i, o := range tc.ops {
				if o.alloc == 0 && o.free >= 0 {
					if _, err := a.Release(got[o.free]); err != nil {
						t.Fatalf("op %d: release: %v", i, err)
					}
				} else {
					iova, err := a.Alloc(o.alloc, o.align)
					switch {
					case o.wantErr == errAny && err == nil:
						t.Fatalf("op %d: want an error", i)
					case o.wantErr != nil && o.wantErr != errAny && !errors.Is(err, o.wantErr):
						t.Fatalf("op %d: err %v, want %v", i, err, o.wantErr)
					case o.wantErr == nil && err != nil:
						t.Fatalf("op %d: %v", i, err)
					case o.wantErr == nil && iova != o.want:
						t.Fatalf("op %d: iova %#x, want %#x", i, iova, o.want)
					}
					got = append(got, iova)
				}
				if a.InUse() != o.wantInUse {
					t.Fatalf("op %d: in use %#x, want %#x", i, a.InUse(), o.wantInUse)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

func TestAllocatorReserve(t *testing.T) {
	t.Parallel()
	a, err := NewAllocator(guestRanges, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		iova, size uint64
		ok         bool
	}{
		{0x10000, 0x1000, true},
		{0x10000, 0x1000, false},      // taken
		{0x0, 0x1000, false},          // IOVA 0 is withheld
		{0xfee00000, 0x1000, false},   // the MSI window
		{0xfedff000, 0x2000, false},   // crosses into the window
		{0x10001, 0x1000, false},      // misaligned
		{0x8000000000, 0x1000, false}, // beyond 39 bits
		{0x7ffffff000, 0x1000, true},  // the very last page
	} {
		err := a.Reserve(tc.iova, tc.size)
		if (err == nil) != tc.ok {
			t.Errorf("Reserve(%#x, %#x) = %v, want ok=%v", tc.iova, tc.size, err, tc.ok)
		}
	}
	if _, err := a.Release(0x12345000); err == nil {
		t.Error("releasing an unallocated IOVA succeeded")
	}
}

// TestAllocatorRandom checks the invariants under random alloc/free: no two
// live allocations overlap, all lie in the valid ranges, and the byte count
// returns to zero.
func TestAllocatorRandom(t *testing.T) {
	t.Parallel()
	ranges := []Range{{0, 0xfedfffff}, {0xfef00000, 0x10fffffff}}
	a, err := NewAllocator(ranges, 4096)
	if err != nil {
		t.Fatal(err)
	}
	total := a.Free()
	rng := rand.New(rand.NewSource(1))
	live := map[uint64]uint64{}
	for i := 0; i < 4000; i++ {
		if len(live) > 0 && rng.Intn(3) == 0 {
			for iova := range live {
				if _, err := a.Release(iova); err != nil {
					t.Fatal(err)
				}
				delete(live, iova)
				break
			}
			continue
		}
		size := uint64(rng.Intn(64)+1) * 4096
		if rng.Intn(10) == 0 {
			size = uint64(rng.Intn(8)+1) << 21
		}
		align := uint64(4096) << rng.Intn(10)
		iova, err := a.Alloc(size, align)
		if err != nil {
			if errors.Is(err, ErrIOVAExhausted) {
				continue
			}
			t.Fatal(err)
		}
		if iova%align != 0 {
			t.Fatalf("iova %#x not aligned to %#x", iova, align)
		}
		in := false
		for _, r := range ranges {
			if iova >= r.Start && iova+size-1 <= r.End {
				in = true
			}
		}
		if !in || iova == 0 {
			t.Fatalf("iova %#x+%#x outside the valid ranges", iova, size)
		}
		for o, s := range live {
			if iova < o+s && o < iova+size {
				t.Fatalf("iova %#x+%#x overlaps %#x+%#x", iova, size, o, s)
			}
		}
		live[iova] = size
	}
	for iova := range live {
		if _, err := a.Release(iova); err != nil {
			t.Fatal(err)
		}
	}
	if a.InUse() != 0 || a.Free() != total || a.Count() != 0 {
		t.Fatalf("after freeing everything: in use %#x, free %#x of %#x, %d live", a.InUse(), a.Free(), total, a.Count())
	}
	if got := a.Spans(); len(got) != 2 {
		t.Fatalf("free list did not coalesce back to the 2 ranges: %v", got)
	}
}
