package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TierC puts layers on tier C: they stay in storage and are read, every
// pass, by stage 1 of the pipeline (engine/stream) into one of k pinned
// host staging buffers (the Source's own aligned buffers, page-locked in
// place with cuMemHostRegister, so O_DIRECT and NVMe DMA land where the
// GPU copies from), copied by stage 2 into one of the k device slots on
// the copy stream, and computed by stage 3 on the compute stream, with
// events between the stages (streamDev). Storage reads run ahead of compute by up to k
// layers, so storage, PCIe and compute overlap and a pass takes about as
// long as the slowest of them.
//
// A read that fails (or an extent whose checksum does not match) fails
// that pass with an error naming the layer and its byte range; the next
// pass reads everything afresh. It is the same contract as the CPU
// pipeline (engine/stream) and tier B.
type TierC struct {
	// Layers lists the layers on tier C. None may also be in
	// Options.StreamLayers.
	Layers []int
	// Store says where each layer's extent lies in Source and how its
	// tensors are laid out inside it (Decode), and checks the bytes read
	// (Verify): engine/tier's Pool. Its layer count must be the model's.
	// The extent's tensor layout is what lands in the device slot, so the
	// kernels read the tensors at the Store's offsets (they must be 16-byte
	// aligned, which a pool's 64-byte TensorAlign is).
	Store stream.LayerStore
	// Source reads the extents: stream.FileSource (O_DIRECT; buffered where
	// the filesystem refuses it), stream.MmapSource, a stream.FaultySource
	// in tests, or the NVMe volume source. The caller keeps ownership and
	// must close it after the Model. Its Alloc buffers become the staging
	// buffers, so they must be ordinary (non Go heap) host memory that
	// cuMemHostRegister accepts.
	Source tier.Source
	// Verify chooses when extents are checksummed against Store (the
	// default: every read, stream.VerifyAlways).
	Verify stream.VerifyMode
	// Logger receives every checksum failure with its layer and extent
	// (nil: none).
	Logger hclog.Logger
}

// SlotReader is the seam for reading tier-C layers straight into device
// memory, skipping the pinned staging buffer and the H2D copy: an NVMe
// source whose DMA target is the GPU's BAR (package p2p's PeerBAR over the
// device slots, exported with Ctx.ExportDmaBuf and mapped into the
// controller's IOMMU domain, admitted by p2p.SelfTest) would implement it.
//
// It is not wired into Load yet, on purpose: strata has no GPU-BAR route
// that has passed p2p.SelfTest on real hardware, and a path that cannot be
// tested would only look finished. Where it plugs in: Load would call
// AttachSlots with the k device slots instead of registering staging
// buffers; the pipeline's stage 1 would wait for slot n%k's "free" event
// (recorded by compute after layer n-k) before calling ReadSlot for layer
// n, then record nothing on the copy stream: the compute stream's wait on
// "loaded" becomes a host-side hand-off (ReadSlot returns once the NVMe
// completion has been seen, and PCIe ordering makes the bytes visible to
// kernels launched after it). Stats.Copy would stay zero and Stats.Read
// would count the bytes.
type SlotReader interface {
	tier.Source
	// AttachSlots maps the k device slots of slotBytes each for the
	// storage device's DMA. It runs once, on the device goroutine.
	AttachSlots(c *cudadrv.Ctx, slots []cudadrv.DevPtr, slotBytes int64) error
	// ReadSlot reads extent e into device slot j and returns once the
	// bytes are in device memory. It is called off the device goroutine.
	ReadSlot(ctx context.Context, j int, e tier.Extent) error
	// DetachSlots undoes AttachSlots before the slots are freed.
	DetachSlots() error
}

// tierCLayer is a tier-C layer as Load sees it: its extent and its
// tensors' offsets inside the extent (a layerW with base 0, rebased onto
// the slot it lands in).
type tierCLayer struct {
	ext tier.Extent
	lw  layerW
}

// tierCSet validates Options.TierC against the model and the streamed
// set, and probes each tier-C layer's tensor layout. It returns one entry
// per layer, nil for layers not on tier C; nil when TierC is unset.
func (m *Model) tierCSet(w *model.Weights, streamed []bool) ([]*tierCLayer, error) {
	tc := m.opts.TierC
	if tc == nil || len(tc.Layers) == 0 {
		return nil, nil
	}
	n := len(w.Layers)
	switch {
	case tc.Store == nil:
		return nil, errors.New("tier C: no layer store")
	case tc.Source == nil:
		return nil, errors.New("tier C: no source")
	case tc.Store.NumLayers() != n:
		return nil, fmt.Errorf("tier C: the store has %d layers, the model %d", tc.Store.NumLayers(), n)
	}
	out := make([]*tierCLayer, n)
	var maxLen int64
	for _, l := range tc.Layers {
		if l < 0 || l >= n {
			return nil, fmt.Errorf("tier-C layer %d outside [0, %d)", l, n)
		}
		if out[l] != nil {
			return nil, fmt.Errorf("tier-C layer %d listed twice", l)
		}
		if streamed[l] {
			return nil, fmt.Errorf("layer %d is listed on tier B and tier C", l)
		}
		e := tc.Store.Extent(l)
		if e.Offset < 0 || e.Length <= 0 || e.End() > tc.Source.Size() {
			return nil, fmt.Errorf("tier-C layer %d: extent %v outside the source's %d bytes", l, e, tc.Source.Size())
		}
		if a := int64(max(tc.Source.Align(), 1)); e.Offset%a != 0 || e.Length%a != 0 {
			return nil, fmt.Errorf("tier-C layer %d: extent %v is not aligned to the source's %d bytes", l, e, a)
		}
		out[l] = &tierCLayer{ext: e}
		maxLen = max(maxLen, e.Length)
	}
	if int64(int(maxLen)) != maxLen {
		return nil, fmt.Errorf("tier C: extent of %d bytes too large", maxLen)
	}
	probe := make([]byte, maxLen)
	fillOffsets(probe)
	lk := kindOf(&m.Config)
	for l, c := range out {
		if c == nil {
			continue
		}
		lw, err := probeLayout(tc.Store, l, probe[:c.ext.Length], &w.Layers[l], lk)
		if err != nil {
			return nil, fmt.Errorf("tier-C layer %d: %w", l, err)
		}
		c.lw = lw
	}
	return out, nil
}

// fillOffsets writes, at every 8-byte word of b, the word's own offset
// (little-endian), so a tensor view Decode carves out of b says where it
// starts by its first word.
func fillOffsets(b []byte) {
	for o := 0; o+8 <= len(b); o += 8 {
		binary.LittleEndian.PutUint64(b[o:], uint64(o))
	}
}

// probeLayout finds where the store puts layer l's tensors inside its
// extent: it decodes the layer over probe (filled by fillOffsets) and
// reads each tensor's first word. The decoded tensors must match want's
// type, shape and size (the weights Load was given), start 16-byte
// aligned (the kernels' loads) and lie inside the extent; a tensor both
// lack (a mixture-of-experts layer's dense FFN) is left at offset 0.
func probeLayout(store stream.LayerStore, l int, probe []byte, want *model.Layer, lk layerKind) (layerW, error) {
	dl, err := store.Decode(l, probe)
	if err != nil {
		return layerW{}, fmt.Errorf("decoding its layout: %w", err)
	}
	got, exp := layerTensors(dl, lk), layerTensors(want, lk)
	offs := make(map[*model.Tensor]cudadrv.DevPtr, len(got))
	for i, t := range got {
		w := exp[i]
		if t.Type != w.Type || t.Rows != w.Rows || t.Cols != w.Cols || len(t.Data) != len(w.Data) {
			return layerW{}, fmt.Errorf("tensor %s in the store is %v %dx%d (%d bytes), the model's %s is %v %dx%d (%d bytes)",
				t.Name, t.Type, t.Rows, t.Cols, len(t.Data), w.Name, w.Type, w.Rows, w.Cols, len(w.Data))
		}
		if len(t.Data) == 0 && t.Rows == 0 {
			// Absent from the layer and the model alike: a mixture of
			// experts' dense FFN, whose experts run on the CPU.
			continue
		}
		if len(t.Data) < 8 {
			return layerW{}, fmt.Errorf("tensor %s: %d bytes, too small to locate", t.Name, len(t.Data))
		}
		off := binary.LittleEndian.Uint64(t.Data)
		if off%16 != 0 || off+uint64(len(t.Data)) > uint64(len(probe)) || !bytes.Equal(probe[off:off+8], t.Data[:8]) {
			return layerW{}, fmt.Errorf("tensor %s at offset %d (%d bytes): not 16-byte aligned inside the %d-byte extent", t.Name, off, len(t.Data), len(probe))
		}
		offs[w] = cudadrv.DevPtr(off)
	}
	return layerWith(want, lk, func(t *model.Tensor) cudadrv.DevPtr { return offs[t] }), nil
}
