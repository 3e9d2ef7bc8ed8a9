package p2p

import "github.com/strata-llm/strata/p2p/topology"

// The route probe lives in package topology, which reads sysfs only and so
// can be linked by the unprivileged client; these names keep p2p's API
// whole for the daemon and the test-bed, which build targets from its
// answers.

// Kind names a route (topology.Kind).
type Kind = topology.Kind

// Route kinds.
const (
	KindHostPinned = topology.KindHostPinned
	KindPeerBAR    = topology.KindPeerBAR
	KindDmaBuf     = topology.KindDmaBuf
)

// ACS control bits that decide where peer requests go (see topology).
const (
	ACSRedirect = topology.ACSRedirect
	ACSEgress   = topology.ACSEgress
)

type (
	// Peer names a device whose BAR could receive NVMe data.
	Peer = topology.Peer
	// ProbeOptions say what to probe.
	ProbeOptions = topology.ProbeOptions
	// Route is one way data could reach a target, and why it can or cannot.
	Route = topology.Route
	// Report is the outcome of Probe.
	Report = topology.Report
	// BARInfo is one line of a device's sysfs resource file.
	BARInfo = topology.BARInfo
	// PathBridge is one bridge on the PCI path between two devices.
	PathBridge = topology.PathBridge
	// PCIPath is the route between two PCI functions through the bridges
	// above them.
	PCIPath = topology.PCIPath
)

// Probe reports which DMA routes exist for the controller; see
// topology.Probe. Only SelfTest admits a target.
func Probe(o ProbeOptions) Report { return topology.Probe(o) }

// Path finds the bridges between devices a and b; see topology.Path.
func Path(sysfs, a, b string) (PCIPath, error) { return topology.Path(sysfs, a, b) }

// ParseResource decodes a sysfs resource file; see topology.ParseResource.
func ParseResource(text string) ([]BARInfo, error) { return topology.ParseResource(text) }

// ACSControl finds the ACS control register in a config space dump; see
// topology.ACSControl.
func ACSControl(cfg []byte) (uint16, bool) { return topology.ACSControl(cfg) }
