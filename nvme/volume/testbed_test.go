package volume_test

// Test-bed integration: a volume on QEMU's NVMe (nvme0, namespace 2,
// 4 KiB blocks) through the userspace driver over VFIO, holding a pool
// that the engine's pipeline streams from. Skips outside the test-bed.

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/vfiobus"
	"github.com/strata-llm/strata/nvme/volume"
	"github.com/strata-llm/strata/setup/testbed"
	"github.com/strata-llm/strata/vfio"
)

func TestTestbedVolume(t *testing.T) {
	g := testbed.Require(t)
	dom, err := vfio.NewDomain(vfio.DomainOptions{Backend: vfio.BackendType1})
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	bus, err := vfiobus.Open(dom, g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	c, err := nvme.Open(ctx, nvme.Config{MMIO: bus, DMA: bus, IOQueues: 2, QueueDepth: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		c.Close(cctx)
	}()
	dev, err := volume.NewNVMe(c, bus, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	v, err := volume.Format(ctx, dev, volume.FormatOptions{Label: "testbed"})
	if err != nil {
		t.Fatal(err)
	}

	// A pool: a tiny synthetic model's layers as 4 KiB aligned extents.
	m, store, raw := tinyLlamaStore(t)
	e, err := v.WriteFile(ctx, "pools/tiny.store", bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("extent %q at byte %d, %d bytes, xxh3 %016x", e.Name, e.Offset, e.Length, e.Checksum)
	testbed.Expect(t, "nvme0n2", e.Offset, raw)

	// Reopen from the device and verify end to end.
	v2, err := volume.Open(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	sb := v2.Superblock()
	t.Logf("superblock: %+v", sb)
	e2, err := v2.Lookup("pools/tiny.store")
	if err != nil || e2.Checksum != xxh3.Hash(raw) {
		t.Fatalf("%+v %v", e2, err)
	}
	if err := v2.Verify(ctx, e2); err != nil {
		t.Fatal(err)
	}
	// Per-extent byte-range reads.
	p := make([]byte, 10000)
	if _, err := v2.ReadAt(ctx, e2, p, 12345); err != nil || !bytes.Equal(p, raw[12345:22345]) {
		t.Fatalf("byte-range read: %v", err)
	}

	// The engine streams every layer from the NVMe extent.
	src, err := v2.Source("pools/tiny.store")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	st := requireAllCLikeResident(t, m, store, src, []int32{3, 5, 7}, []int32{11})
	t.Logf("pipeline pass from NVMe: %+v", st)
}
