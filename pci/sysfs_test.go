package pci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fakeSysfs builds a /sys tree with two NVMe controllers (one bound to nvme,
// one to vfio-pci) and a device without an IOMMU group.
func fakeSysfs(t *testing.T) Sysfs {
	root := t.TempDir()
	mk := func(bdf, vendor, device, class, driver string, group int) {
		dir := filepath.Join(root, "bus/pci/devices", bdf)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"vendor": vendor, "device": device, "class": class, "driver_override": "(null)\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if driver != "" {
			ddir := filepath.Join(root, "bus/pci/drivers", driver)
			os.MkdirAll(ddir, 0o755)
			os.WriteFile(filepath.Join(ddir, "unbind"), nil, 0o644)
			if err := os.Symlink(ddir, filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
		}
		if group >= 0 {
			gdir := filepath.Join(root, "kernel/iommu_groups", itoa(group))
			os.MkdirAll(filepath.Join(gdir, "devices"), 0o755)
			os.Symlink(dir, filepath.Join(gdir, "devices", bdf))
			if err := os.Symlink(gdir, filepath.Join(dir, "iommu_group")); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("0000:00:04.0", "0x1b36", "0x0010", "0x010802", "nvme", 3)
	mk("0000:00:05.0", "0x1b36", "0x0010", "0x010802", "vfio-pci", 4)
	mk("0000:00:06.0", "0x1af4", "0x1110", "0x050000", "", -1)
	os.WriteFile(filepath.Join(root, "bus/pci/drivers_probe"), nil, 0o644)
	return Sysfs{Root: root}
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestSysfsLookups(t *testing.T) {
	t.Parallel()
	s := fakeSysfs(t)
	if g, err := s.IOMMUGroup("00:04.0"); err != nil || g != 3 {
		t.Errorf("IOMMUGroup = %d, %v", g, err)
	}
	if _, err := s.IOMMUGroup("0000:00:06.0"); !errors.Is(err, ErrNoIOMMU) {
		t.Errorf("device without group: %v, want ErrNoIOMMU", err)
	}
	if _, err := s.IOMMUGroup("0000:00:07.0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("missing device: %v, want ErrNoDevice", err)
	}
	if drv, err := s.Driver("0000:00:05.0"); err != nil || drv != "vfio-pci" {
		t.Errorf("Driver = %q, %v", drv, err)
	}
	if drv, err := s.Driver("0000:00:06.0"); err != nil || drv != "" {
		t.Errorf("Driver of unbound = %q, %v", drv, err)
	}
	nvmes, err := s.Devices(ClassNVMe)
	if err != nil {
		t.Fatal(err)
	}
	want := []Function{
		{BDF: "0000:00:04.0", Vendor: 0x1b36, Device: 0x10, Class: ClassNVMe, Driver: "nvme", IOMMUGroup: 3},
		{BDF: "0000:00:05.0", Vendor: 0x1b36, Device: 0x10, Class: ClassNVMe, Driver: "vfio-pci", IOMMUGroup: 4},
	}
	if !reflect.DeepEqual(nvmes, want) {
		t.Errorf("Devices = %+v\nwant %+v", nvmes, want)
	}
	if devs, err := s.GroupDevices(3); err != nil || !reflect.DeepEqual(devs, []string{"0000:00:04.0"}) {
		t.Errorf("GroupDevices = %v, %v", devs, err)
	}
	if canon, dir, err := s.Dir("00:05.0"); err != nil || canon != "0000:00:05.0" || dir != filepath.Join(s.Root, "bus/pci/devices/0000:00:05.0") {
		t.Errorf("Dir = %q, %q, %v", canon, dir, err)
	}
	if _, _, err := s.Dir("0000:00:07.0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Dir of a missing device: %v, want ErrNoDevice", err)
	}
}

// TestSysfsBindWrites checks the sequence of writes Bind makes. The fake
// tree cannot rebind, so Bind must notice the device did not move.
func TestSysfsBindWrites(t *testing.T) {
	t.Parallel()
	s := fakeSysfs(t)
	prev, err := s.BindVFIO("0000:00:04.0")
	if prev != "nvme" {
		t.Errorf("previous driver %q", prev)
	}
	if err == nil {
		t.Error("Bind reported success although the device stayed on nvme")
	}
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(s.Root, p))
		return string(b)
	}
	if got := read("bus/pci/devices/0000:00:04.0/driver_override"); got != "vfio-pci" {
		t.Errorf("driver_override = %q", got)
	}
	if got := read("bus/pci/drivers/nvme/unbind"); got != "0000:00:04.0" {
		t.Errorf("unbind got %q", got)
	}
	if got := read("bus/pci/drivers_probe"); got != "0000:00:04.0" {
		t.Errorf("drivers_probe got %q", got)
	}
	// Already bound: nothing to do.
	if prev, err := s.BindVFIO("0000:00:05.0"); err != nil || prev != "vfio-pci" {
		t.Errorf("BindVFIO of a bound device = %q, %v", prev, err)
	}
	if _, err := s.Bind("0000:00:09.0", "nvme"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Bind of a missing device: %v", err)
	}
}
