package gpu

import (
	"fmt"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Lossless packing of streamed bf16 layers (Options.PackBF16).
//
// A tier-B layer's bf16 matrices are stored in pinned host memory in
// engine/quant's packed bf16 format (about 0.76 of their bytes), copied
// packed into the device slot, and decoded on the compute stream into a
// scratch buffer just before the launches that read them: q, k, v and o
// after the layer's copy has landed, gate and up before the FFN, down
// before its GEMV. Each phase reuses the scratch from its start (the
// stream orders the previous phase's reads first), so the scratch is the
// largest phase: gate and up, 224 MiB on the 8b shape. Decoded values are
// bit-identical, so the logits are those of the unpacked streamed path.

// packedMat is one packed matrix of a layer: its offset in the layer (as
// in host memory and in the slot), values and packed bytes.
type packedMat struct {
	off, n, size int64
}

// packedLayer is a tier-B layer's packed layout: size is its bytes in host
// memory and in a slot; mats are indexed as unpackOrder (n == 0: stored
// raw).
type packedLayer struct {
	size int64
	mats [7]packedMat
}

// packing holds every packed layer and the device scratch they decode
// into. A nil *packing packs nothing.
type packing struct {
	layers   []*packedLayer // per layer; nil: raw
	scratchN int64
	scratch  cudadrv.DevPtr
}

// layerMats lists a layer's matrices in the order of packedLayer.mats.
func layerMats(L *model.Layer) [7]*model.Tensor {
	return [7]*model.Tensor{&L.Q, &L.K, &L.V, &L.O, &L.Gate, &L.Up, &L.Down}
}

// unpackPhases are the matrices (indices into packedLayer.mats) each
// forward hook decodes together.
var unpackPhases = [3][]int{{0, 1, 2, 3}, {4, 5}, {6}}

// The forward hooks (unpack's phase).
const (
	unpackAttn   = 0 // q, k, v, o: after the layer's copy
	unpackFFNIn  = 1 // gate, up
	unpackFFNOut = 2 // down
)

// packable reports whether t is worth packing: bf16 in whole blocks of the
// codec, and packed smaller than raw (returned: the packed size).
func packable(t *model.Tensor) (int64, bool, error) {
	n := int64(len(t.Data)) / 2
	if t.Type != quant.BF16 || n == 0 || n%quant.BF16PackBlock != 0 || n > quant.BF16PackMaxElems {
		return 0, false, nil
	}
	l, err := quant.BF16PackedLayout(t.Data)
	if err != nil {
		return 0, false, fmt.Errorf("packing %s: %w", t.Name, err)
	}
	return l.Size, l.Size < int64(len(t.Data)), nil
}

// planLayer lays out layer L with its packable matrices packed; nil when
// none packs.
func planLayer(L *model.Layer, lk layerKind) (*packedLayer, int64, error) {
	pl := &packedLayer{}
	mats := layerMats(L)
	packedAny := false
	var off int64
	for _, t := range layerTensors(L, lk) {
		size := int64(len(t.Data))
		for j, m := range mats {
			if m != t {
				continue
			}
			ps, ok, err := packable(t)
			if err != nil {
				return nil, 0, err
			}
			if ok {
				pl.mats[j] = packedMat{off: off, n: size / 2, size: ps}
				size, packedAny = ps, true
			}
		}
		off += alignUp(size)
	}
	pl.size = off
	if !packedAny {
		return nil, 0, nil
	}
	var scratch int64
	for _, ph := range unpackPhases {
		var s int64
		for _, j := range ph {
			if pl.mats[j].n > 0 {
				s += alignUp(2 * pl.mats[j].n)
			}
		}
		scratch = max(scratch, s)
	}
	return pl, scratch, nil
}

// planPacking plans the packed layout of every tier-B layer (streamed and
// not on tier C) when Options.PackBF16 is set; nil otherwise or when
// nothing packs.
func (m *Model) planPacking(w *model.Weights, streamed []bool, tc []*tierCLayer) (*packing, error) {
	if !m.opts.PackBF16 {
		return nil, nil
	}
	lk := kindOf(&m.Config)
	pk := &packing{layers: make([]*packedLayer, len(w.Layers))}
	packedAny := false
	for i, s := range streamed {
		if !s || (tc != nil && tc[i] != nil) {
			continue
		}
		pl, scratch, err := planLayer(&w.Layers[i], lk)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if pl != nil {
			pk.layers[i], packedAny = pl, true
			pk.scratchN = max(pk.scratchN, scratch)
		}
	}
	if !packedAny {
		return nil, nil
	}
	return pk, nil
}

// layer returns layer i's packed layout, nil when it is stored raw.
func (pk *packing) layer(i int) *packedLayer {
	if pk == nil {
		return nil
	}
	return pk.layers[i]
}

// scratchBytes is the decode scratch's size (0 without packing).
func (pk *packing) scratchBytes() int64 {
	if pk == nil {
		return 0
	}
	return pk.scratchN
}

// layerAt describes a packed streamed layer at slot offsets (base 0, as
// layerAt for a streamed layer): packed matrices point at their blobs.
func (pl *packedLayer) layerAt(L *model.Layer, lk layerKind) layerW {
	mats := layerMats(L)
	var off int64
	return layerWith(L, lk, func(t *model.Tensor) cudadrv.DevPtr {
		p := cudadrv.DevPtr(off)
		size := int64(len(t.Data))
		for j, m := range mats {
			if m == t && pl.mats[j].n > 0 {
				size = pl.mats[j].size
			}
		}
		off += alignUp(size)
		return p
	})
}

// write packs layer L into dst (its host bytes, at least pl.size long):
// packed matrices encoded, every other tensor copied, padding zeroed.
func (pl *packedLayer) write(dst []byte, L *model.Layer, lk layerKind) error {
	if int64(len(dst)) < pl.size {
		return fmt.Errorf("packing: %d bytes for a layer of %d", len(dst), pl.size)
	}
	dst = dst[:pl.size]
	clear(dst)
	mats := layerMats(L)
	var off int64
	for _, t := range layerTensors(L, lk) {
		size := int64(len(t.Data))
		packed := false
		for j, m := range mats {
			if m == t && pl.mats[j].n > 0 {
				l, err := quant.PackBF16(dst[off:], t.Data)
				if err != nil {
					return fmt.Errorf("packing %s: %w", t.Name, err)
				}
				if l.Size != pl.mats[j].size {
					return fmt.Errorf("packing %s: %d bytes, planned %d", t.Name, l.Size, pl.mats[j].size)
				}
				size, packed = l.Size, true
			}
		}
		if !packed {
			copy(dst[off:], t.Data)
		}
		off += alignUp(size)
	}
	return nil
}

// alloc allocates the decode scratch.
func (pk *packing) alloc(c *cudadrv.Ctx) error {
	if pk == nil {
		return nil
	}
	var err error
	if pk.scratch, err = c.Alloc(pk.scratchN); err != nil {
		return fmt.Errorf("bf16 decode scratch (%d bytes): %w", pk.scratchN, err)
	}
	return nil
}

// release frees the scratch (tolerating a partial load).
func (pk *packing) release(c *cudadrv.Ctx) error {
	if pk == nil || pk.scratch == 0 {
		return nil
	}
	err := c.Free(pk.scratch)
	pk.scratch = 0
	return err
}

// unpack is forward's hook: for a packed streamed layer l (already
// acquired: lw points into its slot), it enqueues the decode of phase's
// packed matrices into the scratch and points lw's matrices at the decoded
// copies. Other layers are left alone.
func (m *Model) unpack(c *cudadrv.Ctx, s cudadrv.Stream, l int, lw *layerW, phase int) error {
	pl := m.pk.layer(l)
	if pl == nil {
		return nil
	}
	fields := [7]*kernels.Matrix{&lw.q, &lw.k, &lw.v, &lw.o, &lw.gate, &lw.up, &lw.down}
	var off int64
	for _, j := range unpackPhases[phase] {
		pm := pl.mats[j]
		if pm.n == 0 {
			continue
		}
		dst := m.pk.scratch.Add(off)
		if err := m.k.UnpackBF16(c, s, fields[j].Ptr, pm.n, dst); err != nil {
			return err
		}
		fields[j].Ptr = dst
		off += alignUp(2 * pm.n)
	}
	return nil
}

// PackedLayerBytes is what Options.PackBF16 makes of w's layers when they
// are streamed from tier B: each layer's bytes in pinned host memory, in a
// device slot and over PCIe per pass (packed; its plain size when nothing
// of it packs), its plain size as Load lays it out, and the device scratch
// the decoder needs. Planners use it for
// the streamed size of a layer (engine/tier's Sizes.Streamed); a resident
// layer keeps its plain size. It reads every bf16 matrix once (about a
// second per 10 GiB on 16 cores).
func PackedLayerBytes(cfg model.Config, w *model.Weights) (packed, plain []int64, scratch int64, err error) {
	lk := kindOf(&cfg)
	packed = make([]int64, len(w.Layers))
	plain = make([]int64, len(w.Layers))
	for i := range w.Layers {
		pl, s, err := planLayer(&w.Layers[i], lk)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("layer %d: %w", i, err)
		}
		plain[i] = layerSize(&w.Layers[i], lk)
		packed[i] = plain[i]
		if pl != nil {
			packed[i] = pl.size
			scratch = max(scratch, s)
		}
	}
	return packed, plain, scratch, nil
}
