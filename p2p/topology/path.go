package topology

import (
	"fmt"
	"os"
	"path/filepath"
)

// ACSRedirect is the ACS P2P Request Redirect bit of the ACS control
// register: set on a bridge, peer requests below it go up to the root
// complex (and through the IOMMU) instead of straight across.
const ACSRedirect = 1 << 2

// ACSEgress is the ACS P2P Egress Control bit: set, the bridge may block
// peer requests outright.
const ACSEgress = 1 << 5

// PathBridge is one bridge on the PCI path between two devices.
type PathBridge struct {
	BDF string
	// ACS is the bridge's ACS control register; meaningful when HasACS.
	ACS    uint16
	HasACS bool
	// Readable is false when the extended config space could not be read
	// (it needs root), so ACS is unknown.
	Readable bool
}

// Describe says what the bridge's ACS settings do to peer traffic.
func (b PathBridge) Describe() string {
	switch {
	case !b.Readable:
		return "extended config space not readable (needs root)"
	case !b.HasACS:
		return "no ACS capability (peer requests are routed by the switch, not checked by the IOMMU)"
	}
	return fmt.Sprintf("ACS control %#04x: %s", b.ACS, describeACS(b.ACS))
}

// PCIPath is the route between two PCI functions through the bridges above
// them, as sysfs shows it.
type PCIPath struct {
	// Common is the lowest bridge above both devices, "" when they meet only
	// at the root complex.
	Common string
	// Bridges are the bridges below Common on either side, whose ACS
	// settings decide where peer requests go.
	Bridges []PathBridge
}

// Path finds the bridges between devices a and b and reads their ACS
// control registers from config space. It is what Probe reports as facts,
// in structured form, for callers that grade the path (strata setup check).
func Path(sysfs, a, b string) (PCIPath, error) {
	if sysfs == "" {
		sysfs = "/sys"
	}
	pa, err := upstream(sysfs, a)
	if err != nil {
		return PCIPath{}, fmt.Errorf("p2p: path of %s: %w", a, err)
	}
	pb, err := upstream(sysfs, b)
	if err != nil {
		return PCIPath{}, fmt.Errorf("p2p: path of %s: %w", b, err)
	}
	common := 0
	for common < len(pa)-1 && common < len(pb)-1 && pa[common] == pb[common] {
		common++
	}
	var p PCIPath
	if common > 0 {
		p.Common = pa[common-1]
	}
	for _, br := range append(append([]string(nil), pa[common:len(pa)-1]...), pb[common:len(pb)-1]...) {
		pbr := PathBridge{BDF: br}
		cfg, err := os.ReadFile(filepath.Join(devPath(sysfs, br), "config"))
		if err == nil && len(cfg) > 256 {
			pbr.Readable = true
			pbr.ACS, pbr.HasACS = ACSControl(cfg)
		}
		p.Bridges = append(p.Bridges, pbr)
	}
	return p, nil
}
