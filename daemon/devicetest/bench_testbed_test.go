package devicetest

import (
	"context"
	"strings"
	"testing"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/setup/testbed"
)

// TestTestbedBench runs the storage sweep on QEMU's NVMe through the
// daemon's bench endpoint only, the way an unprivileged `strata bench
// storage nvme:BDF/NSID` does: the daemon binds NVMe0 (left on vfio-pci by
// init.sh), sweeps 2 block sizes × 2 queue depths of its 4 KiB namespace
// (the host's pattern fills it, so every read moves real data), and the
// controller's counters must account for every byte the sweep counted.
// The e2e endpoint then reports the routes of a host without a GPU. The
// controller stays on vfio-pci when the daemon stops.
func TestTestbedBench(t *testing.T) {
	g := testbed.Require(t)
	ctx := context.Background()
	c, stop := serve(t, t.TempDir(), "stratad-bench")
	defer stop()
	if _, err := c.Bind(ctx, g.NVMe0); err != nil {
		t.Fatal(err)
	}
	st0, err := c.DeviceStats(ctx, g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	var progress []bench.Progress
	res, err := c.BenchStorage(ctx, api.BenchStorageRequest{BDF: g.NVMe0, NSID: 2, BlockSizes: []int{4096, 65536}, QueueDepths: []int{1, 4},
		PointSeconds: 0.2, RegionBytes: 16 << 20}, func(p bench.Progress) { progress = append(progress, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != 4 || len(res.Points) != 4 || res.Via != "stratad" || res.Target.Kind != "nvme" || res.Target.Align != 4096 ||
		res.Target.Size != g.NSBytes || res.Region != 16<<20 {
		t.Fatalf("progress %+v, result %+v", progress, res)
	}
	var counted uint64
	for _, p := range res.Points {
		l := p.LatencyUS
		t.Logf("%6d B qd %d: %.4f GB/s, %.0f IOPS, p50 %.0f µs p99 %.0f µs p99.9 %.0f µs max %.0f µs (%d reads)",
			p.BlockSize, p.QueueDepth, p.GBps, p.IOPS, l.P50, l.P99, l.P999, l.Max, p.IOs)
		if p.IOs < uint64(2*p.QueueDepth) || p.GBps <= 0 || !(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Fatalf("point %+v", p)
		}
		counted += p.Bytes
	}
	st1, err := c.DeviceStats(ctx, g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := st0.Controllers[0], st1.Controllers[0]
	if b.ReadBytes-a.ReadBytes < counted || b.Errors != a.Errors {
		t.Fatalf("controller read %d bytes with %d new errors; the sweep counted %d", b.ReadBytes-a.ReadBytes, b.Errors-a.Errors, counted)
	}
	t.Logf("notes: %q", res.Notes)

	// Only read-only work: a namespace that does not exist, and the routes.
	if _, err := c.BenchStorage(ctx, api.BenchStorageRequest{BDF: g.NVMe0, NSID: 9}, nil); err == nil || !strings.Contains(err.Error(), "namespace_not_found") {
		t.Fatalf("namespace 9: %v", err)
	}
	e, err := c.BenchE2E(ctx, api.BenchE2ERequest{BDF: g.NVMe0, NSID: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host route: %s", e.HostRoute)
	for _, r := range e.Routes {
		t.Logf("%s (%s): available %v, measured %v: %s %q", r.Kind, r.Source, r.Available, r.Measured, r.Reason, r.Facts)
		if r.Measured {
			t.Fatalf("measured without a GPU: %+v", r)
		}
	}
	if len(e.Routes) != 3 || e.Routes[1].Source != g.NVMe0+"/nsid 2" || !strings.Contains(e.Routes[1].Reason, "CUDA unavailable") {
		t.Fatalf("routes %+v", e.Routes)
	}
}
