//go:build unix

package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Mapped is a GGUF file mapped read-only into memory, so that tensor bytes
// can be used in place without copying. It is not safe to use Data or the
// File's readers concurrently with Close.
type Mapped struct {
	*File
	data []byte
}

// Map opens path, maps it read-only and parses its header.
func Map(path string) (*Mapped, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fd.Close() // the mapping outlives the descriptor
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	size := st.Size()
	if size < headerSize {
		// Too small to be GGUF; mmap of an empty file would fail with
		// EINVAL, so let Open report what is wrong.
		if _, err := Open(fd, size); err != nil {
			return nil, fmt.Errorf("gguf: %s: %w", path, err)
		}
		return nil, fmt.Errorf("gguf: %s: %d-byte file: %w", path, size, ErrTruncated)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: %d bytes is too large to map", path, size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Open(bytes.NewReader(data), size)
	if err != nil {
		_ = unix.Munmap(data)
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return &Mapped{File: f, data: data}, nil
}

// Data returns ti's bytes as a slice of the mapping, without copying. The
// slice is valid until Close. It returns nil after Close or when ti does not
// lie inside the file.
func (m *Mapped) Data(ti *TensorInfo) []byte {
	if m.data == nil || ti.Size < 0 || ti.Offset > uint64(len(m.data)) {
		return nil
	}
	start := uint64(m.DataOffset) + ti.Offset
	end := start + uint64(ti.Size)
	if start < ti.Offset || end < start || end > uint64(len(m.data)) {
		return nil
	}
	return m.data[start:end:end]
}

// errClosed is returned by a Mapped file's readers after Close.
var errClosed = errors.New("gguf: mapped file is closed")

type closedReader struct{}

func (closedReader) ReadAt([]byte, int64) (int, error) { return 0, errClosed }

// Close unmaps the file. Slices returned by Data must not be used after it.
// Closing twice is a no-op.
func (m *Mapped) Close() error {
	if m.data == nil {
		return nil
	}
	data := m.data
	m.data = nil
	m.r = closedReader{}
	if err := unix.Munmap(data); err != nil {
		return fmt.Errorf("gguf: munmap: %w", err)
	}
	return nil
}

var _ io.ReaderAt = closedReader{}
