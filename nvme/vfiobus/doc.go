// Package vfiobus connects the NVMe driver to a real controller through
// VFIO: BAR0 becomes nvme.MMIO, buffers from AllocDMA mapped into the
// device's IOMMU domain become nvme.DMA, and MSI-X eventfds become
// nvme.Interrupts. It is the only place where package nvme meets package
// vfio, so that the driver itself stays testable against internal/nvmetest.
package vfiobus
