// Package vfio owns every VFIO and iommufd ioctl strata issues, so that the
// NVMe driver (nvme/) and the peer-to-peer DMA targets (p2p/) can drive PCI
// devices from userspace with the IOMMU on: every DMA a device makes goes to
// an IOVA this package mapped, never to a raw physical address.
//
// # Layers
//
//   - Container, Group, Device: the type1v2 group/container interface
//     (/dev/vfio/vfio, /dev/vfio/N). Container checks the API version and
//     the type1v2 extension, sets the IOMMU, parses VFIO_IOMMU_GET_INFO's
//     capability chain (page sizes, valid IOVA ranges, DMA budget) and maps
//     buffers at IOVAs its Allocator picks from those ranges, with
//     accounting; Close unmaps whatever is left.
//   - IOMMUFD, IOAS, OpenCdev: the iommufd + VFIO cdev interface (Linux 6.6+)
//     behind the same DMAMapper API. Debian 12's kernels lack it; Probe says
//     so at run time.
//   - Domain: one DMA address space over either backend and the devices in
//     it — what drivers use.
//   - Sysfs: bind a PCI function to vfio-pci (driver_override, unbind,
//     drivers_probe) and back, find its IOMMU group. It is package pci's,
//     plain sysfs file I/O, so that host checks can use it without linking
//     this package.
//   - MMIO, EventFD, AllocDMA: register access, interrupts, DMA memory.
//
// All ioctls go through one function (ioctl in sys_linux.go) whose doc
// states the pointer rule. Numbers and structures are declared in abi.go
// from linux/vfio.h and linux/iommufd.h (Linux 6.12) and checked against the
// headers by a test; golang.org/x/sys/unix declares none of them.
//
// # Contract with nvme/ and p2p/
//
// What the NVMe driver needs from the platform, and where it is:
//
//	(a) BAR0 as an MMIO region:   bar, _ := dev.MapRegion(vfio.RegionBAR0); regs, _ := vfio.NewMMIO(bar)
//	    32-bit loads/stores only (regs.Read32/Write32; 64-bit registers split
//	    low word first by Read64/Write64), each a non-inlined function, no
//	    sync/atomic on MMIO.
//	(b) DMA buffers:              buf, _ := vfio.AllocDMA(n, huge); iova, _ := dom.MapDMA(buf); dom.UnmapDMA(iova)
//	    IOVAs come from the IOVA_RANGE capability (never IOVA = VA, never
//	    IOVA 0); buffers must be page-aligned whole pages. A VM_PFNMAP region
//	    (another device's BAR from MapRegion, or gdrdrv's mapping) maps the
//	    same way on type1 — p2p's PeerBAR. Read-only or write-only mappings:
//	    dom.Map(buf, vfio.MapOptions{Perm: vfio.PermRead}).
//	(c) MSI-X:                    efds, _ := dev.EnableMSIX(n); efds[i].Wait(timeout)
//	(d) config space:             dev.EnableDMA() sets Memory Space, Bus Master and INTx Disable
//	    (vfio-pci leaves Bus Master off); ReadConfig16/32, WriteConfig16.
//	(e) reset:                    dev.Reset() (VFIO_DEVICE_RESET)
//	binding:                      vfio.Sysfs{}.BindVFIO(bdf) / .Bind(bdf, prevDriver)
//
// A Domain is not tied to one device: open the NVMe and the ivshmem (or GPU)
// device in the same Domain and a buffer or BAR mapped once is reachable by
// both at the same IOVA. Close order: devices, then mappings, then groups
// and container; Domain.Close does it.
//
// Errors wrap ErrNoIOMMU, ErrNoDevice or ErrNotSupported where those apply.
// The package logs nothing; callers log the errors it returns.
package vfio
