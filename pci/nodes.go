package pci

// The device nodes through which a device bound to vfio-pci is used. They
// are declared here, beside the binding, so that a host check can tell
// whether VFIO is usable without linking package vfio, which opens them.
const (
	// VFIOContainerPath is the VFIO container node (legacy group/container API).
	VFIOContainerPath = "/dev/vfio/vfio"
	// IOMMUFDPath is the iommufd node (Linux 6.6+ with CONFIG_IOMMUFD).
	IOMMUFDPath = "/dev/iommu"
)
