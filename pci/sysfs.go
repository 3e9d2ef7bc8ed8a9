package pci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Sysfs binds PCI devices to drivers and finds their IOMMU groups through
// /sys. Root is the sysfs mount point ("/sys" when empty); tests point it at
// a fake tree.
type Sysfs struct {
	Root string
}

// Function is what sysfs says about one PCI function (what a BDF addresses).
type Function struct {
	BDF        string
	Vendor     uint16
	Device     uint16
	Class      uint32 // 24-bit class code, e.g. 0x010802 for NVMe
	Driver     string // "" when unbound
	IOMMUGroup int    // -1 when the device has none (no IOMMU)
}

// ClassNVMe is the PCI class code of NVMe controllers (mass storage,
// non-volatile memory, NVMe programming interface).
const ClassNVMe = 0x010802

func (s Sysfs) root() string {
	if s.Root == "" {
		return "/sys"
	}
	return s.Root
}

func (s Sysfs) devDir(bdf string) string {
	return filepath.Join(s.root(), "bus", "pci", "devices", bdf)
}

// Dir checks a PCI address and that the device exists, and returns its
// canonical form and its sysfs directory (/sys/bus/pci/devices/BDF), for
// lookups of attributes this type does not read itself (vfio's cdev node).
// ErrNoDevice when there is no such device.
func (s Sysfs) Dir(bdf string) (canon, dir string, err error) {
	canon, err = s.checkDevice(bdf)
	if err != nil {
		return "", "", err
	}
	return canon, s.devDir(canon), nil
}

func (s Sysfs) checkDevice(bdf string) (string, error) {
	canon, err := ParseBDF(bdf)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(s.devDir(canon)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("PCI device %s: %w", canon, ErrNoDevice)
		}
		return "", fmt.Errorf("PCI device %s: %w", canon, err)
	}
	return canon, nil
}

// IOMMUGroup returns the IOMMU group number of a device; ErrNoIOMMU when the
// device exists but has no group (the IOMMU is off).
func (s Sysfs) IOMMUGroup(bdf string) (int, error) {
	canon, err := s.checkDevice(bdf)
	if err != nil {
		return -1, err
	}
	link, err := os.Readlink(filepath.Join(s.devDir(canon), "iommu_group"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return -1, fmt.Errorf("PCI device %s has no IOMMU group (is the IOMMU enabled, e.g. intel_iommu=on?): %w", canon, ErrNoIOMMU)
		}
		return -1, fmt.Errorf("IOMMU group of %s: %w", canon, err)
	}
	n, err := strconv.Atoi(filepath.Base(link))
	if err != nil || n < 0 {
		return -1, fmt.Errorf("IOMMU group of %s: odd link %q", canon, link)
	}
	return n, nil
}

// GroupDevices lists the PCI addresses in IOMMU group n.
func (s Sysfs) GroupDevices(n int) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.root(), "kernel", "iommu_groups", strconv.Itoa(n), "devices"))
	if err != nil {
		return nil, fmt.Errorf("devices of IOMMU group %d: %w", n, err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// Driver returns the driver a device is bound to, "" when none.
func (s Sysfs) Driver(bdf string) (string, error) {
	canon, err := s.checkDevice(bdf)
	if err != nil {
		return "", err
	}
	link, err := os.Readlink(filepath.Join(s.devDir(canon), "driver"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("driver of %s: %w", canon, err)
	}
	return filepath.Base(link), nil
}

// Device reads a device's identity, driver and group.
func (s Sysfs) Device(bdf string) (Function, error) {
	canon, err := s.checkDevice(bdf)
	if err != nil {
		return Function{}, err
	}
	d := Function{BDF: canon, IOMMUGroup: -1}
	for _, f := range []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{"vendor", 16, func(v uint64) { d.Vendor = uint16(v) }},
		{"device", 16, func(v uint64) { d.Device = uint16(v) }},
		{"class", 24, func(v uint64) { d.Class = uint32(v) }},
	} {
		raw, err := os.ReadFile(filepath.Join(s.devDir(canon), f.name))
		if err != nil {
			return d, fmt.Errorf("PCI device %s: %w", canon, err)
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(raw)), "0x"), 16, f.bits)
		if err != nil {
			return d, fmt.Errorf("PCI device %s: bad %s %q", canon, f.name, strings.TrimSpace(string(raw)))
		}
		f.set(v)
	}
	if d.Driver, err = s.Driver(canon); err != nil {
		return d, err
	}
	if g, err := s.IOMMUGroup(canon); err == nil {
		d.IOMMUGroup = g
	} else if !errors.Is(err, ErrNoIOMMU) {
		return d, err
	}
	return d, nil
}

// Devices lists every PCI function, optionally only those of one class
// (class 0 lists all).
func (s Sysfs) Devices(class uint32) ([]Function, error) {
	ents, err := os.ReadDir(filepath.Join(s.root(), "bus", "pci", "devices"))
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	var out []Function
	for _, e := range ents {
		d, err := s.Device(e.Name())
		if err != nil {
			return nil, err
		}
		if class == 0 || d.Class == class {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s Sysfs) write(path, val string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(val))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("writing %q to %s: %w", val, path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("writing %q to %s: %w", val, path, cerr)
	}
	return nil
}

// Bind binds a device to driver ("vfio-pci", "nvme", …) the way the kernel
// documents for driver_override: set the override, unbind from the current
// driver, and ask the PCI core to probe again. With driver "" the override is
// cleared and the device goes back to whichever driver claims it by ID. It
// returns the driver the device had before, for a later Bind back.
// vfio-pci must be loaded for "vfio-pci".
func (s Sysfs) Bind(bdf, driver string) (prev string, err error) {
	canon, err := s.checkDevice(bdf)
	if err != nil {
		return "", err
	}
	prev, err = s.Driver(canon)
	if err != nil {
		return "", err
	}
	if driver != "" && prev == driver {
		return prev, nil
	}
	dir := s.devDir(canon)
	override := driver
	if override == "" {
		override = "\n" // clears driver_override
	}
	if err := s.write(filepath.Join(dir, "driver_override"), override); err != nil {
		return prev, fmt.Errorf("binding %s to %q: %w", canon, driver, err)
	}
	if prev != "" {
		if err := s.write(filepath.Join(dir, "driver", "unbind"), canon); err != nil {
			return prev, fmt.Errorf("unbinding %s from %s: %w", canon, prev, err)
		}
	}
	if err := s.write(filepath.Join(s.root(), "bus", "pci", "drivers_probe"), canon); err != nil {
		return prev, fmt.Errorf("probing %s: %w", canon, err)
	}
	now, err := s.Driver(canon)
	if err != nil {
		return prev, err
	}
	if driver != "" && now != driver {
		return prev, fmt.Errorf("binding %s to %s: device is bound to %q afterwards (is the %s module loaded?)", canon, driver, now, driver)
	}
	return prev, nil
}

// BindVFIO binds a device to vfio-pci and returns its previous driver.
func (s Sysfs) BindVFIO(bdf string) (string, error) { return s.Bind(bdf, "vfio-pci") }
