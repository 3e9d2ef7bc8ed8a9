package nvmehost_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/nvmehosttest"
	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/pci"
)

// fakeHost builds sysfs and procfs trees with four NVMe controllers:
// 04.0 kernel-bound with a mounted partition and a swap partition,
// 05.0 kernel-bound with native multipath and LVM on top, 06.0 already on
// vfio-pci, 07.0 kernel-bound, idle, but without an IOMMU group.
func fakeHost(t *testing.T) nvmehost.Host {
	t.Helper()
	r := nvmehosttest.New(t)
	// 04.0: nvme0n1 with p1 mounted on /boot and p2 as swap.
	d0 := r.Controller("0000:00:04.0", "nvme", "1")
	disk := r.Disk(filepath.Join(d0, "nvme/nvme0/nvme0n1"), "259:0", 1)
	r.Partition(disk, 1, "259:1")
	r.Partition(disk, 2, "259:2")
	// 05.0: multipath head nvme1n1 in nvme-subsys1, held by dm-0.
	d1 := r.Controller("0000:00:05.0", "nvme", "2")
	r.Mkdir(filepath.Join(d1, "nvme/nvme1"))
	sub := filepath.Join(r.Sys, "devices/virtual/nvme-subsystem/nvme-subsys1")
	r.Link(filepath.Join(d1, "nvme/nvme1"), filepath.Join(sub, "nvme1"))
	head := r.Disk(filepath.Join(sub, "nvme1n1"), "259:3", 1)
	r.Mkdir(filepath.Join(head, "holders/dm-0"))
	r.Controller("0000:00:06.0", "vfio-pci", "3")
	r.Controller("0000:00:07.0", "nvme", "")
	r.Write(filepath.Join(r.Proc, "self/mountinfo"), "22 1 259:1 / /boot rw,relatime - ext4 /dev/nvme0n1p1 rw\n23 1 0:21 / /proc rw - proc proc rw\n")
	r.Write(filepath.Join(r.Proc, "swaps"), "Filename\tType\tSize\tUsed\tPriority\n/dev/nvme0n1p2 partition 1000 0 -2\n")
	return r.Host()
}

func TestListAndClaim(t *testing.T) {
	t.Parallel()
	h := fakeHost(t)
	all, err := h.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("%d controllers", len(all))
	}
	c0 := all[0]
	if c0.BDF != "0000:00:04.0" || c0.Driver != "nvme" || c0.IOMMUGroup != 1 || len(c0.Disks) != 1 ||
		c0.Disks[0].NSID != 1 || len(c0.Disks[0].Partitions) != 2 {
		t.Fatalf("%+v", c0)
	}
	for _, tc := range []struct {
		bdf  string
		want error
		text string
	}{
		{"0000:00:04.0", nvmehost.ErrInUse, "mounted: /dev/nvme0n1p1 on /boot; swap: /dev/nvme0n1p2"},
		{"00:05.0", nvmehost.ErrInUse, "nvme1n1 is held by dm-0"},
		{"0000:00:06.0", nil, ""},
		{"0000:00:07.0", pci.ErrNoIOMMU, "no IOMMU group"},
		{"0000:00:09.0", pci.ErrNoDevice, ""},
	} {
		_, err := h.Claim(tc.bdf)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) || err != nil && !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Claim(%s) = %v, want %v containing %q", tc.bdf, err, tc.want, tc.text)
		}
		// Release (an unbind) refuses what Claim refuses for the host's use,
		// with the same report, and leaves the driver alone.
		if errors.Is(tc.want, nvmehost.ErrInUse) {
			rerr := h.Release(tc.bdf, "")
			if !errors.Is(rerr, nvmehost.ErrInUse) || err == nil || rerr.Error() != err.Error() {
				t.Errorf("Release(%s) = %v, want Claim's %v", tc.bdf, rerr, err)
			}
			if drv, _ := h.Sysfs.Driver(tc.bdf); drv != "nvme" {
				t.Errorf("%s: driver %q after a refused release", tc.bdf, drv)
			}
		}
	}
}
