package gpu

import (
	"fmt"

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
	err := dev.DoOnStream(func(c *cudadrv.Ctx, s cudadrv.Stream) (err error) {
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
		el, err := c.TimeEvents(s, iters, func() error { return c.CopyHtoD(d, h.Bytes(), s) })
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

// keepFirst runs a deferred release and keeps its error if none came
// before.
func keepFirst(err *error, release func() error) {
	if rerr := release(); *err == nil {
		*err = rerr
	}
}
