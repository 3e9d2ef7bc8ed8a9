package bench

import (
	"context"
	"fmt"
	"time"
)

// Direction is the way a PCIe copy goes.
type Direction string

// Copy directions.
const (
	HostToDevice Direction = "H2D"
	DeviceToHost Direction = "D2H"
)

// HostMemory is the kind of host memory a copy reads or writes.
type HostMemory string

// Host memory kinds.
const (
	// Pinned is page-locked memory the GPU's DMA engine reaches directly
	// (tier B and the staging buffers live there).
	Pinned HostMemory = "pinned"
	// Pageable is ordinary memory: the driver stages it through a pinned
	// bounce buffer, costing a CPU copy per transfer.
	Pageable HostMemory = "pageable"
)

// Copier moves bytes between host and device memory. The CUDA binding
// implements it in internal/bench/hw; tests use fakes.
type Copier interface {
	// Device names the GPU ("NVIDIA H200 (0)").
	Device() string
	// MaxBytes is the largest copy the copier's buffers allow.
	MaxBytes() int64
	// Copy performs iters back-to-back copies of n bytes in direction d
	// from or to host memory of kind m and returns the time they took as
	// the device measured it.
	Copy(ctx context.Context, d Direction, m HostMemory, n int64, iters int) (time.Duration, error)
}

// PCIeOptions say what to sweep.
type PCIeOptions struct {
	// Sizes of one copy (default DefaultPCIeSizes); sizes above the
	// copier's MaxBytes are dropped with a note.
	Sizes []int64
	// Directions and Memory select the curves (default both of each).
	Directions []Direction
	Memory     []HostMemory
	// PointBytes is roughly how many bytes each point moves (default
	// 4 GiB): a point repeats its copy PointBytes/size times, between
	// MinIters and MaxIters.
	PointBytes int64
	MinIters   int
	MaxIters   int
	Progress   func(Progress)
}

// DefaultPCIeSizes are 64 KiB … 1 GiB in powers of four.
var DefaultPCIeSizes = []int64{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}

// PCIePoint is one copy size of one curve.
type PCIePoint struct {
	Direction  Direction  `json:"direction"`
	Memory     HostMemory `json:"memory"`
	Bytes      int64      `json:"bytes"`
	Iterations int        `json:"iterations"`
	Seconds    float64    `json:"seconds"`
	GBps       float64    `json:"gb_per_s"`
	// MeanUS is one copy's mean time in microseconds.
	MeanUS float64 `json:"mean_us"`
}

// PCIeResult is a whole PCIe sweep.
type PCIeResult struct {
	Device string      `json:"device"`
	Via    string      `json:"via"`
	Points []PCIePoint `json:"points"`
	Notes  []string    `json:"notes,omitempty"`
	Wall   float64     `json:"wall_seconds"`
}

// Best returns the highest-GB/s point of a curve.
func (r *PCIeResult) Best(d Direction, m HostMemory) (PCIePoint, bool) {
	var best PCIePoint
	ok := false
	for _, p := range r.Points {
		if p.Direction == d && p.Memory == m && (!ok || p.GBps > best.GBps) {
			best, ok = p, true
		}
	}
	return best, ok
}

// PCIe sweeps c over o's directions × memory kinds × sizes. Each point
// does one untimed warm-up copy and then its timed copies.
func PCIe(ctx context.Context, c Copier, o PCIeOptions) (*PCIeResult, error) {
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultPCIeSizes
	}
	if len(o.Directions) == 0 {
		o.Directions = []Direction{HostToDevice, DeviceToHost}
	}
	if len(o.Memory) == 0 {
		o.Memory = []HostMemory{Pinned, Pageable}
	}
	if o.PointBytes <= 0 {
		o.PointBytes = 4 << 30
	}
	if o.MinIters <= 0 {
		o.MinIters = 3
	}
	if o.MaxIters < o.MinIters {
		o.MaxIters = max(1000, o.MinIters)
	}
	for _, d := range o.Directions {
		if d != HostToDevice && d != DeviceToHost {
			return nil, fmt.Errorf("%w: direction %q", ErrBadOptions, d)
		}
	}
	for _, m := range o.Memory {
		if m != Pinned && m != Pageable {
			return nil, fmt.Errorf("%w: host memory %q", ErrBadOptions, m)
		}
	}
	res := &PCIeResult{Device: c.Device(), Via: "local", Points: []PCIePoint{}}
	var sizes []int64
	for _, n := range o.Sizes {
		switch {
		case n <= 0:
			return nil, fmt.Errorf("%w: copy size %d", ErrBadOptions, n)
		case n > c.MaxBytes():
			res.Notes = append(res.Notes, fmt.Sprintf("%s skipped: larger than the %s the device's free memory allows", FormatSize(n), FormatSize(c.MaxBytes())))
		default:
			sizes = append(sizes, n)
		}
	}
	t0 := time.Now()
	total := len(sizes) * len(o.Directions) * len(o.Memory)
	for _, d := range o.Directions {
		for _, m := range o.Memory {
			for _, n := range sizes {
				iters := int(min(max(o.PointBytes/n, int64(o.MinIters)), int64(o.MaxIters)))
				if _, err := c.Copy(ctx, d, m, n, 1); err != nil {
					res.Wall = time.Since(t0).Seconds()
					return res, fmt.Errorf("bench: %s %s %s warm-up: %w", d, m, FormatSize(n), err)
				}
				el, err := c.Copy(ctx, d, m, n, iters)
				if err != nil {
					res.Wall = time.Since(t0).Seconds()
					return res, fmt.Errorf("bench: %s %s %s: %w", d, m, FormatSize(n), err)
				}
				p := PCIePoint{Direction: d, Memory: m, Bytes: n, Iterations: iters, Seconds: el.Seconds()}
				if el > 0 {
					p.GBps = float64(n) * float64(iters) / el.Seconds() / 1e9
					p.MeanUS = el.Seconds() / float64(iters) * 1e6
				}
				res.Points = append(res.Points, p)
				if o.Progress != nil {
					o.Progress(Progress{Done: len(res.Points), Total: total, Label: fmt.Sprintf("%s %s %s", d, m, FormatSize(n))})
				}
			}
		}
	}
	res.Wall = time.Since(t0).Seconds()
	return res, nil
}
