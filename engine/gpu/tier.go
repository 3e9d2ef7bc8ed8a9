package gpu

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// alignUp rounds a tensor's size up to the 256 bytes cuMemAlloc aligns to,
// so every tensor of a packed layer starts aligned (the kernels load 16
// bytes at a time).
func alignUp(n int64) int64 { return (n + 255) &^ 255 }

// layerTensors lists a layer's tensors in packing order (llama has no
// post-norms).
func layerTensors(L *model.Layer, gemma bool) []*model.Tensor {
	ts := []*model.Tensor{&L.AttnNorm, &L.Q, &L.K, &L.V, &L.O}
	if gemma {
		ts = append(ts, &L.PostAttnNorm)
	}
	ts = append(ts, &L.FFNNorm, &L.Gate, &L.Up, &L.Down)
	if gemma {
		ts = append(ts, &L.PostFFNNorm)
	}
	return ts
}

// layerSize is the packed size of a layer.
func layerSize(L *model.Layer, gemma bool) int64 {
	var n int64
	for _, t := range layerTensors(L, gemma) {
		n += alignUp(int64(len(t.Data)))
	}
	return n
}

func matrix(t *model.Tensor, p cudadrv.DevPtr) kernels.Matrix {
	return kernels.Matrix{Type: t.Type, Rows: t.Rows, Cols: t.Cols, Ptr: p}
}

// layerWith describes layer L with each tensor at the address at gives
// it; at is called in layerTensors order.
func layerWith(L *model.Layer, gemma bool, at func(*model.Tensor) cudadrv.DevPtr) layerW {
	var lw layerW
	lw.attnNorm = at(&L.AttnNorm)
	lw.q = matrix(&L.Q, at(&L.Q))
	lw.k = matrix(&L.K, at(&L.K))
	lw.v = matrix(&L.V, at(&L.V))
	lw.o = matrix(&L.O, at(&L.O))
	if gemma {
		lw.postAttnNorm = at(&L.PostAttnNorm)
	}
	lw.ffnNorm = at(&L.FFNNorm)
	lw.gate = matrix(&L.Gate, at(&L.Gate))
	lw.up = matrix(&L.Up, at(&L.Up))
	lw.down = matrix(&L.Down, at(&L.Down))
	if gemma {
		lw.postFFNNorm = at(&L.PostFFNNorm)
	}
	return lw
}

// layerAt describes a layer packed at base (0 for a streamed layer, whose
// pointers are then offsets to rebase onto its slot).
func layerAt(L *model.Layer, gemma bool, base cudadrv.DevPtr) layerW {
	off := int64(0)
	return layerWith(L, gemma, func(t *model.Tensor) cudadrv.DevPtr {
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
	return lw
}

// tierB holds the streamed layers (tiers B and C) and the pipeline that
// moves them: tier-B layers' packed bytes in pinned host memory, tier C's
// stage-1 reader and its pinned staging buffers, the k device slots both
// rotate through, the copy stream and, per slot, a "loaded" event (copy
// stream → compute stream) and a "free" event (compute stream → copy
// stream). The device orders everything after stage 1: the host enqueues
// a pass without waiting, except for a tier-C layer whose read has not
// finished when its copy must be issued.
type tierB struct {
	host      *cudadrv.HostMem // tier-B layers, packed; nil without tier B
	hostBytes []byte           // host's bytes
	off, size []int64          // per layer: offset in host (tier B) and bytes moved per pass (B, C)
	order     []int            // streamed layers, ascending
	idx       []int            // per layer: index in order, -1 when resident
	tierC     []bool           // per layer: on tier C
	slots     []cudadrv.DevPtr
	slotBytes int64
	copy      cudadrv.Stream
	loaded    []cudadrv.Event
	free      []cudadrv.Event
	bytes     int64 // streamed per pass (tiers B and C)

	// Tier C: stage 1 and the registrations of its staging buffers.
	rd      *reader
	cLayers []int
	pinned  []*cudadrv.HostMem

	// Timing events (for Stats): the pass start on the compute stream,
	// and per streamed layer (index in order) the start and end of its
	// copy and the compute stream's wait for it.
	t0                   cudadrv.Event
	copyStart, copyEnd   []cudadrv.Event
	waitStart, waitEnd   []cudadrv.Event
	layerBytes, resident int64 // every layer's bytes (what compute reads); the tier-A part

	cur         *streamer // the pass in flight
	last, total stream.Stats
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

// loadTierB packs the tier-B layers into pinned host memory, sets up
// tier C's reader and pins its staging buffers, and allocates the slots,
// copy stream and events.
func (m *Model) loadTierB(ctx context.Context, c *cudadrv.Ctx, w *model.Weights, streamed []bool, tc []*tierCLayer, base []int64, hostTotal, slotBytes int64, nslots int) error {
	gemma := m.Config.Arch == model.ArchGemma2
	n := len(streamed)
	tb := &tierB{slotBytes: slotBytes, off: base, size: make([]int64, n), idx: make([]int, n), tierC: make([]bool, n)}
	m.tb = tb
	var err error
	if hostTotal > 0 {
		if tb.host, err = c.HostAlloc(int(hostTotal), 0); err != nil {
			return fmt.Errorf("tier B: %w", err)
		}
		tb.hostBytes = tb.host.Bytes()
	}
	var maxC int64
	for i, s := range streamed {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tier B layer %d: %w", i, err)
		}
		tb.idx[i] = -1
		switch {
		case tc != nil && tc[i] != nil:
			tb.tierC[i] = true
			tb.size[i] = tc[i].ext.Length
			tb.cLayers = append(tb.cLayers, i)
			maxC = max(maxC, tb.size[i])
		case s:
			if pl := m.pk.layer(i); pl != nil { // packed bf16 (packed.go)
				if err := pl.write(tb.hostBytes[base[i]:], &w.Layers[i], gemma); err != nil {
					return fmt.Errorf("tier B layer %d: %w", i, err)
				}
				tb.size[i] = pl.size
				break
			}
			off := base[i]
			for _, t := range layerTensors(&w.Layers[i], gemma) {
				copy(tb.hostBytes[off:], t.Data)
				off += alignUp(int64(len(t.Data)))
			}
			tb.size[i] = off - base[i]
		default:
			size := layerSize(&w.Layers[i], gemma)
			tb.layerBytes += size
			tb.resident += size
			continue
		}
		tb.idx[i] = len(tb.order)
		tb.order = append(tb.order, i)
		tb.bytes += tb.size[i]
		tb.layerBytes += tb.size[i]
	}
	if tb.copy, err = c.NewStream(cudadrv.StreamNonBlocking); err != nil {
		return err
	}
	newEvent := func(evs *[]cudadrv.Event, flags uint32) error {
		e, err := c.NewEvent(flags)
		if err == nil {
			*evs = append(*evs, e)
		}
		return err
	}
	for range nslots {
		p, err := c.Alloc(slotBytes)
		if err != nil {
			return fmt.Errorf("streaming slot of %d bytes: %w", slotBytes, err)
		}
		tb.slots = append(tb.slots, p)
		for _, evs := range []*[]cudadrv.Event{&tb.loaded, &tb.free} {
			if err := newEvent(evs, cudadrv.EventDisableTiming); err != nil {
				return err
			}
		}
	}
	if tb.t0, err = c.NewEvent(cudadrv.EventDefault); err != nil {
		return err
	}
	for range tb.order {
		for _, evs := range []*[]cudadrv.Event{&tb.copyStart, &tb.copyEnd, &tb.waitStart, &tb.waitEnd} {
			if err := newEvent(evs, cudadrv.EventDefault); err != nil {
				return err
			}
		}
	}
	if len(tb.cLayers) > 0 {
		if tb.rd, err = newReader(m.opts.TierC, n, nslots, maxC); err != nil {
			return err
		}
		for i, b := range tb.rd.staging {
			h, err := c.HostRegister(b.Bytes(), 0)
			if err != nil {
				return fmt.Errorf("pinning tier-C staging buffer %d (%d bytes from the source): %w", i, b.Len(), err)
			}
			tb.pinned = append(tb.pinned, h)
		}
	}
	return nil
}

// release frees the streaming resources (tolerating a partial load).
func (tb *tierB) release(c *cudadrv.Ctx) error {
	if tb == nil {
		return nil
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if tb.copy != 0 {
		keep(c.StreamSync(tb.copy))
		keep(c.DestroyStream(tb.copy))
	}
	for _, p := range tb.slots {
		keep(c.Free(p))
	}
	evs := append(append(append(append(append(append([]cudadrv.Event{tb.t0}, tb.loaded...), tb.free...), tb.copyStart...), tb.copyEnd...), tb.waitStart...), tb.waitEnd...)
	for _, e := range evs {
		keep(c.DestroyEvent(e))
	}
	keep(c.FreeHost(tb.host))
	for _, h := range tb.pinned {
		keep(c.HostUnregister(h))
	}
	tb.pinned = nil
	if tb.rd != nil {
		keep(tb.rd.free())
	}
	return first
}

// devOps is the part of the driver the streaming pipeline drives (a
// *cudadrv.Ctx); an interface so that its scheduling can run against a
// simulated device in CPU-only tests.
type devOps interface {
	WaitEvent(s cudadrv.Stream, e cudadrv.Event) error
	Record(e cudadrv.Event, s cudadrv.Stream) error
	CopyHtoD(dst cudadrv.DevPtr, src []byte, s cudadrv.Stream) error
	EventDone(e cudadrv.Event) (bool, error)
	EventSync(e cudadrv.Event) error
	StreamSync(s cudadrv.Stream) error
	Elapsed(start, end cudadrv.Event) (float32, error)
}

// streamer runs one pass's side of the pipeline on the device goroutine.
// Copies are issued in layer order, slot n%k for the n-th streamed layer,
// and only once compute has released the slot's previous layer (its
// "free" event is recorded): issued < released+k. A tier-B copy is issued
// as soon as that holds; a tier-C copy also needs stage 1 to have read
// the layer, which the streamer checks without blocking whenever it
// pumps, and waits for only when compute needs the layer next. Staging
// buffers go back to stage 1 once the copy out of them has completed.
type streamer struct {
	tb       *tierB
	c        devOps
	compute  cudadrv.Stream
	ctx      context.Context
	start    time.Time
	rp       *readPass // nil without tier C
	issued   int       // copies issued (index in order)
	released int       // slots released by compute
	acquired int       // layers compute waited for
	got      []*staged // by index in order: what stage 1 delivered
	pending  []pend    // staging buffers being copied out, oldest first
}

// pend is a staging buffer s whose copy (of the n-th streamed layer) is
// in flight.
type pend struct{ s, n int }

// begin starts a pass: it records the start event, starts stage 1 for the
// tier-C layers and issues the copies that can go at once. ctx (nil for
// none) cancels stage 1 and waits for it.
func (tb *tierB) begin(ctx context.Context, c devOps, compute cudadrv.Stream) (*streamer, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	s := &streamer{tb: tb, c: c, compute: compute, ctx: ctx, start: time.Now(), got: make([]*staged, len(tb.order))}
	tb.cur = s
	if err := c.Record(tb.t0, compute); err != nil {
		return nil, err
	}
	if tb.rd != nil {
		s.rp = tb.rd.begin(ctx, tb.cLayers, len(tb.idx))
	}
	return s, s.pump(-1)
}

// pump issues every copy that may go now, in order. need >= 0 is the
// index of a layer compute needs next: its read is waited for, and its
// read error returned.
func (s *streamer) pump(need int) error {
	tb := s.tb
	k := len(tb.slots)
	for s.issued < len(tb.order) && s.issued < s.released+k {
		n := s.issued
		l := tb.order[n]
		var src []byte
		stg := -1
		if tb.tierC[l] {
			st, err := s.staged(n, n == need)
			if err != nil {
				return err
			}
			if st == nil {
				break // still reading
			}
			if st.err != nil {
				if n == need {
					return st.err
				}
				break // reported when compute gets there
			}
			stg = st.s
			src = tb.rd.staging[stg].Bytes()[:tb.size[l]]
		} else {
			src = tb.hostBytes[tb.off[l] : tb.off[l]+tb.size[l]]
		}
		j := n % k
		if err := s.c.WaitEvent(tb.copy, tb.free[j]); err != nil {
			return err
		}
		if err := s.c.Record(tb.copyStart[n], tb.copy); err != nil {
			return err
		}
		if err := s.c.CopyHtoD(tb.slots[j], src, tb.copy); err != nil {
			return fmt.Errorf("streaming layer %d: %w", l, err)
		}
		if err := s.c.Record(tb.copyEnd[n], tb.copy); err != nil {
			return err
		}
		if err := s.c.Record(tb.loaded[j], tb.copy); err != nil {
			return err
		}
		if stg >= 0 {
			s.pending = append(s.pending, pend{stg, n})
		}
		s.issued++
	}
	if need >= 0 && s.issued <= need {
		return fmt.Errorf("layer %d: its copy cannot be issued (%d of %d issued, %d slots released)", tb.order[need], s.issued, len(tb.order), s.released)
	}
	return nil
}

// staged returns what stage 1 delivered for the n-th streamed layer: nil
// when it is still being read and block is false. Blocking, it keeps
// handing staging buffers back as their copies complete (stage 1 may be
// waiting for one) until the layer arrives.
func (s *streamer) staged(n int, block bool) (*staged, error) {
	if g := s.got[n]; g != nil {
		return g, nil
	}
	l := s.tb.order[n]
	ch := s.rp.ready[l]
	for {
		if err := s.recycle(false); err != nil {
			return nil, err
		}
		select {
		case g := <-ch:
			s.got[n] = &g
			return &g, nil
		default:
		}
		if !block {
			return nil, nil
		}
		if len(s.pending) > 0 {
			// The oldest copy waits only for compute already enqueued.
			if err := s.recycle(true); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case g := <-ch:
			s.got[n] = &g
			return &g, nil
		case <-s.ctx.Done():
			return nil, fmt.Errorf("layer %d: waiting for its read: %w", l, s.ctx.Err())
		}
	}
}

// recycle hands the staging buffers whose copies have completed back to
// stage 1; with wait set it first waits for the oldest copy.
func (s *streamer) recycle(wait bool) error {
	if wait && len(s.pending) > 0 {
		if err := s.c.EventSync(s.tb.copyEnd[s.pending[0].n]); err != nil {
			return err
		}
	}
	for len(s.pending) > 0 {
		p := s.pending[0]
		done, err := s.c.EventDone(s.tb.copyEnd[p.n])
		if err != nil {
			return err
		}
		if !done {
			break
		}
		s.rp.release(p.s)
		s.pending = s.pending[1:]
	}
	return nil
}

// acquire makes the compute stream wait for layer l's copy (issuing it
// first, and waiting for its read, if need be) and returns its weights in
// the slot.
func (s *streamer) acquire(l int, lw layerW) (layerW, int, error) {
	tb := s.tb
	n := tb.idx[l]
	j := n % len(tb.slots)
	// Recorded before any wait for the read, so the stall also counts
	// the time the compute stream ran dry while the host waited for
	// stage 1 (the event completes when the stream drains, the wait ends
	// only once the copy is enqueued and done).
	if err := s.c.Record(tb.waitStart[n], s.compute); err != nil {
		return lw, j, err
	}
	if s.issued <= n {
		if err := s.pump(n); err != nil {
			return lw, -1, err
		}
	}
	if err := s.c.WaitEvent(s.compute, tb.loaded[j]); err != nil {
		return lw, j, err
	}
	if err := s.c.Record(tb.waitEnd[n], s.compute); err != nil {
		return lw, j, err
	}
	s.acquired++
	return lw.rebased(tb.slots[j]), j, nil
}

// done marks slot j free after its layer's kernels and issues the copies
// that may go now.
func (s *streamer) done(j int) error {
	if err := s.c.Record(s.tb.free[j], s.compute); err != nil {
		return err
	}
	s.released++
	return s.pump(-1)
}

// end finishes the pass after the compute stream has drained: it waits
// for the copy stream, stops stage 1 and records the pass's Stats
// (failed: the pass returned an error). It is safe without a pass.
func (tb *tierB) end(c devOps, failed bool) error {
	err := c.StreamSync(tb.copy)
	s := tb.cur
	tb.cur = nil
	if s == nil {
		return err
	}
	if s.rp != nil {
		s.rp.end()
	}
	st := stream.Stats{Passes: 1, Wall: time.Since(s.start), ResidentBytes: tb.resident}
	if failed || err != nil || s.acquired != len(tb.order) {
		st.Failed = 1
	}
	if rp := s.rp; rp != nil {
		st.Read = stream.StageStats{Layers: rp.n, Bytes: rp.bytes, Busy: rp.busy, Stall: rp.stall}
		st.Verify = rp.verify
	}
	if err == nil {
		// The counters are instrumentation: a pass that computed stays
		// good if its timing events cannot be read.
		_ = s.deviceTimes(&st)
	}
	var pass stream.Stats
	pass.Add(st)
	tb.last = pass
	tb.total.Add(st)
	return err
}

// deviceTimes fills the copy and compute stages from the pass's timing
// events: copy busy is each copy's duration, copy stall the copy stream's
// idle time before each copy (waiting for its read, its slot or the
// host); compute stall is the time the compute stream waited for
// copies, and compute busy the rest of the pass.
func (s *streamer) deviceTimes(st *stream.Stats) error {
	tb := s.tb
	ms := func(a, b cudadrv.Event) (time.Duration, error) {
		v, err := s.c.Elapsed(a, b)
		return time.Duration(float64(v) * 1e6), err
	}
	var cp, cmp stream.StageStats
	prev := tb.t0
	for n := range s.issued {
		idle, err := ms(prev, tb.copyStart[n])
		if err != nil {
			return err
		}
		busy, err := ms(tb.copyStart[n], tb.copyEnd[n])
		if err != nil {
			return err
		}
		cp.Stall += max(0, idle)
		cp.Busy += busy
		cp.Layers++
		cp.Bytes += tb.size[tb.order[n]]
		prev = tb.copyEnd[n]
	}
	for n := range s.acquired {
		w, err := ms(tb.waitStart[n], tb.waitEnd[n])
		if err != nil {
			return err
		}
		cmp.Stall += w
	}
	if st.Failed == 0 {
		cmp.Layers = int64(len(tb.idx))
		cmp.Bytes = tb.layerBytes
	}
	cmp.Busy = max(0, st.Wall-cmp.Stall)
	st.Copy, st.Compute, st.StreamedBytes = cp, cmp, cp.Bytes
	return nil
}

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
	if m.tb == nil {
		return stream.Stats{}, stream.Stats{}, false
	}
	return m.tb.total, m.tb.last, true
}
