package nvmetest

import (
	"encoding/binary"
	"fmt"

	"github.com/strata-llm/strata/nvme"
)

var (
	statusInvalidQueueDeletion = nvme.MakeStatus(nvme.SCTCommandSpecific, 0x0c, true)
	statusCQInvalid            = nvme.MakeStatus(nvme.SCTCommandSpecific, 0x00, true)
	statusInvalidVector        = nvme.MakeStatus(nvme.SCTCommandSpecific, 0x08, true)
)

// admin executes an admin command; the caller holds mu.
func (c *Controller) admin(cmd nvme.Command) (nvme.Status, uint32) {
	switch cmd.Opcode {
	case nvme.AdminIdentify:
		c.counts["identify"]++
		return c.identify(cmd), 0
	case nvme.AdminSetFeatures:
		c.counts["set features"]++
		if cmd.CDW10&0xff != 0x07 {
			return nvme.StatusInvalidField, 0
		}
		nsq := min(int(cmd.CDW11&0xffff)+1, c.opts.MaxIOQueues)
		ncq := min(int(cmd.CDW11>>16)+1, c.opts.MaxIOQueues)
		return nvme.StatusSuccess, uint32(ncq-1)<<16 | uint32(nsq-1)
	case nvme.AdminCreateCQ:
		c.counts["create cq"]++
		id, size := uint16(cmd.CDW10), cmd.CDW10>>16+1
		switch {
		case id == 0 || int(id) > c.opts.MaxIOQueues || c.cqs[id] != nil:
			return nvme.StatusInvalidQueueID, 0
		case size < 2 || int(size) > c.opts.MaxQueueEntries:
			return nvme.StatusInvalidQueueSize, 0
		case cmd.CDW11&1 == 0 || cmd.PRP1%page != 0:
			return nvme.StatusInvalidField, 0
		case cmd.CDW11>>16 > 64:
			return statusInvalidVector, 0
		}
		c.cqs[id] = &cq{id: id, base: cmd.PRP1, size: size, phase: true, ien: cmd.CDW11&2 != 0, vector: int(cmd.CDW11 >> 16)}
		return nvme.StatusSuccess, 0
	case nvme.AdminCreateSQ:
		c.counts["create sq"]++
		id, size, cqid := uint16(cmd.CDW10), cmd.CDW10>>16+1, uint16(cmd.CDW11>>16)
		switch {
		case id == 0 || int(id) > c.opts.MaxIOQueues || c.sqs[id] != nil:
			return nvme.StatusInvalidQueueID, 0
		case size < 2 || int(size) > c.opts.MaxQueueEntries:
			return nvme.StatusInvalidQueueSize, 0
		case c.cqs[cqid] == nil || cqid == 0:
			return statusCQInvalid, 0
		case cmd.CDW11&1 == 0 || cmd.PRP1%page != 0:
			return nvme.StatusInvalidField, 0
		}
		c.sqs[id] = &sq{id: id, cqid: cqid, base: cmd.PRP1, size: size}
		return nvme.StatusSuccess, 0
	case nvme.AdminDeleteSQ:
		c.counts["delete sq"]++
		id := uint16(cmd.CDW10)
		s := c.sqs[id]
		if id == 0 || s == nil {
			return nvme.StatusInvalidQueueID, 0
		}
		for h := range c.held {
			if h.sqid == id {
				delete(c.held, h)
				c.post(s, nvme.Completion{SQHead: uint16(s.head), SQID: id, CID: h.cid, Status: nvme.StatusSQDeleted})
			}
		}
		delete(c.sqs, id)
		return nvme.StatusSuccess, 0
	case nvme.AdminDeleteCQ:
		c.counts["delete cq"]++
		id := uint16(cmd.CDW10)
		if id == 0 || c.cqs[id] == nil {
			return nvme.StatusInvalidQueueID, 0
		}
		for _, s := range c.sqs {
			if s.cqid == id {
				return statusInvalidQueueDeletion, 0
			}
		}
		delete(c.cqs, id)
		return nvme.StatusSuccess, 0
	case nvme.AdminAbort:
		c.counts["abort"]++
		h := held{sqid: uint16(cmd.CDW10), cid: uint16(cmd.CDW10 >> 16), gen: c.gen}
		if c.ignoreAb || !c.held[h] {
			return nvme.StatusSuccess, 1 // not aborted
		}
		delete(c.held, h)
		if s := c.sqs[h.sqid]; s != nil {
			c.post(s, nvme.Completion{SQHead: uint16(s.head), SQID: h.sqid, CID: h.cid, Status: nvme.StatusAbortRequested})
		}
		return nvme.StatusSuccess, 0
	}
	return nvme.StatusInvalidOpcode, 0
}

func (c *Controller) identify(cmd nvme.Command) nvme.Status {
	b := make([]byte, nvme.IdentifySize)
	le := binary.LittleEndian
	switch cmd.CDW10 & 0xff {
	case 0x01:
		le.PutUint16(b[0:], 0x1b36)
		copy(b[4:24], pad("nvmetest-0001", 20))
		copy(b[24:64], pad(c.opts.Model, 40))
		copy(b[64:72], pad("1.0", 8))
		b[77] = c.opts.MDTS
		le.PutUint16(b[78:], 1)
		le.PutUint32(b[80:], 0x00010400)
		b[258] = byte(c.opts.AbortLimit - 1)
		b[512], b[513] = 0x66, 0x44
		le.PutUint32(b[516:], uint32(len(c.ns)))
	case 0x00:
		if cmd.NSID == 0 || int(cmd.NSID) > len(c.ns) {
			return nvme.StatusInvalidNamespace
		}
		ns := c.ns[cmd.NSID-1]
		blocks := uint64(len(ns.data) / ns.bs)
		le.PutUint64(b[0:], blocks)
		le.PutUint64(b[8:], blocks)
		le.PutUint64(b[16:], blocks)
		lbads := 9
		for 1<<lbads < ns.bs {
			lbads++
		}
		le.PutUint32(b[128:], uint32(lbads)<<16)
	case 0x02:
		i := 0
		for id := cmd.NSID + 1; int(id) <= len(c.ns); id++ {
			le.PutUint32(b[4*i:], id)
			i++
		}
	default:
		return nvme.StatusInvalidField
	}
	return c.transfer(cmd, len(b), b, true)
}

func pad(s string, n int) []byte {
	b := []byte(s)
	for len(b) < n {
		b = append(b, ' ')
	}
	return b[:n]
}

// io executes an NVM command; hang reports that it must be held.
func (c *Controller) io(s *sq, cmd nvme.Command) (st nvme.Status, hang bool) {
	switch cmd.Opcode {
	case nvme.OpFlush:
		c.counts["flush"]++
		return nvme.StatusSuccess, false
	case nvme.OpRead, nvme.OpWrite:
	default:
		return nvme.StatusInvalidOpcode, false
	}
	name := "read"
	if cmd.Opcode == nvme.OpWrite {
		name = "write"
	}
	c.counts[name]++
	c.counts[fmt.Sprintf("%s q%d", name, s.id)]++ // per queue: tests check reads are spread
	if cmd.NSID == 0 || int(cmd.NSID) > len(c.ns) {
		return nvme.StatusInvalidNamespace, false
	}
	ns := c.ns[cmd.NSID-1]
	slba := uint64(cmd.CDW10) | uint64(cmd.CDW11)<<32
	nlb := uint64(cmd.CDW12&0xffff) + 1
	blocks := uint64(len(ns.data) / ns.bs)
	if slba >= blocks || nlb > blocks-slba {
		return nvme.StatusLBAOutOfRange, false
	}
	n := int(nlb) * ns.bs
	if n > page<<c.opts.MDTS {
		return nvme.StatusInvalidField, false
	}
	overlaps := func(in injection) bool {
		return in.nsid == cmd.NSID && slba < in.lba+in.count && in.lba < slba+nlb
	}
	for _, h := range c.hangs {
		if overlaps(h) {
			return 0, true
		}
	}
	for i, in := range c.inject {
		if in.op == cmd.Opcode && overlaps(in) {
			if in.times > 0 {
				if c.inject[i].times--; c.inject[i].times == 0 {
					c.inject = append(c.inject[:i], c.inject[i+1:]...)
				}
			}
			return in.status, false
		}
	}
	dev := ns.data[slba*uint64(ns.bs) : slba*uint64(ns.bs)+uint64(n)]
	return c.transfer(cmd, n, dev, cmd.Opcode == nvme.OpRead), false
}
