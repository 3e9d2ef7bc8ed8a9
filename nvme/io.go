package nvme

import (
	"context"
	"fmt"
)

// Read submits a read of len(buf.Bytes)/blockSize blocks of namespace nsid
// starting at lba into buf, and returns at once. buf's length must be a
// multiple of the namespace's block size and its IOVA 4-byte aligned; it
// may start anywhere in a page. Requests larger than MaxTransfer are split
// into several commands on this queue. Canceling ctx aborts the commands
// still in flight. The returned ticket completes when every command has.
func (q *QueuePair) Read(ctx context.Context, nsid uint32, lba uint64, buf Buffer) (*Ticket, error) {
	return q.rw(ctx, OpRead, nsid, lba, buf)
}

// Write is Read's counterpart: it writes buf to the namespace.
func (q *QueuePair) Write(ctx context.Context, nsid uint32, lba uint64, buf Buffer) (*Ticket, error) {
	return q.rw(ctx, OpWrite, nsid, lba, buf)
}

// Flush commits the namespace's volatile write cache to media.
func (q *QueuePair) Flush(ctx context.Context, nsid uint32) error {
	r := &request{cmd: Command{Opcode: OpFlush, NSID: nsid}, op: "flush", t: newTicket(1)}
	if err := q.submit(ctx, r); err != nil {
		return fmt.Errorf("nvme: flush nsid %d: %w", nsid, err)
	}
	return r.t.Wait()
}

func (q *QueuePair) rw(ctx context.Context, op Opcode, nsid uint32, lba uint64, buf Buffer) (*Ticket, error) {
	c := q.c
	ns, ok := c.namespaces[nsid]
	if !ok {
		return nil, fmt.Errorf("nvme: %s: namespace %d is not active: %w", opNames[op], nsid, ErrBadRequest)
	}
	bs := uint64(ns.BlockSize)
	n := uint64(buf.Len())
	switch {
	case n == 0 || n%bs != 0:
		return nil, fmt.Errorf("nvme: %s of %d bytes is not a positive multiple of the %d-byte block: %w", opNames[op], n, bs, ErrBadRequest)
	case buf.IOVA%4 != 0:
		return nil, fmt.Errorf("nvme: %s buffer IOVA %#x is not 4-byte aligned: %w", opNames[op], buf.IOVA, ErrBadRequest)
	case lba >= ns.Size || n/bs > ns.Size-lba:
		return nil, fmt.Errorf("nvme: %s of lba %d+%d is outside namespace %d (%d blocks): %w", opNames[op], lba, n/bs, nsid, ns.Size, ErrBadRequest)
	}
	chunk := uint64(c.maxXfer) / bs * bs
	if chunk > 65536*bs {
		chunk = 65536 * bs // NLB is 16 bits
	}
	parts := int((n + chunk - 1) / chunk)
	t := newTicket(parts)
	for i := 0; i < parts; i++ {
		off := uint64(i) * chunk
		m := min(chunk, n-off)
		blocks := uint32(m / bs)
		slba := lba + off/bs
		r := &request{
			cmd: Command{Opcode: op, NSID: nsid, CDW10: uint32(slba), CDW11: uint32(slba >> 32),
				CDW12: blocks - 1},
			op: opNames[op], lba: slba, blocks: blocks, data: buf.Slice(int(off), int(m)), t: t, bytes: int(m),
		}
		if err := q.submit(ctx, r); err != nil {
			err = fmt.Errorf("nvme: %s nsid %d lba %d: %w", opNames[op], nsid, slba, err)
			if i == 0 {
				return nil, err
			}
			t.skip(parts-i, err)
			break
		}
	}
	return t, nil
}

// Queue picks an I/O queue pair round-robin, for callers that do not keep
// one per goroutine.
func (c *Controller) Queue() *QueuePair {
	qs := c.io
	return qs[int(c.rr.Add(1))%len(qs)]
}

// ReadBlocks reads into buf and waits (see QueuePair.Read).
func (c *Controller) ReadBlocks(ctx context.Context, nsid uint32, lba uint64, buf Buffer) error {
	if len(c.io) == 0 {
		return fmt.Errorf("nvme: read: no I/O queue: %w", ErrClosed)
	}
	t, err := c.Queue().Read(ctx, nsid, lba, buf)
	if err != nil {
		return err
	}
	return t.Wait()
}

// WriteBlocks writes buf and waits (see QueuePair.Write).
func (c *Controller) WriteBlocks(ctx context.Context, nsid uint32, lba uint64, buf Buffer) error {
	if len(c.io) == 0 {
		return fmt.Errorf("nvme: write: no I/O queue: %w", ErrClosed)
	}
	t, err := c.Queue().Write(ctx, nsid, lba, buf)
	if err != nil {
		return err
	}
	return t.Wait()
}
