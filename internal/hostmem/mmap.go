//go:build unix

package hostmem

import (
	"fmt"
	"math"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Mapping is a read-only, shared mapping of a file's bytes. The bytes stay
// valid after the file is closed, until Close.
type Mapping struct {
	mu   sync.Mutex
	data []byte
}

// Map maps n bytes of f from off (a multiple of PageSize) read-only and
// shared. n may be 0 (an empty mapping, since mmap refuses empty ranges).
func Map(f *os.File, off int64, n int64) (*Mapping, error) {
	switch {
	case off < 0 || n < 0 || off%PageSize != 0:
		return nil, fmt.Errorf("map %s [%d, +%d): offset must be a non-negative multiple of %d", f.Name(), off, n, PageSize)
	case n > math.MaxInt:
		return nil, fmt.Errorf("map %s: %d bytes do not fit the address space", f.Name(), n)
	case n == 0:
		return &Mapping{}, nil
	}
	b, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s [%d, +%d): %w", f.Name(), off, n, err)
	}
	return &Mapping{data: b}, nil
}

// MapFile maps the whole file at path read-only; the descriptor is closed
// at once (the mapping outlives it).
func MapFile(path string) (*Mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	return Map(f, 0, st.Size())
}

// Bytes returns the mapped bytes (nil after Close).
func (m *Mapping) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data
}

// Len is the mapping's length in bytes.
func (m *Mapping) Len() int { return len(m.Bytes()) }

// Close unmaps the bytes; slices of them must not be used afterwards.
// Closing twice does nothing.
func (m *Mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.data
	m.data = nil
	return unmap(b)
}

// unmap releases b, a whole mapping.
func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Munmap(b[:cap(b)]); err != nil {
		return fmt.Errorf("munmap %d bytes: %w", cap(b), err)
	}
	return nil
}
