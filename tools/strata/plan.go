package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/hf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tier"
)

func init() { registerCommand(planCommand) }

// planOptions are `strata plan`'s inputs after flag parsing; sizes are
// bytes, rates bytes/s, zero means "default".
type planOptions struct {
	VRAM, RAM       int64
	Ctx, Batch      int
	Depth           int
	Type            string // prefab type to plan a GGUF for
	StorageBW       float64
	H2DBW           float64
	ComputeBW       float64
	NoMeasure       bool
	MeasureDuration time.Duration
	// NoHybrid leaves the CPU out of a device plan's tier B.
	NoHybrid bool
	// Routing places a mixture-of-experts model's experts by the routing
	// of the calibration text, run on the CPU first (planExperts).
	Routing bool
}

func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "show which tier (A device, B host RAM, C storage) each layer of a model would live on, and why",
		ArgsUsage: "MODEL (a GGUF, a prefab pool or a Hugging Face directory)",
		Description: "Without --vram the CPU backend is planned: device memory is host memory (--ram, default\n" +
			"MemAvailable minus a reserve), so layers are resident (A) or read from storage (C). With --vram\n" +
			"a device with that much free memory is planned, fed from --ram of host memory.\n" +
			"Link speeds are measured (storage: O_DIRECT reads of MODEL; h2d: memmove; compute: the CPU\n" +
			"kernels) unless given or --no-measure.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "vram", Usage: "device memory budget, e.g. 24GiB (default: none, plan the CPU backend)"},
			&cli.StringFlag{Name: "ram", Usage: "host memory budget, e.g. 32GiB (default: MemAvailable minus a reserve)"},
			&cli.IntFlag{Name: "ctx", Value: 4096, Usage: "context length per sequence (capped at the model's)"},
			&cli.IntFlag{Name: "batch", Value: 1, Usage: "sequences advanced per pass"},
			&cli.IntFlag{Name: "depth", Usage: "pipeline depth (slots); 0 = choose"},
			&cli.StringFlag{Name: "type", Value: prefab.TypeKeep, Usage: "for a GGUF: plan the pool strata model prefab --type would write (keep|q8_0|q4_k|int8)"},
			&cli.StringFlag{Name: "storage-bw", Usage: "storage read bandwidth, e.g. 3.5GB/s (default: measured)"},
			&cli.StringFlag{Name: "h2d-bw", Usage: "host-to-device bandwidth, e.g. 25GB/s (default: measured)"},
			&cli.StringFlag{Name: "compute-bw", Usage: "weight bytes/s the device consumes, e.g. 2TB/s (default: measured)"},
			&cli.BoolFlag{Name: "no-measure", Usage: "use default link speeds instead of measuring"},
			&cli.BoolFlag{Name: "no-hybrid", Usage: "with --vram, leave the CPU out: every tier-B layer crosses to the device whole (default: show which FFNs the CPU computes, per batch size)"},
			&cli.BoolFlag{Name: "routing", Usage: "for a mixture-of-experts model: place the experts by the routing of the calibration text the engine places them by at load, measured here on the CPU (loads the model), and show each tier's expected share of the picks (default: by size and order, nothing loaded)"},
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usagef("plan takes exactly one MODEL")
			}
			o := planOptions{Ctx: cmd.Int("ctx"), Batch: cmd.Int("batch"), Depth: cmd.Int("depth"),
				Type: cmd.String("type"), NoMeasure: cmd.Bool("no-measure")}
			var err error
			for _, f := range []struct {
				name string
				dst  *int64
			}{{"vram", &o.VRAM}, {"ram", &o.RAM}} {
				if s := cmd.String(f.name); s != "" {
					if *f.dst, err = tier.ParseBytes(s); err != nil {
						return usagef("--%s: %v", f.name, err)
					}
					if *f.dst == 0 {
						return usagef("--%s must be positive", f.name)
					}
				}
			}
			for _, f := range []struct {
				name string
				dst  *float64
			}{{"storage-bw", &o.StorageBW}, {"h2d-bw", &o.H2DBW}, {"compute-bw", &o.ComputeBW}} {
				if s := cmd.String(f.name); s != "" {
					if *f.dst, err = tier.ParseRate(s); err != nil {
						return usagef("--%s: %v", f.name, err)
					}
				}
			}
			if o.Ctx <= 0 || o.Batch <= 0 || o.Depth < 0 {
				return usagef("--ctx and --batch must be positive and --depth not negative")
			}
			o.NoHybrid, o.Routing = cmd.Bool("no-hybrid"), cmd.Bool("routing")
			p, info, err := planModel(ctx, cmd.Args().First(), o)
			if err != nil {
				return err
			}
			w := cmd.Root().Writer
			if cmd.Bool("json") {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Model string     `json:"model"`
					Info  planInfo   `json:"inputs"`
					Plan  *tier.Plan `json:"plan"`
				}{cmd.Args().First(), info, p})
			}
			if err := writePlan(w, cmd.Args().First(), info, p); err != nil {
				return err
			}
			writeHybridPlans(w, info)
			writeExpertPlan(w, info)
			return nil
		},
	}
}

// planInfo records the inputs a plan was made from, for display.
type planInfo struct {
	Arch    string `json:"architecture"`
	Ctx     int    `json:"ctx"`
	Batch   int    `json:"batch"`
	Pool    bool   `json:"pool"`
	Type    string `json:"type"`
	Backend string `json:"backend"`
	// Hybrid is the CPU's share of a device plan's tier B for batch 1 and
	// for Batch (engine/tier's PlanHybrid, with the CPU's FFN rate
	// measured on one of the model's layers); CPURates the rates.
	Hybrid   []tier.HybridPlan `json:"hybrid,omitempty"`
	CPURates []float64         `json:"cpu_ffn_bps,omitempty"`
	// Experts places a mixture-of-experts model's experts in what the
	// layers leave of the host memory (engine/tier's PlanExperts within
	// Plan.ExpertBudget, routing not yet measured); MoENote says where a
	// GPU plan runs them.
	Experts *tier.ExpertPlan `json:"experts,omitempty"`
	MoENote string           `json:"moe_note,omitempty"`
	// RoutedTokens is how many tokens of the calibration text Experts was
	// placed by (--routing; 0: by size and order). Experts.Hit is then the
	// share of the CPU's picks (those the device does not hold) that host
	// memory serves, Experts.DeviceHit the share of all picks the device
	// does.
	RoutedTokens int `json:"routed_tokens,omitempty"`
}

// planModel gathers sizes from MODEL (pool, GGUF or Hugging Face
// directory), budgets from the
// hardware and flags, links from measurement and flags, and plans.
func planModel(ctx context.Context, path string, o planOptions) (*tier.Plan, planInfo, error) {
	var (
		sizes tier.Sizes
		cfg   model.Config
		info  planInfo
	)
	var (
		isPool bool
		hfm    *hf.Model
		err    error
	)
	if hf.IsDir(path) {
		// A Hugging Face directory plans as the pool it would prefab to.
		if hfm, err = hf.OpenShared(path); err != nil {
			return nil, info, fmt.Errorf("plan: %w", err)
		}
		defer hfm.Close()
	} else if isPool, err = prefab.IsPool(path); err != nil {
		return nil, info, fmt.Errorf("plan: %w", err)
	}
	if hfm != nil {
		cfg = hfm.Model.Config
		if sizes, err = prefab.SizesFromModel(hfm.Model, o.Type); err != nil {
			return nil, info, fmt.Errorf("plan %s: %w", path, err)
		}
		info.Type = o.Type
	} else if isPool {
		p, err := prefab.OpenPool(path)
		if err != nil {
			return nil, info, err
		}
		sizes, cfg, info.Type = p.Sizes(), p.Config(), p.Type()
		p.Close()
		info.Pool = true
	} else {
		f, err := gguf.ReadHeader(path)
		if err != nil {
			return nil, info, err
		}
		sizes, cfg, err = prefab.SizesFromGGUF(f, o.Type)
		if err != nil {
			return nil, info, fmt.Errorf("plan %s: %w", path, err)
		}
		info.Type = o.Type
	}
	info.Arch = cfg.Arch
	info.Ctx = min(o.Ctx, cfg.Context)
	info.Batch = o.Batch

	req := tier.Request{Sizes: sizes, Depth: o.Depth, Batch: o.Batch,
		KVBytes:      model.KVCacheBytes(cfg, info.Ctx, o.Batch),
		ScratchBytes: model.ScratchBytes(cfg, info.Ctx, max(o.Batch, min(info.Ctx, 512)), runtime.GOMAXPROCS(0)),
	}
	host := o.RAM
	if host == 0 {
		mi, err := tier.ReadMemInfo()
		if err != nil {
			return nil, info, fmt.Errorf("plan: %w (give --ram)", err)
		}
		host = tier.DefaultHostBudget(mi)
	}
	if o.VRAM > 0 {
		req.DeviceBudget, req.HostBudget = o.VRAM, host
		info.Backend = "device with " + tier.FormatBytes(o.VRAM)
	} else {
		req.DeviceBudget, req.HostBudget, req.Shared = host, host, true
		info.Backend = "cpu (device memory is host memory)"
	}

	links := tier.DefaultLinks()
	need := !o.NoMeasure && (o.StorageBW == 0 || o.H2DBW == 0 || o.ComputeBW == 0)
	if need {
		mo := tier.MeasureOptions{ComputeType: sizes.Type, Duration: o.MeasureDuration, Kernel: engine.CPUKernel}
		if o.StorageBW == 0 && hfm == nil {
			mo.Path = path
		}
		if links, err = tier.MeasureLinks(ctx, mo); err != nil {
			return nil, info, fmt.Errorf("plan: %w", err)
		}
	}
	if o.StorageBW > 0 {
		links.StorageToHost = o.StorageBW
		links.Notes = append(links.Notes, "storage: --storage-bw")
	}
	if o.H2DBW > 0 {
		links.HostToDevice = o.H2DBW
		links.Notes = append(links.Notes, "h2d: --h2d-bw")
	}
	if o.ComputeBW > 0 {
		links.Compute = o.ComputeBW
		links.Notes = append(links.Notes, "compute: --compute-bw")
	}
	req.Links = links
	p, err := tier.NewPlan(req)
	if err != nil {
		return nil, info, err
	}
	if o.Routing && !cfg.MoE() {
		return nil, info, fmt.Errorf("plan: --routing: %s is not a mixture-of-experts model", path)
	}
	if cfg.MoE() {
		if o.VRAM > 0 {
			info.MoENote = "mixture-of-experts model on a GPU: the device holds attention, norms and routers as planned, routes on the device, and, in the device memory left, the experts that save the CPU most by the routing of a calibration text (whole layers where it is near uniform, each layer's hot experts where its skew holds on the text's held-out half), computed there, moving toward the routing served while it serves; the others run on the CPU, in the host memory tier B leaves, a share of their picks at one token copied over PCIe and computed on the GPU beside it"
		}
		xp, err := planExperts(ctx, path, o, p, &cfg, sizes, &info)
		if err != nil {
			return nil, info, fmt.Errorf("plan: experts: %w", err)
		}
		info.Experts = xp
	}
	if o.VRAM > 0 && !o.NoHybrid && p.Tiers[tier.TierB].Layers > 0 && !cfg.MoE() {
		if err := planHybrid(ctx, path, isPool, hfm, cfg, p, &info); err != nil {
			return nil, info, err
		}
	}
	return p, info, nil
}

// planExperts places the experts as the engine does at load: in device
// memory (with --vram) the experts that save the CPU most, then in what
// the layers leave of host memory the most used of the others. Without
// o.Routing use is unknown and experts go by size and order; with it the
// calibration text is routed on the CPU first (engine.CalibrationRouting)
// and the placements follow its counts, the device's made from the
// text's first half and checked on its second, as at load (without the
// GPU's measured cost of a layer's hand-over, which the engine adds).
func planExperts(ctx context.Context, path string, o planOptions, p *tier.Plan, cfg *model.Config, sizes tier.Sizes, info *planInfo) (*tier.ExpertPlan, error) {
	var r engine.Routing
	if o.Routing {
		var err error
		// The routing does not depend on the budgets planned: it is
		// measured within the host memory free now.
		if r, err = engine.CalibrationRouting(ctx, path, 0); err != nil {
			return nil, fmt.Errorf("--routing: %w", err)
		}
		info.RoutedTokens = r.Tokens
	}
	xp, err := tier.PlanExperts(sizes.Experts, r.Counts, p.ExpertBudget())
	if err != nil {
		return nil, err
	}
	if o.VRAM <= 0 {
		return &xp, nil
	}
	xp.PlaceOnDevice(sizes.Experts, r.First, engine.DeviceExpertBudget(p, cfg, sizes.Experts), tier.DeviceCost{Used: cfg.ExpertsUsed, Holdout: r.Second})
	if r.Counts == nil || xp.Device == nil {
		return &xp, nil
	}
	// Host memory goes by the picks the device leaves to the CPU.
	hp, err := tier.PlanExperts(sizes.Experts, tier.OffDevice(r.Counts, xp.Device), p.ExpertBudget())
	if err != nil {
		return nil, err
	}
	hp.Device, hp.DeviceBytes, hp.DeviceHit = xp.Device, xp.DeviceBytes, xp.DeviceHit
	return &hp, nil
}

// planHybrid adds the CPU's share of p's tier B (engine/gpu's hybrid
// placement) to info: the CPU's FFN rate is measured over the model's
// tier-B layers as stored (as the engine measures it at load), each
// tier-B layer is split into attention and FFN in the first one's
// proportions, and PlanHybrid places the FFNs for batch 1 and info.Batch.
func planHybrid(ctx context.Context, path string, isPool bool, hfm *hf.Model, cfg model.Config, p *tier.Plan, info *planInfo) error {
	var tierB []int
	for _, l := range p.Layers {
		if l.Tier == tier.TierB {
			tierB = append(tierB, l.Index)
		}
	}
	if len(tierB) == 0 {
		return nil
	}
	var probe []model.FFNLayer
	switch {
	case hfm != nil:
		for _, li := range tierB {
			probe = append(probe, model.FFNLayer{Index: li, W: &hfm.Model.Weights.Layers[li]})
		}
	case isPool:
		pool, err := prefab.OpenPool(path)
		if err != nil {
			return err
		}
		defer pool.Close()
		for _, li := range tierB {
			b, err := pool.Mapped(li)
			var w *model.Layer
			if err == nil {
				w, err = pool.Decode(li, b)
			}
			if err != nil {
				return fmt.Errorf("plan: hybrid: layer %d: %w", li, err)
			}
			probe = append(probe, model.FFNLayer{Index: li, W: w})
		}
	default:
		m, err := model.Open(path)
		if err != nil {
			return fmt.Errorf("plan: hybrid: %w", err)
		}
		defer m.Close()
		for _, li := range tierB {
			probe = append(probe, model.FFNLayer{Index: li, W: &m.Weights.Layers[li]})
		}
	}
	dev, err := model.NewFFNDevice(cfg, gemv.Detect())
	if err != nil {
		return err
	}
	first := probe[0].W
	frac := float64(model.FFNBytes(first)) / float64(model.FFNBytes(first)+model.AttnBytes(first))
	var layers []tier.HybridLayer
	for _, l := range p.Layers {
		if l.Tier == tier.TierA {
			continue
		}
		full := l.Moved.HostToDevice
		hl := tier.HybridLayer{Index: l.Index, Full: full, Attn: full, Stored: l.Tier == tier.TierC}
		if l.Tier == tier.TierB {
			hl.FFN = int64(frac * float64(full))
			hl.Attn = full - hl.FFN
		}
		layers = append(layers, hl)
	}
	for _, T := range []int{1, info.Batch} {
		if T == 1 && len(info.Hybrid) > 0 {
			continue
		}
		rate, err := dev.Rate(ctx, probe, T)
		if err != nil {
			return fmt.Errorf("plan: hybrid: %w", err)
		}
		hp, err := tier.PlanHybrid(layers, max(p.Depth, 1), tier.HybridRates{HostToDevice: p.Links.HostToDevice, CPU: rate, Hop: tier.DefaultHop}, T)
		if err != nil {
			return fmt.Errorf("plan: hybrid: %w", err)
		}
		info.Hybrid = append(info.Hybrid, hp)
		info.CPURates = append(info.CPURates, rate)
	}
	return nil
}

// writeExpertPlan prints where a mixture-of-experts model's experts go.
func writeExpertPlan(w io.Writer, info planInfo) {
	if info.MoENote != "" {
		fmt.Fprintln(w, info.MoENote)
	}
	xp := info.Experts
	if xp == nil {
		return
	}
	all := 0
	for _, l := range xp.Resident {
		all += len(l)
	}
	by := "before the routing is measured: by size and order; --routing measures it"
	if info.RoutedTokens > 0 {
		by = fmt.Sprintf("by the routing of the calibration text's %d tokens", info.RoutedTokens)
	}
	if xp.Device != nil {
		fmt.Fprintf(w, "experts in device memory: %d of %d (%s), computed on the GPU; expected share of picks %.2f (%s)\n",
			xp.DeviceCount(), all, tier.FormatBytes(xp.DeviceBytes), xp.DeviceHit, by)
	}
	if xp.AllResident() {
		fmt.Fprintf(w, "experts: all %d resident (%s)\n", all, tier.FormatBytes(xp.ResidentBytes))
		return
	}
	fmt.Fprintf(w, "experts: %d of %d resident (%s); %s stay on storage and are read when a token is routed to them, into %d buffers of %s\n",
		xp.ResidentCount(), all, tier.FormatBytes(xp.ResidentBytes), tier.FormatBytes(xp.StorageBytes), xp.Buffers, tier.FormatBytes(xp.BufferBytes))
	if info.RoutedTokens > 0 {
		share := "picks"
		if xp.Device != nil {
			share = "picks the device does not hold"
		}
		fmt.Fprintf(w, "  resident experts serve an expected %.2f of the %s (%s)\n", xp.Hit, share, by)
	}
	fmt.Fprintln(w, "  which experts are resident is decided at load by the routing of a calibration text, then follows use while serving")
	if !info.Pool {
		fmt.Fprintln(w, "  a GGUF cannot read single experts: convert it with `strata model prefab` and serve the pool")
	}
}

// writeHybridPlans prints the CPU's share of tier B per batch size.
func writeHybridPlans(w io.Writer, info planInfo) {
	for i, hp := range info.Hybrid {
		if len(hp.CPU) == 0 {
			fmt.Fprintf(w, "hybrid, batch %d: the CPU (FFN %s measured) takes no layer: streaming is faster\n", hp.Batch, tier.FormatRate(info.CPURates[i]))
			continue
		}
		fmt.Fprintf(w, "hybrid, batch %d: the CPU (FFN %s measured) computes the FFN of %d tier-B layers %v from pinned memory; %s over PCIe and %s on the CPU a pass; streamed part %v (streaming alone %v)\n",
			hp.Batch, tier.FormatRate(info.CPURates[i]), len(hp.CPU), hp.CPU, tier.FormatBytes(hp.Moved), tier.FormatBytes(hp.CPUBytes), dur(hp.Pass), dur(hp.Streamed))
	}
}

// writePlan prints the plan as a table with a summary.
func writePlan(w io.Writer, path string, info planInfo, p *tier.Plan) error {
	what := "GGUF as a " + info.Type + " pool"
	if info.Pool {
		what = info.Type + " pool"
	}
	fmt.Fprintf(w, "%s (%s, %s), ctx %d, batch %d, backend: %s\n", path, info.Arch, what, info.Ctx, info.Batch, info.Backend)
	fmt.Fprintf(w, "links: storage %s, h2d %s, compute %s", tier.FormatRate(p.Links.StorageToHost),
		tier.FormatRate(p.Links.HostToDevice), tier.FormatRate(p.Links.Compute))
	if p.Links.StorageLatency > 0 {
		fmt.Fprintf(w, ", storage latency %v", p.Links.StorageLatency.Round(time.Microsecond))
	}
	fmt.Fprintln(w)
	for _, n := range p.Links.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\ttier\tbytes\tmoved/token\tstorage\th2d\tcompute\tbound\t")
	for _, l := range p.Layers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.Index, l.Tier, tier.FormatBytes(l.Bytes),
			tier.FormatBytes(l.Moved.Storage+l.Moved.HostToDevice), dur(l.Time.Storage), dur(l.Time.HostToDevice),
			dur(l.Time.Compute), l.Bound)
	}
	var total int64
	for _, t := range p.Tiers {
		total += t.Bytes
	}
	fmt.Fprintf(tw, "total\t\t%s\t%s\t%s\t%s\t%s\t%s\t\n", tier.FormatBytes(total),
		tier.FormatBytes(p.Moved.Storage+p.Moved.HostToDevice), dur(p.Time.Storage), dur(p.Time.HostToDevice),
		dur(p.Time.Compute), p.Bound)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for t, tt := range p.Tiers {
		fmt.Fprintf(w, "tier %s: %d layers, %s\n", tier.Tier(t), tt.Layers, tier.FormatBytes(tt.Bytes))
	}
	d := p.Device
	fmt.Fprintf(w, "device: %s of %s (globals %s, KV cache %s, scratch %s, slots %d x %s, tier A %s)\n",
		tier.FormatBytes(d.Total), tier.FormatBytes(d.Budget), tier.FormatBytes(d.Globals), tier.FormatBytes(d.KV),
		tier.FormatBytes(d.Scratch), p.Depth, tier.FormatBytes(p.SlotBytes), tier.FormatBytes(d.Layers))
	switch {
	case !p.Shared:
		fmt.Fprintf(w, "host:   %s of %s (tier B %s, staging %d x %s)\n", tier.FormatBytes(p.Host.Total),
			tier.FormatBytes(p.Host.Budget), tier.FormatBytes(p.Host.Layers), p.Depth, tier.FormatBytes(p.StagingBytes))
	case p.Host.Staging > 0:
		fmt.Fprintf(w, "tier-C staging: %d x %s, within the device budget (device memory is host memory)\n",
			p.Depth, tier.FormatBytes(p.StagingBytes))
	}
	if !linksMeasured(p.Links) {
		// Default link speeds say nothing of this host: a figure from
		// them would be read as a promise.
		fmt.Fprintf(w, "pipeline depth %d; expected speed unknown (no link measured: run without --no-measure)\n", p.Depth)
		return nil
	}
	fmt.Fprintf(w, "pipeline depth %d; expected %v per pass (%.2f tokens/s at batch %d), bound by %s",
		p.Depth, dur(p.PassTime), p.TokensPerSecond, p.Batch, p.Bound)
	if p.Stall > 0 {
		fmt.Fprintf(w, ", %v of it latency stall", dur(p.Stall))
	}
	fmt.Fprintln(w)
	return nil
}

// dur rounds a duration for the table ("-" for zero).
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(100 * time.Nanosecond).String()
}

// linksMeasured reports whether any of l's speeds was measured on this
// host (its notes name each source; tier.DefaultLinks has only
// "defaults (not measured)", and every unmeasured link says "default").
func linksMeasured(l tier.Links) bool {
	for _, n := range l.Notes {
		if !strings.Contains(n, "default") {
			return true
		}
	}
	return false
}
