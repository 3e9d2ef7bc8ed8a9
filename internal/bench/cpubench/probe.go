package cpubench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-llm/strata/internal/hostcpu"
	"github.com/strata-llm/strata/internal/hostmem"
)

// sink keeps every read loop's result live.
var sink atomic.Uint64

// team is one goroutine pinned to each of its CPUs, running the same
// function on its own index once per pass.
type team struct {
	start []chan struct{} // one token per pass; closed at the end
	fin   chan error
	ended sync.WaitGroup
}

// newTeam starts and pins one goroutine per CPU; each pass runs f(i) on
// the goroutine of cpus[i]. It returns once all are pinned.
func newTeam(cpus []int, f func(i int)) (*team, error) {
	t := &team{fin: make(chan error, len(cpus))}
	for i, c := range cpus {
		start := make(chan struct{}, 1)
		t.start = append(t.start, start)
		t.ended.Go(func() {
			restore, err := hostcpu.Pin(c)
			t.fin <- err
			if err != nil {
				for range start { // let the team close
				}
				return
			}
			for range start {
				f(i)
				t.fin <- nil
			}
			if err := restore(); err != nil {
				t.fin <- err
			}
		})
	}
	var errs []error
	for range cpus {
		errs = append(errs, <-t.fin)
	}
	if err := errors.Join(errs...); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// pass runs f on every member at once and returns the time from the
// first start to the last finish.
func (t *team) pass() time.Duration {
	t0 := time.Now()
	for _, s := range t.start {
		s <- struct{}{}
	}
	for range t.start {
		<-t.fin
	}
	return time.Since(t0)
}

// close ends the members, unpinning their threads; it reports an unpin
// that failed.
func (t *team) close() error {
	for _, s := range t.start {
		close(s)
	}
	t.ended.Wait()
	var errs []error
	for {
		select {
		case err := <-t.fin:
			errs = append(errs, err)
		default:
			return errors.Join(errs...)
		}
	}
}

// split cuts b into n nearly equal parts, each a multiple of readStep
// bytes (the remainder is left out).
func split(b []byte, n int) [][]byte {
	chunks := len(b) / readStep
	out := make([][]byte, n)
	for i := range out {
		lo, hi := chunks*i/n*readStep, chunks*(i+1)/n*readStep
		out[i] = b[lo:hi:hi]
	}
	return out
}

// rate is a series of passes' bytes per second: the best, the median.
type rate struct {
	best, median float64
	passes       int
}

// measure runs pass at least minPasses times and then until d has passed
// (at most maxPasses), each moving bytes, and returns the rates.
func measure(ctx context.Context, d time.Duration, bytes int64, pass func() time.Duration) (rate, error) {
	const minPasses, maxPasses = 3, 1000
	var rs []float64
	t0 := time.Now()
	for len(rs) < minPasses || (time.Since(t0) < d && len(rs) < maxPasses) {
		if err := ctx.Err(); err != nil {
			return rate{}, err
		}
		el := pass()
		rs = append(rs, float64(bytes)/max(el.Seconds(), 1e-9))
	}
	slices.Sort(rs)
	med := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		med = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return rate{best: rs[len(rs)-1], median: med, passes: len(rs)}, nil
}

// touch writes every page of b (non-zero bytes, so no page stays the
// shared zero page) with one pinned thread per CPU, each its own slice.
func touch(b []byte, cpus []int) error {
	parts := split(b, len(cpus))
	tm, err := newTeam(cpus, func(i int) { fill(parts[i]) })
	if err != nil {
		return err
	}
	tm.pass()
	fill(b[len(b)/readStep*readStep:])
	return tm.close()
}

// fill writes a non-zero pattern over b: a first 4 KiB by hand, then
// ever larger copies of what is written.
func fill(b []byte) {
	head := b[:min(len(b), 4096)]
	for i := range head {
		head[i] = byte(i*37) | 1
	}
	for k := len(head); k < len(b); k *= 2 {
		copy(b[k:], b[:k])
	}
}

// readRate is the rate at which the goroutines of cpus read buf, each its
// own slice, all at once.
func readRate(ctx context.Context, buf []byte, cpus []int, d time.Duration) (rate, error) {
	tm, bytes, err := readers(buf, cpus)
	if err != nil {
		return rate{}, err
	}
	r, err := measure(ctx, d, bytes, tm.pass)
	return r, errors.Join(err, tm.close())
}

// readers is a team of the goroutines of cpus whose pass reads buf, each
// its own slice, and the bytes a pass reads.
func readers(buf []byte, cpus []int) (*team, int64, error) {
	parts := split(buf, len(cpus))
	var bytes int64
	for _, p := range parts {
		bytes += int64(len(p))
	}
	tm, err := newTeam(cpus, func(i int) { sink.Add(read(parts[i])) })
	if err != nil {
		return nil, 0, fmt.Errorf("read with %d threads: %w", len(cpus), err)
	}
	return tm, bytes, nil
}

// loopRate is the rate at which loop reads buf again and again on one
// thread pinned to cpu: buf small enough to stay in a cache, it measures
// the loop, not memory. The thread times itself, so waking it costs the
// figure nothing.
func loopRate(ctx context.Context, loop func([]byte) uint64, buf []byte, cpu int, d time.Duration) (rate, error) {
	const reps = 256 // loops a pass, so a pass outlasts the clock's resolution
	var el time.Duration
	tm, err := newTeam([]int{cpu}, func(int) {
		t0 := time.Now()
		for range reps {
			sink.Add(loop(buf))
		}
		el = time.Since(t0)
	})
	if err != nil {
		return rate{}, err
	}
	r, err := measure(ctx, d, reps*int64(len(buf)), func() time.Duration { tm.pass(); return el })
	return r, errors.Join(err, tm.close())
}

// ReadBandwidth is the host's memory read rate with every CPU this
// process may use: the best of the passes over a buffer of n bytes (huge
// pages, written first) in d. It is a ceiling of a hybrid pass's CPU
// side, and a bound on the pass as a whole only where DRAM, not the
// cores' outstanding misses, sets it: the copy engine's reads of pinned
// memory come out of the same DRAM but not through the cores, so the two
// together can read more than the CPU alone (ReadWindow measures them at
// once).
func ReadBandwidth(ctx context.Context, n int64, d time.Duration) (float64, error) {
	buf, cpus, err := written(n)
	if err != nil {
		return 0, fmt.Errorf("memory read: %w", err)
	}
	defer buf.Free()
	r, err := readRate(ctx, buf.Bytes(), cpus, d)
	if err != nil {
		return 0, fmt.Errorf("memory read: %w", err)
	}
	return r.best, nil
}

// written is a buffer of n bytes in huge pages, every page written by the
// CPUs this process may use (so none is the shared zero page or still to
// fault in), and those CPUs.
func written(n int64) (*hostmem.Region, []int, error) {
	cpus, _, err := usableCPUs()
	if err != nil {
		return nil, nil, err
	}
	buf, err := hostmem.Alloc(int(n), hostmem.AllocOptions{HugePages: true})
	if err != nil {
		return nil, nil, err
	}
	if err := touch(buf.Bytes(), cpus); err != nil {
		buf.Free()
		return nil, nil, err
	}
	return buf, cpus, nil
}

// usableCPUs are the CPUs this process may use, at most one per P (a
// pinned thread needs a P of its own), and their core count.
func usableCPUs() ([]int, int, error) {
	cpus, cores, err := hostcpu.CPUs()
	if err != nil {
		return nil, 0, err
	}
	if mp := runtime.GOMAXPROCS(0); len(cpus) > mp {
		cpus = cpus[:mp]
	}
	return cpus, cores, nil
}

// ReadWindow reads a buffer of n bytes (huge pages, written first) with
// every CPU this process may use, pass after pass for at least d, and
// returns the mean rate over those passes and the window they span. It
// is the CPU's half of a probe of both links at once: another reader of
// the same memory (the copy engine) runs beside it and takes its own rate
// over the same window, which the buffer's allocation and first writes
// stay out of.
func ReadWindow(ctx context.Context, n int64, d time.Duration) (r float64, from, to time.Time, err error) {
	buf, cpus, err := written(n)
	if err != nil {
		return 0, from, to, fmt.Errorf("memory read window: %w", err)
	}
	defer buf.Free()
	tm, bytes, err := readers(buf.Bytes(), cpus)
	if err != nil {
		return 0, from, to, fmt.Errorf("memory read window: %w", err)
	}
	const minPasses = 3
	passes := 0
	from = time.Now()
	for passes < minPasses || time.Since(from) < d {
		if err = ctx.Err(); err != nil {
			break
		}
		tm.pass()
		passes++
	}
	to = time.Now()
	if err = errors.Join(err, tm.close()); err != nil {
		return 0, from, to, fmt.Errorf("memory read window: %w", err)
	}
	return float64(bytes) * float64(passes) / to.Sub(from).Seconds(), from, to, nil
}
