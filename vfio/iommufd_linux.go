package vfio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-llm/strata/pci"
)

// The iommufd + VFIO cdev interface (Linux 6.6+, CONFIG_IOMMUFD and
// CONFIG_VFIO_DEVICE_CDEV): a device is opened by its own node
// /dev/vfio/devices/vfioN, bound to an iommufd (/dev/iommu) and attached to
// an IO address space (IOAS) there, instead of going through a group and a
// container. strata uses it when the kernel has it (see Probe), behind the
// same DMAMapper API. Debian 12's kernels are built without it, so it runs
// in no test-bed here: its ioctl numbers and structs are checked against
// the 6.12 headers (TestABIMatchesHeaders) and the code paths mirror type1.

// IOMMUFDPath is the iommufd node.
const IOMMUFDPath = pci.IOMMUFDPath

// IOMMUFD is an open /dev/iommu.
type IOMMUFD struct {
	fd int
}

// OpenIOMMUFD opens /dev/iommu; ErrNotSupported when the kernel has no
// iommufd.
func OpenIOMMUFD() (*IOMMUFD, error) {
	fd, err := openDev(IOMMUFDPath, ErrNotSupported)
	if err != nil {
		return nil, err
	}
	return &IOMMUFD{fd: fd}, nil
}

// Close closes the iommufd; IOAS objects die with it.
func (f *IOMMUFD) Close() error {
	if err := unix.Close(f.fd); err != nil {
		return fmt.Errorf("closing %s: %w", IOMMUFDPath, err)
	}
	return nil
}

// IOAS is an iommufd IO address space: the iommufd counterpart of a type1
// container, with the same IOVA allocator and accounting.
type IOAS struct {
	f   *IOMMUFD
	id  uint32
	dma dmaSpace
}

// AllocIOAS is IOMMU_IOAS_ALLOC.
func (f *IOMMUFD) AllocIOAS() (*IOAS, error) {
	a := iommuIOASAlloc{Size: uint32(unsafe.Sizeof(iommuIOASAlloc{}))}
	if _, err := ioctl(f.fd, ioctlIOMMUFDIOASAlloc, unsafe.Pointer(&a), 0); err != nil {
		return nil, fmt.Errorf("IOMMU_IOAS_ALLOC: %w", err)
	}
	s := &IOAS{f: f, id: a.OutIOASID}
	s.dma.maps = map[uint64]*mapping{}
	s.dma.doMap = s.mapIOCTL
	s.dma.doUnmap = s.unmapIOCTL
	s.dma.ready = s.refresh
	return s, nil
}

// ID is the IOAS object id (the pt_id a device attaches to).
func (s *IOAS) ID() uint32 { return s.id }

// IOVARanges is IOMMU_IOAS_IOVA_RANGES: the usable IOVA ranges given the
// devices attached so far, and the alignment they require.
func (s *IOAS) IOVARanges() ([]Range, uint64, error) {
	q := iommuIOASIOVARanges{Size: uint32(unsafe.Sizeof(iommuIOASIOVARanges{})), IOASID: s.id}
	_, err := ioctl(s.f.fd, ioctlIOMMUFDIOASIOVARanges, unsafe.Pointer(&q), 0)
	if err != nil && !errors.Is(err, unix.EMSGSIZE) {
		return nil, 0, fmt.Errorf("IOMMU_IOAS_IOVA_RANGES: %w", err)
	}
	if q.NumIOVAs == 0 || q.NumIOVAs > 1<<16 {
		return nil, 0, fmt.Errorf("IOMMU_IOAS_IOVA_RANGES: %d ranges", q.NumIOVAs)
	}
	rs := make([]iommuIOVARange, q.NumIOVAs)
	q.AllowedIOVAs = uint64(uintptr(unsafe.Pointer(&rs[0])))
	_, err = ioctl(s.f.fd, ioctlIOMMUFDIOASIOVARanges, unsafe.Pointer(&q), 0)
	runtime.KeepAlive(rs) // the kernel wrote through q.AllowedIOVAs
	if err != nil {
		return nil, 0, fmt.Errorf("IOMMU_IOAS_IOVA_RANGES (%d ranges): %w", len(rs), err)
	}
	out := make([]Range, 0, len(rs))
	for _, r := range rs[:min(int(q.NumIOVAs), len(rs))] {
		out = append(out, Range{Start: r.Start, End: r.Last})
	}
	out, err = normalizeRanges(out)
	return out, q.OutIOVAAlignment, err
}

// refresh re-reads the ranges (after a device attached) and rebuilds the
// allocator around the live mappings.
func (s *IOAS) refresh() error {
	rs, align, err := s.IOVARanges()
	if err != nil {
		return err
	}
	if align < 4096 {
		align = 4096
	}
	return s.dma.setRanges(rs, align, -1)
}

func (s *IOAS) mapIOCTL(vaddr, iova, size uint64, perm Perm) error {
	m := iommuIOASMap{Size: uint32(unsafe.Sizeof(iommuIOASMap{})), Flags: ioasMapFixedIOVA,
		IOASID: s.id, UserVA: vaddr, Length: size, IOVA: iova}
	if perm&PermRead != 0 {
		m.Flags |= ioasMapReadable
	}
	if perm&PermWrite != 0 {
		m.Flags |= ioasMapWriteable
	}
	if _, err := ioctl(s.f.fd, ioctlIOMMUFDIOASMap, unsafe.Pointer(&m), 0); err != nil {
		if errors.Is(err, unix.EFAULT) {
			// iommufd pins pages with pin_user_pages: a VM_PFNMAP BAR
			// mapping cannot be mapped this way (dma-buf + IOAS_MAP_FILE,
			// Linux 6.19+, is the route for that).
			return fmt.Errorf("IOMMU_IOAS_MAP: %v (a BAR mapping cannot be mapped through iommufd): %w", err, ErrNotSupported)
		}
		return fmt.Errorf("IOMMU_IOAS_MAP: %w", err)
	}
	return nil
}

func (s *IOAS) unmapIOCTL(iova, size uint64) error {
	u := iommuIOASUnmap{Size: uint32(unsafe.Sizeof(iommuIOASUnmap{})), IOASID: s.id, IOVA: iova, Length: size}
	if _, err := ioctl(s.f.fd, ioctlIOMMUFDIOASUnmap, unsafe.Pointer(&u), 0); err != nil {
		return fmt.Errorf("IOMMU_IOAS_UNMAP: %w", err)
	}
	if u.Length != size {
		return fmt.Errorf("IOMMU_IOAS_UNMAP unmapped %#x of %#x bytes", u.Length, size)
	}
	return nil
}

// MapDMA maps buf read-write at an IOVA the IOAS allocator picks.
func (s *IOAS) MapDMA(buf []byte) (uint64, error) { return s.dma.mapBuf(buf, MapOptions{}) }

// Map is MapDMA with permissions and an optional fixed IOVA.
func (s *IOAS) Map(buf []byte, opts MapOptions) (uint64, error) { return s.dma.mapBuf(buf, opts) }

// UnmapDMA removes the mapping at iova.
func (s *IOAS) UnmapDMA(iova uint64) error { return s.dma.unmap(iova) }

// Stats reports the mapping accounting.
func (s *IOAS) Stats() DMAStats { return s.dma.snapshot() }

// Close unmaps everything and destroys the IOAS (IOMMU_DESTROY).
func (s *IOAS) Close() error {
	err := s.dma.unmapAll()
	d := iommuDestroy{Size: uint32(unsafe.Sizeof(iommuDestroy{})), ID: s.id}
	if _, derr := ioctl(s.f.fd, ioctlIOMMUFDDestroy, unsafe.Pointer(&d), 0); derr != nil {
		err = errors.Join(err, fmt.Errorf("IOMMU_DESTROY(%d): %w", s.id, derr))
	}
	return err
}

// CdevPath returns /dev/vfio/devices/vfioN for a device bound to vfio-pci,
// from /sys/bus/pci/devices/BDF/vfio-dev/ under s. ErrNotSupported when the
// kernel has no VFIO cdev (the vfio-dev directory is missing).
func CdevPath(s Sysfs, bdf string) (string, error) {
	canon, dir, err := s.Dir(bdf)
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(filepath.Join(dir, "vfio-dev"))
	if err != nil {
		return "", fmt.Errorf("VFIO cdev of %s (bound to vfio-pci, kernel with VFIO_DEVICE_CDEV?): %v: %w", canon, err, ErrNotSupported)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "vfio") {
			return filepath.Join("/dev/vfio/devices", e.Name()), nil
		}
	}
	return "", fmt.Errorf("VFIO cdev of %s: empty vfio-dev directory: %w", canon, ErrNotSupported)
}

// OpenCdev opens a device through its VFIO cdev, binds it to f
// (VFIO_DEVICE_BIND_IOMMUFD) and attaches it to ioas
// (VFIO_DEVICE_ATTACH_IOMMUFD_PT). The IOAS's valid ranges are re-read
// before its next map.
func OpenCdev(sys Sysfs, bdf string, f *IOMMUFD, ioas *IOAS) (*Device, error) {
	path, err := CdevPath(sys, bdf)
	if err != nil {
		return nil, err
	}
	canon, _ := ParseBDF(bdf)
	fd, err := openDev(path, ErrNoDevice)
	if err != nil {
		return nil, err
	}
	b := deviceBindIOMMUFD{Argsz: uint32(unsafe.Sizeof(deviceBindIOMMUFD{})), IOMMUFD: int32(f.fd)}
	if _, err := ioctl(fd, ioctlDeviceBindIOMMUFD, unsafe.Pointer(&b), 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("VFIO_DEVICE_BIND_IOMMUFD(%s): %w", canon, err)
	}
	at := deviceAttachIOMMUFDPT{Argsz: uint32(unsafe.Sizeof(deviceAttachIOMMUFDPT{})), PtID: ioas.id}
	if _, err := ioctl(fd, ioctlDeviceAttachIOMMUFDPT, unsafe.Pointer(&at), 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("VFIO_DEVICE_ATTACH_IOMMUFD_PT(%s → IOAS %d): %w", canon, ioas.id, err)
	}
	ioas.dma.mu.Lock()
	ioas.dma.ready = ioas.refresh
	ioas.dma.mu.Unlock()
	d, err := newDevice(fd, canon)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return d, nil
}

// ProbeResult says which VFIO interfaces this kernel offers, and why not.
type ProbeResult struct {
	Type1   bool     // /dev/vfio/vfio with the type1v2 IOMMU
	IOMMUFD bool     // /dev/iommu
	Cdev    bool     // /dev/vfio/devices exists (VFIO_DEVICE_CDEV)
	Notes   []string // why an interface is missing
}

// Probe checks the VFIO interfaces without touching any device.
func Probe() ProbeResult {
	var p ProbeResult
	if c, err := OpenContainer(); err == nil {
		p.Type1 = true
		c.Close()
	} else {
		p.Notes = append(p.Notes, "type1: "+err.Error())
	}
	if f, err := OpenIOMMUFD(); err == nil {
		p.IOMMUFD = true
		f.Close()
	} else {
		p.Notes = append(p.Notes, "iommufd: "+err.Error())
	}
	if st, err := os.Stat("/dev/vfio/devices"); err == nil && st.IsDir() {
		p.Cdev = true
	} else {
		p.Notes = append(p.Notes, "cdev: /dev/vfio/devices missing (kernel without VFIO_DEVICE_CDEV, or no device bound to vfio-pci)")
	}
	return p
}
