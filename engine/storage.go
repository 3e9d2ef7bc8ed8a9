package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tier"
)

// Storage is a prefab pool that is not a file: an extent of a strata
// volume on an NVMe namespace read by the userspace driver (nvme/volume).
// The engine does not import the driver; whoever opened the device (the
// daemon's device registry) describes the pool with this, and OpenWith
// opens it as it opens a pool file: the header, manifest and resident
// extents (tiers A and B) are copied into memory through Reader, and the
// tier-C extents are read every pass through a source from OpenSource,
// whose buffers are the DMA staging the controller writes into.
type Storage struct {
	// Reader reads the pool's bytes (offsets as in the pool file).
	Reader io.ReaderAt
	// Size is the pool's length in bytes.
	Size int64
	// OpenSource opens a tier-C source over the pool's bytes (offsets as
	// in the pool file). The engine closes what it opens.
	OpenSource func() (tier.Source, error)
	// Device names the storage device for the link cache: loads from the
	// same device share one measurement.
	Device string
	// Via says how tier-C bytes move from the device, for the links'
	// notes and the route report ("userspace NVMe driver, ...").
	Via string
}

// Route names how a streamed model's tier-C bytes reach compute, and why
// the other routes were not taken: what `strata status` and /metrics show.
type Route struct {
	// Name is "file" (O_DIRECT reads of the pool file into staging),
	// "nvme-pinned" (the userspace NVMe driver into DMA-mapped host
	// staging; on a GPU registered with CUDA and copied to a device
	// slot) or "nvme-bar" (the driver straight into a device slot
	// through the GPU's BAR). Empty when nothing is on tier C.
	Name string
	// Via details Name (the queues and depth of the driver, the file).
	Via string
	// Refused maps each route not taken to the reason.
	Refused map[string]string
}

// Route constants, as Route.Name reports them.
const (
	RouteFile       = "file"
	RouteNVMePinned = "nvme-pinned"
	RouteNVMeBAR    = "nvme-bar"
)

// TierCRoute is the route the engine's tier-C layers take (zero when no
// layer is on tier C).
func (e *Engine) TierCRoute() Route { return e.route }

// routeFor is the route of a load with o on backend (BackendCPU or
// BackendCUDA).
func routeFor(o *Options, backend string) Route {
	if o.Storage == nil {
		return Route{Name: RouteFile, Via: "O_DIRECT reads of the pool file", Refused: map[string]string{
			RouteNVMePinned: "the pool is a file, not an extent of a strata volume",
			RouteNVMeBAR:    "the pool is a file, not an extent of a strata volume",
		}}
	}
	r := Route{Name: RouteNVMePinned, Via: o.Storage.Via, Refused: map[string]string{
		RouteFile: "the pool lives on a strata volume, not in a file",
	}}
	if backend == BackendCUDA {
		r.Refused[RouteNVMeBAR] = "no GPU-BAR route admitted by the p2p self-test is wired into the GPU pipeline (engine/gpu SlotReader): staging is pinned host memory registered with CUDA"
	} else {
		r.Refused[RouteNVMeBAR] = "the CPU backend has no device memory: tier C lands in host staging"
	}
	return r
}

// openStoragePool opens the pool described by st under the name path.
func openStoragePool(path string, st *Storage) (*prefab.Pool, error) {
	if st.Reader == nil || st.OpenSource == nil || st.Size <= 0 {
		return nil, fmt.Errorf("opening model %s: incomplete storage (reader, source and size are needed)", path)
	}
	magic := make([]byte, len(prefab.Magic))
	if _, err := st.Reader.ReadAt(magic, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	if !prefab.IsPoolHeader(magic) {
		return nil, fmt.Errorf("opening model %s: %w: a volume serves prefab pools only (write one with `strata devices pool write`)", path, ErrNeedsPool)
	}
	p, err := prefab.OpenPoolReader(path, st.Reader, st.Size)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	return p, nil
}

// tierCSource opens the tier-C source of a load of path: the storage's
// when there is one, the pool file otherwise.
func tierCSource(path string, o *Options, open func() (tier.Source, error)) (tier.Source, error) {
	var src tier.Source
	var err error
	if o.Storage != nil {
		src, err = o.Storage.OpenSource()
	} else {
		src, err = open()
	}
	if err != nil {
		return nil, fmt.Errorf("model %s: tier-C source: %w", path, err)
	}
	if o.WrapSource != nil {
		src = o.WrapSource(src)
	}
	return src, nil
}

// storageLinkOf returns the storage link of st's device, measuring it
// (through a source of its own, so through the driver and DMA staging
// tier C uses) the first time.
func (c *LinkCache) storageLinkOf(ctx context.Context, path string, st *Storage) (storageLink, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := "dev:" + st.Device
	if s, ok := c.devices[key]; ok {
		return s, nil
	}
	src, err := st.OpenSource()
	if err != nil {
		return storageLink{}, fmt.Errorf("measuring storage: %w", err)
	}
	defer src.Close()
	res, err := c.probes.source(ctx, src, linkStorageBytes)
	if err != nil {
		return storageLink{}, err
	}
	res.Via = st.Via
	c.counts["storage"]++
	s := storageLink{res: res, path: path}
	c.devices[key] = s
	return s, nil
}
