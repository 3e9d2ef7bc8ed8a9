package nvme

import (
	"errors"
	"fmt"
)

// Status is the 15-bit status field of a completion: SC in bits 7:0, SCT in
// 10:8, CRD in 12:11, More in bit 13 and DNR in bit 14.
type Status uint16

// Status code types.
const (
	SCTGeneric         = 0
	SCTCommandSpecific = 1
	SCTMedia           = 2
	SCTPath            = 3
	SCTVendor          = 7
)

// MakeStatus builds a status from its type and code; tests and the software
// controller use it.
func MakeStatus(sct, sc uint8, dnr bool) Status {
	s := Status(sct&7)<<8 | Status(sc)
	if dnr {
		s |= 1 << 14
	}
	return s
}

// Common statuses.
var (
	StatusSuccess          = MakeStatus(SCTGeneric, 0x00, false)
	StatusInvalidOpcode    = MakeStatus(SCTGeneric, 0x01, true)
	StatusInvalidField     = MakeStatus(SCTGeneric, 0x02, true)
	StatusDataTransfer     = MakeStatus(SCTGeneric, 0x04, false)
	StatusInternal         = MakeStatus(SCTGeneric, 0x06, false)
	StatusAbortRequested   = MakeStatus(SCTGeneric, 0x07, false)
	StatusSQDeleted        = MakeStatus(SCTGeneric, 0x08, false)
	StatusInvalidNamespace = MakeStatus(SCTGeneric, 0x0b, true)
	StatusPRPOffsetInvalid = MakeStatus(SCTGeneric, 0x13, true)
	StatusLBAOutOfRange    = MakeStatus(SCTGeneric, 0x80, true)
	StatusInvalidQueueID   = MakeStatus(SCTCommandSpecific, 0x01, true)
	StatusInvalidQueueSize = MakeStatus(SCTCommandSpecific, 0x02, true)
	StatusWriteFault       = MakeStatus(SCTMedia, 0x80, false)
	StatusUnrecoveredRead  = MakeStatus(SCTMedia, 0x81, false)
)

// SC is the status code.
func (s Status) SC() uint8 { return uint8(s) }

// SCT is the status code type.
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// CRD is the command retry delay index.
func (s Status) CRD() uint8 { return uint8(s>>11) & 3 }

// More says more information is in the Error Information log page.
func (s Status) More() bool { return s>>13&1 == 1 }

// DNR (do not retry) says the same command would fail again.
func (s Status) DNR() bool { return s>>14&1 == 1 }

// OK reports a successful completion.
func (s Status) OK() bool { return s.SC() == 0 && s.SCT() == 0 }

// statusNames names the codes of NVMe 1.4 figures 128-130 (and the NVM
// command set's figure 131): generic, command specific and media errors.
var statusNames = map[uint16]string{
	0x000: "successful completion",
	0x001: "invalid command opcode",
	0x002: "invalid field in command",
	0x003: "command ID conflict",
	0x004: "data transfer error",
	0x005: "commands aborted due to power loss notification",
	0x006: "internal error",
	0x007: "command abort requested",
	0x008: "command aborted due to SQ deletion",
	0x009: "command aborted due to failed fused command",
	0x00a: "command aborted due to missing fused command",
	0x00b: "invalid namespace or format",
	0x00c: "command sequence error",
	0x00d: "invalid SGL segment descriptor",
	0x00e: "invalid number of SGL descriptors",
	0x00f: "data SGL length invalid",
	0x010: "metadata SGL length invalid",
	0x011: "SGL descriptor type invalid",
	0x012: "invalid use of controller memory buffer",
	0x013: "PRP offset invalid",
	0x014: "atomic write unit exceeded",
	0x015: "operation denied",
	0x016: "SGL offset invalid",
	0x018: "host identifier inconsistent format",
	0x019: "keep alive timer expired",
	0x01a: "keep alive timeout invalid",
	0x01b: "command aborted due to preempt and abort",
	0x01c: "sanitize failed",
	0x01d: "sanitize in progress",
	0x01e: "SGL data block granularity invalid",
	0x01f: "command not supported for queue in CMB",
	0x020: "namespace is write protected",
	0x021: "command interrupted",
	0x022: "transient transport error",
	0x080: "LBA out of range",
	0x081: "capacity exceeded",
	0x082: "namespace not ready",
	0x083: "reservation conflict",
	0x084: "format in progress",
	0x100: "completion queue invalid",
	0x101: "invalid queue identifier",
	0x102: "invalid queue size",
	0x103: "abort command limit exceeded",
	0x105: "asynchronous event request limit exceeded",
	0x106: "invalid firmware slot",
	0x107: "invalid firmware image",
	0x108: "invalid interrupt vector",
	0x109: "invalid log page",
	0x10a: "invalid format",
	0x10b: "firmware activation requires conventional reset",
	0x10c: "invalid queue deletion",
	0x10d: "feature identifier not saveable",
	0x10e: "feature not changeable",
	0x10f: "feature not namespace specific",
	0x180: "conflicting attributes",
	0x181: "invalid protection information",
	0x182: "attempted write to read only range",
	0x280: "write fault",
	0x281: "unrecovered read error",
	0x282: "end-to-end guard check error",
	0x283: "end-to-end application tag check error",
	0x284: "end-to-end reference tag check error",
	0x285: "compare failure",
	0x286: "access denied",
	0x287: "deallocated or unwritten logical block",
}

var sctNames = [8]string{"generic", "command specific", "media and data integrity", "path related", "sct 4", "sct 5", "sct 6", "vendor specific"}

// String names the status, e.g. "unrecovered read error (sct 2 sc 0x81, dnr)".
func (s Status) String() string {
	name, ok := statusNames[uint16(s.SCT())<<8|uint16(s.SC())]
	if !ok {
		name = sctNames[s.SCT()] + " status"
	}
	str := fmt.Sprintf("%s (sct %d sc %#02x", name, s.SCT(), s.SC())
	if s.DNR() {
		str += ", dnr"
	}
	if s.More() {
		str += ", more"
	}
	if s.CRD() != 0 {
		str += fmt.Sprintf(", crd %d", s.CRD())
	}
	return str + ")"
}

// Sentinel errors. StatusError matches the first four with errors.Is
// according to its status code; the others come from the driver itself.
var (
	// ErrMedia matches any media and data integrity error (SCT 2): the
	// bytes could not be read or written, so the data must not be used.
	ErrMedia = errors.New("nvme: media error")
	// ErrAbortRequested matches a command that completed because an Abort
	// command (sent by the driver on timeout or cancellation) stopped it.
	ErrAbortRequested = errors.New("nvme: command aborted")
	// ErrInvalidCommand matches command errors the host caused (invalid
	// opcode, field, namespace, PRP offset, LBA range): a driver or caller bug.
	ErrInvalidCommand = errors.New("nvme: invalid command")
	// ErrPath matches path related errors (SCT 3).
	ErrPath = errors.New("nvme: path error")

	// ErrTimeout is a command that did not complete within the timeout.
	ErrTimeout = errors.New("nvme: command timed out")
	// ErrClosed is returned for commands submitted to, or in flight in, a
	// controller that was shut down.
	ErrClosed = errors.New("nvme: controller closed")
	// ErrControllerFatal is a controller that reported CSTS.CFS and could not
	// be reset, or did not become ready.
	ErrControllerFatal = errors.New("nvme: controller failed")
	// ErrBadRequest is a request the driver refuses before submitting it
	// (misaligned buffer, length not a multiple of the block size, range
	// outside the namespace).
	ErrBadRequest = errors.New("nvme: bad request")
)

// StatusError is a command that the controller completed with a non-zero
// status. Use errors.Is with ErrMedia, ErrAbortRequested, ErrInvalidCommand
// or ErrPath to classify it, or read Status for the exact code.
type StatusError struct {
	Op     string // "read", "write", "identify", ...
	QID    uint16
	NSID   uint32
	LBA    uint64
	Blocks uint32
	Status Status
}

// Error names the command, its range and the decoded status.
func (e *StatusError) Error() string {
	if e.Op == "read" || e.Op == "write" || e.Op == "flush" {
		return fmt.Sprintf("nvme: %s nsid %d lba %d+%d (queue %d): %v", e.Op, e.NSID, e.LBA, e.Blocks, e.QID, e.Status)
	}
	return fmt.Sprintf("nvme: %s (queue %d): %v", e.Op, e.QID, e.Status)
}

// Is classifies the status for errors.Is.
func (e *StatusError) Is(target error) bool {
	s := e.Status
	switch target {
	case ErrMedia:
		return s.SCT() == SCTMedia
	case ErrPath:
		return s.SCT() == SCTPath
	case ErrAbortRequested:
		return s.SCT() == SCTGeneric && s.SC() == 0x07
	case ErrInvalidCommand:
		if s.SCT() != SCTGeneric {
			return false
		}
		switch s.SC() {
		case 0x01, 0x02, 0x0b, 0x13, 0x80:
			return true
		}
	}
	return false
}
