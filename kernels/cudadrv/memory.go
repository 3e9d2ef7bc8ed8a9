package cudadrv

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/strata-llm/strata/internal/hostmem"
)

// DevPtr is a device address (CUdeviceptr). Zero is never a valid
// allocation.
type DevPtr uint64

// Add offsets a device address by n bytes.
func (p DevPtr) Add(n int64) DevPtr { return DevPtr(int64(p) + n) }

// Alloc allocates n bytes of device memory (cuMemAlloc; 256-byte aligned).
func (c *Ctx) Alloc(n int64) (DevPtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuMemAlloc: size %d must be positive", n)
	}
	var p uint64
	if err := check("cuMemAlloc", call(drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))); err != nil {
		return 0, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	return DevPtr(p), nil
}

// Free releases memory from Alloc. Freeing zero is a no-op.
func (c *Ctx) Free(p DevPtr) error {
	if p == 0 {
		return nil
	}
	return check("cuMemFree", call(drv.cuMemFree, uintptr(p)))
}

// MemsetD8 sets n bytes at p to v, in stream order.
func (c *Ctx) MemsetD8(p DevPtr, v byte, n int64, s Stream) error {
	return check("cuMemsetD8Async", call(drv.cuMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s)))
}

// MemsetD32 sets n 32-bit words at p to v, in stream order.
func (c *Ctx) MemsetD32(p DevPtr, v uint32, n int64, s Stream) error {
	return check("cuMemsetD32Async", call(drv.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s)))
}

// Flags for HostAlloc (CU_MEMHOSTALLOC_*) and HostRegister
// (CU_MEMHOSTREGISTER_*).
const (
	HostAllocPortable      = 0x1
	HostAllocDeviceMap     = 0x2
	HostAllocWriteCombined = 0x4

	HostRegisterPortable  = 0x1
	HostRegisterDeviceMap = 0x2
	HostRegisterIOMemory  = 0x4
	HostRegisterReadOnly  = 0x8
)

// HostMem is page-locked host memory the GPU can DMA from and to at full
// PCIe speed: either allocated by the driver (HostAlloc) or an existing
// mapping pinned in place (HostRegister). Its bytes are ordinary Go-visible
// memory; the caller must not use them while an async copy is in flight.
type HostMem struct {
	p          unsafe.Pointer
	n          int
	registered bool
}

// Bytes is the pinned memory as a byte slice. It is valid until FreeHost
// (or HostUnregister for registered memory, after which it is the caller's
// original memory again).
func (h *HostMem) Bytes() []byte {
	if h == nil || h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Len is the size in bytes.
func (h *HostMem) Len() int { return h.n }

// HostAlloc allocates n bytes of pinned host memory (cuMemHostAlloc).
func (c *Ctx) HostAlloc(n int, flags uint32) (*HostMem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuMemHostAlloc: size %d must be positive", n)
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", call(drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), uintptr(flags))); err != nil {
		return nil, fmt.Errorf("pinning %d bytes: %w", n, err)
	}
	return &HostMem{p: p, n: n}, nil
}

// FreeHost releases memory from HostAlloc.
func (c *Ctx) FreeHost(h *HostMem) error {
	if h == nil || h.p == nil {
		return nil
	}
	if h.registered {
		return errors.New("cuMemFreeHost: memory was registered, not allocated: use HostUnregister")
	}
	err := check("cuMemFreeHost", call(drv.cuMemFreeHost, uintptr(h.p)))
	h.p, h.n = nil, 0
	return err
}

// HostRegister page-locks existing host memory in place
// (cuMemHostRegister), typically a file or anonymous mmap the caller keeps
// mapped until HostUnregister. b must not be Go heap memory: the collector
// could free it while the driver still maps it.
func (c *Ctx) HostRegister(b []byte, flags uint32) (*HostMem, error) {
	if len(b) == 0 {
		return nil, errors.New("cuMemHostRegister: empty buffer")
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if err := check("cuMemHostRegister", call(drv.cuMemHostRegister, uintptr(p), uintptr(len(b)), uintptr(flags))); err != nil {
		return nil, fmt.Errorf("registering %d bytes: %w", len(b), err)
	}
	return &HostMem{p: p, n: len(b), registered: true}, nil
}

// HostRegisterRanges page-locks in place the pages bufs lie in: views
// into one or more mappings (a model file's tensors in its snapshot, or
// in several shard files' mappings). Buffers that share a page are
// registered as one range, so no page is registered twice (the driver
// refuses that); the pages between them are pinned too, and must be
// mapped, as they are inside one mapping. On failure nothing stays
// pinned. HostUnregister each of the returned ranges.
func (c *Ctx) HostRegisterRanges(bufs [][]byte, flags uint32) ([]*HostMem, error) {
	type buf struct {
		p    unsafe.Pointer
		span pageSpan
	}
	var bs []buf
	for _, b := range bufs {
		if len(b) > 0 {
			p := unsafe.Pointer(unsafe.SliceData(b))
			bs = append(bs, buf{p, pageSpan{uintptr(p), uintptr(p) + uintptr(len(b))}})
		}
	}
	if len(bs) == 0 {
		return nil, errors.New("cuMemHostRegister: no bytes to register")
	}
	slices.SortFunc(bs, func(a, b buf) int { return cmp.Compare(a.span.lo, b.span.lo) })
	spans := make([]pageSpan, len(bs))
	for i, b := range bs {
		spans[i] = b.span
	}
	var out []*HostMem
	next := 0 // the lowest buffer of the next range
	for _, r := range mergePages(spans, hostmem.PageSize) {
		// The range starts in the page of its lowest buffer, inside the
		// same mapping: rebuilt from that buffer's pointer.
		first := bs[next]
		for next < len(bs) && bs[next].span.lo < r.hi {
			next++
		}
		p := unsafe.Add(first.p, -int(first.span.lo-r.lo))
		if err := check("cuMemHostRegister", call(drv.cuMemHostRegister, uintptr(p), r.hi-r.lo, uintptr(flags))); err != nil {
			for _, h := range out {
				_ = c.HostUnregister(h)
			}
			return nil, fmt.Errorf("registering %d bytes (one of %d ranges around %d buffers): %w", r.hi-r.lo, len(out)+1, len(bs), err)
		}
		out = append(out, &HostMem{p: p, n: int(r.hi - r.lo), registered: true})
	}
	return out, nil
}

// pageSpan is a range of host addresses [lo, hi).
type pageSpan struct{ lo, hi uintptr }

// mergePages returns the page-aligned ranges that cover spans, those
// that share a page merged into one, in increasing order. Ranges that
// only touch stay apart: they may be two mappings.
func mergePages(spans []pageSpan, page uintptr) []pageSpan {
	ps := make([]pageSpan, len(spans))
	for i, s := range spans {
		ps[i] = pageSpan{lo: s.lo &^ (page - 1), hi: (s.hi + page - 1) &^ (page - 1)}
	}
	slices.SortFunc(ps, func(a, b pageSpan) int { return cmp.Compare(a.lo, b.lo) })
	var out []pageSpan
	for _, s := range ps {
		if n := len(out); n > 0 && s.lo < out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// HostUnregister undoes HostRegister; the memory stays mapped.
func (c *Ctx) HostUnregister(h *HostMem) error {
	if h == nil || h.p == nil {
		return nil
	}
	if !h.registered {
		return errors.New("cuMemHostUnregister: memory was allocated, not registered: use FreeHost")
	}
	err := check("cuMemHostUnregister", call(drv.cuMemHostUnregister, uintptr(h.p)))
	h.p, h.n = nil, 0
	return err
}

// HostDevicePointer returns the device address of mapped pinned memory
// (allocated or registered with the DeviceMap flag), for zero-copy access.
func (c *Ctx) HostDevicePointer(h *HostMem) (DevPtr, error) {
	var p uint64
	if err := check("cuMemHostGetDevicePointer", call(drv.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&p)), uintptr(h.p), 0)); err != nil {
		return 0, err
	}
	return DevPtr(p), nil
}

// CopyHtoD copies src to device address dst in stream order. From pinned
// memory (HostMem.Bytes) it is asynchronous: src must stay untouched until
// the stream passes the copy. From ordinary memory the driver stages the
// bytes before returning, so src may be reused at once.
func (c *Ctx) CopyHtoD(dst DevPtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", call(drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), uintptr(s)))
}

// memcpy2D is the driver's 2D copy descriptor (CUDA_MEMCPY2D, the _v2
// ABI): byte offsets and pitches are size_t, the memory types 32-bit
// enums padded to the next pointer.
type memcpy2D struct {
	srcXInBytes, srcY uintptr
	srcMemoryType     uint32
	_                 uint32
	srcHost           uintptr
	srcDevice         uint64
	srcArray          uintptr
	srcPitch          uintptr
	dstXInBytes, dstY uintptr
	dstMemoryType     uint32
	_                 uint32
	dstHost           uintptr
	dstDevice         uint64
	dstArray          uintptr
	dstPitch          uintptr
	widthInBytes      uintptr
	height            uintptr
}

// CU_MEMORYTYPE_HOST and _DEVICE.
const (
	memoryTypeHost   = 1
	memoryTypeDevice = 2
)

// CopyHtoD2D copies height rows of width bytes from src, whose rows start
// srcPitch bytes apart, to device address dst, rows dstPitch bytes apart,
// in stream order: some columns of a wider host matrix packed on the
// device in one copy. src runs from the first row's start to the last
// row's end. From pinned memory it is asynchronous (src must stay
// untouched until the stream passes the copy), as CopyHtoD.
func (c *Ctx) CopyHtoD2D(dst DevPtr, dstPitch int64, src []byte, srcPitch, width, height int64, s Stream) error {
	if width <= 0 || height <= 0 {
		return fmt.Errorf("cuMemcpy2DAsync: %d rows of %d bytes", height, width)
	}
	if width > srcPitch || width > dstPitch {
		return fmt.Errorf("cuMemcpy2DAsync: rows of %d bytes %d (source) and %d (destination) bytes apart", width, srcPitch, dstPitch)
	}
	if need := (height-1)*srcPitch + width; int64(len(src)) != need {
		return fmt.Errorf("cuMemcpy2DAsync: %d source bytes for %d rows of %d bytes %d apart (want %d)", len(src), height, width, srcPitch, need)
	}
	d := memcpy2D{
		srcMemoryType: memoryTypeHost, srcHost: uintptr(unsafe.Pointer(unsafe.SliceData(src))), srcPitch: uintptr(srcPitch),
		dstMemoryType: memoryTypeDevice, dstDevice: uint64(dst), dstPitch: uintptr(dstPitch),
		widthInBytes: uintptr(width), height: uintptr(height),
	}
	return check("cuMemcpy2DAsync", call(drv.cuMemcpy2DAsync, uintptr(unsafe.Pointer(&d)), uintptr(s)))
}

// CopyDtoH copies len(dst) bytes from device address src in stream order.
// Into pinned memory it is asynchronous; into ordinary memory the call
// returns once the bytes have arrived.
func (c *Ctx) CopyDtoH(dst []byte, src DevPtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", call(drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), uintptr(s)))
}

// CopyDtoD copies n bytes between device addresses in stream order.
func (c *Ctx) CopyDtoD(dst, src DevPtr, n int64, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", call(drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// Scalar is an element type that may be viewed as raw bytes for copies.
type Scalar interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Bytes views a slice of scalars as its bytes (no copy), for CopyHtoD and
// CopyDtoH.
func Bytes[T Scalar](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// Values views bytes as a slice of scalars (no copy), e.g. pinned memory as
// []float32. It fails when b is misaligned or not a whole number of
// elements.
func Values[T Scalar](b []byte) ([]T, error) {
	var z T
	sz := int(unsafe.Sizeof(z))
	if len(b) == 0 {
		return nil, nil
	}
	if len(b)%sz != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(unsafe.Alignof(z)) != 0 {
		return nil, fmt.Errorf("cuda: %d bytes at a misaligned or partial %d-byte boundary", len(b), sz)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/sz), nil
}

// Upload copies a Go slice to device memory and waits for the stream, so
// src may be reused at once. Convenience for setup code, not hot paths.
func Upload[T Scalar](c *Ctx, dst DevPtr, src []T, s Stream) error {
	if err := c.CopyHtoD(dst, Bytes(src), s); err != nil {
		return err
	}
	return c.StreamSync(s)
}

// Download copies device memory into a Go slice after waiting for the
// stream's earlier work.
func Download[T Scalar](c *Ctx, dst []T, src DevPtr, s Stream) error {
	if err := c.StreamSync(s); err != nil {
		return err
	}
	if err := c.CopyDtoH(Bytes(dst), src, s); err != nil {
		return err
	}
	return c.StreamSync(s)
}

// Memory range handle types for ExportDmaBuf.
const rangeHandleDmaBufFD = 1

// ExportDmaBuf exports [p, p+n) of device memory as a dma-buf file
// descriptor (cuMemGetHandleForAddressRange, DMA_BUF_FD), for importers
// such as an IOMMU mapping for NVMe peer-to-peer. p and n must be
// host-page aligned. The caller owns (and closes) the descriptor.
func (c *Ctx) ExportDmaBuf(p DevPtr, n int64) (int, error) {
	var fd int32 = -1
	if err := check("cuMemGetHandleForAddressRange", call(drv.cuMemGetHandleForAddressRange, uintptr(unsafe.Pointer(&fd)), uintptr(p), uintptr(n), rangeHandleDmaBufFD, 0)); err != nil {
		return -1, fmt.Errorf("exporting %d bytes at %#x as dma-buf: %w", n, uint64(p), err)
	}
	return int(fd), nil
}

// HostMap finds the device address of bytes inside pinned host ranges
// registered with HostRegisterDeviceMap (HostRegisterRanges): a kernel
// reads such bytes over PCIe in place, with no copy.
type HostMap struct {
	ranges []mappedRange // by host address, disjoint
}

type mappedRange struct {
	lo, hi uintptr
	dev    DevPtr
}

// MapRanges returns the device addresses of hs, each registered with
// HostRegisterDeviceMap (or allocated with HostAllocDeviceMap).
func (c *Ctx) MapRanges(hs []*HostMem) (*HostMap, error) {
	m := &HostMap{}
	for _, h := range hs {
		d, err := c.HostDevicePointer(h)
		if err != nil {
			return nil, fmt.Errorf("device address of %d pinned bytes: %w", h.Len(), err)
		}
		m.ranges = append(m.ranges, mappedRange{lo: uintptr(h.p), hi: uintptr(h.p) + uintptr(h.n), dev: d})
	}
	return m, m.sort()
}

// sort orders the ranges and refuses overlapping ones.
func (m *HostMap) sort() error {
	slices.SortFunc(m.ranges, func(a, b mappedRange) int { return cmp.Compare(a.lo, b.lo) })
	for i := 1; i < len(m.ranges); i++ {
		if m.ranges[i].lo < m.ranges[i-1].hi {
			return fmt.Errorf("pinned ranges overlap at %#x", m.ranges[i].lo)
		}
	}
	return nil
}

// Addr is the device address of b's first byte; b must lie wholly inside
// one of the map's ranges.
func (m *HostMap) Addr(b []byte) (DevPtr, error) {
	if len(b) == 0 {
		return 0, errors.New("device address of an empty buffer")
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	i, _ := slices.BinarySearchFunc(m.ranges, lo, func(r mappedRange, p uintptr) int {
		switch {
		case r.hi <= p:
			return -1
		case r.lo > p:
			return 1
		}
		return 0
	})
	if i == len(m.ranges) || m.ranges[i].lo > lo || m.ranges[i].hi < hi {
		return 0, fmt.Errorf("%d bytes at %#x lie outside the mapped pinned ranges", len(b), lo)
	}
	r := m.ranges[i]
	return r.dev.Add(int64(lo - r.lo)), nil
}
