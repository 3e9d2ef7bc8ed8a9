package stream

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostmem"
)

// MmapSource reads a file through a shared read-only mapping: a read is a
// memmove that page-faults the bytes in from the page cache (or the disk).
// It suits files that fit in RAM and repeated passes over them; Bytes
// gives the zero-copy view a tier-B layer is served from.
type MmapSource struct {
	path string
	m    *hostmem.Mapping
	data []byte
	mu   sync.RWMutex
	done bool
}

// OpenMmap maps path read-only.
func OpenMmap(path string) (*MmapSource, error) {
	m, err := hostmem.MapFile(path)
	if err != nil {
		return nil, fmt.Errorf("mmap source: %w", err)
	}
	return &MmapSource{path: path, m: m, data: m.Bytes()}, nil
}

// Bytes returns the whole mapping, valid until Close.
func (s *MmapSource) Bytes() []byte { return s.data }

// ReadAt implements Source by copying from the mapping.
func (s *MmapSource) ReadAt(ctx context.Context, dst []byte, off int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.done {
		return fmt.Errorf("mmap source %s: %w", s.path, tier.ErrClosed)
	}
	if off < 0 || off+int64(len(dst)) > int64(len(s.data)) {
		return fmt.Errorf("mmap source %s: read [%d, +%d) past end %d: %w", s.path, off, len(dst), len(s.data), io.ErrUnexpectedEOF)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mmap source %s: %w", s.path, err)
	}
	parallelCopy(dst, s.data[off:off+int64(len(dst))])
	return nil
}

// Alloc implements Source with page-aligned anonymous memory.
func (s *MmapSource) Alloc(n int) (*tier.Buffer, error) { return AllocAligned(n) }

// Align implements Source: a mapping has no alignment rule.
func (s *MmapSource) Align() int { return 1 }

// Size implements Source.
func (s *MmapSource) Size() int64 { return int64(len(s.data)) }

// Close unmaps the file after reads in flight; Bytes views die with it.
func (s *MmapSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	if err := s.m.Close(); err != nil {
		return fmt.Errorf("mmap source %s: %w", s.path, err)
	}
	s.data = nil
	return nil
}

var _ tier.Source = (*MmapSource)(nil)
