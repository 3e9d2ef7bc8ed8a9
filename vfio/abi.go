package vfio

// This file declares the kernel ABI strata speaks: ioctl request numbers,
// flags and structure layouts, transcribed by hand from the UAPI headers
// linux/vfio.h and linux/iommufd.h of Linux 6.12 (Debian's linux-libc-dev
// 6.12.95-1~bpo12+1). golang.org/x/sys/unix declares none of them.
//
// Every number and layout here is checked against the headers by
// TestABIMatchesHeaders, which reads testdata/abi-6.12.txt: a table printed by
// a C program (testdata/abi.c, regenerated with testdata/gen-abi.sh) compiled
// against those headers. CI needs no headers; the table is committed.
//
// Both headers encode their requests with _IO(type, nr) from
// asm-generic/ioctl.h: no direction bits and no size, so the request number is
// type<<8 | nr. VFIO's type is ';' (0x3B) with commands from VFIO_BASE = 100;
// iommufd shares the type ';' and starts at IOMMUFD_CMD_BASE = 0x80.

const (
	vfioType = ';' // VFIO_TYPE, linux/vfio.h
	vfioBase = 100 // VFIO_BASE, linux/vfio.h

	// vfioAPIVersion is VFIO_API_VERSION (linux/vfio.h, unchanged since 3.6).
	vfioAPIVersion = 0
)

// VFIO ioctls, linux/vfio.h (Linux 6.12). The type1 IOMMU and the PCI hot
// reset commands share VFIO_BASE+12 and +13: they go to different fds.
// Each is _IO(';', nr) = ';'<<8 | nr.
const (
	ioctlGetAPIVersion         = vfioType<<8 | (vfioBase + 0)  // VFIO_GET_API_VERSION
	ioctlCheckExtension        = vfioType<<8 | (vfioBase + 1)  // VFIO_CHECK_EXTENSION
	ioctlSetIOMMU              = vfioType<<8 | (vfioBase + 2)  // VFIO_SET_IOMMU
	ioctlGroupGetStatus        = vfioType<<8 | (vfioBase + 3)  // VFIO_GROUP_GET_STATUS
	ioctlGroupSetContainer     = vfioType<<8 | (vfioBase + 4)  // VFIO_GROUP_SET_CONTAINER
	ioctlGroupUnsetContainer   = vfioType<<8 | (vfioBase + 5)  // VFIO_GROUP_UNSET_CONTAINER
	ioctlGroupGetDeviceFD      = vfioType<<8 | (vfioBase + 6)  // VFIO_GROUP_GET_DEVICE_FD
	ioctlDeviceGetInfo         = vfioType<<8 | (vfioBase + 7)  // VFIO_DEVICE_GET_INFO
	ioctlDeviceGetRegionInfo   = vfioType<<8 | (vfioBase + 8)  // VFIO_DEVICE_GET_REGION_INFO
	ioctlDeviceGetIRQInfo      = vfioType<<8 | (vfioBase + 9)  // VFIO_DEVICE_GET_IRQ_INFO
	ioctlDeviceSetIRQs         = vfioType<<8 | (vfioBase + 10) // VFIO_DEVICE_SET_IRQS
	ioctlDeviceReset           = vfioType<<8 | (vfioBase + 11) // VFIO_DEVICE_RESET
	ioctlIOMMUGetInfo          = vfioType<<8 | (vfioBase + 12) // VFIO_IOMMU_GET_INFO
	ioctlIOMMUMapDMA           = vfioType<<8 | (vfioBase + 13) // VFIO_IOMMU_MAP_DMA
	ioctlIOMMUUnmapDMA         = vfioType<<8 | (vfioBase + 14) // VFIO_IOMMU_UNMAP_DMA
	ioctlDeviceBindIOMMUFD     = vfioType<<8 | (vfioBase + 18) // VFIO_DEVICE_BIND_IOMMUFD (6.6+)
	ioctlDeviceAttachIOMMUFDPT = vfioType<<8 | (vfioBase + 19) // VFIO_DEVICE_ATTACH_IOMMUFD_PT (6.6+)
	ioctlDeviceDetachIOMMUFDPT = vfioType<<8 | (vfioBase + 20) // VFIO_DEVICE_DETACH_IOMMUFD_PT (6.6+)
	ioctlIOMMUFDDestroy        = vfioType<<8 | (0x80)          // IOMMU_DESTROY, linux/iommufd.h
	ioctlIOMMUFDIOASAlloc      = vfioType<<8 | (0x81)          // IOMMU_IOAS_ALLOC
	ioctlIOMMUFDIOASIOVARanges = vfioType<<8 | (0x84)          // IOMMU_IOAS_IOVA_RANGES
	ioctlIOMMUFDIOASMap        = vfioType<<8 | (0x85)          // IOMMU_IOAS_MAP
	ioctlIOMMUFDIOASUnmap      = vfioType<<8 | (0x86)          // IOMMU_IOAS_UNMAP
)

// Extension is an argument of VFIO_CHECK_EXTENSION / VFIO_SET_IOMMU
// (linux/vfio.h, Linux 6.12).
type Extension uint32

// The extensions strata asks about. Type1v2 is the IOMMU model strata uses:
// it unmaps exactly what was mapped and reports the valid IOVA ranges.
const (
	ExtType1       Extension = 1  // VFIO_TYPE1_IOMMU
	ExtType1v2     Extension = 3  // VFIO_TYPE1v2_IOMMU
	ExtDMACoherent Extension = 4  // VFIO_DMA_CC_IOMMU: DMA is cache coherent
	ExtNoIOMMU     Extension = 8  // VFIO_NOIOMMU_IOMMU: unsafe mode, never used by strata
	ExtUnmapAll    Extension = 9  // VFIO_UNMAP_ALL
	ExtUpdateVaddr Extension = 10 // VFIO_UPDATE_VADDR
)

// Flags and capability IDs, linux/vfio.h (Linux 6.12).
const (
	groupFlagsViable       = 1 << 0 // VFIO_GROUP_FLAGS_VIABLE
	groupFlagsContainerSet = 1 << 1 // VFIO_GROUP_FLAGS_CONTAINER_SET

	deviceFlagsReset = 1 << 0 // VFIO_DEVICE_FLAGS_RESET
	deviceFlagsPCI   = 1 << 1 // VFIO_DEVICE_FLAGS_PCI
	deviceFlagsCaps  = 1 << 7 // VFIO_DEVICE_FLAGS_CAPS

	regionFlagRead  = 1 << 0 // VFIO_REGION_INFO_FLAG_READ
	regionFlagWrite = 1 << 1 // VFIO_REGION_INFO_FLAG_WRITE
	regionFlagMmap  = 1 << 2 // VFIO_REGION_INFO_FLAG_MMAP
	regionFlagCaps  = 1 << 3 // VFIO_REGION_INFO_FLAG_CAPS

	regionCapSparseMmap   = 1 // VFIO_REGION_INFO_CAP_SPARSE_MMAP
	regionCapType         = 2 // VFIO_REGION_INFO_CAP_TYPE
	regionCapMSIXMappable = 3 // VFIO_REGION_INFO_CAP_MSIX_MAPPABLE

	irqInfoEventFD    = 1 << 0 // VFIO_IRQ_INFO_EVENTFD
	irqInfoMaskable   = 1 << 1 // VFIO_IRQ_INFO_MASKABLE
	irqInfoAutomasked = 1 << 2 // VFIO_IRQ_INFO_AUTOMASKED
	irqInfoNoResize   = 1 << 3 // VFIO_IRQ_INFO_NORESIZE

	irqSetDataNone      = 1 << 0 // VFIO_IRQ_SET_DATA_NONE
	irqSetDataBool      = 1 << 1 // VFIO_IRQ_SET_DATA_BOOL
	irqSetDataEventFD   = 1 << 2 // VFIO_IRQ_SET_DATA_EVENTFD
	irqSetActionMask    = 1 << 3 // VFIO_IRQ_SET_ACTION_MASK
	irqSetActionUnmask  = 1 << 4 // VFIO_IRQ_SET_ACTION_UNMASK
	irqSetActionTrigger = 1 << 5 // VFIO_IRQ_SET_ACTION_TRIGGER

	iommuInfoPgsizes = 1 << 0 // VFIO_IOMMU_INFO_PGSIZES
	iommuInfoCaps    = 1 << 1 // VFIO_IOMMU_INFO_CAPS

	iommuCapIOVARange = 1 // VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE
	iommuCapMigration = 2 // VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION
	iommuCapDMAAvail  = 3 // VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL

	dmaMapFlagRead  = 1 << 0 // VFIO_DMA_MAP_FLAG_READ
	dmaMapFlagWrite = 1 << 1 // VFIO_DMA_MAP_FLAG_WRITE

	dmaUnmapFlagAll = 1 << 1 // VFIO_DMA_UNMAP_FLAG_ALL

	// iommufd, linux/iommufd.h (Linux 6.12): enum iommufd_ioas_map_flags.
	ioasMapFixedIOVA = 1 << 0 // IOMMU_IOAS_MAP_FIXED_IOVA
	ioasMapWriteable = 1 << 1 // IOMMU_IOAS_MAP_WRITEABLE
	ioasMapReadable  = 1 << 2 // IOMMU_IOAS_MAP_READABLE
)

// PCI region and interrupt indexes of vfio-pci (enum in linux/vfio.h).
const (
	RegionBAR0   = 0 // VFIO_PCI_BAR0_REGION_INDEX; BAR1..BAR5 follow
	RegionROM    = 6 // VFIO_PCI_ROM_REGION_INDEX
	RegionConfig = 7 // VFIO_PCI_CONFIG_REGION_INDEX
	RegionVGA    = 8 // VFIO_PCI_VGA_REGION_INDEX

	IRQIntx = 0 // VFIO_PCI_INTX_IRQ_INDEX
	IRQMSI  = 1 // VFIO_PCI_MSI_IRQ_INDEX
	IRQMSIX = 2 // VFIO_PCI_MSIX_IRQ_INDEX
	IRQErr  = 3 // VFIO_PCI_ERR_IRQ_INDEX
	IRQReq  = 4 // VFIO_PCI_REQ_IRQ_INDEX
)

// capHeaderSize is sizeof(struct vfio_info_cap_header): u16 id, u16 version,
// u32 next.
const capHeaderSize = 8

// struct vfio_group_status (linux/vfio.h).
type groupStatus struct {
	Argsz uint32
	Flags uint32
}

// struct vfio_device_info (linux/vfio.h, 6.12 layout with cap_offset).
type deviceInfo struct {
	Argsz      uint32
	Flags      uint32
	NumRegions uint32
	NumIRQs    uint32
	CapOffset  uint32
	Pad        uint32
}

// struct vfio_region_info (linux/vfio.h).
type regionInfo struct {
	Argsz     uint32
	Flags     uint32
	Index     uint32
	CapOffset uint32
	Size      uint64
	Offset    uint64
}

// struct vfio_irq_info (linux/vfio.h).
type irqInfo struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Count uint32
}

// struct vfio_irq_set (linux/vfio.h) without its flexible data[] tail.
type irqSet struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Start uint32
	Count uint32
}

// struct vfio_iommu_type1_info (linux/vfio.h) without the capability chain
// that follows it when argsz is large enough.
type iommuType1Info struct {
	Argsz      uint32
	Flags      uint32
	IOVAPgsize uint64
	CapOffset  uint32
	Pad        uint32
}

// struct vfio_iommu_type1_dma_map (linux/vfio.h).
type dmaMap struct {
	Argsz uint32
	Flags uint32
	Vaddr uint64
	IOVA  uint64
	Size  uint64
}

// struct vfio_iommu_type1_dma_unmap (linux/vfio.h) without data[].
type dmaUnmap struct {
	Argsz uint32
	Flags uint32
	IOVA  uint64
	Size  uint64
}

// struct vfio_device_bind_iommufd (linux/vfio.h, 6.6+; 6.12 layout).
type deviceBindIOMMUFD struct {
	Argsz    uint32
	Flags    uint32
	IOMMUFD  int32
	OutDevID uint32
}

// struct vfio_device_attach_iommufd_pt (linux/vfio.h, 6.6+; 6.12 layout,
// before the pasid field of later kernels: argsz tells the kernel which).
type deviceAttachIOMMUFDPT struct {
	Argsz uint32
	Flags uint32
	PtID  uint32
}

// struct vfio_device_detach_iommufd_pt (linux/vfio.h, 6.6+; 6.12 layout).
type deviceDetachIOMMUFDPT struct {
	Argsz uint32
	Flags uint32
}

// struct iommu_destroy (linux/iommufd.h).
type iommuDestroy struct {
	Size uint32
	ID   uint32
}

// struct iommu_ioas_alloc (linux/iommufd.h).
type iommuIOASAlloc struct {
	Size      uint32
	Flags     uint32
	OutIOASID uint32
}

// struct iommu_ioas_iova_ranges (linux/iommufd.h).
type iommuIOASIOVARanges struct {
	Size             uint32
	IOASID           uint32
	NumIOVAs         uint32
	Reserved         uint32
	AllowedIOVAs     uint64 // user pointer to []iommuIOVARange
	OutIOVAAlignment uint64
}

// struct iommu_iova_range (linux/iommufd.h): last is inclusive.
type iommuIOVARange struct {
	Start uint64
	Last  uint64
}

// struct iommu_ioas_map (linux/iommufd.h).
type iommuIOASMap struct {
	Size     uint32
	Flags    uint32
	IOASID   uint32
	Reserved uint32
	UserVA   uint64
	Length   uint64
	IOVA     uint64
}

// struct iommu_ioas_unmap (linux/iommufd.h).
type iommuIOASUnmap struct {
	Size   uint32
	IOASID uint32
	IOVA   uint64
	Length uint64
}
