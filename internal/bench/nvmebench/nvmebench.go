package nvmebench

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/nvme"
)

// Target is a namespace read through the userspace NVMe driver: each
// sweep worker owns a DMA buffer and submits to its own I/O queue pair
// (round-robin over the controller's pairs), so a queue depth of N is N
// commands in flight on the device.
type Target struct {
	ctrl *nvme.Controller
	dma  nvme.DMA
	nsid uint32
	ns   nvme.NamespaceInfo
	name string
}

// NewTarget reads namespace nsid of c, with buffers from dma (the
// allocator mapped into c's IOMMU domain). name identifies the controller
// in results (its PCI address).
func NewTarget(c *nvme.Controller, dma nvme.DMA, nsid uint32, name string) (*Target, error) {
	ns, err := c.Namespace(nsid)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(c.Queues()) == 0 {
		return nil, fmt.Errorf("%s: controller has no I/O queue pairs", name)
	}
	return &Target{ctrl: c, dma: dma, nsid: nsid, ns: ns, name: name}, nil
}

// Info implements bench.Target.
func (t *Target) Info() bench.TargetInfo {
	return bench.TargetInfo{Kind: "nvme", Name: t.Name(), Size: int64(t.ns.Size) * int64(t.ns.BlockSize),
		Align: t.ns.BlockSize, Direct: true, Model: t.ctrl.Info().Model}
}

// NewWorker implements bench.Target.
func (t *Target) NewWorker(i, bs int) (bench.Worker, error) {
	if bs%t.ns.BlockSize != 0 {
		return nil, fmt.Errorf("%w: %d is not a multiple of the %d-byte LBA size", bench.ErrBadOptions, bs, t.ns.BlockSize)
	}
	buf, err := t.dma.Alloc(bs)
	if err != nil {
		return nil, fmt.Errorf("DMA buffer of %d bytes: %w", bs, err)
	}
	qs := t.ctrl.Queues()
	return &nvmeWorker{t: t, q: qs[i%len(qs)], buf: buf}, nil
}

type nvmeWorker struct {
	t   *Target
	q   *nvme.QueuePair
	buf nvme.Buffer
}

func (w *nvmeWorker) Read(ctx context.Context, off int64) error {
	tk, err := w.q.Read(ctx, w.t.nsid, uint64(off)/uint64(w.t.ns.BlockSize), w.buf)
	if err != nil {
		return err
	}
	return tk.Wait()
}

func (w *nvmeWorker) Close() error { return w.t.dma.Free(w.buf) }

var _ bench.Target = (*Target)(nil)

// Name identifies the namespace ("BDF/nsid N").
func (t *Target) Name() string { return fmt.Sprintf("%s/nsid %d", t.name, t.nsid) }

// Stager implements hw.Staging: slots × chunk bytes of DMA memory, each
// chunk read as several commands spread over the queue pairs.
func (t *Target) Stager(slots, chunk int) (bench.Stager, []byte, func() error, error) {
	buf, err := t.dma.Alloc(slots * chunk)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("DMA staging of %d bytes: %w", slots*chunk, err)
	}
	st := &nvmeStager{t: t, buf: buf, chunk: chunk, depth: 2 * len(t.ctrl.Queues())}
	return st, buf.Bytes, func() error { return t.dma.Free(buf) }, nil
}

// nvmeStager reads a namespace into staging slots carved from one DMA
// buffer, splitting each chunk over the queue pairs so that several
// commands are in flight.
type nvmeStager struct {
	t     *Target
	buf   nvme.Buffer
	chunk int
	depth int
}

func (s *nvmeStager) Size() int64 { return int64(s.t.ns.Size) * int64(s.t.ns.BlockSize) }
func (s *nvmeStager) Align() int  { return s.t.ns.BlockSize }

func (s *nvmeStager) Read(ctx context.Context, slot int, off int64, n int) error {
	if n > s.chunk {
		return fmt.Errorf("read of %d bytes into a %d-byte slot", n, s.chunk)
	}
	bsz := s.t.ns.BlockSize
	piece := max((n/max(s.depth, 1))/bsz*bsz, bsz)
	qs := s.t.ctrl.Queues()
	var tickets []*nvme.Ticket
	var errs []error
	for p, k := 0, 0; p < n; p, k = p+piece, k+1 {
		m := min(piece, n-p)
		tk, err := qs[k%len(qs)].Read(ctx, s.t.nsid, uint64(off+int64(p))/uint64(bsz), s.buf.Slice(slot*s.chunk+p, m))
		if err != nil {
			errs = append(errs, err)
			break
		}
		tickets = append(tickets, tk)
	}
	for _, tk := range tickets {
		if err := tk.Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
