package setup

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/pci"
	"github.com/strata-llm/strata/setup/testbed"
)

// TestCheckThisHost runs the real checks on the machine the test runs on
// and holds the verdicts to facts read here independently.
func TestCheckThisHost(t *testing.T) {
	rep := Check(Options{})
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", text.String())

	rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if rep.Kernel != strings.TrimSpace(string(rel)) {
		t.Errorf("kernel %q, /proc says %q", rep.Kernel, rel)
	}
	for _, r := range rep.Results {
		if r.ID == "" || r.Summary == "" {
			t.Errorf("empty result %+v", r)
		}
		if r.Status != Pass && r.Status != Warn && r.Status != Fail {
			t.Errorf("%s: status %q", r.ID, r.Status)
		}
		if r.Status == Fail && r.Fix == "" {
			t.Errorf("%s fails without a fix", r.ID)
		}
	}
	groups, _ := os.ReadDir("/sys/kernel/iommu_groups")
	iommu, _ := rep.Find("iommu")
	if (len(groups) == 0) != (iommu.Status == Fail) {
		t.Errorf("%d IOMMU groups, but the iommu check says %s: %s", len(groups), iommu.Status, iommu.Summary)
	}
	_, e1 := os.Stat(pci.VFIOContainerPath)
	_, e2 := os.Stat(pci.IOMMUFDPath)
	if dev, _ := rep.Find("vfio-dev"); (e1 == nil || e2 == nil) != (dev.Status == Pass) {
		t.Errorf("vfio-dev says %s: %s", dev.Status, dev.Summary)
	}
	nvme, _ := pci.Sysfs{}.Devices(pci.ClassNVMe)
	if len(groups) == 0 || len(nvme) == 0 {
		if rep.Route.Kind != routeFile {
			t.Errorf("no IOMMU or no NVMe, yet route %q: %s", rep.Route.Kind, rep.Route.Why)
		}
	}
	if rep.Route.Why == "" {
		t.Error("route without a reason")
	}
}

// TestCheckGuest runs in the VM test-bed (intel_iommu=on, vfio-pci loaded,
// two NVMe controllers on vfio-pci, no GPU): the real checks must see the
// IOMMU translating, VFIO ready and both controllers alone in their groups,
// and plan the host-pinned route on the first controller. The IOMMU-off
// case would need a second boot; the fake trees cover it (testdata/hosts/off).
func TestCheckGuest(t *testing.T) {
	g := testbed.Require(t)
	rep := Check(Options{})
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	for id, want := range map[string]Status{
		"iommu": Pass, "vfio-modules": Pass, "vfio-dev": Pass, "memlock": Pass, "hugepages": Pass,
		"iommu-group " + g.NVMe0: Pass, "iommu-group " + g.NVMe1: Pass, "acs": Warn, "kernel-iommufd": Pass, "vfio-cdev": Warn,
	} {
		got, ok := rep.Find(id)
		if !ok || got.Status != want {
			t.Errorf("%s = %s (%s), want %s", id, got.Status, got.Summary, want)
		}
	}
	if r, _ := rep.Find("iommu"); !strings.Contains(r.Summary, "translated") {
		t.Errorf("iommu: %s", r.Summary)
	}
	if rep.Route.Kind != "host-pinned" || rep.Route.NVMe != g.NVMe0 {
		t.Errorf("route %s on %q (%s), want host-pinned on %s", rep.Route.Kind, rep.Route.NVMe, rep.Route.Why, g.NVMe0)
	}
}

// TestVFIOBindGuest hands the test-bed's second controller to the kernel's
// nvme driver and back with vfio-bind.sh, on a real kernel.
func TestVFIOBindGuest(t *testing.T) {
	g := testbed.Require(t)
	etc := t.TempDir()
	s := newScript(t, "vfio-bind.sh", vfioBindScript, "STRATA_ETC="+etc, "STRATA_MODPROBE=true",
		"STRATA_SYSTEMCTL=true", "STRATA_LIBDIR="+filepath.Join(etc, "lib"))
	sys := pci.Sysfs{}
	drv := func() string { d, _ := sys.Driver(g.NVMe1); return d }
	if d := drv(); d != "vfio-pci" {
		t.Fatalf("%s starts on %q", g.NVMe1, d)
	}
	t.Cleanup(func() {
		if drv() != "vfio-pci" {
			sys.BindVFIO(g.NVMe1)
		}
	})
	out, ok := s.run("unbind", g.NVMe1)
	t.Logf("unbind:\n%s", out)
	if !ok || drv() != "nvme" {
		t.Fatalf("unbind: ok=%v, driver now %q", ok, drv())
	}
	if out, ok := s.run("unbind", g.NVMe1); !ok || !strings.Contains(out, "not on vfio-pci (driver nvme)") {
		t.Errorf("second unbind is not a no-op: %v\n%s", ok, out)
	}
	out, ok = s.run("bind", g.NVMe1)
	t.Logf("bind:\n%s", out)
	if !ok || drv() != "vfio-pci" {
		t.Fatalf("bind: ok=%v, driver now %q", ok, drv())
	}
	if !strings.Contains(readOr(filepath.Join(etc, "udev/rules.d/70-strata-vfio.rules"), ""), `KERNEL=="`+g.NVMe1+`"`) {
		t.Error("no udev rule written")
	}
	if out, ok := s.run("bind", g.NVMe1); !ok || !strings.Contains(out, "already bound") || strings.Contains(out, "wrote") {
		t.Errorf("second bind is not a no-op: %v\n%s", ok, out)
	}
}
