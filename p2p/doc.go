// Package p2p describes the memory an NVMe controller may DMA layer bytes
// into, so that storage reads land where the engine needs them without a
// CPU copy: HostPinned (locked host memory, later registered with CUDA as
// pinned memory by the engine) and PeerBAR (another PCI device's BAR, such
// as the test-bed's ivshmem BAR or gdrdrv's mapping of GPU memory, mapped
// into the NVMe's IOMMU domain).
//
// A route is only as good as the hardware between the two devices, which
// software cannot fully see (ACS redirection, root-complex peer-to-peer
// support, IOMMU behaviour). So every Target starts unadmitted: its Buffer
// is refused until SelfTest has made the controller READ a known pattern
// into it and the pattern was found there. Probe (package topology,
// re-exported here) reports, before any of that, which routes could exist
// and why not, from sysfs and PCI config space.
//
// Every DMA goes to an IOVA mapped in the controller's domain (the Mapper):
// the IOMMU stays on.
package p2p
