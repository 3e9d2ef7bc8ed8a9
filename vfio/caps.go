package vfio

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// Capability chains: several VFIO info structures (type1 IOMMU info, region
// info, device info) may be followed by a chain of capabilities, each
// starting with struct vfio_info_cap_header {u16 id; u16 version; u32 next},
// where next is the offset of the following capability from the start of the
// info structure, 0 ending the chain. The kernel fills the buffer, but this
// parser treats it as untrusted: every offset and count is bounds-checked,
// offsets must strictly increase (so a chain cannot loop), and a malformed
// chain is an error, never a panic (FuzzParseCaps).

// Layout facts of the capability bodies, linux/vfio.h (Linux 6.12); checked
// against the header by TestABIMatchesHeaders.
const (
	iovaRangeCapRangesOff = 16 // offsetof(vfio_iommu_type1_info_cap_iova_range, iova_ranges)
	iovaRangeSize         = 16 // sizeof(struct vfio_iova_range)
	dmaAvailCapSize       = 12 // sizeof(struct vfio_iommu_type1_info_dma_avail)
	sparseCapAreasOff     = 16 // offsetof(vfio_region_info_cap_sparse_mmap, areas)
	sparseAreaSize        = 16 // sizeof(struct vfio_region_sparse_mmap_area)
	typeCapSize           = 16 // sizeof(struct vfio_region_info_cap_type)

	maxCaps = 64 // more capabilities than any kernel emits: the chain is corrupt
)

var ne = binary.NativeEndian

// Cap is one capability of a VFIO info chain.
type Cap struct {
	ID      uint16
	Version uint16
	// Offset is where the capability starts in the info buffer.
	Offset uint32
	// Body is the capability including its 8-byte header, up to the next
	// capability or the end of the buffer.
	Body []byte
}

// ParseCaps walks the capability chain of an info buffer whose first
// capability is at offset first (the cap_offset field). hdrSize is the size
// of the fixed info structure: a capability may not start inside it.
func ParseCaps(buf []byte, first uint32, hdrSize int) ([]Cap, error) {
	var caps []Cap
	off := first
	for off != 0 {
		if len(caps) >= maxCaps {
			return nil, fmt.Errorf("capability chain longer than %d entries", maxCaps)
		}
		if int64(off) < int64(hdrSize) {
			return nil, fmt.Errorf("capability at offset %d overlaps the %d-byte info header", off, hdrSize)
		}
		if int64(off)+capHeaderSize > int64(len(buf)) {
			return nil, fmt.Errorf("capability at offset %d runs past the %d-byte buffer", off, len(buf))
		}
		id := ne.Uint16(buf[off:])
		ver := ne.Uint16(buf[off+2:])
		next := ne.Uint32(buf[off+4:])
		end := uint32(len(buf))
		if next != 0 {
			if next < off+capHeaderSize {
				return nil, fmt.Errorf("capability at offset %d links back to offset %d", off, next)
			}
			if int64(next) > int64(len(buf)) {
				return nil, fmt.Errorf("capability at offset %d links to %d, past the %d-byte buffer", off, next, len(buf))
			}
			end = next
		}
		caps = append(caps, Cap{ID: id, Version: ver, Offset: off, Body: buf[off:end]})
		off = next
	}
	return caps, nil
}

// Range is an inclusive span of IOVAs [Start, End], as the kernel reports
// valid IOVA ranges (struct vfio_iova_range, struct iommu_iova_range).
type Range struct {
	Start, End uint64
}

// Size is the number of bytes in r (0 for the whole 64-bit space, which
// does not fit).
func (r Range) Size() uint64 { return r.End - r.Start + 1 }

func (r Range) String() string { return fmt.Sprintf("%#x-%#x", r.Start, r.End) }

// parseIOVARangeCap decodes VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE.
func parseIOVARangeCap(c Cap) ([]Range, error) {
	if len(c.Body) < iovaRangeCapRangesOff {
		return nil, fmt.Errorf("IOVA range capability: %d bytes, want at least %d", len(c.Body), iovaRangeCapRangesOff)
	}
	n := ne.Uint32(c.Body[capHeaderSize:])
	if uint64(n)*iovaRangeSize > uint64(len(c.Body)-iovaRangeCapRangesOff) {
		return nil, fmt.Errorf("IOVA range capability: %d ranges do not fit in %d bytes", n, len(c.Body))
	}
	rs := make([]Range, n)
	for i := range rs {
		p := c.Body[iovaRangeCapRangesOff+i*iovaRangeSize:]
		rs[i] = Range{Start: ne.Uint64(p), End: ne.Uint64(p[8:])}
	}
	return normalizeRanges(rs)
}

// normalizeRanges sorts ranges and rejects inverted or overlapping ones.
func normalizeRanges(rs []Range) ([]Range, error) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	for i, r := range rs {
		if r.End < r.Start {
			return nil, fmt.Errorf("IOVA range %v is inverted", r)
		}
		if i > 0 && r.Start <= rs[i-1].End {
			return nil, fmt.Errorf("IOVA ranges %v and %v overlap", rs[i-1], r)
		}
	}
	return rs, nil
}

// IOMMUInfo is what VFIO_IOMMU_GET_INFO (or IOMMU_IOAS_IOVA_RANGES) reports
// about a DMA address space.
type IOMMUInfo struct {
	// PageSizes is the bitmap of IOMMU page sizes; its lowest bit is the
	// granule every mapping is aligned to.
	PageSizes uint64
	// Ranges are the valid IOVA ranges (the MSI window and other reserved
	// regions cut out). Empty when the kernel reported no IOVA capability
	// (kernels before 5.4); the allocator then uses DefaultRanges.
	Ranges []Range
	// DMAAvail is how many more mappings the kernel allows (type1's
	// dma_entry_limit), or -1 when not reported.
	DMAAvail int64
	// Caps lists the raw capability IDs seen, for diagnostics.
	Caps []uint16
}

// MinPageSize is the smallest IOMMU page size (4 KiB when unreported).
func (i IOMMUInfo) MinPageSize() uint64 {
	if i.PageSizes == 0 {
		return 4096
	}
	return i.PageSizes & -i.PageSizes
}

// parseType1Info decodes a VFIO_IOMMU_GET_INFO buffer: struct
// vfio_iommu_type1_info followed by its capability chain.
func parseType1Info(buf []byte) (IOMMUInfo, error) {
	const hdr = 24 // sizeof(struct vfio_iommu_type1_info)
	info := IOMMUInfo{DMAAvail: -1}
	if len(buf) < hdr {
		return info, fmt.Errorf("IOMMU info: %d bytes, want at least %d", len(buf), hdr)
	}
	flags := ne.Uint32(buf[4:])
	if flags&iommuInfoPgsizes != 0 {
		info.PageSizes = ne.Uint64(buf[8:])
	}
	if flags&iommuInfoCaps == 0 {
		return info, nil
	}
	caps, err := ParseCaps(buf, ne.Uint32(buf[16:]), hdr)
	if err != nil {
		return info, fmt.Errorf("IOMMU info: %w", err)
	}
	for _, c := range caps {
		info.Caps = append(info.Caps, c.ID)
		switch c.ID {
		case iommuCapIOVARange:
			rs, err := parseIOVARangeCap(c)
			if err != nil {
				return info, err
			}
			info.Ranges = rs
		case iommuCapDMAAvail:
			if len(c.Body) < dmaAvailCapSize {
				return info, fmt.Errorf("DMA-avail capability: %d bytes, want %d", len(c.Body), dmaAvailCapSize)
			}
			info.DMAAvail = int64(ne.Uint32(c.Body[capHeaderSize:]))
		}
	}
	return info, nil
}

// RegionInfo describes one region of a VFIO device (a BAR, the ROM, config
// space), from VFIO_DEVICE_GET_REGION_INFO.
type RegionInfo struct {
	Index  int
	Size   uint64
	Offset uint64 // offset of the region in the device fd, for pread/pwrite/mmap
	Read   bool
	Write  bool
	Mmap   bool
	// Sparse lists the mmap-able parts when the kernel restricts mmap to
	// them (VFIO_REGION_INFO_CAP_SPARSE_MMAP); empty means the whole region.
	Sparse []Area
	// MSIXMappable says the MSI-X table may be mmapped with the rest of the
	// BAR (VFIO_REGION_INFO_CAP_MSIX_MAPPABLE).
	MSIXMappable bool
	// Type and Subtype are set for device-specific regions (CAP_TYPE).
	Type, Subtype uint32
}

// Area is a part of a region: Offset from the region start, Size bytes.
type Area struct {
	Offset, Size uint64
}

// parseRegionInfo decodes a VFIO_DEVICE_GET_REGION_INFO buffer.
func parseRegionInfo(buf []byte) (RegionInfo, error) {
	const hdr = 32 // sizeof(struct vfio_region_info)
	if len(buf) < hdr {
		return RegionInfo{}, fmt.Errorf("region info: %d bytes, want at least %d", len(buf), hdr)
	}
	flags := ne.Uint32(buf[4:])
	ri := RegionInfo{
		Index:  int(ne.Uint32(buf[8:])),
		Size:   ne.Uint64(buf[16:]),
		Offset: ne.Uint64(buf[24:]),
		Read:   flags&regionFlagRead != 0,
		Write:  flags&regionFlagWrite != 0,
		Mmap:   flags&regionFlagMmap != 0,
	}
	if flags&regionFlagCaps == 0 {
		return ri, nil
	}
	caps, err := ParseCaps(buf, ne.Uint32(buf[12:]), hdr)
	if err != nil {
		return ri, fmt.Errorf("region %d info: %w", ri.Index, err)
	}
	for _, c := range caps {
		switch c.ID {
		case regionCapSparseMmap:
			if len(c.Body) < sparseCapAreasOff {
				return ri, fmt.Errorf("region %d sparse-mmap capability: %d bytes", ri.Index, len(c.Body))
			}
			n := ne.Uint32(c.Body[capHeaderSize:])
			if uint64(n)*sparseAreaSize > uint64(len(c.Body)-sparseCapAreasOff) {
				return ri, fmt.Errorf("region %d sparse-mmap capability: %d areas do not fit in %d bytes", ri.Index, n, len(c.Body))
			}
			ri.Sparse = make([]Area, n)
			for i := range ri.Sparse {
				p := c.Body[sparseCapAreasOff+i*sparseAreaSize:]
				a := Area{Offset: ne.Uint64(p), Size: ne.Uint64(p[8:])}
				if a.Offset > ri.Size || a.Size > ri.Size-a.Offset {
					return ri, fmt.Errorf("region %d sparse area %#x+%#x outside the %#x-byte region", ri.Index, a.Offset, a.Size, ri.Size)
				}
				ri.Sparse[i] = a
			}
		case regionCapType:
			if len(c.Body) < typeCapSize {
				return ri, fmt.Errorf("region %d type capability: %d bytes", ri.Index, len(c.Body))
			}
			ri.Type = ne.Uint32(c.Body[8:])
			ri.Subtype = ne.Uint32(c.Body[12:])
		case regionCapMSIXMappable:
			ri.MSIXMappable = true
		}
	}
	return ri, nil
}
