// Package poolvol puts a prefab pool on a strata volume of the software
// NVMe controller (package internal/nvmetest) behind the real userspace
// driver, and describes it as an engine.Storage, so that engine tests can
// serve a pool through the driver's tier-C path (DMA staging, several
// queues, MDTS splits) on machines without an SSD, the GPU host included.
package poolvol

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/volume"
)

// Options shape the controller; zero values take the defaults noted.
type Options struct {
	MDTS       uint8 // nvmetest's MDTS (default 5: 128 KiB)
	IOQueues   int   // I/O queue pairs (default 4)
	QueueDepth int   // per queue (default 64)
}

// Vol is a pool on a volume of a software controller.
type Vol struct {
	SC      *nvmetest.Controller
	Ctrl    *nvme.Controller
	Volume  *volume.Volume
	Extent  volume.Extent
	Storage *engine.Storage
}

// New starts a controller with one 4 KiB-block namespace large enough for
// the pool file at path, brings it up with the driver, formats a volume,
// writes the pool as extent "pool" and verifies it. Everything is closed
// when the test ends.
func New(t testing.TB, path string, o Options) *Vol {
	t.Helper()
	if o.IOQueues == 0 {
		o.IOQueues = 4
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = 64
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	blocks := uint64(st.Size())/4096 + 1024
	sc := nvmetest.New(nvmetest.Options{MDTS: o.MDTS, Namespaces: []nvmetest.Namespace{{BlockSize: 4096, Blocks: blocks}}})
	ctx := context.Background()
	c, err := nvme.Open(ctx, nvme.Config{MMIO: sc, DMA: sc, IOQueues: o.IOQueues, QueueDepth: o.QueueDepth})
	if err != nil {
		sc.Close()
		t.Fatal(err)
	}
	dev, err := volume.NewNVMe(c, sc, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(cctx)
		sc.Close()
	})
	v, err := volume.Format(ctx, dev, volume.FormatOptions{Label: "poolvol"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := v.WriteFile(ctx, "pool", f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, e); err != nil {
		t.Fatal(err)
	}
	return &Vol{SC: sc, Ctrl: c, Volume: v, Extent: e, Storage: &engine.Storage{
		Reader: v.Reader(e), Size: e.Length, Device: "nvmetest",
		Via: fmt.Sprintf("userspace NVMe driver on the software controller: %d I/O queues of depth %d, transfers split at %s (MDTS)",
			o.IOQueues, o.QueueDepth, tier.FormatBytes(int64(c.MaxTransfer()))),
		OpenSource: func() (tier.Source, error) { return v.Source("pool") },
	}}
}
