/* Prints the VFIO/iommufd ABI facts that vfio/abi.go transcribes: one
 * "name value" line each. Compiled against the UAPI headers by gen-abi.sh;
 * vfio's TestABIMatchesHeaders compares abi-6.12.txt with the Go side. */
#include <stdio.h>
#include <stddef.h>
#include <linux/vfio.h>
#include <linux/iommufd.h>

#define V(x) printf("%s %llu\n", #x, (unsigned long long)(x))
#define S(t) printf("sizeof.%s %zu\n", #t, sizeof(struct t))
#define O(t, f) printf("offsetof.%s.%s %zu\n", #t, #f, offsetof(struct t, f))

int main(void) {
	V(VFIO_API_VERSION);
	V(VFIO_GET_API_VERSION); V(VFIO_CHECK_EXTENSION); V(VFIO_SET_IOMMU);
	V(VFIO_GROUP_GET_STATUS); V(VFIO_GROUP_SET_CONTAINER); V(VFIO_GROUP_UNSET_CONTAINER);
	V(VFIO_GROUP_GET_DEVICE_FD); V(VFIO_DEVICE_GET_INFO); V(VFIO_DEVICE_GET_REGION_INFO);
	V(VFIO_DEVICE_GET_IRQ_INFO); V(VFIO_DEVICE_SET_IRQS); V(VFIO_DEVICE_RESET);
	V(VFIO_IOMMU_GET_INFO); V(VFIO_IOMMU_MAP_DMA); V(VFIO_IOMMU_UNMAP_DMA);
	V(VFIO_DEVICE_BIND_IOMMUFD); V(VFIO_DEVICE_ATTACH_IOMMUFD_PT); V(VFIO_DEVICE_DETACH_IOMMUFD_PT);
	V(IOMMU_DESTROY); V(IOMMU_IOAS_ALLOC); V(IOMMU_IOAS_IOVA_RANGES); V(IOMMU_IOAS_MAP); V(IOMMU_IOAS_UNMAP);

	V(VFIO_TYPE1_IOMMU); V(VFIO_TYPE1v2_IOMMU); V(VFIO_DMA_CC_IOMMU); V(VFIO_NOIOMMU_IOMMU);
	V(VFIO_UNMAP_ALL); V(VFIO_UPDATE_VADDR);
	V(VFIO_GROUP_FLAGS_VIABLE); V(VFIO_GROUP_FLAGS_CONTAINER_SET);
	V(VFIO_DEVICE_FLAGS_RESET); V(VFIO_DEVICE_FLAGS_PCI); V(VFIO_DEVICE_FLAGS_CAPS);
	V(VFIO_REGION_INFO_FLAG_READ); V(VFIO_REGION_INFO_FLAG_WRITE); V(VFIO_REGION_INFO_FLAG_MMAP);
	V(VFIO_REGION_INFO_FLAG_CAPS); V(VFIO_REGION_INFO_CAP_SPARSE_MMAP); V(VFIO_REGION_INFO_CAP_TYPE);
	V(VFIO_REGION_INFO_CAP_MSIX_MAPPABLE);
	V(VFIO_IRQ_INFO_EVENTFD); V(VFIO_IRQ_INFO_MASKABLE); V(VFIO_IRQ_INFO_AUTOMASKED); V(VFIO_IRQ_INFO_NORESIZE);
	V(VFIO_IRQ_SET_DATA_NONE); V(VFIO_IRQ_SET_DATA_BOOL); V(VFIO_IRQ_SET_DATA_EVENTFD);
	V(VFIO_IRQ_SET_ACTION_MASK); V(VFIO_IRQ_SET_ACTION_UNMASK); V(VFIO_IRQ_SET_ACTION_TRIGGER);
	V(VFIO_IOMMU_INFO_PGSIZES); V(VFIO_IOMMU_INFO_CAPS);
	V(VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE); V(VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION); V(VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL);
	V(VFIO_DMA_MAP_FLAG_READ); V(VFIO_DMA_MAP_FLAG_WRITE); V(VFIO_DMA_UNMAP_FLAG_ALL);
	V(IOMMU_IOAS_MAP_FIXED_IOVA); V(IOMMU_IOAS_MAP_WRITEABLE); V(IOMMU_IOAS_MAP_READABLE);
	V(VFIO_PCI_BAR0_REGION_INDEX); V(VFIO_PCI_ROM_REGION_INDEX); V(VFIO_PCI_CONFIG_REGION_INDEX);
	V(VFIO_PCI_VGA_REGION_INDEX);
	V(VFIO_PCI_INTX_IRQ_INDEX); V(VFIO_PCI_MSI_IRQ_INDEX); V(VFIO_PCI_MSIX_IRQ_INDEX);
	V(VFIO_PCI_ERR_IRQ_INDEX); V(VFIO_PCI_REQ_IRQ_INDEX);

	S(vfio_info_cap_header); O(vfio_info_cap_header, next);
	S(vfio_group_status);
	S(vfio_device_info); O(vfio_device_info, num_regions); O(vfio_device_info, cap_offset);
	S(vfio_region_info); O(vfio_region_info, cap_offset); O(vfio_region_info, size); O(vfio_region_info, offset);
	S(vfio_irq_info); O(vfio_irq_info, count);
	S(vfio_irq_set); O(vfio_irq_set, data);
	S(vfio_iommu_type1_info); O(vfio_iommu_type1_info, iova_pgsizes); O(vfio_iommu_type1_info, cap_offset);
	S(vfio_iommu_type1_info_cap_iova_range); O(vfio_iommu_type1_info_cap_iova_range, nr_iovas);
	O(vfio_iommu_type1_info_cap_iova_range, iova_ranges);
	S(vfio_iova_range);
	S(vfio_iommu_type1_info_dma_avail); O(vfio_iommu_type1_info_dma_avail, avail);
	S(vfio_region_info_cap_sparse_mmap); O(vfio_region_info_cap_sparse_mmap, areas);
	S(vfio_region_sparse_mmap_area);
	S(vfio_region_info_cap_type); O(vfio_region_info_cap_type, subtype);
	S(vfio_iommu_type1_dma_map); O(vfio_iommu_type1_dma_map, vaddr); O(vfio_iommu_type1_dma_map, iova);
	O(vfio_iommu_type1_dma_map, size);
	S(vfio_iommu_type1_dma_unmap); O(vfio_iommu_type1_dma_unmap, iova); O(vfio_iommu_type1_dma_unmap, size);
	S(vfio_device_bind_iommufd); O(vfio_device_bind_iommufd, iommufd); O(vfio_device_bind_iommufd, out_devid);
	S(vfio_device_attach_iommufd_pt); O(vfio_device_attach_iommufd_pt, pt_id);
	S(vfio_device_detach_iommufd_pt);
	S(iommu_destroy); S(iommu_ioas_alloc); O(iommu_ioas_alloc, out_ioas_id);
	S(iommu_ioas_iova_ranges); O(iommu_ioas_iova_ranges, num_iovas); O(iommu_ioas_iova_ranges, allowed_iovas);
	O(iommu_ioas_iova_ranges, out_iova_alignment);
	S(iommu_iova_range);
	S(iommu_ioas_map); O(iommu_ioas_map, ioas_id); O(iommu_ioas_map, user_va); O(iommu_ioas_map, length);
	O(iommu_ioas_map, iova);
	S(iommu_ioas_unmap); O(iommu_ioas_unmap, iova); O(iommu_ioas_unmap, length);
	return 0;
}
