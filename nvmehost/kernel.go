package nvmehost

import (
	"path/filepath"
	"strconv"
)

// KernelIdentity is what the kernel's nvme driver publishes about a
// controller it drives (its Identify strings, under
// /sys/bus/pci/devices/BDF/nvme/nvmeN), so that a listing names the
// drives the host still uses without sending them a command.
type KernelIdentity struct {
	Name     string // "nvme0"
	Model    string
	Serial   string
	Firmware string
}

// KernelIdentity returns the identity the nvme driver publishes for the
// controller at bdf; ok is false when no driver-created controller is
// there (the function is on vfio-pci or unbound).
func (h Host) KernelIdentity(bdf string) (id KernelIdentity, ok bool) {
	ctrls, _ := filepath.Glob(filepath.Join(h.sys(), "bus", "pci", "devices", bdf, "nvme", "nvme[0-9]*"))
	if len(ctrls) == 0 {
		return KernelIdentity{}, false
	}
	dir := ctrls[0]
	return KernelIdentity{
		Name:     filepath.Base(dir),
		Model:    readTrim(filepath.Join(dir, "model")),
		Serial:   readTrim(filepath.Join(dir, "serial")),
		Firmware: readTrim(filepath.Join(dir, "firmware_rev")),
	}, true
}

// DiskGeometry returns a kernel disk's size in bytes and its logical block
// size, from /sys/block/NAME/size (always in 512-byte units) and
// queue/logical_block_size; zeros when sysfs does not say.
func (h Host) DiskGeometry(name string) (bytes int64, blockSize int) {
	dir := filepath.Join(h.sys(), "block", name)
	if n, err := strconv.ParseInt(readTrim(filepath.Join(dir, "size")), 10, 64); err == nil && n >= 0 {
		bytes = n * 512
	}
	if n, err := strconv.Atoi(readTrim(filepath.Join(dir, "queue", "logical_block_size"))); err == nil && n > 0 {
		blockSize = n
	}
	return bytes, blockSize
}
