package nvme

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

func TestParseCapabilities(t *testing.T) {
	t.Parallel()
	// QEMU's controller: MQES 2047, CQR, TO 15 (7.5 s), DSTRD 0, CSS NVM.
	c := ParseCapabilities(0x0000_0020_0f01_07ff | 1<<37)
	if c.MaxQueueEntries != 2048 || !c.Contiguous || c.Timeout != 7500*time.Millisecond ||
		c.DoorbellStride != 4 || !c.NVMCommandSet || c.MinPageSize != 4096 {
		t.Errorf("%+v", c)
	}
	if ParseCapabilities(2<<32).DoorbellStride != 16 {
		t.Error("DSTRD 2 should give a 16-byte stride")
	}
	if sqDoorbell(3, 16) != 0x1000+6*16 || cqDoorbell(3, 16) != 0x1000+7*16 {
		t.Error("doorbell offsets")
	}
}

func TestStatusDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    Status
		sct  uint8
		sc   uint8
		dnr  bool
		more bool
		str  string
	}{
		{StatusSuccess, 0, 0, false, false, "successful completion (sct 0 sc 0x00)"},
		{StatusUnrecoveredRead, 2, 0x81, false, false, "unrecovered read error (sct 2 sc 0x81)"},
		{StatusLBAOutOfRange, 0, 0x80, true, false, "LBA out of range (sct 0 sc 0x80, dnr)"},
		{MakeStatus(1, 0x02, true) | 1<<13, 1, 0x02, true, true, "invalid queue size (sct 1 sc 0x02, dnr, more)"},
		{MakeStatus(7, 0xc3, false), 7, 0xc3, false, false, "vendor specific status (sct 7 sc 0xc3)"},
		{MakeStatus(2, 0x81, false) | 2<<11, 2, 0x81, false, false, "unrecovered read error (sct 2 sc 0x81, crd 2)"},
	} {
		if tc.s.SCT() != tc.sct || tc.s.SC() != tc.sc || tc.s.DNR() != tc.dnr || tc.s.More() != tc.more || tc.s.String() != tc.str {
			t.Errorf("%#x: sct %d sc %#x dnr %v more %v %q", uint16(tc.s), tc.s.SCT(), tc.s.SC(), tc.s.DNR(), tc.s.More(), tc.s.String())
		}
	}
}

func TestCompletionRoundTrip(t *testing.T) {
	t.Parallel()
	in := Completion{Result: 0xdeadbeef, SQHead: 17, SQID: 3, CID: 4095, Phase: true, Status: StatusWriteFault | 1<<14}
	b := make([]byte, 16)
	dw3 := in.Marshal(b)
	binary.LittleEndian.PutUint32(b[12:], dw3)
	out, err := ParseCompletion(b)
	if err != nil || out != in {
		t.Fatalf("%+v, %v", out, err)
	}
	cmd := Command{Opcode: OpRead, CID: 9, NSID: 1, PRP1: 0x1000, PRP2: 0x2000, CDW10: 1, CDW11: 2, CDW12: 7}
	sqe := make([]byte, 64)
	cmd.Marshal(sqe)
	if got, _ := UnmarshalCommand(sqe); got != cmd {
		t.Fatalf("%+v", got)
	}
}

func TestParseIdentify(t *testing.T) {
	t.Parallel()
	b := make([]byte, IdentifySize)
	copy(b[24:64], "QEMU NVMe Ctrl                          ")
	copy(b[4:24], "deadbeef            ")
	b[77] = 7
	b[512], b[513] = 0x66, 0x44
	ci, err := ParseControllerInfo(b)
	if err != nil || ci.Model != "QEMU NVMe Ctrl" || ci.Serial != "deadbeef" || ci.MaxTransfer(4096) != 512<<10 {
		t.Fatalf("%+v %v", ci, err)
	}
	ns := make([]byte, IdentifySize)
	binary.LittleEndian.PutUint64(ns, 1000)
	ns[25] = 1 // two formats
	ns[26] = 1 // using the second
	binary.LittleEndian.PutUint32(ns[128:], 9<<16)
	binary.LittleEndian.PutUint32(ns[132:], 12<<16)
	ni, err := ParseNamespaceInfo(1, ns)
	if err != nil || ni.BlockSize != 4096 || ni.Size != 1000 || len(ni.Formats) != 2 {
		t.Fatalf("%+v %v", ni, err)
	}
	ns[26] = 5
	if _, err := ParseNamespaceInfo(1, ns); err == nil || !strings.Contains(err.Error(), "LBA format 5") {
		t.Errorf("bad FLBAS: %v", err)
	}
	binary.LittleEndian.PutUint32(ns[132:], 12<<16|8)
	ns[26] = 1
	if _, err := ParseNamespaceInfo(1, ns); err == nil {
		t.Error("metadata format accepted")
	}
	if _, err := ParseNamespaceInfo(1, ns[:100]); err == nil {
		t.Error("short data accepted")
	}
}

func TestBuildPRP(t *testing.T) {
	t.Parallel()
	list := Buffer{Bytes: make([]byte, pageSize), IOVA: 0x90000}
	for _, tc := range []struct {
		iova    uint64
		n       int
		prp2    uint64
		listLen int
	}{
		{0x10000, 512, 0, 0},
		{0x10ffc, 4, 0, 0},
		{0x10ffc, 8, 0x11000, 0},
		{0x10000, 8192, 0x11000, 0},
		{0x10200, 8192, 0x90000, 2},
		{0x10000, 2 << 20, 0x90000, 511},
		{0x10004, 2 << 20, 0x90000, 512},
	} {
		clear(list.Bytes)
		p1, p2 := buildPRP(Buffer{Bytes: make([]byte, tc.n), IOVA: tc.iova}, list)
		if p1 != tc.iova || p2 != tc.prp2 {
			t.Errorf("%#x+%d: prp1 %#x prp2 %#x", tc.iova, tc.n, p1, p2)
		}
		n := 0
		for i := 0; i < 512; i++ {
			e := binary.LittleEndian.Uint64(list.Bytes[8*i:])
			if e == 0 {
				break
			}
			if e%pageSize != 0 || e != (tc.iova&^(pageSize-1))+uint64(i+1)*pageSize {
				t.Errorf("%#x+%d: entry %d = %#x", tc.iova, tc.n, i, e)
			}
			n++
		}
		if n != tc.listLen {
			t.Errorf("%#x+%d: %d list entries, want %d", tc.iova, tc.n, n, tc.listLen)
		}
	}
}

// FuzzParseCompletion: any 16 bytes decode without panicking and the status
// renders.
func FuzzParseCompletion(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 0x03, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCompletion(b)
		if err != nil {
			if len(b) >= 16 {
				t.Fatal(err)
			}
			return
		}
		_ = c.Status.String()
		e := &StatusError{Op: "read", Status: c.Status}
		_ = e.Error()
		out := make([]byte, 16)
		dw3 := c.Marshal(out)
		binary.LittleEndian.PutUint32(out[12:], dw3)
		if c2, _ := ParseCompletion(out); c2 != c {
			t.Fatalf("round trip %+v != %+v", c2, c)
		}
	})
}

// FuzzParseIdentify: hostile Identify data gives errors, never panics, and
// an accepted namespace has a sane block size.
func FuzzParseIdentify(f *testing.F) {
	seed := make([]byte, IdentifySize)
	binary.LittleEndian.PutUint64(seed, 100)
	binary.LittleEndian.PutUint32(seed[128:], 9<<16)
	f.Add(seed)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 2*IdentifySize {
			return
		}
		if ci, err := ParseControllerInfo(b); err == nil {
			_ = ci.MaxTransfer(4096)
		}
		ni, err := ParseNamespaceInfo(1, b)
		if err == nil && (ni.BlockSize < 512 || ni.BlockSize > 65536 || ni.Size == 0) {
			t.Fatalf("accepted %+v", ni)
		}
		_ = parseNSIDList(b)
	})
}
