package nvmehost_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/pci"
)

// fakeHost builds sysfs and procfs trees with four NVMe controllers:
// 04.0 kernel-bound with a mounted partition and a swap partition,
// 05.0 kernel-bound with native multipath and LVM on top, 06.0 already on
// vfio-pci, 07.0 kernel-bound, idle, but without an IOMMU group.
func fakeHost(t *testing.T) nvmehost.Host {
	root := t.TempDir()
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	write := func(path, body string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		os.MkdirAll(filepath.Dir(name), 0o755)
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	pciDev := func(bdf, drv string, group string) string {
		dir := filepath.Join(sys, "devices/pci0000:00", bdf)
		write(filepath.Join(dir, "vendor"), "0x1b36\n")
		write(filepath.Join(dir, "device"), "0x0010\n")
		write(filepath.Join(dir, "class"), "0x010802\n")
		link(dir, filepath.Join(sys, "bus/pci/devices", bdf))
		os.MkdirAll(filepath.Join(sys, "bus/pci/drivers", drv), 0o755)
		link(filepath.Join(sys, "bus/pci/drivers", drv), filepath.Join(dir, "driver"))
		if group != "" {
			os.MkdirAll(filepath.Join(sys, "kernel/iommu_groups", group), 0o755)
			link(filepath.Join(sys, "kernel/iommu_groups", group), filepath.Join(dir, "iommu_group"))
		}
		return dir
	}
	// 04.0: nvme0n1 with p1 mounted on /boot and p2 as swap.
	d0 := pciDev("0000:00:04.0", "nvme", "1")
	disk := filepath.Join(d0, "nvme/nvme0/nvme0n1")
	write(filepath.Join(disk, "dev"), "259:0\n")
	write(filepath.Join(disk, "nsid"), "1\n")
	write(filepath.Join(disk, "nvme0n1p1/partition"), "1\n")
	write(filepath.Join(disk, "nvme0n1p1/dev"), "259:1\n")
	write(filepath.Join(disk, "nvme0n1p2/partition"), "2\n")
	write(filepath.Join(disk, "nvme0n1p2/dev"), "259:2\n")
	link(disk, filepath.Join(sys, "block/nvme0n1"))
	// 05.0: multipath head nvme1n1 in nvme-subsys1, held by dm-0.
	d1 := pciDev("0000:00:05.0", "nvme", "2")
	os.MkdirAll(filepath.Join(d1, "nvme/nvme1"), 0o755)
	sub := filepath.Join(sys, "devices/virtual/nvme-subsystem/nvme-subsys1")
	link(filepath.Join(d1, "nvme/nvme1"), filepath.Join(sub, "nvme1"))
	write(filepath.Join(sub, "nvme1n1/dev"), "259:3\n")
	write(filepath.Join(sub, "nvme1n1/nsid"), "1\n")
	os.MkdirAll(filepath.Join(sub, "nvme1n1/holders/dm-0"), 0o755)
	link(filepath.Join(sub, "nvme1n1"), filepath.Join(sys, "block/nvme1n1"))
	pciDev("0000:00:06.0", "vfio-pci", "3")
	pciDev("0000:00:07.0", "nvme", "")
	write(filepath.Join(proc, "self/mountinfo"), "22 1 259:1 / /boot rw,relatime - ext4 /dev/nvme0n1p1 rw\n23 1 0:21 / /proc rw - proc proc rw\n")
	write(filepath.Join(proc, "swaps"), "Filename\tType\tSize\tUsed\tPriority\n/dev/nvme0n1p2 partition 1000 0 -2\n")
	return nvmehost.Host{Sysfs: pci.Sysfs{Root: sys}, Proc: proc}
}

func TestListAndClaim(t *testing.T) {
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
	}
}
