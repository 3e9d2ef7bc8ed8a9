// Package vfio will own every VFIO and iommufd ioctl strata issues:
// containers, groups and devices over type1v2, DMA maps with an IOVA
// allocator over the kernel-reported ranges, BAR regions and MSI-X (issue 6).
// Not implemented yet; the directory fixes the design card's layout.
package vfio
