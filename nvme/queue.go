package nvme

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// QueuePair is one submission queue and its completion queue. Commands on
// one pair complete in any order; each pair has its own completion
// goroutine (polling, or waiting for its MSI-X vector), so independent
// goroutines that use different pairs never contend.
type QueuePair struct {
	c      *Controller
	id     uint16
	depth  int
	vector int // MSI-X vector, or -1 when polled
	sq, cq Buffer
	prp    Buffer // one PRP list page per command slot
	sqDB   uint32
	cqDB   uint32

	tokens chan struct{} // one per free command slot: depth-1 commands in flight at most
	kick   chan struct{} // wakes the completion goroutine when work arrives

	mu       sync.Mutex
	sqTail   uint16
	sqHead   uint16
	cqHead   uint16
	phase    bool
	slots    []*request // indexed by command ID
	free     []uint16
	inflight atomic.Int32
}

// request is one command in flight.
type request struct {
	cmd    Command
	op     string
	lba    uint64
	blocks uint32
	data   Buffer // the data region, for PRP construction (empty for none)
	t      *Ticket
	bytes  int

	// Guarded by the queue's mu.
	cid           uint16
	deadline      time.Time
	abortSent     bool
	abortDeadline time.Time
	timedOut      bool
	canceled      error
	stop          func() bool
	posted        time.Time
}

// ID is the queue identifier (1 … for I/O pairs, 0 for the admin pair).
func (q *QueuePair) ID() uint16 { return q.id }

// Depth is the number of entries in each ring; at most Depth-1 commands are
// in flight at once.
func (q *QueuePair) Depth() int { return q.depth }

// Inflight is the number of commands submitted and not yet completed.
func (q *QueuePair) Inflight() int { return int(q.inflight.Load()) }

func newQueuePair(c *Controller, id uint16, depth, vector int) (*QueuePair, error) {
	q := &QueuePair{c: c, id: id, depth: depth, vector: vector,
		sqDB: sqDoorbell(id, c.cap.DoorbellStride), cqDB: cqDoorbell(id, c.cap.DoorbellStride),
		tokens: make(chan struct{}, depth-1), kick: make(chan struct{}, 1),
		phase: true, slots: make([]*request, depth-1)}
	var err error
	if q.sq, err = c.dma.Alloc(roundPage(depth * sqEntrySize)); err != nil {
		return nil, fmt.Errorf("nvme: allocating submission queue %d: %w", id, err)
	}
	if q.cq, err = c.dma.Alloc(roundPage(depth * cqEntrySize)); err != nil {
		c.dma.Free(q.sq)
		return nil, fmt.Errorf("nvme: allocating completion queue %d: %w", id, err)
	}
	if q.prp, err = c.dma.Alloc((depth - 1) * pageSize); err != nil {
		c.dma.Free(q.sq)
		c.dma.Free(q.cq)
		return nil, fmt.Errorf("nvme: allocating PRP lists of queue %d: %w", id, err)
	}
	for i := depth - 2; i >= 0; i-- {
		q.free = append(q.free, uint16(i))
		q.tokens <- struct{}{}
	}
	return q, nil
}

func (q *QueuePair) freeMemory() {
	for _, b := range []Buffer{q.sq, q.cq, q.prp} {
		if b.Bytes != nil {
			q.c.dma.Free(b)
		}
	}
}

func roundPage(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

// resetRings zeroes the rings after a controller disable; the caller holds
// the controller's lock exclusively.
func (q *QueuePair) resetRings() {
	q.mu.Lock()
	clear(q.sq.Bytes)
	clear(q.cq.Bytes)
	q.sqTail, q.sqHead, q.cqHead, q.phase = 0, 0, 0, true
	q.mu.Unlock()
}

// submit posts r, waiting for a free slot if the queue is full. It returns
// an error only when r was not posted.
func (q *QueuePair) submit(ctx context.Context, r *request) error {
	select {
	case <-q.tokens:
	default:
		select {
		case <-q.tokens:
		case <-ctx.Done():
			return fmt.Errorf("nvme: waiting for a free slot on queue %d: %w", q.id, context.Cause(ctx))
		case <-q.c.stop:
			return ErrClosed
		}
	}
	if err := ctx.Err(); err != nil {
		q.tokens <- struct{}{}
		return context.Cause(ctx)
	}
	q.c.mu.RLock()
	if err := q.c.usable(); err != nil {
		q.c.mu.RUnlock()
		q.tokens <- struct{}{}
		return err
	}
	q.post(ctx, r)
	q.c.mu.RUnlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return nil
}

// post writes r into a free slot and rings the doorbell. The caller holds a
// token and the controller's lock (shared or exclusive).
func (q *QueuePair) post(ctx context.Context, r *request) {
	q.mu.Lock()
	cid := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.slots[cid] = r
	r.cid = cid
	r.cmd.CID = cid
	if r.data.Len() > 0 {
		r.cmd.PRP1, r.cmd.PRP2 = buildPRP(r.data, q.prp.Slice(int(cid)*pageSize, pageSize))
	}
	if ctx != nil && ctx.Done() != nil {
		r.stop = context.AfterFunc(ctx, func() { q.c.cancel(q, r, ctx) })
	}
	q.inflight.Add(1)
	q.writeEntry(r)
	q.mu.Unlock()
}

// writeEntry copies r's command into the ring at the tail and rings the
// doorbell. The caller holds q.mu.
func (q *QueuePair) writeEntry(r *request) {
	now := time.Now()
	r.posted = now
	r.deadline = now.Add(q.c.timeout)
	tail := q.sqTail
	r.cmd.Marshal(q.sq.Bytes[int(tail)*sqEntrySize:])
	q.sqTail = (tail + 1) % uint16(q.depth)
	q.c.r.write32(q.sqDB, uint32(q.sqTail))
}

// buildPRP describes data with PRP1/PRP2, writing a PRP list into list when
// the region spans more than two memory pages (NVMe 1.4 section 4.3). The
// caller bounds the region so that one list page suffices.
func buildPRP(data Buffer, list Buffer) (prp1, prp2 uint64) {
	iova, n := data.IOVA, uint64(data.Len())
	prp1 = iova
	first := pageSize - iova%pageSize
	if n <= first {
		return prp1, 0
	}
	next := iova + first
	rem := n - first
	if rem <= pageSize {
		return prp1, next
	}
	entries := (*[pageSize / 8]uint64)(unsafe.Pointer(&list.Bytes[0]))
	i := 0
	for a := next; a < iova+n; a += pageSize {
		entries[i] = a
		i++
	}
	return prp1, list.IOVA
}

// completed is a request the completion queue finished.
type completed struct {
	r   *request
	cqe Completion
}

// reap consumes every new completion entry. The caller holds the
// controller's lock (shared or exclusive).
func (q *QueuePair) reap() int {
	var done [32]completed
	total := 0
	for {
		n := 0
		q.mu.Lock()
		for n < len(done) {
			off := int(q.cqHead) * cqEntrySize
			dw3 := atomic.LoadUint32((*uint32)(unsafe.Pointer(&q.cq.Bytes[off+12])))
			if (dw3>>16&1 == 1) != q.phase {
				break
			}
			cqe, _ := ParseCompletion(q.cq.Bytes[off : off+cqEntrySize])
			q.cqHead++
			if int(q.cqHead) == q.depth {
				q.cqHead, q.phase = 0, !q.phase
			}
			q.sqHead = cqe.SQHead
			if int(cqe.CID) >= len(q.slots) || q.slots[cqe.CID] == nil {
				q.c.log.Warn("completion for a command not in flight", "queue", q.id, "cid", cqe.CID, "status", cqe.Status.String())
				q.c.stats.spurious.Add(1)
				continue
			}
			r := q.slots[cqe.CID]
			q.release(r)
			done[n] = completed{r, cqe}
			n++
		}
		if n > 0 {
			q.c.r.write32(q.cqDB, uint32(q.cqHead))
		}
		q.mu.Unlock()
		for i := 0; i < n; i++ {
			q.tokens <- struct{}{}
			q.finish(done[i].r, done[i].cqe.Status, done[i].cqe.Result, nil)
			done[i] = completed{}
		}
		total += n
		if n < len(done) {
			return total
		}
	}
}

// release frees r's slot; the caller holds q.mu and returns the token
// after unlocking.
func (q *QueuePair) release(r *request) {
	q.slots[r.cid] = nil
	q.free = append(q.free, r.cid)
	q.inflight.Add(-1)
}

// finish completes r with a status from the controller, or with err when
// the driver gave up on it.
func (q *QueuePair) finish(r *request, st Status, result uint32, err error) {
	if r.stop != nil {
		r.stop()
	}
	c := q.c
	if err == nil && !st.OK() {
		se := &StatusError{Op: r.op, QID: q.id, NSID: r.cmd.NSID, LBA: r.lba, Blocks: r.blocks, Status: st}
		switch {
		case r.timedOut:
			err = fmt.Errorf("%w after %v: %w", ErrTimeout, c.timeout, se)
		case r.canceled != nil:
			err = fmt.Errorf("nvme: %s canceled: %w: %w", r.op, r.canceled, se)
		default:
			err = se
		}
	}
	switch {
	case err != nil:
		c.stats.errors.Add(1)
	case r.op == "read":
		c.stats.readBytes.Add(uint64(r.bytes))
		c.stats.reads.Add(1)
	case r.op == "write":
		c.stats.writeBytes.Add(uint64(r.bytes))
		c.stats.writes.Add(1)
	}
	r.t.part(err, result)
}

// checkDeadlines finds commands past their deadline. It returns those that
// need an Abort and whether the controller must be reset (an abort that did
// not take effect in time, or an admin command that timed out).
func (q *QueuePair) checkDeadlines(now time.Time) (aborts []*request, reset bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range q.slots {
		switch {
		case r == nil:
		case r.abortSent:
			if now.After(r.abortDeadline) {
				reset = true
			}
		case now.After(r.deadline):
			r.timedOut = true
			q.c.stats.timeouts.Add(1)
			if q.id == 0 { // no Abort for admin commands: reset
				reset = true
				continue
			}
			r.abortSent = true
			r.abortDeadline = now.Add(q.c.timeout)
			aborts = append(aborts, r)
		}
	}
	return aborts, reset
}

// run is the completion goroutine of the pair.
func (q *QueuePair) run() {
	c := q.c
	defer c.wg.Done()
	idle := 0
	lastCheck := time.Now()
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		c.mu.RLock()
		n := q.reap()
		var aborts []*request
		reset := false
		// The resets so far, read under mu: a reset started after this
		// look dealt with what it sees (triggerReset).
		seen := c.stats.resets.Load()
		if now := time.Now(); now.Sub(lastCheck) >= c.checkEvery {
			lastCheck = now
			aborts, reset = q.checkDeadlines(now)
			if q.inflight.Load() > 0 {
				// With commands in flight the controller must be ready:
				// a fatal status, a controller that was disabled behind
				// the driver's back (a function-level reset from
				// elsewhere) or registers that read all ones (the
				// function in reset, or gone) would leave them hanging
				// until two timeouts brought the reset.
				switch csts := c.r.read32(regCSTS); {
				case csts == 0xffffffff:
					c.log.Error("controller registers read all ones with commands in flight", "queue", q.id)
					reset = true
				case csts&cstsCFS != 0:
					c.log.Error("controller fatal status", "queue", q.id)
					reset = true
				case csts&cstsRDY == 0:
					c.log.Error("controller no longer ready with commands in flight (reset behind the driver)", "queue", q.id)
					reset = true
				}
			}
		}
		inflight := q.inflight.Load()
		c.mu.RUnlock()
		for _, r := range aborts {
			c.sendAbort(q, r, "timeout")
		}
		if reset {
			c.triggerReset(seen, "command timeout, or controller fatal, not ready or unreachable")
		}
		if n > 0 {
			idle = 0
			continue
		}
		if inflight == 0 {
			select {
			case <-q.kick:
			case <-c.stop:
				return
			}
			idle = 0
			continue
		}
		if c.irq != nil && q.vector >= 0 {
			ctx, cancel := context.WithTimeout(c.stopCtx, c.checkEvery)
			c.irq.Wait(ctx, q.vector)
			cancel()
			continue
		}
		idle++
		switch {
		case idle < 32:
			runtime.Gosched()
		default:
			time.Sleep(c.pollSleep)
		}
	}
}
