package gpu

import (
	"fmt"
	"sort"
	"time"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// HostToDevicePeak measures pinned host-to-device copy bandwidth on dev:
// bytes per second over iters back-to-back copies of n bytes from
// page-locked host memory (after one untimed copy), timed with events. It
// is the ceiling a streamed layer's copy can reach: the planner takes it
// as the host-to-device link, and benchmarks divide by it for every
// "PCIe limit" ratio.
func HostToDevicePeak(dev *cudadrv.Device, n int64, iters int) (float64, error) {
	if n <= 0 || iters < 1 {
		return 0, fmt.Errorf("host-to-device peak: %d bytes x %d copies", n, iters)
	}
	var bw float64
	err := withCopyBuffers(dev, n, func(c *cudadrv.Ctx, s cudadrv.Stream, h []byte, d cudadrv.DevPtr) error {
		el, err := c.TimeEvents(s, iters, func() error { return c.CopyHtoD(d, h, s) })
		if err != nil {
			return err
		}
		bw = float64(n) / el.Seconds()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pinned host-to-device peak: %w", err)
	}
	return bw, nil
}

// withCopyBuffers runs fn on dev's stream with n bytes of page-locked
// host memory and n bytes of device memory, both freed when fn returns:
// fn leaves no copy on them pending.
func withCopyBuffers(dev *cudadrv.Device, n int64, fn func(c *cudadrv.Ctx, s cudadrv.Stream, h []byte, d cudadrv.DevPtr) error) error {
	return dev.DoOnStream(func(c *cudadrv.Ctx, s cudadrv.Stream) (err error) {
		h, err := c.HostAlloc(int(n), 0)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.FreeHost(h) })
		d, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.Free(d) })
		return fn(c, s, h.Bytes(), d)
	})
}

// keepFirst runs a deferred release and keeps its error if none came
// before.
func keepFirst(err *error, release func() error) {
	if rerr := release(); *err == nil {
		*err = rerr
	}
}

// HostToDeviceBeside is the pinned host-to-device copy rate on dev while
// fn runs on another goroutine: copies of n bytes back to back from
// before fn starts until it returns, their bytes counted over the window
// fn reports (the span of its own measurement, which its set-up stays out
// of). fn is the other reader of host memory in a hybrid pass, the CPU:
// the two rates measured at once are what such a pass can have together,
// which may be less than each measured alone. The host waits for the
// copies asleep (blocking events), so it takes no core from fn.
func HostToDeviceBeside(dev *cudadrv.Device, n int64, fn func() (from, to time.Time, err error)) (float64, error) {
	if n <= 0 || fn == nil {
		return 0, fmt.Errorf("host-to-device beside: %d bytes a copy", n)
	}
	var (
		marks    []copyMark
		from, to time.Time
		ferr     error
	)
	err := withCopyBuffers(dev, n, func(c *cudadrv.Ctx, s cudadrv.Stream, h []byte, d cudadrv.DevPtr) (err error) {
		var ev [2]cudadrv.Event
		for i := range ev {
			if ev[i], err = c.NewEvent(cudadrv.EventBlockingSync | cudadrv.EventDisableTiming); err != nil {
				return err
			}
			defer keepFirst(&err, func() error { return c.DestroyEvent(ev[i]) })
		}
		// Copies still queued when an error ends the flow finish before
		// their buffers are freed.
		defer keepFirst(&err, func() error { return c.StreamSync(s) })
		done := make(chan struct{})
		go func() {
			defer close(done)
			from, to, ferr = fn()
		}()
		defer func() { <-done }()
		// One copy runs while the next waits queued behind it: each
		// copy's end is marked on the host as the one after it starts.
		for issued := int64(1); ; issued++ {
			if err := c.CopyHtoD(d, h, s); err != nil {
				return err
			}
			if err := c.Record(ev[issued%2], s); err != nil {
				return err
			}
			if issued < 2 {
				continue
			}
			if err := c.EventSync(ev[(issued-1)%2]); err != nil {
				return err
			}
			marks = append(marks, copyMark{at: time.Now(), bytes: (issued - 1) * n})
			select {
			case <-done:
				// The last copy's end is the first mark after fn's window.
				if err := c.EventSync(ev[issued%2]); err != nil {
					return err
				}
				marks = append(marks, copyMark{at: time.Now(), bytes: issued * n})
				return nil
			default:
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("pinned host-to-device beside: %w", err)
	}
	if ferr != nil {
		return 0, fmt.Errorf("host-to-device beside: the other reader: %w", ferr)
	}
	r, err := rateOver(marks, from, to)
	if err != nil {
		return 0, fmt.Errorf("host-to-device beside: %w", err)
	}
	return r, nil
}

// copyMark is the bytes a flow of copies had finished by a moment.
type copyMark struct {
	at    time.Time
	bytes int64
}

// rateOver is the bytes a second of a flow of copies between from and
// to, its marks interpolated linearly: the window must lie within the
// marks (the copies ran before and after it).
func rateOver(marks []copyMark, from, to time.Time) (float64, error) {
	if !to.After(from) {
		return 0, fmt.Errorf("an empty window %v..%v", from, to)
	}
	if len(marks) < 2 || from.Before(marks[0].at) || to.After(marks[len(marks)-1].at) {
		return 0, fmt.Errorf("the copies' %d marks do not cover the window", len(marks))
	}
	at := func(t time.Time) float64 {
		i := sort.Search(len(marks), func(i int) bool { return !marks[i].at.Before(t) })
		if i == 0 {
			return float64(marks[0].bytes)
		}
		a, b := marks[i-1], marks[i]
		f := float64(t.Sub(a.at)) / float64(b.at.Sub(a.at))
		return float64(a.bytes) + f*float64(b.bytes-a.bytes)
	}
	return (at(to) - at(from)) / to.Sub(from).Seconds(), nil
}
