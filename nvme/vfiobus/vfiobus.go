package vfiobus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/vfio"
)

// Bus is one NVMe function opened through VFIO in a DMA domain.
type Bus struct {
	dom  *vfio.Domain
	dev  *vfio.Device
	bar  []byte
	mmio *vfio.MMIO

	mu   sync.Mutex
	bufs map[uint64][]byte // IOVA → the whole AllocDMA mapping
	irqs []*vfio.EventFD
}

// Open opens the function bdf (already bound to vfio-pci) in dom, enables
// memory space and bus mastering, and maps BAR0. Other devices opened in
// the same domain (a peer BAR for p2p) share its IOVAs.
func Open(dom *vfio.Domain, bdf string) (*Bus, error) {
	dev, err := dom.OpenPCI(bdf)
	if err != nil {
		return nil, fmt.Errorf("vfiobus: opening %s: %w", bdf, err)
	}
	if _, err := dev.EnableDMA(); err != nil {
		dev.Close()
		return nil, fmt.Errorf("vfiobus: enabling bus mastering on %s: %w", bdf, err)
	}
	bar, err := dev.MapRegion(vfio.RegionBAR0)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("vfiobus: mapping BAR0 of %s: %w", bdf, err)
	}
	m, err := vfio.NewMMIO(bar)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("vfiobus: %s BAR0: %w", bdf, err)
	}
	return &Bus{dom: dom, dev: dev, bar: bar, mmio: m, bufs: map[uint64][]byte{}}, nil
}

// Device is the VFIO device, for config space, reset and MSI-X details.
func (b *Bus) Device() *vfio.Device { return b.dev }

// Domain is the DMA address space the controller lives in.
func (b *Bus) Domain() *vfio.Domain { return b.dom }

// Read32 loads a controller register.
func (b *Bus) Read32(off uint32) uint32 { return b.mmio.Read32(uintptr(off)) }

// Write32 stores a controller register or doorbell.
func (b *Bus) Write32(off uint32, v uint32) { b.mmio.Write32(uintptr(off), v) }

// Alloc returns zeroed memory outside the Go heap, mapped read-write at an
// IOVA of the domain. Sizes of 2 MiB and more use hugepages when some are
// reserved (fewer IOMMU entries), else 4 KiB pages.
func (b *Bus) Alloc(size int) (nvme.Buffer, error) {
	if size <= 0 {
		return nvme.Buffer{}, fmt.Errorf("vfiobus: alloc of %d bytes", size)
	}
	var mem []byte
	var err error
	if size >= 2<<20 {
		mem, err = vfio.AllocDMA(size, true)
	}
	if mem == nil {
		if mem, err = vfio.AllocDMA(size, false); err != nil {
			return nvme.Buffer{}, fmt.Errorf("vfiobus: alloc %d bytes: %w", size, err)
		}
	}
	iova, err := b.dom.MapDMA(mem)
	if err != nil {
		vfio.FreeDMA(mem)
		return nvme.Buffer{}, fmt.Errorf("vfiobus: map %d bytes for DMA: %w", len(mem), err)
	}
	b.mu.Lock()
	b.bufs[iova] = mem
	b.mu.Unlock()
	return nvme.Buffer{Bytes: mem[:size:size], IOVA: iova}, nil
}

// Free unmaps and releases a buffer from Alloc.
func (b *Bus) Free(buf nvme.Buffer) error {
	b.mu.Lock()
	mem, ok := b.bufs[buf.IOVA]
	delete(b.bufs, buf.IOVA)
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("vfiobus: free of IOVA %#x, which Alloc did not return", buf.IOVA)
	}
	if err := b.dom.UnmapDMA(buf.IOVA); err != nil {
		return fmt.Errorf("vfiobus: unmap IOVA %#x: %w", buf.IOVA, err)
	}
	return vfio.FreeDMA(mem)
}

// EnableInterrupts enables n MSI-X vectors (the driver needs IOQueues+1)
// and returns them as nvme.Interrupts.
func (b *Bus) EnableInterrupts(n int) (nvme.Interrupts, error) {
	efds, err := b.dev.EnableMSIX(n)
	if err != nil {
		return nil, fmt.Errorf("vfiobus: enabling %d MSI-X vectors: %w", n, err)
	}
	b.irqs = efds
	return irqs(efds), nil
}

type irqs []*vfio.EventFD

// Wait blocks until the vector's eventfd counts an interrupt or ctx ends.
func (q irqs) Wait(ctx context.Context, v int) error {
	if v < 0 || v >= len(q) {
		return fmt.Errorf("vfiobus: vector %d not enabled (%d are)", v, len(q))
	}
	for {
		timeout := 100 * time.Millisecond
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if timeout <= 0 {
			return context.DeadlineExceeded
		}
		_, err := q[v].Wait(timeout)
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("vfiobus: waiting for vector %d: %w", v, err)
		}
	}
}

// Close disables MSI-X, frees every buffer still allocated and closes the
// device. The controller must have been shut down (nvme.Controller.Close).
func (b *Bus) Close() error {
	var errs []error
	b.mu.Lock()
	for iova, mem := range b.bufs {
		if err := b.dom.UnmapDMA(iova); err != nil {
			errs = append(errs, err)
		} else if err := vfio.FreeDMA(mem); err != nil {
			errs = append(errs, err)
		}
	}
	b.bufs = map[uint64][]byte{}
	b.mu.Unlock()
	if b.irqs != nil {
		errs = append(errs, b.dev.DisableMSIX())
	}
	errs = append(errs, b.dev.Close())
	return errors.Join(errs...)
}
