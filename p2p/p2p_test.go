package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/nvmetest"
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

func TestParseResource(t *testing.T) {
	bars, err := p2p.ParseResource("0x00000000fe000000 0x00000000fe003fff 0x0000000000040200\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n0x0000000800000000 0x0000000803ffffff 0x000000000014220c\n")
	if err != nil || len(bars) != 3 {
		t.Fatal(bars, err)
	}
	if bars[0].Size() != 16384 || !bars[0].Memory() || bars[0].Prefetchable() || bars[1].Size() != 0 ||
		bars[2].Size() != 64<<20 || !bars[2].Prefetchable() {
		t.Errorf("%+v", bars)
	}
	for _, bad := range []string{"1 2", "0x10 0x5 0x200", "zz 1 2"} {
		if _, err := p2p.ParseResource(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// acsConfig builds a 4 KiB config space whose extended capability list
// holds AER at 0x100 and, if ctl >= 0, ACS at 0x148 with control ctl.
func acsConfig(ctl int) []byte {
	cfg := make([]byte, 4096)
	next := 0
	if ctl >= 0 {
		next = 0x148
		put32(cfg[0x148:], 0x000d|1<<16)
		cfg[0x148+6] = byte(ctl)
	}
	put32(cfg[0x100:], 0x0001|1<<16|uint32(next)<<20)
	return cfg
}

func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func TestACSControl(t *testing.T) {
	if ctl, ok := p2p.ACSControl(acsConfig(0x1d)); !ok || ctl != 0x1d {
		t.Errorf("%#x %v", ctl, ok)
	}
	if _, ok := p2p.ACSControl(acsConfig(-1)); ok {
		t.Error("ACS found where there is none")
	}
	if _, ok := p2p.ACSControl(make([]byte, 256)); ok {
		t.Error("ACS found in a short dump")
	}
	loop := make([]byte, 4096)
	put32(loop[0x100:], 0x0001|0x100<<20)
	if _, ok := p2p.ACSControl(loop); ok {
		t.Error("capability loop")
	}
}

// fakeSysfs builds a PCI tree: root port 00:01.0 (ACS with P2P redirect)
// above the NVMe 01:00.0, a GPU 02:00.0 below root port 00:02.0 (no
// ACS), an ivshmem 00:06.0 on the root bus, and an I/O-only device.
func fakeSysfs(t *testing.T) string {
	root := t.TempDir()
	mk := func(path string, files map[string]string) {
		dir := filepath.Join(root, "devices", path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	link := func(target, name string) {
		os.MkdirAll(filepath.Dir(name), 0o755)
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	dev := func(path, group, drv string, files map[string]string) {
		mk(path, files)
		bdf := filepath.Base(path)
		full := filepath.Join(root, "devices", path)
		link(full, filepath.Join(root, "bus/pci/devices", bdf))
		if group != "" {
			os.MkdirAll(filepath.Join(root, "kernel/iommu_groups", group), 0o755)
			link(filepath.Join(root, "kernel/iommu_groups", group), filepath.Join(full, "iommu_group"))
		}
		if drv != "" {
			os.MkdirAll(filepath.Join(root, "bus/pci/drivers", drv), 0o755)
			link(filepath.Join(root, "bus/pci/drivers", drv), filepath.Join(full, "driver"))
		}
	}
	memBAR := "0x00000000fe000000 0x00000000fe003fff 0x0000000000040200\n"
	dev("pci0000:00/0000:00:01.0", "1", "pcieport", map[string]string{"config": string(acsConfig(0x1d)), "resource": memBAR})
	dev("pci0000:00/0000:00:01.0/0000:01:00.0", "2", "vfio-pci", map[string]string{"resource": memBAR})
	dev("pci0000:00/0000:00:02.0", "3", "pcieport", map[string]string{"config": string(acsConfig(-1)), "resource": memBAR})
	dev("pci0000:00/0000:00:02.0/0000:02:00.0", "4", "nvidia", map[string]string{"resource": memBAR + memBAR + memBAR, "resource1": ""})
	dev("pci0000:00/0000:00:06.0", "5", "vfio-pci", map[string]string{"resource": memBAR + memBAR + memBAR})
	dev("pci0000:00/0000:00:07.0", "6", "vfio-pci", map[string]string{"resource": "0x000000000000c000 0x000000000000c01f 0x0000000000040101\n"})
	return root
}

func TestProbe(t *testing.T) {
	sys := fakeSysfs(t)
	r := p2p.Probe(p2p.ProbeOptions{Sysfs: sys, Proc: t.TempDir(), NVMe: "0000:01:00.0", MemlockLimit: -1,
		Peers: []p2p.Peer{{"0000:02:00.0", 1}, {"0000:00:06.0", 2}, {"0000:00:07.0", 0}, {"0000:09:00.0", 0}}})
	text := r.String()
	t.Log("\n" + text)
	if r.Group != 2 || r.Driver != "vfio-pci" || len(r.Routes) != 6 {
		t.Fatalf("%+v", r)
	}
	want := []struct {
		kind  p2p.Kind
		avail bool
		in    string
	}{
		{p2p.KindHostPinned, true, "RLIMIT_MEMLOCK unlimited"},
		{p2p.KindPeerBAR, true, "peer requests go up to the root complex"},
		{p2p.KindPeerBAR, true, "bridge 0000:00:01.0"},
		{p2p.KindPeerBAR, false, "not a memory BAR"},
		{p2p.KindPeerBAR, false, "no PCI device"},
		{p2p.KindDmaBuf, false, "not probed"},
	}
	for i, w := range want {
		rt := r.Routes[i]
		all := rt.Reason + " " + strings.Join(rt.Facts, " | ")
		if rt.Kind != w.kind || rt.Available != w.avail || !strings.Contains(all, w.in) {
			t.Errorf("route %d: %+v; want %v available=%v containing %q", i, rt, w.kind, w.avail, w.in)
		}
	}
	if !strings.Contains(strings.Join(r.Routes[1].Facts, " "), "no ACS capability") {
		t.Errorf("GPU path should report the ACS-less root port: %v", r.Routes[1].Facts)
	}
	// A controller without an IOMMU group, or with the kernel driver.
	r = p2p.Probe(p2p.ProbeOptions{Sysfs: sys, Proc: t.TempDir(), NVMe: "0000:02:00.0"})
	if r.Routes[0].Available || !strings.Contains(r.Routes[0].Reason, "bound to nvidia") {
		t.Errorf("%+v", r.Routes[0])
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0x1000 0x1fff 0x200\n", acsConfig(0x1d))
	f.Fuzz(func(t *testing.T, res string, cfg []byte) {
		if bars, err := p2p.ParseResource(res); err == nil {
			for _, b := range bars {
				_ = b.Size()
			}
		}
		p2p.ACSControl(cfg)
	})
}
