package vfio

import (
	"errors"
	"testing"
	"unsafe"
)

// fakeIOMMU records the map/unmap calls a dmaSpace makes, so the accounting
// can be checked without a kernel.
type fakeIOMMU struct {
	live    map[uint64]uint64 // iova → size
	failMap bool
}

func newFakeSpace(t *testing.T) (*dmaSpace, *fakeIOMMU) {
	f := &fakeIOMMU{live: map[uint64]uint64{}}
	s := &dmaSpace{maps: map[uint64]*mapping{}}
	s.doMap = func(va, iova, size uint64, p Perm) error {
		if f.failMap {
			return errors.New("injected map failure")
		}
		for o, sz := range f.live {
			if iova < o+sz && o < iova+size {
				t.Fatalf("kernel asked to map %#x+%#x over %#x+%#x", iova, size, o, sz)
			}
		}
		f.live[iova] = size
		return nil
	}
	s.doUnmap = func(iova, size uint64) error {
		if f.live[iova] != size {
			t.Fatalf("unmap %#x+%#x does not match a mapping", iova, size)
		}
		delete(f.live, iova)
		return nil
	}
	if err := s.setRanges(guestRanges, 4096, 65535); err != nil {
		t.Fatal(err)
	}
	return s, f
}

// pageBuf returns a page-aligned slice of n bytes from the Go heap.
func pageBuf(n int) []byte {
	b := make([]byte, n+8192)
	off := int((4096 - uintptr(unsafe.Pointer(&b[0]))%4096) % 4096)
	return b[off : off+n]
}

func TestDMASpaceAccounting(t *testing.T) {
	t.Parallel()
	s, f := newFakeSpace(t)
	a, b := pageBuf(8192), pageBuf(4096)
	ia, err := s.mapBuf(a, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ib, err := s.mapBuf(b, MapOptions{Perm: PermRead})
	if err != nil {
		t.Fatal(err)
	}
	if ia == 0 || ib == 0 || ia == ib {
		t.Fatalf("iovas %#x %#x", ia, ib)
	}
	st := s.snapshot()
	if st.Mappings != 2 || st.Bytes != 12288 || st.Maps != 2 || st.DMAAvail != 65533 {
		t.Fatalf("stats after 2 maps: %+v", st)
	}
	if _, err := s.mapBuf(a[1:4097], MapOptions{}); err == nil {
		t.Fatal("unaligned buffer was mapped")
	}
	if _, err := s.mapBuf(pageBuf(4096), MapOptions{FixedIOVA: true, IOVA: ia}); err == nil {
		t.Fatal("fixed IOVA over a live mapping was accepted")
	}
	f.failMap = true
	if _, err := s.mapBuf(pageBuf(4096), MapOptions{}); err == nil {
		t.Fatal("kernel failure not reported")
	}
	f.failMap = false
	if st := s.snapshot(); st.Mappings != 2 || st.Bytes != 12288 {
		t.Fatalf("failed map changed the accounting: %+v", st)
	}
	if err := s.unmap(ia); err != nil {
		t.Fatal(err)
	}
	if err := s.unmap(ia); err == nil {
		t.Fatal("double unmap succeeded")
	}
	st = s.snapshot()
	if st.Mappings != 1 || st.Bytes != 4096 || st.PeakBytes != 12288 || st.Unmaps != 1 {
		t.Fatalf("stats after unmap: %+v", st)
	}
	fixed, err := s.mapBuf(pageBuf(4096), MapOptions{FixedIOVA: true, IOVA: 0x40000000})
	if err != nil || fixed != 0x40000000 {
		t.Fatalf("fixed map: %#x %v", fixed, err)
	}
	if err := s.unmapAll(); err != nil {
		t.Fatal(err)
	}
	if len(f.live) != 0 {
		t.Fatalf("close left %d mappings in the IOMMU", len(f.live))
	}
	if st := s.snapshot(); st.Mappings != 0 || st.Bytes != 0 {
		t.Fatalf("stats after close: %+v", st)
	}
	if _, err := s.mapBuf(pageBuf(4096), MapOptions{}); err == nil {
		t.Fatal("map after close succeeded")
	}
}

func TestDMASpaceLargeAlignment(t *testing.T) {
	t.Parallel()
	s, _ := newFakeSpace(t)
	// A 2 MiB-aligned 4 MiB buffer gets a 2 MiB-aligned IOVA (so the IOMMU
	// can use large pages); a 4 KiB buffer does not waste a large slot.
	big := make([]byte, 8<<20)
	off := int(((2 << 20) - uintptr(unsafe.Pointer(&big[0]))%(2<<20)) % (2 << 20))
	buf := big[off : off+4<<20]
	small, err := s.mapBuf(pageBuf(4096), MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	iova, err := s.mapBuf(buf, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if iova%(2<<20) != 0 {
		t.Fatalf("4 MiB buffer at a 2 MiB boundary mapped at %#x", iova)
	}
	if small != 0x1000 {
		t.Fatalf("first small map at %#x, want 0x1000", small)
	}
}

func TestSetRangesKeepsLiveMappings(t *testing.T) {
	t.Parallel()
	s, _ := newFakeSpace(t)
	iova, err := s.mapBuf(pageBuf(4096), MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A second device joins and reserves more: the live mapping survives.
	if err := s.setRanges([]Range{{0, 0xdfffffff}}, 4096, -1); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.alloc.SizeOf(iova); !ok {
		t.Fatal("live mapping lost from the allocator")
	}
	// Ranges that exclude it are refused.
	if err := s.setRanges([]Range{{0x100000000, 0x1ffffffff}}, 4096, -1); err == nil {
		t.Fatal("ranges excluding a live mapping were accepted")
	}
}
