//go:build linux

package hostmem

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// HugePageSize is the huge page size Alloc rounds to when asked for huge
// pages (the x86-64 and arm64 default).
const HugePageSize = 2 << 20

// AllocOptions say how Alloc backs the memory.
type AllocOptions struct {
	// HugePages asks for 2 MiB pages, which cut TLB misses when large
	// buffers are streamed through: explicit huge pages (MAP_HUGETLB) when
	// the host has reserved some, otherwise transparent huge pages
	// (madvise), otherwise plain pages. Region.Huge says whether explicit
	// ones were used.
	HugePages bool
	// Lock pins the pages in RAM (mlock) so they are never swapped out;
	// it fails when RLIMIT_MEMLOCK is too small.
	Lock bool
}

// Region is anonymous memory outside the Go heap: page-aligned, zeroed,
// owned by whoever called Alloc until Free.
type Region struct {
	once   sync.Once
	all    []byte // the whole mapping, for munmap
	b      []byte
	huge   bool
	locked bool
}

// Alloc maps n bytes (n >= 0; rounded up to PageSize, or HugePageSize with
// huge pages) of private anonymous memory. Bytes returns exactly n bytes.
func Alloc(n int, opts AllocOptions) (*Region, error) {
	if n < 0 {
		return nil, fmt.Errorf("alloc %d bytes: negative size", n)
	}
	r := &Region{}
	size := AlignUp(max(n, 1), PageSize)
	var err error
	if opts.HugePages {
		hsize := AlignUp(size, HugePageSize)
		r.all, err = unix.Mmap(-1, 0, hsize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB)
		if err == nil {
			r.huge = true
		} else if r.all, err = unix.Mmap(-1, 0, hsize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err == nil {
			// Transparent huge pages are advice: a host without them keeps
			// plain pages, which is not an error.
			_ = unix.Madvise(r.all, unix.MADV_HUGEPAGE)
		}
	} else {
		r.all, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	}
	if err != nil {
		return nil, fmt.Errorf("alloc %d bytes: mmap: %w", n, err)
	}
	if opts.Lock {
		if err := unix.Mlock(r.all); err != nil {
			_ = unix.Munmap(r.all)
			return nil, fmt.Errorf("alloc %d bytes: mlock: %w", n, err)
		}
		r.locked = true
	}
	r.b = r.all[:n:n]
	return r, nil
}

// Bytes returns the region's n bytes (nil after Free).
func (r *Region) Bytes() []byte { return r.b }

// Len is the region's length in bytes.
func (r *Region) Len() int { return len(r.b) }

// Huge reports whether explicit huge pages back the region.
func (r *Region) Huge() bool { return r.huge }

// Locked reports whether the region is locked in RAM.
func (r *Region) Locked() bool { return r.locked }

// Free unmaps the region (unlocking it); the bytes must not be used
// afterwards. Calling it again does nothing.
func (r *Region) Free() error {
	var err error
	r.once.Do(func() {
		all := r.all
		r.all, r.b = nil, nil
		if r.locked {
			err = unix.Munlock(all)
		}
		err = errors.Join(err, unmap(all))
		if err != nil {
			err = fmt.Errorf("free %d bytes: %w", len(all), err)
		}
	})
	return err
}
