package nvme

import (
	"fmt"
	"time"
)

// Controller register offsets (NVMe Base Specification 1.4, section 3.1).
const (
	regCAP   = 0x00 // Controller Capabilities (64-bit)
	regVS    = 0x08 // Version
	regINTMS = 0x0c // Interrupt Mask Set
	regINTMC = 0x10 // Interrupt Mask Clear
	regCC    = 0x14 // Controller Configuration
	regCSTS  = 0x1c // Controller Status
	regAQA   = 0x24 // Admin Queue Attributes
	regASQ   = 0x28 // Admin Submission Queue Base Address (64-bit)
	regACQ   = 0x30 // Admin Completion Queue Base Address (64-bit)
	regDB    = 0x1000
)

// CC fields.
const (
	ccEN       = 1 << 0
	ccCSSNVM   = 0 << 4
	ccMPSShift = 7
	ccAMSRR    = 0 << 11
	ccSHNMask  = 3 << 14
	ccSHNNorm  = 1 << 14
	ccIOSQES   = 6 << 16 // 64-byte submission entries
	ccIOCQES   = 4 << 20 // 16-byte completion entries
)

// CSTS fields.
const (
	cstsRDY       = 1 << 0
	cstsCFS       = 1 << 1
	cstsSHSTMask  = 3 << 2
	cstsSHSTDone  = 2 << 2
	sqEntrySize   = 64
	cqEntrySize   = 16
	pageShift     = 12
	pageSize      = 1 << pageShift
	maxQueueDepth = 4096
)

// PageSize is the memory page size the driver programs into CC.MPS; PRP
// entries after the first must be aligned to it.
const PageSize = pageSize

// Capabilities is the decoded CAP register.
type Capabilities struct {
	MaxQueueEntries int           // MQES + 1: the largest queue the controller supports
	Contiguous      bool          // CQR: queues must be physically contiguous
	Timeout         time.Duration // TO: worst case time for CSTS.RDY to change
	DoorbellStride  uint32        // bytes between doorbells: 4 << DSTRD
	SubsystemReset  bool          // NSSRS
	NVMCommandSet   bool          // CSS bit 0
	MinPageSize     int           // 4 KiB << MPSMIN
	MaxPageSize     int           // 4 KiB << MPSMAX
}

// ParseCapabilities decodes a CAP register value.
func ParseCapabilities(v uint64) Capabilities {
	return Capabilities{
		MaxQueueEntries: int(v&0xffff) + 1,
		Contiguous:      v>>16&1 == 1,
		Timeout:         time.Duration(v>>24&0xff) * 500 * time.Millisecond,
		DoorbellStride:  4 << (v >> 32 & 0xf),
		SubsystemReset:  v>>36&1 == 1,
		NVMCommandSet:   v>>37&1 == 1,
		MinPageSize:     pageSize << (v >> 48 & 0xf),
		MaxPageSize:     pageSize << (v >> 52 & 0xf),
	}
}

// Version is the decoded VS register.
type Version struct{ Major, Minor, Tertiary int }

// String formats the version as "1.4.0".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Tertiary) }

func parseVersion(v uint32) Version {
	return Version{Major: int(v >> 16), Minor: int(v >> 8 & 0xff), Tertiary: int(v & 0xff)}
}

// regs is the only place the driver touches the register file.
type regs struct{ m MMIO }

func (r regs) read32(off uint32) uint32     { return r.m.Read32(off) }
func (r regs) write32(off uint32, v uint32) { r.m.Write32(off, v) }

// read64 reads a 64-bit register as two 32-bit loads, low half first.
func (r regs) read64(off uint32) uint64 {
	lo := r.m.Read32(off)
	hi := r.m.Read32(off + 4)
	return uint64(hi)<<32 | uint64(lo)
}

// write64 writes a 64-bit register as two 32-bit stores, low half first.
func (r regs) write64(off uint32, v uint64) {
	r.m.Write32(off, uint32(v))
	r.m.Write32(off+4, uint32(v>>32))
}

// sqDoorbell and cqDoorbell return doorbell offsets for queue qid
// (NVMe 1.4 section 3.1.24/25).
func sqDoorbell(qid uint16, stride uint32) uint32 { return regDB + uint32(2*qid)*stride }
func cqDoorbell(qid uint16, stride uint32) uint32 { return regDB + uint32(2*qid+1)*stride }
