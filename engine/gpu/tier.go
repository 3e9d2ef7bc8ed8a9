package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// alignUp rounds a tensor's size up to the 256 bytes cuMemAlloc aligns to,
// so every tensor of a packed layer starts aligned (the kernels load 16
// bytes at a time).
func alignUp(n int64) int64 { return hostmem.AlignUp(n, 256) }

// layerKind says which of the optional tensors a model's layers hold:
// Gemma's post-norms, Qwen2's q/k/v biases, Qwen3's and Gemma 3's q/k
// norms (model.Config's PostNorms, QKVBias and QKNorm).
type layerKind struct{ post, bias, qkNorm bool }

func kindOf(c *model.Config) layerKind {
	return layerKind{post: c.PostNorms(), bias: c.QKVBias(), qkNorm: c.QKNorm()}
}

// layerTensors lists a layer's tensors in packing order: attention norm,
// q, k, v, their biases and norms where the model has them, o, the
// post-attention norm, the FFN's tensors and its post-norm.
func layerTensors(L *model.Layer, lk layerKind) []*model.Tensor {
	ts := []*model.Tensor{&L.AttnNorm, &L.Q, &L.K, &L.V}
	if lk.bias {
		ts = append(ts, &L.QBias, &L.KBias, &L.VBias)
	}
	if lk.qkNorm {
		ts = append(ts, &L.QNorm, &L.KNorm)
	}
	ts = append(ts, &L.O)
	if lk.post {
		ts = append(ts, &L.PostAttnNorm)
	}
	ts = append(ts, &L.FFNNorm, &L.Gate, &L.Up, &L.Down)
	if lk.post {
		ts = append(ts, &L.PostFFNNorm)
	}
	return ts
}

// layerSize is the packed size of a layer.
func layerSize(L *model.Layer, lk layerKind) int64 {
	var n int64
	for _, t := range layerTensors(L, lk) {
		n += alignUp(int64(len(t.Data)))
	}
	return n
}

func matrix(t *model.Tensor, p cudadrv.DevPtr) kernels.Matrix {
	return kernels.Matrix{Type: t.Type, Rows: t.Rows, Cols: t.Cols, Ptr: p}
}

// layerWith describes layer L with each tensor at the address at gives
// it; at is called in layerTensors order.
func layerWith(L *model.Layer, lk layerKind, at func(*model.Tensor) cudadrv.DevPtr) layerW {
	var lw layerW
	lw.attnNorm = at(&L.AttnNorm)
	lw.q = matrix(&L.Q, at(&L.Q))
	lw.k = matrix(&L.K, at(&L.K))
	lw.v = matrix(&L.V, at(&L.V))
	if lk.bias {
		lw.qBias, lw.kBias, lw.vBias = at(&L.QBias), at(&L.KBias), at(&L.VBias)
	}
	if lk.qkNorm {
		lw.qNorm, lw.kNorm = at(&L.QNorm), at(&L.KNorm)
	}
	lw.o = matrix(&L.O, at(&L.O))
	if lk.post {
		lw.postAttnNorm = at(&L.PostAttnNorm)
	}
	lw.ffnNorm = at(&L.FFNNorm)
	lw.gate = matrix(&L.Gate, at(&L.Gate))
	lw.up = matrix(&L.Up, at(&L.Up))
	lw.down = matrix(&L.Down, at(&L.Down))
	if lk.post {
		lw.postFFNNorm = at(&L.PostFFNNorm)
	}
	return lw
}

// layerAt describes a layer packed at base (0 for a streamed layer, whose
// pointers are then offsets to rebase onto its slot).
func layerAt(L *model.Layer, lk layerKind, base cudadrv.DevPtr) layerW {
	off := int64(0)
	return layerWith(L, lk, func(t *model.Tensor) cudadrv.DevPtr {
		p := base.Add(off)
		off += alignUp(int64(len(t.Data)))
		return p
	})
}

// rebased moves a streamed layer's offsets onto the slot at base.
func (lw layerW) rebased(base cudadrv.DevPtr) layerW {
	for _, p := range []*cudadrv.DevPtr{&lw.attnNorm, &lw.postAttnNorm, &lw.ffnNorm, &lw.postFFNNorm,
		&lw.q.Ptr, &lw.k.Ptr, &lw.v.Ptr, &lw.o.Ptr, &lw.gate.Ptr, &lw.up.Ptr, &lw.down.Ptr} {
		*p = base.Add(int64(*p))
	}
	// The optional tensors stay 0 where the model has none; where it has
	// them their offsets are past the attention norm's, never 0.
	for _, p := range []*cudadrv.DevPtr{&lw.qBias, &lw.kBias, &lw.vBias, &lw.qNorm, &lw.kNorm} {
		if *p != 0 {
			*p = base.Add(int64(*p))
		}
	}
	return lw
}

// tierB holds the streamed layers (tiers B and C) and runs them through
// the pipeline (engine/stream) on the CUDA device seam (streamDev): tier-B
// layers' packed bytes sit in pinned host memory, so the pipeline copies
// them without a stage 1; tier-C layers are read by its stage 1 into
// staging buffers that streamDev pins. tierB is also the pipeline's
// LayerStore: tier B's bytes are its own, tier C's extents and checksums
// the TierC store's.
type tierB struct {
	log       hclog.Logger     // tier C's checksum failures (TierC.Logger)
	host      *cudadrv.HostMem // tier-B layers, packed, registered; nil without tier B
	region    *hostmem.Region  // host's memory
	hostBytes []byte           // host's bytes
	off, size []int64          // per layer: offset in host (tier B); bytes moved per pass (B, C), or computed (A)
	tierC     []bool           // per layer: on tier C
	cLayers   []int
	tc        stream.LayerStore // TierC.Store; nil without tier C
	bytes     int64             // streamed per pass (tiers B and C)

	dev  *streamDev
	pipe *stream.Pipeline
}

// streamedSet validates Options.StreamLayers.
func (m *Model) streamedSet(layers int) ([]bool, error) {
	s := make([]bool, layers)
	for _, l := range m.opts.StreamLayers {
		if l < 0 || l >= layers {
			return nil, fmt.Errorf("streamed layer %d outside [0, %d)", l, layers)
		}
		if s[l] {
			return nil, fmt.Errorf("streamed layer %d listed twice", l)
		}
		s[l] = true
	}
	return s, nil
}

// loadTierB packs the tier-B layers into pinned host memory and starts the
// pipeline over them and the tier-C layers (its slots, pinned staging
// buffers, copy stream and events). slotBytes is what load budgeted for a
// slot; the pipeline sizes its slots from the same extents.
func (m *Model) loadTierB(ctx context.Context, c *cudadrv.Ctx, w *model.Weights, streamed []bool, tc []*tierCLayer, base []int64, hostTotal, slotBytes int64, nslots int) error {
	lk := kindOf(&m.Config)
	n := len(streamed)
	tb := &tierB{off: base, size: make([]int64, n), tierC: make([]bool, n)}
	m.tb = tb
	var err error
	if hostTotal > 0 {
		// Huge pages, registered: the CPU of the hybrid placement reads
		// tier B as it reads any weights, and across gigabytes 4 KiB pages
		// cost it TLB misses (page walks that themselves read DRAM) where
		// 2 MiB pages cost few.
		if tb.region, err = hostmem.Alloc(int(hostTotal), hostmem.AllocOptions{HugePages: true}); err != nil {
			return fmt.Errorf("tier B: %w", err)
		}
		if tb.host, err = c.HostRegister(tb.region.Bytes(), 0); err != nil {
			return errors.Join(fmt.Errorf("tier B: %w", err), tb.region.Free())
		}
		tb.hostBytes = tb.host.Bytes()
	}
	tiers := make([]tier.Tier, n)
	for i, s := range streamed {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tier B layer %d: %w", i, err)
		}
		switch {
		case tc != nil && tc[i] != nil:
			tiers[i] = tier.TierC
			tb.size[i] = tc[i].ext.Length
		case s:
			tiers[i] = tier.TierB
			if pl := m.pk.layer(i); pl != nil { // packed bf16 (packed.go)
				if err := pl.write(tb.hostBytes[base[i]:], &w.Layers[i], lk); err != nil {
					return fmt.Errorf("tier B layer %d: %w", i, err)
				}
				tb.size[i] = pl.size
				break
			}
			off := base[i]
			for _, t := range layerTensors(&w.Layers[i], lk) {
				copy(tb.hostBytes[off:], t.Data)
				off += alignUp(int64(len(t.Data)))
			}
			tb.size[i] = off - base[i]
		default:
			tiers[i] = tier.TierA
			tb.size[i] = layerSize(&w.Layers[i], lk)
		}
	}
	var src tier.Source
	var verify stream.VerifyMode
	if t := m.opts.TierC; t != nil && tc != nil {
		tb.tc, src, verify, tb.log = t.Store, t.Source, t.Verify, t.Logger
	}
	if err := tb.start(c, m.stream, tiers, src, verify, nslots); err != nil {
		return err
	}
	if s := tb.dev.ringBytes(); s > slotBytes*int64(nslots) {
		return fmt.Errorf("streaming ring of %d bytes, %d slots of %d budgeted", s, nslots, slotBytes)
	}
	return nil
}

// start runs the pipeline for tiers (its layers' sizes, offsets and
// tier-C flags already in tb) on the device c with compute on the stream
// compute: nslots slots and, with a tier-C source, as many staging
// buffers.
func (tb *tierB) start(c devOps, compute cudadrv.Stream, tiers []tier.Tier, src tier.Source, verify stream.VerifyMode, nslots int) error {
	tb.cLayers, tb.bytes = nil, 0
	streamed := 0
	for i, t := range tiers {
		tb.tierC[i] = t == tier.TierC
		if tb.tierC[i] {
			tb.cLayers = append(tb.cLayers, i)
		}
		if t != tier.TierA {
			streamed++
			tb.bytes += tb.size[i]
		}
	}
	var err error
	if tb.dev, err = newStreamDev(c, compute, streamed); err != nil {
		return err
	}
	tb.pipe, err = stream.New(stream.Options{
		Store: tb, Tiers: tiers, Depth: nslots, Source: src, Device: tb.dev, Verify: verify, Logger: tb.log, SlotsOnly: true,
	})
	return err
}

// release frees the streaming resources (tolerating a partial load).
func (tb *tierB) release(c *cudadrv.Ctx) error {
	if tb == nil {
		return nil
	}
	var errs []error
	if tb.dev != nil {
		tb.dev.c = c
		errs = append(errs, tb.dev.Sync())
	}
	if tb.pipe != nil {
		errs = append(errs, tb.pipe.Close())
		tb.pipe = nil
	}
	if tb.dev != nil {
		errs = append(errs, tb.dev.close())
		tb.dev = nil
	}
	errs = append(errs, c.HostUnregister(tb.host))
	if tb.region != nil {
		errs = append(errs, tb.region.Free())
	}
	tb.host, tb.region, tb.hostBytes = nil, nil, nil
	return errors.Join(errs...)
}

// NumLayers implements stream.LayerStore.
func (tb *tierB) NumLayers() int { return len(tb.size) }

// Extent implements stream.LayerStore: a tier-C layer's extent in the
// source; for the others, where the layer sits in host memory (tier B) and
// its size.
func (tb *tierB) Extent(i int) tier.Extent {
	if tb.tierC[i] {
		return tb.tc.Extent(i)
	}
	return tier.Extent{Offset: tb.off[i], Length: tb.size[i]}
}

// Mapped implements stream.LayerStore: a tier-B layer's bytes in pinned
// host memory.
func (tb *tierB) Mapped(i int) ([]byte, error) {
	if tb.tierC[i] || tb.off[i]+tb.size[i] > int64(len(tb.hostBytes)) {
		return nil, fmt.Errorf("layer %d is not in tier B's host memory", i)
	}
	return tb.hostBytes[tb.off[i] : tb.off[i]+tb.size[i]], nil
}

// Verify implements stream.LayerStore with the tier-C store's checksums.
func (tb *tierB) Verify(i int, b []byte) error {
	if tb.tc == nil {
		return fmt.Errorf("layer %d: no tier-C store to verify against", i)
	}
	return tb.tc.Verify(i, b)
}

// Decode implements stream.LayerStore. The GPU computes on the slots
// (stream.Options.SlotsOnly), so the pipeline never decodes.
func (tb *tierB) Decode(i int, _ []byte) (*model.Layer, error) {
	return nil, fmt.Errorf("layer %d: the GPU's streamed layers are not decoded on the host", i)
}

// begin starts a pass on the device goroutine (c current): the pipeline
// marks its start on the compute stream, starts stage 1 for the tier-C
// layers and issues the copies that can go at once. ctx (nil for none)
// cancels stage 1.
func (tb *tierB) begin(ctx context.Context, c devOps) error {
	tb.dev.c = c
	return tb.pipe.Begin(ctx)
}

// acquire asks the pipeline for layer l, in order, every layer (tier A
// too): for a streamed layer it makes the compute stream wait for the
// layer's copy (issuing it first, and waiting for its read, if need be)
// and returns lw rebased onto the slot, with ok set.
func (tb *tierB) acquire(l int, lw layerW) (_ layerW, ok bool, err error) {
	s, err := tb.pipe.Acquire(l)
	if err != nil || s == nil {
		return lw, false, err
	}
	return lw.rebased(s.(*devSlot).ptr), true, nil
}

// done tells the pipeline the compute stream has layer l's kernels: a
// streamed layer's slot is released after them, and the copies that may
// go now are issued.
func (tb *tierB) done(l int) error { return tb.pipe.Done(l) }

// end finishes the pass after the compute stream has drained: it waits
// for the copy stream, stops stage 1 and records the pass's Stats
// (failed: the pass returned an error). It is safe without a pass.
func (tb *tierB) end(c devOps, failed bool) error {
	tb.dev.c = c
	_, err := tb.pipe.Finish(failed)
	return err
}

// devOps is the part of the driver the streaming device drives (a
// *cudadrv.Ctx); an interface so that the pipeline's scheduling on it
// can run against a simulated device in CPU-only tests.
type devOps interface {
	Alloc(n int64) (cudadrv.DevPtr, error)
	Free(p cudadrv.DevPtr) error
	NewEvent(flags uint32) (cudadrv.Event, error)
	DestroyEvent(e cudadrv.Event) error
	HostRegister(b []byte, flags uint32) (*cudadrv.HostMem, error)
	HostUnregister(h *cudadrv.HostMem) error
	WaitEvent(s cudadrv.Stream, e cudadrv.Event) error
	Record(e cudadrv.Event, s cudadrv.Stream) error
	CopyHtoD(dst cudadrv.DevPtr, src []byte, s cudadrv.Stream) error
	EventDone(e cudadrv.Event) (bool, error)
	EventSync(e cudadrv.Event) error
	StreamSync(s cudadrv.Stream) error
	NewStream(flags uint32) (cudadrv.Stream, error)
	DestroyStream(s cudadrv.Stream) error
	Elapsed(start, end cudadrv.Event) (float32, error)
}

// streamDev is the CUDA backend's stream.Device: the ring in device
// memory, copies on a copy stream beside the compute stream, and per
// region of the ring a "loaded" event (copy stream → compute stream) and
// a "free" event (compute stream → copy stream). The host enqueues a pass
// without waiting: the device orders each copy after compute's release
// of the last layer it overwrites and compute after the copy, so the
// copies of the layers the ring holds run while a layer computes. Every call runs on the device goroutine (c is
// the context current there, set at each entry), so the pipeline issues
// copies from compute (IssueOnCompute).
//
// It is also the pipeline's stream.Clock: per streamed layer of a pass,
// events around its copy and around the compute stream's wait for it.
type streamDev struct {
	c       devOps
	compute cudadrv.Stream
	copy    cudadrv.Stream
	ring    *devSlot

	// Timing events: the pass start and the release of its last streamed
	// layer on the compute stream, and per copy number (two per streamed
	// layer: alternate passes number theirs from 0 and from the layer
	// count, stream.Device) the start and end of its copy and the compute
	// stream's wait for it.
	t0, released       cudadrv.Event
	copyStart, copyEnd []cudadrv.Event
	waitStart, waitEnd []cudadrv.Event
	ops                []devOp // per copy number: its copy, done at copyEnd
	marked             bool    // released was recorded in this pass
	// The last Times call's copy numbers: the latest pass's copies
	// [base, base+copies) and waits [base, base+waits), for layerTimes.
	lastBase, lastCopies, lastWaits int
}

// devSlot is device memory with its two events: the ring (which owns
// its memory) or a region of it.
type devSlot struct {
	d            *streamDev
	ptr          cudadrv.DevPtr
	n            int
	region       bool
	loaded, free cudadrv.Event
}

// devOp is copy number n.
type devOp struct {
	d *streamDev
	n int
}

// newStreamDev creates the copy stream and the timing events of a pipeline
// of streamed layers on c, beside the compute stream.
func newStreamDev(c devOps, compute cudadrv.Stream, streamed int) (*streamDev, error) {
	d := &streamDev{c: c, compute: compute, ops: make([]devOp, 2*streamed)}
	var err error
	if d.copy, err = c.NewStream(cudadrv.StreamNonBlocking); err != nil {
		return d, err
	}
	if d.t0, err = c.NewEvent(cudadrv.EventDefault); err != nil {
		return d, err
	}
	if d.released, err = c.NewEvent(cudadrv.EventDefault); err != nil {
		return d, err
	}
	for n := range 2 * streamed {
		d.ops[n] = devOp{d, n}
		for _, evs := range []*[]cudadrv.Event{&d.copyStart, &d.copyEnd, &d.waitStart, &d.waitEnd} {
			e, err := c.NewEvent(cudadrv.EventDefault)
			if err != nil {
				return d, err
			}
			*evs = append(*evs, e)
		}
	}
	return d, nil
}

// close destroys the copy stream and the timing events (the slots are
// freed by the pipeline), tolerating a partial newStreamDev.
func (d *streamDev) close() error {
	var errs []error
	if d.copy != 0 {
		errs = append(errs, d.c.StreamSync(d.copy), d.c.DestroyStream(d.copy))
		d.copy = 0
	}
	evs := append(append(append(append([]cudadrv.Event{d.t0, d.released}, d.copyStart...), d.copyEnd...), d.waitStart...), d.waitEnd...)
	for _, e := range evs {
		if e != 0 {
			errs = append(errs, d.c.DestroyEvent(e))
		}
	}
	d.t0, d.released, d.copyStart, d.copyEnd, d.waitStart, d.waitEnd = 0, 0, nil, nil, nil, nil
	return errors.Join(errs...)
}

// ringBytes is the size of the pipeline's ring (0 without one).
func (d *streamDev) ringBytes() int64 {
	if d.ring == nil {
		return 0
	}
	return int64(d.ring.n)
}

// Name implements stream.Device.
func (d *streamDev) Name() string { return "cuda" }

// AllocSlot implements stream.Device.
func (d *streamDev) AllocSlot(n int) (stream.Slot, error) {
	p, err := d.c.Alloc(int64(n))
	if err != nil {
		return nil, err
	}
	s := &devSlot{d: d, ptr: p, n: n}
	if s.loaded, err = d.c.NewEvent(cudadrv.EventDisableTiming); err == nil {
		s.free, err = d.c.NewEvent(cudadrv.EventDisableTiming)
	}
	if err != nil {
		return nil, errors.Join(err, s.Free())
	}
	if d.ring == nil {
		d.ring = s
	}
	return s, nil
}

// Region implements stream.Device: a part of the ring with events of
// its own.
func (d *streamDev) Region(slot stream.Slot, off, n int) (stream.Slot, error) {
	r := slot.(*devSlot)
	if off < 0 || n <= 0 || off+n > r.n {
		return nil, fmt.Errorf("region [%d, %d) of a %d-byte ring", off, off+n, r.n)
	}
	s := &devSlot{d: d, ptr: r.ptr + cudadrv.DevPtr(off), n: n, region: true}
	var err error
	if s.loaded, err = d.c.NewEvent(cudadrv.EventDisableTiming); err == nil {
		s.free, err = d.c.NewEvent(cudadrv.EventDisableTiming)
	}
	if err != nil {
		return nil, errors.Join(err, s.Free())
	}
	return s, nil
}

// Pin implements stream.Device: the staging buffer is page-locked in
// place, so O_DIRECT and NVMe DMA land where the copy engine reads.
func (d *streamDev) Pin(b []byte) (func() error, error) {
	h, err := d.c.HostRegister(b, 0)
	if err != nil {
		return nil, err
	}
	return func() error { return d.c.HostUnregister(h) }, nil
}

// CopyIn implements stream.Device: on the copy stream, after after's
// "free" event (compute's release of the last layer the copy overwrites),
// between the copy's timing events, followed by the slot's "loaded"
// event.
func (d *streamDev) CopyIn(n int, slot, after stream.Slot, src []byte) (stream.Op, error) {
	s := slot.(*devSlot)
	if n < 0 || n >= len(d.ops) {
		return nil, fmt.Errorf("copy number %d of %d", n, len(d.ops))
	}
	if len(src) > s.n {
		return nil, fmt.Errorf("%d bytes into a %d-byte slot", len(src), s.n)
	}
	if after != nil {
		if err := d.c.WaitEvent(d.copy, after.(*devSlot).free); err != nil {
			return nil, err
		}
	}
	if err := d.c.Record(d.copyStart[n], d.copy); err != nil {
		return nil, err
	}
	if err := d.c.CopyHtoD(s.ptr, src, d.copy); err != nil {
		return nil, err
	}
	if err := d.c.Record(d.copyEnd[n], d.copy); err != nil {
		return nil, err
	}
	if err := d.c.Record(s.loaded, d.copy); err != nil {
		return nil, err
	}
	return &d.ops[n], nil
}

// Await implements stream.Device: the compute stream waits for the slot's
// "loaded" event; the host does not.
func (d *streamDev) Await(n int, slot stream.Slot, _ stream.Op) error {
	if err := d.c.WaitEvent(d.compute, slot.(*devSlot).loaded); err != nil {
		return err
	}
	return d.c.Record(d.waitEnd[n], d.compute)
}

// Release implements stream.Device: the slot's "free" event, after the
// layer's kernels on the compute stream.
func (d *streamDev) Release(slot stream.Slot) error {
	return d.c.Record(slot.(*devSlot).free, d.compute)
}

// Sync implements stream.Device.
func (d *streamDev) Sync() error {
	if d.copy == 0 {
		return nil
	}
	return d.c.StreamSync(d.copy)
}

// IssueOnCompute implements stream.Device: CUDA calls run on the device
// goroutine, which is the one enqueueing the forward pass.
func (d *streamDev) IssueOnCompute() bool { return true }

// Start implements stream.Clock.
func (d *streamDev) Start() error {
	d.marked = false
	return d.c.Record(d.t0, d.compute)
}

// Released implements stream.Clock.
func (d *streamDev) Released() error {
	d.marked = true
	return d.c.Record(d.released, d.compute)
}

// Waiting implements stream.Clock. Recorded before any wait for the read,
// so the stall also counts the time the compute stream ran dry while the
// host waited for stage 1 (the event completes when the stream drains,
// the wait ends only once the copy is enqueued and done).
func (d *streamDev) Waiting(n int) error { return d.c.Record(d.waitStart[n], d.compute) }

// Times implements stream.Clock: copy busy is each copy's duration, copy
// stall the copy stream's idle time before each copy (waiting for its
// read, its slot or the host; none before a copy carried over from the
// previous pass, which started before t0); compute stall is the time the
// compute stream waited for copies; lead runs from t0 to the first wait,
// span from there to the last streamed layer's release.
func (d *streamDev) Times(base, copies, waits int) (stream.ClockTimes, error) {
	var ct stream.ClockTimes
	if base < 0 || base+max(copies, waits) > len(d.ops) {
		return ct, fmt.Errorf("times of copies [%d, %d) and waits [%d, %d) of %d", base, base+copies, base, base+waits, len(d.ops))
	}
	d.lastBase, d.lastCopies, d.lastWaits = base, copies, waits
	ms := d.elapsed
	prev := d.t0
	for n := base; n < base+copies; n++ {
		idle, err := ms(prev, d.copyStart[n])
		if err != nil {
			return ct, err
		}
		b, err := ms(d.copyStart[n], d.copyEnd[n])
		if err != nil {
			return ct, err
		}
		ct.CopyStall += max(0, idle)
		ct.CopyBusy += b
		prev = d.copyEnd[n]
	}
	for n := base; n < base+waits; n++ {
		w, err := ms(d.waitStart[n], d.waitEnd[n])
		if err != nil {
			return ct, err
		}
		ct.ComputeStall += w
	}
	if waits > 0 {
		var err error
		if ct.Lead, err = ms(d.t0, d.waitStart[base]); err != nil {
			return ct, err
		}
		if d.marked {
			if ct.Span, err = ms(d.waitStart[base], d.released); err != nil {
				return ct, err
			}
		}
	}
	return ct, nil
}

// elapsed is the device's time from event a to event b.
func (d *streamDev) elapsed(a, b cudadrv.Event) (time.Duration, error) {
	v, err := d.c.Elapsed(a, b)
	return time.Duration(float64(v) * 1e6), err
}

// layerTimes is, per streamed layer of the latest pass Times was asked
// about (in pipeline order), its copy's start and end and compute's wait
// for it, on the device's clock from the pass's start: a copy carried
// over from the pass before starts before it (a negative time).
func (d *streamDev) layerTimes() ([]LayerTimes, error) {
	out := make([]LayerTimes, max(d.lastCopies, d.lastWaits))
	since := func(e cudadrv.Event) (time.Duration, error) { return d.elapsed(d.t0, e) }
	for i := range out {
		n := d.lastBase + i
		var err error
		if i < d.lastCopies {
			if out[i].CopyStart, err = since(d.copyStart[n]); err != nil {
				return nil, err
			}
			if out[i].CopyEnd, err = since(d.copyEnd[n]); err != nil {
				return nil, err
			}
		}
		if i < d.lastWaits {
			if out[i].WaitStart, err = since(d.waitStart[n]); err != nil {
				return nil, err
			}
			if out[i].WaitEnd, err = since(d.waitEnd[n]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// LayerTimes is one streamed layer in a pass: when its copy ran and when
// compute reached it and went on, on the device's clock from the pass's
// start; where the CPU computed its FFN, how long the host waited for the
// GPU to hand the hidden state over (the layer's attention and the copy
// out) and how long the FFN took, on the host's clock.
type LayerTimes struct {
	Layer     int           `json:"layer"`
	CPU       bool          `json:"cpu"`
	CopyStart time.Duration `json:"copy_start_ns"`
	CopyEnd   time.Duration `json:"copy_end_ns"`
	WaitStart time.Duration `json:"wait_start_ns"`
	WaitEnd   time.Duration `json:"wait_end_ns"`
	Hand      time.Duration `json:"hand_ns"`
	FFN       time.Duration `json:"ffn_ns"`
}

// LastPassLayers is the timeline of the latest streamed pass, one entry
// per streamed layer in order: what a schedule's diagnosis reads (bench
// engine --timeline). ok is false without streamed layers or before a
// pass.
func (m *Model) LastPassLayers() (_ []LayerTimes, ok bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tb == nil || m.tb.dev == nil || m.tb.dev.lastCopies+m.tb.dev.lastWaits == 0 {
		return nil, false, nil
	}
	var lt []LayerTimes
	err = m.dev.Do(func(*cudadrv.Ctx) error {
		var err error
		lt, err = m.tb.dev.layerTimes()
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("the last pass's layer times: %w", err)
	}
	i := 0
	for l, t := range m.tb.pipe.Tiers() {
		if t == tier.TierA || i >= len(lt) {
			continue
		}
		lt[i].Layer = l
		if h := m.hy; h != nil && h.on[l] {
			lt[i].CPU, lt[i].Hand, lt[i].FFN = true, h.hand[l], h.ffn[l]
		}
		i++
	}
	return lt, true, nil
}

// Len implements stream.Slot.
func (s *devSlot) Len() int { return s.n }

// Host implements stream.Slot: device memory is not host-visible.
func (s *devSlot) Host() []byte { return nil }

// Free implements stream.Slot.
func (s *devSlot) Free() error {
	var errs []error
	for _, e := range []cudadrv.Event{s.loaded, s.free} {
		if e != 0 {
			errs = append(errs, s.d.c.DestroyEvent(e))
		}
	}
	if !s.region && s.ptr != 0 {
		errs = append(errs, s.d.c.Free(s.ptr))
		if s.d.ring == s {
			s.d.ring = nil
		}
	}
	s.loaded, s.free, s.ptr = 0, 0, 0
	return errors.Join(errs...)
}

// Wait implements stream.Op.
func (o *devOp) Wait() error { return o.d.c.EventSync(o.d.copyEnd[o.n]) }

// Done implements stream.Op.
func (o *devOp) Done() (bool, error) { return o.d.c.EventDone(o.d.copyEnd[o.n]) }

var (
	_ stream.Device = (*streamDev)(nil)
	_ stream.Clock  = (*streamDev)(nil)
)

// StreamedBytes is how many bytes cross PCIe per forward pass (the
// streamed layers, tiers B and C), 0 when every layer is resident.
func (m *Model) StreamedBytes() int64 {
	if m.tb == nil {
		return 0
	}
	return m.tb.bytes
}

// TierCBytes is how many bytes stage 1 reads from the tier-C source per
// forward pass (also counted in StreamedBytes).
func (m *Model) TierCBytes() int64 {
	if m.tb == nil {
		return 0
	}
	var n int64
	for _, l := range m.tb.cLayers {
		n += m.tb.size[l]
	}
	return n
}

// PipelineStats returns the streaming pipeline's counters, in engine/stream's
// form so the engine reports GPU and CPU streaming alike: total summed over
// every pass since Load, last for the most recent pass. Read is stage 1
// (tier C: storage → pinned staging, host time), Copy stage 2 (host →
// device slot, device time from events on the copy stream), Compute stage
// 3 (its stall is the device time the compute stream waited for copies).
// ok is false when every layer is resident.
func (m *Model) PipelineStats() (total, last stream.Stats, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tb == nil || m.tb.pipe == nil {
		return stream.Stats{}, stream.Stats{}, false
	}
	return m.tb.pipe.Stats(), m.tb.pipe.LastPass(), true
}
