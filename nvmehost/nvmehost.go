package nvmehost

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/strata-llm/strata/pci"
)

// ErrInUse is returned by Claim for a controller the host still uses.
var ErrInUse = errors.New("devices: controller in use by the host")

// Host reads one machine's sysfs and procfs.
type Host struct {
	Sysfs pci.Sysfs // Root "" means /sys
	Proc  string    // "" means /proc
}

func (h Host) sys() string {
	if h.Sysfs.Root == "" {
		return "/sys"
	}
	return h.Sysfs.Root
}

func (h Host) proc() string {
	if h.Proc == "" {
		return "/proc"
	}
	return h.Proc
}

// Disk is a kernel block device of a controller bound to the nvme driver.
type Disk struct {
	Name       string   // "nvme0n1"
	NSID       int      // namespace ID, 0 if unknown
	Partitions []string // "nvme0n1p1", …
	Mounts     []string // "/dev/nvme0n1p1 on /boot", …
	Swap       []string // swap areas on the disk or its partitions
	Holders    []string // stacked devices (dm-0, md0, …)
}

// Controller is one NVMe function and what uses it.
type Controller struct {
	pci.Function
	Disks []Disk
}

// Users lists, one per line, why the controller cannot be taken from the
// host; empty when it can.
func (c Controller) Users() []string {
	var out []string
	for _, d := range c.Disks {
		for _, m := range d.Mounts {
			out = append(out, "mounted: "+m)
		}
		for _, s := range d.Swap {
			out = append(out, "swap: "+s)
		}
		for _, ho := range d.Holders {
			out = append(out, fmt.Sprintf("%s is held by %s", d.Name, ho))
		}
	}
	return out
}

// List returns every NVMe controller, its driver and IOMMU group, and
// the namespaces the kernel exposes for it with their users.
func (h Host) List() ([]Controller, error) {
	devs, err := h.Sysfs.Devices(pci.ClassNVMe)
	if err != nil {
		return nil, err
	}
	mounts, err := h.mounts()
	if err != nil {
		return nil, err
	}
	swaps := h.swaps()
	var out []Controller
	for _, d := range devs {
		c := Controller{Function: d}
		c.Disks = h.disks(d.BDF, mounts, swaps)
		out = append(out, c)
	}
	return out, nil
}

// Controller returns one controller by PCI address.
func (h Host) Controller(bdf string) (Controller, error) {
	canon, err := pci.ParseBDF(bdf)
	if err != nil {
		return Controller{}, err
	}
	all, err := h.List()
	if err != nil {
		return Controller{}, err
	}
	for _, c := range all {
		if c.BDF == canon {
			return c, nil
		}
	}
	return Controller{}, fmt.Errorf("devices: no NVMe controller at %s: %w", canon, pci.ErrNoDevice)
}

// Claim binds the controller to vfio-pci for the userspace driver and
// returns the driver it had. It refuses (ErrInUse, with the reasons) a
// controller whose namespaces are mounted, used as swap or held by a
// stacked device, and one without an IOMMU group.
func (h Host) Claim(bdf string) (string, error) {
	c, err := h.Controller(bdf)
	if err != nil {
		return "", err
	}
	if err := c.inUse(); err != nil {
		return c.Driver, err
	}
	if c.IOMMUGroup < 0 {
		return c.Driver, fmt.Errorf("devices: %s has no IOMMU group: %w", c.BDF, pci.ErrNoIOMMU)
	}
	if c.Driver == "vfio-pci" {
		return c.Driver, nil
	}
	return h.Sysfs.BindVFIO(c.BDF)
}

// Release gives the controller back to driver ("" means the kernel's
// nvme driver). Rebinding detaches the controller from the driver it has,
// so it refuses, as Claim does and with the same report, a controller
// whose namespaces the host uses: unbinding the disk that holds / or swap
// is no safer than binding it.
func (h Host) Release(bdf, driver string) error {
	if driver == "" {
		driver = "nvme"
	}
	c, err := h.Controller(bdf)
	if err != nil {
		return err
	}
	if err := c.inUse(); err != nil {
		return err
	}
	_, err = h.Sysfs.Bind(c.BDF, driver)
	return err
}

// inUse is the error (wrapping ErrInUse, listing the users) for a
// controller the host uses; nil when it uses none of it.
func (c Controller) inUse() error {
	if users := c.Users(); len(users) > 0 {
		return fmt.Errorf("devices: %s: %w: %s", c.BDF, ErrInUse, strings.Join(users, "; "))
	}
	return nil
}

// disks finds the block devices whose controller is the PCI function bdf,
// with and without native NVMe multipath (where a disk belongs to a
// subsystem whose controllers are listed beside it).
func (h Host) disks(bdf string, mounts map[string][]string, swaps map[string]string) []Disk {
	blocks, _ := filepath.Glob(filepath.Join(h.sys(), "block", "nvme*"))
	var out []Disk
	for _, b := range blocks {
		if !h.belongs(b, bdf) {
			continue
		}
		d := Disk{Name: filepath.Base(b)}
		fmt.Sscan(readTrim(filepath.Join(b, "nsid")), &d.NSID)
		names := []string{d.Name}
		ents, _ := os.ReadDir(b)
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(b, e.Name(), "partition")); err == nil {
				d.Partitions = append(d.Partitions, e.Name())
				names = append(names, e.Name())
			}
		}
		for _, n := range names {
			dir := b
			if n != d.Name {
				dir = filepath.Join(b, n)
			}
			for _, m := range mounts[readTrim(filepath.Join(dir, "dev"))] {
				d.Mounts = append(d.Mounts, fmt.Sprintf("/dev/%s on %s", n, m))
			}
			if s, ok := swaps[n]; ok {
				d.Swap = append(d.Swap, s)
			}
			hs, _ := os.ReadDir(filepath.Join(dir, "holders"))
			for _, ho := range hs {
				d.Holders = append(d.Holders, ho.Name())
			}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// belongs reports whether the block device directory b sits under the
// PCI function bdf, directly or through its multipath subsystem.
func (h Host) belongs(b, bdf string) bool {
	real, err := filepath.EvalSymlinks(b)
	if err != nil {
		return false
	}
	if hasComponent(real, bdf) {
		return true
	}
	// Multipath head: …/nvme-subsystem/nvme-subsysN/nvmeXnY; the
	// subsystem directory links to its controllers.
	sub := filepath.Dir(real)
	if !strings.HasPrefix(filepath.Base(sub), "nvme-subsys") {
		return false
	}
	ctrls, _ := filepath.Glob(filepath.Join(sub, "nvme[0-9]*"))
	for _, c := range ctrls {
		if r, err := filepath.EvalSymlinks(c); err == nil && hasComponent(r, bdf) {
			return true
		}
	}
	return false
}

func hasComponent(path, name string) bool {
	for _, p := range strings.Split(path, string(filepath.Separator)) {
		if p == name {
			return true
		}
	}
	return false
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// mounts maps "major:minor" to mount points, from mountinfo.
func (h Host) mounts() (map[string][]string, error) {
	f, err := os.Open(filepath.Join(h.proc(), "self", "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("devices: reading mounts: %w", err)
	}
	defer f.Close()
	m := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint …
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 {
			m[fields[2]] = append(m[fields[2]], fields[4])
		}
	}
	return m, sc.Err()
}

// swaps maps a device name ("nvme0n1p2") to its /proc/swaps entry.
func (h Host) swaps() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(filepath.Join(h.proc(), "swaps"))
	if err != nil {
		return out
	}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue
		}
		out[filepath.Base(f[0])] = f[0]
	}
	return out
}
