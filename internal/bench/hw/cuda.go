package hw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// GPU is a CUDA device opened for benchmarks, with one copy stream and a
// pair of timing events. Opening it where no driver or device exists
// returns an error wrapping cudadrv.ErrUnavailable ("CUDA unavailable: …").
type GPU struct {
	dev        *cudadrv.Device
	stream     cudadrv.Stream
	start, end cudadrv.Event
}

// OpenGPU opens GPU ordinal.
func OpenGPU(ordinal int) (*GPU, error) {
	dev, err := cudadrv.Open(ordinal)
	if err != nil {
		return nil, err
	}
	g := &GPU{dev: dev}
	err = dev.Do(func(c *cudadrv.Ctx) error {
		var err error
		if g.stream, err = c.NewStream(cudadrv.StreamNonBlocking); err != nil {
			return err
		}
		if g.start, err = c.NewEvent(cudadrv.EventDefault); err != nil {
			return err
		}
		g.end, err = c.NewEvent(cudadrv.EventDefault)
		return err
	})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("GPU %d: %w", ordinal, err)
	}
	return g, nil
}

// Name is "NAME (ordinal)".
func (g *GPU) Name() string { return fmt.Sprintf("%s (%d)", g.dev.Name(), g.dev.Ordinal()) }

// Close releases the stream and events and the device.
func (g *GPU) Close() error {
	err := g.dev.Do(func(c *cudadrv.Ctx) error {
		return errors.Join(c.DestroyEvent(g.start), c.DestroyEvent(g.end), c.DestroyStream(g.stream))
	})
	return errors.Join(err, g.dev.Close())
}

// Copier is a bench.Copier on a GPU: one device buffer, one pinned and one
// pageable host buffer, each MaxBytes long.
type Copier struct {
	g        *GPU
	max      int64
	dptr     cudadrv.DevPtr
	pinned   *cudadrv.HostMem
	pageable *tier.Buffer
}

// NewCopier allocates the buffers for copies of up to maxBytes, fewer when
// the device has less free memory (keeping a quarter of it free).
func (g *GPU) NewCopier(maxBytes int64) (*Copier, error) {
	cp := &Copier{g: g}
	err := g.dev.Do(func(c *cudadrv.Ctx) error {
		free, _, err := c.MemInfo()
		if err != nil {
			return err
		}
		cp.max = maxBytes
		for cp.max > 64<<10 && cp.max > free*3/4 {
			cp.max /= 2
		}
		if cp.dptr, err = c.Alloc(cp.max); err != nil {
			return fmt.Errorf("device buffer of %d bytes: %w", cp.max, err)
		}
		if cp.pinned, err = c.HostAlloc(int(cp.max), 0); err != nil {
			return fmt.Errorf("pinned host buffer of %d bytes: %w", cp.max, err)
		}
		return nil
	})
	if err == nil {
		cp.pageable, err = stream.AllocAligned(int(cp.max))
	}
	if err != nil {
		cp.Close()
		return nil, err
	}
	// Touch the pageable pages once, so the first timed copy does not
	// measure page faults on the zero page.
	b := cp.pageable.Bytes()
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	return cp, nil
}

// Device implements bench.Copier.
func (cp *Copier) Device() string { return cp.g.Name() }

// MaxBytes implements bench.Copier.
func (cp *Copier) MaxBytes() int64 { return cp.max }

// Copy implements bench.Copier, timing the copies with events recorded on
// the copy stream around them.
func (cp *Copier) Copy(ctx context.Context, d bench.Direction, m bench.HostMemory, n int64, iters int) (time.Duration, error) {
	if n > cp.max || n <= 0 {
		return 0, fmt.Errorf("%w: copy of %d bytes with %d-byte buffers", bench.ErrBadOptions, n, cp.max)
	}
	host := cp.pinned.Bytes()
	if m == bench.Pageable {
		host = cp.pageable.Bytes()
	}
	host = host[:n]
	var ms float32
	err := cp.g.dev.Do(func(c *cudadrv.Ctx) error {
		if err := c.Record(cp.g.start, cp.g.stream); err != nil {
			return err
		}
		for range iters {
			if err := ctx.Err(); err != nil {
				c.StreamSync(cp.g.stream)
				return err
			}
			var err error
			if d == bench.HostToDevice {
				err = c.CopyHtoD(cp.dptr, host, cp.g.stream)
			} else {
				err = c.CopyDtoH(host, cp.dptr, cp.g.stream)
			}
			if err != nil {
				c.StreamSync(cp.g.stream)
				return err
			}
		}
		if err := c.Record(cp.g.end, cp.g.stream); err != nil {
			return err
		}
		if err := c.EventSync(cp.g.end); err != nil {
			return err
		}
		var err error
		ms, err = c.Elapsed(cp.g.start, cp.g.end)
		return err
	})
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

// Close frees the buffers (not the GPU).
func (cp *Copier) Close() error {
	var errs []error
	errs = append(errs, cp.g.dev.Do(func(c *cudadrv.Ctx) error {
		var errs []error
		if cp.pinned != nil {
			errs = append(errs, c.FreeHost(cp.pinned))
		}
		errs = append(errs, c.Free(cp.dptr))
		return errors.Join(errs...)
	}))
	if cp.pageable != nil {
		errs = append(errs, cp.pageable.Free())
	}
	return errors.Join(errs...)
}

var _ bench.Copier = (*Copier)(nil)

// Uploader is a bench.Uploader: it copies staging slots (host memory
// registered with the GPU) to device slots on the GPU's copy stream, with
// one event per slot marking when the slot may be refilled.
type Uploader struct {
	g      *GPU
	host   [][]byte
	reg    *cudadrv.HostMem
	dptr   cudadrv.DevPtr
	events []cudadrv.Event
	chunk  int
}

// NewUploader registers mem (not Go heap memory: an mmap or a DMA
// allocation) with the GPU as pinned memory and allocates slots device
// slots of chunk bytes.
func (g *GPU) NewUploader(mem []byte, slots, chunk int) (*Uploader, error) {
	if len(mem) < slots*chunk {
		return nil, fmt.Errorf("%w: %d staging bytes for %d slots of %d", bench.ErrBadOptions, len(mem), slots, chunk)
	}
	u := &Uploader{g: g, chunk: chunk}
	for i := range slots {
		u.host = append(u.host, mem[i*chunk:(i+1)*chunk])
	}
	err := g.dev.Do(func(c *cudadrv.Ctx) error {
		var err error
		if u.reg, err = c.HostRegister(mem[:slots*chunk], cudadrv.HostRegisterPortable); err != nil {
			return fmt.Errorf("registering %d staging bytes with the GPU: %w", slots*chunk, err)
		}
		if u.dptr, err = c.Alloc(int64(slots * chunk)); err != nil {
			return fmt.Errorf("device slots of %d bytes: %w", slots*chunk, err)
		}
		for range slots {
			e, err := c.NewEvent(cudadrv.EventDisableTiming)
			if err != nil {
				return err
			}
			u.events = append(u.events, e)
		}
		return nil
	})
	if err != nil {
		u.Close()
		return nil, err
	}
	return u, nil
}

// Upload implements bench.Uploader.
func (u *Uploader) Upload(ctx context.Context, slot, n int) (func() error, error) {
	err := u.g.dev.Do(func(c *cudadrv.Ctx) error {
		if err := c.CopyHtoD(u.dptr+cudadrv.DevPtr(slot*u.chunk), u.reg.Bytes()[slot*u.chunk:slot*u.chunk+n], u.g.stream); err != nil {
			return err
		}
		return c.Record(u.events[slot], u.g.stream)
	})
	if err != nil {
		return nil, err
	}
	return func() error {
		return u.g.dev.Do(func(c *cudadrv.Ctx) error { return c.EventSync(u.events[slot]) })
	}, nil
}

// Close waits for the copies in flight and releases the device slots,
// the events and the registration (not mem).
func (u *Uploader) Close() error {
	return u.g.dev.Do(func(c *cudadrv.Ctx) error {
		var errs []error
		errs = append(errs, c.StreamSync(u.g.stream))
		for _, e := range u.events {
			errs = append(errs, c.DestroyEvent(e))
		}
		errs = append(errs, c.Free(u.dptr))
		if u.reg != nil {
			errs = append(errs, c.HostUnregister(u.reg))
		}
		return errors.Join(errs...)
	})
}
