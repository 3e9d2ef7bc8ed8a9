package cpubench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostcpu"
	"github.com/strata-llm/strata/internal/hostmem"
)

// Types are the weight types engine/gemv has kernels for, the run's
// default.
var Types = []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.INT8Row, quant.F16, quant.BF16}

// Defaults of Options' zero fields.
const (
	// DefaultReadBytes caps the read probe's buffer (half of MemAvailable
	// when that is less): far beyond any CPU's caches.
	DefaultReadBytes = 4 << 30
	// DefaultWeightBytes is each weight type's matrices in all, or four
	// times the last-level cache when that is more (then matrices read in
	// turn leave little of themselves behind in it).
	DefaultWeightBytes = 1 << 30
	// DefaultTime is how long each measurement runs at least (and at
	// least three passes).
	DefaultTime = 300 * time.Millisecond
)

// cacheBufBytes is the buffer the probe's loop is timed on in L2: beyond
// every L1, within every L2.
const cacheBufBytes = 128 << 10

// ErrBadOptions wraps every refusal of Options.
var ErrBadOptions = errors.New("bad options")

// Options say what Run measures.
type Options struct {
	// Threads are the thread counts; nil means 1, 2, 4, … and every CPU.
	// Each must be at most the CPUs the process may use (and GOMAXPROCS).
	Threads []int
	// ReadBytes is the read probe's buffer; 0 means DefaultReadBytes or
	// half of MemAvailable, whichever is smaller.
	ReadBytes int64
	// WeightBytes is each weight type's matrices in all; 0 means
	// DefaultWeightBytes or four times the last-level cache, whichever is
	// more (less when MemAvailable is short).
	WeightBytes int64
	// Types are the weight types to run; nil means Types. A type the
	// kernel family lacks is reported as skipped.
	Types []quant.Type
	// Impl is the GEMV kernel family: "go", "avx2", "avx512", or "" for
	// the best this CPU has.
	Impl string
	// Time is each measurement's least duration; 0 means DefaultTime.
	Time time.Duration
	// Progress, when set, receives a line for each phase of the run.
	Progress func(msg string)
}

// ParseTypes reads a comma-separated list of weight types (Q4_K, q8_0,
// int8_row, ...), or "all" for Types.
func ParseTypes(s string) ([]quant.Type, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(Types), nil
	}
	var out []quant.Type
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		i := slices.IndexFunc(Types, func(t quant.Type) bool { return strings.EqualFold(t.String(), f) })
		if i < 0 {
			return nil, fmt.Errorf("%w: weight type %q: want one of %s, or all", ErrBadOptions, f, typeNames())
		}
		if !slices.Contains(out, Types[i]) {
			out = append(out, Types[i])
		}
	}
	return out, nil
}

func typeNames() string {
	var n []string
	for _, t := range Types {
		n = append(n, t.String())
	}
	return strings.Join(n, ", ")
}

// parseImpl finds the kernel family named s ("" the best).
func parseImpl(s string) (gemv.Impl, error) {
	impls := gemv.Impls()
	if s == "" {
		return impls[len(impls)-1], nil
	}
	for _, i := range impls {
		if strings.EqualFold(i.String(), s) {
			return i, nil
		}
	}
	var names []string
	for _, i := range impls {
		names = append(names, i.String())
	}
	return 0, fmt.Errorf("%w: kernel family %q: this CPU runs %s", ErrBadOptions, s, strings.Join(names, ", "))
}

// DefaultThreads is 1, 2, 4, … below cpus, then cpus.
func DefaultThreads(cpus int) []int {
	var out []int
	for t := 1; t < cpus; t *= 2 {
		out = append(out, t)
	}
	return append(out, cpus)
}

// run is one Run's state.
type run struct {
	o     Options
	start time.Time
	rep   *Report
	cpus  []int
	impl  gemv.Impl
}

func (r *run) progress(format string, a ...any) {
	if r.o.Progress != nil {
		r.o.Progress(fmt.Sprintf(format, a...))
	}
}

// Run measures memory reads, then every weight type's GEMVs. A failure
// after the run has started returns the report so far with the error.
func Run(ctx context.Context, o Options) (*Report, error) {
	r := &run{o: o, start: time.Now()}
	if err := r.setup(); err != nil {
		return nil, err
	}
	// The run's own goroutine is thread 0 of every GEMV pool: pin it
	// where the pools expect it for the whole run.
	restore, err := hostcpu.Pin(r.cpus[0])
	if err != nil {
		return nil, err
	}
	err = r.measure(ctx)
	err = errors.Join(err, restore())
	r.rep.Seconds = time.Since(r.start).Seconds()
	return r.rep, err
}

// setup checks the options and fills in the defaults and the CPU.
func (r *run) setup() error {
	o := &r.o
	cpus, cores, err := usableCPUs()
	if err != nil {
		return err
	}
	if o.Threads == nil {
		o.Threads = DefaultThreads(len(cpus))
	}
	if len(o.Threads) == 0 {
		return fmt.Errorf("%w: no thread counts", ErrBadOptions)
	}
	for _, t := range o.Threads {
		if t < 1 || t > len(cpus) {
			return fmt.Errorf("%w: %d threads: this process may use %d CPUs (1 to %d threads)", ErrBadOptions, t, len(cpus), len(cpus))
		}
	}
	if r.impl, err = parseImpl(o.Impl); err != nil {
		return err
	}
	if o.Types == nil {
		o.Types = Types
	}
	if o.Time == 0 {
		o.Time = DefaultTime
	}
	if o.Time < 0 || o.ReadBytes < 0 || o.WeightBytes < 0 {
		return fmt.Errorf("%w: negative time or size", ErrBadOptions)
	}
	mi, err := tier.ReadMemInfo()
	if err != nil {
		return err
	}
	if o.ReadBytes == 0 {
		o.ReadBytes = min(DefaultReadBytes, mi.Available/2)
	}
	llc := lastLevelCache(cpus)
	if o.WeightBytes == 0 {
		o.WeightBytes = min(max(DefaultWeightBytes, cacheMultiple*llc), mi.Available/4)
	}
	for _, s := range []struct {
		name string
		n    int64
	}{{"read buffer", o.ReadBytes}, {"weights", o.WeightBytes}} {
		if s.n > mi.Available*9/10 {
			return fmt.Errorf("%w: %s of %s: only %s of memory is available", ErrBadOptions, s.name, tier.FormatBytes(s.n), tier.FormatBytes(mi.Available))
		}
	}
	if o.ReadBytes < int64(readStep)*int64(slices.Max(o.Threads)) {
		return fmt.Errorf("%w: read buffer of %d bytes: want at least %d a thread", ErrBadOptions, o.ReadBytes, readStep)
	}
	r.cpus = cpus
	coresUsed := cores
	if len(cpus) < coresUsed {
		coresUsed = len(cpus)
	}
	r.rep = &Report{
		Started: r.start,
		CPU: CPU{
			Model: cpuModel(), CPUs: cpus, Cores: coresUsed, GOMAXPROCS: runtime.GOMAXPROCS(0),
			CacheBytes: llc, MemAvailable: mi.Available, Impl: r.impl.String(),
		},
	}
	return nil
}

// measure runs the read probe, then the GEMVs.
func (r *run) measure(ctx context.Context) error {
	if err := r.read(ctx); err != nil {
		return fmt.Errorf("memory read: %w", err)
	}
	readAt := map[int]float64{}
	for _, p := range r.rep.Read.Points {
		readAt[p.Threads] = p.Best
	}
	for _, t := range r.o.Types {
		if !gemv.Supports(r.impl, t) {
			r.rep.Skipped = append(r.rep.Skipped, Skipped{Type: t.String(), Reason: "no " + r.impl.String() + " kernel"})
			continue
		}
		g, err := r.gemv(ctx, t, readAt)
		if g != nil {
			r.rep.GEMV = append(r.rep.GEMV, *g)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// read measures the probe's loop in L2, then memory at every thread
// count, then the plain loop from memory on one thread.
func (r *run) read(ctx context.Context) error {
	rd := &r.rep.Read
	rd.Loop, rd.CacheBufBytes = readKernel, cacheBufBytes
	small := make([]byte, cacheBufBytes)
	fill(small)
	d := min(r.o.Time, 100*time.Millisecond) // a loop in L2 settles fast
	lr, err := loopRate(ctx, read, small, r.cpus[0], d)
	if err != nil {
		return err
	}
	nr, err := loopRate(ctx, naiveRead, small, r.cpus[0], d)
	if err != nil {
		return err
	}
	rd.LoopCache, rd.NaiveCache = lr.best, nr.best

	r.progress("memory read: writing %s", tier.FormatBytes(r.o.ReadBytes))
	buf, err := hostmem.Alloc(int(r.o.ReadBytes), hostmem.AllocOptions{HugePages: true})
	if err != nil {
		return err
	}
	defer buf.Free()
	b := buf.Bytes()
	rd.Bytes = int64(len(b))
	if err := touch(b, r.cpus); err != nil {
		return err
	}
	r.cacheNote("the read buffer", rd.Bytes)
	for _, t := range r.o.Threads {
		r.progress("memory read: %d threads", t)
		rt, err := readRate(ctx, b, r.cpus[:t], r.o.Time)
		if err != nil {
			return err
		}
		rd.Points = append(rd.Points, Point{Threads: t, Best: rt.best, Median: rt.median, Passes: rt.passes})
	}
	if slices.Contains(r.o.Threads, 1) {
		r.progress("memory read: a plain Go loop, 1 thread")
		tm, err := newTeam(r.cpus[:1], func(int) { sink.Add(naiveRead(b)) })
		if err != nil {
			return err
		}
		rt, err := measure(ctx, r.o.Time, rd.Bytes/8*8, tm.pass)
		if err := errors.Join(err, tm.close()); err != nil {
			return err
		}
		rd.Naive = rt.best
	}
	return nil
}

// cacheMultiple is how many times the last-level cache a buffer read
// again and again must be for its reads to come from memory: a cache
// keeps little of a cyclic stream that large.
const cacheMultiple = 4

// cacheNote notes a buffer that the last-level caches could partly hold.
func (r *run) cacheNote(what string, n int64) {
	if c := r.rep.CPU.CacheBytes; c > 0 && n < cacheMultiple*c {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("%s (%s) is less than %d× the last-level cache (%s): part of it may be read from the cache",
			what, tier.FormatBytes(n), cacheMultiple, tier.FormatBytes(c)))
	}
}

// gemv measures one weight type at every thread count.
func (r *run) gemv(ctx context.Context, t quant.Type, readAt map[int]float64) (*GEMV, error) {
	r.progress("GEMV %v: writing %s of weights", t, tier.FormatBytes(r.o.WeightBytes))
	m, err := newMatrices(t, r.o.WeightBytes)
	if err != nil {
		return nil, fmt.Errorf("%v weights: %w", t, err)
	}
	defer m.region.Free()
	if len(r.rep.GEMV) == 0 {
		r.cacheNote("each type's weights", m.bytes())
	}
	g := &GEMV{Type: t.String(), Impl: r.impl.String(), N: gemvN, Rows: m.rows, Matrices: m.count, WeightBytes: m.bytes()}
	for _, th := range r.o.Threads {
		r.progress("GEMV %v: %d threads", t, th)
		rt, err := gemvRate(ctx, r.impl, m, r.cpus[:th], r.o.Time)
		if err != nil {
			return g, err
		}
		g.Points = append(g.Points, Point{Threads: th, Best: rt.best, Median: rt.median, Passes: rt.passes, Ratio: rt.best / readAt[th]})
	}
	return g, nil
}
