//go:build linux

package hostmem

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrFileChanged is returned (wrapped) when a file a Snapshot copies from is
// shorter than it was when the snapshot was made: it was truncated or
// replaced in place since.
var ErrFileChanged = errors.New("file changed since it was opened")

// Snapshot is a private copy of a file's bytes in anonymous memory, filled
// from the file with reads (all at once, or range by range as they are first
// needed). Serving weights from a shared mapping of the file would let
// anyone who can write the file crash the process: truncating it turns the
// next access to a mapped page past the new end into SIGBUS, which Go cannot
// recover from in code it does not control (kernels, the CUDA driver). A copy
// also stays consistent when the file is rewritten in place. The reservation
// is the file's size but only filled ranges take memory. A Snapshot keeps its
// own descriptor of the file (a duplicate) for later fills.
type Snapshot struct {
	mu   sync.Mutex
	f    source
	all  []byte
	data []byte
}

// source is what a Snapshot fills from: a duplicated file descriptor, or
// any other reader of the same bytes (a pool stored on a raw device).
type source interface {
	io.ReaderAt
	Name() string
	Close() error
}

// readerSource is a source over a caller's io.ReaderAt, which the snapshot
// does not own: closing the snapshot leaves it open.
type readerSource struct {
	io.ReaderAt
	name string
}

func (r readerSource) Name() string { return r.name }
func (r readerSource) Close() error { return nil }

// NewSnapshotReader reserves n bytes of anonymous memory for a copy of the
// n bytes r holds, filled by Fill as from a file. It is for storage that is
// not a file (a volume extent read by the userspace NVMe driver); name is
// what errors call it. r must stay usable until the snapshot is closed.
func NewSnapshotReader(name string, r io.ReaderAt, n int64) (*Snapshot, error) {
	s := &Snapshot{f: readerSource{ReaderAt: r, name: name}}
	if err := s.reserve(n, false); err != nil {
		return nil, err
	}
	return s, nil
}

// NewSnapshot reserves n bytes of anonymous memory for a copy of f (whose
// size is n) and keeps a duplicate of f's descriptor for Fill. Nothing is
// read yet.
func NewSnapshot(f *os.File, n int64) (*Snapshot, error) {
	return newSnapshot(f, n, false)
}

func newSnapshot(f *os.File, n int64, populate bool) (*Snapshot, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: duplicating the descriptor: %w", f.Name(), err)
	}
	s := &Snapshot{f: os.NewFile(uintptr(fd), f.Name())}
	if err := s.reserve(n, populate); err != nil {
		return nil, err
	}
	return s, nil
}

// reserve maps the snapshot's n bytes; on failure it closes s.f.
func (s *Snapshot) reserve(n int64, populate bool) error {
	switch {
	case n < 0:
		_ = s.f.Close()
		return fmt.Errorf("snapshot %s: negative size %d", s.f.Name(), n)
	case n > math.MaxInt-PageSize:
		_ = s.f.Close()
		return fmt.Errorf("snapshot %s: %d bytes do not fit the address space", s.f.Name(), n)
	case n == 0:
		return nil
	}
	// MAP_NORESERVE: a pool's reservation covers extents that are
	// streamed and never filled, which must not be charged to commit. A
	// snapshot filled whole is populated up front: the kernel allocating
	// every page in one call costs less than a fault per page during the
	// copy. No MADV_HUGEPAGE: where the host defragments on fault, huge
	// pages made the copy slower than the small pages a file mapping had.
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_NORESERVE
	if populate {
		flags |= unix.MAP_POPULATE
	}
	all, err := unix.Mmap(-1, 0, AlignUp(int(n), PageSize), unix.PROT_READ|unix.PROT_WRITE,
		flags)
	if err != nil {
		_ = s.f.Close()
		return fmt.Errorf("snapshot %s: reserving %d bytes: %w", s.f.Name(), n, err)
	}
	s.all, s.data = all, all[:n:n]
	return nil
}

// SnapshotFile copies the whole of f (n bytes) into anonymous memory. The
// copy keeps no descriptor (there is nothing left to fill), so a file
// deleted after the load does not hold its disk space for as long as the
// copy lives.
func SnapshotFile(f *os.File, n int64) (*Snapshot, error) {
	s, err := newSnapshot(f, n, true)
	if err != nil {
		return nil, err
	}
	if err := s.Fill(0, n); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.mu.Lock()
	df := s.f
	s.f = nil
	s.mu.Unlock()
	if err := df.Close(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("snapshot %s: %w", f.Name(), err)
	}
	return s, nil
}

// Fill copies bytes [off, off+n) of the file into the snapshot. Fills of
// disjoint ranges may run concurrently; a range must not be filled while
// its bytes are in use. A file now shorter than the range is an error
// wrapping ErrFileChanged.
func (s *Snapshot) Fill(off, n int64) error {
	s.mu.Lock()
	b, f := s.data, s.f
	s.mu.Unlock()
	if f == nil {
		return errors.New("snapshot: closed")
	}
	if off < 0 || n < 0 || off > int64(len(b)) || n > int64(len(b))-off {
		return fmt.Errorf("snapshot %s: fill [%d, +%d) outside its %d bytes", f.Name(), off, n, len(b))
	}
	if n == 0 {
		return nil // a reader other than a file may answer io.EOF at its end
	}
	// Large ranges are read in chunks by several goroutines: the copy
	// (and the kernel allocating the pages it lands in) is CPU-bound, so
	// it scales with cores where one read would use one.
	workers := int64(min(runtime.GOMAXPROCS(0), 8))
	if n < 2*fillChunk || workers < 2 {
		return fillRange(f, b, off, n)
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next.Store(off)
	for range workers {
		wg.Go(func() {
			for {
				lo := next.Add(fillChunk) - fillChunk
				if lo >= off+n {
					return
				}
				if err := fillRange(f, b, lo, min(fillChunk, off+n-lo)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// fillChunk is what one goroutine of a parallel Fill reads at a time.
const fillChunk = 16 << 20

// fillRange reads bytes [off, off+n) of f into the same range of b.
func fillRange(f source, b []byte, off, n int64) error {
	got, err := f.ReadAt(b[off:off+n], off)
	if errors.Is(err, io.EOF) {
		size := "unknown"
		if of, ok := f.(*os.File); ok {
			if st, serr := of.Stat(); serr == nil {
				size = fmt.Sprint(st.Size())
			}
		}
		return fmt.Errorf("snapshot %s: reading [%d, +%d): %w (%d of the bytes read; the file now has %s bytes, it had %d)",
			f.Name(), off, n, ErrFileChanged, got, size, len(b))
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: reading [%d, +%d): %w", f.Name(), off, n, err)
	}
	return nil
}

// Bytes returns the snapshot's bytes (nil after Close). Only filled ranges
// hold the file's bytes; the rest read as zeros.
func (s *Snapshot) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data
}

// Len is the snapshot's length in bytes.
func (s *Snapshot) Len() int { return len(s.Bytes()) }

// Close releases the memory and the descriptor; slices of the bytes must
// not be used afterwards. Closing twice does nothing.
func (s *Snapshot) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, f := s.all, s.f
	s.all, s.data, s.f = nil, nil, nil
	var errs []error
	if all != nil {
		if err := unix.Munmap(all); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: munmap %d bytes: %w", len(all), err))
		}
	}
	if f != nil {
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Held is a file's bytes in memory: a copy (Snapshot) or a read-only
// shared mapping (Mapping).
type Held interface {
	Bytes() []byte
	Close() error
}

// Hold holds the n bytes of f in memory: copied whole (SnapshotFile), so
// they stay what was read whatever happens to the file, or, shared, mapped
// read-only (Map), so they come and go with the page cache (a file
// truncated meanwhile kills the process with SIGBUS).
func Hold(f *os.File, n int64, shared bool) (Held, error) {
	var h Held
	var err error
	if shared {
		h, err = Map(f, 0, n)
	} else {
		h, err = SnapshotFile(f, n)
	}
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return h, nil
}
