package hostcheck

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/p2p/topology"

	"github.com/strata-llm/strata/pci"
)

// Options say which host to check.
type Options struct {
	// Root is where the host's file systems are mounted: "" or "/" for this
	// machine; tests point it at a fake tree with sys/, proc/, dev/, boot/
	// and lib/modules/ below it.
	Root string
	// Release overrides the kernel release (default: what
	// proc/sys/kernel/osrelease says).
	Release string
}

// PCI identifiers the checks look for.
const (
	vendorNVIDIA  = 0x10de
	classDisplay  = 0x03 // base class of VGA and 3D controllers
	capIPCLockBit = 14   // CAP_IPC_LOCK in /proc/PID/status CapEff
)

// host is what the checks read, gathered once.
type host struct {
	root    string
	sys     pci.Sysfs
	release string
	ver     kernelVersion
	config  map[string]string // kernel config, nil when not found
	cmdline []string
	devs    []pci.Function
	nvme    []pci.Function
	gpus    []pci.Function
	devErr  error
}

func (h *host) path(p string) string { return filepath.Join(h.root, p) }

func (h *host) exists(p string) bool { _, err := os.Stat(h.path(p)); return err == nil }

func (h *host) read(p string) (string, error) {
	b, err := os.ReadFile(h.path(p))
	return strings.TrimSpace(string(b)), err
}

func newHost(o Options) *host {
	root := o.Root
	if root == "" {
		root = "/"
	}
	h := &host{root: root, sys: pci.Sysfs{Root: filepath.Join(root, "sys")}, release: o.Release}
	if h.release == "" {
		h.release, _ = h.read("proc/sys/kernel/osrelease")
	}
	h.ver, _ = parseKernelVersion(h.release)
	h.config = h.kernelConfig()
	if cl, err := h.read("proc/cmdline"); err == nil {
		h.cmdline = strings.Fields(cl)
	}
	h.devs, h.devErr = h.sys.Devices(0)
	for _, d := range h.devs {
		switch {
		case d.Class == pci.ClassNVMe:
			h.nvme = append(h.nvme, d)
		case d.Vendor == vendorNVIDIA && d.Class>>16 == classDisplay:
			h.gpus = append(h.gpus, d)
		}
	}
	return h
}

// kernelVersion is major.minor of a release string.
type kernelVersion struct{ major, minor int }

func (v kernelVersion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

func (v kernelVersion) known() bool { return v.major > 0 }

var releaseRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

func parseKernelVersion(release string) (kernelVersion, error) {
	m := releaseRE.FindStringSubmatch(release)
	if m == nil {
		return kernelVersion{}, fmt.Errorf("setup: kernel release %q has no version", release)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return kernelVersion{major, minor}, nil
}

// kernelConfig reads /boot/config-RELEASE (Debian, Ubuntu, Fedora install
// it). /proc/config.gz is not read: it needs CONFIG_IKCONFIG_PROC and gzip,
// and the checks treat a missing config as unknown.
func (h *host) kernelConfig() map[string]string {
	f, err := os.Open(h.path(filepath.Join("boot", "config-"+h.release)))
	if err != nil {
		return nil
	}
	defer f.Close()
	cfg := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && strings.HasPrefix(k, "CONFIG_") {
			cfg[k] = v
		}
	}
	return cfg
}

// configState is "y", "m", "n" or "" (config unknown).
func (h *host) configState(name string) string {
	if h.config == nil {
		return ""
	}
	if v, ok := h.config[name]; ok {
		return v
	}
	return "n"
}

// cmdlineValue returns the value of key=value on the kernel command line
// (the last one wins, as in the kernel), and whether it is there.
func (h *host) cmdlineValue(key string) (string, bool) {
	val, found := "", false
	for _, f := range h.cmdline {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			val, found = v, true
		} else if f == key {
			val, found = "", true
		}
	}
	return val, found
}

// moduleState says how a kernel module is present: loaded (or built in
// with a /sys/module entry), built in, available to modprobe, or missing.
// "unknown" when the host has no module tree to look in.
func (h *host) moduleState(name string) string {
	if h.exists(filepath.Join("sys/module", name)) {
		return "loaded"
	}
	dir := filepath.Join("lib/modules", h.release)
	file := strings.ReplaceAll(name, "_", "[-_]")
	re := regexp.MustCompile(`(^|/)` + file + `\.ko(\.[a-z]+)?:?`)
	if b, err := os.ReadFile(h.path(filepath.Join(dir, "modules.builtin"))); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if re.MatchString(l) {
				return "builtin"
			}
		}
	}
	b, err := os.ReadFile(h.path(filepath.Join(dir, "modules.dep")))
	if errors.Is(err, fs.ErrNotExist) {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, _, ok := strings.Cut(l, ":"); ok && re.MatchString(k) {
			return "available"
		}
	}
	return "missing"
}

// meminfo reads proc/meminfo into a map of numbers (kB or counts).
func (h *host) meminfo() map[string]int64 {
	m := map[string]int64{}
	s, err := h.read("proc/meminfo")
	if err != nil {
		return m
	}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// memlock reads this process's RLIMIT_MEMLOCK soft limit from
// proc/self/limits: bytes, -1 for unlimited.
func (h *host) memlock() (int64, error) {
	s, err := h.read("proc/self/limits")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "Max locked memory") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(l, "Max locked memory"))
		if len(f) < 1 {
			break
		}
		if f[0] == "unlimited" {
			return -1, nil
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("no \"Max locked memory\" line in /proc/self/limits")
}

// hasCap reports whether CapEff in proc/self/status has capability bit n.
func (h *host) hasCap(n uint) bool {
	s, err := h.read("proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<n) != 0
		}
	}
	return false
}

// groupMembers lists the other functions of a device's IOMMU group.
func (h *host) groupMembers(d pci.Function) []pci.Function {
	if d.IOMMUGroup < 0 {
		return nil
	}
	bdfs, err := h.sys.GroupDevices(d.IOMMUGroup)
	if err != nil {
		return nil
	}
	var out []pci.Function
	for _, b := range bdfs {
		if b == d.BDF {
			continue
		}
		m, err := h.sys.Device(b)
		if err != nil {
			m = pci.Function{BDF: b, IOMMUGroup: d.IOMMUGroup}
		}
		out = append(out, m)
	}
	return out
}

// resource reads a device's sysfs resource file.
func (h *host) resource(bdf string) (string, error) {
	return h.read(filepath.Join("sys/bus/pci/devices", bdf, "resource"))
}

// gpuAperture parses a GPU's BARs and finds its BAR1 aperture's resource
// index (topology.GPUAperture: 2 where BAR0 is 64-bit).
func (h *host) gpuAperture(bdf string) (bars []topology.BARInfo, index int, ok bool, err error) {
	text, err := h.resource(bdf)
	if err != nil {
		return nil, 0, false, err
	}
	if bars, err = topology.ParseResource(text); err != nil {
		return nil, 0, false, err
	}
	index, ok = topology.GPUAperture(bars)
	return bars, index, ok, nil
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
