package nvme

import (
	"encoding/binary"
	"fmt"
)

// Opcode is an admin or NVM command opcode.
type Opcode uint8

// Admin command opcodes (NVMe 1.4 figure 139).
const (
	AdminDeleteSQ    Opcode = 0x00
	AdminCreateSQ    Opcode = 0x01
	AdminGetLogPage  Opcode = 0x02
	AdminDeleteCQ    Opcode = 0x04
	AdminCreateCQ    Opcode = 0x05
	AdminIdentify    Opcode = 0x06
	AdminAbort       Opcode = 0x08
	AdminSetFeatures Opcode = 0x09
	AdminGetFeatures Opcode = 0x0a
	AdminAsyncEvent  Opcode = 0x0c
	AdminFormatNVM   Opcode = 0x80
	featureNumQueues        = 0x07
)

// NVM command set opcodes (NVMe 1.4 figure 346).
const (
	OpFlush Opcode = 0x00
	OpWrite Opcode = 0x01
	OpRead  Opcode = 0x02
)

var opNames = map[Opcode]string{OpFlush: "flush", OpWrite: "write", OpRead: "read"}

// Command is a 64-byte submission queue entry. The driver fills CID and the
// data pointer; callers of Controller.Admin set the rest.
type Command struct {
	Opcode Opcode
	CID    uint16
	NSID   uint32
	PRP1   uint64
	PRP2   uint64
	CDW10  uint32
	CDW11  uint32
	CDW12  uint32
	CDW13  uint32
	CDW14  uint32
	CDW15  uint32
}

// Marshal writes c into the 64-byte entry b (PSDT 0: PRPs, no fused op).
func (c *Command) Marshal(b []byte) {
	_ = b[63]
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(c.Opcode)|uint32(c.CID)<<16)
	le.PutUint32(b[4:], c.NSID)
	le.PutUint64(b[8:], 0)
	le.PutUint64(b[16:], 0) // MPTR
	le.PutUint64(b[24:], c.PRP1)
	le.PutUint64(b[32:], c.PRP2)
	le.PutUint32(b[40:], c.CDW10)
	le.PutUint32(b[44:], c.CDW11)
	le.PutUint32(b[48:], c.CDW12)
	le.PutUint32(b[52:], c.CDW13)
	le.PutUint32(b[56:], c.CDW14)
	le.PutUint32(b[60:], c.CDW15)
}

// UnmarshalCommand decodes a 64-byte submission queue entry; the software
// controller uses it.
func UnmarshalCommand(b []byte) (Command, error) {
	if len(b) < sqEntrySize {
		return Command{}, fmt.Errorf("nvme: submission entry is %d bytes, want %d", len(b), sqEntrySize)
	}
	le := binary.LittleEndian
	dw0 := le.Uint32(b)
	return Command{
		Opcode: Opcode(dw0), CID: uint16(dw0 >> 16), NSID: le.Uint32(b[4:]),
		PRP1: le.Uint64(b[24:]), PRP2: le.Uint64(b[32:]),
		CDW10: le.Uint32(b[40:]), CDW11: le.Uint32(b[44:]), CDW12: le.Uint32(b[48:]),
		CDW13: le.Uint32(b[52:]), CDW14: le.Uint32(b[56:]), CDW15: le.Uint32(b[60:]),
	}, nil
}

// Completion is a decoded 16-byte completion queue entry.
type Completion struct {
	Result uint32 // DW0: command specific
	SQHead uint16
	SQID   uint16
	CID    uint16
	Phase  bool
	Status Status
}

// ParseCompletion decodes a completion queue entry.
func ParseCompletion(b []byte) (Completion, error) {
	if len(b) < cqEntrySize {
		return Completion{}, fmt.Errorf("nvme: completion entry is %d bytes, want %d", len(b), cqEntrySize)
	}
	le := binary.LittleEndian
	dw2, dw3 := le.Uint32(b[8:]), le.Uint32(b[12:])
	return Completion{
		Result: le.Uint32(b),
		SQHead: uint16(dw2), SQID: uint16(dw2 >> 16),
		CID: uint16(dw3), Phase: dw3>>16&1 == 1, Status: Status(dw3 >> 17),
	}, nil
}

// Marshal encodes the entry into b; the software controller uses it. DW3
// (which holds the phase bit) is returned separately so that the caller can
// publish it last, with a single store, after the rest of the entry.
func (c Completion) Marshal(b []byte) (dw3 uint32) {
	le := binary.LittleEndian
	le.PutUint32(b, c.Result)
	le.PutUint32(b[4:], 0)
	le.PutUint32(b[8:], uint32(c.SQHead)|uint32(c.SQID)<<16)
	dw3 = uint32(c.CID) | uint32(c.Status&0x7fff)<<17
	if c.Phase {
		dw3 |= 1 << 16
	}
	return dw3
}
