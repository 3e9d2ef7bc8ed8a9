package volume

import (
	"context"
	"fmt"
	"sync"

	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostmem"
)

// Source reads one extent of a volume for the engine's tier C: it
// implements engine/tier.Source, like the pipeline's FileSource, so a
// pool stored on a strata-managed NVMe namespace streams through the same
// pipeline as a pool file. Over an NVMe device, buffers from Alloc are
// DMA-mapped and a ReadAt is split into MDTS-bounded READ commands that
// are all in flight at once on one I/O queue pair.
type Source struct {
	v      *Volume
	e      Extent
	mu     sync.RWMutex // held for reading by ReadAt, for writing by Close
	wg     sync.WaitGroup
	closed bool
}

var _ tier.Source = (*Source)(nil)

// Source returns a stream source over the extent called name. Offsets
// passed to ReadAt are relative to the extent.
func (v *Volume) Source(name string) (*Source, error) {
	e, err := v.Lookup(name)
	if err != nil {
		return nil, err
	}
	return &Source{v: v, e: e}, nil
}

// Extent is the extent the source reads.
func (s *Source) Extent() Extent { return s.e }

// ReadAt fills dst with the extent's bytes at off. off, len(dst) and dst's
// address must be multiples of Align; the range may run into the zero
// padding of the extent's last unit but not beyond it.
func (s *Source) ReadAt(ctx context.Context, dst []byte, off int64) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fmt.Errorf("volume source %q: %w", s.e.Name, tier.ErrClosed)
	}
	s.wg.Add(1)
	s.mu.RUnlock()
	defer s.wg.Done()
	if len(dst) == 0 {
		return nil
	}
	if err := tier.CheckAligned(dst, off, Unit); err != nil {
		return fmt.Errorf("volume source %q: %w", s.e.Name, err)
	}
	if off < 0 || off > s.e.Reserved || int64(len(dst)) > s.e.Reserved-off {
		return fmt.Errorf("volume source %q: read of %d bytes at %d passes the extent's end (%d bytes)", s.e.Name, len(dst), off, s.e.Length)
	}
	bs := int64(s.v.dev.BlockSize())
	if err := s.v.dev.ReadBlocks(ctx, uint64((s.e.Offset+off)/bs), dst); err != nil {
		return fmt.Errorf("volume source %q: read of %d bytes at %d: %w", s.e.Name, len(dst), off, err)
	}
	return nil
}

// Alloc returns a buffer suited to ReadAt (DMA-mapped on NVMe), n rounded
// up to Align.
func (s *Source) Alloc(n int) (*tier.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("volume source: alloc of %d bytes", n)
	}
	size := hostmem.AlignUp(max(n, 1), Unit)
	b, free, err := s.v.dev.Alloc(size)
	if err != nil {
		return nil, fmt.Errorf("volume source: alloc %d bytes: %w", size, err)
	}
	return tier.NewBuffer(b[:size], func([]byte) error { return free() }), nil
}

// Align is the alignment ReadAt requires: one 4 KiB unit.
func (s *Source) Align() int { return Unit }

// Size is the extent's length in bytes.
func (s *Source) Size() int64 { return s.e.Length }

// Close waits for reads in flight; the volume and device stay open.
func (s *Source) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
