// Package topology reports, from sysfs, procfs and PCI config space, which
// routes an NVMe controller's DMA could take into memory the engine needs
// (pinned host memory, a peer device's BAR, a CUDA dma-buf) and why a route
// cannot exist: IOMMU groups, drivers, BAR sizes, the bridges between two
// devices and their ACS settings. It reads and changes nothing else, opens
// no device and maps nothing, so the unprivileged strata client (`strata
// setup check`) links it without the NVMe driver or VFIO. Package p2p
// builds the targets and admits them by self-test; it re-exports this
// package's names (p2p.Probe is Probe).
package topology
