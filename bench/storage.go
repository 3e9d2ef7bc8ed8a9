package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Target is storage a storage sweep reads: an O_DIRECT file, a namespace
// of a controller driven by the userspace NVMe driver, or a fake.
type Target interface {
	// Info describes the target; Size and Align bound the reads.
	Info() TargetInfo
	// NewWorker returns the reader of worker i (0 ≤ i < queue depth) for
	// reads of bs bytes: its own buffer, and for NVMe its own queue pair.
	NewWorker(i, bs int) (Worker, error)
}

// Worker issues one read at a time; a sweep point runs queue-depth workers
// at once, so that many reads are in flight.
type Worker interface {
	// Read reads the worker's block size at off (a multiple of the block
	// size) and returns when the bytes have arrived.
	Read(ctx context.Context, off int64) error
	// Close releases the worker's buffer.
	Close() error
}

// TargetInfo describes a storage target in results.
type TargetInfo struct {
	// Kind is "file" or "nvme".
	Kind string `json:"kind"`
	// Name is the file's path or "BDF/nsid N".
	Name string `json:"name"`
	// Size is the number of bytes that may be read.
	Size int64 `json:"size"`
	// Align is the granularity of offsets and lengths (4096 with O_DIRECT,
	// the LBA size for NVMe).
	Align int `json:"align"`
	// Direct is false when reads go through the page cache (a file system
	// that refuses O_DIRECT): the numbers then measure memory, not storage.
	Direct bool `json:"direct"`
	// Model is the controller's model for NVMe targets.
	Model string `json:"model,omitempty"`
}

// Access patterns of a storage sweep.
const (
	// Sequential: the workers take consecutive blocks from one shared
	// cursor, wrapping at the end of the region — how layers are streamed.
	Sequential = "seq"
	// Random: each worker reads uniformly random aligned blocks.
	Random = "rand"
)

// StorageOptions say what to sweep.
type StorageOptions struct {
	// BlockSizes and QueueDepths are swept as a grid, in the given order
	// (default DefaultBlockSizes × DefaultQueueDepths).
	BlockSizes  []int
	QueueDepths []int
	// Pattern is Sequential (default) or Random.
	Pattern string
	// Duration is the measured time of each point (default 500 ms);
	// Warmup precedes it unmeasured (default Duration/10).
	Duration time.Duration
	Warmup   time.Duration
	// MinIOs extends a point until that many reads completed in its
	// measured window (default 2 × queue depth), so a slow device still
	// yields a rate.
	MinIOs int
	// Region bounds the bytes read from the start of the target (0: all).
	Region int64
	// Seed makes random offsets reproducible.
	Seed uint64
	// Progress, when set, is called after each point.
	Progress func(Progress)
}

// DefaultBlockSizes are 4 KiB … 4 MiB in powers of two.
var DefaultBlockSizes = Pow2Sizes(4<<10, 4<<20)

// DefaultQueueDepths are 1 … 32 in powers of two.
var DefaultQueueDepths = []int{1, 2, 4, 8, 16, 32}

// Pow2Sizes lists the powers of two from lo to hi inclusive (lo and hi
// rounded to powers of two first).
func Pow2Sizes(lo, hi int) []int {
	var out []int
	for s := 1; s <= hi && s > 0; s <<= 1 {
		if s >= lo {
			out = append(out, s)
		}
	}
	return out
}

// Progress reports a finished sweep point.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
	// Label names the point ("4 MiB qd 8", "H2D pinned 64 MiB").
	Label string `json:"label"`
}

// StoragePoint is one (block size, queue depth) measurement.
type StoragePoint struct {
	BlockSize  int `json:"block_size"`
	QueueDepth int `json:"queue_depth"`
	// IOs and Bytes completed within the measured window of Seconds.
	IOs     uint64  `json:"ios"`
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gb_per_s"`
	IOPS    float64 `json:"iops"`
	// LatencyUS is each read's time from issue to completion as the
	// worker saw it, in microseconds.
	LatencyUS Latency `json:"latency_us"`
	// CPUSecondsPerGB is the CPU time the process spent (user and
	// system, every thread) per 10^9 bytes read over the whole point,
	// warm-up included: what a driver costs in cores at a given rate,
	// which is how the userspace driver's polling and the kernel's
	// O_DIRECT path compare beside their GB/s. When the sweep runs in
	// stratad the daemon's other work counts too; 0 is unknown.
	CPUSecondsPerGB float64 `json:"cpu_s_per_gb,omitempty"`
}

// StorageResult is a whole storage sweep.
type StorageResult struct {
	Target   TargetInfo `json:"target"`
	Pattern  string     `json:"pattern"`
	Region   int64      `json:"region_bytes"`
	Duration float64    `json:"point_seconds"`
	// Via says where the sweep ran: "local" or "stratad".
	Via    string         `json:"via"`
	Points []StoragePoint `json:"points"`
	// Best is the index in Points of the highest GB/s (-1 when empty).
	Best  int      `json:"best"`
	Notes []string `json:"notes,omitempty"`
	// Wall is the whole sweep's time in seconds.
	Wall float64 `json:"wall_seconds"`
}

// Point returns the measurement for bs and qd.
func (r *StorageResult) Point(bs, qd int) (StoragePoint, bool) {
	for _, p := range r.Points {
		if p.BlockSize == bs && p.QueueDepth == qd {
			return p, true
		}
	}
	return StoragePoint{}, false
}

// ErrBadOptions is returned (wrapped) for a sweep that cannot run as
// asked: a block size the target cannot read, a region smaller than a
// block, an unknown pattern.
var ErrBadOptions = errors.New("bench: invalid options")

// Limits on what one sweep may ask for; the daemon applies them to
// clients' requests too.
const (
	MaxQueueDepth = 1024
	MaxBlockSize  = 64 << 20
)

// checkStorage fills defaults and validates o against info.
func checkStorage(o *StorageOptions, info TargetInfo) error {
	if len(o.BlockSizes) == 0 {
		o.BlockSizes = DefaultBlockSizes
	}
	if len(o.QueueDepths) == 0 {
		o.QueueDepths = DefaultQueueDepths
	}
	if o.Pattern == "" {
		o.Pattern = Sequential
	}
	if o.Pattern != Sequential && o.Pattern != Random {
		return fmt.Errorf("%w: pattern %q (want %s or %s)", ErrBadOptions, o.Pattern, Sequential, Random)
	}
	if o.Duration <= 0 {
		o.Duration = 500 * time.Millisecond
	}
	if o.Warmup < 0 {
		return fmt.Errorf("%w: negative warm-up", ErrBadOptions)
	}
	if o.Warmup == 0 {
		o.Warmup = o.Duration / 10
	}
	region := info.Size
	if o.Region > 0 {
		region = min(region, o.Region)
	}
	align := max(info.Align, 1)
	for _, bs := range o.BlockSizes {
		switch {
		case bs <= 0 || bs > MaxBlockSize:
			return fmt.Errorf("%w: block size %d (1 … %d)", ErrBadOptions, bs, MaxBlockSize)
		case bs%align != 0:
			return fmt.Errorf("%w: block size %d is not a multiple of %s's %d-byte alignment", ErrBadOptions, bs, info.Name, align)
		case int64(bs) > region:
			return fmt.Errorf("%w: block size %d is larger than the %d bytes that may be read from %s", ErrBadOptions, bs, region, info.Name)
		}
	}
	for _, qd := range o.QueueDepths {
		if qd < 1 || qd > MaxQueueDepth {
			return fmt.Errorf("%w: queue depth %d (1 … %d)", ErrBadOptions, qd, MaxQueueDepth)
		}
	}
	o.Region = region
	return nil
}

// Storage sweeps t over o's block sizes × queue depths. Each point runs
// queue-depth workers, each reading one block at a time, for o.Warmup and
// then o.Duration; a point's rates count the reads that completed inside
// its measured window, and its latencies are theirs. On error (or when ctx
// ends) it returns the points measured so far with the error.
func Storage(ctx context.Context, t Target, o StorageOptions) (*StorageResult, error) {
	info := t.Info()
	if err := checkStorage(&o, info); err != nil {
		return nil, err
	}
	res := &StorageResult{Target: info, Pattern: o.Pattern, Region: o.Region, Duration: o.Duration.Seconds(),
		Via: "local", Points: []StoragePoint{}, Best: -1}
	if !info.Direct {
		res.Notes = append(res.Notes, "reads go through the page cache (O_DIRECT refused): these numbers measure memory, not storage")
	}
	t0 := time.Now()
	total := len(o.BlockSizes) * len(o.QueueDepths)
	for _, bs := range o.BlockSizes {
		for _, qd := range o.QueueDepths {
			p, err := storagePoint(ctx, t, o, bs, qd)
			if err != nil {
				res.Wall = time.Since(t0).Seconds()
				return res, fmt.Errorf("bench: %s, block size %d, queue depth %d: %w", info.Name, bs, qd, err)
			}
			res.Points = append(res.Points, p)
			if res.Best < 0 || p.GBps > res.Points[res.Best].GBps {
				res.Best = len(res.Points) - 1
			}
			if o.Progress != nil {
				o.Progress(Progress{Done: len(res.Points), Total: total, Label: fmt.Sprintf("%s qd %d", FormatSize(int64(bs)), qd)})
			}
		}
	}
	res.Wall = time.Since(t0).Seconds()
	return res, nil
}

// completion is a read that finished after the nominal end of a point,
// counted only if it finished before the point's stop time.
type completion struct{ at, lat time.Duration }

// storagePoint measures one (bs, qd) point.
func storagePoint(ctx context.Context, t Target, o StorageOptions, bs, qd int) (StoragePoint, error) {
	workers := make([]Worker, 0, qd)
	defer func() {
		for _, w := range workers {
			w.Close()
		}
	}()
	for i := range qd {
		w, err := t.NewWorker(i, bs)
		if err != nil {
			return StoragePoint{}, fmt.Errorf("worker %d: %w", i, err)
		}
		workers = append(workers, w)
	}
	blocks := o.Region / int64(bs)
	minIOs := int64(o.MinIOs)
	if minIOs <= 0 {
		minIOs = int64(2 * qd)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		cursor    atomic.Int64 // next sequential block
		completed atomic.Int64 // reads completed since the window opened
		stopAt    atomic.Int64 // ns since base when the window closed; 0 while open
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
	)
	hists := make([]Histogram, qd)
	tails := make([][]completion, qd)
	var moved atomic.Uint64 // every byte read, warm-up and tail included
	cpu0 := processCPU()
	base := time.Now()
	start := o.Warmup
	end := start + o.Duration
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(bs)<<16|uint64(i)))
			for stopAt.Load() == 0 && ctx.Err() == nil {
				var blk int64
				if o.Pattern == Random {
					blk = rng.Int64N(blocks)
				} else {
					blk = (cursor.Add(1) - 1) % blocks
				}
				issued := time.Since(base)
				if err := w.Read(ctx, blk*int64(bs)); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("read at %d: %w", blk*int64(bs), err) })
					cancel()
					return
				}
				done := time.Since(base)
				moved.Add(uint64(bs))
				if done < start {
					continue
				}
				lat := done - issued
				if done <= end {
					hists[i].Record(lat)
				} else {
					tails[i] = append(tails[i], completion{done, lat})
				}
				if n := completed.Add(1); done >= end && n >= minIOs {
					stopAt.CompareAndSwap(0, int64(done))
				}
			}
		}()
	}
	wg.Wait()
	cpu := processCPU() - cpu0
	if firstErr != nil {
		return StoragePoint{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return StoragePoint{}, err
	}
	stop := time.Duration(stopAt.Load())
	var h Histogram
	for i := range hists {
		for _, c := range tails[i] {
			if c.at <= stop {
				hists[i].Record(c.lat)
			}
		}
		h.Merge(&hists[i])
	}
	secs := (stop - start).Seconds()
	p := StoragePoint{BlockSize: bs, QueueDepth: qd, IOs: h.Count(), Bytes: h.Count() * uint64(bs), Seconds: secs,
		LatencyUS: h.Summary()}
	if secs > 0 {
		p.GBps = float64(p.Bytes) / secs / 1e9
		p.IOPS = float64(p.IOs) / secs
	}
	if n := moved.Load(); n > 0 && cpu > 0 {
		p.CPUSecondsPerGB = cpu.Seconds() / (float64(n) / 1e9)
	}
	return p, nil
}

// FormatSize renders a byte count the way sweeps label it: "4 KiB",
// "1 MiB", "1.5 GiB", "512 B".
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[u])
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// SortedUnique returns the values of xs sorted, without repeats.
func SortedUnique(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}
