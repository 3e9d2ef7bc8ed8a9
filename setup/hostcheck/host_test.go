package hostcheck

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/pci"
	"github.com/strata-llm/strata/setup/testbed"
)

// TestCheckThisHost runs the real checks on the machine the test runs on
// and holds the verdicts to facts read here independently.
func TestCheckThisHost(t *testing.T) {
	t.Parallel()
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
	if (len(groups) == 0) != (iommu.Status != Pass) {
		t.Errorf("%d IOMMU groups, but the iommu check says %s: %s", len(groups), iommu.Status, iommu.Summary)
	}
	_, e1 := os.Stat(pci.VFIOContainerPath)
	_, e2 := os.Stat(pci.IOMMUFDPath)
	if dev, _ := rep.Find("vfio-dev"); (len(groups) > 0 && (e1 == nil || e2 == nil)) != (dev.Status == Pass) {
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
// verdicts are TestCheckGuestIOMMUOff's, in the test-bed's second boot.
func TestCheckGuest(t *testing.T) {
	t.Parallel()
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

// TestCheckGuestIOMMUOff runs in the test-bed's second boot: the same guest
// without an emulated IOMMU and with intel_iommu=off, VFIO modules not
// loaded, both NVMe controllers on the kernel's nvme driver (a stock host
// with VT-d off). The real checks must say the IOMMU is off, with the fix
// for intel_iommu=off, find no group for either controller and no VFIO
// device node, and fall back to the file route because VFIO cannot run.
// The facts are read here independently of the code under test.
func TestCheckGuestIOMMUOff(t *testing.T) {
	t.Parallel()
	g := testbed.RequireIOMMUOff(t)
	if groups, err := os.ReadDir("/sys/kernel/iommu_groups"); err != nil || len(groups) != 0 {
		t.Fatalf("test-bed is not IOMMU-off: %d IOMMU groups (%v)", len(groups), err)
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if !strings.Contains(" "+string(cmdline)+" ", " intel_iommu=off ") {
		t.Fatalf("kernel command line lacks intel_iommu=off: %s", cmdline)
	}
	sys := pci.Sysfs{}
	for _, bdf := range []string{g.NVMe0, g.NVMe1} {
		if d, err := sys.Driver(bdf); err != nil || d != "nvme" {
			t.Fatalf("%s on driver %q (%v), want the kernel's nvme", bdf, d, err)
		}
	}

	rep := Check(Options{})
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	for id, want := range map[string]Status{
		"iommu": Fail, "vfio-dev": Fail, "vfio-modules": Warn,
		"iommu-group " + g.NVMe0: Fail, "iommu-group " + g.NVMe1: Fail,
	} {
		got, ok := rep.Find(id)
		if !ok || got.Status != want {
			t.Errorf("%s = %s (%s), want %s", id, got.Status, got.Summary, want)
		}
		if ok && got.Status == Fail && got.Fix == "" {
			t.Errorf("%s fails without a fix", id)
		}
	}
	iommu, _ := rep.Find("iommu")
	details := strings.Join(iommu.Details, "\n")
	for _, want := range []string{"groups: 0", "intel_iommu=off"} {
		if !strings.Contains(details, want) {
			t.Errorf("iommu details lack %q:\n%s", want, details)
		}
	}
	// run.sh gives this boot an Intel CPU vendor, so the fix is the one for
	// a command line that turned VT-d off.
	if !strings.Contains(iommu.Summary, "IOMMU off") || !strings.Contains(iommu.Fix, "replace intel_iommu=off") {
		t.Errorf("iommu: %s; fix: %s", iommu.Summary, iommu.Fix)
	}
	if r, _ := rep.Find("iommu-group " + g.NVMe0); !strings.Contains(r.Summary, "no IOMMU group") {
		t.Errorf("iommu-group %s: %s", g.NVMe0, r.Summary)
	}
	if r, _ := rep.Find("vfio-modules"); !strings.Contains(r.Summary, "not loaded") {
		t.Errorf("vfio-modules: %s", r.Summary)
	}
	if rep.Route.Kind != routeFile || rep.Route.NVMe != "" || !strings.Contains(rep.Route.Why, "iommu:") {
		t.Errorf("route %s on %q (%s), want file because of the iommu", rep.Route.Kind, rep.Route.NVMe, rep.Route.Why)
	}
	lost := strings.Join(rep.Route.NotChosen, "\n")
	for _, want := range []string{"host-pinned: needs VFIO", "peer-bar: needs VFIO"} {
		if !strings.Contains(lost, want) {
			t.Errorf("route's lost alternatives lack %q:\n%s", want, lost)
		}
	}
	if rep.Worst() != Fail {
		t.Errorf("worst %s, want fail", rep.Worst())
	}
	// What --json prints carries the same verdicts.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if r, _ := back.Find("iommu"); r.Status != Fail || back.Route.Kind != routeFile {
		t.Errorf("JSON round trip: iommu %s, route %s", r.Status, back.Route.Kind)
	}
}
