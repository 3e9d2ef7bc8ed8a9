package gpu

import (
	"fmt"
	"slices"
	"sync/atomic"
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

// BenchmarkHandoffChain: a pass of 48 layers, each a few small kernels
// (12 launches, standing for a layer's attention) and then a CPU part (a
// busy wait of 250 us standing for its FFN) between two hand-overs of the
// hidden state through mapped memory, as the hybrid's and the experts'
// CPU layers run. Two ways for the host:
//
//   - sync, the engine's: launch a layer's kernels, wait for the stream,
//     run the CPU part, then launch the next layer's, so each layer pays
//     the stream wait and its launches after the CPU's part;
//   - signal: queue each layer's kernels one layer ahead, the way back
//     behind a WaitValue32 on a mapped word that the CPU stores when its
//     part is done, and learn that the state arrived by polling a word
//     WriteValue32 stores, so the GPU starts the next layer as soon as the
//     word changes and the launches overlap the GPU's work.
//
// Reported: us a layer beyond the CPU's part for each way (the median
// pass of 20, ways alternating), and the GPU's own us a layer (the same
// kernels and copies with no host in between).
func BenchmarkHandoffChain(b *testing.B) {
	dev, k := gpu(b)
	if !cudadrv.CanSignal() {
		b.Skip("the driver lacks the stream memory operations")
	}
	const (
		dim, layers, launches = 2048, 48, 12
		cpuPart               = 250 * time.Microsecond
		passes                = 20
	)
	spin := func(d time.Duration) {
		for t0 := time.Now(); time.Since(t0) < d; {
		}
	}
	err := dev.Do(func(c *cudadrv.Ctx) error {
		s, err := c.NewStream(cudadrv.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		h, err := c.Alloc(2 * dim * 4)
		if err != nil {
			return err
		}
		defer c.Free(h)
		tmp := h.Add(dim * 4)
		if err := c.MemsetD32(h, 0, 2*dim, s); err != nil {
			return err
		}
		hb, err := c.HostAlloc(dim*4+64, cudadrv.HostAllocDeviceMap)
		if err != nil {
			return err
		}
		defer c.FreeHost(hb)
		hp, err := c.HostDevicePointer(hb)
		if err != nil {
			return err
		}
		clear(hb.Bytes())
		words, err := cudadrv.Values[uint32](hb.Bytes()[dim*4:])
		if err != nil {
			return err
		}
		rows, err := cudadrv.Values[float32](hb.Bytes()[:dim*4])
		if err != nil {
			return err
		}
		done, arrived := &words[0], &words[1]
		doneDev, arrivedDev := hp.Add(dim*4), hp.Add(dim*4+4)
		gpuPart := func() error {
			for range launches {
				if err := k.Add(c, s, h, tmp, dim); err != nil {
					return err
				}
			}
			return k.Copy(c, s, hp, h, dim)
		}
		cpu := func() {
			spin(cpuPart)
			rows[0]++
		}
		var seq uint32
		ways := []struct {
			name string
			pass func() error
		}{
			{"sync", func() error {
				for range layers {
					if err := gpuPart(); err != nil {
						return err
					}
					if err := c.StreamSync(s); err != nil {
						return err
					}
					cpu()
					if err := k.Copy(c, s, h, hp, dim); err != nil {
						return err
					}
				}
				return c.StreamSync(s)
			}},
			{"signal", func() (err error) {
				base := seq
				seq += layers
				// Every wait queued is released on every path: a wait
				// left pending would hold the stream for good.
				defer func() { atomic.StoreUint32(done, seq) }()
				queue := func(l uint32) error {
					if err := gpuPart(); err != nil {
						return err
					}
					if err := c.WriteValue32(s, arrivedDev, base+l+1); err != nil {
						return err
					}
					if err := c.WaitValue32(s, doneDev, base+l+1); err != nil {
						return err
					}
					return k.Copy(c, s, h, hp, dim)
				}
				if err := queue(0); err != nil {
					return err
				}
				for l := uint32(0); l < layers; l++ {
					if l+1 < layers {
						if err := queue(l + 1); err != nil {
							return err
						}
					}
					deadline := time.Now().Add(5 * time.Second)
					for int32(atomic.LoadUint32(arrived)-(base+l+1)) < 0 {
						if time.Now().After(deadline) {
							return fmt.Errorf("layer %d: the hidden state did not arrive within 5 s", l)
						}
					}
					cpu()
					atomic.StoreUint32(done, base+l+1)
				}
				return c.StreamSync(s)
			}},
			{"gpu", func() error {
				for range layers {
					if err := gpuPart(); err != nil {
						return err
					}
					if err := k.Copy(c, s, h, hp, dim); err != nil {
						return err
					}
				}
				return c.StreamSync(s)
			}},
		}
		times := make([][]time.Duration, len(ways))
		for range passes + 1 { // the first round warms up
			for i, w := range ways {
				t0 := time.Now()
				if err := w.pass(); err != nil {
					return fmt.Errorf("%s: %w", w.name, err)
				}
				times[i] = append(times[i], time.Since(t0))
			}
		}
		for i, w := range ways {
			ts := times[i][1:]
			slices.Sort(ts)
			med := ts[len(ts)/2]
			per := float64(med.Microseconds()) / layers
			if w.name != "gpu" {
				per -= float64(cpuPart.Microseconds())
			}
			b.Logf("%-6s pass median %v (min %v, max %v): %.1f us a layer beyond the CPU's part", w.name, med, ts[0], ts[len(ts)-1], per)
			b.ReportMetric(per, w.name+"-us/layer")
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
