package gputime

import (
	"fmt"
	"time"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// CopyBandwidth measures device-to-device copy bandwidth on dev: bytes
// read plus bytes written per second over iters back-to-back copies of n
// bytes (after one untimed copy), timed with events on a stream of its
// own. It is the ceiling of any bandwidth-bound kernel: a decode GEMV
// reads its weights once, so its effective bandwidth ÷ this is how close
// it runs to the memory system's limit. (The host-to-device ceiling is
// engine/gpu's HostToDevicePeak, the one the planner takes as its link.)
func CopyBandwidth(dev *cudadrv.Device, n int64, iters int) (float64, error) {
	if n <= 0 || iters < 1 {
		return 0, fmt.Errorf("copy bandwidth: %d bytes x %d copies", n, iters)
	}
	var bw float64
	err := dev.DoOnStream(func(c *cudadrv.Ctx, s cudadrv.Stream) (err error) {
		src, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.Free(src) })
		dst, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.Free(dst) })
		if err := c.MemsetD8(src, 1, n, s); err != nil {
			return err
		}
		el, err := c.TimeEvents(s, iters, func() error { return c.CopyDtoD(dst, src, n, s) })
		if err != nil {
			return err
		}
		bw = 2 * float64(n) / el.Seconds()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("device-to-device copy bandwidth: %w", err)
	}
	return bw, nil
}

// DeviceHandoff measures the mean wall time of an empty Device.Do: the
// round trip from a caller's goroutine to the goroutine locked to the
// device context's thread and back, which every Forward pays once.
func DeviceHandoff(dev *cudadrv.Device, iters int) (time.Duration, error) {
	if iters < 1 {
		return 0, fmt.Errorf("device hand-off: %d iterations", iters)
	}
	nop := func(*cudadrv.Ctx) error { return nil }
	if err := dev.Do(nop); err != nil {
		return 0, fmt.Errorf("device hand-off: %w", err)
	}
	t := time.Now()
	for range iters {
		if err := dev.Do(nop); err != nil {
			return 0, fmt.Errorf("device hand-off: %w", err)
		}
	}
	return time.Since(t) / time.Duration(iters), nil
}

// keepFirst runs a deferred release and keeps its error if none came
// before.
func keepFirst(err *error, release func() error) {
	if rerr := release(); *err == nil {
		*err = rerr
	}
}
