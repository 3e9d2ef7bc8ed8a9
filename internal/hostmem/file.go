//go:build linux

package hostmem

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrDirectRefused is wrapped by OpenDirect's error when the filesystem
// refuses O_DIRECT (tmpfs, some FUSE filesystems): the caller decides
// whether buffered reads will do.
var ErrDirectRefused = errors.New("filesystem refuses O_DIRECT")

// File is a file open for reading, with O_DIRECT (Direct) or through the
// page cache. Its ReadAt is safe for concurrent use.
type File struct {
	once   sync.Once
	path   string
	fd     int
	size   int64
	direct bool
}

// OpenDirect opens path read-only with O_DIRECT, so reads bypass the page
// cache: a model larger than RAM streams at the device's speed without
// evicting everything else. Direct reads need PageSize-aligned buffers
// (Alloc), offsets and lengths. Some filesystems accept O_DIRECT at open and
// refuse it at the first read, so OpenDirect probes one page; either
// refusal is an error wrapping ErrDirectRefused.
func OpenDirect(path string) (*File, error) {
	f, err := open(path, true)
	if errors.Is(err, unix.EINVAL) {
		return nil, fmt.Errorf("open %s: %w", path, ErrDirectRefused)
	}
	if err != nil {
		return nil, err
	}
	if f.size >= PageSize {
		probe, err := Alloc(PageSize, AllocOptions{})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		_, perr := f.pread(probe.Bytes(), 0)
		probe.Free()
		if errors.Is(perr, unix.EINVAL) {
			f.Close()
			return nil, fmt.Errorf("open %s: first read: %w", path, ErrDirectRefused)
		}
	}
	return f, nil
}

// OpenBuffered opens path read-only through the page cache.
func OpenBuffered(path string) (*File, error) { return open(path, false) }

// open opens path read-only and finds its size (by seeking, so block
// devices have one too).
func open(path string, direct bool) (*File, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	size, err := unix.Seek(fd, 0, io.SeekEnd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: size: %w", path, err)
	}
	return &File{path: path, fd: fd, size: size, direct: direct}, nil
}

// pread reads into b at off once, retrying EINTR.
func (f *File) pread(b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(f.fd, b, off)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// ReadAt implements io.ReaderAt: it reads until b is full, returning
// io.EOF when the file ends first.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := f.pread(b[done:], off+int64(done))
		if err != nil {
			return done, fmt.Errorf("read %s: %d bytes at %d: %w", f.path, len(b)-done, off+int64(done), err)
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// Size is the file's length when it was opened (a block device's too).
func (f *File) Size() int64 { return f.size }

// Direct reports whether reads bypass the page cache.
func (f *File) Direct() bool { return f.direct }

// Path is the name the file was opened with.
func (f *File) Path() string { return f.path }

// Close closes the file; reads must have returned.
// Closing twice does nothing.
func (f *File) Close() error {
	var err error
	f.once.Do(func() {
		if cerr := unix.Close(f.fd); cerr != nil {
			err = fmt.Errorf("close %s: %w", f.path, cerr)
		}
	})
	return err
}

var _ io.ReaderAt = (*File)(nil)
