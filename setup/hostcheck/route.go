package hostcheck

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/p2p/topology"
)

// Route kinds beyond p2p's: the kernel's own block driver.
const routeFile = "file"

// chooseRoute applies the daemon's preference — peer-bar (NVMe straight
// into GPU memory), then host-pinned (NVMe into locked host memory, then a
// host→device copy), then files through the kernel with O_DIRECT — to what
// the checks found, and says why each better route lost. topology.Probe
// supplies the per-route candidates for the chosen controller; only
// p2p.SelfTest admits a route at run time, so this is the plan, not a promise.
func chooseRoute(h *host, r Report) Route {
	fileRoute := func(why string, lost ...string) Route {
		return Route{Kind: routeFile, Why: why, NotChosen: lost}
	}
	if len(h.nvme) == 0 {
		return fileRoute("no NVMe controller: tier C reads pool files with O_DIRECT through the kernel")
	}
	for _, id := range []string{"iommu", "vfio-modules", "vfio-dev"} {
		if res, ok := r.Find(id); ok && res.Status == Fail {
			return fileRoute("the userspace NVMe driver cannot run ("+id+": "+res.Summary+"), so tier C reads pool files with O_DIRECT through the kernel's nvme driver",
				string(topology.KindPeerBAR)+": needs VFIO", string(topology.KindHostPinned)+": needs VFIO")
		}
	}
	var lost []string
	nvme := ""
	dh := nvmehost.Host{Sysfs: h.sys, Proc: h.path("proc")}
	for _, d := range h.nvme {
		if res, ok := r.Find("iommu-group " + d.BDF); ok && res.Status == Fail {
			lost = append(lost, "nvme "+d.BDF+": "+res.Summary)
			continue
		}
		if d.Driver != "vfio-pci" {
			c, err := dh.Controller(d.BDF)
			if err != nil {
				lost = append(lost, "nvme "+d.BDF+": "+err.Error())
				continue
			}
			if users := c.Users(); len(users) > 0 {
				lost = append(lost, "nvme "+d.BDF+": in use by the host ("+strings.Join(users, "; ")+")")
				continue
			}
		}
		nvme = d.BDF
		break
	}
	if nvme == "" {
		return fileRoute("no NVMe controller the daemon may take: tier C reads pool files with O_DIRECT through the kernel", lost...)
	}
	var peers []topology.Peer
	for _, g := range h.gpus {
		bar := 1
		if _, i, ok, err := h.gpuAperture(g.BDF); err == nil && ok {
			bar = i
		}
		peers = append(peers, topology.Peer{BDF: g.BDF, BAR: bar})
	}
	probe := topology.Probe(topology.ProbeOptions{Sysfs: h.sys.Root, Proc: h.path("proc"), NVMe: nvme, Peers: peers, MemlockLimit: -1})
	claim := ""
	if d, _ := h.sys.Driver(nvme); d != "vfio-pci" {
		claim = " (the daemon binds it to vfio-pci first: nothing on the host uses it)"
	}
	for _, g := range h.gpus {
		why := peerBarBlockers(h, r, nvme, g.BDF, probe)
		if len(why) == 0 {
			return Route{Kind: string(topology.KindPeerBAR), NVMe: nvme, GPU: g.BDF,
				Why:       "the NVMe DMAs layer bytes straight into GPU memory (BAR1, mapped through gdrdrv into the NVMe's IOMMU domain)" + claim + "; the self-test admits it before use",
				NotChosen: append(lost, dmaBufLoss(probe))}
		}
		lost = append(lost, fmt.Sprintf("%s to gpu %s: %s", topology.KindPeerBAR, g.BDF, strings.Join(why, "; ")))
	}
	if len(h.gpus) == 0 {
		lost = append(lost, string(topology.KindPeerBAR)+": no NVIDIA GPU")
	}
	lost = append(lost, dmaBufLoss(probe))
	why := "the NVMe DMAs into locked host memory" + claim
	if res, ok := r.Find("hugepages"); ok && res.Status == Pass {
		why += " backed by hugepages"
	}
	if len(h.gpus) > 0 {
		why += ", then the GPU copies it over PCIe (host→device)"
	} else {
		why += ", where the CPU backend reads it"
	}
	return Route{Kind: string(topology.KindHostPinned), NVMe: nvme, Why: why, NotChosen: lost}
}

// peerBarBlockers lists why the peer-bar route from nvme into gpu cannot be
// planned; empty when it can.
func peerBarBlockers(h *host, r Report, nvme, gpu string, probe topology.Report) []string {
	var why []string
	for _, rt := range probe.Routes {
		if rt.Kind == topology.KindPeerBAR && strings.HasPrefix(rt.Peer, gpu+"/") && !rt.Available {
			why = append(why, rt.Reason)
		}
	}
	if res, ok := r.Find("iommu-group " + gpu); ok && res.Status != Pass {
		why = append(why, res.Summary)
	}
	if res, ok := r.Find("acs " + nvme + "→" + gpu); ok && res.Status == Fail {
		why = append(why, res.Summary)
	}
	if res, ok := r.Find("nvidia-driver"); ok && res.Status == Fail {
		why = append(why, res.Summary)
	}
	if res, ok := r.Find("gdrdrv"); ok && res.Status != Pass {
		why = append(why, "no gdrdrv to map GPU memory")
	}
	if _, i, ok, err := h.gpuAperture(gpu); err != nil || !ok {
		why = append(why, "BAR1 is not assigned")
	} else if !h.exists(filepath.Join("sys/bus/pci/devices", gpu, fmt.Sprintf("resource%d", i))) {
		why = append(why, fmt.Sprintf("BAR1 (resource%d) is not mappable through sysfs", i))
	}
	return why
}

func dmaBufLoss(probe topology.Report) string {
	for _, rt := range probe.Routes {
		if rt.Kind == topology.KindDmaBuf {
			return string(topology.KindDmaBuf) + ": " + rt.Reason
		}
	}
	return string(topology.KindDmaBuf) + ": not probed"
}
