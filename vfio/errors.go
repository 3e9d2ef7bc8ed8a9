package vfio

import (
	"errors"

	"github.com/strata-llm/strata/pci"
)

// Sentinel errors, tested with errors.Is; the wrapping error says which
// file, device or ioctl.
var (
	// ErrNoIOMMU means DMA cannot be isolated: no VFIO driver or type1/iommufd
	// backend, or the device has no IOMMU group (IOMMU off in firmware or on
	// the kernel command line). strata never falls back to no-IOMMU mode.
	// It is pci.ErrNoIOMMU, which the sysfs lookups return.
	ErrNoIOMMU = pci.ErrNoIOMMU
	// ErrNoDevice means the PCI device, its group or its VFIO node does not
	// exist (wrong BDF, or not bound to vfio-pci).
	// It is pci.ErrNoDevice, which the sysfs lookups return.
	ErrNoDevice = pci.ErrNoDevice
	// ErrNotSupported means the kernel lacks the feature (an extension, the
	// iommufd or cdev interface, hugepages, device reset).
	ErrNotSupported = errors.New("not supported by this kernel or device")
)
