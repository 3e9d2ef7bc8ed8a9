package nvmetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/strata-llm/strata/nvme"
)

const page = 4096

// Namespace describes one namespace of the controller.
type Namespace struct {
	BlockSize int    // 512 or 4096
	Blocks    uint64 // size in blocks
}

// Options configure the controller. Zero values select the defaults noted.
type Options struct {
	MaxQueueEntries int         // CAP.MQES+1 (default 1024)
	TimeoutUnits    uint8       // CAP.TO in 500 ms units (default 1)
	DoorbellStride  uint8       // CAP.DSTRD (default 0)
	MDTS            uint8       // Identify MDTS (default 5: 128 KiB)
	MaxIOQueues     int         // queue pairs granted by Set Features (default 8)
	AbortLimit      int         // Identify ACL+1 (default 4)
	Namespaces      []Namespace // default one 512-byte namespace of 16 MiB
	Model           string      // default "nvmetest Ctrl"
	Seed            uint64      // shuffles out-of-order completions
	// Reorder completes each batch of fetched commands in a shuffled order.
	Reorder bool
	// DropUnmapped mimics QEMU behind an IOMMU: a DMA to an IOVA that was
	// never mapped completes with success and moves no data (the fault is
	// still recorded). By default such commands fail with a data transfer
	// error.
	DropUnmapped bool
}

type sq struct {
	id, cqid   uint16
	base       uint64
	size       uint32
	head, tail uint32
	seq        uint64
}

type cq struct {
	id         uint16
	base       uint64
	size       uint32
	head, tail uint32
	phase      bool
	ien        bool
	vector     int
	backlog    []nvme.Completion
}

type held struct {
	sqid, cid uint16
	gen       uint64
}

type injection struct {
	nsid       uint32
	lba, count uint64
	op         nvme.Opcode
	status     nvme.Status
	times      int // commands it fails before it is spent; 0: every one
}

type region struct {
	iova uint64
	b    []byte
	mem  *hostmem.Region
}

// Controller is the software controller. Create it with New and stop it
// with Close.
type Controller struct {
	opts Options

	mu       sync.Mutex
	cap      uint64
	cc, csts uint32
	aqa      uint32
	asq, acq uint64
	sqs      map[uint16]*sq
	cqs      map[uint16]*cq
	gen      uint64 // bumped on every disable: stale delayed completions are dropped
	paused   bool
	fatal    bool
	gone     time.Time // registers read all ones until then (ResetBehind)
	ns       []nsData
	inject   []injection
	hangs    []injection
	held     map[held]bool
	delay    time.Duration
	ignoreAb bool
	rng      *rand.Rand
	maxSeq   map[uint16]uint64
	counts   map[string]int
	faults   []uint64
	ooo      int

	dmaMu   sync.Mutex
	regions []region // sorted by iova
	next    uint64

	irqMu   sync.Mutex
	irqs    map[int]chan struct{}
	irqSeen atomic.Int64

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

type nsData struct {
	bs   int
	data []byte
}

// New starts a controller.
func New(o Options) *Controller {
	if o.MaxQueueEntries == 0 {
		o.MaxQueueEntries = 1024
	}
	if o.TimeoutUnits == 0 {
		o.TimeoutUnits = 1
	}
	if o.MDTS == 0 {
		o.MDTS = 5
	}
	if o.MaxIOQueues == 0 {
		o.MaxIOQueues = 8
	}
	if o.AbortLimit == 0 {
		o.AbortLimit = 4
	}
	if len(o.Namespaces) == 0 {
		o.Namespaces = []Namespace{{BlockSize: 512, Blocks: 32768}}
	}
	if o.Model == "" {
		o.Model = "nvmetest Ctrl"
	}
	c := &Controller{opts: o, sqs: map[uint16]*sq{}, cqs: map[uint16]*cq{}, held: map[held]bool{},
		rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)), maxSeq: map[uint16]uint64{}, counts: map[string]int{},
		next: 0x100000, irqs: map[int]chan struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.cap = uint64(o.MaxQueueEntries-1) | 1<<16 | uint64(o.TimeoutUnits)<<24 |
		uint64(o.DoorbellStride)<<32 | 1<<37 // CSS: NVM; MPSMIN = MPSMAX = 0 (4 KiB)
	for _, n := range o.Namespaces {
		c.ns = append(c.ns, nsData{bs: n.BlockSize, data: make([]byte, uint64(n.BlockSize)*n.Blocks)})
	}
	c.wg.Add(1)
	go c.loop()
	return c
}

// Close stops the controller's goroutine.
func (c *Controller) Close() {
	close(c.done)
	c.wg.Wait()
}

// Data returns namespace nsid's backing bytes, for checks and fixtures.
// Callers must not touch it while commands on that namespace are in flight.
func (c *Controller) Data(nsid uint32) []byte { return c.ns[nsid-1].data }

// Pause stops fetching I/O commands (admin commands still run): submissions accumulate until Resume, which
// lets a test fill a queue or batch many commands into one shuffled round.
func (c *Controller) Pause() { c.mu.Lock(); c.paused = true; c.mu.Unlock() }

// Resume undoes Pause.
func (c *Controller) Resume() {
	c.mu.Lock()
	c.paused = false
	c.mu.Unlock()
	c.kick()
}

// InjectError makes commands of kind op (OpRead or OpWrite) that touch
// [lba, lba+count) of nsid complete with status st, moving no data.
func (c *Controller) InjectError(nsid uint32, op nvme.Opcode, lba, count uint64, st nvme.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject = append(c.inject, injection{nsid: nsid, lba: lba, count: count, op: op, status: st})
}

// InjectErrorTimes is InjectError for the next n matching commands only:
// a transient fault that a retry gets past.
func (c *Controller) InjectErrorTimes(nsid uint32, op nvme.Opcode, lba, count uint64, st nvme.Status, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject = append(c.inject, injection{nsid: nsid, lba: lba, count: count, op: op, status: st, times: max(n, 1)})
}

// Hang makes I/O commands that touch [lba, lba+count) of nsid never
// complete, unless aborted or the controller is reset.
func (c *Controller) Hang(nsid uint32, lba, count uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hangs = append(c.hangs, injection{nsid: nsid, lba: lba, count: count})
}

// ClearFaults removes every injected error and hang.
func (c *Controller) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inject, c.hangs = nil, nil
}

// SetDelay delays every I/O completion by d (0: none).
func (c *Controller) SetDelay(d time.Duration) { c.mu.Lock(); c.delay = d; c.mu.Unlock() }

// IgnoreAborts makes Abort commands report "not aborted" and leave the
// command alone, so that only a controller reset can recover.
func (c *Controller) IgnoreAborts(v bool) { c.mu.Lock(); c.ignoreAb = v; c.mu.Unlock() }

// SetFatal raises CSTS.CFS and stops processing until the host resets the
// controller (CC.EN 1 → 0).
func (c *Controller) SetFatal() { c.mu.Lock(); c.fatal = true; c.csts |= 2; c.mu.Unlock() }

// ResetBehind resets the controller behind the driver's back, as a
// function-level reset from elsewhere (the kernel's error recovery, a
// firmware reset) does: its queues and the commands in them are gone, it
// is disabled (CC.EN and CSTS.RDY 0), and for unreachable its registers
// read all ones and ignore stores, as a function in reset does.
func (c *Controller) ResetBehind(unreachable time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts["reset behind"]++
	c.writeCC(c.cc &^ 1)
	c.cc = 0
	c.gone = time.Now().Add(unreachable)
}

// Count returns how many commands of a kind were executed: "read",
// "write", "abort", "identify", "create sq", "enable", "disable", ...;
// per I/O queue, "read q1", "write q2".
func (c *Controller) Count(kind string) int { c.mu.Lock(); defer c.mu.Unlock(); return c.counts[kind] }

// OutOfOrder is the number of completions posted before that of a command
// fetched earlier from the same queue.
func (c *Controller) OutOfOrder() int { c.mu.Lock(); defer c.mu.Unlock(); return c.ooo }

// InterruptsSeen is the number of Wait calls that returned because their
// vector fired.
func (c *Controller) InterruptsSeen() int64 { return c.irqSeen.Load() }

// Faults lists IOVAs of DMAs that hit no allocation.
func (c *Controller) Faults() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.faults...)
}

// ---- nvme.DMA ----

// Alloc returns zeroed, page-aligned memory at a fresh page-aligned IOVA.
// IOVAs are never reused, so a stale address always faults. The memory is
// mapped outside the Go heap, as a VFIO DMA buffer is, so that callers may
// register it with CUDA (the GPU's tier-C staging).
func (c *Controller) Alloc(size int) (nvme.Buffer, error) {
	if size <= 0 {
		return nvme.Buffer{}, fmt.Errorf("nvmetest: alloc of %d bytes", size)
	}
	mem, err := hostmem.Alloc(size, hostmem.AllocOptions{})
	if err != nil {
		return nvme.Buffer{}, fmt.Errorf("nvmetest: alloc of %d bytes: %w", size, err)
	}
	b := mem.Bytes()[:size:size]
	c.dmaMu.Lock()
	defer c.dmaMu.Unlock()
	iova := c.next
	c.next += uint64(size+page-1)&^(page-1) + page // a guard page between buffers
	c.regions = append(c.regions, region{iova: iova, b: b, mem: mem})
	return nvme.Buffer{Bytes: b, IOVA: iova}, nil
}

// Mapped is the number of DMA allocations not yet freed: a test that
// opens and closes the driver's users over the controller checks it to see
// that nothing leaked.
func (c *Controller) Mapped() int {
	c.dmaMu.Lock()
	defer c.dmaMu.Unlock()
	return len(c.regions)
}

// Free unmaps a buffer.
func (c *Controller) Free(b nvme.Buffer) error {
	c.dmaMu.Lock()
	defer c.dmaMu.Unlock()
	for i, r := range c.regions {
		if r.iova == b.IOVA {
			c.regions = append(c.regions[:i], c.regions[i+1:]...)
			if r.mem == nil {
				return nil // mapped with MapDMA: the caller's memory
			}
			return r.mem.Free()
		}
	}
	return fmt.Errorf("nvmetest: free of unmapped IOVA %#x", b.IOVA)
}

// lookup returns the bytes at [iova, iova+n) or nil when unmapped.
func (c *Controller) lookup(iova uint64, n int) []byte {
	c.dmaMu.Lock()
	defer c.dmaMu.Unlock()
	i := sort.Search(len(c.regions), func(i int) bool { return c.regions[i].iova > iova }) - 1
	if i < 0 {
		return nil
	}
	r := c.regions[i]
	off := iova - r.iova
	if off+uint64(n) > uint64(len(r.b)) {
		return nil
	}
	return r.b[off : off+uint64(n)]
}

// ---- nvme.Interrupts ----

func (c *Controller) irq(v int) chan struct{} {
	c.irqMu.Lock()
	defer c.irqMu.Unlock()
	ch, ok := c.irqs[v]
	if !ok {
		ch = make(chan struct{}, 1)
		c.irqs[v] = ch
	}
	return ch
}

// Wait blocks until vector v fires (eventfd semantics) or ctx ends.
func (c *Controller) Wait(ctx context.Context, v int) error {
	select {
	case <-c.irq(v):
		c.irqSeen.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signal fires vector v.
func (c *Controller) signal(v int) {
	select {
	case c.irq(v) <- struct{}{}:
	default:
	}
}

// ---- nvme.MMIO ----

// Read32 reads a register.
func (c *Controller) Read32(off uint32) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Now().Before(c.gone) {
		return 0xffffffff
	}
	switch off {
	case 0x00:
		return uint32(c.cap)
	case 0x04:
		return uint32(c.cap >> 32)
	case 0x08:
		return 0x00010400
	case 0x14:
		return c.cc
	case 0x1c:
		return c.csts
	case 0x24:
		return c.aqa
	case 0x28:
		return uint32(c.asq)
	case 0x2c:
		return uint32(c.asq >> 32)
	case 0x30:
		return uint32(c.acq)
	case 0x34:
		return uint32(c.acq >> 32)
	}
	return 0
}

// Write32 writes a register or a doorbell.
func (c *Controller) Write32(off uint32, v uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Now().Before(c.gone) {
		return
	}
	switch {
	case off == 0x14:
		c.writeCC(v)
	case off == 0x24:
		c.aqa = v
	case off == 0x28:
		c.asq = c.asq&^0xffffffff | uint64(v)
	case off == 0x2c:
		c.asq = c.asq&0xffffffff | uint64(v)<<32
	case off == 0x30:
		c.acq = c.acq&^0xffffffff | uint64(v)
	case off == 0x34:
		c.acq = c.acq&0xffffffff | uint64(v)<<32
	case off >= 0x1000:
		stride := uint32(4) << c.opts.DoorbellStride
		idx := (off - 0x1000) / stride
		if (off-0x1000)%stride != 0 {
			return
		}
		qid := uint16(idx / 2)
		if idx%2 == 0 {
			if q, ok := c.sqs[qid]; ok && v < q.size {
				q.tail = v
			}
		} else if q, ok := c.cqs[qid]; ok && v < q.size {
			q.head = v
			c.flushBacklog(q)
		}
		c.kick()
	}
}

func (c *Controller) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Controller) writeCC(v uint32) {
	old := c.cc
	c.cc = v
	switch {
	case old&1 == 0 && v&1 == 1:
		c.counts["enable"]++
		c.sqs = map[uint16]*sq{0: {id: 0, cqid: 0, base: c.asq &^ (page - 1), size: c.aqa&0xfff + 1}}
		c.cqs = map[uint16]*cq{0: {id: 0, base: c.acq &^ (page - 1), size: c.aqa>>16&0xfff + 1, phase: true, ien: true, vector: 0}}
		if !c.fatal {
			c.csts |= 1
		}
	case old&1 == 1 && v&1 == 0:
		c.counts["disable"]++
		c.gen++
		c.sqs, c.cqs = map[uint16]*sq{}, map[uint16]*cq{}
		c.held = map[held]bool{}
		c.maxSeq = map[uint16]uint64{}
		c.fatal = false
		c.csts = 0
	}
	if v>>14&3 != 0 && old>>14&3 == 0 {
		c.counts["shutdown"]++
		c.csts = c.csts&^0xc | 2<<2
	}
}

// ---- processing ----

func (c *Controller) loop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		c.process()
		c.mu.Unlock()
	}
}

type fetched struct {
	q   *sq
	cmd nvme.Command
	seq uint64
}

// process fetches every available command and executes the batch; the
// caller holds mu.
func (c *Controller) process() {
	for {
		if c.fatal || c.csts&1 == 0 {
			return
		}
		var batch []fetched
		ids := make([]int, 0, len(c.sqs))
		for id := range c.sqs {
			ids = append(ids, int(id))
		}
		sort.Ints(ids)
		for _, id := range ids {
			q := c.sqs[uint16(id)]
			for q.head != q.tail && (id == 0 || !c.paused) {
				b := c.lookup(q.base+uint64(q.head)*64, 64)
				q.head = (q.head + 1) % q.size
				if b == nil {
					c.faults = append(c.faults, q.base)
					continue
				}
				cmd, _ := nvme.UnmarshalCommand(b)
				q.seq++
				batch = append(batch, fetched{q: q, cmd: cmd, seq: q.seq})
			}
		}
		if len(batch) == 0 {
			return
		}
		if c.opts.Reorder {
			c.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		}
		for _, f := range batch {
			c.execute(f)
		}
	}
}

func (c *Controller) execute(f fetched) {
	var st nvme.Status
	var dw0 uint32
	if f.q.id == 0 {
		st, dw0 = c.admin(f.cmd)
	} else {
		var hang bool
		st, hang = c.io(f.q, f.cmd)
		if hang {
			c.held[held{sqid: f.q.id, cid: f.cmd.CID, gen: c.gen}] = true
			return
		}
		if c.delay > 0 {
			gen := c.gen
			time.AfterFunc(c.delay, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.gen == gen {
					c.complete(f, st, dw0)
				}
			})
			return
		}
	}
	c.complete(f, st, dw0)
}

func (c *Controller) complete(f fetched, st nvme.Status, dw0 uint32) {
	if f.seq < c.maxSeq[f.q.id] {
		c.ooo++
	}
	c.maxSeq[f.q.id] = max(c.maxSeq[f.q.id], f.seq)
	c.post(f.q, nvme.Completion{Result: dw0, SQHead: uint16(f.q.head), SQID: f.q.id, CID: f.cmd.CID, Status: st})
}

// post queues a completion on sq's completion queue.
func (c *Controller) post(s *sq, e nvme.Completion) {
	q, ok := c.cqs[s.cqid]
	if !ok {
		return
	}
	q.backlog = append(q.backlog, e)
	c.flushBacklog(q)
}

// flushBacklog writes queued completions while the completion queue has
// room (one slot always stays empty).
func (c *Controller) flushBacklog(q *cq) {
	wrote := false
	for len(q.backlog) > 0 && (q.tail+1)%q.size != q.head {
		e := q.backlog[0]
		q.backlog = q.backlog[1:]
		b := c.lookup(q.base+uint64(q.tail)*16, 16)
		if b == nil {
			c.faults = append(c.faults, q.base)
			continue
		}
		e.Phase = q.phase
		dw3 := e.Marshal(b)
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[12])), dw3)
		q.tail++
		if q.tail == q.size {
			q.tail, q.phase = 0, !q.phase
		}
		wrote = true
	}
	if wrote && q.ien {
		c.signal(q.vector)
	}
}

// transfer copies between the namespace bytes and the host memory that
// PRP1/PRP2 describe; toHost selects the direction.
func (c *Controller) transfer(cmd nvme.Command, n int, dev []byte, toHost bool) nvme.Status {
	segs, st := c.prpSegments(cmd.PRP1, cmd.PRP2, n)
	if !st.OK() {
		return st
	}
	off := 0
	for _, s := range segs {
		host := c.lookup(s.iova, s.n)
		if host == nil {
			c.faults = append(c.faults, s.iova)
			if c.opts.DropUnmapped {
				off += s.n
				continue
			}
			return nvme.StatusDataTransfer
		}
		if toHost {
			copy(host, dev[off:off+s.n])
		} else {
			copy(dev[off:off+s.n], host)
		}
		off += s.n
	}
	return nvme.StatusSuccess
}

type seg struct {
	iova uint64
	n    int
}

// prpSegments walks PRP1, PRP2 and PRP lists for an n-byte transfer,
// enforcing the alignment rules of NVMe 1.4 section 4.3.
func (c *Controller) prpSegments(prp1, prp2 uint64, n int) ([]seg, nvme.Status) {
	if prp1%4 != 0 {
		return nil, nvme.StatusPRPOffsetInvalid
	}
	first := min(n, int(page-prp1%page))
	segs := []seg{{prp1, first}}
	rem := n - first
	if rem == 0 {
		return segs, nvme.StatusSuccess
	}
	if rem <= page {
		if prp2%page != 0 {
			return nil, nvme.StatusPRPOffsetInvalid
		}
		return append(segs, seg{prp2, rem}), nvme.StatusSuccess
	}
	if prp2%8 != 0 {
		return nil, nvme.StatusPRPOffsetInvalid
	}
	list := prp2
	for rem > 0 {
		b := c.lookup(list, 8)
		if b == nil {
			c.faults = append(c.faults, list)
			return nil, nvme.StatusDataTransfer
		}
		e := binary.LittleEndian.Uint64(b)
		lastInPage := (list+8)%page == 0
		if lastInPage && rem > page {
			if e%8 != 0 {
				return nil, nvme.StatusPRPOffsetInvalid
			}
			list = e
			continue
		}
		if e%page != 0 {
			return nil, nvme.StatusPRPOffsetInvalid
		}
		m := min(rem, page)
		segs = append(segs, seg{e, m})
		rem -= m
		list += 8
	}
	return segs, nvme.StatusSuccess
}

// MapDMA makes caller-owned memory (a p2p target, say) reachable by the
// controller at a fresh IOVA, as a VFIO map would.
func (c *Controller) MapDMA(b []byte) (uint64, error) {
	if len(b) == 0 || len(b)%page != 0 {
		return 0, fmt.Errorf("nvmetest: map of %d bytes is not whole pages", len(b))
	}
	c.dmaMu.Lock()
	defer c.dmaMu.Unlock()
	iova := c.next
	c.next += uint64(len(b)) + page
	c.regions = append(c.regions, region{iova: iova, b: b})
	return iova, nil
}

// UnmapDMA removes a mapping made by MapDMA.
func (c *Controller) UnmapDMA(iova uint64) error {
	return c.Free(nvme.Buffer{IOVA: iova})
}
