package nvmehost_test

import (
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/internal/nvmehosttest"
)

// FuzzHostFiles lists controllers over arbitrary /proc/self/mountinfo and
// /proc/swaps contents and sysfs attributes (a disk's device number, size
// and block size, a partition's device number): List never panics and
// reports only the tree's controllers.
func FuzzHostFiles(f *testing.F) {
	f.Add("22 1 259:1 / /boot rw,relatime - ext4 /dev/nvme0n1p1 rw\n", "Filename\tType\tSize\tUsed\tPriority\n/dev/nvme0n1p2 partition 1000 0 -2\n", "259:0", "259:1", "2048\n", "512\n")
	f.Add("", "", "", "", "", "")
	f.Add("x\n1 2 259:0 / / rw\n", "Filename\n/dev/nvme0n1 partition\n", "259:0", "bogus", "-1", "0")
	f.Fuzz(func(t *testing.T, mountinfo, swaps, diskDev, partDev, size, lbs string) {
		r := nvmehosttest.New(t)
		d := r.Controller("0000:00:04.0", "nvme", "1")
		disk := r.Disk(filepath.Join(d, "nvme/nvme0/nvme0n1"), diskDev, 1)
		r.Write(filepath.Join(disk, "size"), size)
		r.Write(filepath.Join(disk, "queue/logical_block_size"), lbs)
		r.Partition(disk, 1, partDev)
		r.Controller("0000:00:06.0", "vfio-pci", "3")
		r.Write(filepath.Join(r.Proc, "self/mountinfo"), mountinfo)
		r.Write(filepath.Join(r.Proc, "swaps"), swaps)
		cs, err := r.Host().List()
		if err != nil {
			return
		}
		for _, c := range cs {
			if c.BDF != "0000:00:04.0" && c.BDF != "0000:00:06.0" {
				t.Fatalf("a controller the tree does not have: %+v", c)
			}
			_ = c.Users()
		}
	})
}
