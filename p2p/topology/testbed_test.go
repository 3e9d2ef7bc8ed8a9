package topology_test

// Test-bed integration: the route probe against the guest's real sysfs —
// QEMU's NVMe (nvme0) on vfio-pci and the ivshmem device as the peer.
// Skips outside the test-bed.

import (
	"strings"
	"testing"

	"github.com/strata-llm/strata/p2p/topology"
	"github.com/strata-llm/strata/setup/testbed"
)

func TestTestbedProbe(t *testing.T) {
	g := testbed.Require(t)
	r := topology.Probe(topology.ProbeOptions{NVMe: g.NVMe0, Peers: []topology.Peer{{BDF: g.IVSHMEM, BAR: 2}, {BDF: g.IVSHMEM, BAR: 0}}})
	t.Log("\n" + r.String())
	if r.Group < 0 || r.Driver != "vfio-pci" {
		t.Fatalf("nvme0: %+v", r)
	}
	if !r.Routes[0].Available || !r.Routes[1].Available {
		t.Errorf("host-pinned and ivshmem bar2 should be candidates: %+v", r.Routes[:2])
	}
	if r.Routes[2].Available {
		t.Errorf("ivshmem bar0 (256 B registers) accepted: %+v", r.Routes[2])
	}
	last := r.Routes[len(r.Routes)-1]
	if last.Kind != topology.KindDmaBuf || last.Available || !strings.Contains(last.Reason, "not probed") {
		t.Errorf("dma-buf: %+v", last)
	}
}
