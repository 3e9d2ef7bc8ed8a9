package bench

import (
	"context"
	"fmt"
	"time"
)

// RouteKind names a way layer bytes can travel from storage to the GPU.
type RouteKind string

// The routes strata knows.
const (
	// RouteFilePinned: an O_DIRECT file read into pinned host memory, then
	// copied to the device (tier C on the kernel's block driver).
	RouteFilePinned RouteKind = "file→pinned→GPU"
	// RouteNVMePinned: the userspace NVMe driver DMAs into pinned host
	// memory mapped for the controller, then the GPU copies it.
	RouteNVMePinned RouteKind = "nvme→pinned→GPU"
	// RouteNVMeBAR: the controller writes into the GPU's BAR peer to peer;
	// no host copy. Only over a p2p.PeerBAR target that passed its
	// self-test.
	RouteNVMeBAR RouteKind = "nvme→GPU BAR"
)

// Stager reads storage into host staging slots for an end-to-end route.
type Stager interface {
	// Size is the number of readable bytes; Align the granularity of
	// offsets and lengths.
	Size() int64
	Align() int
	// Read fills the first n bytes of staging slot i from offset off.
	Read(ctx context.Context, slot int, off int64, n int) error
}

// Uploader copies staging slots to device memory.
type Uploader interface {
	// Upload starts copying the first n bytes of slot i to the device and
	// returns a wait function that returns once the copy has finished and
	// the slot may be refilled.
	Upload(ctx context.Context, slot int, n int) (wait func() error, err error)
}

// RouteOptions size an end-to-end measurement.
type RouteOptions struct {
	// Bytes is how much to move (default 1 GiB, capped by nothing: the
	// source wraps around).
	Bytes int64
	// Chunk is the size of one read and one copy (default 4 MiB).
	Chunk int
	// Slots is the number of staging slots (default 2): reads of slot i+1
	// overlap the copy of slot i.
	Slots int
}

// Route is one storage → GPU route: whether it exists on this host, why
// (not), and its measured rate when it was measured.
type Route struct {
	Kind RouteKind `json:"kind"`
	// Source is the file or "BDF/nsid N" read.
	Source string `json:"source,omitempty"`
	// Available says the route exists here now: its storage can be read
	// and the GPU opened.
	Available bool `json:"available"`
	// Reason says why the route is unavailable or unmeasured, or what
	// admitted it.
	Reason   string   `json:"reason,omitempty"`
	Facts    []string `json:"facts,omitempty"`
	Measured bool     `json:"measured"`
	Bytes    int64    `json:"bytes,omitempty"`
	Chunk    int      `json:"chunk,omitempty"`
	Slots    int      `json:"slots,omitempty"`
	Seconds  float64  `json:"seconds,omitempty"`
	GBps     float64  `json:"gb_per_s,omitempty"`
	// ReadSeconds is the time spent reading storage; WaitSeconds the time
	// the reader waited for copies to free a slot. Whichever dominates is
	// the bottleneck.
	ReadSeconds float64 `json:"read_seconds,omitempty"`
	WaitSeconds float64 `json:"copy_wait_seconds,omitempty"`
}

// E2EResult is the outcome of an end-to-end bench.
type E2EResult struct {
	// GPU names the device, or is empty when none could be opened.
	GPU    string  `json:"gpu,omitempty"`
	Via    string  `json:"via"`
	Routes []Route `json:"routes"`
	// HostRoute is the route the daemon would pick on this host and why
	// (strata setup check's verdict).
	HostRoute string   `json:"host_route,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// MeasureRoute streams o.Bytes from s to the device through u, o.Slots
// staging slots deep, and fills r's measurement. Reads go in order through
// the source (wrapping at its end); the read of chunk j+1 overlaps the
// copy of chunk j.
func MeasureRoute(ctx context.Context, s Stager, u Uploader, o RouteOptions, r *Route) error {
	if o.Bytes <= 0 {
		o.Bytes = 1 << 30
	}
	if o.Chunk <= 0 {
		o.Chunk = 4 << 20
	}
	if o.Slots <= 0 {
		o.Slots = 2
	}
	align := int64(max(s.Align(), 1))
	if int64(o.Chunk)%align != 0 {
		return fmt.Errorf("%w: chunk %d is not a multiple of the source's %d-byte alignment", ErrBadOptions, o.Chunk, align)
	}
	span := s.Size() / int64(o.Chunk) * int64(o.Chunk)
	if span == 0 {
		return fmt.Errorf("%w: the source's %d bytes hold no %d-byte chunk", ErrBadOptions, s.Size(), o.Chunk)
	}
	chunks := (o.Bytes + int64(o.Chunk) - 1) / int64(o.Chunk)
	pending := make([]func() error, o.Slots)
	var read, wait time.Duration
	t0 := time.Now()
	for j := int64(0); j < chunks; j++ {
		slot := int(j % int64(o.Slots))
		if w := pending[slot]; w != nil {
			tw := time.Now()
			pending[slot] = nil
			if err := w(); err != nil {
				drain(pending)
				return fmt.Errorf("copy of chunk %d: %w", j-int64(o.Slots), err)
			}
			wait += time.Since(tw)
		}
		tr := time.Now()
		off := j * int64(o.Chunk) % span
		if err := s.Read(ctx, slot, off, o.Chunk); err != nil {
			drain(pending)
			return fmt.Errorf("read of chunk %d at %d: %w", j, off, err)
		}
		read += time.Since(tr)
		w, err := u.Upload(ctx, slot, o.Chunk)
		if err != nil {
			drain(pending)
			return fmt.Errorf("copy of chunk %d: %w", j, err)
		}
		pending[slot] = w
	}
	tw := time.Now()
	if err := drain(pending); err != nil {
		return fmt.Errorf("final copies: %w", err)
	}
	wait += time.Since(tw)
	el := time.Since(t0)
	r.Measured = true
	r.Bytes, r.Chunk, r.Slots = chunks*int64(o.Chunk), o.Chunk, o.Slots
	r.Seconds, r.ReadSeconds, r.WaitSeconds = el.Seconds(), read.Seconds(), wait.Seconds()
	if el > 0 {
		r.GBps = float64(r.Bytes) / el.Seconds() / 1e9
	}
	return nil
}

// drain waits for every pending copy and returns the first error.
func drain(pending []func() error) error {
	var first error
	for i, w := range pending {
		if w != nil {
			if err := w(); err != nil && first == nil {
				first = err
			}
			pending[i] = nil
		}
	}
	return first
}

// HostVerdict is what `strata setup check` decided about this host: the
// route the daemon would pick for tier-C reads, why, and why each better
// route lost. It is an input of the end-to-end report, so that the
// report's "why not" is the setup check's own.
type HostVerdict struct {
	Kind      string   `json:"kind"`
	NVMe      string   `json:"nvme,omitempty"`
	GPU       string   `json:"gpu,omitempty"`
	Why       string   `json:"why"`
	NotChosen []string `json:"not_chosen,omitempty"`
}

// Lost returns the reasons the verdict gives for routes whose description
// starts with prefix losing (all of them when prefix is empty).
func (v HostVerdict) Lost(prefix string) []string {
	var out []string
	for _, s := range v.NotChosen {
		if prefix == "" || len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			out = append(out, s)
		}
	}
	return out
}
