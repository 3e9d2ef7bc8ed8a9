package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

// Links are the speeds of the pipeline's three stages. Bandwidths are bytes
// per second; latencies are the time to the first byte of one transfer
// (what the pipeline depth must hide); overheads are the fixed busy time
// each layer's transfer adds to its link.
type Links struct {
	// StorageToHost is stage 1: tier C into host staging (or straight into
	// device slots when device memory is host memory).
	StorageToHost float64 `json:"storage_bps"`
	// HostToDevice is stage 2: host memory into a device slot.
	HostToDevice float64 `json:"h2d_bps"`
	// Compute is the rate at which the device consumes weight bytes in a
	// decode pass.
	Compute              float64       `json:"compute_bps"`
	StorageLatency       time.Duration `json:"storage_latency_ns"`
	HostToDeviceLatency  time.Duration `json:"h2d_latency_ns"`
	StorageOverhead      time.Duration `json:"storage_overhead_ns"`
	HostToDeviceOverhead time.Duration `json:"h2d_overhead_ns"`
	// Notes says where each number came from (measured how, or default).
	Notes []string `json:"notes,omitempty"`
}

// DefaultLinks are the speeds assumed when nothing is measured: a PCIe 4
// NVMe SSD (3 GB/s, 100 µs to first byte), a PCIe 4 x16 link from pinned
// memory (25 GB/s, 10 µs) and a GPU consuming weights at 1 TB/s.
func DefaultLinks() Links {
	return Links{
		StorageToHost: 3e9, HostToDevice: 25e9, Compute: 1e12,
		StorageLatency: 100 * time.Microsecond, HostToDeviceLatency: 10 * time.Microsecond,
		StorageOverhead: 20 * time.Microsecond, HostToDeviceOverhead: 5 * time.Microsecond,
		Notes: []string{"defaults (not measured)"},
	}
}

func (l *Links) validate() error {
	for _, v := range []struct {
		name string
		bps  float64
	}{{"storage", l.StorageToHost}, {"host-to-device", l.HostToDevice}, {"compute", l.Compute}} {
		if !(v.bps > 0) || math.IsInf(v.bps, 0) {
			return fmt.Errorf("%s bandwidth %v must be positive and finite", v.name, v.bps)
		}
	}
	if l.StorageLatency < 0 || l.HostToDeviceLatency < 0 || l.StorageOverhead < 0 || l.HostToDeviceOverhead < 0 {
		return errors.New("negative link latency or overhead")
	}
	return nil
}

// MeasureOptions controls MeasureLinks.
type MeasureOptions struct {
	// Path is a file on the storage tier C will use (the pool itself);
	// empty skips the storage measurement.
	Path string
	// StorageBytes is how much of Path to read; 0 means 256 MiB.
	StorageBytes int64
	// ComputeType is the weight format whose dot-product rate is measured
	// (the model's dominant matrix type); 0 means Q4_K.
	ComputeType quant.Type
	// Duration bounds the copy and compute measurements each; 0 means
	// 200 ms.
	Duration time.Duration
	// Kernel is the dot-product kernel compute is measured on: the one
	// the CPU backend runs (the engine passes engine/gemv's); nil means
	// the reference quant.DotRows.
	Kernel ComputeKernel
}

// ComputeKernel computes y[r] = row r of rows (n elements of t each) · x.
type ComputeKernel func(t quant.Type, rows []byte, n int, x, y []float32) error

// MeasureLinks measures the links of the CPU backend quickly (well under
// two seconds): storage by reading the start of opts.Path with O_DIRECT
// (plain reads where the filesystem refuses it, which the page cache may
// flatter), host-to-device as memmove bandwidth (on the CPU backend the
// "device" slot is host memory), and compute as the rate of the engine's
// dot-product kernels over a matrix of opts.ComputeType on every core.
// Links not measured keep DefaultLinks' values.
func MeasureLinks(ctx context.Context, opts MeasureOptions) (Links, error) {
	l := DefaultLinks()
	l.Notes = nil
	d := opts.Duration
	if d <= 0 {
		d = 200 * time.Millisecond
	}
	if opts.Path != "" {
		if err := l.MeasureStorageOf(ctx, opts.Path, opts.StorageBytes); err != nil {
			return l, err
		}
	} else {
		l.Notes = append(l.Notes, "storage: default")
	}
	l.SetMemmove(MeasureCopy(ctx, d))
	typ := opts.ComputeType
	if typ == 0 {
		typ = DefaultComputeType
	}
	c, err := MeasureCompute(ctx, typ, d, opts.Kernel)
	if err != nil {
		return l, err
	}
	l.SetCompute(typ, c)
	return l, nil
}

// DefaultComputeType is the weight type whose dot products stand for the
// CPU's compute rate when a model's main type is not known.
const DefaultComputeType = quant.Q4_K

// SetMemmove sets l's host-to-device link to a memmove bandwidth, as the
// CPU backend's "device" slot is host memory, and notes it.
func (l *Links) SetMemmove(bw float64) {
	l.HostToDevice, l.HostToDeviceLatency, l.HostToDeviceOverhead = bw, time.Microsecond, 0
	l.Notes = append(l.Notes, "h2d: memmove bandwidth (CPU backend)")
}

// SetCompute sets l's compute rate to bw, measured over dot products of
// typ on every core, and notes it.
func (l *Links) SetCompute(typ quant.Type, bw float64) {
	l.Compute = bw
	l.Notes = append(l.Notes, fmt.Sprintf("compute: %v dot products on %d cores", typ, runtime.GOMAXPROCS(0)))
}

// StorageResult is what MeasureStorage found.
type StorageResult struct {
	Bandwidth float64       // bytes/s of sequential reads
	Latency   time.Duration // median time of a 4 KiB read
	Bytes     int64         // bytes read for the bandwidth
	Direct    bool          // O_DIRECT was used
	// Via says how the reads were made when not with O_DIRECT on a file
	// (the userspace NVMe driver); it goes into the links' notes.
	Via string
}

// storageChunk is the size of one read; storageQD reads are kept in flight.
const (
	storageChunk = 4 << 20
	storageQD    = 4
)

// MeasureStorageOf sets l's storage link from MeasureStorage(path, limit)
// and notes how it was read; on error l is unchanged. The CPU backend's
// MeasureLinks and the GPU backend's plan both measure tier C this way.
func (l *Links) MeasureStorageOf(ctx context.Context, path string, limit int64) error {
	st, err := MeasureStorage(ctx, path, limit)
	if err != nil {
		return err
	}
	l.SetStorage(st, path)
	return nil
}

// SetStorage sets l's storage link from st, measured on path, and notes
// how it was read.
func (l *Links) SetStorage(st StorageResult, path string) {
	l.StorageToHost, l.StorageLatency = st.Bandwidth, st.Latency
	how := "O_DIRECT"
	switch {
	case st.Via != "":
		how = st.Via
	case !st.Direct:
		how = "buffered reads (O_DIRECT refused; page cache may inflate it)"
	}
	l.Notes = append(l.Notes, fmt.Sprintf("storage: %s of %s, %s", FormatBytes(st.Bytes), path, how))
}

// MeasureStorage reads up to limit bytes (0: 256 MiB) from the start of
// path, storageQD chunks of 4 MiB in flight, with O_DIRECT into page-aligned
// buffers so the page cache neither helps nor hurts, and times a few 4 KiB
// reads for latency. Filesystems that refuse O_DIRECT (tmpfs) are read with
// plain reads instead, and Direct says so.
func MeasureStorage(ctx context.Context, path string, limit int64) (StorageResult, error) {
	if limit <= 0 {
		limit = 256 << 20
	}
	var res StorageResult
	f, err := hostmem.OpenDirect(path)
	if errors.Is(err, hostmem.ErrDirectRefused) {
		f, err = hostmem.OpenBuffered(path)
	}
	if err != nil {
		return res, fmt.Errorf("measuring storage: %w", err)
	}
	defer f.Close()
	res.Direct = f.Direct()
	size := min(f.Size(), limit) / PageSize * PageSize
	if size < PageSize {
		return res, fmt.Errorf("measuring storage: %s has %d bytes, too few to measure", path, f.Size())
	}
	bufs := make([][]byte, storageQD)
	for i := range bufs {
		r, err := hostmem.Alloc(storageChunk, hostmem.AllocOptions{})
		if err != nil {
			return res, fmt.Errorf("measuring storage: aligned buffer: %w", err)
		}
		defer r.Free()
		bufs[i] = r.Bytes()
	}
	readAt := func(b []byte, off int64) error {
		_, err := f.ReadAt(b, off)
		if err == io.EOF {
			err = nil
		}
		return err
	}
	return measureReads(ctx, res, size, bufs, readAt)
}

// MeasureSource measures a tier-C source as MeasureStorage measures a
// file: a few 4 KiB reads for latency, then up to limit bytes (0: 256 MiB)
// from its start, storageQD chunks in flight, into buffers from the
// source's own Alloc (DMA-mapped for the NVMe driver). It is how the
// planner learns the speed of a pool that is not a file: the reads go
// through the same driver, queues and staging memory that tier C will use.
// Direct is set: nothing passes through the page cache.
func MeasureSource(ctx context.Context, src Source, limit int64) (StorageResult, error) {
	if limit <= 0 {
		limit = 256 << 20
	}
	res := StorageResult{Direct: true}
	align := int64(max(src.Align(), 1))
	unit := max(align, PageSize)
	size := min(src.Size(), limit) / unit * unit
	if size < unit {
		return res, fmt.Errorf("measuring storage: the source has %d bytes, too few to measure", src.Size())
	}
	bufs := make([][]byte, storageQD)
	for i := range bufs {
		b, err := src.Alloc(storageChunk)
		if err != nil {
			return res, fmt.Errorf("measuring storage: staging buffer: %w", err)
		}
		defer b.Free()
		bufs[i] = b.Bytes()
	}
	readAt := func(b []byte, off int64) error {
		n := (int64(len(b)) + align - 1) / align * align
		return src.ReadAt(ctx, b[:n], off)
	}
	return measureReads(ctx, res, size, bufs, readAt)
}

// measureReads times the latency and bandwidth reads of MeasureStorage and
// MeasureSource: size bytes (a multiple of PageSize) read with readAt into
// the storageQD buffers of storageChunk bytes.
func measureReads(ctx context.Context, res StorageResult, size int64, bufs [][]byte, readAt func(b []byte, off int64) error) (StorageResult, error) {
	// Latency: a few single-page reads spread over the file.
	var lats []time.Duration
	for i := range 5 {
		off := size / 5 * int64(i) / PageSize * PageSize
		t0 := time.Now()
		if err := readAt(bufs[0][:PageSize], off); err != nil {
			return res, fmt.Errorf("measuring storage: %w", err)
		}
		lats = append(lats, time.Since(t0))
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		res.Latency = lats[len(lats)/2]
	}
	// Bandwidth: sequential chunks, storageQD in flight.
	chunks := (size + storageChunk - 1) / storageChunk
	var (
		mu   sync.Mutex
		next int64
		rerr error
		wg   sync.WaitGroup
	)
	t0 := time.Now()
	for w := range storageQD {
		wg.Add(1)
		go func(buf []byte) {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				c := next
				next++
				mu.Unlock()
				if c >= chunks {
					return
				}
				off := c * storageChunk
				n := min(int64(storageChunk), size-off)
				if err := readAt(buf[:n], off); err != nil {
					mu.Lock()
					rerr = errors.Join(rerr, err)
					mu.Unlock()
					return
				}
			}
		}(bufs[w])
	}
	wg.Wait()
	el := time.Since(t0)
	if rerr != nil {
		return res, fmt.Errorf("measuring storage: %w", rerr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Bytes = size
	res.Bandwidth = float64(size) / max(el.Seconds(), 1e-9)
	return res, nil
}

// MeasureCopy returns memmove bandwidth (bytes/s) between two 64 MiB
// buffers over about d: the CPU backend's host-to-device copy.
func MeasureCopy(ctx context.Context, d time.Duration) float64 {
	const size = 64 << 20
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in before timing
	var n int64
	t0 := time.Now()
	for time.Since(t0) < d && ctx.Err() == nil || n == 0 {
		copy(dst, src)
		n += size
	}
	return float64(n) / max(time.Since(t0).Seconds(), 1e-9)
}

// MeasureCompute returns the rate (weight bytes/s) at which kernel (nil:
// the reference quant.DotRows) dots a matrix of typ (about 64 MiB, larger
// than caches) with a vector, rows split over GOMAXPROCS goroutines, over
// about d.
func MeasureCompute(ctx context.Context, typ quant.Type, d time.Duration, kernel ComputeKernel) (float64, error) {
	if kernel == nil {
		kernel = quant.DotRows
	}
	const cols = 4096
	rb, err := typ.RowBytes(cols)
	if err != nil {
		return 0, fmt.Errorf("measuring compute: %w", err)
	}
	rows := int((64 << 20) / rb)
	w := make([]byte, int64(rows)*rb)
	if err := quant.FillRandomRows(typ, w, cols, 1, 0.02); err != nil {
		return 0, fmt.Errorf("measuring compute: %w", err)
	}
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	workers := runtime.GOMAXPROCS(0)
	per := (rows + workers - 1) / workers
	ys := make([][]float32, workers)
	for i := range ys {
		ys[i] = make([]float32, per)
	}
	pass := func() error {
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for i := range workers {
			r0 := i * per
			r1 := min(rows, r0+per)
			if r0 >= r1 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = kernel(typ, w[int64(r0)*rb:int64(r1)*rb], cols, x, ys[i][:r1-r0])
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if err := pass(); err != nil { // warm up
		return 0, fmt.Errorf("measuring compute: %w", err)
	}
	var n int64
	t0 := time.Now()
	for time.Since(t0) < d && ctx.Err() == nil || n == 0 {
		if err := pass(); err != nil {
			return 0, fmt.Errorf("measuring compute: %w", err)
		}
		n += int64(len(w))
	}
	return float64(n) / max(time.Since(t0).Seconds(), 1e-9), nil
}
