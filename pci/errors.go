package pci

import "errors"

// Sentinel errors, tested with errors.Is; the wrapping error says which
// device or file. Package vfio re-exports them (vfio.ErrNoIOMMU and
// vfio.ErrNoDevice are these values), so a caller checks one sentinel
// whichever layer the error came from.
var (
	// ErrNoIOMMU means DMA cannot be isolated: no VFIO driver or type1/iommufd
	// backend, or the device has no IOMMU group (IOMMU off in firmware or on
	// the kernel command line). strata never falls back to no-IOMMU mode.
	ErrNoIOMMU = errors.New("no IOMMU available for VFIO")
	// ErrNoDevice means the PCI device, its group or its VFIO node does not
	// exist (wrong BDF, or not bound to vfio-pci).
	ErrNoDevice = errors.New("no such VFIO device")
)
