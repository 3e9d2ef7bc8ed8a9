package vfio

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl issues one VFIO or iommufd ioctl on fd. Every ioctl of this package
// goes through it.
//
// Pointer rule: when ptr is non-nil it is passed to the kernel and val is
// ignored; ptr must point to memory the caller owns for the duration of the
// call: a Go value (struct or byte slice element) that lives at least until
// ioctl returns, or an mmap'd buffer. The unsafe.Pointer is converted to
// uintptr inside the Syscall argument list, which keeps the referenced
// object alive and unmoved for the call (rule 4 of package unsafe), and
// runtime.KeepAlive repeats that promise to the reader. Addresses that the
// kernel keeps using after the call (DMA map vaddr fields) are not covered:
// Container and IOAS keep those buffers referenced until unmapped.
// When ptr is nil, val is passed by value (an extension number, an fd).
func ioctl(fd int, req uintptr, ptr unsafe.Pointer, val uintptr) (int, error) {
	var r uintptr
	var errno unix.Errno
	if ptr != nil {
		r, _, errno = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(ptr))
	} else {
		r, _, errno = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, val)
	}
	runtime.KeepAlive(ptr)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// openDev opens a VFIO/iommufd character device read-write, close-on-exec,
// mapping "not there" to notThere.
func openDev(path string, notThere error) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
			return -1, fmt.Errorf("opening %s: %v: %w", path, err, notThere)
		}
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// mmapShared maps length bytes of fd at offset, read-write and shared, the
// way BARs are mapped through a VFIO device fd.
func mmapShared(fd int, offset int64, length int) ([]byte, error) {
	return unix.Mmap(fd, offset, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// munmap undoes mmapShared or AllocDMA.
func munmap(b []byte) error { return unix.Munmap(b) }

// AllocDMA returns size bytes (rounded up to 4 KiB) of anonymous, zeroed,
// shared memory outside the Go heap, suitable for MapDMA. With huge it asks
// for 2 MiB hugetlb pages (size rounded up to 2 MiB), which fails with
// ErrNotSupported when none are reserved. Release it with FreeDMA after
// unmapping it.
func AllocDMA(size int, huge bool) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("DMA buffer of %d bytes", size)
	}
	flags := unix.MAP_SHARED | unix.MAP_ANONYMOUS | unix.MAP_POPULATE
	page := 4096
	if huge {
		flags |= unix.MAP_HUGETLB | 21<<unix.MAP_HUGE_SHIFT
		page = 2 << 20
	}
	size = (size + page - 1) &^ (page - 1)
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		if huge && (errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EINVAL)) {
			return nil, fmt.Errorf("allocating %d bytes of 2 MiB hugepages (see /proc/sys/vm/nr_hugepages): %v: %w", size, err, ErrNotSupported)
		}
		return nil, fmt.Errorf("allocating %d-byte DMA buffer: %w", size, err)
	}
	return b, nil
}

// FreeDMA releases a buffer from AllocDMA. The buffer must no longer be
// mapped for DMA.
func FreeDMA(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("freeing DMA buffer: %w", err)
	}
	return nil
}
