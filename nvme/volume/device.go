package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/strata-llm/strata/nvme"
)

// FileDevice is a BlockDevice over a file or block device node: the
// offline writer of volume images and the unit tests use it.
type FileDevice struct {
	f      *os.File
	bs     int
	blocks uint64
}

// NewFileDevice uses f's current size as the device size.
func NewFileDevice(f *os.File, blockSize int) (*FileDevice, error) {
	if blockSize < 512 || blockSize > Unit || blockSize&(blockSize-1) != 0 {
		return nil, fmt.Errorf("volume: block size %d unsupported", blockSize)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("volume: %w", err)
	}
	return &FileDevice{f: f, bs: blockSize, blocks: uint64(st.Size()) / uint64(blockSize)}, nil
}

// BlockSize is the block size given to NewFileDevice.
func (d *FileDevice) BlockSize() int { return d.bs }

// Blocks is the file size in blocks.
func (d *FileDevice) Blocks() uint64 { return d.blocks }

// Flush syncs the file.
func (d *FileDevice) Flush(ctx context.Context) error { return d.f.Sync() }

func (d *FileDevice) check(lba uint64, p []byte) error {
	if len(p)%d.bs != 0 || lba > d.blocks || uint64(len(p)/d.bs) > d.blocks-lba {
		return fmt.Errorf("volume: %d bytes at block %d outside a %d-block device", len(p), lba, d.blocks)
	}
	return nil
}

// ReadBlocks reads whole blocks.
func (d *FileDevice) ReadBlocks(ctx context.Context, lba uint64, p []byte) error {
	if err := d.check(lba, p); err != nil {
		return err
	}
	_, err := d.f.ReadAt(p, int64(lba)*int64(d.bs))
	return err
}

// WriteBlocks writes whole blocks.
func (d *FileDevice) WriteBlocks(ctx context.Context, lba uint64, p []byte) error {
	if err := d.check(lba, p); err != nil {
		return err
	}
	_, err := d.f.WriteAt(p, int64(lba)*int64(d.bs))
	return err
}

// Alloc returns page-aligned memory outside the Go heap.
func (d *FileDevice) Alloc(n int) ([]byte, func() error, error) {
	r, err := hostmem.Alloc(n, hostmem.AllocOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("volume: %w", err)
	}
	return r.Bytes(), r.Free, nil
}

// NVMe is a BlockDevice over one namespace of a userspace-driven
// controller. Memory from its Alloc is DMA-mapped and moves without a
// copy; any other memory goes through a small pool of bounce buffers.
type NVMe struct {
	c    *nvme.Controller
	dma  nvme.DMA
	nsid uint32
	ns   nvme.NamespaceInfo

	mu      sync.Mutex
	bufs    []nvme.Buffer // sorted by address of Bytes[0]
	bounce  chan nvme.Buffer
	retries atomic.Int64
}

// bounceSize is the size of one bounce buffer; at most four exist.
const bounceSize = 1 << 20

// NewNVMe wraps namespace nsid of c; dma must be the allocator c uses.
func NewNVMe(c *nvme.Controller, dma nvme.DMA, nsid uint32) (*NVMe, error) {
	ns, err := c.Namespace(nsid)
	if err != nil {
		return nil, err
	}
	if ns.BlockSize > Unit {
		return nil, fmt.Errorf("volume: namespace %d has %d-byte blocks (at most %d)", nsid, ns.BlockSize, Unit)
	}
	d := &NVMe{c: c, dma: dma, nsid: nsid, ns: ns, bounce: make(chan nvme.Buffer, 4)}
	return d, nil
}

// BlockSize is the namespace's LBA size.
func (d *NVMe) BlockSize() int { return d.ns.BlockSize }

// Blocks is the namespace size in LBAs.
func (d *NVMe) Blocks() uint64 { return d.ns.Size }

// Flush commits the controller's volatile write cache.
func (d *NVMe) Flush(ctx context.Context) error { return d.c.Queue().Flush(ctx, d.nsid) }

// Alloc returns DMA-mapped memory registered for zero-copy I/O.
func (d *NVMe) Alloc(n int) ([]byte, func() error, error) {
	buf, err := d.dma.Alloc(n)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	i := sort.Search(len(d.bufs), func(i int) bool { return hostmem.Addr(d.bufs[i].Bytes) > hostmem.Addr(buf.Bytes) })
	d.bufs = append(d.bufs, nvme.Buffer{})
	copy(d.bufs[i+1:], d.bufs[i:])
	d.bufs[i] = buf
	d.mu.Unlock()
	var once sync.Once
	return buf.Bytes, func() error {
		var err error
		once.Do(func() {
			d.mu.Lock()
			for j, b := range d.bufs {
				if b.IOVA == buf.IOVA {
					d.bufs = append(d.bufs[:j], d.bufs[j+1:]...)
					break
				}
			}
			d.mu.Unlock()
			err = d.dma.Free(buf)
		})
		return err
	}, nil
}

// lookup finds the DMA buffer region holding p.
func (d *NVMe) lookup(p []byte) (nvme.Buffer, bool) {
	if len(p) == 0 {
		return nvme.Buffer{}, false
	}
	a := hostmem.Addr(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.bufs), func(i int) bool { return hostmem.Addr(d.bufs[i].Bytes) > a }) - 1
	if i < 0 {
		return nvme.Buffer{}, false
	}
	b := d.bufs[i]
	off := a - hostmem.Addr(b.Bytes)
	if off+uintptr(len(p)) > uintptr(len(b.Bytes)) {
		return nvme.Buffer{}, false
	}
	return b.Slice(int(off), len(p)), true
}

func (d *NVMe) getBounce() (nvme.Buffer, error) {
	select {
	case b := <-d.bounce:
		return b, nil
	default:
		return d.dma.Alloc(bounceSize)
	}
}

func (d *NVMe) putBounce(b nvme.Buffer) {
	select {
	case d.bounce <- b:
	default:
		d.dma.Free(b)
	}
}

// Close frees the bounce buffers.
func (d *NVMe) Close() error {
	for {
		select {
		case b := <-d.bounce:
			d.dma.Free(b)
		default:
			return nil
		}
	}
}

// spread moves b (DMA-mapped) at lba as MDTS-sized commands dealt out
// round-robin over every I/O queue pair, all submitted before any is
// waited for: a layer extent of several megabytes then keeps each queue
// (and the controller's parallelism behind them) busy, where one queue
// would serialise on its own depth. It returns once every command it
// submitted has completed, so b may be reused at once, with the first
// error.
func (d *NVMe) spread(ctx context.Context, write bool, lba uint64, b nvme.Buffer) error {
	bs := d.ns.BlockSize
	chunk := max(d.c.MaxTransfer()/bs*bs, bs)
	submit := func(off, n int) (*nvme.Ticket, error) {
		q := d.c.Queue()
		if write {
			return q.Write(ctx, d.nsid, lba+uint64(off/bs), b.Slice(off, n))
		}
		return q.Read(ctx, d.nsid, lba+uint64(off/bs), b.Slice(off, n))
	}
	type part struct {
		off, n int
		t      *nvme.Ticket
	}
	var parts []part
	var err error
	for off := 0; off < b.Len(); off += chunk {
		n := min(chunk, b.Len()-off)
		t, serr := submit(off, n)
		if serr != nil {
			err = serr
			break
		}
		parts = append(parts, part{off, n, t})
	}
	for _, p := range parts {
		perr := p.t.Wait()
		for try := 0; try < maxRetries && perr != nil && err == nil && retryable(perr) && ctx.Err() == nil; try++ {
			d.retries.Add(1)
			var t *nvme.Ticket
			if t, perr = submit(p.off, p.n); perr == nil {
				perr = t.Wait()
			}
		}
		if perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// maxRetries is how often a command that failed with a transient status is
// submitted again before its error is returned.
const maxRetries = 2

// retryable reports whether err is a command failure worth one more try:
// a status without Do Not Retry that says the transfer, not the media,
// went wrong (a data transfer or internal error, a command the controller
// aborted or dropped with its queue), or a command that timed out. Media
// errors are not retried: the drive has already retried internally, and
// the request should fail naming the bad extent.
func retryable(err error) bool {
	if errors.Is(err, nvme.ErrTimeout) {
		return true
	}
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.Status.DNR() || se.Status.SCT() != nvme.SCTGeneric {
		return false
	}
	switch se.Status {
	case nvme.StatusDataTransfer, nvme.StatusInternal, nvme.StatusAbortRequested, nvme.StatusSQDeleted:
		return true
	}
	return false
}

// Retries is how many commands were submitted again after a transient
// failure (see retryable).
func (d *NVMe) Retries() int64 { return d.retries.Load() }

// ReadBlocks reads whole blocks, without a copy into memory from Alloc.
func (d *NVMe) ReadBlocks(ctx context.Context, lba uint64, p []byte) error {
	return d.io(ctx, false, lba, p)
}

// WriteBlocks writes whole blocks, without a copy from memory from Alloc.
func (d *NVMe) WriteBlocks(ctx context.Context, lba uint64, p []byte) error {
	return d.io(ctx, true, lba, p)
}

func (d *NVMe) io(ctx context.Context, write bool, lba uint64, p []byte) error {
	q := d.c.Queue()
	run := func(lba uint64, b nvme.Buffer) error {
		for try := 0; ; try++ {
			var t *nvme.Ticket
			var err error
			if write {
				t, err = q.Write(ctx, d.nsid, lba, b)
			} else {
				t, err = q.Read(ctx, d.nsid, lba, b)
			}
			if err == nil {
				err = t.Wait()
			}
			if err == nil || try == maxRetries || !retryable(err) || ctx.Err() != nil {
				return err
			}
			d.retries.Add(1)
		}
	}
	if b, ok := d.lookup(p); ok {
		return d.spread(ctx, write, lba, b)
	}
	bb, err := d.getBounce()
	if err != nil {
		return err
	}
	defer d.putBounce(bb)
	bs := d.ns.BlockSize
	for off := 0; off < len(p); off += bounceSize {
		n := min(bounceSize, len(p)-off)
		chunk := bb.Slice(0, n)
		if write {
			copy(chunk.Bytes, p[off:off+n])
		}
		if err := run(lba+uint64(off/bs), chunk); err != nil {
			return err
		}
		if !write {
			copy(p[off:off+n], chunk.Bytes)
		}
	}
	return nil
}
