package vfio

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-llm/strata/pci"
)

// ContainerPath is the VFIO container node (legacy group/container API).
const ContainerPath = pci.VFIOContainerPath

// Container is a VFIO type1v2 container: one IOMMU address space shared by
// the groups attached to it. It allocates IOVAs from the valid ranges the
// kernel reports, accounts for every mapping and unmaps everything on Close.
type Container struct {
	fd       int
	mu       sync.Mutex
	iommuSet bool
	groups   []*Group
	info     IOMMUInfo
	dma      dmaSpace
}

// OpenContainer opens /dev/vfio/vfio and checks the API version and that the
// type1v2 IOMMU model is available (ErrNoIOMMU when it is not: no
// vfio_iommu_type1 module, or no IOMMU).
func OpenContainer() (*Container, error) {
	fd, err := openDev(ContainerPath, ErrNoIOMMU)
	if err != nil {
		return nil, err
	}
	c := &Container{fd: fd}
	c.dma.maps = map[uint64]*mapping{}
	c.dma.doMap = c.mapIOCTL
	c.dma.doUnmap = c.unmapIOCTL
	v, err := c.APIVersion()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if v != vfioAPIVersion {
		unix.Close(fd)
		return nil, fmt.Errorf("VFIO API version %d, want %d: %w", v, vfioAPIVersion, ErrNotSupported)
	}
	ok, err := c.CheckExtension(ExtType1v2)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if !ok {
		unix.Close(fd)
		return nil, fmt.Errorf("VFIO container has no type1v2 IOMMU (is vfio_iommu_type1 loaded and the IOMMU on?): %w", ErrNoIOMMU)
	}
	return c, nil
}

// APIVersion is VFIO_GET_API_VERSION.
func (c *Container) APIVersion() (int, error) {
	v, err := ioctl(c.fd, ioctlGetAPIVersion, nil, 0)
	if err != nil {
		return 0, fmt.Errorf("VFIO_GET_API_VERSION: %w", err)
	}
	return v, nil
}

// CheckExtension is VFIO_CHECK_EXTENSION: whether the container supports ext.
func (c *Container) CheckExtension(ext Extension) (bool, error) {
	r, err := ioctl(c.fd, ioctlCheckExtension, nil, uintptr(ext))
	if err != nil {
		return false, fmt.Errorf("VFIO_CHECK_EXTENSION(%d): %w", ext, err)
	}
	return r > 0, nil
}

// SetIOMMU is VFIO_SET_IOMMU; it needs at least one group attached. It also
// reads the IOMMU info so that MapDMA can allocate IOVAs.
func (c *Container) SetIOMMU(ext Extension) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.iommuSet {
		return nil
	}
	if _, err := ioctl(c.fd, ioctlSetIOMMU, nil, uintptr(ext)); err != nil {
		return fmt.Errorf("VFIO_SET_IOMMU(%d): %w", ext, err)
	}
	c.iommuSet = true
	return c.refreshLocked()
}

// refreshLocked re-reads the IOMMU info (valid ranges shrink when a group
// with reserved regions joins) and rebuilds the allocator around the live
// mappings.
func (c *Container) refreshLocked() error {
	info, err := c.getInfo()
	if err != nil {
		return err
	}
	c.info = info
	c.dma.mu.Lock()
	defer c.dma.mu.Unlock()
	return c.dma.setRanges(info.Ranges, info.MinPageSize(), info.DMAAvail)
}

// Info is VFIO_IOMMU_GET_INFO with its capability chain parsed: page sizes,
// valid IOVA ranges, DMA mapping budget. The IOMMU must be set.
func (c *Container) Info() (IOMMUInfo, error) {
	return c.getInfo()
}

func (c *Container) getInfo() (IOMMUInfo, error) {
	// First with the bare struct: the kernel raises argsz to what the
	// capability chain needs.
	hdr := iommuType1Info{Argsz: uint32(unsafe.Sizeof(iommuType1Info{}))}
	if _, err := ioctl(c.fd, ioctlIOMMUGetInfo, unsafe.Pointer(&hdr), 0); err != nil {
		return IOMMUInfo{}, fmt.Errorf("VFIO_IOMMU_GET_INFO: %w", err)
	}
	size := hdr.Argsz
	if size < uint32(unsafe.Sizeof(hdr)) || size > 1<<20 {
		return IOMMUInfo{}, fmt.Errorf("VFIO_IOMMU_GET_INFO: kernel asks for %d bytes", size)
	}
	buf := make([]uint64, (size+7)/8) // 8-byte aligned
	b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	ne.PutUint32(b, size)
	if _, err := ioctl(c.fd, ioctlIOMMUGetInfo, unsafe.Pointer(&b[0]), 0); err != nil {
		return IOMMUInfo{}, fmt.Errorf("VFIO_IOMMU_GET_INFO (%d bytes): %w", size, err)
	}
	return parseType1Info(b[:size])
}

func (c *Container) mapIOCTL(vaddr, iova, size uint64, perm Perm) error {
	m := dmaMap{Argsz: uint32(unsafe.Sizeof(dmaMap{})), Vaddr: vaddr, IOVA: iova, Size: size}
	if perm&PermRead != 0 {
		m.Flags |= dmaMapFlagRead
	}
	if perm&PermWrite != 0 {
		m.Flags |= dmaMapFlagWrite
	}
	if _, err := ioctl(c.fd, ioctlIOMMUMapDMA, unsafe.Pointer(&m), 0); err != nil {
		return fmt.Errorf("VFIO_IOMMU_MAP_DMA: %w", err)
	}
	return nil
}

func (c *Container) unmapIOCTL(iova, size uint64) error {
	u := dmaUnmap{Argsz: uint32(unsafe.Sizeof(dmaUnmap{})), IOVA: iova, Size: size}
	if _, err := ioctl(c.fd, ioctlIOMMUUnmapDMA, unsafe.Pointer(&u), 0); err != nil {
		return fmt.Errorf("VFIO_IOMMU_UNMAP_DMA: %w", err)
	}
	if u.Size != size {
		return fmt.Errorf("VFIO_IOMMU_UNMAP_DMA unmapped %#x of %#x bytes", u.Size, size)
	}
	return nil
}

// MapDMA maps buf for device reads and writes at an IOVA the container
// picks and returns it. buf must be page-aligned and a whole number of
// pages: memory from AllocDMA, any other mmap, or another device's BAR
// mapping (Device.MapRegion), which type1 maps as VM_PFNMAP for
// peer-to-peer DMA. The container keeps buf referenced until UnmapDMA.
func (c *Container) MapDMA(buf []byte) (uint64, error) {
	return c.Map(buf, MapOptions{})
}

// Map is MapDMA with a choice of permissions and, optionally, a fixed IOVA.
func (c *Container) Map(buf []byte, opts MapOptions) (uint64, error) {
	if !c.isSet() {
		return 0, errors.New("DMA map: container has no IOMMU set (attach a group first)")
	}
	return c.dma.mapBuf(buf, opts)
}

// UnmapDMA removes the mapping that starts at iova (as returned by MapDMA).
func (c *Container) UnmapDMA(iova uint64) error { return c.dma.unmap(iova) }

// Stats reports the mapping accounting.
func (c *Container) Stats() DMAStats { return c.dma.snapshot() }

func (c *Container) isSet() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.iommuSet
}

// Close unmaps every live mapping, detaches the groups still attached and
// closes the container.
func (c *Container) Close() error {
	var errs []error
	if c.isSet() {
		errs = append(errs, c.dma.unmapAll())
	}
	c.mu.Lock()
	groups := c.groups
	c.groups = nil
	c.mu.Unlock()
	for _, g := range groups {
		errs = append(errs, g.UnsetContainer())
	}
	if err := unix.Close(c.fd); err != nil {
		errs = append(errs, fmt.Errorf("closing VFIO container: %w", err))
	}
	return errors.Join(errs...)
}
