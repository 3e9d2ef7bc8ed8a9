//go:build linux

package stream

// This file holds every system call and unsafe pointer use of package
// stream: opening files for direct I/O, pread, and mmap/munmap. Each
// function wraps one call, retries EINTR and returns errors with context.

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openRead opens path read-only, with O_DIRECT when direct is set.
func openRead(path string, direct bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	for {
		fd, err := unix.Open(path, flags, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", path, err)
		}
		return fd, nil
	}
}

// closeFD closes fd.
func closeFD(fd int) error { return unix.Close(fd) }

// fdSize returns the size of the file open as fd.
func fdSize(fd int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fstat: %w", err)
	}
	return st.Size, nil
}

// pread reads into b at off once (retrying EINTR) and returns the count.
func pread(fd int, b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n, err
	}
}

// isInvalid reports whether err is EINVAL, what the kernel returns when a
// filesystem refuses O_DIRECT (at open on some, at the first read on
// others).
func isInvalid(err error) bool { return errors.Is(err, unix.EINVAL) }

// mapAnon maps n bytes of private anonymous memory (page-aligned, zeroed).
func mapAnon(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap %d anonymous bytes: %w", n, err)
	}
	return b, nil
}

// mapFile maps the first n bytes of fd read-only and shared.
func mapFile(fd int, n int) ([]byte, error) {
	b, err := unix.Mmap(fd, 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d file bytes: %w", n, err)
	}
	return b, nil
}

// unmap releases a mapping made by mapAnon or mapFile.
func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// addr returns the address of b's first byte, for alignment checks only.
func addr(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
