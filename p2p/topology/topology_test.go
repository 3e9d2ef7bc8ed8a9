package topology_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/p2p/topology"
)

func TestParseResource(t *testing.T) {
	t.Parallel()
	bars, err := topology.ParseResource("0x00000000fe000000 0x00000000fe003fff 0x0000000000040200\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n0x0000000800000000 0x0000000803ffffff 0x000000000014220c\n")
	if err != nil || len(bars) != 3 {
		t.Fatal(bars, err)
	}
	if bars[0].Size() != 16384 || !bars[0].Memory() || bars[0].Prefetchable() || bars[1].Size() != 0 ||
		bars[2].Size() != 64<<20 || !bars[2].Prefetchable() {
		t.Errorf("%+v", bars)
	}
	for _, bad := range []string{"1 2", "0x10 0x5 0x200", "zz 1 2"} {
		if _, err := topology.ParseResource(bad); err == nil {
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
	t.Parallel()
	if ctl, ok := topology.ACSControl(acsConfig(0x1d)); !ok || ctl != 0x1d {
		t.Errorf("%#x %v", ctl, ok)
	}
	if _, ok := topology.ACSControl(acsConfig(-1)); ok {
		t.Error("ACS found where there is none")
	}
	if _, ok := topology.ACSControl(make([]byte, 256)); ok {
		t.Error("ACS found in a short dump")
	}
	loop := make([]byte, 4096)
	put32(loop[0x100:], 0x0001|0x100<<20)
	if _, ok := topology.ACSControl(loop); ok {
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
	t.Parallel()
	sys := fakeSysfs(t)
	r := topology.Probe(topology.ProbeOptions{Sysfs: sys, Proc: t.TempDir(), NVMe: "0000:01:00.0", MemlockLimit: -1,
		Peers: []topology.Peer{{"0000:02:00.0", 1}, {"0000:00:06.0", 2}, {"0000:00:07.0", 0}, {"0000:09:00.0", 0}}})
	text := r.String()
	t.Log("\n" + text)
	if r.Group != 2 || r.Driver != "vfio-pci" || len(r.Routes) != 6 {
		t.Fatalf("%+v", r)
	}
	want := []struct {
		kind  topology.Kind
		avail bool
		in    string
	}{
		{topology.KindHostPinned, true, "RLIMIT_MEMLOCK unlimited"},
		{topology.KindPeerBAR, true, "peer requests go up to the root complex"},
		{topology.KindPeerBAR, true, "bridge 0000:00:01.0"},
		{topology.KindPeerBAR, false, "not a memory BAR"},
		{topology.KindPeerBAR, false, "no PCI device"},
		{topology.KindDmaBuf, false, "not probed"},
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
	r = topology.Probe(topology.ProbeOptions{Sysfs: sys, Proc: t.TempDir(), NVMe: "0000:02:00.0"})
	if r.Routes[0].Available || !strings.Contains(r.Routes[0].Reason, "bound to nvidia") {
		t.Errorf("%+v", r.Routes[0])
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0x1000 0x1fff 0x200\n", acsConfig(0x1d))
	f.Fuzz(func(t *testing.T, res string, cfg []byte) {
		if bars, err := topology.ParseResource(res); err == nil {
			for _, b := range bars {
				_ = b.Size()
			}
		}
		topology.ACSControl(cfg)
	})
}
