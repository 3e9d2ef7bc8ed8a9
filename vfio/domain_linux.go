package vfio

import (
	"errors"
	"fmt"
	"sync"
)

// Backend selects the kernel interface a Domain uses.
type Backend int

const (
	// BackendAuto picks iommufd + cdev when the kernel has both, else type1.
	BackendAuto Backend = iota
	// BackendType1 is the group/container interface with the type1v2 IOMMU.
	BackendType1
	// BackendIOMMUFD is /dev/iommu with VFIO device cdevs.
	BackendIOMMUFD
)

func (b Backend) String() string {
	switch b {
	case BackendType1:
		return "type1"
	case BackendIOMMUFD:
		return "iommufd"
	default:
		return "auto"
	}
}

// Domain is one DMA address space and the devices attached to it, over
// either backend: what the NVMe driver and the p2p targets program against.
// Devices opened through the same Domain see the same IOVAs, so a buffer
// (or another device's BAR) mapped once is reachable by all of them.
type Domain struct {
	backend Backend
	sys     Sysfs

	mu      sync.Mutex
	cont    *Container
	groups  map[int]*Group
	ifd     *IOMMUFD
	ioas    *IOAS
	devices map[*Device]bool
	closed  bool
}

// DomainOptions configure NewDomain.
type DomainOptions struct {
	Backend Backend
	// Sysfs root for device lookups ("/sys" when empty).
	Sysfs Sysfs
}

// NewDomain creates an empty DMA address space. With BackendAuto it uses iommufd
// when Probe finds both /dev/iommu and VFIO cdevs, else type1 (ErrNoIOMMU
// when neither works).
func NewDomain(opts DomainOptions) (*Domain, error) {
	b := opts.Backend
	if b == BackendAuto {
		p := Probe()
		switch {
		case p.IOMMUFD && p.Cdev:
			b = BackendIOMMUFD
		case p.Type1:
			b = BackendType1
		default:
			return nil, fmt.Errorf("no usable VFIO backend (%v): %w", p.Notes, ErrNoIOMMU)
		}
	}
	d := &Domain{backend: b, sys: opts.Sysfs, groups: map[int]*Group{}, devices: map[*Device]bool{}}
	switch b {
	case BackendType1:
		c, err := OpenContainer()
		if err != nil {
			return nil, err
		}
		d.cont = c
	case BackendIOMMUFD:
		f, err := OpenIOMMUFD()
		if err != nil {
			return nil, err
		}
		ioas, err := f.AllocIOAS()
		if err != nil {
			f.Close()
			return nil, err
		}
		d.ifd, d.ioas = f, ioas
	default:
		return nil, fmt.Errorf("unknown VFIO backend %d", b)
	}
	return d, nil
}

// Backend is the interface in use.
func (d *Domain) Backend() Backend { return d.backend }

// Container is the type1 container (nil with iommufd).
func (d *Domain) Container() *Container { return d.cont }

// IOAS is the iommufd address space (nil with type1).
func (d *Domain) IOAS() *IOAS { return d.ioas }

// OpenPCI opens a device already bound to vfio-pci and attaches it to the
// domain: with type1 its group joins the container (the first group sets the
// IOMMU model), with iommufd its cdev is bound and attached to the IOAS.
func (d *Domain) OpenPCI(bdf string) (*Device, error) {
	canon, err := ParseBDF(bdf)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("VFIO domain is closed")
	}
	var dev *Device
	switch d.backend {
	case BackendType1:
		n, err := d.sys.IOMMUGroup(canon)
		if err != nil {
			return nil, err
		}
		g := d.groups[n]
		if g == nil {
			if g, err = OpenGroup(n); err != nil {
				return nil, fmt.Errorf("opening %s (bound to vfio-pci?): %w", canon, err)
			}
			if err := g.SetContainer(d.cont); err != nil {
				g.Close()
				return nil, err
			}
			if err := d.cont.SetIOMMU(ExtType1v2); err != nil {
				g.Close()
				return nil, err
			}
			d.groups[n] = g
		}
		if dev, err = g.OpenDevice(canon); err != nil {
			return nil, err
		}
	case BackendIOMMUFD:
		if dev, err = OpenCdev(d.sys, canon, d.ifd, d.ioas); err != nil {
			return nil, err
		}
	}
	d.devices[dev] = true
	dev.owner = func() {
		d.mu.Lock()
		delete(d.devices, dev)
		d.mu.Unlock()
	}
	return dev, nil
}

func (d *Domain) mapper() DMAMapper {
	if d.cont != nil {
		return d.cont
	}
	return d.ioas
}

// MapDMA maps buf read-write for every device of the domain; see
// Container.MapDMA for what buf may be.
func (d *Domain) MapDMA(buf []byte) (uint64, error) { return d.mapper().MapDMA(buf) }

// Map is MapDMA with permissions and an optional fixed IOVA.
func (d *Domain) Map(buf []byte, opts MapOptions) (uint64, error) { return d.mapper().Map(buf, opts) }

// UnmapDMA removes the mapping at iova.
func (d *Domain) UnmapDMA(iova uint64) error { return d.mapper().UnmapDMA(iova) }

// Stats reports the mapping accounting.
func (d *Domain) Stats() DMAStats { return d.mapper().Stats() }

// Close closes the devices still open, unmaps every mapping and releases
// the groups and the container (or the IOAS and iommufd).
func (d *Domain) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	devs := make([]*Device, 0, len(d.devices))
	for dev := range d.devices {
		devs = append(devs, dev)
	}
	d.mu.Unlock()
	var errs []error
	for _, dev := range devs {
		errs = append(errs, dev.Close())
	}
	switch d.backend {
	case BackendType1:
		errs = append(errs, d.cont.Close()) // unmaps, then detaches the groups
		for _, g := range d.groups {
			errs = append(errs, g.Close())
		}
	case BackendIOMMUFD:
		errs = append(errs, d.ioas.Close(), d.ifd.Close())
	}
	return errors.Join(errs...)
}
