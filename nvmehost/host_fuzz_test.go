package nvmehost_test

import (
	"os"
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
	// One tree for the whole run (building one per input is most of the
	// cost); each input rewrites the files it fuzzes.
	r := nvmehosttest.New(f)
	d := r.Controller("0000:00:04.0", "nvme", "1")
	disk := r.Disk(filepath.Join(d, "nvme/nvme0/nvme0n1"), "259:0", 1)
	r.Partition(disk, 1, "259:1")
	r.Controller("0000:00:06.0", "vfio-pci", "3")
	files := func(mountinfo, swaps, diskDev, partDev, size, lbs string) map[string]string {
		return map[string]string{
			filepath.Join(r.Proc, "self/mountinfo"):         mountinfo,
			filepath.Join(r.Proc, "swaps"):                  swaps,
			filepath.Join(disk, "dev"):                      diskDev,
			filepath.Join(disk, "nvme0n1p1/dev"):            partDev,
			filepath.Join(disk, "size"):                     size,
			filepath.Join(disk, "queue/logical_block_size"): lbs,
		}
	}
	if err := os.MkdirAll(filepath.Join(disk, "queue"), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, mountinfo, swaps, diskDev, partDev, size, lbs string) {
		for path, body := range files(mountinfo, swaps, diskDev, partDev, size, lbs) {
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
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
