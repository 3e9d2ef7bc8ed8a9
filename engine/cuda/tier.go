package cuda

import (
	"fmt"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/kernels"
	kcuda "github.com/strata-llm/strata/kernels/cuda"
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

func matrix(t *model.Tensor, p kcuda.DevPtr) kernels.Matrix {
	return kernels.Matrix{Type: t.Type, Rows: t.Rows, Cols: t.Cols, Ptr: p}
}

// layerAt describes a layer packed at base (0 for a streamed layer, whose
// pointers are then offsets to rebase onto its slot).
func layerAt(L *model.Layer, gemma bool, base kcuda.DevPtr) layerW {
	var lw layerW
	off := int64(0)
	at := func(t *model.Tensor) kcuda.DevPtr {
		p := base.Add(off)
		off += alignUp(int64(len(t.Data)))
		return p
	}
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

// rebased moves a streamed layer's offsets onto the slot at base.
func (lw layerW) rebased(base kcuda.DevPtr) layerW {
	for _, p := range []*kcuda.DevPtr{&lw.attnNorm, &lw.postAttnNorm, &lw.ffnNorm, &lw.postFFNNorm,
		&lw.q.Ptr, &lw.k.Ptr, &lw.v.Ptr, &lw.o.Ptr, &lw.gate.Ptr, &lw.up.Ptr, &lw.down.Ptr} {
		*p = base.Add(int64(*p))
	}
	return lw
}

// tierB holds the streamed layers: their packed bytes in pinned host
// memory, the k device slots they rotate through, the copy stream and,
// per slot, a "loaded" event (copy stream → compute stream) and a "free"
// event (compute stream → copy stream). The pipeline is ordered entirely
// on the device: the host enqueues a whole pass without waiting.
type tierB struct {
	host      *kcuda.HostMem
	off, size []int64 // per layer: offset and size in host
	order     []int   // streamed layers, ascending
	idx       []int   // per layer: index in order, -1 when resident
	slots     []kcuda.DevPtr
	slotBytes int64
	copy      kcuda.Stream
	loaded    []kcuda.Event
	free      []kcuda.Event
	bytes     int64 // streamed per pass
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

// loadTierB packs the streamed layers into pinned host memory and
// allocates the slots, copy stream and events.
func (m *Model) loadTierB(c *kcuda.Ctx, w *model.Weights, streamed []bool, base []int64, hostTotal, slotBytes int64, nslots int) error {
	gemma := m.Config.Arch == model.ArchGemma2
	tb := &tierB{slotBytes: slotBytes, off: base, size: make([]int64, len(streamed)), idx: make([]int, len(streamed))}
	m.tb = tb
	var err error
	if tb.host, err = c.HostAlloc(int(hostTotal), 0); err != nil {
		return fmt.Errorf("tier B: %w", err)
	}
	hb := tb.host.Bytes()
	for i, s := range streamed {
		tb.idx[i] = -1
		if !s {
			continue
		}
		tb.idx[i] = len(tb.order)
		tb.order = append(tb.order, i)
		off := base[i]
		for _, t := range layerTensors(&w.Layers[i], gemma) {
			copy(hb[off:], t.Data)
			off += alignUp(int64(len(t.Data)))
		}
		tb.size[i] = off - base[i]
		tb.bytes += tb.size[i]
	}
	if tb.copy, err = c.NewStream(kcuda.StreamNonBlocking); err != nil {
		return err
	}
	for range nslots {
		p, err := c.Alloc(slotBytes)
		if err != nil {
			return fmt.Errorf("tier B slot of %d bytes: %w", slotBytes, err)
		}
		tb.slots = append(tb.slots, p)
		for _, evs := range []*[]kcuda.Event{&tb.loaded, &tb.free} {
			e, err := c.NewEvent(kcuda.EventDisableTiming)
			if err != nil {
				return err
			}
			*evs = append(*evs, e)
		}
	}
	return nil
}

// release frees tier B's resources (tolerating a partial load).
func (tb *tierB) release(c *kcuda.Ctx) error {
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
	for _, e := range append(tb.loaded, tb.free...) {
		keep(c.DestroyEvent(e))
	}
	keep(c.FreeHost(tb.host))
	return first
}

// streamer runs one pass's side of the pipeline.
type streamer struct {
	tb      *tierB
	c       *kcuda.Ctx
	compute kcuda.Stream
	next    int // index in order of the next copy to issue
}

// issue starts the copy of the next streamed layer into its slot once the
// compute stream has finished with the slot's previous layer.
func (s *streamer) issue() error {
	tb := s.tb
	if s.next >= len(tb.order) {
		return nil
	}
	l := tb.order[s.next]
	j := s.next % len(tb.slots)
	s.next++
	if err := s.c.WaitEvent(tb.copy, tb.free[j]); err != nil {
		return err
	}
	src := tb.host.Bytes()[tb.off[l] : tb.off[l]+tb.size[l]]
	if err := s.c.CopyHtoD(tb.slots[j], src, tb.copy); err != nil {
		return fmt.Errorf("streaming layer %d: %w", l, err)
	}
	return s.c.Record(tb.loaded[j], tb.copy)
}

// start fills the first k slots.
func (s *streamer) start() error {
	for range s.tb.slots {
		if err := s.issue(); err != nil {
			return err
		}
	}
	return nil
}

// acquire makes the compute stream wait for layer l's copy and returns its
// weights in the slot.
func (s *streamer) acquire(l int, lw layerW) (layerW, int, error) {
	j := s.tb.idx[l] % len(s.tb.slots)
	if err := s.c.WaitEvent(s.compute, s.tb.loaded[j]); err != nil {
		return lw, j, err
	}
	return lw.rebased(s.tb.slots[j]), j, nil
}

// done marks slot j free after layer l's kernels and starts the next copy.
func (s *streamer) done(j int) error {
	if err := s.c.Record(s.tb.free[j], s.compute); err != nil {
		return err
	}
	return s.issue()
}

// StreamedBytes is how many bytes cross PCIe per forward pass (the
// streamed layers), 0 when every layer is resident.
func (m *Model) StreamedBytes() int64 {
	if m.tb == nil {
		return 0
	}
	return m.tb.bytes
}
