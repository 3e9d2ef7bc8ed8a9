package nvme

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// IdentifySize is the size of every Identify data structure.
const IdentifySize = 4096

// Identify CNS values.
const (
	cnsNamespace      = 0x00
	cnsController     = 0x01
	cnsActiveNSIDList = 0x02
)

// ControllerInfo is the part of the Identify Controller data structure
// (NVMe 1.4 figure 247) that the driver and its users need.
type ControllerInfo struct {
	VendorID           uint16
	Serial             string
	Model              string
	Firmware           string
	MDTS               uint8 // max data transfer size as a power of two in minimum pages; 0: no limit
	ControllerID       uint16
	Version            uint32
	AbortLimit         int   // ACL + 1: aborts outstanding at once
	SQES, CQES         uint8 // required (low nibble) and maximum (high nibble) entry sizes, log2
	MaxCmd             uint16
	Namespaces         uint32 // NN: the largest namespace ID
	VolatileWriteCache bool
}

// ParseControllerInfo decodes an Identify Controller data structure.
func ParseControllerInfo(b []byte) (ControllerInfo, error) {
	if len(b) < IdentifySize {
		return ControllerInfo{}, fmt.Errorf("nvme: identify controller data is %d bytes, want %d", len(b), IdentifySize)
	}
	le := binary.LittleEndian
	ci := ControllerInfo{
		VendorID:           le.Uint16(b[0:]),
		Serial:             asciiField(b[4:24]),
		Model:              asciiField(b[24:64]),
		Firmware:           asciiField(b[64:72]),
		MDTS:               b[77],
		ControllerID:       le.Uint16(b[78:]),
		Version:            le.Uint32(b[80:]),
		AbortLimit:         int(b[258]) + 1,
		SQES:               b[512],
		CQES:               b[513],
		MaxCmd:             le.Uint16(b[514:]),
		Namespaces:         le.Uint32(b[516:]),
		VolatileWriteCache: b[525]&1 == 1,
	}
	if min := ci.SQES & 0xf; min != 0 && min > 6 {
		return ci, fmt.Errorf("nvme: controller requires %d-byte submission entries, driver uses 64", 1<<min)
	}
	if min := ci.CQES & 0xf; min != 0 && min > 4 {
		return ci, fmt.Errorf("nvme: controller requires %d-byte completion entries, driver uses 16", 1<<min)
	}
	return ci, nil
}

// MaxTransfer is the largest transfer in bytes one command may move (MDTS in
// units of the minimum page size), or 0 for no limit.
func (ci ControllerInfo) MaxTransfer(minPage int) int {
	if ci.MDTS == 0 {
		return 0
	}
	if ci.MDTS > 20 {
		return 1 << 30 // far beyond what the driver splits into; avoids overflow
	}
	return minPage << ci.MDTS
}

// asciiField trims an Identify string field (space padded ASCII).
func asciiField(b []byte) string {
	b = bytes.TrimRight(b, " \x00")
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}

// LBAFormat is one entry of a namespace's LBA format list.
type LBAFormat struct {
	MetadataSize int
	BlockSize    int // 1 << LBADS
	Performance  int // RP: 0 best … 3 degraded
}

// NamespaceInfo is the part of Identify Namespace (NVMe 1.4 figure 249) the
// driver needs.
type NamespaceInfo struct {
	ID           uint32
	Size         uint64 // NSZE in blocks
	Capacity     uint64 // NCAP in blocks
	Formats      []LBAFormat
	FormatIndex  int
	BlockSize    int // of the format in use
	MetadataSize int
}

// ParseNamespaceInfo decodes an Identify Namespace data structure for nsid.
func ParseNamespaceInfo(nsid uint32, b []byte) (NamespaceInfo, error) {
	if len(b) < IdentifySize {
		return NamespaceInfo{}, fmt.Errorf("nvme: identify namespace data is %d bytes, want %d", len(b), IdentifySize)
	}
	le := binary.LittleEndian
	ni := NamespaceInfo{ID: nsid, Size: le.Uint64(b[0:]), Capacity: le.Uint64(b[8:])}
	if ni.Size == 0 {
		return ni, fmt.Errorf("nvme: namespace %d is inactive (size 0)", nsid)
	}
	nlbaf := int(b[25]) + 1
	if nlbaf > 64 {
		return ni, fmt.Errorf("nvme: namespace %d reports %d LBA formats, at most 64 exist", nsid, nlbaf)
	}
	flbas := b[26]
	ni.FormatIndex = int(flbas&0xf) | int(flbas>>5&3)<<4
	for i := 0; i < nlbaf; i++ {
		v := le.Uint32(b[128+4*i:])
		ni.Formats = append(ni.Formats, LBAFormat{
			MetadataSize: int(v & 0xffff),
			BlockSize:    blockSizeFromLBADS(uint8(v >> 16)),
			Performance:  int(v >> 24 & 3),
		})
	}
	if ni.FormatIndex >= len(ni.Formats) {
		return ni, fmt.Errorf("nvme: namespace %d uses LBA format %d of %d", nsid, ni.FormatIndex, len(ni.Formats))
	}
	f := ni.Formats[ni.FormatIndex]
	if f.BlockSize < 512 || f.BlockSize > 64<<10 {
		return ni, fmt.Errorf("nvme: namespace %d has unsupported block size %d", nsid, f.BlockSize)
	}
	if f.MetadataSize != 0 {
		return ni, fmt.Errorf("nvme: namespace %d has %d bytes of metadata per block, which the driver does not support", nsid, f.MetadataSize)
	}
	ni.BlockSize, ni.MetadataSize = f.BlockSize, f.MetadataSize
	if ni.Size > (1<<63)/uint64(ni.BlockSize) {
		return ni, fmt.Errorf("nvme: namespace %d size %d blocks overflows", nsid, ni.Size)
	}
	return ni, nil
}

func blockSizeFromLBADS(lbads uint8) int {
	if lbads < 9 || lbads > 16 {
		return 0
	}
	return 1 << lbads
}

// parseNSIDList decodes an active namespace ID list (CNS 02h).
func parseNSIDList(b []byte) []uint32 {
	var ids []uint32
	for i := 0; i+4 <= len(b) && i < IdentifySize; i += 4 {
		id := binary.LittleEndian.Uint32(b[i:])
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids
}
