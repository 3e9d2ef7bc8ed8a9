package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// ErrNoSlot is returned (wrapped) by NewSequence when every KV-cache slot
// is held by an open Sequence.
var ErrNoSlot = errors.New("no free KV-cache slot")

// WidthGranule is what the kernels need the head dim, the model width and
// the FFN width to be multiples of (engine/model's PadWidths widens a model
// whose heads or FFN are narrower).
const WidthGranule = 32

// Options tune Load. The zero value is usable.
type Options struct {
	// MaxSeqs is how many Sequences may be open at once: the number of
	// KV-cache slots allocated. 0 means kernels.MaxGEMVBatch (8).
	MaxSeqs int
	// MaxContext is the positions of each slot: the largest context a
	// Sequence can reach. 0 means the model's context, capped at 4096.
	MaxContext int
	// Experts, for a mixture-of-experts model, serves the experts its
	// layers do not hold (the engine's expert store); nil when they hold
	// them all. The experts not resident on the GPU run on the CPU beside
	// it (gpuMoE), so the weights given to Load must stay valid while the
	// model lives, unlike other models'.
	Experts model.ExpertSource
	// ResidentExperts, for a mixture-of-experts model, lists per layer the
	// experts held in device memory and computed on the GPU (the caller
	// chooses them: the engine takes the most used ones that fit its
	// budget); the others are computed on the CPU. Nil, or a layer missing
	// or empty: none of that layer's.
	ResidentExperts [][]int
	// NoExpertTrial makes the GPU compute the resident experts' picks at
	// every batch size. By default the first passes of a batch size up to
	// 8 tokens try both ways, the GPU's and the CPU computing every pick,
	// and keep the faster (moechoice.go).
	NoExpertTrial bool
	// NoGraphs disables capturing and replaying decode steps as CUDA
	// graphs (every step is then launched kernel by kernel).
	NoGraphs bool
	// StreamLayers lists the layers kept on tier B: in pinned host memory,
	// copied into a device slot on a separate copy stream for every pass
	// (the copy of layer i+k overlapping the compute of layer i). Nil keeps
	// every layer resident (tier A). Decode graphs are not used when any
	// layer is streamed.
	StreamLayers []int
	// Slots is the number of device slots streamed layers rotate through
	// (the pipeline depth k); 0 means 2. Tier C gets as many pinned
	// staging buffers.
	Slots int
	// TierC, when set, keeps its layers on tier C: read from storage into
	// pinned staging and copied into a device slot every pass (see TierC).
	TierC *TierC
	// Kernels, when set, are the already loaded kernels of the device
	// (Load would otherwise JIT-load its own, which takes seconds on a
	// fresh machine). The caller keeps ownership.
	Kernels *kernels.Kernels
	// Variants change the device's kernel tuning (kernels.Variants, in
	// order) for this model: applied at kernels.Load, or to a view of
	// Kernels when those are given (whose loaded image they cannot change).
	Variants []string
	// PackBF16 stores tier-B layers' bf16 matrices losslessly packed
	// (engine/quant's packed bf16, about 0.76 of the bytes) in pinned host
	// memory, copies them packed and decodes them on the device just
	// before use (packed.go): fewer bytes over PCIe per pass, identical
	// logits, a decode scratch of the largest FFN pair in device memory.
	PackBF16 bool
	// Hybrid, when set, lets the CPU compute the FFN of tier-B layers
	// beside the GPU (see Hybrid); bf16 layers it should take must not be
	// packed (PackBF16 packs every streamed bf16 layer).
	Hybrid *Hybrid
}

// defaultMaxContext caps the per-slot context when Options.MaxContext is
// 0: a trained context of 128k positions would cost 16 GiB of cache per
// slot on the 8b shape.
const defaultMaxContext = 4096

// layerW is one transformer block in device memory.
type layerW struct {
	attnNorm, postAttnNorm, ffnNorm, postFFNNorm cudadrv.DevPtr
	q, k, v, o, gate, up, down                   kernels.Matrix
	// qBias, kBias, vBias (Qwen2) and qNorm, kNorm (Qwen3, Gemma 3) are 0
	// where the model has none.
	qBias, kBias, vBias, qNorm, kNorm cudadrv.DevPtr
}

// Model is a model loaded onto one GPU, ready to run forward passes.
// Forward calls are serialised; any number of Sequences (up to
// Options.MaxSeqs open at once) may share one Model.
type Model struct {
	// Config is the model's hyperparameters. Treat as read-only.
	Config model.Config

	dev    *cudadrv.Device
	k      *kernels.Kernels
	ownK   bool
	opts   Options
	pass   passTuning
	maxCtx int
	stream cudadrv.Stream

	arena   cudadrv.DevPtr // all weights
	arenaN  int64
	relaid  int // Q6_K matrices of the arena re-laid into Q6KA
	embed   kernels.Matrix
	output  kernels.Matrix
	outNorm cudadrv.DevPtr
	layers  []layerW
	freqs   cudadrv.DevPtr // float64 RoPE frequencies
	// freqsLocal are the sliding layers' frequencies when their base
	// differs (Config.RopeThetaLocal, Gemma 3); 0 otherwise.
	freqsLocal cudadrv.DevPtr

	kvK, kvV []cudadrv.DevPtr // per layer: [slots][maxCtx][KVDim] float32
	scratch  cudadrv.DevPtr   // split-K attention partials
	scratchN int64
	tb       *tierB   // nil when every layer is resident
	pk       *packing // packed tier-B layers (Options.PackBF16); nil when none
	hy       *hybrid  // the CPU's share of tier B (Options.Hybrid); nil when none
	moe      *gpuMoE  // a mixture-of-experts model's routing and experts; nil for other models

	mu     sync.Mutex // serialises Forward and guards everything below
	slots  []bool     // slot in use
	act    activations
	graphs map[graphKey]*decodeGraph
	fw     forwardState // forward.go: host-side greedy choice, graph-copy fallback, benchmark trace
	stats  Stats
	closed bool
}

// Stats counts what Forward did, for tests and benchmarks.
type Stats struct {
	// Passes is the number of successful forward passes.
	Passes int
	// GraphReplays counts passes run by replaying a captured decode graph;
	// GraphCaptures counts captures (one per batch size and span bucket).
	GraphReplays, GraphCaptures int
	// GraphNodes is the node count of the last captured graph (one per
	// kernel launch of a decode step).
	GraphNodes int
}

// WeightBytes is the device memory the weights occupy (a mixture of
// experts' routers and resident experts included).
func (m *Model) WeightBytes() int64 {
	if m.moe != nil {
		return m.arenaN + m.moe.expertBytes
	}
	return m.arenaN
}

// KernelImage says which build of the kernels runs (kernels.Kernels.Image:
// "sm_90 cubin (ptxas 11.8)" or "compute_80 PTX (driver JIT)"), and how
// many resident Q6_K matrices were re-laid (quant.Q6KA).
func (m *Model) KernelImage() string {
	if m.relaid > 0 {
		return fmt.Sprintf("%s; %d resident Q6_K matrices re-laid for aligned loads (Q6KA)", m.k.Image, m.relaid)
	}
	return m.k.Image
}

// MaxContext is the largest context a Sequence of this Model can reach.
func (m *Model) MaxContext() int { return m.maxCtx }

// MaxSeqs is the number of Sequences that may be open at once.
func (m *Model) MaxSeqs() int { return len(m.slots) }

// Device is the GPU the model lives on.
func (m *Model) Device() *cudadrv.Device { return m.dev }

// Stats returns the counters of the passes so far.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// archs are the architectures the CUDA passes implement; a model of
// another is refused at load (the engine's auto backend then runs it on
// the CPU) rather than run with another architecture's arithmetic.
var archs = []string{model.ArchLlama, model.ArchGemma2, model.ArchGemma3, model.ArchPhi3, model.ArchQwen2, model.ArchQwen3, model.ArchQwen3MoE}

// Load uploads cfg's weights w to dev and prepares the KV-cache slots. The
// weights are validated against the configuration as engine/model.New
// does (w is not modified except that an empty Output of a tied model is
// set to Embed, as model.New does) and every byte is copied, so w's memory
// (usually a GGUF mapping) may be released once Load returns.
func Load(dev *cudadrv.Device, cfg model.Config, w *model.Weights, opts Options) (*Model, error) {
	return LoadContext(context.Background(), dev, cfg, w, opts)
}

// LoadContext is Load under ctx: cancelling it stops the uploads of tiers A
// and B between tensors (and layers), releases what was allocated and
// returns an error wrapping ctx's.
func LoadContext(ctx context.Context, dev *cudadrv.Device, cfg model.Config, w *model.Weights, opts Options) (*Model, error) {
	if dev == nil || w == nil {
		return nil, errors.New("cuda load: nil device or weights")
	}
	// model.New checks every tensor's presence, type and shape; the CPU
	// model it builds is a thin wrapper over w and is dropped.
	if _, err := model.New(cfg, w); err != nil {
		return nil, fmt.Errorf("cuda load: %w", err)
	}
	if !slices.Contains(archs, cfg.Arch) {
		return nil, fmt.Errorf("cuda load: architecture %q runs on the CPU backend only (the GPU runs %s)", cfg.Arch, strings.Join(archs, ", "))
	}
	if cfg.Fused() {
		// The passes read Q, K, V, Gate and Up: views of the fused
		// matrices, each uploaded as a tensor of its own.
		if opts.TierC != nil {
			return nil, fmt.Errorf("cuda load: %s's fused matrices are not split in tier-C extents: load it resident or from tier B", cfg.Arch)
		}
		w = splitWeights(&cfg, w)
	}
	if opts.MaxSeqs <= 0 {
		opts.MaxSeqs = kernels.MaxGEMVBatch
	}
	maxCtx := opts.MaxContext
	if maxCtx <= 0 {
		maxCtx = min(cfg.Context, defaultMaxContext)
	}
	maxCtx = min(maxCtx, cfg.Context)
	m := &Model{
		Config: cfg,
		dev:    dev,
		opts:   opts,
		pass:   defaultPassTuning,
		maxCtx: maxCtx,
		slots:  make([]bool, opts.MaxSeqs),
		graphs: map[graphKey]*decodeGraph{},
	}
	err := dev.Do(func(c *cudadrv.Ctx) error {
		if err := m.load(ctx, c, w); err != nil {
			m.release(c)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cuda load on %s: %w", dev.Name(), err)
	}
	return m, nil
}

// splitWeights returns w with every layer's fused matrices replaced by
// their views (model.Config.SplitFused); w itself is not changed.
func splitWeights(cfg *model.Config, w *model.Weights) *model.Weights {
	out := *w
	out.Layers = make([]model.Layer, len(w.Layers))
	for i := range w.Layers {
		out.Layers[i] = cfg.SplitFused(&w.Layers[i])
		out.Layers[i].QKV, out.Layers[i].GateUp = model.Tensor{}, model.Tensor{}
	}
	return &out
}

// plannedTensor is one tensor's place in the weight arena.
type plannedTensor struct {
	t   *model.Tensor
	off int64
}

// load runs on the device goroutine.
func (m *Model) load(ctx context.Context, c *cudadrv.Ctx, w *model.Weights) error {
	cfg := &m.Config
	if m.opts.Kernels != nil {
		t, err := m.opts.Kernels.Tuning().WithVariants(m.opts.Variants...)
		if err != nil {
			return err
		}
		if t.Cubin != m.opts.Kernels.Tuning().Cubin {
			return fmt.Errorf("tuning variants %v change the kernels' image, which the given Kernels have loaded", m.opts.Variants)
		}
		m.k = m.opts.Kernels.WithTuning(t)
	} else {
		k, err := kernels.Load(c, m.opts.Variants...)
		if err != nil {
			return err
		}
		m.k, m.ownK = k, true
	}
	if cfg.MoE() && m.opts.Hybrid != nil {
		return fmt.Errorf("%d experts per layer: the experts' placement is its own (ResidentExperts), not a hybrid plan", cfg.Experts)
	}
	resident, err := residentSet(cfg, m.opts.ResidentExperts)
	if err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		dim  int
	}{{"head dim", cfg.HeadDim}, {"model width", cfg.Dim}, {"FFN width", cfg.FFN}} {
		if t.name == "FFN width" && cfg.MoE() {
			continue // no dense FFN; residentSet checks the experts'
		}
		if t.dim%WidthGranule != 0 {
			return fmt.Errorf("%s %d is not a multiple of %d, which the kernels need", t.name, t.dim, WidthGranule)
		}
	}

	// Plan the arena: output-side tensors first, then each resident
	// layer's tensors back to back. Every layer has the same layout
	// relative to its start wherever it lives (arena, pinned host, slot).
	var plan []plannedTensor
	var total int64
	place := func(t *model.Tensor) int64 {
		off := total
		plan = append(plan, plannedTensor{t, off})
		total += alignUp(int64(len(t.Data)))
		return off
	}
	tied := w.Output.Type == w.Embed.Type && len(w.Output.Data) > 0 && len(w.Embed.Data) > 0 &&
		&w.Output.Data[0] == &w.Embed.Data[0] && len(w.Output.Data) == len(w.Embed.Data)
	embOff := place(&w.Embed)
	outOff := embOff
	if !tied {
		outOff = place(&w.Output)
	}
	normOff := place(&w.OutputNorm)
	lk := kindOf(cfg)
	var moeBytes int64
	if cfg.MoE() {
		if moeBytes, err = moeDeviceBytes(ctx, cfg, w, m.opts.Experts, resident); err != nil {
			return err
		}
	}
	streamed, err := m.streamedSet(len(w.Layers))
	if err != nil {
		return err
	}
	tc, err := m.tierCSet(w, streamed)
	if err != nil {
		return err
	}
	if m.pk, err = m.planPacking(w, streamed, tc); err != nil {
		return err
	}
	layerBase := make([]int64, len(w.Layers)) // arena offset, or pinned host offset when streamed
	var hostTotal, slotBytes int64
	for i := range w.Layers {
		if tc != nil && tc[i] != nil { // tier C: lands in a slot, laid out as in its extent
			slotBytes = max(slotBytes, tc[i].ext.Length)
			continue
		}
		size := layerSize(&w.Layers[i], lk)
		if pl := m.pk.layer(i); pl != nil {
			size = pl.size
		}
		if streamed[i] {
			layerBase[i] = hostTotal
			hostTotal += size
			slotBytes = max(slotBytes, size)
			continue
		}
		layerBase[i] = total
		for _, t := range layerTensors(&w.Layers[i], lk) {
			place(t)
		}
	}

	kvd := int64(cfg.KVDim())
	kvBytes := int64(len(m.slots)) * int64(m.maxCtx) * kvd * 4
	at := kernels.Attention{Heads: cfg.Heads, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim}
	m.scratchN = at.DecodeScratchBytes(len(m.slots), 64)
	nslots := 0
	if hostTotal > 0 || tc != nil {
		nslots = m.opts.Slots
		if nslots <= 0 {
			nslots = 2
		}
	}
	need := total + moeBytes + int64(nslots)*slotBytes + 2*kvBytes*int64(cfg.Layers) + m.scratchN + m.pk.scratchBytes()
	if free, _, err := c.MemInfo(); err == nil && need > free {
		return fmt.Errorf("model needs %.2f GiB of device memory (resident weights %.2f GiB, routers and resident experts %.2f GiB, %d slots of %.2f GiB, KV cache for %d sequences of %d positions %.2f GiB), %.2f GiB free: %w",
			gib(need), gib(total), gib(moeBytes), nslots, gib(slotBytes), len(m.slots), m.maxCtx, gib(2*kvBytes*int64(cfg.Layers)), gib(free),
			&cudadrv.Error{Op: "cuMemAlloc", Code: cudadrv.ResultOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY"})
	}

	if m.stream, err = c.NewStream(cudadrv.StreamNonBlocking); err != nil {
		return err
	}
	// The integer Q4_K GEMV's quantized-x scratch (kernels.Tuning.IntegerGEMV;
	// nothing when it is off), reserved before any graph capture.
	if err := m.k.ReserveFastGEMV(c, m.stream, max(cfg.Dim, cfg.FFN, cfg.QDim(), cfg.ExpertFFN)); err != nil {
		return err
	}
	if m.arena, err = c.Alloc(total); err != nil {
		return fmt.Errorf("weights (%d bytes): %w", total, err)
	}
	m.arenaN = total
	for _, p := range plan {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("uploading %s: %w", p.t.Name, err)
		}
		if len(p.t.Data) == 0 {
			continue
		}
		if err := c.CopyHtoD(m.arena.Add(p.off), p.t.Data, m.stream); err != nil {
			return fmt.Errorf("uploading %s: %w", p.t.Name, err)
		}
	}
	m.embed = matrix(&w.Embed, m.arena.Add(embOff))
	m.output = matrix(&w.Output, m.arena.Add(outOff))
	m.outNorm = m.arena.Add(normOff)
	m.layers = make([]layerW, len(w.Layers))
	for i := range w.Layers {
		if tc != nil && tc[i] != nil {
			m.layers[i] = tc[i].lw
			continue
		}
		base := m.arena.Add(layerBase[i])
		if streamed[i] {
			base = 0 // offsets relative to the slot the layer lands in
		}
		m.layers[i] = layerAt(&w.Layers[i], lk, base)
		if pl := m.pk.layer(i); pl != nil {
			m.layers[i] = pl.layerAt(&w.Layers[i], lk)
		}
	}
	if err := m.relayResidentQ6K(c, streamed, tc, tied); err != nil {
		return err
	}
	if hostTotal > 0 || tc != nil {
		if err := m.loadTierB(ctx, c, w, streamed, tc, layerBase, hostTotal, slotBytes, nslots); err != nil {
			return err
		}
	}
	if err := m.setupHybrid(ctx, c, w, streamed, layerBase); err != nil {
		return err
	}
	if cfg.MoE() {
		if err := m.setupMoE(ctx, c, w, m.opts.Experts, resident, moeBytes); err != nil {
			return err
		}
	}
	if err := m.pk.alloc(c); err != nil {
		return err
	}

	freqs, err := kernels.RopeFreqs(cfg.RopeTheta, cfg.HeadDim, cfg.RopeFreqs)
	if err != nil {
		return err
	}
	if m.freqs, err = c.Alloc(int64(len(freqs)) * 8); err != nil {
		return err
	}
	if err := cudadrv.Upload(c, m.freqs, freqs, m.stream); err != nil {
		return err
	}
	if cfg.RopeThetaLocal > 0 {
		local, err := kernels.RopeFreqs(cfg.RopeThetaLocal, cfg.HeadDim, nil)
		if err != nil {
			return err
		}
		if m.freqsLocal, err = c.Alloc(int64(len(local)) * 8); err != nil {
			return err
		}
		if err := cudadrv.Upload(c, m.freqsLocal, local, m.stream); err != nil {
			return err
		}
	}
	m.kvK = make([]cudadrv.DevPtr, cfg.Layers)
	m.kvV = make([]cudadrv.DevPtr, cfg.Layers)
	for l := range m.kvK {
		if m.kvK[l], err = c.Alloc(kvBytes); err != nil {
			return fmt.Errorf("KV cache of layer %d: %w", l, err)
		}
		if m.kvV[l], err = c.Alloc(kvBytes); err != nil {
			return fmt.Errorf("KV cache of layer %d: %w", l, err)
		}
	}
	if m.scratch, err = c.Alloc(m.scratchN); err != nil {
		return fmt.Errorf("attention scratch: %w", err)
	}
	return c.StreamSync(m.stream)
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// relayResidentQ6K re-lays the Q6_K matrices that stay in the arena — the
// resident layers' and the output projection (with the embedding table
// when the two are one tensor) — into Q6KA on the device, whose aligned
// loads the integer GEMVs stream faster. Streamed layers keep Q6_K: their
// bytes land in a different slot each pass, and the layout depends on
// the address.
func (m *Model) relayResidentQ6K(c *cudadrv.Ctx, streamed []bool, tc []*tierCLayer, tied bool) error {
	relay := func(what string, mt *kernels.Matrix) error {
		if mt.Type != quant.Q6_K {
			return nil
		}
		r, err := m.k.RelayQ6K(c, m.stream, *mt)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		*mt = r
		m.relaid++
		return nil
	}
	for i := range m.layers {
		if streamed[i] || (tc != nil && tc[i] != nil) { // tier B (packed or not) or tier C
			continue
		}
		lw := &m.layers[i]
		for _, f := range []*kernels.Matrix{&lw.q, &lw.k, &lw.v, &lw.o, &lw.gate, &lw.up, &lw.down} {
			if err := relay(fmt.Sprintf("layer %d", i), f); err != nil {
				return err
			}
		}
	}
	if err := relay("output", &m.output); err != nil {
		return err
	}
	if tied {
		m.embed.Type = m.output.Type
	}
	return nil
}

// Close frees the model's device memory, graphs and stream (and its
// kernels when Load loaded them). Open Sequences become unusable.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	err := m.dev.Do(func(c *cudadrv.Ctx) error { return m.release(c) })
	if err != nil {
		return fmt.Errorf("cuda model close: %w", err)
	}
	return nil
}

// release frees whatever load allocated; it runs on the device goroutine
// and tolerates a partial load.
func (m *Model) release(c *cudadrv.Ctx) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if m.stream != 0 {
		keep(c.StreamSync(m.stream))
	}
	m.dropGraphs(c)
	m.act.free(c)
	keep(m.hy.release(c))
	m.hy = nil
	keep(m.moe.release(c))
	m.moe = nil
	keep(m.tb.release(c))
	keep(m.pk.release(c))
	m.pk = nil
	m.tb = nil
	for _, p := range append(append([]cudadrv.DevPtr{m.arena, m.freqs, m.freqsLocal, m.scratch}, m.kvK...), m.kvV...) {
		keep(c.Free(p))
	}
	m.arena, m.freqs, m.freqsLocal, m.scratch, m.kvK, m.kvV = 0, 0, 0, 0, nil, nil
	if m.stream != 0 {
		if m.k != nil {
			keep(m.k.ReleaseFastGEMV(c, m.stream))
		}
		keep(c.DestroyStream(m.stream))
		m.stream = 0
	}
	if m.ownK && m.k != nil {
		keep(m.k.Unload(c))
	}
	m.k = nil
	return first
}

// Sequence is one stream of tokens with its own KV-cache slot on the GPU.
// It may only be used with the Model that made it, and not concurrently
// with a Forward call that includes it. Close it to give the slot back.
type Sequence struct {
	m    *Model
	slot int
	pos  int
	max  int
	open bool
}

// NewSequence returns an empty sequence holding a free cache slot, whose
// context may grow to maxCtx positions (maxCtx <= 0 or above MaxContext
// means MaxContext). It fails with ErrNoSlot when MaxSeqs sequences are
// open.
func (m *Model) NewSequence(maxCtx int) (*Sequence, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("new sequence: model closed")
	}
	if maxCtx <= 0 || maxCtx > m.maxCtx {
		maxCtx = m.maxCtx
	}
	for i, used := range m.slots {
		if !used {
			m.slots[i] = true
			return &Sequence{m: m, slot: i, max: maxCtx, open: true}, nil
		}
	}
	return nil, fmt.Errorf("new sequence: %w (all %d in use)", ErrNoSlot, len(m.slots))
}

// Close gives the sequence's cache slot back to its Model. Closing twice is
// harmless; a closed sequence cannot be used in Forward.
func (s *Sequence) Close() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.open {
		s.m.slots[s.slot] = false
		s.open = false
	}
}

// Pos is the number of tokens the sequence holds (the position the next
// token will take).
func (s *Sequence) Pos() int { return s.pos }

// MaxContext is the capacity of the sequence's KV cache in positions.
func (s *Sequence) MaxContext() int { return s.max }

// CopyFrom implements model.Seq: the source's first n positions are
// copied slot to slot on the device, layer by layer.
func (s *Sequence) CopyFrom(src model.Seq, n int) error {
	o, ok := src.(*Sequence)
	switch {
	case !ok || o.m != s.m:
		return errors.New("copy sequence: the source belongs to another model")
	case !s.open || !o.open:
		return model.ErrSequenceClosed
	case n < 0 || n > o.pos || n > s.max:
		return fmt.Errorf("copy sequence: %d positions of %d (capacity %d)", n, o.pos, s.max)
	}
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("copy sequence: model closed")
	}
	if n > 0 && s.slot != o.slot {
		row := int64(m.Config.KVDim()) * 4
		slot := int64(m.maxCtx) * row
		err := m.dev.Do(func(c *cudadrv.Ctx) error {
			for l := range m.kvK {
				for _, kv := range []cudadrv.DevPtr{m.kvK[l], m.kvV[l]} {
					if err := c.CopyDtoD(kv.Add(int64(s.slot)*slot), kv.Add(int64(o.slot)*slot), int64(n)*row, m.stream); err != nil {
						return err
					}
				}
			}
			return c.StreamSync(m.stream)
		})
		if err != nil {
			return fmt.Errorf("copy sequence: %w", err)
		}
	}
	s.pos = n
	return nil
}

// Reset empties the sequence, keeping its cache slot.
func (s *Sequence) Reset() { s.pos = 0 }

// Truncate drops every token from position n on, so the next token takes
// position n. It allows reusing a shared prefix.
func (s *Sequence) Truncate(n int) error {
	if n < 0 || n > s.pos {
		return fmt.Errorf("truncate sequence to %d: out of range [0, %d]", n, s.pos)
	}
	s.pos = n
	return nil
}
