package hostcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/strata-llm/strata/p2p/topology"
	"github.com/strata-llm/strata/pci"
)

// Kernel versions of the features strata uses, each from the merge that
// brought it (torvalds/linux):
//   - iommufd (/dev/iommu): 6.2, merge 08cdc2157966 "Merge tag
//     'for-linus-iommufd'".
//   - VFIO device cdev (/dev/vfio/devices/vfioN, VFIO_DEVICE_BIND_IOMMUFD):
//     6.6, merge ec0e2dc81072 "Merge tag 'vfio-v6.6-rc1'".
//   - IOMMU_IOAS_MAP_FILE: 6.13, commit f4986a72d6e4 "iommufd: Add
//     IOMMU_IOAS_MAP_FILE", pulled by merge 341d041daae5.
//   - VFIO dma-buf export of BARs (VFIO_DEVICE_FEATURE_DMA_BUF) and its
//     import by iommufd: 6.19, commit 5d74781ebc86 "vfio/pci: Add dma-buf
//     export support for MMIO regions", merge a3ebb59eee2e "Merge tag
//     'vfio-v6.19-rc1'".
var kernelFeatures = []struct {
	id           string
	what         string
	major, minor int
	config       string
	without      string
}{
	{"kernel-iommufd", "iommufd (/dev/iommu)", 6, 2, "CONFIG_IOMMUFD",
		"strata uses the VFIO type1 container instead (works; iommufd is the newer interface)"},
	{"kernel-vfio-cdev", "VFIO device cdev", 6, 6, "CONFIG_VFIO_DEVICE_CDEV",
		"devices are opened through their VFIO group instead"},
	{"kernel-ioas-map-file", "IOMMU_IOAS_MAP_FILE", 6, 13, "CONFIG_IOMMUFD",
		"no file-backed DMA mappings, so no dma-buf route"},
	{"kernel-vfio-dmabuf", "VFIO dma-buf export", 6, 19, "CONFIG_DMA_SHARED_BUFFER",
		"VFIO-owned BARs cannot be shared as dma-bufs; the peer-bar route maps them directly"},
}

// Check inspects the host and changes nothing. It never fails: what it
// cannot read becomes a warn or fail line saying so.
func Check(o Options) Report {
	h := newHost(o)
	r := Report{Kernel: h.release}
	add := func(res ...Result) { r.Results = append(r.Results, res...) }
	add(checkKernel(h)...)
	vfio := []Result{checkIOMMU(h), checkVFIOModules(h), checkVFIODev(h)}
	if len(h.nvme) == 0 {
		// VFIO and the IOMMU serve only the userspace NVMe driver: with no
		// controller for it to drive, their absence costs nothing a user of
		// this host has (models run, tier C reads files with O_DIRECT), so
		// it is a warning, not a failure.
		for i := range vfio {
			if vfio[i].Status == Fail {
				vfio[i].Status = Warn
				vfio[i].Summary += " (no NVMe controller here for it to drive, so nothing is lost yet)"
			}
		}
	}
	add(vfio...)
	add(checkCdev(h))
	add(checkGroups(h)...)
	add(checkACS(h)...)
	add(checkMemlock(h), checkHugepages(h), checkNVIDIA(h), checkDmaBuf(h))
	add(checkBAR1(h)...)
	add(checkGdrdrv(h))
	r.Route = chooseRoute(h, r)
	return r
}

func checkKernel(h *host) []Result {
	if !h.ver.known() {
		return []Result{{ID: "kernel", Status: Warn, Summary: fmt.Sprintf("kernel release %q unreadable: features by version unknown", h.release),
			Fix: "check that /proc is mounted"}}
	}
	var out []Result
	for _, f := range kernelFeatures {
		res := Result{ID: f.id}
		cfg := h.configState(f.config)
		switch {
		case !h.ver.atLeast(f.major, f.minor):
			res.Status = Warn
			res.Summary = fmt.Sprintf("%s needs Linux %d.%d, this is %s: %s", f.what, f.major, f.minor, h.release, f.without)
			res.Fix = fmt.Sprintf("a kernel ≥ %d.%d for %s", f.major, f.minor, f.what)
		case cfg == "n":
			res.Status = Warn
			res.Summary = fmt.Sprintf("%s: Linux %s is new enough but built without %s: %s", f.what, h.release, f.config, f.without)
			res.Fix = fmt.Sprintf("a kernel built with %s=y or =m", f.config)
		default:
			res.Status = Pass
			res.Summary = fmt.Sprintf("%s: Linux %s ≥ %d.%d", f.what, h.release, f.major, f.minor)
			if cfg != "" {
				res.Summary += fmt.Sprintf(" (%s=%s)", f.config, cfg)
			}
		}
		out = append(out, res)
	}
	return out
}

// iommuMode is the outcome of IOMMU detection.
type iommuMode string

const (
	iommuTranslated  iommuMode = "translated"
	iommuPassthrough iommuMode = "passthrough"
	iommuOff         iommuMode = "off"
)

// detectIOMMU finds the IOMMU's mode without dmesg: hardware units under
// /sys/class/iommu, groups under /sys/kernel/iommu_groups and their default
// domain type (DMA, DMA-FQ: translated; identity: passthrough), and the
// kernel command line.
func detectIOMMU(h *host) (mode iommuMode, details []string) {
	units, _ := os.ReadDir(h.path("sys/class/iommu"))
	var names []string
	for _, u := range units {
		names = append(names, u.Name())
	}
	groups, _ := os.ReadDir(h.path("sys/kernel/iommu_groups"))
	types := map[string]int{}
	for _, g := range groups {
		t, err := h.read(filepath.Join("sys/kernel/iommu_groups", g.Name(), "type"))
		if err != nil {
			t = "unknown"
		}
		types[t]++
	}
	var tl []string
	for t, n := range types {
		tl = append(tl, fmt.Sprintf("%s×%d", t, n))
	}
	sort.Strings(tl)
	details = append(details, fmt.Sprintf("units: %s; groups: %d (%s)", orNone(strings.Join(names, ", ")), len(groups), orNone(strings.Join(tl, ", "))))
	var args []string
	for _, k := range []string{"intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict"} {
		if v, ok := h.cmdlineValue(k); ok {
			args = append(args, k+"="+v)
		}
	}
	details = append(details, "kernel command line: "+orNone(strings.Join(args, " ")))
	if len(groups) == 0 {
		return iommuOff, details
	}
	if types["identity"] == len(groups) {
		return iommuPassthrough, details
	}
	if types["identity"] > 0 {
		details = append(details, "some groups use identity (passthrough) default domains")
	}
	return iommuTranslated, details
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// cpuVendor says which IOMMU option applies: "intel", "amd" or "".
func cpuVendor(h *host) string {
	s, _ := h.read("proc/cpuinfo")
	switch {
	case strings.Contains(s, "GenuineIntel"):
		return "intel"
	case strings.Contains(s, "AuthenticAMD"):
		return "amd"
	}
	return ""
}

func checkIOMMU(h *host) Result {
	mode, details := detectIOMMU(h)
	res := Result{ID: "iommu", Details: details}
	switch mode {
	case iommuTranslated:
		res.Status, res.Summary = Pass, "IOMMU on, translated: host drivers' DMA is remapped too"
	case iommuPassthrough:
		res.Status, res.Summary = Pass, "IOMMU on, passthrough for host drivers (iommu=pt): VFIO devices still get their own translated domains"
	default:
		res.Status, res.Summary = Fail, "IOMMU off: no IOMMU groups, so no VFIO and no userspace NVMe driver (strata never DMAs without an IOMMU)"
		switch v, _ := h.cmdlineValue("intel_iommu"); {
		case cpuVendor(h) == "amd":
			res.Fix = "enable AMD-Vi/IOMMU in the firmware setup; remove amd_iommu=off and iommu=off from the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot)"
		case v == "off":
			res.Fix = "replace intel_iommu=off with intel_iommu=on (iommu=pt keeps host drivers fast) in GRUB_CMDLINE_LINUX, update-grub, reboot; and enable VT-d in the firmware setup"
		default:
			res.Fix = "enable VT-d / AMD-Vi in the firmware setup and add intel_iommu=on (Intel; iommu=pt keeps host drivers fast) to GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot"
		}
	}
	return res
}

func checkVFIOModules(h *host) Result {
	res := Result{ID: "vfio-modules"}
	mods := []string{"vfio", "vfio_pci", "vfio_iommu_type1", "iommufd"}
	state := map[string]string{}
	for _, m := range mods {
		state[m] = h.moduleState(m)
		res.Details = append(res.Details, m+": "+state[m])
	}
	usable := func(m string) bool { return state[m] == "loaded" || state[m] == "builtin" }
	gettable := func(m string) bool { return usable(m) || state[m] == "available" }
	backend := usable("vfio_iommu_type1") || usable("iommufd")
	switch {
	case usable("vfio") && usable("vfio_pci") && backend:
		res.Status, res.Summary = Pass, "vfio, vfio-pci and an IOMMU backend are loaded"
	case gettable("vfio") && gettable("vfio_pci") && (gettable("vfio_iommu_type1") || gettable("iommufd")):
		res.Status, res.Summary = Warn, "VFIO modules are installed but not loaded"
		res.Fix = "modprobe vfio-pci (setup/vfio-bind.sh loads it and makes it persistent)"
	case state["vfio"] == "unknown" && state["vfio_pci"] == "unknown":
		res.Status, res.Summary = Warn, "VFIO modules not loaded, and no module tree under /lib/modules/"+h.release+" to tell whether they exist"
		res.Fix = "install the kernel's modules package (Debian: linux-image-$(uname -r)) and modprobe vfio-pci"
	default:
		res.Status, res.Summary = Fail, "this kernel has no vfio-pci: no userspace NVMe driver"
		res.Fix = "a kernel built with CONFIG_VFIO_PCI (every distribution kernel is)"
	}
	return res
}

func checkVFIODev(h *host) Result {
	res := Result{ID: "vfio-dev"}
	c := h.exists(strings.TrimPrefix(pci.VFIOContainerPath, "/"))
	f := h.exists(strings.TrimPrefix(pci.IOMMUFDPath, "/"))
	res.Details = []string{fmt.Sprintf("%s: %v, %s: %v", pci.VFIOContainerPath, c, pci.IOMMUFDPath, f)}
	mode, _ := detectIOMMU(h)
	switch {
	case (c || f) && mode == iommuOff:
		// The nodes exist as soon as the modules load, but with no IOMMU
		// groups there is nothing a container or IOAS can attach.
		res.Status, res.Summary = Fail, "VFIO device nodes present, but the IOMMU is off: no device can be attached"
		res.Fix = "turn the IOMMU on (see the iommu line); the device nodes alone are not enough"
	case c && f:
		res.Status, res.Summary = Pass, "VFIO container and iommufd device nodes present"
	case c || f:
		res.Status, res.Summary = Pass, "one VFIO interface present ("+map[bool]string{true: "type1 container", false: "iommufd"}[c]+")"
	default:
		res.Status, res.Summary = Fail, "neither /dev/vfio/vfio nor /dev/iommu exists"
		res.Fix = "modprobe vfio-pci (and iommufd on Linux ≥ 6.2); with the IOMMU off VFIO cannot work at all"
	}
	return res
}

func checkCdev(h *host) Result {
	res := Result{ID: "vfio-cdev"}
	cfg := h.configState("CONFIG_VFIO_DEVICE_CDEV")
	dir := h.exists("dev/vfio/devices")
	res.Details = []string{fmt.Sprintf("/dev/vfio/devices: %v; CONFIG_VFIO_DEVICE_CDEV: %s", dir, orNone(cfg))}
	switch {
	case dir:
		res.Status, res.Summary = Pass, "VFIO cdev in use (/dev/vfio/devices exists)"
	case cfg == "y":
		res.Status, res.Summary = Pass, "kernel has VFIO cdev; /dev/vfio/devices appears once a device is bound to vfio-pci"
	case h.ver.known() && !h.ver.atLeast(6, 6):
		res.Status, res.Summary = Warn, "no VFIO cdev before Linux 6.6: devices are opened through groups (type1)"
		res.Fix = "a kernel ≥ 6.6 with CONFIG_VFIO_DEVICE_CDEV=y for the iommufd path (optional)"
	case cfg == "n" || onVFIO(h):
		res.Status, res.Summary = Warn, "kernel built without CONFIG_VFIO_DEVICE_CDEV (no /dev/vfio/devices): devices are opened through groups (type1)"
		res.Fix = "a kernel with CONFIG_VFIO_DEVICE_CDEV=y for the iommufd path (optional)"
	default:
		res.Status, res.Summary = Warn, "VFIO cdev support unknown (no kernel config, no device bound to vfio-pci yet)"
		res.Fix = "bind an NVMe with setup/vfio-bind.sh and run the check again"
	}
	return res
}

// onVFIO says whether any PCI function is bound to vfio-pci.
func onVFIO(h *host) bool {
	for _, d := range h.devs {
		if d.Driver == "vfio-pci" {
			return true
		}
	}
	return false
}

func describeDev(d pci.Function) string {
	return fmt.Sprintf("%s [%04x:%04x] driver=%s", d.BDF, d.Vendor, d.Device, orNone(d.Driver))
}

// hostDriverHolds says whether a device's driver keeps its group from
// being used by VFIO (VFIO needs every endpoint of a group on vfio-pci or
// on no driver; bridges on pcieport are fine).
func hostDriverHolds(d pci.Function) bool {
	return d.Driver != "" && d.Driver != "vfio-pci" && d.Driver != "pcieport" && d.Class>>16 != 0x06
}

func checkGroups(h *host) []Result {
	if h.devErr != nil {
		return []Result{{ID: "iommu-groups", Status: Warn, Summary: "cannot list PCI devices: " + h.devErr.Error(), Fix: "check that /sys is mounted"}}
	}
	var out []Result
	if len(h.nvme) == 0 {
		out = append(out, Result{ID: "iommu-groups", Status: Warn, Summary: "no NVMe controller: tier C reads files through the kernel (O_DIRECT)",
			Fix: "add an NVMe drive to use strata's userspace driver"})
	}
	gpuGroup := map[int]string{}
	for _, g := range h.gpus {
		if g.IOMMUGroup >= 0 {
			gpuGroup[g.IOMMUGroup] = g.BDF
		}
	}
	for _, d := range h.nvme {
		res := Result{ID: "iommu-group " + d.BDF, Details: []string{"nvme " + describeDev(d)}}
		if d.IOMMUGroup < 0 {
			res.Status, res.Summary = Fail, "NVMe "+d.BDF+" has no IOMMU group (IOMMU off)"
			res.Fix = "turn the IOMMU on (see the iommu line)"
			out = append(out, res)
			continue
		}
		members := h.groupMembers(d)
		var holders []string
		for _, m := range members {
			res.Details = append(res.Details, fmt.Sprintf("shares group %d with %s", d.IOMMUGroup, describeDev(m)))
			if hostDriverHolds(m) {
				holders = append(holders, m.BDF+" ("+m.Driver+")")
			}
		}
		switch {
		case gpuGroup[d.IOMMUGroup] != "":
			res.Status = Fail
			res.Summary = fmt.Sprintf("NVMe %s shares IOMMU group %d with GPU %s: VFIO must own the whole group, so the GPU's driver and the userspace NVMe driver exclude each other", d.BDF, d.IOMMUGroup, gpuGroup[d.IOMMUGroup])
			res.Fix = "move the NVMe or the GPU to a slot under a different root port (or a switch with ACS), so they get separate groups; pcie_acs_override is not a fix: it only hides the missing isolation"
		case len(holders) > 0:
			res.Status = Fail
			res.Summary = fmt.Sprintf("NVMe %s's IOMMU group %d also holds devices on host drivers: %s (the group is not viable for VFIO)", d.BDF, d.IOMMUGroup, strings.Join(holders, ", "))
			res.Fix = "bind every device of the group to vfio-pci (setup/vfio-bind.sh), or use a slot whose group holds the NVMe alone"
		case len(members) > 0:
			res.Status = Warn
			res.Summary = fmt.Sprintf("NVMe %s is in IOMMU group %d with %d other function(s), none on a host driver", d.BDF, d.IOMMUGroup, len(members))
			res.Fix = "fine as long as those stay on vfio-pci or unbound"
		default:
			res.Status = Pass
			res.Summary = fmt.Sprintf("NVMe %s is alone in IOMMU group %d", d.BDF, d.IOMMUGroup)
		}
		out = append(out, res)
	}
	for _, g := range h.gpus {
		res := Result{ID: "iommu-group " + g.BDF, Details: []string{"gpu " + describeDev(g)}}
		switch {
		case g.IOMMUGroup < 0:
			res.Status, res.Summary = Warn, "GPU "+g.BDF+" has no IOMMU group (IOMMU off): no peer-to-peer route into it"
			res.Fix = "turn the IOMMU on (see the iommu line)"
		default:
			res.Status, res.Summary = Pass, fmt.Sprintf("GPU %s is in IOMMU group %d", g.BDF, g.IOMMUGroup)
			for _, m := range h.groupMembers(g) {
				res.Details = append(res.Details, fmt.Sprintf("shares group %d with %s", g.IOMMUGroup, describeDev(m)))
			}
		}
		out = append(out, res)
	}
	return out
}

// acsVerdict grades the path between an NVMe and a GPU for peer DMA.
type acsVerdict struct {
	status  Status
	summary string
	fix     string
	details []string
	blocked bool // peer requests cannot reach the GPU
}

func gradePath(p topology.PCIPath) acsVerdict {
	var v acsVerdict
	if p.Common != "" {
		v.details = append(v.details, "common upstream bridge "+p.Common)
	} else {
		v.details = append(v.details, "no common bridge: peer traffic crosses the root complex")
	}
	var redirect, egress, unknown []string
	for _, b := range p.Bridges {
		v.details = append(v.details, "bridge "+b.BDF+": "+b.Describe())
		switch {
		case !b.Readable:
			unknown = append(unknown, b.BDF)
		case b.HasACS && b.ACS&topology.ACSEgress != 0:
			egress = append(egress, b.BDF)
		case b.HasACS && b.ACS&topology.ACSRedirect != 0:
			redirect = append(redirect, b.BDF)
		}
	}
	switch {
	case len(egress) > 0:
		v.status, v.blocked = Fail, true
		v.summary = "ACS P2P egress control on " + strings.Join(egress, ", ") + " blocks peer requests: no peer-bar route"
		v.fix = "clear ACS egress control on those ports (firmware setting, or setpci ECAP_ACS+6.w) — or let strata use host-pinned memory"
	case len(redirect) > 0:
		v.status = Warn
		v.summary = "ACS redirects peer requests on " + strings.Join(redirect, ", ") + " up to the root complex: peer-bar works only where the root complex forwards peer traffic, at its speed (the self-test decides)"
		v.fix = "on a PCIe switch, turning off ACS P2P redirect gives the direct path but merges the IOMMU groups below it; keep it on unless the root complex cannot forward"
	case len(unknown) > 0:
		v.status = Warn
		v.summary = "ACS unknown on " + strings.Join(unknown, ", ") + " (extended config space needs root)"
		v.fix = "run the check as root"
	case p.Common == "":
		v.status = Warn
		v.summary = "the devices meet only at the root complex: peer-bar depends on its peer-to-peer support (the self-test decides)"
		v.fix = "for the fastest path put the NVMe and GPU under one PCIe switch"
	default:
		v.status = Pass
		v.summary = "no ACS redirect or egress control between them: peer requests take the direct path under " + p.Common
	}
	return v
}

func checkACS(h *host) []Result {
	if len(h.nvme) == 0 || len(h.gpus) == 0 {
		return []Result{{ID: "acs", Status: Warn, Summary: fmt.Sprintf("no NVMe–GPU pair to check (%d NVMe, %d NVIDIA GPU)", len(h.nvme), len(h.gpus)),
			Fix: "peer-to-peer needs both an NVMe controller and a GPU"}}
	}
	var out []Result
	for _, n := range h.nvme {
		for _, g := range h.gpus {
			res := Result{ID: "acs " + n.BDF + "→" + g.BDF}
			p, err := topology.Path(h.sys.Root, n.BDF, g.BDF)
			if err != nil {
				res.Status, res.Summary = Warn, "cannot trace the PCI path: "+err.Error()
				out = append(out, res)
				continue
			}
			v := gradePath(p)
			res.Status, res.Summary, res.Fix, res.Details = v.status, v.summary, v.fix, v.details
			out = append(out, res)
		}
	}
	return out
}

func checkMemlock(h *host) Result {
	res := Result{ID: "memlock"}
	lim, err := h.memlock()
	capLock := h.hasCap(capIPCLockBit)
	switch {
	case err != nil:
		res.Status, res.Summary = Warn, "RLIMIT_MEMLOCK unreadable: "+err.Error()
	case lim < 0:
		res.Status, res.Summary = Pass, "RLIMIT_MEMLOCK unlimited"
	case capLock:
		res.Status, res.Summary = Pass, fmt.Sprintf("RLIMIT_MEMLOCK %s, but this process has CAP_IPC_LOCK, which lifts it for mlock and VFIO pinning", humanBytes(uint64(lim)))
	default:
		res.Status = Warn
		res.Summary = fmt.Sprintf("RLIMIT_MEMLOCK %s without CAP_IPC_LOCK: pinned host memory (tier B, DMA buffers) beyond it fails", humanBytes(uint64(lim)))
		res.Fix = "run stratad from setup/systemd/stratad.service (LimitMEMLOCK=infinity, CAP_IPC_LOCK), or raise memlock in /etc/security/limits.d/"
	}
	res.Details = []string{"checked for this process; stratad's own limit comes from its unit or shell"}
	return res
}

func checkHugepages(h *host) Result {
	m := h.meminfo()
	res := Result{ID: "hugepages"}
	total, free, size := m["HugePages_Total"], m["HugePages_Free"], m["Hugepagesize"]
	res.Details = []string{fmt.Sprintf("HugePages_Total %d, HugePages_Free %d, Hugepagesize %d kB", total, free, size)}
	switch {
	case len(m) == 0:
		res.Status, res.Summary = Warn, "/proc/meminfo unreadable"
	case total == 0:
		res.Status, res.Summary = Warn, "no hugepages reserved: DMA buffers use 4 KiB pages (more IOMMU mappings, more TLB misses)"
		res.Fix = "setup/hugepages.sh --pages 1024 (2 GiB of 2 MiB pages, persistent)"
	case free == 0:
		res.Status, res.Summary = Warn, fmt.Sprintf("all %d hugepages are in use", total)
		res.Fix = "reserve more: setup/hugepages.sh --pages N"
	default:
		res.Status, res.Summary = Pass, fmt.Sprintf("%d of %d hugepages of %d kB free", free, total, size)
	}
	return res
}

func checkNVIDIA(h *host) Result {
	res := Result{ID: "nvidia-driver"}
	v, err := h.read("proc/driver/nvidia/version")
	first, _, _ := strings.Cut(v, "\n")
	switch {
	case err != nil && len(h.gpus) == 0:
		res.Status, res.Summary = Warn, "no NVIDIA GPU or driver: the CPU backend runs the model"
		res.Fix = "for GPU inference install an NVIDIA GPU with the open kernel module (nvidia-open)"
	case err != nil:
		res.Status, res.Summary = Fail, fmt.Sprintf("%d NVIDIA GPU(s) but no driver loaded (/proc/driver/nvidia/version missing)", len(h.gpus))
		res.Fix = "install the open kernel module (Debian: nvidia-open-kernel-dkms, or NVIDIA's nvidia-open package) and reboot"
	case strings.Contains(first, "Open Kernel Module"):
		res.Status, res.Summary = Pass, "NVIDIA open kernel module: "+strings.TrimSpace(strings.TrimPrefix(first, "NVRM version:"))
	default:
		res.Status, res.Summary = Warn, "NVIDIA proprietary kernel module: CUDA dma-buf export and some P2P paths need the open module"
		res.Details = []string{first}
		res.Fix = "switch to the open kernel module (nvidia-open), same driver version"
	}
	return res
}

func checkDmaBuf(h *host) Result {
	res := Result{ID: "dma-buf"}
	cfg := h.configState("CONFIG_DMA_SHARED_BUFFER")
	sysfs := h.exists("sys/kernel/dmabuf")
	res.Details = []string{fmt.Sprintf("CONFIG_DMA_SHARED_BUFFER: %s; /sys/kernel/dmabuf: %v", orNone(cfg), sysfs)}
	importable := h.ver.atLeast(6, 19)
	switch {
	case cfg == "n":
		res.Status, res.Summary = Warn, "kernel without dma-buf: no dma-buf route"
		res.Fix = "a kernel with CONFIG_DMA_SHARED_BUFFER (every distribution kernel has it)"
	case cfg == "" && !sysfs && len(h.gpus) == 0:
		res.Status, res.Summary = Warn, "dma-buf support unknown (no kernel config, no /sys/kernel/dmabuf)"
	case importable:
		res.Status, res.Summary = Pass, "dma-buf present; iommufd imports VFIO-exported BARs (Linux ≥ 6.19); CUDA-exported buffers are not importable by iommufd yet"
	default:
		res.Status, res.Summary = Warn, "dma-buf present, but iommufd cannot import device memory before Linux 6.19: no dma-buf route"
		res.Fix = "Linux ≥ 6.19 for VFIO dma-buf import (optional: peer-bar and host-pinned do not need it)"
	}
	return res
}

// bar1Large is the BAR1 size from which the GPU's whole memory is usually
// mappable (resizable BAR on); below it the window is the classic 256 MiB.
const bar1Large = 8 << 30

func checkBAR1(h *host) []Result {
	if len(h.gpus) == 0 {
		return []Result{{ID: "bar1", Status: Warn, Summary: "no NVIDIA GPU: no BAR1 to check", Fix: "peer-to-peer into GPU memory needs a GPU"}}
	}
	var out []Result
	for _, g := range h.gpus {
		res := Result{ID: "bar1 " + g.BDF}
		bars, idx, ok, err := h.gpuAperture(g.BDF)
		switch {
		case err != nil:
			res.Status, res.Summary = Warn, "cannot read the GPU's BARs: "+err.Error()
		case !ok:
			res.Status, res.Summary = Warn, "GPU "+g.BDF+" has no BAR1 assigned"
			res.Fix = "enable Above 4G Decoding in the firmware setup"
		case bars[idx].Size() >= bar1Large:
			res.Status, res.Summary = Pass, fmt.Sprintf("GPU %s BAR1 is %s (large BAR): device memory is mappable for peer-bar", g.BDF, humanBytes(bars[idx].Size()))
		default:
			res.Status = Warn
			res.Summary = fmt.Sprintf("GPU %s BAR1 is %s: peer-bar staging is limited to that window", g.BDF, humanBytes(bars[idx].Size()))
			res.Fix = "enable Above 4G Decoding and Resizable BAR in the firmware setup (data-center GPUs often expose large BAR1 already)"
		}
		if err == nil && ok {
			res.Details = append(res.Details, fmt.Sprintf("sysfs resource%d (BAR0 is %s, so BAR1 is the BAR register pair after it)", idx, map[bool]string{true: "64-bit", false: "32-bit"}[bars[0].Mem64()]))
		}
		out = append(out, res)
	}
	return out
}

func checkGdrdrv(h *host) Result {
	res := Result{ID: "gdrdrv"}
	dev, mod := h.exists("dev/gdrdrv"), h.moduleState("gdrdrv")
	res.Details = []string{fmt.Sprintf("/dev/gdrdrv: %v; module: %s", dev, mod)}
	switch {
	case dev:
		res.Status, res.Summary = Pass, "gdrdrv loaded: GPU memory can be mapped for peer-bar"
	case len(h.gpus) == 0:
		res.Status, res.Summary = Warn, "no gdrdrv (and no GPU): no peer-bar route into GPU memory"
		res.Fix = "with a GPU, install gdrcopy's gdrdrv module"
	default:
		res.Status, res.Summary = Warn, "no gdrdrv: GPU memory cannot be mapped into the NVMe's IOMMU domain, so no peer-bar route (host-pinned is used)"
		res.Fix = "install gdrcopy's gdrdrv kernel module (gdrdrv-dkms) and load it"
	}
	return res
}
