package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/p2p"
)

var ctx = context.Background()

func open(t *testing.T, o nvmetest.Options) (*nvmetest.Controller, *nvme.Controller) {
	t.Helper()
	sw := nvmetest.New(o)
	c, err := nvme.Open(ctx, nvme.Config{MMIO: sw, DMA: sw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx); sw.Close() })
	return sw, c
}

func TestHostPinnedAdmission(t *testing.T) {
	t.Parallel()
	sw, c := open(t, nvmetest.Options{})
	h, err := p2p.NewHostPinned(sw, 64<<10, p2p.HostOptions{})
	if err != nil {
		t.Skipf("cannot lock host memory here: %v", err)
	}
	defer h.Close()
	if _, err := h.Buffer(); !errors.Is(err, p2p.ErrNotAdmitted) {
		t.Fatalf("unadmitted buffer: %v", err)
	}
	before := bytes.Clone(sw.Data(1)[100*512 : 116*512])
	res, err := p2p.SelfTest(ctx, c, sw, p2p.Scratch{NSID: 1, LBA: 100, Blocks: 16, Write: true}, h)
	if err != nil || !res.OK {
		t.Fatalf("self-test: %+v %v", res, err)
	}
	if !bytes.Equal(before, sw.Data(1)[100*512:116*512]) {
		t.Error("self-test did not restore the scratch blocks")
	}
	b, err := h.Buffer()
	if err != nil || b.Len() != 64<<10 {
		t.Fatalf("admitted buffer: %v", err)
	}
	// The admitted target receives reads.
	copy(sw.Data(1)[0:], "hello, pinned")
	if err := c.ReadBlocks(ctx, 1, 0, b.Slice(0, 512)); err != nil || !bytes.HasPrefix(h.Bytes(), []byte("hello, pinned")) {
		t.Fatalf("read into target: %v", err)
	}
}

// lyingMapper hands out IOVAs it never maps: DMAs to them hit nothing,
// like a route the fabric cannot carry.
type lyingMapper struct{}

func (lyingMapper) MapDMA(b []byte) (uint64, error) { return 0x7700_0000, nil }
func (lyingMapper) UnmapDMA(uint64) error           { return nil }

func TestSelfTestCatchesDroppedDMA(t *testing.T) {
	t.Parallel()
	// DropUnmapped: the controller reports success and moves nothing, as
	// QEMU does behind an IOMMU that blocked the DMA.
	sw, c := open(t, nvmetest.Options{DropUnmapped: true})
	bar := make([]byte, 8192)
	p, err := p2p.NewPeerBAR(lyingMapper{}, bar, "fake/bar2", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p2p.SelfTest(ctx, c, sw, p2p.Scratch{NSID: 1, LBA: 8, Blocks: 8, Write: true}, p)
	if err == nil || res.OK || !strings.Contains(res.Reason, "no byte arrived") {
		t.Fatalf("dropped DMA admitted: %+v %v", res, err)
	}
	if _, err := p.Buffer(); !errors.Is(err, p2p.ErrNotAdmitted) {
		t.Errorf("buffer of a failed target: %v", err)
	}
	if len(sw.Faults()) == 0 {
		t.Error("controller saw no fault")
	}
}

func TestPeerBARAdmission(t *testing.T) {
	t.Parallel()
	sw, c := open(t, nvmetest.Options{})
	bar := make([]byte, 16384)
	p, err := p2p.NewPeerBAR(sw, bar, "0000:00:06.0/bar2", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Without Write the bytes already there are used; uniform ones are refused.
	if _, err := p2p.SelfTest(ctx, c, sw, p2p.Scratch{NSID: 1, LBA: 0, Blocks: 4}, p); err == nil {
		t.Fatal("self-test over zero blocks passed")
	}
	for i := range sw.Data(1)[:2048] {
		sw.Data(1)[i] = byte(i * 7)
	}
	if res, err := p2p.SelfTest(ctx, c, sw, p2p.Scratch{NSID: 1, LBA: 0, Blocks: 4}, p); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	if !bytes.Equal(bar[:2048], sw.Data(1)[:2048]) {
		t.Error("BAR does not hold the blocks")
	}
	if _, err := p2p.NewPeerBAR(sw, make([]byte, 100), "odd", nil); err == nil {
		t.Error("partial-page BAR accepted")
	}
}
