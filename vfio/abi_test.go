package vfio

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestABIMatchesHeaders compares every ioctl number, flag and struct layout
// in abi.go with testdata/abi-6.12.txt, which testdata/gen-abi.sh prints by
// compiling testdata/abi.c against the Linux 6.12 UAPI headers.
func TestABIMatchesHeaders(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/abi-6.12.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	header := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("bad value in %q", line)
		}
		header[name] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	ours := map[string]uint64{
		"VFIO_API_VERSION":              vfioAPIVersion,
		"VFIO_GET_API_VERSION":          ioctlGetAPIVersion,
		"VFIO_CHECK_EXTENSION":          ioctlCheckExtension,
		"VFIO_SET_IOMMU":                ioctlSetIOMMU,
		"VFIO_GROUP_GET_STATUS":         ioctlGroupGetStatus,
		"VFIO_GROUP_SET_CONTAINER":      ioctlGroupSetContainer,
		"VFIO_GROUP_UNSET_CONTAINER":    ioctlGroupUnsetContainer,
		"VFIO_GROUP_GET_DEVICE_FD":      ioctlGroupGetDeviceFD,
		"VFIO_DEVICE_GET_INFO":          ioctlDeviceGetInfo,
		"VFIO_DEVICE_GET_REGION_INFO":   ioctlDeviceGetRegionInfo,
		"VFIO_DEVICE_GET_IRQ_INFO":      ioctlDeviceGetIRQInfo,
		"VFIO_DEVICE_SET_IRQS":          ioctlDeviceSetIRQs,
		"VFIO_DEVICE_RESET":             ioctlDeviceReset,
		"VFIO_IOMMU_GET_INFO":           ioctlIOMMUGetInfo,
		"VFIO_IOMMU_MAP_DMA":            ioctlIOMMUMapDMA,
		"VFIO_IOMMU_UNMAP_DMA":          ioctlIOMMUUnmapDMA,
		"VFIO_DEVICE_BIND_IOMMUFD":      ioctlDeviceBindIOMMUFD,
		"VFIO_DEVICE_ATTACH_IOMMUFD_PT": ioctlDeviceAttachIOMMUFDPT,
		"VFIO_DEVICE_DETACH_IOMMUFD_PT": ioctlDeviceDetachIOMMUFDPT,
		"IOMMU_DESTROY":                 ioctlIOMMUFDDestroy,
		"IOMMU_IOAS_ALLOC":              ioctlIOMMUFDIOASAlloc,
		"IOMMU_IOAS_IOVA_RANGES":        ioctlIOMMUFDIOASIOVARanges,
		"IOMMU_IOAS_MAP":                ioctlIOMMUFDIOASMap,
		"IOMMU_IOAS_UNMAP":              ioctlIOMMUFDIOASUnmap,

		"VFIO_TYPE1_IOMMU":   uint64(ExtType1),
		"VFIO_TYPE1v2_IOMMU": uint64(ExtType1v2),
		"VFIO_DMA_CC_IOMMU":  uint64(ExtDMACoherent),
		"VFIO_NOIOMMU_IOMMU": uint64(ExtNoIOMMU),
		"VFIO_UNMAP_ALL":     uint64(ExtUnmapAll),
		"VFIO_UPDATE_VADDR":  uint64(ExtUpdateVaddr),

		"VFIO_GROUP_FLAGS_VIABLE":              groupFlagsViable,
		"VFIO_GROUP_FLAGS_CONTAINER_SET":       groupFlagsContainerSet,
		"VFIO_DEVICE_FLAGS_RESET":              deviceFlagsReset,
		"VFIO_DEVICE_FLAGS_PCI":                deviceFlagsPCI,
		"VFIO_DEVICE_FLAGS_CAPS":               deviceFlagsCaps,
		"VFIO_REGION_INFO_FLAG_READ":           regionFlagRead,
		"VFIO_REGION_INFO_FLAG_WRITE":          regionFlagWrite,
		"VFIO_REGION_INFO_FLAG_MMAP":           regionFlagMmap,
		"VFIO_REGION_INFO_FLAG_CAPS":           regionFlagCaps,
		"VFIO_REGION_INFO_CAP_SPARSE_MMAP":     regionCapSparseMmap,
		"VFIO_REGION_INFO_CAP_TYPE":            regionCapType,
		"VFIO_REGION_INFO_CAP_MSIX_MAPPABLE":   regionCapMSIXMappable,
		"VFIO_IRQ_INFO_EVENTFD":                irqInfoEventFD,
		"VFIO_IRQ_INFO_MASKABLE":               irqInfoMaskable,
		"VFIO_IRQ_INFO_AUTOMASKED":             irqInfoAutomasked,
		"VFIO_IRQ_INFO_NORESIZE":               irqInfoNoResize,
		"VFIO_IRQ_SET_DATA_NONE":               irqSetDataNone,
		"VFIO_IRQ_SET_DATA_BOOL":               irqSetDataBool,
		"VFIO_IRQ_SET_DATA_EVENTFD":            irqSetDataEventFD,
		"VFIO_IRQ_SET_ACTION_MASK":             irqSetActionMask,
		"VFIO_IRQ_SET_ACTION_UNMASK":           irqSetActionUnmask,
		"VFIO_IRQ_SET_ACTION_TRIGGER":          irqSetActionTrigger,
		"VFIO_IOMMU_INFO_PGSIZES":              iommuInfoPgsizes,
		"VFIO_IOMMU_INFO_CAPS":                 iommuInfoCaps,
		"VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE": iommuCapIOVARange,
		"VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION":  iommuCapMigration,
		"VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL":      iommuCapDMAAvail,
		"VFIO_DMA_MAP_FLAG_READ":               dmaMapFlagRead,
		"VFIO_DMA_MAP_FLAG_WRITE":              dmaMapFlagWrite,
		"VFIO_DMA_UNMAP_FLAG_ALL":              dmaUnmapFlagAll,
		"IOMMU_IOAS_MAP_FIXED_IOVA":            ioasMapFixedIOVA,
		"IOMMU_IOAS_MAP_WRITEABLE":             ioasMapWriteable,
		"IOMMU_IOAS_MAP_READABLE":              ioasMapReadable,
		"VFIO_PCI_BAR0_REGION_INDEX":           RegionBAR0,
		"VFIO_PCI_ROM_REGION_INDEX":            RegionROM,
		"VFIO_PCI_CONFIG_REGION_INDEX":         RegionConfig,
		"VFIO_PCI_VGA_REGION_INDEX":            RegionVGA,
		"VFIO_PCI_INTX_IRQ_INDEX":              IRQIntx,
		"VFIO_PCI_MSI_IRQ_INDEX":               IRQMSI,
		"VFIO_PCI_MSIX_IRQ_INDEX":              IRQMSIX,
		"VFIO_PCI_ERR_IRQ_INDEX":               IRQErr,
		"VFIO_PCI_REQ_IRQ_INDEX":               IRQReq,

		"sizeof.vfio_info_cap_header":                               capHeaderSize,
		"offsetof.vfio_info_cap_header.next":                        4,
		"sizeof.vfio_group_status":                                  uint64(unsafe.Sizeof(groupStatus{})),
		"sizeof.vfio_device_info":                                   uint64(unsafe.Sizeof(deviceInfo{})),
		"offsetof.vfio_device_info.num_regions":                     uint64(unsafe.Offsetof(deviceInfo{}.NumRegions)),
		"offsetof.vfio_device_info.cap_offset":                      uint64(unsafe.Offsetof(deviceInfo{}.CapOffset)),
		"sizeof.vfio_region_info":                                   uint64(unsafe.Sizeof(regionInfo{})),
		"offsetof.vfio_region_info.cap_offset":                      uint64(unsafe.Offsetof(regionInfo{}.CapOffset)),
		"offsetof.vfio_region_info.size":                            uint64(unsafe.Offsetof(regionInfo{}.Size)),
		"offsetof.vfio_region_info.offset":                          uint64(unsafe.Offsetof(regionInfo{}.Offset)),
		"sizeof.vfio_irq_info":                                      uint64(unsafe.Sizeof(irqInfo{})),
		"offsetof.vfio_irq_info.count":                              uint64(unsafe.Offsetof(irqInfo{}.Count)),
		"sizeof.vfio_irq_set":                                       uint64(unsafe.Sizeof(irqSet{})),
		"offsetof.vfio_irq_set.data":                                uint64(unsafe.Sizeof(irqSet{})),
		"sizeof.vfio_iommu_type1_info":                              uint64(unsafe.Sizeof(iommuType1Info{})),
		"offsetof.vfio_iommu_type1_info.iova_pgsizes":               uint64(unsafe.Offsetof(iommuType1Info{}.IOVAPgsize)),
		"offsetof.vfio_iommu_type1_info.cap_offset":                 uint64(unsafe.Offsetof(iommuType1Info{}.CapOffset)),
		"sizeof.vfio_iommu_type1_info_cap_iova_range":               iovaRangeCapRangesOff,
		"offsetof.vfio_iommu_type1_info_cap_iova_range.nr_iovas":    capHeaderSize,
		"offsetof.vfio_iommu_type1_info_cap_iova_range.iova_ranges": iovaRangeCapRangesOff,
		"sizeof.vfio_iova_range":                                    iovaRangeSize,
		"sizeof.vfio_iommu_type1_info_dma_avail":                    dmaAvailCapSize,
		"offsetof.vfio_iommu_type1_info_dma_avail.avail":            capHeaderSize,
		"sizeof.vfio_region_info_cap_sparse_mmap":                   sparseCapAreasOff,
		"offsetof.vfio_region_info_cap_sparse_mmap.areas":           sparseCapAreasOff,
		"sizeof.vfio_region_sparse_mmap_area":                       sparseAreaSize,
		"sizeof.vfio_region_info_cap_type":                          typeCapSize,
		"offsetof.vfio_region_info_cap_type.subtype":                12,
		"sizeof.vfio_iommu_type1_dma_map":                           uint64(unsafe.Sizeof(dmaMap{})),
		"offsetof.vfio_iommu_type1_dma_map.vaddr":                   uint64(unsafe.Offsetof(dmaMap{}.Vaddr)),
		"offsetof.vfio_iommu_type1_dma_map.iova":                    uint64(unsafe.Offsetof(dmaMap{}.IOVA)),
		"offsetof.vfio_iommu_type1_dma_map.size":                    uint64(unsafe.Offsetof(dmaMap{}.Size)),
		"sizeof.vfio_iommu_type1_dma_unmap":                         uint64(unsafe.Sizeof(dmaUnmap{})),
		"offsetof.vfio_iommu_type1_dma_unmap.iova":                  uint64(unsafe.Offsetof(dmaUnmap{}.IOVA)),
		"offsetof.vfio_iommu_type1_dma_unmap.size":                  uint64(unsafe.Offsetof(dmaUnmap{}.Size)),
		"sizeof.vfio_device_bind_iommufd":                           uint64(unsafe.Sizeof(deviceBindIOMMUFD{})),
		"offsetof.vfio_device_bind_iommufd.iommufd":                 uint64(unsafe.Offsetof(deviceBindIOMMUFD{}.IOMMUFD)),
		"offsetof.vfio_device_bind_iommufd.out_devid":               uint64(unsafe.Offsetof(deviceBindIOMMUFD{}.OutDevID)),
		"sizeof.vfio_device_attach_iommufd_pt":                      uint64(unsafe.Sizeof(deviceAttachIOMMUFDPT{})),
		"offsetof.vfio_device_attach_iommufd_pt.pt_id":              uint64(unsafe.Offsetof(deviceAttachIOMMUFDPT{}.PtID)),
		"sizeof.vfio_device_detach_iommufd_pt":                      uint64(unsafe.Sizeof(deviceDetachIOMMUFDPT{})),
		"sizeof.iommu_destroy":                                      uint64(unsafe.Sizeof(iommuDestroy{})),
		"sizeof.iommu_ioas_alloc":                                   uint64(unsafe.Sizeof(iommuIOASAlloc{})),
		"offsetof.iommu_ioas_alloc.out_ioas_id":                     uint64(unsafe.Offsetof(iommuIOASAlloc{}.OutIOASID)),
		"sizeof.iommu_ioas_iova_ranges":                             uint64(unsafe.Sizeof(iommuIOASIOVARanges{})),
		"offsetof.iommu_ioas_iova_ranges.num_iovas":                 uint64(unsafe.Offsetof(iommuIOASIOVARanges{}.NumIOVAs)),
		"offsetof.iommu_ioas_iova_ranges.allowed_iovas":             uint64(unsafe.Offsetof(iommuIOASIOVARanges{}.AllowedIOVAs)),
		"offsetof.iommu_ioas_iova_ranges.out_iova_alignment":        uint64(unsafe.Offsetof(iommuIOASIOVARanges{}.OutIOVAAlignment)),
		"sizeof.iommu_iova_range":                                   uint64(unsafe.Sizeof(iommuIOVARange{})),
		"sizeof.iommu_ioas_map":                                     uint64(unsafe.Sizeof(iommuIOASMap{})),
		"offsetof.iommu_ioas_map.ioas_id":                           uint64(unsafe.Offsetof(iommuIOASMap{}.IOASID)),
		"offsetof.iommu_ioas_map.user_va":                           uint64(unsafe.Offsetof(iommuIOASMap{}.UserVA)),
		"offsetof.iommu_ioas_map.length":                            uint64(unsafe.Offsetof(iommuIOASMap{}.Length)),
		"offsetof.iommu_ioas_map.iova":                              uint64(unsafe.Offsetof(iommuIOASMap{}.IOVA)),
		"sizeof.iommu_ioas_unmap":                                   uint64(unsafe.Sizeof(iommuIOASUnmap{})),
		"offsetof.iommu_ioas_unmap.iova":                            uint64(unsafe.Offsetof(iommuIOASUnmap{}.IOVA)),
		"offsetof.iommu_ioas_unmap.length":                          uint64(unsafe.Offsetof(iommuIOASUnmap{}.Length)),
	}
	for name, want := range header {
		got, ok := ours[name]
		if !ok {
			t.Errorf("%s = %d in the header has no Go counterpart in this test", name, want)
			continue
		}
		if got != want {
			t.Errorf("%s: Go has %d (%#x), header has %d (%#x)", name, got, got, want, want)
		}
	}
	for name := range ours {
		if _, ok := header[name]; !ok {
			t.Errorf("%s is not in testdata/abi-6.12.txt (rerun testdata/gen-abi.sh)", name)
		}
	}
	// The request numbers the test-bed notes recorded in a real guest.
	if ioctlGetAPIVersion != 0x3B64 || ioctlIOMMUMapDMA != 0x3B71 || ioctlIOMMUUnmapDMA != 0x3B72 {
		t.Errorf("request numbers differ from those seen in the guest")
	}
}
