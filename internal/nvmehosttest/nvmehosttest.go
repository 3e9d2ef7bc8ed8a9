package nvmehosttest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/pci"
)

// Tree is a fake /sys and /proc under one temporary directory. Its methods
// take absolute paths inside the tree (built from Sys and Proc) and fail
// the test on any error, so a fixture reads as a list of what exists.
type Tree struct {
	t    testing.TB
	Sys  string // the fake /sys
	Proc string // the fake /proc
}

// New returns a tree under t.TempDir() with no devices, nothing mounted
// and no swap: /proc/self/mountinfo is empty and /proc/swaps holds only its
// header line. A fixture overwrites them with Write.
func New(t testing.TB) *Tree {
	t.Helper()
	root := t.TempDir()
	r := &Tree{t: t, Sys: filepath.Join(root, "sys"), Proc: filepath.Join(root, "proc")}
	r.Write(filepath.Join(r.Proc, "self/mountinfo"), "")
	r.Write(filepath.Join(r.Proc, "swaps"), "Filename\tType\tSize\tUsed\tPriority\n")
	return r
}

// Host returns the nvmehost.Host that reads this tree.
func (r *Tree) Host() nvmehost.Host {
	return nvmehost.Host{Sysfs: pci.Sysfs{Root: r.Sys}, Proc: r.Proc}
}

// Mkdir creates the directory path and its parents.
func (r *Tree) Mkdir(path string) {
	r.t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		r.t.Fatal(err)
	}
}

// Write creates the file path, and its parents, holding body.
func (r *Tree) Write(path, body string) {
	r.t.Helper()
	r.Mkdir(filepath.Dir(path))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// Link creates the symbolic link name pointing at target, and name's
// parents, as sysfs links devices, drivers and groups.
func (r *Tree) Link(target, name string) {
	r.t.Helper()
	r.Mkdir(filepath.Dir(name))
	if err := os.Symlink(target, name); err != nil {
		r.t.Fatal(err)
	}
}

// Controller adds the NVMe PCI function bdf (class 0x010802, QEMU's vendor
// and device IDs 1b36:0010; a fixture may overwrite the vendor and device
// files) bound to driver, in IOMMU group group ("" for none), and returns
// its device directory, below which the kernel's nvme/nvmeN lives.
func (r *Tree) Controller(bdf, driver, group string) string {
	r.t.Helper()
	dir := filepath.Join(r.Sys, "devices/pci0000:00", bdf)
	r.Write(filepath.Join(dir, "vendor"), "0x1b36\n")
	r.Write(filepath.Join(dir, "device"), "0x0010\n")
	r.Write(filepath.Join(dir, "class"), "0x010802\n")
	r.Link(dir, filepath.Join(r.Sys, "bus/pci/devices", bdf))
	drv := filepath.Join(r.Sys, "bus/pci/drivers", driver)
	r.Mkdir(drv)
	r.Link(drv, filepath.Join(dir, "driver"))
	if group != "" {
		g := filepath.Join(r.Sys, "kernel/iommu_groups", group)
		r.Mkdir(g)
		r.Link(g, filepath.Join(dir, "iommu_group"))
	}
	return dir
}

// Disk adds the block device whose sysfs directory is dir (its name is
// dir's last element, e.g. nvme0n1) with device number dev ("259:0") and
// namespace ID nsid, linked from /sys/block, and returns dir.
func (r *Tree) Disk(dir, dev string, nsid int) string {
	r.t.Helper()
	r.Write(filepath.Join(dir, "dev"), dev+"\n")
	r.Write(filepath.Join(dir, "nsid"), strconv.Itoa(nsid)+"\n")
	r.Link(dir, filepath.Join(r.Sys, "block", filepath.Base(dir)))
	return dir
}

// Partition adds partition n of disk (a directory from Disk), named as
// the kernel names NVMe partitions (nvme0n1p1), with device number dev.
func (r *Tree) Partition(disk string, n int, dev string) {
	r.t.Helper()
	p := filepath.Join(disk, filepath.Base(disk)+"p"+strconv.Itoa(n))
	r.Write(filepath.Join(p, "partition"), strconv.Itoa(n)+"\n")
	r.Write(filepath.Join(p, "dev"), dev+"\n")
}
