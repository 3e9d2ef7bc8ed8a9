package vfio

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PCI configuration space facts (PCI Local Bus Specification 3.0, 6.2.2).
const (
	PCICommand            = 0x04   // offset of the 16-bit Command register
	PCICommandMemory      = 1 << 1 // Memory Space Enable: BARs decode
	PCICommandBusMaster   = 1 << 2 // Bus Master Enable: the device may DMA
	PCICommandINTxDisable = 1 << 10
)

// Device is an open VFIO device: its regions (BARs, config space), its
// interrupts and its reset. Every access goes through the device fd the
// kernel handed out, so it only ever reaches this device.
type Device struct {
	name string
	info DeviceInfo

	mu    sync.Mutex
	fd    int
	maps  [][]byte   // region mmaps, unmapped on Close
	msix  []*EventFD // eventfds wired to MSI-X vectors
	owner func()     // called on Close (Domain bookkeeping)
}

// DeviceInfo is VFIO_DEVICE_GET_INFO.
type DeviceInfo struct {
	Flags      uint32
	NumRegions int
	NumIRQs    int
	PCI        bool // a vfio-pci device: PCI region and IRQ indexes apply
	CanReset   bool // VFIO_DEVICE_RESET is supported
}

// IRQInfo is VFIO_DEVICE_GET_IRQ_INFO for one interrupt index.
type IRQInfo struct {
	Index      int
	Count      int  // vectors available (MSI-X: table size)
	EventFD    bool // can signal an eventfd
	Maskable   bool
	Automasked bool
	NoResize   bool // enabling more vectors means disabling first
}

func newDevice(fd int, name string) (*Device, error) {
	di := deviceInfo{Argsz: uint32(unsafe.Sizeof(deviceInfo{}))}
	if _, err := ioctl(fd, ioctlDeviceGetInfo, unsafe.Pointer(&di), 0); err != nil {
		return nil, fmt.Errorf("VFIO_DEVICE_GET_INFO on %s: %w", name, err)
	}
	return &Device{
		name: name,
		fd:   fd,
		info: DeviceInfo{
			Flags:      di.Flags,
			NumRegions: int(di.NumRegions),
			NumIRQs:    int(di.NumIRQs),
			PCI:        di.Flags&deviceFlagsPCI != 0,
			CanReset:   di.Flags&deviceFlagsReset != 0,
		},
	}, nil
}

// Name is the device's PCI address.
func (d *Device) Name() string { return d.name }

// Info is what VFIO_DEVICE_GET_INFO reported when the device was opened.
func (d *Device) Info() DeviceInfo { return d.info }

func (d *Device) fdOrErr() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return -1, fmt.Errorf("VFIO device %s is closed", d.name)
	}
	return d.fd, nil
}

// RegionInfo is VFIO_DEVICE_GET_REGION_INFO with its capabilities (sparse
// mmap areas, MSI-X mappable, region type).
func (d *Device) RegionInfo(index int) (RegionInfo, error) {
	fd, err := d.fdOrErr()
	if err != nil {
		return RegionInfo{}, err
	}
	if index < 0 || index >= d.info.NumRegions {
		return RegionInfo{}, fmt.Errorf("%s has no region %d (it has %d)", d.name, index, d.info.NumRegions)
	}
	ri := regionInfo{Argsz: uint32(unsafe.Sizeof(regionInfo{})), Index: uint32(index)}
	if _, err := ioctl(fd, ioctlDeviceGetRegionInfo, unsafe.Pointer(&ri), 0); err != nil {
		return RegionInfo{}, fmt.Errorf("VFIO_DEVICE_GET_REGION_INFO(%d) on %s: %w", index, d.name, err)
	}
	size := ri.Argsz
	if size < uint32(unsafe.Sizeof(ri)) || size > 1<<20 {
		return RegionInfo{}, fmt.Errorf("VFIO_DEVICE_GET_REGION_INFO(%d) on %s: kernel asks for %d bytes", index, d.name, size)
	}
	buf := make([]uint64, (size+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	ne.PutUint32(b, size)
	ne.PutUint32(b[8:], uint32(index))
	if _, err := ioctl(fd, ioctlDeviceGetRegionInfo, unsafe.Pointer(&b[0]), 0); err != nil {
		return RegionInfo{}, fmt.Errorf("VFIO_DEVICE_GET_REGION_INFO(%d) on %s: %w", index, d.name, err)
	}
	info, err := parseRegionInfo(b[:size])
	if err != nil {
		return info, fmt.Errorf("%s: %w", d.name, err)
	}
	return info, nil
}

// MapRegion mmaps a whole region (a BAR) read-write and shared. The mapping
// is a VM_PFNMAP mapping of device memory: use it for MMIO (see MMIO), or
// pass it to another device's container's MapDMA for peer-to-peer DMA. It
// stays valid until UnmapRegion or Close.
func (d *Device) MapRegion(index int) ([]byte, error) {
	ri, err := d.RegionInfo(index)
	if err != nil {
		return nil, err
	}
	if !ri.Mmap || ri.Size == 0 {
		return nil, fmt.Errorf("region %d of %s (%d bytes) cannot be mmapped: %w", index, d.name, ri.Size, ErrNotSupported)
	}
	if ri.Size > 1<<40 {
		return nil, fmt.Errorf("region %d of %s: size %#x too large", index, d.name, ri.Size)
	}
	fd, err := d.fdOrErr()
	if err != nil {
		return nil, err
	}
	length := int((ri.Size + 4095) &^ 4095)
	b, err := mmapShared(fd, int64(ri.Offset), length)
	if err != nil {
		if len(ri.Sparse) > 0 {
			return nil, fmt.Errorf("mmap of region %d of %s: %v (only the sparse areas %v may be mapped)", index, d.name, err, ri.Sparse)
		}
		return nil, fmt.Errorf("mmap of region %d of %s: %w", index, d.name, err)
	}
	b = b[:ri.Size]
	d.mu.Lock()
	d.maps = append(d.maps, b)
	d.mu.Unlock()
	return b, nil
}

// UnmapRegion undoes MapRegion. Unmap it from any container first.
func (d *Device) UnmapRegion(b []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, m := range d.maps {
		if unsafe.SliceData(m) == unsafe.SliceData(b) {
			d.maps = append(d.maps[:i], d.maps[i+1:]...)
			if err := munmap(m[:cap(m)]); err != nil {
				return fmt.Errorf("munmap of %s region: %w", d.name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("buffer is not a region mapping of %s", d.name)
}

// ReadRegion reads len(b) bytes at off within region index (pread on the
// device fd): config space, or BARs that cannot be mmapped.
func (d *Device) ReadRegion(index int, off int64, b []byte) error {
	return d.rw(index, off, b, false)
}

// WriteRegion writes b at off within region index (pwrite on the device fd).
func (d *Device) WriteRegion(index int, off int64, b []byte) error {
	return d.rw(index, off, b, true)
}

func (d *Device) rw(index int, off int64, b []byte, write bool) error {
	ri, err := d.RegionInfo(index)
	if err != nil {
		return err
	}
	if off < 0 || uint64(off) > ri.Size || uint64(len(b)) > ri.Size-uint64(off) {
		return fmt.Errorf("access of %d bytes at %#x outside region %d of %s (%#x bytes)", len(b), off, index, d.name, ri.Size)
	}
	fd, err := d.fdOrErr()
	if err != nil {
		return err
	}
	var n int
	if write {
		n, err = unix.Pwrite(fd, b, int64(ri.Offset)+off)
	} else {
		n, err = unix.Pread(fd, b, int64(ri.Offset)+off)
	}
	op := map[bool]string{false: "read", true: "write"}[write]
	if err != nil {
		return fmt.Errorf("%s of %d bytes at %#x of region %d of %s: %w", op, len(b), off, index, d.name, err)
	}
	if n != len(b) {
		return fmt.Errorf("short %s at %#x of region %d of %s: %d of %d bytes", op, off, index, d.name, n, len(b))
	}
	return nil
}

// ReadConfig16 reads a 16-bit register of PCI config space.
func (d *Device) ReadConfig16(off int64) (uint16, error) {
	var b [2]byte
	if err := d.ReadRegion(RegionConfig, off, b[:]); err != nil {
		return 0, err
	}
	return ne.Uint16(b[:]), nil
}

// ReadConfig32 reads a 32-bit register of PCI config space.
func (d *Device) ReadConfig32(off int64) (uint32, error) {
	var b [4]byte
	if err := d.ReadRegion(RegionConfig, off, b[:]); err != nil {
		return 0, err
	}
	return ne.Uint32(b[:]), nil
}

// WriteConfig16 writes a 16-bit register of PCI config space.
func (d *Device) WriteConfig16(off int64, v uint16) error {
	var b [2]byte
	ne.PutUint16(b[:], v)
	return d.WriteRegion(RegionConfig, off, b[:])
}

// EnableDMA sets Memory Space, Bus Master and INTx Disable in the PCI
// Command register: vfio-pci leaves Bus Master clear, and without it the
// device's DMA goes nowhere. It returns the new register value as read back.
func (d *Device) EnableDMA() (uint16, error) {
	return d.UpdateCommand(PCICommandMemory|PCICommandBusMaster|PCICommandINTxDisable, 0)
}

// UpdateCommand sets and clears bits of the PCI Command register and
// returns the value read back.
func (d *Device) UpdateCommand(set, clear uint16) (uint16, error) {
	cmd, err := d.ReadConfig16(PCICommand)
	if err != nil {
		return 0, err
	}
	if err := d.WriteConfig16(PCICommand, cmd&^clear|set); err != nil {
		return 0, err
	}
	return d.ReadConfig16(PCICommand)
}

// IRQInfo is VFIO_DEVICE_GET_IRQ_INFO for index (IRQIntx, IRQMSI, IRQMSIX…).
func (d *Device) IRQInfo(index int) (IRQInfo, error) {
	fd, err := d.fdOrErr()
	if err != nil {
		return IRQInfo{}, err
	}
	ii := irqInfo{Argsz: uint32(unsafe.Sizeof(irqInfo{})), Index: uint32(index)}
	if _, err := ioctl(fd, ioctlDeviceGetIRQInfo, unsafe.Pointer(&ii), 0); err != nil {
		return IRQInfo{}, fmt.Errorf("VFIO_DEVICE_GET_IRQ_INFO(%d) on %s: %w", index, d.name, err)
	}
	return IRQInfo{
		Index:      int(ii.Index),
		Count:      int(ii.Count),
		EventFD:    ii.Flags&irqInfoEventFD != 0,
		Maskable:   ii.Flags&irqInfoMaskable != 0,
		Automasked: ii.Flags&irqInfoAutomasked != 0,
		NoResize:   ii.Flags&irqInfoNoResize != 0,
	}, nil
}

// setIRQs is VFIO_DEVICE_SET_IRQS with an optional eventfd array.
func (d *Device) setIRQs(index int, flags uint32, start, count int, fds []int32) error {
	fd, err := d.fdOrErr()
	if err != nil {
		return err
	}
	hdr := int(unsafe.Sizeof(irqSet{}))
	buf := make([]uint64, (hdr+4*len(fds)+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	size := hdr + 4*len(fds)
	ne.PutUint32(b[0:], uint32(size))
	ne.PutUint32(b[4:], flags)
	ne.PutUint32(b[8:], uint32(index))
	ne.PutUint32(b[12:], uint32(start))
	ne.PutUint32(b[16:], uint32(count))
	for i, f := range fds {
		ne.PutUint32(b[hdr+4*i:], uint32(f))
	}
	if _, err := ioctl(fd, ioctlDeviceSetIRQs, unsafe.Pointer(&b[0]), 0); err != nil {
		return fmt.Errorf("VFIO_DEVICE_SET_IRQS(index %d, flags %#x, %d+%d) on %s: %w", index, flags, start, count, d.name, err)
	}
	return nil
}

// EnableMSIX enables n MSI-X vectors, each signalling its own eventfd
// (vector i → result[i]). Wait on an EventFD to take an interrupt. Enabling
// again replaces the previous set.
func (d *Device) EnableMSIX(n int) ([]*EventFD, error) {
	ii, err := d.IRQInfo(IRQMSIX)
	if err != nil {
		return nil, err
	}
	if !ii.EventFD || ii.Count == 0 {
		return nil, fmt.Errorf("%s has no MSI-X vectors with eventfd signalling: %w", d.name, ErrNotSupported)
	}
	if n <= 0 || n > ii.Count {
		return nil, fmt.Errorf("%s: %d MSI-X vectors requested, the device has %d", d.name, n, ii.Count)
	}
	if err := d.DisableMSIX(); err != nil {
		return nil, err
	}
	efds := make([]*EventFD, 0, n)
	fds := make([]int32, 0, n)
	closeAll := func() {
		for _, e := range efds {
			e.Close()
		}
	}
	for i := 0; i < n; i++ {
		e, err := NewEventFD()
		if err != nil {
			closeAll()
			return nil, err
		}
		efds = append(efds, e)
		fds = append(fds, int32(e.FD()))
	}
	if err := d.setIRQs(IRQMSIX, irqSetDataEventFD|irqSetActionTrigger, 0, n, fds); err != nil {
		closeAll()
		return nil, err
	}
	d.mu.Lock()
	d.msix = efds
	d.mu.Unlock()
	return efds, nil
}

// TriggerMSIX makes the kernel signal vector i's eventfd as if the device
// had raised it (VFIO_IRQ_SET_DATA_NONE | ACTION_TRIGGER): a loopback check
// of the interrupt path that does not need the device.
func (d *Device) TriggerMSIX(i int) error {
	return d.setIRQs(IRQMSIX, irqSetDataNone|irqSetActionTrigger, i, 1, nil)
}

// DisableMSIX turns MSI-X off and closes its eventfds.
func (d *Device) DisableMSIX() error {
	d.mu.Lock()
	efds := d.msix
	d.msix = nil
	d.mu.Unlock()
	if len(efds) == 0 {
		return nil
	}
	err := d.setIRQs(IRQMSIX, irqSetDataNone|irqSetActionTrigger, 0, 0, nil)
	for _, e := range efds {
		err = errors.Join(err, e.Close())
	}
	return err
}

// Reset is VFIO_DEVICE_RESET (function-level or bus reset, as the kernel
// can). ErrNotSupported when the device offers none. MSI-X and Bus Master
// are off afterwards; BAR mappings stay valid.
func (d *Device) Reset() error {
	if !d.info.CanReset {
		return fmt.Errorf("reset of %s: %w", d.name, ErrNotSupported)
	}
	fd, err := d.fdOrErr()
	if err != nil {
		return err
	}
	if _, err := ioctl(fd, ioctlDeviceReset, nil, 0); err != nil {
		return fmt.Errorf("VFIO_DEVICE_RESET on %s: %w", d.name, err)
	}
	return nil
}

// Close disables MSI-X, unmaps the regions and closes the device fd.
func (d *Device) Close() error {
	err := d.DisableMSIX()
	d.mu.Lock()
	maps := d.maps
	d.maps = nil
	fd := d.fd
	d.fd = -1
	owner := d.owner
	d.owner = nil
	d.mu.Unlock()
	for _, m := range maps {
		if uerr := munmap(m[:cap(m)]); uerr != nil {
			err = errors.Join(err, fmt.Errorf("munmap of %s region: %w", d.name, uerr))
		}
	}
	if fd >= 0 {
		if cerr := unix.Close(fd); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing %s: %w", d.name, cerr))
		}
	}
	if owner != nil {
		owner()
	}
	return err
}
