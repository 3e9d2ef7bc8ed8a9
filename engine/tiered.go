package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/hf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/safetensors"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Options configure OpenWith: the memory budgets the tier planner places
// layers within, the load the KV cache is sized for, and overrides for
// tests and benchmarks.
type Options struct {
	// DeviceBudget is the device memory the model may use. 0 plans the CPU
	// backend as it is: device memory is host memory, so the device budget
	// is HostBudget and layers are resident (tier A) or read from storage
	// every pass (tier C). A positive value plans a separate device of that
	// size fed from HostBudget of host memory (tiers A, B and C), which the
	// CPU backend then emulates with host memory.
	DeviceBudget int64
	// HostBudget is the host memory the model may use; 0 means what the
	// hardware has: MemAvailable minus tier.HostReserve.
	HostBudget int64
	// Context is the per-sequence context the KV cache is sized for; 0
	// means the model's context, at most 4096.
	Context int
	// Batch is the number of sequences advanced per pass (the daemon's
	// max batch); 0 means 1.
	Batch int
	// Depth fixes the pipeline depth (slots); 0 lets the planner choose.
	Depth int
	// Tiers forces a placement instead of planning one: "all-A", "all-B",
	// "all-C", "mixed" or one tier per layer ("A,C,C,B"); see
	// tier.MixTiers. It is for tests and benchmarks; the budgets must
	// still hold it. Empty means plan.
	Tiers string
	// Links are the link speeds to plan with. Nil means: tier.DefaultLinks
	// when the model fits resident (no link matters then), otherwise the
	// measured ones from LinkCache.
	Links *tier.Links
	// LinkCache supplies measured link speeds when Links is nil and layers
	// must stream (64 MiB read from the pool with O_DIRECT, memmove and the
	// CPU kernels, or a GPU's pinned copies): each is measured the first
	// time a load needs it and kept, so one cache per process measures
	// once. Nil measures for this load only.
	LinkCache *LinkCache
	// Verify chooses when tier-C reads are checksummed (default: every
	// read, stream.VerifyAlways); failures are logged to Logger.
	Verify stream.VerifyMode
	// NoExpertCalibration skips measuring a mixture-of-experts model's
	// routing on the built-in calibration text at load: the experts kept
	// resident are then first by expert order until serving moves them.
	NoExpertCalibration bool
	// NoExpertAdaptation keeps the experts a GPU holds in device memory
	// where the load placed them: otherwise they move, a few at a time
	// between passes, toward the routing the model serves (for
	// comparisons of placements).
	NoExpertAdaptation bool
	// NoStreamPicks keeps every pick of the experts a GPU does not hold
	// on the CPU: otherwise, at one token, a share of each layer's such
	// picks is copied over PCIe and computed on the GPU beside the CPU,
	// the share balancing the two links' rates measured in passes
	// (gpu.Model.SetStreamPicks; for comparisons).
	NoStreamPicks bool
	// NoMappedExperts keeps the experts a GPU does not hold off it at one
	// token but through the host (the CPU, and the pick stream):
	// otherwise the GPU also tries pulling them over PCIe itself, every
	// layer without the host, and keeps whichever way times faster
	// (gpu.Model.SetMappedExperts's MappedTrial; for comparisons).
	NoMappedExperts bool
	// ExpertReadAhead says when the CPU (the backend, or the CPU beside a
	// GPU) reads a mixture-of-experts model's storage experts ahead: each
	// MoE layer predicts the next layer's picks (that layer's router on
	// the residual at hand) and starts the reads of those on storage
	// (model.ExpertPrefetcher), holding every layer's router and FFN norm
	// in memory for it. ReadAheadAuto (the default) decides per batch
	// size by timing both ways; ReadAheadOn and ReadAheadOff are for
	// comparisons.
	ExpertReadAhead ReadAhead
	// Storage, when set, is where the pool named path lives: an extent of
	// a strata volume read by the userspace NVMe driver, not a file. path
	// is then only its name (nvme://BDF/NSID/NAME). The links are measured
	// through the storage's own source.
	Storage *Storage
	// WrapSource, when set, wraps the tier-C source (fault injection in
	// tests: stream.NewFaulty).
	WrapSource func(tier.Source) tier.Source
	// Logger receives the plan at debug level, the backend choice at info
	// level (why the GPU is not used) and warnings (O_DIRECT refused, link
	// measurement failed). Nil discards them.
	Logger hclog.Logger
	// Backend picks where passes run: BackendAuto ("" too) takes GPU 0
	// when CUDA is usable and the model loads there, and the CPU
	// otherwise, keeping the reason in BackendInfo; BackendCPU never
	// touches the GPU; BackendCUDA fails (wrapping ErrCUDAUnavailable
	// when there is no usable GPU) rather than fall back. On the GPU,
	// DeviceBudget is device memory (default: the free memory less a
	// reserve) and HostBudget the pinned host memory of tier B and of
	// tier C's staging buffers; tier C (a pool only: ErrCUDATierC for a
	// GGUF) is read from the pool file into pinned staging and copied to
	// the device every pass.
	Backend string
	// HandoffSpin is how long GPU calls spin for a result or the next call
	// before sleeping (kernels/cudadrv Device.SetSpin): 0 takes
	// gpu.DefaultHandoffSpin, a negative value never spins.
	HandoffSpin time.Duration
	// Skip leaves layers out of every pass (Engine.SkipLayers' spec: auto,
	// a count or a list); empty keeps them all. CPU backend only.
	Skip string
	// SkipLayers names the layers to leave out directly (OpenSelfDraft's
	// CPU drafter: every layer past its first ones), instead of Skip.
	SkipLayers []int
	// NoHybrid keeps the CPU out of a GPU's passes: every tier-B layer is
	// copied whole and computed on the GPU. By default the CPU computes the
	// FFN of the tier-B layers the hybrid plan gives it for each batch size
	// (gpu.Hybrid), planned against the measured pinned copy rate.
	NoHybrid bool
	// openDevice, when set, stands in for opening GPU 0 (tests stand in a
	// missing or failing GPU through export_test.go's WithOpenDevice).
	openDev func() (*cudadrv.Device, error)
	// memInfo, when set, stands in for reading /proc/meminfo
	// (export_test.go's WithMemInfo).
	memInfo func() (tier.MemInfo, error)
	// hostAvail is avail's reading, once availRead; availErr says why it
	// could not be read.
	hostAvail int64
	availRead bool
	availErr  error
}

// avail is the memory a load may take (tier.DefaultHostBudget) as the
// load first asked for it: before it copies a model into memory, since
// mapGGUF and openHF ask before they copy. Read after, it would leave out
// the bytes copied by then, which are the very weights the plan places.
func (o *Options) avail() (int64, error) {
	if !o.availRead {
		read := o.memInfo
		if read == nil {
			read = tier.ReadMemInfo
		}
		mi, err := read()
		o.hostAvail, o.availRead, o.availErr = tier.DefaultHostBudget(mi), true, err
	}
	return o.hostAvail, o.availErr
}

// hostBudget is HostBudget, or by default avail.
func (o *Options) hostBudget() (int64, error) {
	if o.HostBudget > 0 {
		return o.HostBudget, nil
	}
	n, err := o.avail()
	if err != nil {
		return 0, fmt.Errorf("%w (give a host budget)", err)
	}
	return n, nil
}

// mapGGUF copies the GGUF model at path into memory (gguf.Map) once its
// header says the copy fits in the memory available (o.avail; none checked
// when it cannot tell): a copy that does not fit would push the machine
// out of memory, where a pool streams what does not fit.
func (o *Options) mapGGUF(path string) (*gguf.Mapped, error) {
	h, err := gguf.ReadHeader(path)
	if err != nil {
		return nil, err
	}
	if err := o.fitsCopy(path, "a GGUF", h.Size, strings.TrimSuffix(path, ".gguf")+".pool"); err != nil {
		return nil, err
	}
	return gguf.Map(path)
}

// openHF copies the Hugging Face model in dir into memory (hf.Open) once
// its safetensors files fit in the memory available, as mapGGUF.
func (o *Options) openHF(dir string) (*hf.Model, error) {
	n, err := safetensors.DirSize(dir)
	if err != nil {
		return nil, err
	}
	if err := o.fitsCopy(dir, "a Hugging Face model", n, filepath.Clean(dir)+".pool"); err != nil {
		return nil, err
	}
	return hf.Open(dir)
}

// fitsCopy says why a model of n bytes held whole in memory (what) does
// not fit the memory available, naming the pool to convert it to; nil
// when it fits or the memory is unknown.
func (o *Options) fitsCopy(path, what string, n int64, pool string) error {
	avail, err := o.avail()
	if err != nil || n <= avail {
		return nil
	}
	return fmt.Errorf("its %s do not fit the %s of memory available (MemAvailable less a reserve), and %s is held whole in memory: %w; convert it once with `strata model prefab %s -o %s`, whose pool streams what does not fit",
		tier.FormatBytes(n), tier.FormatBytes(avail), what, ErrNeedsPool, path, pool)
}

// ErrNeedsPool is wrapped when a GGUF would have to be streamed: only a
// prefab pool (`strata model prefab`) has the one-read-per-layer extents
// and checksums the pipeline streams.
var ErrNeedsPool = errors.New("streaming needs a prefab pool")

// defaultContext caps the context the KV cache is planned for when
// Options.Context is 0, as `strata plan` does.
const defaultContext = 4096

// OpenWith opens a GGUF model or a prefab pool on the backend o.Backend
// picks and places its layers with the tier planner (engine/tier) within
// the budgets of o. On the GPU (engine/gpu) tier-A layers are resident in
// device memory and tier-B layers are copied from pinned host memory every
// pass, from a GGUF as well as a pool, and tier-C layers of a pool are
// read into pinned staging and copied every pass (FileSource with O_DIRECT;
// for a pool on a strata volume, Options.Storage, the userspace NVMe
// driver into its DMA staging, which is what CUDA pins; TierCRoute says
// which); BackendInfo says which backend runs
// the model and, when auto fell back to the CPU, why. On the CPU, when
// every layer fits resident it behaves like Open. Otherwise (only for a pool) it builds
// a streaming pipeline (engine/stream: a FileSource with O_DIRECT over the
// pool, or the storage's source, for tier C, the pool's mapping for tier B,
// the CPU device) and
// installs it as the model's layer source, so the scheduler, Forward and a bare
// Model.Forward stream the layers that do not fit; Plan and PipelineStats
// report what was decided and what moved. A GGUF that does not fit is
// refused with an error wrapping ErrNeedsPool that gives the prefab
// command; a model that does not fit even streamed is refused with an
// error wrapping tier.ErrNoFit.
func OpenWith(ctx context.Context, path string, o Options) (*Engine, error) {
	e, err := openWith(ctx, path, o)
	if err == nil && o.Logger != nil {
		// Quirks of real files that were ignored or assumed: the model
		// runs, and the log says what was made of the file.
		for _, w := range e.Tok.Vocab().Warnings {
			o.Logger.Warn("model file", "model", path, "warning", w)
		}
	}
	if err != nil || (o.Skip == "" && len(o.SkipLayers) == 0) {
		return e, err
	}
	if e.cuda != nil {
		e.Close()
		return nil, fmt.Errorf("model %s: layer skip runs on the CPU backend only (load with backend cpu)", path)
	}
	skip := slices.Compact(slices.Sorted(slices.Values(o.SkipLayers)))
	switch {
	case o.Skip != "" && len(skip) > 0:
		err = errors.New("layer skip given both as a spec and as a list")
	case o.Skip != "":
		skip, _, err = e.SkipLayers(ctx, o.Skip)
	case len(skip) >= e.Model.Config.Layers:
		err = fmt.Errorf("skip layers %v: every layer", skip)
	}
	if err == nil {
		err = e.Model.SetSkip(skip)
	}
	if err == nil && e.pipe != nil {
		// The pipeline leaves them out too: a skipped streamed layer is
		// not read or copied at all.
		err = e.pipe.SetSkip(skip)
	}
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	e.skipped = skip
	if log := o.Logger; log != nil {
		log.Info("layer skip", "model", path, "spec", o.Skip, "skipped", fmt.Sprint(skip))
	}
	return e, nil
}

func openWith(ctx context.Context, path string, o Options) (*Engine, error) {
	if o.DeviceBudget < 0 || o.HostBudget < 0 || o.Context < 0 || o.Batch < 0 || o.Depth < 0 {
		return nil, fmt.Errorf("opening model %s: budgets, context, batch and depth must not be negative", path)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if o.LinkCache == nil {
		o.LinkCache = NewLinkCache()
	}
	backend, err := ParseBackend(o.Backend)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	// Read the memory available now, as the load begins: every later
	// step (the GPU's plan and the CPU's after it) plans with this one
	// reading. An error shows where a default budget is needed.
	_, _ = o.avail()
	isPool := o.Storage != nil
	isHF := !isPool && hf.IsDir(path)
	if !isPool && !isHF {
		if isPool, err = prefab.IsPool(path); err != nil {
			return nil, fmt.Errorf("opening model %s: %w", path, err)
		}
	}
	var (
		pool  *prefab.Pool
		gf    *gguf.Mapped
		hfm   *hf.Model
		sizes tier.Sizes
		cfg   model.Config
	)
	closeAll := func() {
		if pool != nil {
			pool.Close()
		}
		if gf != nil {
			gf.Close()
		}
		if hfm != nil {
			hfm.Close()
		}
	}
	if o.Storage != nil {
		if pool, err = openStoragePool(path, o.Storage); err != nil {
			return nil, err
		}
		sizes, cfg = pool.Sizes(), pool.Config()
	} else if isHF {
		// A Hugging Face directory plans as the pool it would prefab
		// to; like a GGUF it is held in memory or streamed from tier B,
		// never from tier C.
		if hfm, err = o.openHF(path); err != nil {
			return nil, fmt.Errorf("opening model %s: %w", path, err)
		}
		cfg = hfm.Model.Config
		if sizes, err = prefab.SizesFromModel(hfm.Model, prefab.TypeKeep); err != nil {
			hfm.Close()
			return nil, fmt.Errorf("model %s: %w", path, err)
		}
	} else if isPool {
		if pool, err = prefab.OpenPool(path); err != nil {
			return nil, fmt.Errorf("opening model %s: %w", path, err)
		}
		sizes, cfg = pool.Sizes(), pool.Config()
	} else {
		if gf, err = o.mapGGUF(path); err != nil {
			return nil, fmt.Errorf("opening model %s: %w", path, err)
		}
		if sizes, cfg, err = prefab.SizesFromGGUF(gf.File, prefab.TypeKeep); err != nil {
			gf.Close()
			return nil, fmt.Errorf("model %s: %w", path, err)
		}
	}
	info := BackendInfo{Name: BackendCPU, Requested: backend}
	if backend != BackendCPU {
		e, err := openCUDA(ctx, cudaSource{path: path, pool: pool, gf: gf, hf: hfm, sizes: sizes, cfg: cfg}, o, log)
		if err == nil {
			e.binfo.Requested = backend
			log.Info("model on the GPU", "model", path, "backend", e.binfo.String(),
				"tier_a", e.plan.Tiers[tier.TierA].Layers, "tier_b", e.plan.Tiers[tier.TierB].Layers,
				"device_weights", tier.FormatBytes(e.binfo.WeightBytes), "streamed_per_pass", tier.FormatBytes(e.binfo.StreamedBytes))
			return e, nil
		}
		if backend == BackendCUDA || ctx.Err() != nil {
			// A cancelled load is not a reason to fall back to the CPU.
			closeAll()
			return nil, fmt.Errorf("model %s: backend %s: %w", path, backend, err)
		}
		// auto: the CPU takes the model; say why.
		info.Reason = err.Error()
		if errors.Is(err, ErrCUDAUnavailable) {
			log.Info("CUDA unavailable; running on the CPU backend", "model", path, "reason", info.Reason)
		} else {
			info.Reason = "CUDA backend failed: " + info.Reason
			log.Warn("the CUDA backend could not take the model; running on the CPU backend", "model", path, "reason", info.Reason)
		}
	}
	plan, err := o.plan(ctx, path, isPool, sizes, cfg, log)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	var xplan *tier.ExpertPlan
	if cfg.MoE() {
		if xplan, err = planExperts(path, plan, sizes, log); err != nil {
			closeAll()
			return nil, err
		}
	}
	streamed := plan.Tiers[tier.TierB].Layers + plan.Tiers[tier.TierC].Layers
	log.Debug("tier plan", "model", path, "tier_a", plan.Tiers[tier.TierA].Layers, "tier_b", plan.Tiers[tier.TierB].Layers,
		"tier_c", plan.Tiers[tier.TierC].Layers, "depth", plan.Depth, "bound", plan.Bound.String(),
		"expected_pass", plan.PassTime.String())
	if streamed == 0 && (xplan == nil || xplan.AllResident()) {
		var e *Engine
		switch {
		case pool != nil:
			e, err = fromPool(ctx, path, pool)
		case hfm != nil:
			e, err = fromHF(ctx, path, hfm)
		default:
			e, err = fromMapped(ctx, path, gf)
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		info.Kernels = e.binfo.Kernels
		e.plan, e.binfo, e.expertPlan = plan, info, xplan
		return e, nil
	}
	if !isPool && streamed == 0 {
		closeAll()
		return nil, fmt.Errorf("model %s: the plan keeps %s of experts on storage (%s left for them): %w; convert it once with `strata model prefab %s -o %s` and open the pool",
			path, tier.FormatBytes(xplan.StorageBytes), tier.FormatBytes(plan.ExpertBudget()), ErrNeedsPool,
			path, strings.TrimSuffix(path, ".gguf")+".pool")
	}
	if !isPool {
		closeAll()
		budgets := "memory budget " + tier.FormatBytes(plan.Device.Budget)
		if !plan.Shared {
			budgets = fmt.Sprintf("device budget %s, host budget %s", tier.FormatBytes(plan.Device.Budget), tier.FormatBytes(plan.Host.Budget))
		}
		fix := fmt.Sprintf("convert it once with `strata model prefab %s -o %s` and open the pool", path, strings.TrimSuffix(path, ".gguf")+".pool")
		if o.Tiers != "" {
			return nil, fmt.Errorf("model %s: the forced placement %q streams %d of %d layers: %w; %s",
				path, o.Tiers, streamed, len(plan.Layers), ErrNeedsPool, fix)
		}
		return nil, fmt.Errorf("model %s: the plan streams %d of %d layers (%s, of which the KV cache for %d sequences takes %s): %w; %s, or plan for a shorter context or a smaller batch",
			path, streamed, len(plan.Layers), budgets, plan.Batch, tier.FormatBytes(plan.Device.KV), ErrNeedsPool, fix)
	}
	e, err := streamPool(ctx, path, pool, plan, xplan, o, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	info.Kernels = e.binfo.Kernels
	e.binfo = info
	return e, nil
}

// plan builds the planner request from o and the model's sizes and plans
// (or costs the forced placement).
func (o *Options) plan(ctx context.Context, path string, isPool bool, sizes tier.Sizes, cfg model.Config, log hclog.Logger) (*tier.Plan, error) {
	ctxLen := o.Context
	if ctxLen == 0 {
		ctxLen = defaultContext
	}
	ctxLen = min(ctxLen, cfg.Context)
	batch := max(o.Batch, 1)
	req := tier.Request{
		Sizes: sizes, Depth: o.Depth, Batch: batch,
		KVBytes:      model.KVCacheBytes(cfg, ctxLen, batch),
		ScratchBytes: model.ScratchBytes(cfg, ctxLen, max(batch, min(ctxLen, 512)), runtime.GOMAXPROCS(0)),
		Links:        tier.DefaultLinks(),
	}
	host, err := o.hostBudget()
	if err != nil {
		return nil, err
	}
	if o.DeviceBudget > 0 {
		req.DeviceBudget, req.HostBudget = o.DeviceBudget, host
	} else {
		req.DeviceBudget, req.HostBudget, req.Shared = host, host, true
	}
	if o.Links != nil {
		req.Links = *o.Links
	}
	// measure takes the links from the cache; a failed measurement plans
	// with the defaults, but a cancelled one stops the load.
	measure := func() error {
		if o.Links != nil || !isPool {
			return nil
		}
		l, err := o.LinkCache.cpu(ctx, path, o.Storage, sizes.Type)
		if ctx.Err() != nil {
			return fmt.Errorf("measuring links: %w", ctx.Err())
		}
		if err != nil {
			log.Warn("measuring links failed; planning with default link speeds", "error", err)
			return nil
		}
		req.Links = l
		return nil
	}
	if o.Tiers != "" {
		ts, err := tier.MixTiers(o.Tiers, len(sizes.Layers))
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t != tier.TierA {
				if err := measure(); err != nil {
					return nil, err
				}
				break
			}
		}
		return tier.PlanTiers(req, ts)
	}
	p, err := tier.NewPlan(req)
	if err != nil {
		return nil, err
	}
	if p.Depth == 0 || o.Links != nil || !isPool {
		return p, nil
	}
	// Streaming is needed: the links now decide the placement and depth.
	// (A plan that fits resident is the best under any link speeds, so
	// only streamed plans pay for a measurement.)
	if err := measure(); err != nil {
		return nil, err
	}
	return tier.NewPlan(req)
}

// streamPool builds the engine of a pool whose plan streams some layers.
func streamPool(ctx context.Context, path string, pool *prefab.Pool, plan *tier.Plan, xplan *tier.ExpertPlan, o Options, log hclog.Logger) (*Engine, error) {
	tiers := make([]tier.Tier, len(plan.Layers))
	needSource := xplan != nil // experts are read from the pool's storage
	for i, l := range plan.Layers {
		tiers[i] = l.Tier
		needSource = needSource || l.Tier == tier.TierC
	}
	// Tier-A layers are used in place every pass: verify them now, as
	// OpenPool does (tier-B and tier-C extents are verified by the
	// pipeline on first use).
	if err := verifyPool(ctx, pool, func(i int) bool { return tiers[i] == tier.TierA }); err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	e, err := poolEngine(path, pool, pool.StreamingModel)
	if err != nil {
		return nil, err
	}
	var src tier.Source
	if needSource {
		src, err = tierCSource(path, &o, func() (tier.Source, error) {
			return stream.OpenFile(path, stream.FileOptions{Logger: log})
		})
		if err != nil {
			return nil, err
		}
		e.route = routeFor(&o, BackendCPU)
	}
	pipe, err := stream.New(stream.Options{
		Store: pool, Tiers: tiers, Depth: max(plan.Depth, 1), Source: src, Device: stream.CPUDevice{}, Verify: o.Verify, Logger: log,
	})
	if err != nil {
		if src != nil {
			src.Close()
		}
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	e.Model.SetLayerSource(pipe)
	e.plan, e.pipe, e.src = plan, pipe, src
	if xplan != nil {
		// The pool's layers hold no experts: the store serves them.
		xs, err := newExpertStore(ctx, pool, src, *xplan, o.Verify, log)
		if err != nil {
			e.Model.SetLayerSource(nil)
			pipe.Close()
			if src != nil {
				src.Close()
			}
			return nil, fmt.Errorf("model %s: %w", path, err)
		}
		if err := xs.enableReadAhead(ctx, o.ExpertReadAhead, path); err != nil {
			xs.close()
			e.Model.SetLayerSource(nil)
			pipe.Close()
			if src != nil {
				src.Close()
			}
			return nil, fmt.Errorf("model %s: %w", path, err)
		}
		e.Model.SetExpertSource(xs)
		if err := e.useExperts(ctx, xs, xplan, o, log); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// planExperts places a mixture-of-experts model's experts within what
// plan leaves of the host memory (tier.Plan's ExpertBudget): the most
// used per byte resident, the rest read when routed to. The CPU and the
// GPU backends plan them alike, since the CPU computes the experts on
// both.
func planExperts(path string, plan *tier.Plan, sizes tier.Sizes, log hclog.Logger) (*tier.ExpertPlan, error) {
	xp, err := tier.PlanExperts(sizes.Experts, nil, plan.ExpertBudget())
	if err != nil {
		return nil, fmt.Errorf("model %s: experts: %w", path, err)
	}
	log.Debug("expert plan", "model", path, "resident", xp.ResidentCount(), "resident_bytes", tier.FormatBytes(xp.ResidentBytes),
		"storage_bytes", tier.FormatBytes(xp.StorageBytes), "read_buffers", xp.Buffers, "budget", tier.FormatBytes(plan.ExpertBudget()))
	return &xp, nil
}

// useExperts makes xs, built from xplan and already installed where the
// engine's backend takes experts from (the CPU model, or engine/gpu's
// FFN device through gpu.Options.Experts), the engine's expert store, and
// unless the options say not to, places the experts by their use on the
// calibration text. On an error the caller closes the engine, which now
// owns xs.
func (e *Engine) useExperts(ctx context.Context, xs *expertStore, xplan *tier.ExpertPlan, o Options, log hclog.Logger) error {
	e.experts, e.expertPlan = xs, xplan
	if xplan.AllResident() || o.NoExpertCalibration {
		return nil
	}
	if err := e.calibrateExperts(ctx); err != nil {
		return fmt.Errorf("model %s: calibrating expert placement: %w", e.path, err)
	}
	log.Debug("experts placed by their use on the calibration text", "model", e.path, "backend", e.backend.Name())
	if e.expertPlan.Device != nil {
		e.logDeviceExperts(log)
	}
	return nil
}

// logDeviceExperts says how the calibration placed the experts in device
// memory.
func (e *Engine) logDeviceExperts(log hclog.Logger) {
	xp := e.expertPlan
	log.Info("experts placed in device memory by their use on the calibration text", "model", e.path,
		"experts", xp.DeviceCount(), "bytes", xp.DeviceBytes, "whole_layers", xp.DeviceWholeLayers(), "calibration_hit", xp.DeviceHit)
}

// calibrationTokens bounds the calibration text a MoE model's expert
// placement is measured on.
const calibrationTokens = 256

// calibrateExperts runs the built-in calibration text through the model
// (one sequence, passes of 64 tokens) and makes the experts its tokens
// were routed to most, per byte, resident: on a GPU in device memory
// (placeDeviceExperts), and in host memory (the store's) the most used of
// the others: expected use measured before the first request rather than
// guessed from expert order.
//
// It runs on the engine's backend, whose routing counts it reads: the CPU
// model's, or the GPU's (which routes on the device).
func (e *Engine) calibrateExperts(ctx context.Context) error {
	r, err := e.routeCalibration(ctx)
	if err != nil {
		return err
	}
	counts, first, second := r.Counts, r.First, r.Second
	// The device's experts first (uploaded from wherever the host holds
	// them now); then host memory goes to the others: the CPU never
	// computes an expert the GPU holds, so its count no longer earns it
	// host residency.
	if err := e.placeDeviceExperts(ctx, first, second); err != nil {
		return err
	}
	// What serving reports starts here (the placement's promotions and
	// the text's picks are the load's).
	defer func() { e.xbase, _ = e.expertsSinceOpen() }()
	if e.experts == nil {
		return nil
	}
	return e.experts.rebalance(ctx, tier.OffDevice(counts, e.expertPlan.Device))
}

// Routing is the routing counts of the calibration text, per layer and
// expert: Counts over the whole text, First and Second over its halves
// (Second nil for a text too short to halve), Tokens how many it routed.
type Routing struct {
	Counts, First, Second [][]uint64
	Tokens                int
}

// routeCalibration runs the calibration text (one sequence, passes of 64
// tokens) on the backend and returns how its tokens were routed. The
// text's halves are counted apart: the device's placement is made from
// one and checked on the other (tier.DeviceCost.Holdout).
func (e *Engine) routeCalibration(ctx context.Context) (Routing, error) {
	before := e.ExpertCounts()
	toks := e.Tok.Encode(calibration, true, false)
	toks = toks[:min(len(toks), calibrationTokens, e.Model.Config.Context, e.backend.MaxContext())]
	seq, err := e.backend.NewSequence(len(toks))
	if err != nil {
		return Routing{}, err
	}
	defer seq.Close()
	var mid [][]uint64
	for lo := 0; lo < len(toks); lo += 64 {
		if mid == nil && lo >= len(toks)/2 {
			mid = e.ExpertCounts()
		}
		b := []model.Step{{Seq: seq, Tokens: toks[lo:min(lo+64, len(toks))]}}
		if err := e.backend.Forward(ctx, b); err != nil {
			return Routing{}, err
		}
	}
	after := e.ExpertCounts()
	if after == nil || before == nil {
		return Routing{}, errors.New("the backend counts no routing")
	}
	r := Routing{Counts: tier.CountsSince(before, after), Tokens: len(toks)}
	r.First = r.Counts
	if mid != nil {
		r.First, r.Second = tier.CountsSince(before, mid), tier.CountsSince(mid, after)
	}
	return r, nil
}

// CalibrationRouting opens the mixture-of-experts model at path on the
// CPU within hostBudget bytes of host memory (0: Options.HostBudget's
// default; experts beyond it read from storage, as a pool's are) and
// returns how the calibration text the engine places experts by at load
// is routed: what `strata plan` places experts by before anything is
// served.
func CalibrationRouting(ctx context.Context, path string, hostBudget int64) (Routing, error) {
	e, err := OpenWith(ctx, path, Options{Backend: BackendCPU, HostBudget: hostBudget, Context: calibrationTokens, NoExpertCalibration: true})
	if err != nil {
		return Routing{}, err
	}
	defer e.Close()
	if !e.Model.Config.MoE() {
		return Routing{}, fmt.Errorf("%s: not a mixture-of-experts model", path)
	}
	r, err := e.routeCalibration(ctx)
	if err != nil {
		return Routing{}, fmt.Errorf("routing the calibration text: %w", err)
	}
	return r, nil
}

// placeDeviceExperts makes the experts that save the CPU most per byte by
// counts (nil: by size and order) resident in the device memory the plan
// left for them (tier.ExpertPlan.PlaceOnDevice, weighing the CPU's cost
// of a layer measured by gpu.Model.MoEHop, with holdout, when not nil,
// the counts of other tokens that choose how), computed on the GPU; a
// no-op off a GPU or without room.
func (e *Engine) placeDeviceExperts(ctx context.Context, counts, holdout [][]uint64) error {
	if e.cuda == nil || e.expertPlan == nil || e.deviceExperts <= 0 {
		return nil
	}
	hop, err := e.cuda.MoEHop(ctx)
	if err != nil {
		return fmt.Errorf("experts in device memory: %w", err)
	}
	e.xmu.Lock()
	e.expertPlan.PlaceOnDevice(e.expertSizes, counts, e.deviceExperts, tier.DeviceCost{Used: e.Model.Config.ExpertsUsed, Hop: hop, Holdout: holdout})
	e.xmu.Unlock()
	if err := e.cuda.SetResidentExperts(ctx, e.expertPlan.DeviceLists()); err != nil {
		return fmt.Errorf("experts in device memory: %w", err)
	}
	return nil
}

// ExpertCounts is the routing counts of the backend's passes so far, per
// layer and expert (model.Model's ExpertCounts; nil for a dense model):
// what the placement of experts follows, for tools that study it.
func (e *Engine) ExpertCounts() [][]uint64 {
	if e.cuda != nil {
		return e.cuda.ExpertCounts()
	}
	return e.Model.ExpertCounts()
}

// ExpertPlan is where a mixture-of-experts model's experts live (nil for a
// dense model, and for one not planned: Open, OpenPool). Treat it as
// read-only.
func (e *Engine) ExpertPlan() *tier.ExpertPlan { return e.expertPlan }

// ExpertStats counts how expert uses were served so far; ok is false when
// no store serves the experts (a dense model, or every expert in place).
func (e *Engine) ExpertStats() (s ExpertStats, ok bool) {
	if e.experts == nil {
		return ExpertStats{}, false
	}
	return e.experts.Stats().Since(e.xbase.Stats), true
}

// Since is s less the counts of b, an earlier reading of the same store:
// what was counted between them (the trials' choices are s's).
func (s ExpertStats) Since(b ExpertStats) ExpertStats {
	s.Resident -= b.Resident
	s.Buffered -= b.Buffered
	s.Prefetched -= b.Prefetched
	s.Read -= b.Read
	s.ReadBytes -= b.ReadBytes
	s.ReadTime -= b.ReadTime
	s.PrefetchReads -= b.PrefetchReads
	s.PrefetchWait -= b.PrefetchWait
	s.Failed -= b.Failed
	s.Promoted -= b.Promoted
	s.Demoted -= b.Demoted
	s.PromoteReads -= b.PromoteReads
	return s
}

// ExpertInfo is where a mixture-of-experts model's experts are now and how
// their uses were served.
type ExpertInfo struct {
	// Experts is every expert of every layer; Resident how many of them
	// are held in memory now, taking ResidentBytes, and StorageBytes what
	// the others hold in the pool file.
	Experts, Resident           int
	ResidentBytes, StorageBytes int64
	// Residency says, per layer and expert, which are resident.
	Residency [][]bool
	// Buffers read buffers of BufferBytes hold experts read on demand.
	Buffers     int
	BufferBytes int64
	// Stats counts the uses (zero when every expert is in place: nothing
	// is counted then).
	Stats ExpertStats
	// On a GPU, OnDevice of the experts are also held in device memory
	// (Device says which), taking DeviceBytes, and computed there;
	// DeviceUses counts the (token, expert) picks of experts in device
	// memory, CPUUses those of the others (computed on the CPU, or copied
	// to the GPU: StreamedPicks).
	OnDevice            int
	DeviceBytes         int64
	Device              [][]bool
	DeviceUses, CPUUses uint64
	// DeviceWholeLayers counts the layers whose every expert is in device
	// memory (they need no host).
	DeviceWholeLayers int
	// DeviceMoves counts the experts moved into device memory while
	// serving, by the routing served (Options.NoExpertAdaptation).
	DeviceMoves uint64
	// StreamedPicks counts the picks of experts off the device sent
	// over PCIe and computed on the GPU beside the CPU
	// (Options.NoStreamPicks); MappedPicks those the GPU pulled over PCIe
	// itself with no CPU in the layer (Options.NoMappedExperts). CPUUses
	// counts both. MappedWay says which way the picks of experts off the
	// device take at one token: "through the host", "pulled by the GPU",
	// either with "(kept by trial)", or "by trial, undecided"; empty
	// where the GPU never pulls them.
	StreamedPicks, MappedPicks uint64
	MappedWay                  string
	// On a GPU, CPUBusy is the CPU's time in the layers it had picks in,
	// CPUBytes the expert bytes it read there (each expert once a layer),
	// and Hop the time handing over (waiting for a layer's routing, the
	// hidden state's copies): where a pass's time goes beside the GPU's.
	// PCIeBytes is the expert bytes copied over PCIe for the GPU (the
	// pick stream's and the pulled ones): with CPUBytes, what moved off
	// the device. CPUBeside is the part of CPUBusy the host's thread spent
	// issuing the GPU's share of those layers.
	CPUBusy, Hop, CPUBeside time.Duration
	CPUBytes, PCIeBytes     int64
	// StreamBatchLayers counts the layers of passes of several tokens
	// whose CPU experts the pick stream shared with PCIe, StreamCapped
	// those of them whose PCIe share the staging slots cut short.
	StreamBatchLayers, StreamCapped uint64
	// StreamSideLayers counts those whose GPU side was timed from the
	// CPU's start to the end of the GPU's share, StreamSideLate those
	// where it ended after the CPU's share, StreamSideTail by how much in
	// all: the part of Hop spent waiting for PCIe's share.
	StreamSideLayers, StreamSideLate uint64
	StreamSideTail                   time.Duration
	// StreamAhead counts the experts the pick stream copied ahead for a
	// batch layer from its guessed routing during the hand-over before
	// it, StreamAheadUsed those of them the layer's CPU would have
	// computed (the GPU did); their bytes are in PCIeBytes.
	StreamAhead, StreamAheadUsed uint64
}

// DeviceHit is the share of the picks the GPU computed from experts in
// device memory (0 before any).
func (x ExpertInfo) DeviceHit() float64 {
	if x.DeviceUses+x.CPUUses == 0 {
		return 0
	}
	return float64(x.DeviceUses) / float64(x.DeviceUses+x.CPUUses)
}

// Since is x with its counts (the picks by where they were served, the
// moves, the store's Stats) less b's, an earlier report of the same
// engine: what was counted between them. Where the experts are is x's.
func (x ExpertInfo) Since(b ExpertInfo) ExpertInfo {
	x.DeviceUses -= b.DeviceUses
	x.CPUUses -= b.CPUUses
	x.StreamedPicks -= b.StreamedPicks
	x.MappedPicks -= b.MappedPicks
	x.DeviceMoves -= b.DeviceMoves
	x.CPUBusy -= b.CPUBusy
	x.Hop -= b.Hop
	x.CPUBeside -= b.CPUBeside
	x.CPUBytes -= b.CPUBytes
	x.PCIeBytes -= b.PCIeBytes
	x.StreamBatchLayers -= b.StreamBatchLayers
	x.StreamCapped -= b.StreamCapped
	x.StreamSideLayers -= b.StreamSideLayers
	x.StreamSideLate -= b.StreamSideLate
	x.StreamSideTail -= b.StreamSideTail
	x.StreamAhead -= b.StreamAhead
	x.StreamAheadUsed -= b.StreamAheadUsed
	x.Stats = x.Stats.Since(b.Stats)
	return x
}

// Experts reports a mixture-of-experts model's expert placement and how
// the experts served since the load (its calibration is not counted); ok
// is false for a dense model or one opened without a plan.
func (e *Engine) Experts() (ExpertInfo, bool) {
	in, ok := e.expertsSinceOpen()
	return in.Since(e.xbase), ok
}

// expertsSinceOpen is Experts counting from the engine's start.
func (e *Engine) expertsSinceOpen() (ExpertInfo, bool) {
	xp := e.expertPlan
	if xp == nil {
		return ExpertInfo{}, false
	}
	in := ExpertInfo{ResidentBytes: xp.ResidentBytes, StorageBytes: xp.StorageBytes, Buffers: xp.Buffers, BufferBytes: xp.BufferBytes}
	res := xp.Resident
	if e.experts != nil {
		res, in.ResidentBytes = e.experts.Residency()
		in.Stats = e.experts.Stats()
	}
	// Re-placement moves bytes between the two sides; their sum is the
	// plan's.
	in.StorageBytes = xp.ResidentBytes + xp.StorageBytes - in.ResidentBytes
	in.Residency = res
	e.xmu.Lock()
	in.OnDevice, in.DeviceBytes, in.Device, in.DeviceWholeLayers = xp.DeviceCount(), xp.DeviceBytes, cloneMask(xp.Device), xp.DeviceWholeLayers()
	e.xmu.Unlock()
	if a := e.adapter; a != nil {
		in.DeviceMoves = a.moved.Load()
	}
	if e.cuda != nil {
		if st, ok := e.cuda.MoEStats(); ok {
			// Picks sent over PCIe for the GPU to compute were of
			// experts the device does not hold: misses, as the CPU's.
			off := st.Streamed.Picks + st.Mapped.Picks
			in.DeviceUses, in.CPUUses = uint64(st.GPUExperts-off), uint64(st.CPUExperts+off)
			in.StreamedPicks, in.MappedPicks = uint64(st.Streamed.Picks), uint64(st.Mapped.Picks)
			in.MappedWay = mappedWay(st.Mapped)
			in.CPUBusy, in.Hop, in.CPUBeside, in.CPUBytes = st.Busy, st.Hop, st.Beside, st.CPUBytes
			in.PCIeBytes = st.Streamed.Bytes + st.Streamed.AheadBytes + st.Mapped.Bytes
			in.StreamBatchLayers, in.StreamCapped = uint64(st.Streamed.BatchLayers), uint64(st.Streamed.Capped)
			in.StreamSideLayers, in.StreamSideLate, in.StreamSideTail = uint64(st.Streamed.SideLayers), uint64(st.Streamed.SideLate), st.Streamed.SideTail
			in.StreamAhead, in.StreamAheadUsed = uint64(st.Streamed.AheadStaged), uint64(st.Streamed.AheadUsed)
		}
	}
	for _, l := range res {
		in.Experts += len(l)
		for _, r := range l {
			if r {
				in.Resident++
			}
		}
	}
	return in, true
}

// DeviceExpertBytes is the device memory the load left a
// mixture-of-experts model's experts on a GPU (DeviceExpertBudget of its
// plan); 0 on the CPU, for a dense model, or where nothing was left.
func (e *Engine) DeviceExpertBytes() int64 { return e.deviceExperts }

// Plan is the tier plan the engine runs: every layer's tier, the pipeline
// depth and the expected cost of a pass. It is nil for an engine opened
// with Open or OpenPool (all resident, not planned). On the CPU backend
// (Shared) the pipeline's tier-C staging buffers appear as Host.Staging,
// within the same budget as Device (see tier.Request.Shared). Treat it as
// read-only.
func (e *Engine) Plan() *tier.Plan { return e.plan }

// Streamed reports whether some layers are streamed every pass (tiers B
// and C): through the CPU pipeline, or over PCIe into the GPU's slots
// (tier C through pinned staging).
func (e *Engine) Streamed() bool {
	return e.pipe != nil || (e.cuda != nil && e.cuda.StreamedBytes() > 0)
}

// PipelineStats returns the streaming pipeline's counters summed over every
// pass since the engine opened (bytes, busy and stall time per stage,
// achieved bandwidth, overlap), or nil when nothing is streamed. On the
// GPU the copy and compute stages are timed with CUDA events (see
// engine/gpu's Model.PipelineStats).
func (e *Engine) PipelineStats() *stream.Stats {
	if e.pipe == nil {
		if e.cuda != nil {
			if st, _, ok := e.cuda.PipelineStats(); ok {
				return &st
			}
		}
		return nil
	}
	st := e.pipe.Stats()
	return &st
}

// LastPassStats returns the most recent pass's pipeline counters, or nil
// when nothing is streamed.
func (e *Engine) LastPassStats() *stream.Stats {
	if e.pipe == nil {
		if e.cuda != nil {
			if _, st, ok := e.cuda.PipelineStats(); ok {
				return &st
			}
		}
		return nil
	}
	st := e.pipe.LastPass()
	return &st
}

// OpenDraft opens the model at path as target's draft model (speculative
// decoding: its guesses are checked against target's tokens), refusing
// one whose vocabulary differs. The draft runs where target runs: on the
// GPU a drafted token costs a fraction of what it costs on the CPU, and
// the CPU may be busy with target's own hybrid share. Where it cannot
// load there (device memory taken by target), it runs on the CPU. o's
// Backend is overridden.
func OpenDraft(ctx context.Context, path string, target *Engine, o Options) (*Engine, error) {
	o.Backend = BackendCPU
	if target.binfo.Name == BackendCUDA {
		o.Backend = BackendCUDA
		o.NoHybrid = true // the draft is small: resident, never streamed
		d, err := OpenWith(ctx, path, o)
		if err == nil && d.binfo.Name == BackendCUDA {
			if err := checkDraftVocab(path, d, target); err != nil {
				d.Close()
				return nil, err
			}
			return d, nil
		}
		if err == nil {
			d.Close()
		}
		if o.Logger != nil {
			o.Logger.Info("the draft model runs on the CPU: it did not load on the GPU", "path", path, "error", err)
		}
		o.Backend = BackendCPU
	}
	d, err := OpenWith(ctx, path, o)
	if err != nil {
		return nil, fmt.Errorf("draft model %s: %w", path, err)
	}
	if err := checkDraftVocab(path, d, target); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// OpenSelfDraft makes target's own drafter: its first layers, then
// straight to the output head (an early exit), with a cache of its own.
// layers is how many it keeps (0: a quarter of the model's). Guessing
// costs that fraction of a plain pass and no second model; how often the
// guesses hold is what `strata bench quality` reports as the
// self-drafter's acceptance. On a GPU whose first layers are resident the
// drafter is target's own model there (its passes stop after layers; its
// sequences take target's slots); otherwise path is opened again on the
// CPU with the later layers skipped (the file is mapped again, so its
// pages are shared with target's, not copied).
func OpenSelfDraft(ctx context.Context, path string, target *Engine, layers int, o Options) (*Engine, error) {
	L := target.Model.Config.Layers
	if layers == 0 {
		layers = max(1, L/4)
	}
	if layers < 1 || layers >= L {
		return nil, fmt.Errorf("self-draft: %d layers of a %d-layer model (want 1..%d)", layers, L, L-1)
	}
	if d, ok := selfDraftCUDA(target, layers); ok {
		return d, nil
	}
	o.Backend, o.Skip, o.SkipLayers = BackendCPU, "", nil
	for l := layers; l < L; l++ {
		o.SkipLayers = append(o.SkipLayers, l)
	}
	d, err := OpenWith(ctx, path, o)
	if err != nil {
		return nil, fmt.Errorf("self-draft of %s: %w", path, err)
	}
	return d, nil
}

// checkDraftVocab refuses a draft whose vocabulary differs from target's.
func checkDraftVocab(path string, d, target *Engine) error {
	if d.Model.Config.Vocab != target.Model.Config.Vocab {
		return fmt.Errorf("draft model %s has %d tokens, the model %d: speculation needs the same vocabulary",
			path, d.Model.Config.Vocab, target.Model.Config.Vocab)
	}
	return nil
}
