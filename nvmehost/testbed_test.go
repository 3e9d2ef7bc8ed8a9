package nvmehost_test

import (
	"testing"
	"time"

	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/setup/testbed"
)

// TestTestbedReleaseClaim lists the guest's controllers, gives nvme1 to the
// kernel's nvme driver, sees its namespace appear as a disk, and claims
// it back for vfio-pci.
func TestTestbedReleaseClaim(t *testing.T) {
	g := testbed.Require(t)
	h := nvmehost.Host{}
	all, err := h.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		t.Logf("%s %04x:%04x driver=%s group=%d disks=%+v", c.BDF, c.Vendor, c.Device, c.Driver, c.IOMMUGroup, c.Disks)
	}
	if len(all) != g.Controllers() {
		t.Fatalf("%d NVMe controllers, want %d", len(all), g.Controllers())
	}
	if err := h.Release(g.NVMe1, ""); err != nil {
		t.Fatal(err)
	}
	var c nvmehost.Controller
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err = h.Controller(g.NVMe1); err != nil {
			t.Fatal(err)
		}
		if len(c.Disks) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("released: driver=%s disks=%+v users=%v", c.Driver, c.Disks, c.Users())
	if c.Driver != "nvme" || len(c.Disks) != 1 || c.Disks[0].NSID != 1 {
		t.Fatalf("after release: %+v", c)
	}
	prev, err := h.Claim(g.NVMe1)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ = h.Controller(g.NVMe1); c.Driver != "vfio-pci" || prev != "nvme" {
		t.Fatalf("after claim: driver %s (was %s)", c.Driver, prev)
	}
}
