package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345, math.MaxUint64 >> 1, math.MaxUint64}
	for range 10000 {
		vals = append(vals, rng.Uint64()>>rng.IntN(64))
	}
	prev := -1
	slices.Sort(vals)
	for _, v := range vals {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucket %d of %d out of range", i, v)
		}
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Fatalf("%d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
		if v >= histLinear && float64(hi-lo) > float64(lo)/64 {
			t.Fatalf("bucket %d [%d, %d] is wider than 1/64", i, lo, hi)
		}
		if i < prev {
			t.Fatalf("buckets not monotonic at %d", v)
		}
		prev = i
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		gen  func(r *rand.Rand) time.Duration
	}{
		{"uniform µs", func(r *rand.Rand) time.Duration { return time.Duration(50_000 + r.IntN(100_000)) }},
		{"exponential", func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * 200_000) }},
		{"bimodal with a tail", func(r *rand.Rand) time.Duration {
			if r.IntN(1000) == 0 {
				return 50 * time.Millisecond
			}
			return time.Duration(80_000 + r.IntN(2000))
		}},
		{"tiny", func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(200)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			var a, b Histogram
			var all []time.Duration
			for i := range 20000 {
				d := tc.gen(rng)
				all = append(all, d)
				if i%2 == 0 {
					a.Record(d)
				} else {
					b.Record(d)
				}
			}
			a.Merge(&b)
			slices.Sort(all)
			if a.Count() != uint64(len(all)) {
				t.Fatalf("count %d", a.Count())
			}
			last := time.Duration(-1)
			for _, q := range []float64{0, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
				got := a.Quantile(q)
				rank := max(int(math.Ceil(q*float64(len(all))))-1, 0)
				exact := all[rank]
				if diff := math.Abs(float64(got - exact)); diff > float64(exact)/64+1 {
					t.Errorf("q%.3f = %v, exact %v", q, got, exact)
				}
				if got < last {
					t.Errorf("q%.3f = %v below the previous quantile %v", q, got, last)
				}
				last = got
			}
			s := a.Summary()
			if !(s.Min <= s.P50 && s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.P999 && s.P999 <= s.Max) || s.Mean < s.Min || s.Mean > s.Max {
				t.Fatalf("summary out of order: %+v", s)
			}
			if s.Min != float64(all[0])/1e3 || s.Max != float64(all[len(all)-1])/1e3 {
				t.Fatalf("min/max %v/%v, want %v/%v", s.Min, s.Max, all[0], all[len(all)-1])
			}
		})
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Summary() != (Latency{}) {
		t.Fatal("empty histogram")
	}
}

// memTarget is an in-memory Target: reads copy from data after delay,
// and the target checks every offset and counts reads in flight.
type memTarget struct {
	data  []byte
	align int
	delay time.Duration
	spin  time.Duration // CPU each read burns, busy (0: none)
	fail  int           // reads of this block size fail (0: none)

	mu       sync.Mutex
	offsets  map[int][]int64 // block size → offsets read
	inflight atomic.Int32
	peak     atomic.Int32
	bad      atomic.Value // first invalid request
}

func newMem(size, align int, delay time.Duration) *memTarget {
	d := make([]byte, size)
	for i := range d {
		d[i] = byte(i * 7)
	}
	return &memTarget{data: d, align: align, delay: delay, offsets: map[int][]int64{}}
}

func (m *memTarget) Info() TargetInfo {
	return TargetInfo{Kind: "mem", Name: "mem", Size: int64(len(m.data)), Align: m.align, Direct: true}
}

func (m *memTarget) NewWorker(i, bs int) (Worker, error) {
	return &memWorker{m: m, buf: make([]byte, bs)}, nil
}

type memWorker struct {
	m   *memTarget
	buf []byte
}

func (w *memWorker) Read(ctx context.Context, off int64) error {
	m := w.m
	n := m.inflight.Add(1)
	defer m.inflight.Add(-1)
	for p := m.peak.Load(); n > p && !m.peak.CompareAndSwap(p, n); p = m.peak.Load() {
	}
	if off%int64(len(w.buf)) != 0 || off < 0 || off+int64(len(w.buf)) > int64(len(m.data)) {
		m.bad.CompareAndSwap(nil, fmt.Sprintf("read of %d at %d", len(w.buf), off))
	}
	if len(w.buf) == m.fail {
		return errors.New("injected")
	}
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	if m.spin > 0 {
		burn(m.spin)
	}
	copy(w.buf, m.data[off:])
	m.mu.Lock()
	m.offsets[len(w.buf)] = append(m.offsets[len(w.buf)], off)
	m.mu.Unlock()
	return ctx.Err()
}

func (w *memWorker) Close() error { return nil }

// checkPoint checks the arithmetic and ordering of one point.
func checkPoint(t *testing.T, p StoragePoint) {
	t.Helper()
	l := p.LatencyUS
	if p.IOs == 0 || p.Seconds <= 0 || p.Bytes != p.IOs*uint64(p.BlockSize) {
		t.Fatalf("point %+v", p)
	}
	if math.Abs(p.GBps-float64(p.Bytes)/p.Seconds/1e9) > 1e-9*p.GBps || math.Abs(p.IOPS-float64(p.IOs)/p.Seconds) > 1e-9*p.IOPS {
		t.Fatalf("rates of %+v", p)
	}
	if !(l.Min > 0 && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Fatalf("latencies out of order: %+v", l)
	}
}

func TestStorageSweep(t *testing.T) {
	t.Parallel()
	m := newMem(1<<20, 512, 200*time.Microsecond)
	var progress []Progress
	res, err := Storage(context.Background(), m, StorageOptions{
		BlockSizes: []int{4096, 65536}, QueueDepths: []int{1, 4}, Duration: 60 * time.Millisecond,
		Progress: func(p Progress) { progress = append(progress, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad := m.bad.Load(); bad != nil {
		t.Fatalf("invalid read: %v", bad)
	}
	if len(res.Points) != 4 || len(progress) != 4 || progress[3].Done != 4 || progress[3].Total != 4 || progress[0].Label != "4 KiB qd 1" {
		t.Fatalf("points %d, progress %+v", len(res.Points), progress)
	}
	want := [][2]int{{4096, 1}, {4096, 4}, {65536, 1}, {65536, 4}}
	for i, p := range res.Points {
		if p.BlockSize != want[i][0] || p.QueueDepth != want[i][1] {
			t.Fatalf("point %d is %d/%d, want %v", i, p.BlockSize, p.QueueDepth, want[i])
		}
		checkPoint(t, p)
		// Every read sleeps 200 µs: no latency can be shorter.
		if p.LatencyUS.Min < 200 {
			t.Fatalf("latency %v µs below the target's delay", p.LatencyUS.Min)
		}
		if p.IOs < uint64(2*p.QueueDepth) {
			t.Fatalf("fewer reads than MinIOs: %+v", p)
		}
	}
	best := 0
	for i, p := range res.Points {
		if p.GBps > res.Points[best].GBps {
			best = i
		}
	}
	if res.Best != best || res.Target.Name != "mem" || res.Region != 1<<20 || res.Pattern != Sequential || res.Via != "local" {
		t.Fatalf("result %+v", res)
	}
	if int(m.peak.Load()) != 4 {
		t.Fatalf("peak reads in flight %d, want the deepest queue, 4", m.peak.Load())
	}
	// Sequential: the offsets of one block size are consecutive blocks
	// (in completion order they may swap among the qd in flight).
	offs := slices.Clone(m.offsets[65536])
	slices.Sort(offs)
	for i := 1; i < len(offs); i++ {
		if d := offs[i] - offs[i-1]; d != 0 && d != 65536 && offs[i] != 0 {
			t.Fatalf("sequential offsets jump by %d: %v", d, offs[:min(len(offs), 40)])
		}
	}
	if _, ok := res.Point(4096, 4); !ok {
		t.Fatal("Point(4096, 4) missing")
	}
	js, err := json.Marshal(res)
	if err != nil || !bytes.Contains(js, []byte(`"latency_us":{"min":`)) || !bytes.Contains(js, []byte(`"gb_per_s":`)) {
		t.Fatalf("JSON %s: %v", js, err)
	}
}

func TestStorageRandomRegion(t *testing.T) {
	t.Parallel()
	m := newMem(4<<20, 4096, 0)
	res, err := Storage(context.Background(), m, StorageOptions{BlockSizes: []int{8192}, QueueDepths: []int{2}, Pattern: Random,
		Region: 1 << 20, Duration: 20 * time.Millisecond, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	checkPoint(t, res.Points[0])
	seen := map[int64]bool{}
	for _, off := range m.offsets[8192] {
		if off >= 1<<20 {
			t.Fatalf("read at %d outside the 1 MiB region", off)
		}
		seen[off] = true
	}
	if len(seen) < 64 {
		t.Fatalf("random pattern touched only %d of 128 blocks", len(seen))
	}
}

func TestStorageErrors(t *testing.T) {
	t.Parallel()
	m := newMem(1<<20, 4096, 0)
	tests := []struct {
		name string
		o    StorageOptions
		want string
	}{
		{"misaligned block", StorageOptions{BlockSizes: []int{1000}}, "alignment"},
		{"block past region", StorageOptions{BlockSizes: []int{4096}, Region: 2048}, "larger than"},
		{"block past target", StorageOptions{BlockSizes: []int{2 << 20}}, "larger than"},
		{"zero depth", StorageOptions{BlockSizes: []int{4096}, QueueDepths: []int{0}}, "queue depth"},
		{"pattern", StorageOptions{BlockSizes: []int{4096}, Pattern: "zigzag"}, "pattern"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Storage(context.Background(), m, tc.o)
			if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrBadOptions mentioning %q", err, tc.want)
			}
		})
	}
	// A read error stops the sweep and keeps the points before it.
	m.fail = 65536
	res, err := Storage(context.Background(), m, StorageOptions{BlockSizes: []int{4096, 65536}, QueueDepths: []int{1}, Duration: 20 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "block size 65536") {
		t.Fatalf("err %v", err)
	}
	if res == nil || len(res.Points) != 1 {
		t.Fatalf("partial result %+v", res)
	}
	// Cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.fail = 0
	if _, err := Storage(ctx, m, StorageOptions{BlockSizes: []int{4096}, QueueDepths: []int{1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled sweep: %v", err)
	}
}

// fakeCopier pretends to move bytes at rate GB/s (virtual time).
type fakeCopier struct {
	rate  float64
	max   int64
	calls []string
	fail  string
}

func (f *fakeCopier) Device() string  { return "fake GPU" }
func (f *fakeCopier) MaxBytes() int64 { return f.max }
func (f *fakeCopier) Copy(ctx context.Context, d Direction, m HostMemory, n int64, iters int) (time.Duration, error) {
	key := fmt.Sprintf("%s %s %d", d, m, n)
	f.calls = append(f.calls, fmt.Sprintf("%s x%d", key, iters))
	if key == f.fail {
		return 0, errors.New("injected")
	}
	rate := f.rate
	if m == Pageable {
		rate /= 2
	}
	return time.Duration(float64(n*int64(iters)) / (rate * 1e9) * 1e9), nil
}

func TestPCIeSweep(t *testing.T) {
	t.Parallel()
	f := &fakeCopier{rate: 20, max: 16 << 20}
	var prog int
	res, err := PCIe(context.Background(), f, PCIeOptions{Sizes: []int64{64 << 10, 1 << 20, 16 << 20, 1 << 30}, PointBytes: 64 << 20,
		Progress: func(Progress) { prog++ }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 12 || prog != 12 || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "1 GiB skipped") {
		t.Fatalf("%d points, %d progress, notes %q", len(res.Points), prog, res.Notes)
	}
	for _, p := range res.Points {
		want := 20.0
		if p.Memory == Pageable {
			want = 10
		}
		if math.Abs(p.GBps-want) > 0.01 || p.Iterations != int(min(max(64<<20/p.Bytes, 3), 1000)) || p.MeanUS <= 0 {
			t.Fatalf("point %+v", p)
		}
	}
	if b, ok := res.Best(HostToDevice, Pinned); !ok || math.Abs(b.GBps-20) > 0.01 {
		t.Fatalf("best %+v", b)
	}
	// Each timed point follows one warm-up copy.
	if f.calls[0] != "H2D pinned 65536 x1" || f.calls[1] != "H2D pinned 65536 x1000" {
		t.Fatalf("calls %q", f.calls[:2])
	}
	f = &fakeCopier{rate: 20, max: 1 << 20, fail: "D2H pinned 1048576"}
	res, err = PCIe(context.Background(), f, PCIeOptions{Sizes: []int64{1 << 20}})
	if err == nil || len(res.Points) != 2 {
		t.Fatalf("failing copy: %v, %d points", err, len(res.Points))
	}
	if _, err := PCIe(context.Background(), f, PCIeOptions{Directions: []Direction{"sideways"}}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("bad direction: %v", err)
	}
}

// fakeStage is a Stager over a byte slice and an asynchronous Uploader
// into a fake device, checking that no slot is refilled while its copy is
// in flight.
type fakeStage struct {
	src   []byte
	slots [][]byte
	dev   []byte
	busy  []atomic.Bool
	pos   []int64 // where in the output each slot's chunk goes
	next  int64
	fault atomic.Value
}

func (f *fakeStage) Size() int64 { return int64(len(f.src)) }
func (f *fakeStage) Align() int  { return 512 }
func (f *fakeStage) Read(ctx context.Context, slot int, off int64, n int) error {
	if f.busy[slot].Load() {
		f.fault.CompareAndSwap(nil, fmt.Sprintf("slot %d refilled while its copy runs", slot))
	}
	copy(f.slots[slot][:n], f.src[off:])
	f.pos[slot] = f.next
	f.next += int64(n)
	return nil
}
func (f *fakeStage) Upload(ctx context.Context, slot, n int) (func() error, error) {
	f.busy[slot].Store(true)
	done := make(chan struct{})
	at := f.pos[slot]
	go func() {
		time.Sleep(100 * time.Microsecond)
		copy(f.dev[at:at+int64(n)], f.slots[slot][:n])
		f.busy[slot].Store(false)
		close(done)
	}()
	return func() error { <-done; return nil }, nil
}

func TestMeasureRoute(t *testing.T) {
	t.Parallel()
	src := make([]byte, 40<<10)
	for i := range src {
		src[i] = byte(i*13 + i>>8)
	}
	const chunk, slots = 4096, 3
	f := &fakeStage{src: src, busy: make([]atomic.Bool, slots), pos: make([]int64, slots), dev: make([]byte, 64<<10)}
	for range slots {
		f.slots = append(f.slots, make([]byte, chunk))
	}
	var r Route
	if err := MeasureRoute(context.Background(), f, f, RouteOptions{Bytes: 64 << 10, Chunk: chunk, Slots: slots}, &r); err != nil {
		t.Fatal(err)
	}
	if v := f.fault.Load(); v != nil {
		t.Fatal(v)
	}
	// 64 KiB out of a 40 KiB source: the reads wrap after 10 chunks.
	for j := 0; j < 16; j++ {
		want := src[(j%10)*chunk : (j%10+1)*chunk]
		if !bytes.Equal(f.dev[j*chunk:(j+1)*chunk], want) {
			t.Fatalf("chunk %d did not arrive intact", j)
		}
	}
	if !r.Measured || r.Bytes != 64<<10 || r.GBps <= 0 || r.Seconds <= 0 || r.Chunk != chunk || r.Slots != slots {
		t.Fatalf("route %+v", r)
	}
	if err := MeasureRoute(context.Background(), f, f, RouteOptions{Chunk: 1000}, &r); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("misaligned chunk: %v", err)
	}
}

// TestDeps keeps package bench free of everything but the standard
// library: daemon/api carries its results, and the client links it.
func TestDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/strata-llm/strata/bench").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.Contains(d, ".") && d != "github.com/strata-llm/strata/bench" {
			t.Errorf("bench depends on %s", d)
		}
	}
}

// burn spends d of its thread's CPU time (not wall time: on a loaded host
// the thread may wait for a core).
func burn(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rusageThread = 1 // RUSAGE_THREAD, Linux
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(rusageThread, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for t0 := cpu(); cpu()-t0 < d; {
	}
}

// TestStorageCPUPerGB: a target whose every read burns 300 µs of CPU costs
// at least that per read in the point's CPU per GB (the process's other
// work, e.g. parallel tests, can only add to it).
func TestStorageCPUPerGB(t *testing.T) {
	t.Parallel()
	m := newMem(1<<20, 512, 0)
	m.spin = 300 * time.Microsecond
	res, err := Storage(context.Background(), m, StorageOptions{BlockSizes: []int{4096}, QueueDepths: []int{2}, Duration: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Points[0]
	floor := 0.9 * m.spin.Seconds() * 1e9 / 4096
	if p.CPUSecondsPerGB < floor {
		t.Fatalf("CPU per GB %.1f s, want at least %.1f s (%v per %d-byte read)", p.CPUSecondsPerGB, floor, m.spin, 4096)
	}
	t.Logf("%.1f s of CPU per GB (floor %.1f s)", p.CPUSecondsPerGB, floor)
}
