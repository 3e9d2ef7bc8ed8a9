package gpu

import (
	"slices"
	"testing"
	"time"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkHandoffBesideBulk times the hybrid placement's hand-over of
// the hidden state (8192 floats to the host and back, a stream
// synchronisation between) on the compute stream while a copy stream
// moves streamed layers (466 MB copies, a 70b layer) into device memory,
// and with the copy stream idle: each way by the copy engine
// (cuMemcpyAsync, the path today) or by a kernel reading and writing
// mapped pinned memory (no copy engine). Run with -test.benchtime 1x.
func BenchmarkHandoffBesideBulk(b *testing.B) {
	dev, k := gpu(b)
	const dim = 8192
	const bulk = 466 << 20
	err := dev.Do(func(c *cudadrv.Ctx) error {
		compute, err := c.NewStream(cudadrv.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(compute)
		cp, err := c.NewStream(cudadrv.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(cp)
		src, err := c.HostAlloc(bulk, 0)
		if err != nil {
			return err
		}
		defer c.FreeHost(src)
		dst, err := c.Alloc(bulk)
		if err != nil {
			return err
		}
		defer c.Free(dst)
		h, err := c.Alloc(dim * 4)
		if err != nil {
			return err
		}
		defer c.Free(h)
		hb, err := c.HostAlloc(dim*4, cudadrv.HostAllocDeviceMap)
		if err != nil {
			return err
		}
		defer c.FreeHost(hb)
		hp, err := c.HostDevicePointer(hb)
		if err != nil {
			return err
		}
		clear(hb.Bytes())
		if err := c.MemsetD32(h, 0, dim, compute); err != nil {
			return err
		}
		type way struct {
			name string
			down func() error // device → host
			up   func() error // host → device
		}
		ways := []way{
			{"copy-engine",
				func() error { return c.CopyDtoH(hb.Bytes(), h, compute) },
				func() error { return c.CopyHtoD(h, hb.Bytes(), compute) }},
			{"mapped-kernel",
				// The host buffer is zeroed by the host (h + 0 = h; the
				// timing is what counts here), the kernel adds into it
				// over PCIe; back, the device adds the host's values.
				func() error { clear(hb.Bytes()); return k.Add(c, compute, hp, h, dim) },
				func() error { return k.Add(c, compute, h, hp, dim) }},
		}
		for _, busy := range []bool{false, true} {
			for _, w := range ways {
				var lat []time.Duration
				for range 4 {
					if busy {
						for range 8 {
							if err := c.CopyHtoD(dst, src.Bytes(), cp); err != nil {
								return err
							}
						}
					}
					for range 25 {
						t0 := time.Now()
						if err := w.down(); err != nil {
							return err
						}
						if err := c.StreamSync(compute); err != nil {
							return err
						}
						if err := w.up(); err != nil {
							return err
						}
						if err := c.StreamSync(compute); err != nil {
							return err
						}
						lat = append(lat, time.Since(t0))
					}
					if err := c.StreamSync(cp); err != nil {
						return err
					}
				}
				slices.Sort(lat)
				p50, p90, worst := lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1]
				b.Logf("%-14s bulk copies %-5v: hand-over p50 %v, p90 %v, max %v", w.name, busy, p50, p90, worst)
				tag := w.name
				if busy {
					tag += "-busy"
				}
				b.ReportMetric(float64(p50.Microseconds()), tag+"-p50-us")
				b.ReportMetric(float64(p90.Microseconds()), tag+"-p90-us")
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
