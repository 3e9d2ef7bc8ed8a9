package p2p

import (
	"errors"
	"fmt"
	"sync"

	"github.com/strata-llm/strata/nvme"
)

// Mapper maps memory into the NVMe controller's IOMMU domain;
// *vfio.Domain and *vfio.Container implement it.
type Mapper interface {
	MapDMA(buf []byte) (uint64, error)
	UnmapDMA(iova uint64) error
}

// ErrNotAdmitted is returned by Buffer for a target whose self-test has
// not passed.
var ErrNotAdmitted = errors.New("p2p: target not admitted (self-test has not passed)")

// Target is memory mapped for the controller's DMA.
type Target interface {
	// Kind says which route the target is.
	Kind() Kind
	// Name identifies the target in logs and reports.
	Name() string
	// Len is the target's size in bytes.
	Len() int
	// Buffer is the target as an NVMe DMA buffer; ErrNotAdmitted until
	// SelfTest passed.
	Buffer() (nvme.Buffer, error)
	// Close unmaps the target from the domain and releases it.
	Close() error

	raw() nvme.Buffer
	admit()
}

// base holds what every target shares.
type base struct {
	mu       sync.Mutex
	m        Mapper
	buf      nvme.Buffer
	admitted bool
	closed   bool
	release  func() error
}

// Len is the target's size in bytes.
func (b *base) Len() int { return b.buf.Len() }

func (b *base) raw() nvme.Buffer { return b.buf }
func (b *base) admit()           { b.mu.Lock(); b.admitted = true; b.mu.Unlock() }

// Admitted reports whether the target passed its self-test.
func (b *base) Admitted() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.admitted }

// Buffer is the target as an NVMe DMA buffer, refused (ErrNotAdmitted)
// until SelfTest passed.
func (b *base) Buffer() (nvme.Buffer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nvme.Buffer{}, errors.New("p2p: target closed")
	}
	if !b.admitted {
		return nvme.Buffer{}, ErrNotAdmitted
	}
	return b.buf, nil
}

// Close unmaps the target from the domain and releases its memory.
func (b *base) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	if err := b.m.UnmapDMA(b.buf.IOVA); err != nil {
		errs = append(errs, fmt.Errorf("p2p: unmapping IOVA %#x: %w", b.buf.IOVA, err))
	}
	if b.release != nil {
		errs = append(errs, b.release())
	}
	return errors.Join(errs...)
}

func (b *base) mapInto(m Mapper, mem []byte) error {
	iova, err := m.MapDMA(mem)
	if err != nil {
		return err
	}
	b.m, b.buf = m, nvme.Buffer{Bytes: mem, IOVA: iova}
	return nil
}

// HostPinned is anonymous host memory, locked (mlock) so it never moves or
// swaps, optionally backed by 2 MiB hugepages (fewer IOMMU and TLB
// entries), and mapped into the controller's domain. Its Bytes are what
// the engine registers with CUDA as pinned memory (cuMemHostRegister), so
// a layer read by the NVMe lands in memory the GPU copies from directly.
type HostPinned struct {
	base
	huge bool
}

// HostOptions configure NewHostPinned.
type HostOptions struct {
	// Huge asks for 2 MiB hugetlb pages (size rounded up to 2 MiB); it fails
	// when none are reserved (vm.nr_hugepages).
	Huge bool
}

// NewHostPinned allocates, locks and maps size bytes (rounded up to whole
// pages).
func NewHostPinned(m Mapper, size int, o HostOptions) (*HostPinned, error) {
	mem, err := allocLocked(size, o.Huge)
	if err != nil {
		return nil, fmt.Errorf("p2p: host pinned %d bytes: %w", size, err)
	}
	h := &HostPinned{huge: o.Huge}
	if err := h.mapInto(m, mem); err != nil {
		freeLocked(mem)
		return nil, fmt.Errorf("p2p: mapping %d host bytes for DMA: %w", len(mem), err)
	}
	h.release = func() error { return freeLocked(mem) }
	return h, nil
}

// Kind is KindHostPinned.
func (h *HostPinned) Kind() Kind { return KindHostPinned }

// Name says the size and page kind.
func (h *HostPinned) Name() string {
	pages := "4k"
	if h.huge {
		pages = "2m"
	}
	return fmt.Sprintf("host-pinned/%dB/%s", h.buf.Len(), pages)
}

// Bytes is the CPU view of the memory, for CUDA registration and for
// consumers of the data. It is valid until Close.
func (h *HostPinned) Bytes() []byte { return h.buf.Bytes }

// PeerBAR is another device's BAR, mapped by the CPU as a VM_PFNMAP region
// (VFIO's region mmap, sysfs resourceN, or gdrdrv for GPU memory) and by
// the IOMMU into the NVMe's domain, so that the controller writes into
// device memory peer to peer.
type PeerBAR struct {
	base
	name string
}

// NewPeerBAR maps bar (an mmap of the peer's BAR; the caller keeps
// ownership of the CPU mapping and its release, passed as release) into
// m. name identifies the peer, e.g. "0000:00:06.0/bar2".
func NewPeerBAR(m Mapper, bar []byte, name string, release func() error) (*PeerBAR, error) {
	if len(bar) == 0 || len(bar)%4096 != 0 {
		return nil, fmt.Errorf("p2p: peer BAR %s of %d bytes is not a whole number of pages", name, len(bar))
	}
	p := &PeerBAR{name: name}
	if err := p.mapInto(m, bar); err != nil {
		return nil, fmt.Errorf("p2p: mapping peer BAR %s (%d bytes) for DMA: %w", name, len(bar), err)
	}
	p.release = release
	return p, nil
}

// Kind is KindPeerBAR.
func (p *PeerBAR) Kind() Kind { return KindPeerBAR }

// Name identifies the peer BAR.
func (p *PeerBAR) Name() string { return p.name }

// Bytes is the CPU mapping of the BAR (uncached device memory on real
// hardware: slow for the CPU, fine for checks).
func (p *PeerBAR) Bytes() []byte { return p.buf.Bytes }
