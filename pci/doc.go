// Package pci reads and changes PCI functions as Linux's sysfs shows them:
// their identity, class, driver and IOMMU group, and their binding to a
// driver (driver_override, unbind, drivers_probe). It is plain file I/O
// under a configurable root, with no ioctl, mmap or MMIO, so that the
// unprivileged strata client (`strata setup check`) can inspect a host
// without linking the VFIO layer or the NVMe driver. Package vfio builds
// on it (vfio.Sysfs is pci.Sysfs) and adds everything that opens a device.
//
// Every PCI address a caller passes goes through ParseBDF, so both the
// short ("bb:dd.f") and the canonical ("dddd:bb:dd.f") forms work.
package pci
