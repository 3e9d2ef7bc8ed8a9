package nvmehosttest_test

import (
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/internal/nvmehosttest"
)

// TestTreeReadsAsHost checks that nvmehost reads what the builders write:
// the controller's driver, IOMMU group and IDs, its disk and partitions.
func TestTreeReadsAsHost(t *testing.T) {
	t.Parallel()
	r := nvmehosttest.New(t)
	d := r.Controller("0000:00:04.0", "nvme", "7")
	disk := r.Disk(filepath.Join(d, "nvme/nvme0/nvme0n1"), "259:0", 3)
	r.Partition(disk, 1, "259:1")
	r.Partition(disk, 2, "259:2")
	r.Controller("0000:00:05.0", "vfio-pci", "")
	all, err := r.Host().List()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("%d controllers: %+v", len(all), all)
	}
	c := all[0]
	if c.BDF != "0000:00:04.0" || c.Driver != "nvme" || c.IOMMUGroup != 7 || c.Vendor != 0x1b36 || c.Device != 0x0010 || c.Class != 0x010802 ||
		len(c.Disks) != 1 || c.Disks[0].Name != "nvme0n1" || c.Disks[0].NSID != 3 || len(c.Disks[0].Partitions) != 2 {
		t.Fatalf("%+v", c)
	}
	if c := all[1]; c.BDF != "0000:00:05.0" || c.Driver != "vfio-pci" || c.IOMMUGroup != -1 {
		t.Fatalf("%+v", c)
	}
}
