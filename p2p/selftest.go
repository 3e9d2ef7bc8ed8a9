package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/strata-llm/strata/nvme"
)

// Scratch is the namespace range a self-test may use: Blocks blocks at
// LBA of namespace NSID. With Write set the test writes its own pattern
// there (restoring the old contents afterwards); without it, it uses the
// bytes already there, which must not be uniform.
type Scratch struct {
	NSID   uint32
	LBA    uint64
	Blocks uint32
	Write  bool
}

// Result is what a self-test saw.
type Result struct {
	Target string
	Bytes  int
	Offset int // where in the target the data landed
	OK     bool
	Reason string
}

// SelfTest admits t: the controller READs Scratch's blocks into the start
// of t and the bytes there must match what a host-memory read of the same
// blocks gives. The target is first filled with the complement of the
// expected bytes, so a DMA that never lands (an IOMMU fault that the
// controller reports as success, as QEMU does, or a peer the fabric cannot
// reach) is caught. On success t's Buffer becomes usable.
func SelfTest(ctx context.Context, c *nvme.Controller, dma nvme.DMA, s Scratch, t Target) (res Result, err error) {
	ns, err := c.Namespace(s.NSID)
	if err != nil {
		return Result{}, err
	}
	n := int(s.Blocks) * ns.BlockSize
	res = Result{Target: t.Name(), Bytes: n}
	tb := t.raw()
	if n == 0 || n > tb.Len() {
		return res, fmt.Errorf("p2p: self-test of %d bytes does not fit target %s (%d bytes)", n, t.Name(), tb.Len())
	}
	host, err := dma.Alloc(n)
	if err != nil {
		return res, fmt.Errorf("p2p: self-test buffer: %w", err)
	}
	defer dma.Free(host)
	want := make([]byte, n)
	if s.Write {
		saved, err := dma.Alloc(n)
		if err != nil {
			return res, fmt.Errorf("p2p: self-test buffer: %w", err)
		}
		defer dma.Free(saved)
		if err := c.ReadBlocks(ctx, s.NSID, s.LBA, saved); err != nil {
			return res, fmt.Errorf("p2p: self-test: saving scratch blocks: %w", err)
		}
		defer func() {
			if werr := c.WriteBlocks(context.WithoutCancel(ctx), s.NSID, s.LBA, saved); werr != nil && err == nil {
				res.OK = false
				err = fmt.Errorf("p2p: self-test: restoring scratch blocks: %w", werr)
			}
		}()
		fillPattern(host.Bytes, s.LBA)
		if err := c.WriteBlocks(ctx, s.NSID, s.LBA, host); err != nil {
			return res, fmt.Errorf("p2p: self-test: writing pattern: %w", err)
		}
		clear(host.Bytes)
	}
	if err := c.ReadBlocks(ctx, s.NSID, s.LBA, host); err != nil {
		return res, fmt.Errorf("p2p: self-test: reading reference into host memory: %w", err)
	}
	copy(want, host.Bytes)
	if isUniform(want) {
		return res, fmt.Errorf("p2p: self-test: scratch blocks hold uniform bytes; use Scratch.Write")
	}
	region := tb.Slice(0, n)
	for i := range want {
		region.Bytes[i] = ^want[i]
	}
	if err := c.ReadBlocks(ctx, s.NSID, s.LBA, region); err != nil {
		res.Reason = err.Error()
		return res, fmt.Errorf("p2p: self-test of %s: NVMe READ into target: %w", t.Name(), err)
	}
	got := make([]byte, n)
	copy(got, region.Bytes)
	if !bytes.Equal(got, want) {
		same := 0
		for i := range got {
			if got[i] == want[i] {
				same++
			}
		}
		res.Reason = fmt.Sprintf("%d of %d bytes arrived", same, n)
		if same == 0 {
			res.Reason = "no byte arrived: the DMA was dropped (IOMMU fault or unreachable peer)"
		}
		return res, fmt.Errorf("p2p: self-test of %s failed: %s", t.Name(), res.Reason)
	}
	res.OK = true
	t.admit()
	return res, nil
}

// fillPattern writes 8-byte words naming their position, so a misplaced
// block is detectable as well as a missing one.
func fillPattern(b []byte, lba uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], 0x5354524154410000^(lba<<20)^uint64(i))
	}
}

func isUniform(b []byte) bool {
	for _, x := range b {
		if x != b[0] {
			return false
		}
	}
	return true
}
