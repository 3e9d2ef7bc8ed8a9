//go:build linux

package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/strata-llm/strata/internal/hostmem"
)

// Mapped is a GGUF file whose tensor bytes can be used in place. Map
// copies the file whole into anonymous memory (a hostmem.Snapshot), not a
// shared mapping of the file, because weights used in place from the
// file's pages crash the process with SIGBUS once someone truncates the
// file, and change under it when the file is rewritten: the copy costs the
// load one read of the file (which a mapping pays on first use anyway) and
// keeps serving what was loaded. MapShared maps the file's pages instead,
// for a tool that reads a file larger than memory once. It is not safe to
// use Data or the File's readers concurrently with Close.
type Mapped struct {
	*File
	m    hostmem.Held
	data []byte
	// parts are the second and later files of a split model (parts[0] is
	// nil: the first file is this one).
	parts []*Mapped
}

// How mapOne holds a file.
type holdMode int

const (
	holdCopy   holdMode = iota // a copy in anonymous memory
	holdShared                 // the file's pages, shared with the page cache
	holdHeader                 // the header alone
)

// Map opens path, copies it into memory and parses its header. A split
// model (llama.cpp's gguf-split: PREFIX-00001-of-00003.gguf and its
// siblings, each holding some of the tensors) is opened from its first
// part: every part is copied and the result lists all tensors, with the
// first part's metadata (see mapSplit).
func Map(path string) (*Mapped, error) { return open(path, holdCopy) }

// MapShared is Map over a read-only shared mapping of the file (of every
// part) instead of a copy: its pages come and go with the page cache, so a
// file larger than memory can be read through once (converting it to a
// pool does). The caveats that make Map copy hold: the process dies with
// SIGBUS if the file is truncated while mapped, so nothing that serves
// requests may use it.
func MapShared(path string) (*Mapped, error) { return open(path, holdShared) }

// ReadHeader parses the header of the GGUF model at path (of every part of
// a split model, checked as Map checks them) and reads no tensor data:
// what planning and inspecting a model need, at the cost of its headers
// rather than of a copy of the file. The File's tensor readers fail.
func ReadHeader(path string) (*File, error) {
	m, err := open(path, holdHeader)
	if err != nil {
		return nil, err
	}
	return m.File, nil
}

// errHeaderOnly is what a ReadHeader File's readers return.
var errHeaderOnly = errors.New("gguf: read as a header only (ReadHeader): no tensor data")

type headerOnly struct{}

func (headerOnly) ReadAt([]byte, int64) (int, error) { return 0, errHeaderOnly }

func open(path string, mode holdMode) (*Mapped, error) {
	m, err := mapOne(path, mode)
	if err != nil {
		return nil, err
	}
	return mapSplit(path, m, mode)
}

// mapOne maps a single GGUF file.
func mapOne(path string, mode holdMode) (*Mapped, error) {
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
	if mode == holdHeader {
		f, err := Open(fd, size)
		if err != nil {
			return nil, fmt.Errorf("gguf: %s: %w", path, err)
		}
		f.r = headerOnly{}
		return &Mapped{File: f}, nil
	}
	m, err := hostmem.Hold(fd, size, mode == holdShared)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Open(bytes.NewReader(m.Bytes()), size)
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return &Mapped{File: f, m: m, data: m.Bytes()}, nil
}

// Data returns ti's bytes as a slice of the mapping, without copying. The
// slice is valid until Close. It returns nil after Close or when ti does not
// lie inside the file.
func (m *Mapped) Data(ti *TensorInfo) []byte {
	data, dataOffset := m.data, m.DataOffset
	if ti.part > 0 {
		if m.data == nil || ti.part >= len(m.parts) {
			return nil
		}
		data, dataOffset = m.parts[ti.part].data, m.parts[ti.part].DataOffset
	}
	if data == nil || ti.Size < 0 || ti.Offset > uint64(len(data)) {
		return nil
	}
	start := uint64(dataOffset) + ti.Offset
	end := start + uint64(ti.Size)
	if start < ti.Offset || end < start || end > uint64(len(data)) {
		return nil
	}
	return data[start:end:end]
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
	m.data = nil
	m.r = closedReader{}
	var errs []error
	if err := m.m.Close(); err != nil {
		errs = append(errs, fmt.Errorf("gguf: %w", err))
	}
	for i, p := range m.parts {
		if p == nil { // the first part, or one not mapped
			continue
		}
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("split part %d: %w", i+1, err))
		}
	}
	return errors.Join(errs...)
}

var _ io.ReaderAt = closedReader{}
