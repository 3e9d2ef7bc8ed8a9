package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/hf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// ErrCUDAUnavailable is wrapped by OpenWith's error when Options.Backend is
// BackendCUDA and no usable CUDA driver or device is present (the message
// reads "CUDA unavailable: <reason>"). It is kernels/cudadrv's ErrUnavailable,
// re-exported so callers need not import the binding to test for it.
var ErrCUDAUnavailable = cudadrv.ErrUnavailable

// ErrCUDATierC is wrapped (together with ErrNeedsPool) when a GPU plan
// puts layers on tier C but the model has no tier-C source: tier C
// streams a prefab pool's layer extents (read from storage into pinned
// staging, then copied into device slots), and a GGUF has none.
var ErrCUDATierC = errors.New("tier C on the GPU needs a tier-C source")

// openDevice opens the GPU the CUDA backend runs on: GPU 0, or what the
// options stand in for it.
func (o *Options) openDevice() (*cudadrv.Device, error) {
	if o.openDev != nil {
		return o.openDev()
	}
	return cudadrv.Open(0)
}

// deviceReserve is device memory the plan leaves free beyond what it
// accounts for (the context, loaded modules, captured graphs, prefill
// activations of the largest chunk): 1/50 of the device, at least 512 MiB.
func deviceReserve(total int64) int64 { return max(total/50, 512<<20) }

// cudaBackend runs passes on engine/gpu.
type cudaBackend struct {
	m   *gpu.Model
	cfg model.Config
	// adapt, when set, is told of every pass (the device's experts move
	// by the routing served).
	adapt atomic.Pointer[deviceAdapter]
}

func (b *cudaBackend) Name() string         { return BackendCUDA }
func (b *cudaBackend) Config() model.Config { return b.cfg }
func (b *cudaBackend) MaxContext() int      { return b.m.MaxContext() }
func (b *cudaBackend) MaxSeqs() int         { return b.m.MaxSeqs() }

func (b *cudaBackend) NewSequence(maxCtx int) (Sequence, error) {
	s, err := b.m.NewSequence(maxCtx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Forward is engine/gpu's pass over the same steps, which validates them.
func (b *cudaBackend) Forward(ctx context.Context, batch []model.Step) error {
	if err := b.m.Forward(ctx, batch); err != nil {
		return err
	}
	if a := b.adapt.Load(); a != nil {
		a.pass()
	}
	return nil
}

// cudaSource is what openCUDA builds the engine from: the opened pool or
// GGUF mapping (owned by the caller until openCUDA succeeds) and its
// sizes.
type cudaSource struct {
	path  string
	pool  *prefab.Pool
	gf    *gguf.Mapped
	hf    *hf.Model // a Hugging Face directory, instead of gf
	sizes tier.Sizes
	cfg   model.Config
}

// openCUDA opens GPU 0, plans the layers onto its memory (tier A), pinned
// host memory (tier B) and storage (tier C, a pool only) and loads the
// model there. On success the
// engine owns src's file; on failure nothing of src is closed (the CPU
// path may still use it) and whatever was opened on the GPU is released.
func openCUDA(ctx context.Context, src cudaSource, o Options, log hclog.Logger) (*Engine, error) {
	dev, err := o.openDevice()
	if err != nil {
		return nil, err
	}
	switch {
	case o.HandoffSpin == 0:
		dev.SetSpin(gpu.DefaultHandoffSpin)
	case o.HandoffSpin > 0:
		dev.SetSpin(o.HandoffSpin)
	}
	info := BackendInfo{
		Name: BackendCUDA, Device: dev.Name(), Ordinal: dev.Ordinal(), DeviceMemory: dev.TotalMem(),
	}
	maj, mnr := dev.ComputeCapability()
	info.ComputeCapability = fmt.Sprintf("%d.%d", maj, mnr)
	e, err := loadCUDA(ctx, dev, src, o, &info, log)
	if err != nil {
		if cerr := dev.Close(); cerr != nil {
			log.Warn("closing the CUDA device", "error", cerr)
		}
		return nil, fmt.Errorf("%s (%s): %w", info.Device, info.ComputeCapability, err)
	}
	return e, nil
}

func loadCUDA(ctx context.Context, dev *cudadrv.Device, src cudaSource, o Options, info *BackendInfo, log hclog.Logger) (*Engine, error) {
	var free int64
	if err := dev.Do(func(c *cudadrv.Ctx) error {
		var err error
		free, _, err = c.MemInfo()
		return err
	}); err != nil {
		return nil, fmt.Errorf("reading free device memory: %w", err)
	}
	info.DeviceFree = free
	plan, err := o.planCUDA(src, free, dev.TotalMem())
	if err == nil && plan.Depth > 0 && o.Links == nil {
		// Layers stream: the links now decide placement and depth, so
		// measure them and plan again (a resident plan is the best under
		// any link speeds and pays for no measurement, as on the CPU).
		l, merr := o.LinkCache.gpuLinks(ctx, dev, src, o.Storage, log)
		if merr != nil {
			return nil, merr
		}
		o.Links = &l
		plan, err = o.planCUDA(src, free, dev.TotalMem())
	}
	if err != nil {
		return nil, err
	}
	var streamed, onC []int
	for _, l := range plan.Layers {
		switch l.Tier {
		case tier.TierB:
			streamed = append(streamed, l.Index)
		case tier.TierC:
			onC = append(onC, l.Index)
		}
	}
	log.Debug("tier plan", "backend", BackendCUDA, "model", src.path, "tier_a", plan.Tiers[tier.TierA].Layers,
		"tier_b", plan.Tiers[tier.TierB].Layers, "tier_c", plan.Tiers[tier.TierC].Layers, "depth", plan.Depth,
		"device_budget", plan.Device.Budget, "host_budget", plan.Host.Budget, "expected_pass", plan.PassTime.String())
	if len(onC) > 0 && src.pool == nil {
		fix := fmt.Sprintf("convert it once with `strata model prefab %s -o %s` and open the pool", src.path, strings.TrimSuffix(src.path, ".gguf")+".pool")
		return nil, fmt.Errorf("plan: %d of %d layers on tier C within device budget %s and host budget %s: %w: %w; %s, or give more host memory (--ram)",
			len(onC), len(plan.Layers), tier.FormatBytes(plan.Device.Budget), tier.FormatBytes(plan.Host.Budget), ErrCUDATierC, ErrNeedsPool, fix)
	}

	// A mixture-of-experts model's experts live in host memory beside the
	// pinned tier B, planned as the CPU backend plans them; a pool's
	// experts that do not fit are read from storage when routed to.
	var xplan *tier.ExpertPlan
	if src.cfg.MoE() {
		if xplan, err = planExperts(src.path, plan, src.sizes, log); err != nil {
			return nil, err
		}
		if !xplan.AllResident() && src.pool == nil {
			return nil, fmt.Errorf("plan: %s of experts on storage (%s of host memory left for them): %w; convert it once with `strata model prefab %s -o %s` and open the pool, or give more host memory (--ram)",
				tier.FormatBytes(xplan.StorageBytes), tier.FormatBytes(plan.ExpertBudget()), ErrNeedsPool, src.path, strings.TrimSuffix(src.path, ".gguf")+".pool")
		}
	}
	// On a GPU the device memory the plan leaves (less the routers and a
	// pass's routing and expert buffers) holds the experts used most per
	// byte, computed there; by size and order until the calibration text
	// has measured the routing.
	var deviceExperts int64
	if xplan != nil {
		deviceExperts = DeviceExpertBudget(plan, &src.cfg, src.sizes.Experts)
		xplan.PlaceOnDevice(src.sizes.Experts, nil, deviceExperts, tier.DeviceCost{})
		log.Debug("experts in device memory", "model", src.path, "experts", xplan.DeviceCount(), "bytes", tier.FormatBytes(xplan.DeviceBytes),
			"budget", tier.FormatBytes(deviceExperts))
	}
	// The store serves a pool's experts, as on the CPU, unless every
	// expert is resident and every layer in memory (then the pool's
	// mapping holds them, verified).
	useStore := src.pool != nil && xplan != nil && (len(onC) > 0 || !xplan.AllResident())

	// The weights come from the CPU model over the file's mapping; Load
	// copies tiers A and B to the device and into pinned host memory. A
	// pool is verified extent by extent here, except tier-C extents, which
	// are neither touched nor held: stage 1 reads and verifies them. A
	// mixture-of-experts model's tier-C layers are verified too: the CPU
	// reads their routers from the mapping.
	var e *Engine
	switch {
	case len(onC) > 0 || useStore:
		err = verifyPool(ctx, src.pool, func(i int) bool { return xplan != nil || plan.Layers[i].Tier != tier.TierC })
		if err == nil {
			e, err = poolEngine(src.path, src.pool, src.pool.StreamingModel)
		}
	case src.pool != nil:
		e, err = fromPool(ctx, src.path, src.pool)
	case src.hf != nil:
		e, err = fromHF(ctx, src.path, src.hf)
	default:
		e, err = fromMapped(ctx, src.path, src.gf)
	}
	if err != nil {
		return nil, err
	}
	ctxLen, batch := o.contextAndBatch(src.cfg)
	// Streamed bf16 matrices cross PCIe losslessly packed (0.76 of their
	// bytes on synthetic and heavy-tailed weights, bit-identical logits:
	// engine/gpu's PackBF16); layers of other types are untouched.
	copts := gpu.Options{MaxSeqs: batch, MaxContext: ctxLen, StreamLayers: streamed, Slots: plan.Depth, PackBF16: true}
	if xplan != nil {
		copts.ResidentExperts = xplan.DeviceLists()
	}
	if len(streamed) > 0 && !o.NoHybrid && !src.cfg.MoE() {
		// The CPU computes the FFN of the tier-B layers its measured rate
		// earns, per batch size, against the measured copy rate.
		copts.Hybrid = &gpu.Hybrid{}
		if o.Links != nil {
			copts.Hybrid.HostToDevice = o.Links.HostToDevice
		}
	}
	var tsrc tier.Source
	if len(onC) > 0 || useStore {
		tsrc, err = tierCSource(src.path, &o, func() (tier.Source, error) {
			return stream.OpenFile(src.path, stream.FileOptions{Logger: log})
		})
		if err != nil {
			return nil, err
		}
		e.route = routeFor(&o, BackendCUDA)
	}
	if len(onC) > 0 {
		copts.TierC = &gpu.TierC{Layers: onC, Store: src.pool, Source: tsrc, Verify: o.Verify, Logger: log}
	}
	// Attention and routing on the GPU, the experts not resident there on
	// the CPU (engine/gpu's gpuMoE; with none resident, llama.cpp's
	// --cpu-moe), taking the experts the layers lack from the store, as
	// the CPU model does.
	var xs *expertStore
	if useStore {
		if xs, err = newExpertStore(ctx, src.pool, tsrc, *xplan, o.Verify, log); err != nil {
			tsrc.Close()
			return nil, err
		}
		if err := xs.enableReadAhead(ctx, o.ExpertReadAhead, src.path); err != nil {
			xs.close()
			tsrc.Close()
			return nil, err
		}
		copts.Experts = xs
	}
	// release undoes the store and the source on a failed load.
	release := func() {
		if xs != nil {
			xs.close()
		}
		if tsrc != nil {
			tsrc.Close()
		}
	}
	// Heads or an FFN narrower than the kernels' granule (stories260K's
	// heads of 8) are widened with zeros for the GPU (model.PadWidths: the
	// same logits); the widened matrices are built in memory, so only a
	// model held whole on the device is padded.
	lcfg, lw := e.Model.Config, e.Model.Weights
	if model.NeedsPadding(lcfg, gpu.WidthGranule) {
		if len(streamed) > 0 || len(onC) > 0 {
			err = fmt.Errorf("head dim %d or FFN width %d is not a multiple of %d: the GPU runs such a model padded, which only a model held whole in device memory is", lcfg.HeadDim, lcfg.FFN, gpu.WidthGranule)
		} else if lcfg, lw, err = model.PadWidths(lcfg, lw, gpu.WidthGranule); err == nil {
			log.Info("widths padded for the GPU kernels", "model", src.path, "head_dim", e.Model.Config.HeadDim, "padded_head_dim", lcfg.HeadDim,
				"ffn", e.Model.Config.FFN, "padded_ffn", lcfg.FFN)
		}
		if err != nil {
			release()
			return nil, err
		}
	}
	cm, err := gpu.LoadContext(ctx, dev, lcfg, lw, copts)
	if err != nil {
		release()
		return nil, err
	}
	cfg := lcfg
	e.src = tsrc
	info.WeightBytes, info.StreamedBytes = cm.WeightBytes(), cm.StreamedBytes()
	info.Kernels = cm.KernelImage()
	info.Slots, info.MaxContext = cm.MaxSeqs(), cm.MaxContext()
	info.KVBytes = model.KVCacheBytes(cfg, cm.MaxContext(), cm.MaxSeqs())
	e.plan, e.cuda, e.dev = plan, cm, dev
	cb := &cudaBackend{m: cm, cfg: cfg}
	e.backend = cb
	e.binfo = *info
	e.expertPlan = xplan
	if xplan != nil {
		e.deviceExperts, e.expertSizes = deviceExperts, src.sizes.Experts
	}
	// Calibration places the experts in host memory (the store's) and in
	// device memory; with every expert in host memory already, only the
	// device's placement asks for it.
	calibrated := false
	if xs != nil {
		calibrated = !xplan.AllResident() && !o.NoExpertCalibration
		if err := e.useExperts(ctx, xs, xplan, o, log); err != nil {
			// The caller closes the device, and the pool stays the
			// caller's: release only what this load made.
			e.dev = nil
			e.pool = nil
			e.Close()
			return nil, err
		}
	}
	if xplan != nil && !calibrated && !o.NoExpertCalibration && xplan.Device != nil && xplan.DeviceCount() < len(src.sizes.Experts)*src.cfg.Experts {
		if err := e.calibrateExperts(ctx); err != nil {
			e.dev = nil
			e.pool = nil
			e.Close()
			return nil, fmt.Errorf("model %s: calibrating expert placement: %w", e.path, err)
		}
		e.logDeviceExperts(log)
	}
	if cfg.MoE() && !o.NoStreamPicks {
		// Where the experts the CPU computes are in host memory, a share
		// of each CPU layer's picks goes over PCIe to the GPU beside it;
		// experts served from a pool stay the CPU's.
		if err := cm.SetStreamPicks(true); err != nil {
			log.Info("mixture of experts: the CPU computes all of its picks", "model", e.path, "reason", err)
		} else {
			log.Debug("mixture of experts: a share of the CPU's picks goes over PCIe to the GPU", "model", e.path)
		}
	}
	if cfg.MoE() && !o.NoMappedExperts {
		// The GPU also tries pulling the experts it does not hold over
		// PCIe itself at one token, and keeps the faster way.
		if err := cm.SetMappedExperts(gpu.MappedTrial); err != nil {
			log.Info("mixture of experts: the GPU leaves the experts it does not hold to the host", "model", e.path, "reason", err)
		} else {
			log.Debug("mixture of experts: the GPU tries pulling the experts it does not hold over PCIe", "model", e.path)
		}
	}
	if xplan != nil && !o.NoExpertAdaptation {
		if err := e.startDeviceAdapter(ctx, cb, log); err != nil {
			e.dev = nil
			e.pool = nil
			e.Close()
			return nil, fmt.Errorf("model %s: experts in device memory: %w", e.path, err)
		}
	}
	return e, nil
}

// mappedWay is ExpertInfo.MappedWay for m.
func mappedWay(m gpu.MappedPicks) string {
	switch {
	case m.Way == gpu.MappedOff:
		return ""
	case m.Way == gpu.MappedOn:
		return "pulled by the GPU"
	case !m.Decided:
		return "by trial, undecided"
	case m.Kept:
		return fmt.Sprintf("pulled by the GPU (kept by trial: %v a pass, %v through the host)", m.MappedPass.Round(time.Microsecond), m.HostPass.Round(time.Microsecond))
	}
	return fmt.Sprintf("through the host (kept by trial: %v a pass, %v pulled by the GPU)", m.HostPass.Round(time.Microsecond), m.MappedPass.Round(time.Microsecond))
}

// DeviceExpertBudget is the device memory a GPU plan p leaves for a
// mixture-of-experts model's experts (cfg's, of sizes bytes by layer and
// expert): the budget less the plan's layers, KV cache, scratch and
// slots, less the routers and a pass's routing and expert buffers
// (gpu.MoEDeviceOverhead), and less the staging of the CPU's picks sent
// over PCIe (gpu.PickStreamBytes) and of those the GPU pulls itself
// (gpu.MappedStageBytes); 0 when nothing is left, for a dense model, and
// on the CPU backend.
func DeviceExpertBudget(p *tier.Plan, cfg *model.Config, sizes [][]int64) int64 {
	if p == nil || p.Shared || !cfg.MoE() {
		return 0
	}
	var largest int64
	for _, l := range sizes {
		for _, b := range l {
			largest = max(largest, b)
		}
	}
	stage := gpu.PickStreamBytes(cfg, largest) + gpu.MappedStageBytes(cfg, largest)
	return max(p.Device.Budget-p.Device.Total-gpu.MoEDeviceOverhead(cfg, moeReserveTokens)-stage, 0)
}

// moeReserveTokens is the pass size a mixture-of-experts model's device
// buffers are reserved for when experts are placed in device memory
// (gpu.MoEDeviceOverhead): prompts longer than this in one pass grow them
// beyond the plan.
const moeReserveTokens = 512

// contextAndBatch is the per-sequence context and the batch the KV cache
// is sized for.
func (o *Options) contextAndBatch(cfg model.Config) (ctxLen, batch int) {
	ctxLen = o.Context
	if ctxLen == 0 {
		ctxLen = defaultContext
	}
	return min(ctxLen, cfg.Context), max(o.Batch, 1)
}

// gpuLinks are the links a GPU plan uses when none are given:
// tier.DefaultLinks with the pinned host-to-device rate measured on dev
// and, for a pool (whose layers may go to tier C), the storage it lies on
// (64 MiB read with O_DIRECT, as the CPU backend measures it), each from
// the cache. The defaults assume a PCIe 4 link and a PCIe 4 SSD, and the
// planner's expected pass time, the bound it names and `strata run
// --stats` follow from the links. A failed measurement keeps its default,
// logged; a cancelled one fails the load.
func (c *LinkCache) gpuLinks(ctx context.Context, dev *cudadrv.Device, src cudaSource, storage *Storage, log hclog.Logger) (tier.Links, error) {
	l := tier.DefaultLinks()
	l.Notes = []string{"compute: default"}
	if bw, err := c.hostToDevice(ctx, dev); ctx.Err() != nil {
		return l, fmt.Errorf("measuring links: %w", ctx.Err())
	} else if err != nil {
		log.Warn("measuring pinned host-to-device bandwidth; planning with the default", "error", err)
		l.Notes = append(l.Notes, "h2d: default (measurement failed)")
	} else {
		l.HostToDevice = bw
		l.Notes = append(l.Notes, fmt.Sprintf("h2d: %.1f GB/s measured (pinned, 64 MiB copies)", bw/1e9))
	}
	if src.pool == nil {
		l.Notes = append(l.Notes, "storage: default (a GGUF never streams tier C)")
		return l, nil
	}
	s, err := c.poolStorage(ctx, src.path, storage)
	switch {
	case ctx.Err() != nil:
		return l, fmt.Errorf("measuring links: %w", ctx.Err())
	case err != nil:
		log.Warn("measuring the pool's storage; planning with the default", "error", err)
		l.Notes = append(l.Notes, "storage: default (measurement failed)")
	default:
		l.SetStorage(s.res, s.path)
	}
	return l, nil
}

// planCUDA plans the layers onto a GPU with free bytes of device memory
// (of total): the device budget is Options.DeviceBudget or the free memory
// less deviceReserve; the host budget (tier B, pinned) is HostBudget or
// MemAvailable less tier.HostReserve, as on the CPU.
func (o *Options) planCUDA(src cudaSource, free, total int64) (*tier.Plan, error) {
	ctxLen, batch := o.contextAndBatch(src.cfg)
	req := tier.Request{
		Sizes: src.sizes, Depth: o.Depth, Batch: batch,
		KVBytes: model.KVCacheBytes(src.cfg, ctxLen, batch),
		// The activations of a pass of up to 512 prompt tokens; the GPU
		// has no per-core score rows.
		ScratchBytes: model.ScratchBytes(src.cfg, ctxLen, max(batch, min(ctxLen, 512)), 1),
		Links:        tier.DefaultLinks(),
	}
	if o.Links != nil {
		req.Links = *o.Links
	}
	req.DeviceBudget = o.DeviceBudget
	if req.DeviceBudget == 0 {
		req.DeviceBudget = free - deviceReserve(total)
		if req.DeviceBudget <= 0 {
			return nil, fmt.Errorf("plan: %w: %s of device memory free, %s kept in reserve", tier.ErrNoFit,
				tier.FormatBytes(free), tier.FormatBytes(deviceReserve(total)))
		}
	}
	host, err := o.hostBudget()
	if err != nil {
		return nil, err
	}
	req.HostBudget = host
	if o.Tiers != "" {
		ts, err := tier.MixTiers(o.Tiers, len(src.sizes.Layers))
		if err != nil {
			return nil, err
		}
		return tier.PlanTiers(req, ts)
	}
	return tier.NewPlan(req)
}

// closeCUDA releases the GPU side of an engine (nil-safe).
func (e *Engine) closeCUDA() error {
	var errs []error
	if e.cuda != nil {
		errs = append(errs, e.cuda.Close())
		e.cuda = nil
	}
	if e.dev != nil {
		errs = append(errs, e.dev.Close())
		e.dev = nil
	}
	return errors.Join(errs...)
}

// HybridInfo is the CPU's share of a GPU's passes (gpu.Hybrid): the plan
// per batch size (index b-1 for b tokens), the CPU's FFN rate measured
// for each (bytes/s), and what it computed so far.
type HybridInfo struct {
	Plans []tier.HybridPlan `json:"plans"`
	Rates []float64         `json:"cpu_rates_bps,omitempty"`
	Stats gpu.HybridStats   `json:"stats"`
}

// Hybrid returns the CPU's share of the GPU's passes; ok is false when the
// CPU takes no part (CPU backend, everything resident, or NoHybrid).
func (e *Engine) Hybrid() (HybridInfo, bool) {
	if e.cuda == nil {
		return HybridInfo{}, false
	}
	plans, rates, ok := e.cuda.HybridPlans()
	if !ok {
		return HybridInfo{}, false
	}
	return HybridInfo{Plans: plans, Rates: rates, Stats: e.cuda.HybridStats()}, true
}

// exitBackend is a GPU model drafting for itself: its passes run the
// first exit layers (resident) and the output head (gpu.Model.ForwardExit),
// on sequences of the model's own (each takes one of its MaxSeqs).
type exitBackend struct {
	*cudaBackend
	exit int
}

func (b *exitBackend) Forward(ctx context.Context, batch []model.Step) error {
	return b.m.ForwardExit(ctx, batch, b.exit)
}

// selfDraftCUDA is OpenSelfDraft on a GPU target whose first layers are
// resident: an engine that shares target's model and owns nothing (its
// Close releases nothing of target's).
func selfDraftCUDA(target *Engine, layers int) (*Engine, bool) {
	if target.cuda == nil || target.cuda.ResidentPrefix() < layers {
		return nil, false
	}
	cb, ok := target.backend.(*cudaBackend)
	if !ok {
		return nil, false
	}
	info := target.binfo
	info.Kernels = fmt.Sprintf("%s; early exit after %d of %d layers", info.Kernels, layers, target.Model.Config.Layers)
	return &Engine{path: target.path, Model: target.Model, Tok: target.Tok, plan: target.plan,
		backend: &exitBackend{cudaBackend: cb, exit: layers}, binfo: info}, true
}
