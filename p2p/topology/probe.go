package topology

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Peer names a device whose BAR could receive NVMe data.
type Peer struct {
	BDF string
	BAR int
}

// ProbeOptions say what to probe. Roots default to /sys and /proc; tests
// point them at fake trees.
type ProbeOptions struct {
	Sysfs string
	Proc  string
	NVMe  string // the controller's PCI address
	Peers []Peer
	// MemlockLimit is RLIMIT_MEMLOCK in bytes (filled in by Probe when 0;
	// -1 is unlimited).
	MemlockLimit int64
}

// Route is one way data could reach a target, and why it can or cannot.
type Route struct {
	Kind      Kind
	Peer      string // the peer device and BAR, for PeerBAR
	Available bool   // worth a self-test
	Reason    string // why not, or what to do next
	Facts     []string
}

// Report is the outcome of Probe.
type Report struct {
	NVMe   string
	Group  int // the controller's IOMMU group, -1 when none
	Driver string
	Routes []Route
}

// String renders the report for logs and `strata` output.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nvme %s driver=%s iommu_group=%d\n", r.NVMe, orNone(r.Driver), r.Group)
	for _, rt := range r.Routes {
		state := "no"
		if rt.Available {
			state = "yes"
		}
		fmt.Fprintf(&b, "  %-11s %-18s available=%s: %s\n", rt.Kind, rt.Peer, state, rt.Reason)
		for _, f := range rt.Facts {
			fmt.Fprintf(&b, "      %s\n", f)
		}
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

var bdfRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Probe reports which DMA routes exist for the controller, reading sysfs
// and PCI config space; it changes nothing. The answer is a candidate list:
// only SelfTest admits a target.
func Probe(o ProbeOptions) Report {
	if o.Sysfs == "" {
		o.Sysfs = "/sys"
	}
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.MemlockLimit == 0 {
		o.MemlockLimit = memlockLimit()
	}
	r := Report{NVMe: o.NVMe, Group: iommuGroup(o.Sysfs, o.NVMe), Driver: driver(o.Sysfs, o.NVMe)}
	r.Routes = append(r.Routes, probeHost(o, r))
	for _, p := range o.Peers {
		r.Routes = append(r.Routes, probePeer(o, r, p))
	}
	r.Routes = append(r.Routes, probeDmaBuf(o))
	return r
}

func devPath(sysfs, bdf string) string { return filepath.Join(sysfs, "bus/pci/devices", bdf) }

func iommuGroup(sysfs, bdf string) int {
	l, err := os.Readlink(filepath.Join(devPath(sysfs, bdf), "iommu_group"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(filepath.Base(l))
	if err != nil {
		return -1
	}
	return n
}

func driver(sysfs, bdf string) string {
	l, err := os.Readlink(filepath.Join(devPath(sysfs, bdf), "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

func probeHost(o ProbeOptions, r Report) Route {
	rt := Route{Kind: KindHostPinned, Available: true, Reason: "always possible with an IOMMU domain; admit with SelfTest"}
	switch {
	case !exists(devPath(o.Sysfs, o.NVMe)):
		rt.Available, rt.Reason = false, fmt.Sprintf("no PCI device %s", o.NVMe)
	case r.Group < 0:
		rt.Available, rt.Reason = false, "the controller has no IOMMU group: the IOMMU is off (strata never DMAs without one; enable intel_iommu=on / amd_iommu)"
	case r.Driver != "vfio-pci":
		rt.Available, rt.Reason = false, fmt.Sprintf("the controller is bound to %s, not vfio-pci", orNone(r.Driver))
	}
	if o.MemlockLimit < 0 {
		rt.Facts = append(rt.Facts, "RLIMIT_MEMLOCK unlimited")
	} else {
		rt.Facts = append(rt.Facts, fmt.Sprintf("RLIMIT_MEMLOCK %d bytes (pinned buffers beyond it need CAP_IPC_LOCK)", o.MemlockLimit))
	}
	if free, size, ok := hugepages(o.Proc); ok {
		rt.Facts = append(rt.Facts, fmt.Sprintf("hugepages: %d free of %d KiB", free, size))
	}
	return rt
}

func hugepages(proc string) (free, sizeKiB int64, ok bool) {
	f, err := os.Open(filepath.Join(proc, "meminfo"))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "HugePages_Free:":
			free, ok = v, true
		case "Hugepagesize:":
			sizeKiB = v
		}
	}
	return free, sizeKiB, ok
}

// BARInfo is one line of a device's sysfs resource file.
type BARInfo struct {
	Start, End, Flags uint64
}

// Size is the BAR's size in bytes (0 when unassigned).
func (b BARInfo) Size() uint64 {
	if b.Start == 0 && b.End == 0 {
		return 0
	}
	return b.End - b.Start + 1
}

// Memory says the BAR decodes memory space (IORESOURCE_MEM).
func (b BARInfo) Memory() bool { return b.Flags&0x200 != 0 }

// Prefetchable says the BAR is prefetchable (IORESOURCE_PREFETCH).
func (b BARInfo) Prefetchable() bool { return b.Flags&0x2000 != 0 }

// ParseResource decodes a sysfs resource file ("start end flags" in hex,
// one line per BAR).
func ParseResource(text string) ([]BARInfo, error) {
	var bars []BARInfo
	for i, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("p2p: resource line %d: %q", i, line)
		}
		var v [3]uint64
		for k := range f {
			n, err := strconv.ParseUint(strings.TrimPrefix(f[k], "0x"), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("p2p: resource line %d: %w", i, err)
			}
			v[k] = n
		}
		if v[1] < v[0] {
			return nil, fmt.Errorf("p2p: resource line %d: end before start", i)
		}
		bars = append(bars, BARInfo{v[0], v[1], v[2]})
	}
	return bars, nil
}

func probePeer(o ProbeOptions, r Report, p Peer) Route {
	rt := Route{Kind: KindPeerBAR, Peer: fmt.Sprintf("%s/bar%d", p.BDF, p.BAR)}
	dp := devPath(o.Sysfs, p.BDF)
	if !exists(dp) {
		rt.Reason = fmt.Sprintf("no PCI device %s", p.BDF)
		return rt
	}
	g := iommuGroup(o.Sysfs, p.BDF)
	drv := driver(o.Sysfs, p.BDF)
	rt.Facts = append(rt.Facts, fmt.Sprintf("driver=%s iommu_group=%d", orNone(drv), g))
	res, err := os.ReadFile(filepath.Join(dp, "resource"))
	var bars []BARInfo
	if err == nil {
		bars, err = ParseResource(string(res))
	}
	if err != nil {
		rt.Reason = fmt.Sprintf("cannot read BARs: %v", err)
		return rt
	}
	if p.BAR < 0 || p.BAR >= len(bars) || p.BAR > 5 {
		rt.Reason = fmt.Sprintf("BAR %d does not exist", p.BAR)
		return rt
	}
	bar := bars[p.BAR]
	rt.Facts = append(rt.Facts, fmt.Sprintf("bar%d: %d bytes at %#x, memory=%v prefetchable=%v", p.BAR, bar.Size(), bar.Start, bar.Memory(), bar.Prefetchable()))
	path, pathErr := upstream(o.Sysfs, p.BDF)
	nvPath, nvErr := upstream(o.Sysfs, o.NVMe)
	if pathErr == nil && nvErr == nil {
		rt.Facts = append(rt.Facts, topologyFacts(o.Sysfs, nvPath, path)...)
	}
	switch {
	case r.Group < 0:
		rt.Reason = "the controller has no IOMMU group (IOMMU off)"
	case !bar.Memory() || bar.Size() < 4096:
		rt.Reason = fmt.Sprintf("BAR %d is not a memory BAR of at least 4 KiB", p.BAR)
	case g < 0:
		rt.Reason = "the peer has no IOMMU group"
	case drv != "vfio-pci" && !exists(filepath.Join(dp, fmt.Sprintf("resource%d", p.BAR))):
		rt.Reason = fmt.Sprintf("peer bound to %s and its BAR is not mappable through sysfs", orNone(drv))
	default:
		rt.Available = true
		rt.Reason = "candidate: map the BAR into the controller's domain and admit it with SelfTest"
		if g == r.Group {
			rt.Facts = append(rt.Facts, "same IOMMU group as the controller: they cannot be isolated from each other")
		}
	}
	return rt
}

// upstream returns the chain of PCI functions from the root down to bdf,
// from the resolved sysfs device path.
func upstream(sysfs, bdf string) ([]string, error) {
	real, err := filepath.EvalSymlinks(devPath(sysfs, bdf))
	if err != nil {
		return nil, err
	}
	var chain []string
	for _, part := range strings.Split(real, string(filepath.Separator)) {
		if bdfRE.MatchString(part) {
			chain = append(chain, part)
		}
	}
	return chain, nil
}

// topologyFacts describes the path between the two devices and the ACS
// settings of the bridges on it.
func topologyFacts(sysfs string, a, b []string) []string {
	common := 0
	for common < len(a)-1 && common < len(b)-1 && a[common] == b[common] {
		common++
	}
	bridges := append(append([]string(nil), a[common:len(a)-1]...), b[common:len(b)-1]...)
	var facts []string
	if common > 0 {
		facts = append(facts, fmt.Sprintf("common upstream bridge %s", a[common-1]))
	} else {
		facts = append(facts, "no common PCI bridge: peer traffic crosses the root complex (needs root-complex peer-to-peer support)")
	}
	if len(bridges) == 0 && common == 0 {
		facts = append(facts, "both devices sit on the root bus (root-complex integrated endpoints)")
	}
	for _, br := range bridges {
		cfg, err := os.ReadFile(filepath.Join(devPath(sysfs, br), "config"))
		if err != nil {
			facts = append(facts, fmt.Sprintf("bridge %s: config space unreadable: %v", br, err))
			continue
		}
		ctl, ok := ACSControl(cfg)
		switch {
		case !ok && len(cfg) <= 256:
			facts = append(facts, fmt.Sprintf("bridge %s: extended config space not readable (needs root)", br))
		case !ok:
			facts = append(facts, fmt.Sprintf("bridge %s: no ACS capability (peer requests are routed by the switch, not checked by the IOMMU)", br))
		default:
			facts = append(facts, fmt.Sprintf("bridge %s: ACS control %#04x: %s", br, ctl, describeACS(ctl)))
		}
	}
	return facts
}

// ACSControl finds the ACS extended capability (ID 0x000d) in a config
// space dump and returns its control register.
func ACSControl(cfg []byte) (uint16, bool) {
	off := 0x100
	for seen := 0; off >= 0x100 && off+8 <= len(cfg) && seen < 64; seen++ {
		hdr := binary.LittleEndian.Uint32(cfg[off:])
		if hdr == 0 || hdr == 0xffffffff {
			return 0, false
		}
		if hdr&0xffff == 0x000d {
			return binary.LittleEndian.Uint16(cfg[off+6:]), true
		}
		next := int(hdr>>20) &^ 3
		if next <= off {
			return 0, false
		}
		off = next
	}
	return 0, false
}

func describeACS(ctl uint16) string {
	var on []string
	names := []string{"source validation", "translation blocking", "P2P request redirect", "P2P completion redirect", "upstream forwarding", "P2P egress control", "direct translated P2P"}
	for i, n := range names {
		if ctl&(1<<i) != 0 {
			on = append(on, n)
		}
	}
	s := "none enabled"
	if len(on) > 0 {
		s = strings.Join(on, ", ")
	}
	if ctl&(1<<2) != 0 {
		s += " — peer requests go up to the root complex and through the IOMMU"
	} else {
		s += " — peer requests may be routed directly by the switch"
	}
	return s
}

func probeDmaBuf(o ProbeOptions) Route {
	rt := Route{Kind: KindDmaBuf, Reason: "CUDA dma-buf export not probed: the engine's CUDA binding has no dma-buf export, and this package does not fake one. " +
		"Importing a CUDA dma-buf into the NVMe's IOMMU domain needs kernel support that does not exist yet (iommufd's IOMMU_IOAS_MAP_FILE accepts only certain exporters; VFIO-exported buffers from Linux 6.19)"}
	if o.Sysfs == "/sys" { // a real system, not a fake tree
		if exists("/dev/iommu") {
			rt.Facts = append(rt.Facts, "/dev/iommu present (iommufd)")
		} else {
			rt.Facts = append(rt.Facts, "/dev/iommu absent: this kernel has no iommufd")
		}
	}
	if v, err := os.ReadFile(filepath.Join(o.Proc, "sys/kernel/osrelease")); err == nil {
		rt.Facts = append(rt.Facts, "kernel "+strings.TrimSpace(string(v)))
	}
	return rt
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
