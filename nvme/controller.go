package nvme

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config says how to reach a controller and how to drive it.
type Config struct {
	MMIO MMIO // BAR0
	DMA  DMA
	// Interrupts selects MSI-X completion: the admin queue uses vector 0
	// and I/O queue pair i (1-based) vector i, so the platform must enable
	// IOQueues+1 vectors. Nil selects polled completion.
	Interrupts Interrupts
	Logger     hclog.Logger

	IOQueues   int // I/O queue pairs wanted (default 1); the controller may grant fewer
	QueueDepth int // entries per I/O queue (default 64), capped by CAP.MQES
	AdminDepth int // entries in the admin queue (default 32)
	// Timeout bounds each command; 0 uses CAP.TO (5 s when CAP.TO is 0).
	// A command past it is aborted; if the abort does not take effect within
	// another Timeout the controller is reset.
	Timeout time.Duration
	// MaxTransfer caps the bytes one command moves (default and maximum
	// 2 MiB, further capped by MDTS); larger requests are split.
	MaxTransfer int
	// PollInterval is how long the polling goroutine sleeps between empty
	// polls once spinning gave nothing (default 20µs).
	PollInterval time.Duration
}

// Controller is an enabled NVMe controller with its admin queue and I/O
// queue pairs. Its methods are safe for concurrent use.
type Controller struct {
	log        hclog.Logger
	r          regs
	dma        DMA
	irq        Interrupts
	cap        Capabilities
	ver        Version
	info       ControllerInfo
	timeout    time.Duration
	checkEvery time.Duration
	pollSleep  time.Duration
	maxXfer    int
	wantIO     int

	// mu is held shared by every queue operation and exclusively by reset
	// and shutdown, which rebuild the queues underneath.
	mu         sync.RWMutex
	admin      *QueuePair
	io         []*QueuePair
	namespaces map[uint32]NamespaceInfo
	dead       error // set under mu when the controller is unusable
	closing    atomic.Bool

	resetting atomic.Bool
	stop      chan struct{}
	stopCtx   context.Context
	stopFn    context.CancelFunc
	wg        sync.WaitGroup
	rr        atomic.Uint32
	stats     counters
}

type counters struct {
	reads, writes, readBytes, writeBytes atomic.Uint64
	errors, timeouts, aborts, resets     atomic.Uint64
	resubmitted, spurious                atomic.Uint64
}

// Stats are the controller's cumulative counters, for the daemon's status.
type Stats struct {
	Reads, Writes, ReadBytes, WriteBytes uint64
	Errors, Timeouts, Aborts, Resets     uint64
	Resubmitted, Spurious                uint64
	Inflight                             []int // per I/O queue pair
}

// Stats returns the counters.
func (c *Controller) Stats() Stats {
	s := Stats{
		Reads: c.stats.reads.Load(), Writes: c.stats.writes.Load(),
		ReadBytes: c.stats.readBytes.Load(), WriteBytes: c.stats.writeBytes.Load(),
		Errors: c.stats.errors.Load(), Timeouts: c.stats.timeouts.Load(),
		Aborts: c.stats.aborts.Load(), Resets: c.stats.resets.Load(),
		Resubmitted: c.stats.resubmitted.Load(), Spurious: c.stats.spurious.Load(),
	}
	for _, q := range c.io {
		s.Inflight = append(s.Inflight, q.Inflight())
	}
	return s
}

// Open brings the controller up: it resets it, sets up the admin queue,
// enables it, identifies it and its namespaces, negotiates the number of
// queues and creates the I/O queue pairs.
func Open(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.MMIO == nil || cfg.DMA == nil {
		return nil, errors.New("nvme: config needs MMIO and DMA")
	}
	c := &Controller{log: cfg.Logger, r: regs{cfg.MMIO}, dma: cfg.DMA, irq: cfg.Interrupts,
		namespaces: map[uint32]NamespaceInfo{}, stop: make(chan struct{})}
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	c.stopCtx, c.stopFn = context.WithCancel(context.Background())
	c.cap = ParseCapabilities(c.r.read64(regCAP))
	c.ver = parseVersion(c.r.read32(regVS))
	if !c.cap.NVMCommandSet {
		return nil, errors.New("nvme: controller does not support the NVM command set")
	}
	if c.cap.MinPageSize > pageSize {
		return nil, fmt.Errorf("nvme: controller's minimum page size is %d, driver uses %d", c.cap.MinPageSize, pageSize)
	}
	c.timeout = cfg.Timeout
	if c.timeout <= 0 {
		c.timeout = c.cap.Timeout
		if c.timeout == 0 {
			c.timeout = 5 * time.Second
		}
	}
	c.checkEvery = min(max(c.timeout/10, time.Millisecond), 100*time.Millisecond)
	c.pollSleep = cfg.PollInterval
	if c.pollSleep <= 0 {
		c.pollSleep = 20 * time.Microsecond
	}
	c.wantIO = max(cfg.IOQueues, 1)
	depth := clampDepth(cfg.QueueDepth, 64, c.cap.MaxQueueEntries)
	adminDepth := clampDepth(cfg.AdminDepth, 32, c.cap.MaxQueueEntries)

	var err error
	if c.admin, err = newQueuePair(c, 0, adminDepth, c.vector(0)); err != nil {
		return nil, err
	}
	if err := c.enable(); err != nil {
		c.admin.freeMemory()
		return nil, err
	}
	c.wg.Add(1)
	go c.admin.run()
	if err := c.setup(ctx, depth, cfg.MaxTransfer); err != nil {
		c.Close(ctx)
		return nil, err
	}
	c.log.Debug("controller ready", "model", c.info.Model, "version", c.ver.String(),
		"io_queues", len(c.io), "depth", depth, "max_transfer", c.maxXfer, "timeout", c.timeout,
		"interrupts", c.irq != nil)
	return c, nil
}

func clampDepth(want, def, mqes int) int {
	if want <= 0 {
		want = def
	}
	return max(2, min(want, mqes, maxQueueDepth))
}

func (c *Controller) vector(qid int) int {
	if c.irq == nil {
		return -1
	}
	return qid
}

// setup identifies the controller and namespaces and creates the I/O queues.
func (c *Controller) setup(ctx context.Context, depth, maxXfer int) error {
	buf, err := c.dma.Alloc(IdentifySize)
	if err != nil {
		return fmt.Errorf("nvme: allocating identify buffer: %w", err)
	}
	defer c.dma.Free(buf)
	if _, err := c.Admin(ctx, Command{Opcode: AdminIdentify, CDW10: cnsController}, buf); err != nil {
		return fmt.Errorf("nvme: identify controller: %w", err)
	}
	if c.info, err = ParseControllerInfo(buf.Bytes); err != nil {
		return err
	}
	c.maxXfer = 2 << 20
	if maxXfer > 0 {
		c.maxXfer = min(c.maxXfer, maxXfer)
	}
	if m := c.info.MaxTransfer(c.cap.MinPageSize); m > 0 {
		c.maxXfer = min(c.maxXfer, m)
	}
	if c.maxXfer < pageSize {
		return fmt.Errorf("nvme: max transfer %d bytes is below a page", c.maxXfer)
	}
	c.maxXfer &^= pageSize - 1

	clear(buf.Bytes)
	if _, err := c.Admin(ctx, Command{Opcode: AdminIdentify, CDW10: cnsActiveNSIDList}, buf); err != nil {
		return fmt.Errorf("nvme: identify active namespaces: %w", err)
	}
	for _, id := range parseNSIDList(buf.Bytes) {
		clear(buf.Bytes)
		if _, err := c.Admin(ctx, Command{Opcode: AdminIdentify, NSID: id, CDW10: cnsNamespace}, buf); err != nil {
			return fmt.Errorf("nvme: identify namespace %d: %w", id, err)
		}
		ni, err := ParseNamespaceInfo(id, buf.Bytes)
		if err != nil {
			c.log.Warn("skipping namespace", "nsid", id, "error", err)
			continue
		}
		c.namespaces[id] = ni
	}

	granted, err := c.setQueueCount(ctx, c.wantIO)
	if err != nil {
		return err
	}
	n := min(c.wantIO, granted)
	for i := 1; i <= n; i++ {
		q, err := newQueuePair(c, uint16(i), depth, c.vector(i))
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.io = append(c.io, q)
		c.mu.Unlock()
		if err := c.createQueue(ctx, q, c.Admin); err != nil {
			return err
		}
		c.wg.Add(1)
		go q.run()
	}
	return nil
}

// adminFunc issues one admin command; bring-up passes Admin, reset passes
// the polled variant it can use while it holds the lock.
type adminFunc func(ctx context.Context, cmd Command, data Buffer) (uint32, error)

func (c *Controller) setQueueCount(ctx context.Context, n int) (int, error) {
	res, err := c.Admin(ctx, Command{Opcode: AdminSetFeatures, CDW10: featureNumQueues,
		CDW11: uint32(n-1)<<16 | uint32(n-1)}, Buffer{})
	if err != nil {
		return 0, fmt.Errorf("nvme: set features number of queues: %w", err)
	}
	return int(min(res&0xffff, res>>16)) + 1, nil
}

// createQueue creates q's completion queue, then its submission queue.
func (c *Controller) createQueue(ctx context.Context, q *QueuePair, admin adminFunc) error {
	cdw11 := uint32(1) // physically contiguous
	if q.vector >= 0 {
		cdw11 |= 1<<1 | uint32(q.vector)<<16
	}
	size := uint32(q.depth-1) << 16
	if _, err := admin(ctx, Command{Opcode: AdminCreateCQ, PRP1: q.cq.IOVA, CDW10: size | uint32(q.id), CDW11: cdw11}, Buffer{}); err != nil {
		return fmt.Errorf("nvme: create completion queue %d: %w", q.id, err)
	}
	if _, err := admin(ctx, Command{Opcode: AdminCreateSQ, PRP1: q.sq.IOVA, CDW10: size | uint32(q.id), CDW11: uint32(q.id)<<16 | 1}, Buffer{}); err != nil {
		return fmt.Errorf("nvme: create submission queue %d: %w", q.id, err)
	}
	return nil
}

// enable resets the controller (CC.EN 1→0), programs the admin queue and
// enables it, waiting for CSTS.RDY as CAP.TO allows.
func (c *Controller) enable() error {
	if c.r.read32(regCC) == 0xffffffff {
		// In reset or gone: no store until its registers read back.
		if err := c.waitReady(false); err != nil {
			return err
		}
	}
	if cc := c.r.read32(regCC); cc&ccEN != 0 {
		c.r.write32(regCC, cc&^ccEN)
	}
	if err := c.waitReady(false); err != nil {
		return err
	}
	c.admin.resetRings()
	d := uint32(c.admin.depth - 1)
	c.r.write32(regAQA, d<<16|d)
	c.r.write64(regASQ, c.admin.sq.IOVA)
	c.r.write64(regACQ, c.admin.cq.IOVA)
	c.r.write32(regCC, ccIOCQES|ccIOSQES|0<<ccMPSShift|ccCSSNVM|ccAMSRR|ccEN)
	return c.waitReady(true)
}

// waitReady waits, up to CAP.TO, for CSTS.RDY to become ready. Registers
// that read all ones are waited out too: a function in reset (an FLR from
// elsewhere, the kernel's error recovery) reads so for a while; only one
// that still does at the deadline is gone.
func (c *Controller) waitReady(ready bool) error {
	limit := max(c.cap.Timeout, 500*time.Millisecond)
	deadline := time.Now().Add(limit)
	for {
		csts := c.r.read32(regCSTS)
		if csts == 0xffffffff {
			if time.Now().After(deadline) {
				return fmt.Errorf("nvme: controller registers read all ones for %v (device gone): %w", limit, ErrControllerFatal)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if ready && csts&cstsCFS != 0 {
			return fmt.Errorf("nvme: controller fatal status while enabling: %w", ErrControllerFatal)
		}
		if (csts&cstsRDY != 0) == ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nvme: CSTS.RDY did not become %v within %v: %w", ready, limit, ErrControllerFatal)
		}
		time.Sleep(time.Millisecond)
	}
}

// usable reports why new commands cannot be posted; the caller holds mu.
func (c *Controller) usable() error {
	if c.dead != nil {
		return c.dead
	}
	if c.closing.Load() {
		return ErrClosed
	}
	return nil
}

// Capabilities returns the decoded CAP register.
func (c *Controller) Capabilities() Capabilities { return c.cap }

// Version returns the NVMe version the controller implements.
func (c *Controller) Version() Version { return c.ver }

// Info returns the Identify Controller data.
func (c *Controller) Info() ControllerInfo { return c.info }

// MaxTransfer is the largest number of bytes one command moves.
func (c *Controller) MaxTransfer() int { return c.maxXfer }

// Timeout is the per-command timeout in force.
func (c *Controller) Timeout() time.Duration { return c.timeout }

// Namespaces returns the active namespaces by ID.
func (c *Controller) Namespaces() map[uint32]NamespaceInfo {
	out := make(map[uint32]NamespaceInfo, len(c.namespaces))
	for k, v := range c.namespaces {
		out[k] = v
	}
	return out
}

// Namespace returns namespace nsid's geometry.
func (c *Controller) Namespace(nsid uint32) (NamespaceInfo, error) {
	ni, ok := c.namespaces[nsid]
	if !ok {
		return ni, fmt.Errorf("nvme: namespace %d is not active: %w", nsid, ErrBadRequest)
	}
	return ni, nil
}

// Queues returns the I/O queue pairs.
func (c *Controller) Queues() []*QueuePair {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]*QueuePair(nil), c.io...)
}

// Admin runs one admin command and returns DW0 of its completion. data, if
// not empty, is the command's data buffer (at most one page for Identify).
func (c *Controller) Admin(ctx context.Context, cmd Command, data Buffer) (uint32, error) {
	r := &request{cmd: cmd, op: adminName(cmd.Opcode), data: data, t: newTicket(1)}
	if err := c.admin.submit(ctx, r); err != nil {
		return 0, fmt.Errorf("nvme: %s: %w", r.op, err)
	}
	err := r.t.Wait()
	return r.t.Result(), err
}

// adminLocked runs an admin command by polling the admin queue; the caller
// holds mu exclusively, so the completion goroutines are parked.
func (c *Controller) adminLocked(ctx context.Context, cmd Command, data Buffer) (uint32, error) {
	q := c.admin
	select {
	case <-q.tokens:
	default:
		return 0, fmt.Errorf("nvme: admin queue full during reset: %w", ErrControllerFatal)
	}
	r := &request{cmd: cmd, op: adminName(cmd.Opcode), data: data, t: newTicket(1)}
	q.post(nil, r)
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		q.reap()
		select {
		case <-r.t.done:
			return r.t.Result(), r.t.Err()
		default:
		}
		if time.Now().After(deadline) {
			q.mu.Lock()
			if q.slots[r.cid] == r {
				q.release(r)
				q.mu.Unlock()
				q.tokens <- struct{}{}
			} else {
				q.mu.Unlock()
			}
			return 0, fmt.Errorf("nvme: %s during reset: %w", r.op, ErrTimeout)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func adminName(op Opcode) string {
	switch op {
	case AdminIdentify:
		return "identify"
	case AdminCreateCQ:
		return "create cq"
	case AdminCreateSQ:
		return "create sq"
	case AdminDeleteCQ:
		return "delete cq"
	case AdminDeleteSQ:
		return "delete sq"
	case AdminSetFeatures:
		return "set features"
	case AdminGetFeatures:
		return "get features"
	case AdminAbort:
		return "abort"
	case AdminGetLogPage:
		return "get log page"
	}
	return fmt.Sprintf("admin opcode %#02x", uint8(op))
}

// sendAbort asks the controller to abort r (NVMe 1.4 section 5.1). The
// abort's own completion only says whether it was accepted; r completes on
// its own queue, with "command abort requested" if the abort worked. A
// controller may decline (the command was not fetched yet, or, like QEMU,
// it never aborts): the driver asks again a few times, and the abort
// deadline's controller reset settles the rest.
func (c *Controller) sendAbort(q *QueuePair, r *request, why string) {
	go func() {
		for attempt := 0; attempt < 3; attempt++ {
			q.mu.Lock()
			cid := r.cid
			live := q.slots[cid] == r
			q.mu.Unlock()
			if !live {
				return
			}
			c.stats.aborts.Add(1)
			c.log.Warn("aborting command", "why", why, "queue", q.id, "cid", cid, "op", r.op, "lba", r.lba, "attempt", attempt+1)
			ar := &request{cmd: Command{Opcode: AdminAbort, CDW10: uint32(cid)<<16 | uint32(q.id)}, op: "abort", t: newTicket(1)}
			if err := c.admin.submit(c.stopCtx, ar); err != nil {
				c.log.Warn("abort not sent", "error", err)
				return
			}
			if err := ar.t.Wait(); err != nil {
				c.log.Warn("abort failed", "queue", q.id, "cid", cid, "error", err)
				return
			}
			if ar.t.Result()&1 == 0 {
				return
			}
			c.log.Warn("controller did not abort the command", "queue", q.id, "cid", cid)
			select {
			case <-time.After(c.checkEvery):
			case <-c.stop:
				return
			}
		}
	}()
}

// cancel aborts r because its submitter's context ended.
func (c *Controller) cancel(q *QueuePair, r *request, ctx context.Context) {
	q.mu.Lock()
	if q.slots[r.cid] != r || r.abortSent {
		q.mu.Unlock()
		return
	}
	r.abortSent = true
	r.canceled = context.Cause(ctx)
	r.abortDeadline = time.Now().Add(c.timeout)
	q.mu.Unlock()
	c.sendAbort(q, r, "canceled")
}

// triggerReset starts a background reset unless one is running, or one
// has started since the caller saw the reason for it: seen is the reset
// count (stats.resets) the caller read, holding mu, when it saw it. Each
// queue pair's goroutine looks at the controller on its own, so two can
// see one reset's reason (a fatal status, a disable behind the driver);
// the second, arriving after the first's reset has finished, must not
// reset the now healthy controller again.
func (c *Controller) triggerReset(seen uint64, why string) {
	if c.closing.Load() || !c.resetting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.resetting.Store(false)
		if err := c.reset(c.stopCtx, why, &seen); err != nil {
			c.log.Error("controller reset failed", "error", err)
		}
	}()
}

// Reset disables and re-enables the controller, recreates the I/O queues
// and resubmits the commands that were in flight, except those that timed
// out or were canceled: they fail with ErrTimeout or their context's error,
// since the reset guarantees the controller no longer touches their
// buffers. Reads and writes are idempotent, so resubmission is safe.
func (c *Controller) Reset(ctx context.Context, why string) error {
	return c.reset(ctx, why, nil)
}

// reset is Reset; with seen set, it does nothing where the reset count is
// no longer *seen: a reset since has dealt with what its caller saw.
func (c *Controller) reset(ctx context.Context, why string, seen *uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil {
		return c.dead
	}
	if seen != nil && c.stats.resets.Load() != *seen {
		c.log.Debug("reset skipped: the controller was reset since its reason was seen", "why", why)
		return nil
	}
	c.stats.resets.Add(1)
	c.log.Warn("resetting controller", "why", why)
	start := time.Now()
	c.quiesce(ctx)
	if err := c.enable(); err != nil {
		c.failAll(err)
		return fmt.Errorf("nvme: reset: %w", err)
	}
	for _, q := range c.io {
		q.resetRings()
	}
	// The admin queue's own commands cannot survive: bring-up commands are
	// reissued here and aborts are moot.
	c.failQueue(c.admin, fmt.Errorf("nvme: admin command lost in controller reset"), nil)
	if _, err := c.setQueueCountLocked(ctx); err != nil {
		c.failAll(err)
		return err
	}
	for _, q := range c.io {
		if err := c.createQueue(ctx, q, c.adminLocked); err != nil {
			c.failAll(err)
			return err
		}
	}
	n := 0
	for _, q := range c.io {
		n += c.resubmit(q)
	}
	c.stats.resubmitted.Add(uint64(n))
	c.log.Warn("controller reset done", "resubmitted", n, "took", time.Since(start))
	return nil
}

// quiesceTimeout bounds the Delete I/O Queue commands a reset sends before
// it disables the controller: a controller that cannot answer them in this
// time is reset without them.
const quiesceTimeout = 500 * time.Millisecond

// quiesce deletes the I/O submission and completion queues before a reset
// disables the controller, when the controller still looks alive (ready,
// no fatal status), as Linux's nvme driver does. Deleting a submission
// queue makes the controller finish or abort every command it fetched from
// it (NVMe 1.4 section 5.6), so nothing is still moving data when CC.EN
// drops; some controllers misbehave when queues are in use across the
// disable, and QEMU 7.2's emulated controller was seen to crash (a read
// completing into a freed queue) when it was reset with reads in flight.
// The completion goroutines are parked (the caller holds mu exclusively),
// so the completions these deletions cause are never reaped: the rings are
// zeroed afterwards and every command still in a slot is resubmitted.
// Failures are logged, not returned: the disable that follows is the reset.
func (c *Controller) quiesce(ctx context.Context) {
	csts := c.r.read32(regCSTS)
	if csts == 0xffffffff || csts&cstsCFS != 0 || csts&cstsRDY == 0 || len(c.io) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, quiesceTimeout)
	defer cancel()
	for _, op := range []Opcode{AdminDeleteSQ, AdminDeleteCQ} {
		for _, q := range c.io {
			if _, err := c.adminLocked(ctx, Command{Opcode: op, CDW10: uint32(q.id)}, Buffer{}); err != nil {
				c.log.Warn("reset: deleting an I/O queue before the disable failed; disabling anyway",
					"queue", q.id, "op", adminName(op), "error", err)
				return
			}
		}
	}
}

func (c *Controller) setQueueCountLocked(ctx context.Context) (int, error) {
	n := len(c.io)
	if n == 0 {
		return 0, nil
	}
	res, err := c.adminLocked(ctx, Command{Opcode: AdminSetFeatures, CDW10: featureNumQueues,
		CDW11: uint32(n-1)<<16 | uint32(n-1)}, Buffer{})
	if err != nil {
		return 0, fmt.Errorf("nvme: reset: set features number of queues: %w", err)
	}
	return int(min(res&0xffff, res>>16)) + 1, nil
}

// resubmit posts q's commands in flight again after a reset, in their old
// slots; timed-out and canceled ones fail instead.
func (c *Controller) resubmit(q *QueuePair) int {
	var failed []*request
	n := 0
	q.mu.Lock()
	for _, r := range q.slots {
		if r == nil {
			continue
		}
		if r.timedOut || r.canceled != nil {
			q.release(r)
			failed = append(failed, r)
			continue
		}
		q.writeEntry(r)
		n++
	}
	q.mu.Unlock()
	for _, r := range failed {
		q.tokens <- struct{}{}
		err := fmt.Errorf("nvme: %s nsid %d lba %d failed after %v and a controller reset: %w", r.op, r.cmd.NSID, r.lba, c.timeout, ErrTimeout)
		if r.canceled != nil {
			err = fmt.Errorf("nvme: %s canceled: %w", r.op, r.canceled)
		}
		q.finish(r, 0, 0, err)
	}
	return n
}

// failQueue fails every command in flight on q with err (keep, if non-nil,
// selects commands to leave alone).
func (c *Controller) failQueue(q *QueuePair, err error, keep func(*request) bool) {
	var failed []*request
	q.mu.Lock()
	for _, r := range q.slots {
		if r != nil && (keep == nil || !keep(r)) {
			q.release(r)
			failed = append(failed, r)
		}
	}
	q.mu.Unlock()
	for _, r := range failed {
		q.tokens <- struct{}{}
		q.finish(r, 0, 0, err)
	}
}

// failAll marks the controller dead and fails everything in flight; the
// caller holds mu exclusively.
func (c *Controller) failAll(err error) {
	if !errors.Is(err, ErrControllerFatal) {
		err = fmt.Errorf("%w: %w", ErrControllerFatal, err)
	}
	c.dead = err
	c.failQueue(c.admin, err, nil)
	for _, q := range c.io {
		c.failQueue(q, err, nil)
	}
}

// Close waits (as ctx allows) for the commands in flight, deletes the I/O
// queues, performs a normal shutdown (CC.SHN) and disables the controller,
// then frees the queue memory. Commands still in flight when ctx ends fail
// with ErrClosed.
func (c *Controller) Close(ctx context.Context) error {
	if c.closing.Swap(true) {
		return nil
	}
	for c.busy() {
		select {
		case <-ctx.Done():
			c.log.Warn("closing with commands in flight", "error", ctx.Err())
		case <-time.After(time.Millisecond):
			continue
		}
		break
	}
	for c.resetting.Load() {
		time.Sleep(time.Millisecond)
	}
	c.mu.Lock()
	var errs []error
	if c.dead == nil {
		for _, q := range c.io {
			c.failQueue(q, ErrClosed, nil)
		}
		for i := len(c.io) - 1; i >= 0; i-- {
			q := c.io[i]
			if _, err := c.adminLocked(ctx, Command{Opcode: AdminDeleteSQ, CDW10: uint32(q.id)}, Buffer{}); err != nil {
				errs = append(errs, err)
			}
			if _, err := c.adminLocked(ctx, Command{Opcode: AdminDeleteCQ, CDW10: uint32(q.id)}, Buffer{}); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, c.shutdown())
	}
	c.r.write32(regCC, c.r.read32(regCC)&^ccEN)
	if err := c.waitReady(false); err != nil {
		errs = append(errs, err)
	}
	c.failQueue(c.admin, ErrClosed, nil)
	for _, q := range c.io {
		c.failQueue(q, ErrClosed, nil)
	}
	close(c.stop)
	c.stopFn()
	c.mu.Unlock()
	c.wg.Wait()
	c.admin.freeMemory()
	for _, q := range c.io {
		q.freeMemory()
	}
	return errors.Join(errs...)
}

func (c *Controller) busy() bool {
	for _, q := range c.Queues() {
		if q.Inflight() > 0 {
			return true
		}
	}
	return false
}

// shutdown performs a normal shutdown notification and waits for
// CSTS.SHST to report completion.
func (c *Controller) shutdown() error {
	cc := c.r.read32(regCC)
	c.r.write32(regCC, cc&^ccSHNMask|ccSHNNorm)
	limit := max(c.cap.Timeout, time.Second)
	deadline := time.Now().Add(limit)
	for c.r.read32(regCSTS)&cstsSHSTMask != cstsSHSTDone {
		if time.Now().After(deadline) {
			return fmt.Errorf("nvme: shutdown did not complete within %v", limit)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
