package vfio

import (
	"reflect"
	"testing"
)

// capBuf builds info buffers with capability chains the way the kernel
// lays them out (vfio_info_cap_add: each cap appended, 8-byte aligned).
type capBuf struct{ b []byte }

func newInfo(hdr int) *capBuf { return &capBuf{b: make([]byte, hdr)} }

// add appends a capability with the given body (after the 8-byte header),
// links it from the previous one (or from the cap_offset field at
// capOffField) and returns its offset.
func (c *capBuf) add(id, ver uint16, body []byte, capOffField int, prev int) int {
	for len(c.b)%8 != 0 {
		c.b = append(c.b, 0)
	}
	off := len(c.b)
	h := make([]byte, 8)
	ne.PutUint16(h, id)
	ne.PutUint16(h[2:], ver)
	c.b = append(c.b, h...)
	c.b = append(c.b, body...)
	if prev < 0 {
		ne.PutUint32(c.b[capOffField:], uint32(off))
	} else {
		ne.PutUint32(c.b[prev+4:], uint32(off))
	}
	return off
}

func iovaBody(rs ...Range) []byte {
	b := make([]byte, 8+16*len(rs))
	ne.PutUint32(b, uint32(len(rs)))
	for i, r := range rs {
		ne.PutUint64(b[8+16*i:], r.Start)
		ne.PutUint64(b[16+16*i:], r.End)
	}
	return b
}

func type1Info(pg uint64, caps bool) *capBuf {
	c := newInfo(24)
	flags := uint32(iommuInfoPgsizes)
	if caps {
		flags |= iommuInfoCaps
	}
	ne.PutUint32(c.b[4:], flags)
	ne.PutUint64(c.b[8:], pg)
	return c
}

func (c *capBuf) finish() []byte {
	ne.PutUint32(c.b, uint32(len(c.b)))
	return c.b
}

func TestParseType1Info(t *testing.T) {
	t.Parallel()
	// The buffer the guest's kernel returned: IOVA ranges, then DMA avail.
	guest := type1Info(0x40201000, true)
	o := guest.add(iommuCapIOVARange, 1, iovaBody(Range{0xfef00000, 0x7fffffffff}, Range{0, 0xfedfffff}), 16, -1)
	avail := make([]byte, 4)
	ne.PutUint32(avail, 65535)
	guest.add(iommuCapDMAAvail, 1, avail, 16, o)

	noCaps := type1Info(0x1000, false)

	tooMany := type1Info(0x1000, true)
	tooMany.add(iommuCapIOVARange, 1, iovaBody(Range{0, 0xfff})[:8], 16, -1)
	ne.PutUint32(tooMany.b[24+8:], 1000) // nr_iovas far beyond the buffer

	loop := type1Info(0x1000, true)
	lo := loop.add(iommuCapDMAAvail, 1, avail, 16, -1)
	ne.PutUint32(loop.b[lo+4:], uint32(lo)) // links to itself

	overlap := type1Info(0x1000, true)
	overlap.add(iommuCapIOVARange, 1, iovaBody(Range{0, 0x1fff}, Range{0x1000, 0x2fff}), 16, -1)

	inHeader := type1Info(0x1000, true)
	ne.PutUint32(inHeader.b[16:], 8)

	unknown := type1Info(0x1000, true)
	unknown.add(99, 1, []byte{1, 2, 3, 4}, 16, -1)

	tests := []struct {
		name string
		buf  []byte
		want IOMMUInfo
		err  bool
	}{
		{"guest", guest.finish(), IOMMUInfo{PageSizes: 0x40201000,
			Ranges:   []Range{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}},
			DMAAvail: 65535, Caps: []uint16{1, 3}}, false},
		{"no caps", noCaps.finish(), IOMMUInfo{PageSizes: 0x1000, DMAAvail: -1}, false},
		{"unknown cap ignored", unknown.finish(), IOMMUInfo{PageSizes: 0x1000, DMAAvail: -1, Caps: []uint16{99}}, false},
		{"range count past the buffer", tooMany.finish(), IOMMUInfo{}, true},
		{"self loop", loop.finish(), IOMMUInfo{}, true},
		{"overlapping ranges", overlap.finish(), IOMMUInfo{}, true},
		{"cap inside the header", inHeader.finish(), IOMMUInfo{}, true},
		{"short buffer", make([]byte, 10), IOMMUInfo{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseType1Info(tc.buf)
			if tc.err {
				if err == nil {
					t.Fatalf("want an error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if g, _ := parseType1Info(guest.finish()); g.MinPageSize() != 4096 {
		t.Errorf("min page %#x", g.MinPageSize())
	}
}

func regionBuf(index uint32, size, offset uint64, flags uint32) *capBuf {
	c := newInfo(32)
	ne.PutUint32(c.b[4:], flags)
	ne.PutUint32(c.b[8:], index)
	ne.PutUint64(c.b[16:], size)
	ne.PutUint64(c.b[24:], offset)
	return c
}

func TestParseRegionInfo(t *testing.T) {
	t.Parallel()
	// An NVMe BAR0 whose MSI-X table at 0x2000 is cut out of the mmap.
	sparse := regionBuf(0, 0x4000, 0, regionFlagRead|regionFlagWrite|regionFlagMmap|regionFlagCaps)
	body := make([]byte, 8+32)
	ne.PutUint32(body, 2)
	ne.PutUint64(body[8:], 0)
	ne.PutUint64(body[16:], 0x2000)
	ne.PutUint64(body[24:], 0x3000)
	ne.PutUint64(body[32:], 0x1000)
	o := sparse.add(regionCapSparseMmap, 1, body, 12, -1)
	sparse.add(regionCapMSIXMappable, 1, nil, 12, o)

	typed := regionBuf(9, 0x100, 0x90000000000, regionFlagRead|regionFlagCaps)
	tb := make([]byte, 8)
	ne.PutUint32(tb, 0x8086)
	ne.PutUint32(tb[4:], 3)
	typed.add(regionCapType, 1, tb, 12, -1)

	outside := regionBuf(2, 0x1000, 0, regionFlagMmap|regionFlagCaps)
	ob := make([]byte, 8+16)
	ne.PutUint32(ob, 1)
	ne.PutUint64(ob[8:], 0x800)
	ne.PutUint64(ob[16:], 0x1000)
	outside.add(regionCapSparseMmap, 1, ob, 12, -1)

	tests := []struct {
		name string
		buf  []byte
		want RegionInfo
		err  bool
	}{
		{"config", regionBuf(7, 4096, 7<<40, regionFlagRead|regionFlagWrite).finish(),
			RegionInfo{Index: 7, Size: 4096, Offset: 7 << 40, Read: true, Write: true}, false},
		{"sparse BAR0", sparse.finish(), RegionInfo{Index: 0, Size: 0x4000, Read: true, Write: true, Mmap: true,
			Sparse: []Area{{0, 0x2000}, {0x3000, 0x1000}}, MSIXMappable: true}, false},
		{"typed", typed.finish(), RegionInfo{Index: 9, Size: 0x100, Offset: 0x90000000000, Read: true, Type: 0x8086, Subtype: 3}, false},
		{"sparse area outside the region", outside.finish(), RegionInfo{}, true},
		{"short", make([]byte, 31), RegionInfo{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseRegionInfo(tc.buf)
			if tc.err {
				if err == nil {
					t.Fatalf("want an error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzParseCaps feeds arbitrary info buffers to the capability parsers: they
// must return an error or a result that respects the buffer's bounds, never
// panic, loop or allocate beyond the buffer.
func FuzzParseCaps(f *testing.F) {
	g := type1Info(0x40201000, true)
	g.add(iommuCapIOVARange, 1, iovaBody(Range{0, 0xfedfffff}, Range{0xfef00000, 0x7fffffffff}), 16, -1)
	f.Add(g.finish())
	r := regionBuf(0, 0x4000, 0, regionFlagMmap|regionFlagCaps)
	body := make([]byte, 24)
	ne.PutUint32(body, 1)
	ne.PutUint64(body[16:], 0x1000)
	r.add(regionCapSparseMmap, 1, body, 12, -1)
	f.Add(r.finish())
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		if info, err := parseType1Info(b); err == nil {
			if len(info.Ranges)*iovaRangeSize > len(b) {
				t.Fatalf("%d ranges from %d bytes", len(info.Ranges), len(b))
			}
			for i, rg := range info.Ranges {
				if rg.End < rg.Start || (i > 0 && rg.Start <= info.Ranges[i-1].End) {
					t.Fatalf("bad ranges %v", info.Ranges)
				}
			}
			if len(info.Ranges) > 0 {
				if _, err := NewAllocator(info.Ranges, info.MinPageSize()); err != nil && info.MinPageSize()&(info.MinPageSize()-1) != 0 {
					t.Fatal("non power-of-two min page")
				}
			}
		}
		if ri, err := parseRegionInfo(b); err == nil {
			for _, a := range ri.Sparse {
				if a.Offset > ri.Size || a.Size > ri.Size-a.Offset {
					t.Fatalf("sparse area %+v outside region of %#x", a, ri.Size)
				}
			}
		}
		for _, first := range []uint32{0, 8, 16, 24, 32} {
			caps, err := ParseCaps(b, first, 8)
			if err != nil {
				continue
			}
			if len(caps) > maxCaps {
				t.Fatalf("%d caps", len(caps))
			}
			for i, c := range caps {
				if int(c.Offset)+len(c.Body) > len(b) || (i > 0 && c.Offset <= caps[i-1].Offset) {
					t.Fatalf("cap %d at %d len %d in %d bytes", i, c.Offset, len(c.Body), len(b))
				}
			}
		}
	})
}
