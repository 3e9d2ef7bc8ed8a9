package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// LinkCache holds the link speeds the tier planner needs for a streamed
// plan (the storage a pool lies on, memmove, the CPU dot products, a GPU's
// pinned host-to-device copies), measured the first time a load needs
// each and kept for the life of the process: the hardware does not change
// between loads, and a measurement costs a load a quarter of a second and
// disturbs whatever else is running. Whoever opens engines owns one (the
// daemon makes one at start; `strata run` when it opens its model) and
// passes it in Options.LinkCache. Storage is kept per filesystem device,
// the compute rate per weight type and the copy rate per GPU. It is safe
// for concurrent loads.
type LinkCache struct {
	probes linkProbes

	mu      sync.Mutex
	storage map[uint64]storageLink
	devices map[string]storageLink // storage that is not a file (Storage.Device)
	memmove float64
	compute map[quant.Type]float64
	h2d     map[int]float64
	// counts is how many measurements of each link ran (for tests).
	counts map[string]int
}

// storageLink is one measured storage device.
type storageLink struct {
	res  tier.StorageResult
	path string // the file it was measured on
}

// linkProbes are the measurements a LinkCache runs; tests substitute
// counting fakes.
type linkProbes struct {
	storage func(ctx context.Context, path string, limit int64) (tier.StorageResult, error)
	source  func(ctx context.Context, src tier.Source, limit int64) (tier.StorageResult, error)
	memmove func(ctx context.Context, d time.Duration) float64
	compute func(ctx context.Context, typ quant.Type, d time.Duration) (float64, error)
	h2d     func(dev *cudadrv.Device, n int64, iters int) (float64, error)
}

// Measurement sizes: enough to be stable, small enough to keep a load
// quick (a few tens of milliseconds each).
const (
	linkStorageBytes = 64 << 20
	linkDuration     = 50 * time.Millisecond
	linkH2DBytes     = 64 << 20
	linkH2DIters     = 4
)

// NewLinkCache returns an empty cache: nothing is measured until a load
// needs it.
func NewLinkCache() *LinkCache {
	return newLinkCache(linkProbes{
		storage: tier.MeasureStorage, source: tier.MeasureSource, memmove: tier.MeasureCopy, h2d: gpu.HostToDevicePeak,
		compute: func(ctx context.Context, typ quant.Type, d time.Duration) (float64, error) {
			return tier.MeasureCompute(ctx, typ, d, CPUKernel)
		},
	})
}

// CPUKernel is the CPU backend's dot-product kernel in the form the link
// measurements take (tier.ComputeKernel): engine/gemv's best family for
// this CPU, so the planner's compute link is what the backend runs.
func CPUKernel(t quant.Type, rows []byte, n int, x, y []float32) error {
	var q gemv.X
	if err := q.Set(x); err != nil {
		return err
	}
	return gemv.Rows(gemv.Detect(), t, rows, n, &q, y)
}

func newLinkCache(p linkProbes) *LinkCache {
	if p.source == nil {
		p.source = tier.MeasureSource
	}
	return &LinkCache{probes: p, storage: map[uint64]storageLink{}, devices: map[string]storageLink{}, compute: map[quant.Type]float64{},
		h2d: map[int]float64{}, counts: map[string]int{}}
}

// storageOf returns the storage link of the device path lies on,
// measuring it (with O_DIRECT reads of path) the first time.
func (c *LinkCache) storageOf(ctx context.Context, path string) (storageLink, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return storageLink{}, fmt.Errorf("measuring storage: %w", err)
	}
	dev := uint64(st.Dev)
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.storage[dev]; ok {
		return s, nil
	}
	res, err := c.probes.storage(ctx, path, linkStorageBytes)
	if err != nil {
		return storageLink{}, err
	}
	c.counts["storage"]++
	s := storageLink{res: res, path: path}
	c.storage[dev] = s
	return s, nil
}

// poolStorage returns the storage link of the pool at path: st's device
// when the pool lives on one (measured through its driver), otherwise the
// filesystem device of path (O_DIRECT).
func (c *LinkCache) poolStorage(ctx context.Context, path string, st *Storage) (storageLink, error) {
	if st != nil {
		return c.storageLinkOf(ctx, path, st)
	}
	return c.storageOf(ctx, path)
}

// cpu returns the CPU backend's links for a pool at path (on st, when not
// nil) whose matrices are mostly of type typ, as tier.MeasureLinks
// measures them: storage, memmove as the host-to-device copy, and the
// dot-product rate on every core. Each part is measured once.
func (c *LinkCache) cpu(ctx context.Context, path string, st *Storage, typ quant.Type) (tier.Links, error) {
	l := tier.DefaultLinks()
	l.Notes = nil
	s, err := c.poolStorage(ctx, path, st)
	if err != nil {
		return l, err
	}
	l.SetStorage(s.res, s.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.memmove == 0 {
		bw := c.probes.memmove(ctx, linkDuration)
		if err := ctx.Err(); err != nil {
			return l, fmt.Errorf("measuring memmove: %w", err)
		}
		c.memmove = bw
		c.counts["memmove"]++
	}
	l.SetMemmove(c.memmove)
	if typ == 0 {
		typ = tier.DefaultComputeType
	}
	if _, ok := c.compute[typ]; !ok {
		bw, err := c.probes.compute(ctx, typ, linkDuration)
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return l, fmt.Errorf("measuring compute: %w", err)
		}
		c.compute[typ] = bw
		c.counts["compute"]++
	}
	l.SetCompute(typ, c.compute[typ])
	return l, nil
}

// hostToDevice returns dev's pinned host-to-device bandwidth, measuring it
// the first time (four 64 MiB copies, a few tens of milliseconds with the
// allocation).
func (c *LinkCache) hostToDevice(ctx context.Context, dev *cudadrv.Device) (float64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bw, ok := c.h2d[dev.Ordinal()]; ok {
		return bw, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	bw, err := c.probes.h2d(dev, linkH2DBytes, linkH2DIters)
	if err != nil {
		return 0, err
	}
	c.counts["h2d"]++
	c.h2d[dev.Ordinal()] = bw
	return bw, nil
}

// measurements returns how many measurements of each link ran.
func (c *LinkCache) measurements() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}
