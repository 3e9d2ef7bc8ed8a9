package enginebench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/bench/cpubench"
	"github.com/strata-llm/strata/internal/bench/gputime"
	"github.com/strata-llm/strata/internal/safefs"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Scenario names one measured setup.
type Scenario string

// The scenarios, in the order a run measures them.
const (
	// Resident is the 8b shape in Q4_K_M with every layer on the GPU,
	// batch 1: decode with and without the CUDA graph, prefill of 512
	// tokens, GEMV bandwidth ÷ D2D, launch overhead.
	Resident Scenario = "resident"
	// Streamed is the same model with its second half of layers on tier B
	// (pinned host memory, copied to the GPU every pass): H2D ÷ peak, time
	// per token ÷ the PCIe limit, prefill of 512 tokens.
	Streamed Scenario = "streamed"
	// Big is the 70b shape in Q4_K_M planned into a consumer-card budget
	// (24 GiB by default), tier B for the rest: decode at batch 1 and 8.
	Big Scenario = "70b"
	// BF16 is the 8b shape in bf16 planned into 6 GiB (the budget of the
	// bf16 peer figure), and the same weights prefabbed to INT8-row.
	BF16 Scenario = "bf16"
	// Families is the resident decode (batch 1, greedy on the device)
	// and 512-token prefill of the 7B-to-12B shapes of the other
	// architectures (FamilyShapes), one result each. It synthesizes
	// about 30 GiB of models, so "all" leaves it out: name it.
	Families Scenario = "families"
	// MoE is the mixture-of-experts models of MoECases in Q4_K_M,
	// attention on the GPU planned into each case's budget and every FFN
	// block on the CPU from host memory: decode at batch 1 and 8 on the
	// model's own routing and on a Zipf-skewed one (Options.MoEZipf). It
	// synthesizes about 43 GiB of models, so "all" leaves it out: name it.
	MoE Scenario = "moe"
)

// AllScenarios lists every scenario "all" runs, in run order.
var AllScenarios = []Scenario{Resident, Streamed, Big, BF16}

// knownScenarios are the scenarios a list may name, in run order.
var knownScenarios = append(append([]Scenario(nil), AllScenarios...), Families, MoE)

// FamilyShapes are the synth catalogue entries the families scenario
// measures, in Q4_K_M: each family's shape nearest 8B.
var FamilyShapes = []struct{ Arch, Shape string }{
	{"mistral", "8b"}, {"qwen2", "8b"}, {"qwen3", "8b"}, {"gemma3", "12b"}, {"phi3", "4b"},
}

// ParseScenarios reads a comma-separated list of scenario names ("all"
// for every one) and returns them in run order, each once.
func ParseScenarios(s string) ([]Scenario, error) {
	want := map[Scenario]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		switch {
		case f == "all":
			for _, sc := range AllScenarios {
				want[sc] = true
			}
		case f == "":
		default:
			ok := false
			for _, sc := range knownScenarios {
				if Scenario(f) == sc {
					want[sc], ok = true, true
				}
			}
			if !ok {
				return nil, fmt.Errorf("unknown scenario %q (want some of resident, streamed, 70b, bf16, families, moe, or all)", f)
			}
		}
	}
	var out []Scenario
	for _, sc := range knownScenarios {
		if want[sc] {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario selected")
	}
	return out, nil
}

// Default budgets of the budgeted scenarios: a consumer card's memory for
// the 70b, and the budget the bf16 peer figure was measured with.
const (
	DefaultBudget70B  = 24 << 30
	DefaultBudgetBF16 = 6 << 30
)

// Options select what Run measures.
type Options struct {
	// Scenarios to run (default AllScenarios).
	Scenarios []Scenario
	// GPU is the CUDA device ordinal.
	GPU int
	// Model8B is a llama 8b Q4_K_M GGUF (resident, streamed), Model70B a
	// llama 70b Q4_K_M GGUF, Model8BBF16 a llama 8b bf16 GGUF, Pool8BInt8
	// an INT8-row prefab pool of it. Empty paths mean strata's synthetic
	// models (seed 1) in SynthDir, written there when missing; a path given
	// must exist.
	Model8B, Model70B, Model8BBF16, Pool8BInt8 string
	// SynthDir is where missing synthetic models are written (default
	// strata's private cache directory, safefs.CacheDir). The 70b takes 40 GiB and the bf16 8b 15
	// GiB plus an 8 GiB pool: a RAM-backed file system such as /dev/shm
	// where the host has the memory.
	SynthDir string
	// Budget70B and BudgetBF16 are the device memory budgets of the 70b
	// and bf16 scenarios (defaults DefaultBudget70B, DefaultBudgetBF16).
	Budget70B, BudgetBF16 int64
	// MoECases are the moe scenario's models and budgets (default
	// MoECases; tests name tiny shapes).
	MoECases []MoECase
	// MoEZipf is the Zipf exponent of the moe scenario's skewed routing
	// (model.Model.SetRouterSkew), run after the model's own; 0 runs the
	// model's own routing only.
	MoEZipf float64
	// MoEServed is the length of the moe scenario's served decode, the
	// model opened through the engine as the daemon serves it
	// (DefaultMoEServed from the CLI); 0 leaves the row out.
	MoEServed int
	// MoEServedBatch is the number of requests the moe scenario's served
	// batch decodes at once (DefaultMoEServedBatch from the CLI), each
	// MoEServedBatchTokens long (0: DefaultMoEServedBatchTokens); 0 or 1
	// leaves the rows out.
	MoEServedBatch, MoEServedBatchTokens int
	// MoEServedOnly leaves out the moe scenario's rows at fixed
	// placements (every expert on the CPU, then the calibration's experts
	// in device memory, each way): only the served rows run.
	MoEServedOnly bool
	// Timeline adds, after each hybrid decode at batch 1, a note per
	// streamed layer of the last timed pass (gpu.Model.LastPassLayers).
	Timeline bool
	// NoInt8 skips the bf16 scenario's INT8-row variant.
	NoInt8 bool
	// Acceptance, when in (0, 1), is a drafter's acceptance measured on a
	// real model pair: the 70b scenario projects the speculative decode
	// rate its verify passes would give at it.
	Acceptance float64
	// FloatGEMV runs the decode GEMVs of Q4_K and Q6_K matrices on
	// kernels' float path (dequantize and FMA, gemv.cu) instead of the
	// default integer one (x rounded to 16 bits, dp4a): the tuning variant
	// "float-gemv", added to Variants.
	FloatGEMV bool
	// Peers are the reference figures the run relates its own to (a
	// peers file, LoadPeers); nil prints no peer ratio and judges no goal
	// set against a peer.
	Peers *Peers
	// Variants change the device's kernel tuning for the whole run
	// (kernels.Variants, applied in order at kernels.Load).
	Variants []string
	// Progress, when set, receives a line for each phase of the run.
	Progress func(msg string)
}

func (o *Options) fill() error {
	if len(o.Scenarios) == 0 {
		o.Scenarios = AllScenarios
	}
	for _, sc := range o.Scenarios {
		if _, err := ParseScenarios(string(sc)); err != nil {
			return err
		}
	}
	if o.GPU < 0 {
		return fmt.Errorf("GPU ordinal %d", o.GPU)
	}
	if o.SynthDir == "" {
		// Never the shared temporary directory: the models written there
		// under fixed names would be loaded again, whoever put them there.
		d, err := safefs.CacheDir("synth")
		if err != nil {
			return err
		}
		o.SynthDir = d
	}
	if o.Budget70B == 0 {
		o.Budget70B = DefaultBudget70B
	}
	if o.BudgetBF16 == 0 {
		o.BudgetBF16 = DefaultBudgetBF16
	}
	if o.Budget70B < 0 || o.BudgetBF16 < 0 {
		return errors.New("negative device budget")
	}
	if o.MoECases == nil {
		o.MoECases = MoECases
	}
	for _, c := range o.MoECases {
		if c.Arch == "" || c.Shape == "" || c.Budget <= 0 {
			return fmt.Errorf("moe case %+v: want an architecture, a shape and a positive budget", c)
		}
	}
	if o.MoEServed < 0 {
		return fmt.Errorf("moe served decode of %d tokens", o.MoEServed)
	}
	if o.MoEServedBatch < 0 || o.MoEServedBatchTokens < 0 {
		return fmt.Errorf("moe served batch of %d requests of %d tokens", o.MoEServedBatch, o.MoEServedBatchTokens)
	}
	if o.MoEServedBatchTokens == 0 {
		o.MoEServedBatchTokens = DefaultMoEServedBatchTokens
	}
	if o.MoEZipf < 0 || math.IsNaN(o.MoEZipf) || math.IsInf(o.MoEZipf, 0) {
		return fmt.Errorf("moe Zipf exponent %v: want a finite exponent >= 0", o.MoEZipf)
	}
	return nil
}

func (o *Options) progress(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

// Ceiling copy sizes: 1 GiB device copies (far beyond L2), 256 MiB
// host-to-device copies (well past the size where a pinned host-to-device
// copy reaches its plateau).
const (
	d2dBytes = 1 << 30
	h2dBytes = 256 << 20
)

// Run measures the ceilings and then every selected scenario on GPU
// o.GPU. Without a usable driver or device it fails with an error wrapping
// kernels/cudadrv's ErrUnavailable ("CUDA unavailable: …") before writing any
// model. A scenario that fails is reported with its error (Report.Failed)
// and the run goes on to the next; only a failure to open the device, load
// the kernels or measure the ceilings, or a cancelled ctx, ends it early
// (the report then holds what was measured).
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, fmt.Errorf("bench engine: %w", err)
	}
	start := time.Now()
	dev, err := cudadrv.Open(o.GPU)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	maj, mnr := dev.ComputeCapability()
	r := &Report{
		Device: dev.Name(), Ordinal: dev.Ordinal(), ComputeCapability: fmt.Sprintf("%d.%d", maj, mnr),
		DeviceMemory: dev.TotalMem(), Started: start, FloatGEMV: o.FloatGEMV,
		RelayQ6K: true, Variants: o.Variants,
	}
	if o.Peers != nil {
		r.PeerSource = o.Peers.Source
	}
	variants := o.Variants
	if o.FloatGEMV {
		variants = append(variants[:len(variants):len(variants)], "float-gemv")
	}
	o.progress("loading the kernels on %s", dev.Name())
	var k *kernels.Kernels
	if err := dev.Do(func(c *cudadrv.Ctx) error {
		var err error
		k, err = kernels.Load(c, variants...)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench engine: loading kernels: %w", err)
	}
	r.Kernels = k.Image
	defer dev.Do(func(c *cudadrv.Ctx) error { return k.Unload(c) })

	o.progress("measuring the ceilings: device-to-device copy, pinned host-to-device copy")
	r.Ceilings = Ceilings{D2DBytes: d2dBytes, H2DBytes: h2dBytes}
	if r.Ceilings.D2D, err = gputime.CopyBandwidth(dev, d2dBytes, 10); err != nil {
		return nil, fmt.Errorf("bench engine: %w", err)
	}
	if r.Ceilings.H2D, err = gpu.HostToDevicePeak(dev, h2dBytes, 16); err != nil {
		return nil, fmt.Errorf("bench engine: %w", err)
	}
	rn := &runner{o: &o, dev: dev, k: k, ceil: r.Ceilings}
	for _, sc := range o.Scenarios {
		r.Scenarios = append(r.Scenarios, rn.run(ctx, sc)...)
		if err := ctx.Err(); err != nil {
			r.Seconds = time.Since(start).Seconds()
			return r, err
		}
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// runner holds what every scenario shares.
type runner struct {
	o    *Options
	dev  *cudadrv.Device
	k    *kernels.Kernels
	ceil Ceilings
	// bf16Logits are the bf16 model's logits after the decode prompt, for
	// the INT8-row variant to compare against.
	bf16Logits []float32
	// bf16TPS is the plain bf16 run's decode rate, for the packed variant.
	bf16TPS float64
	// dram is the host's memory read rate, measured before the first
	// hybrid run (0 until then).
	dram float64
	// both are the CPU's read rate and pinned host-to-device's measured
	// at once, before the first hybrid run (zero until then).
	both atOnce
}

// atOnce are the two readers of host memory in a hybrid pass, measured
// together: the CPU's threads and the copy engine.
type atOnce struct {
	cpu, h2d float64
}

// run measures one scenario (two results for bf16 with its variant).
func (rn *runner) run(ctx context.Context, sc Scenario) []ScenarioResult {
	type part struct {
		res ScenarioResult
		fn  func(context.Context, *ScenarioResult) error
	}
	var parts []part
	switch sc {
	case Resident:
		parts = append(parts, part{ScenarioResult{Scenario: sc, Title: "8b Q4_K_M, batch 1, every layer resident on the GPU"}, rn.resident})
	case Streamed:
		parts = append(parts, part{ScenarioResult{Scenario: sc, Title: "8b Q4_K_M, batch 1, layers 16..31 streamed from tier B (pinned host memory)"}, rn.streamed})
	case Big:
		parts = append(parts, part{ScenarioResult{Scenario: sc, Title: fmt.Sprintf("70b Q4_K_M, --vram %s, tier B for the rest", budgetName(rn.o.Budget70B))}, rn.big})
	case BF16:
		parts = append(parts, part{ScenarioResult{Scenario: sc, Title: fmt.Sprintf("8b bf16, --vram %s, tier B for the rest, batch 1", budgetName(rn.o.BudgetBF16))}, rn.bf16})
		parts = append(parts, part{ScenarioResult{Scenario: sc, Variant: "packed",
			Title: fmt.Sprintf("the same bf16 8b, tier-B layers packed LOSSLESSLY (exponents as 4-bit codes against a per-256 base, decoded bit-exact on the GPU before use), --vram %s, batch 1 — still bf16", budgetName(rn.o.BudgetBF16))}, rn.bf16Packed})
		if !rn.o.NoInt8 {
			parts = append(parts, part{ScenarioResult{Scenario: sc, Variant: "int8",
				Title: fmt.Sprintf("the same bf16 8b prefabbed to INT8-row weights (strata model prefab --type int8: one scale per row, lossy), --vram %s, batch 1 — a variant, not bf16", budgetName(rn.o.BudgetBF16))}, rn.int8})
		}
	}
	if sc == Families {
		for _, f := range FamilyShapes {
			parts = append(parts, part{ScenarioResult{Scenario: sc, Variant: f.Arch,
				Title: fmt.Sprintf("%s %s Q4_K_M, batch 1, every layer resident on the GPU", f.Arch, f.Shape)},
				func(ctx context.Context, res *ScenarioResult) error { return rn.family(ctx, res, f.Arch, f.Shape) }})
		}
	}
	if sc == MoE {
		for _, mc := range rn.o.MoECases {
			what := "attention on the GPU, every FFN block (router and experts) on the CPU from host memory, then experts in device memory; the engine's served rows"
			if rn.o.MoEServedOnly {
				what = "the engine's served rows alone (its own plan, the experts in device memory following the routing)"
			}
			parts = append(parts, part{ScenarioResult{Scenario: sc, Variant: mc.name(),
				Title: fmt.Sprintf("%s %s Q4_K_M, --vram %s: %s", mc.Arch, mc.Shape, budgetName(mc.Budget), what)},
				func(ctx context.Context, res *ScenarioResult) error {
					return rn.moeCase(ctx, res, mc, engine.BackendCUDA)
				}})
		}
	}
	var out []ScenarioResult
	for _, p := range parts {
		if ctx.Err() != nil {
			break
		}
		res := p.res
		name := string(sc)
		if res.Variant != "" {
			name += "/" + res.Variant
		}
		rn.o.progress("[%s] %s", name, res.Title)
		t := time.Now()
		if err := rn.guard(ctx, &res, p.fn); err != nil {
			res.Error = err.Error()
			rn.o.progress("[%s] failed: %v", name, err)
		}
		res.Seconds = time.Since(t).Seconds()
		out = append(out, res)
	}
	return out
}

// guard runs one scenario, turning a panic of this goroutine into the
// scenario's error so the scenarios after it still run and the report
// still prints.
func (rn *runner) guard(ctx context.Context, res *ScenarioResult, fn func(context.Context, *ScenarioResult) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn(ctx, res)
}

func budgetName(n int64) string {
	if n%(1<<30) == 0 {
		return fmt.Sprintf("%dGiB", n>>30)
	}
	return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
}

// synthModel returns path when given (it must exist), else the synthetic
// llama model of shape and typ in SynthDir, written first when missing.
func (rn *runner) synthModel(path, shape, typ string) (string, error) {
	return rn.synthArch(path, "llama", shape, typ)
}

// synthArch is synthModel for any catalogue architecture.
func (rn *runner) synthArch(path, arch, shape, typ string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("model: %w", err)
		}
		return path, nil
	}
	path = filepath.Join(rn.o.SynthDir, fmt.Sprintf("%s-%s-%s-seed1.gguf", arch, shape, typ))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	opts := synth.Options{Arch: arch, Shape: shape, Type: typ, Seed: 1}
	size, err := synth.Size(opts)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(rn.o.SynthDir, 0o755); err != nil {
		return "", fmt.Errorf("synth dir: %w", err)
	}
	rn.o.progress("synthesizing %s (%s)", path, gib(size))
	opts.Progress = rn.percent(filepath.Base(path))
	t := time.Now()
	if err := synth.Write(path, opts); err != nil {
		return "", err
	}
	rn.o.progress("synthesized %s in %s", filepath.Base(path), time.Since(t).Round(100*time.Millisecond))
	return path, nil
}

// int8Pool returns path when given (it must exist), else the INT8-row
// prefab pool of the GGUF src in SynthDir, written first when missing.
func (rn *runner) int8Pool(ctx context.Context, path, src string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("pool: %w", err)
		}
		return path, nil
	}
	path = filepath.Join(rn.o.SynthDir, strings.TrimSuffix(filepath.Base(src), ".gguf")+".int8.pool")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	g, err := gguf.MapShared(src) // read once to write the pool
	if err != nil {
		return "", err
	}
	defer g.Close()
	rn.o.progress("prefabbing %s to INT8-row: %s", src, path)
	t := time.Now()
	err = prefab.WritePool(g, path, prefab.Options{Type: prefab.TypeINT8, Source: filepath.Base(src), Context: ctx,
		Progress: rn.percent(filepath.Base(path))})
	if err != nil {
		return "", err
	}
	rn.o.progress("prefabbed %s in %s", filepath.Base(path), time.Since(t).Round(100*time.Millisecond))
	return path, nil
}

// percent reports progress every 10%.
func (rn *runner) percent(what string) func(done, total int64) {
	next := int64(1)
	return func(done, total int64) {
		if total > 0 && done*10 >= next*total && next < 10 {
			rn.o.progress("  %s: %d%%", what, done*100/total)
			for done*10 >= next*total {
				next++
			}
		}
	}
}

// scenarioModel finds or synthesizes a scenario's model (synthModel),
// records its path in res and opens it (openGGUF); the caller closes the
// mapping.
func (rn *runner) scenarioModel(res *ScenarioResult, path, shape, typ string) (*gguf.Mapped, *model.Model, tier.Sizes, error) {
	return rn.scenarioArchModel(res, path, "llama", shape, typ)
}

// scenarioArchModel is scenarioModel for any catalogue architecture.
func (rn *runner) scenarioArchModel(res *ScenarioResult, path, arch, shape, typ string) (*gguf.Mapped, *model.Model, tier.Sizes, error) {
	path, err := rn.synthArch(path, arch, shape, typ)
	if err != nil {
		return nil, nil, tier.Sizes{}, err
	}
	res.Model = path
	return openGGUF(path)
}

// openGGUF maps a GGUF and builds the CPU model over it (zero-copy) with
// the sizes the planner needs.
func openGGUF(path string) (*gguf.Mapped, *model.Model, tier.Sizes, error) {
	g, err := gguf.Map(path)
	if err != nil {
		return nil, nil, tier.Sizes{}, err
	}
	sizes, _, err := prefab.SizesFromGGUF(g.File, prefab.TypeKeep)
	if err == nil {
		var m *model.Model
		if m, err = model.LoadGGUF(g); err == nil {
			return g, m, sizes, nil
		}
	}
	g.Close()
	return nil, nil, tier.Sizes{}, fmt.Errorf("%s: %w", path, err)
}

// freeMem is the device's free memory now.
func (rn *runner) freeMem() (int64, error) {
	var free int64
	err := rn.dev.Do(func(c *cudadrv.Ctx) error {
		var err error
		free, _, err = c.MemInfo()
		return err
	})
	return free, err
}

// loaded is a model on the GPU with the free memory before it came.
type loaded struct {
	*gpu.Model
	free0 int64
}

// load uploads cpu's weights with the run's kernels.
func (rn *runner) load(cpu *model.Model, opts gpu.Options) (*loaded, error) {
	free0, err := rn.freeMem()
	if err != nil {
		return nil, err
	}
	opts.Kernels = rn.k
	t := time.Now()
	g, err := gpu.Load(rn.dev, cpu.Config, cpu.Weights, opts)
	if err != nil {
		return nil, err
	}
	rn.o.progress("  loaded %s of resident weights, %s on tier B, in %s", gib(g.WeightBytes()), gib(g.StreamedBytes()),
		time.Since(t).Round(100*time.Millisecond))
	return &loaded{g, free0}, nil
}

// placement describes the loaded model and measures the device memory it
// took (call after its passes, which grow the activations).
func (rn *runner) placement(g *loaded, stream []int, slots int, budget int64, how string) *Placement {
	p := &Placement{
		Layers: g.Config.Layers, Resident: g.Config.Layers - len(stream), Streamed: len(stream),
		WeightBytes: g.WeightBytes(), StreamedBytes: g.StreamedBytes(), Budget: budget, How: how,
	}
	if len(stream) > 0 {
		p.Slots = slots
		if slots <= 0 {
			p.Slots = 2 // engine/gpu's default depth
		}
	}
	if free, err := rn.freeMem(); err == nil {
		p.DeviceBytes = g.free0 - free
	}
	return p
}

// planBudget places the layers of a model of sizes into a device budget as
// `--vram` would (engine/tier's planner, with the KV cache and scratch of
// ctxLen positions × batch sequences, and the pinned H2D peak measured by
// this run as the host-to-device link), every layer that does not fit on
// tier B. It returns the streamed layers and the pipeline depth.
func (rn *runner) planBudget(cfg model.Config, sizes tier.Sizes, budget int64, ctxLen, batch int) ([]int, int, error) {
	return rn.planBudgetScratch(cfg, sizes, budget, ctxLen, batch, 0)
}

// planBudgetScratch is planBudget with extra device scratch to account (the
// packed variant's decode buffer).
func (rn *runner) planBudgetScratch(cfg model.Config, sizes tier.Sizes, budget int64, ctxLen, batch int, extra int64) ([]int, int, error) {
	plan, err := rn.planFull(cfg, sizes, budget, ctxLen, batch, extra)
	if err != nil {
		return nil, 0, err
	}
	var stream []int
	for _, l := range plan.Layers {
		switch l.Tier {
		case tier.TierB:
			stream = append(stream, l.Index)
		case tier.TierC:
			return nil, 0, fmt.Errorf("planning into %s: layer %d on tier C, which this bench does not stream", gib(budget), l.Index)
		}
	}
	return stream, plan.Depth, nil
}

// planFull is planBudgetScratch's plan itself.
func (rn *runner) planFull(cfg model.Config, sizes tier.Sizes, budget int64, ctxLen, batch int, extra int64) (*tier.Plan, error) {
	host := sizes.Globals
	for _, l := range sizes.Layers {
		host += l
	}
	links := tier.DefaultLinks()
	links.HostToDevice = rn.ceil.H2D
	links.Notes = []string{"host-to-device: the pinned peak measured by this run; the others defaults"}
	plan, err := tier.NewPlan(tier.Request{
		Sizes: sizes, DeviceBudget: budget, HostBudget: host + 1<<30, Batch: batch,
		KVBytes:      model.KVCacheBytes(cfg, ctxLen, batch),
		ScratchBytes: model.ScratchBytes(cfg, ctxLen, max(batch, min(ctxLen, 512)), 1) + extra,
		Links:        links,
	})
	if err != nil {
		return nil, fmt.Errorf("planning into %s: %w", gib(budget), err)
	}
	return plan, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }

// pcieMetrics relates a streamed decode pass to the PCIe limit: achieved
// H2D bandwidth ÷ the pinned peak, and time per pass ÷ (streamed bytes ÷
// peak). Goals apply where they are set (0: none).
func (rn *runner) pcieMetrics(prefix, suffix string, streamed int64, perPass time.Duration, minH2D, maxTime float64) []Metric {
	if streamed == 0 {
		return nil
	}
	peak := rn.ceil.H2D
	h2d := float64(streamed) / perPass.Seconds()
	limit := float64(streamed) / peak
	hr := ratioTo(h2d/1e9, peak/1e9, fmt.Sprintf("pinned H2D peak %.1f GB/s", peak/1e9))
	tr := ratioTo(ms(perPass), limit*1e3, fmt.Sprintf("PCIe limit %.2f ms (%s ÷ peak)", limit*1e3, gib(streamed)))
	h := Metric{Key: prefix + "h2d_gbps", Label: "H2D during decode" + suffix, Value: h2d / 1e9, Unit: "GB/s", Ratio: hr}
	t := Metric{Key: prefix + "time_per_pass_ms", Label: "time per decode pass" + suffix, Value: ms(perPass), Unit: "ms", Ratio: tr}
	if minH2D > 0 {
		h.Goal = atLeast(hr, minH2D)
	}
	if maxTime > 0 {
		t.Goal = atMost(tr, maxTime)
	}
	return []Metric{h, t}
}

func (rn *runner) resident(ctx context.Context, res *ScenarioResult) error {
	gm, cpu, _, err := rn.scenarioModel(res, rn.o.Model8B, "8b", "q4_k_m")
	if err != nil {
		return err
	}
	defer gm.Close()
	g, err := rn.load(cpu, gpu.Options{MaxSeqs: 1, MaxContext: 1024})
	if err != nil {
		return err
	}
	defer g.Close()
	defer func() { res.Placement = rn.placement(g, nil, 0, 0, "every layer resident") }()

	rn.o.progress("  prefill of 512 tokens")
	pf, err := gputime.TimePrefill(ctx, g.Model, 512, 4)
	if err != nil {
		return err
	}
	rn.o.progress("  decode, batch 1: greedy on the device, and the logits row with and without the CUDA graph")
	// First with Device.Do's hand-offs sleeping (kernels/cudadrv's default),
	// then, for the rows with goals, spinning as the engine configures its
	// GPU (gpu.DefaultHandoffSpin, longer than a step, so neither
	// side sleeps while a generation runs).
	gs, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 128, Greedy: true})
	if err != nil {
		return err
	}
	rn.dev.SetSpin(gpu.DefaultHandoffSpin)
	defer rn.dev.SetSpin(0)
	gg, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 128, Greedy: true})
	if err != nil {
		return err
	}
	gr, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 128})
	if err != nil {
		return err
	}
	dr, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 128, NoGraphs: true})
	if err != nil {
		return err
	}
	decG := ratioToPeer(gg.TokensPerSecond, rn.o.Peers, PeerResidentDecode)
	dec := ratioToPeer(gr.TokensPerSecond, rn.o.Peers, PeerResidentDecode)
	pre := ratioToPeer(pf.TokensPerSecond, rn.o.Peers, PeerResidentPrefill)
	res.Metrics = append(res.Metrics,
		Metric{Key: "decode_tps_graph_greedy", Label: "decode, CUDA graph, greedy on the device (token ids only)", Value: gg.TokensPerSecond, Unit: "tok/s", Ratio: decG, Goal: atLeast(decG, 1.2)},
		Metric{Key: "decode_tps_graph_greedy_sleep", Label: "decode, CUDA graph, greedy on the device, sleeping Device.Do hand-offs (kernels/cudadrv's default)",
			Value: gs.TokensPerSecond, Unit: "tok/s", Ratio: ratioToPeer(gs.TokensPerSecond, rn.o.Peers, PeerResidentDecode)},
		Metric{Key: "decode_tps_graph", Label: "decode, CUDA graph, logits row to the host", Value: gr.TokensPerSecond, Unit: "tok/s", Ratio: dec, Goal: atLeast(dec, 1.2)},
		Metric{Key: "decode_tps_nograph", Label: "decode, kernel by kernel, logits row to the host", Value: dr.TokensPerSecond, Unit: "tok/s", Ratio: ratioToPeer(dr.TokensPerSecond, rn.o.Peers, PeerResidentDecode)},
		Metric{Key: "prefill_tps", Label: "prefill, 512-token prompt", Value: pf.TokensPerSecond, Unit: "tok/s", Ratio: pre, Goal: atLeast(pre, 1)},
	)
	if !gr.Graph || !gg.Graph {
		res.Notes = append(res.Notes, "a graph run did not replay a CUDA graph on every timed step")
	}
	if !gg.DeviceSelect {
		res.Notes = append(res.Notes, "the greedy run did not select its tokens on the device on every timed step")
	}
	if gg.CopiesNote != "" {
		res.Notes = append(res.Notes, gg.CopiesNote)
	}
	res.Notes = append(res.Notes, "hand-offs: every decode row but the sleeping one spins Device.Do's hand-offs for up to "+
		gpu.DefaultHandoffSpin.String()+", as the engine (strata run, stratad) configures the GPU: one busy core on each side while a generation runs")
	res.Notes = append(res.Notes, "greedy on the device: each step's arg max (engine/sample's rule) is taken inside the decode graph and only the "+
		"token id crosses PCIe, as `strata run`/Generate do for temperature-0 requests; the logits-row runs download the whole "+
		"vocabulary row into the step as any other sampler needs (the host's arg max that picks the next token is not timed).")
	if _, ok := rn.o.Peers.Figure(PeerResidentDecode); ok {
		res.Notes = append(res.Notes, "the peer's decode figure samples on the host: compare it with the logits-row runs")
	}

	rn.o.progress("  decode step profile")
	prof, err := gputime.ProfileDecodeStep(ctx, g.Model, 50)
	if err != nil {
		return err
	}
	metrics, notes := gemvProfileMetrics(prof, rn.ceil.D2D)
	res.Metrics = append(res.Metrics, metrics...)
	res.Notes = append(res.Notes, notes...)
	res.Metrics = append(res.Metrics,
		Metric{Key: "launch_host_enqueue_us", Label: fmt.Sprintf("launch: host enqueue per step, kernel by kernel (%d kernels)", prof.Kernels),
			Value: us(prof.HostEnqueue), Unit: "µs"},
		Metric{Key: "launch_host_graph_us", Label: "launch: host graph launch per step", Value: us(prof.HostGraphLaunch), Unit: "µs"},
		Metric{Key: "launch_overhead_nograph_us", Label: "launch overhead per step, kernel by kernel (wall − device time)",
			Value: us(dr.PerPass - prof.Device), Unit: "µs"},
		Metric{Key: "launch_overhead_graph_us", Label: "launch overhead per step, CUDA graph, logits row (wall − device time)",
			Value: us(gr.PerPass - prof.Device), Unit: "µs"},
		Metric{Key: "launch_overhead_graph_greedy_us", Label: "launch overhead per step, CUDA graph, greedy on the device (wall − device time)",
			Value: us(gg.PerPass - prof.Device), Unit: "µs"},
	)
	for _, v := range []struct {
		name string
		t    *gputime.DecodeTiming
	}{{"greedy on the device", gg}, {"logits row", gr}} {
		h := v.t.Phases
		res.Notes = append(res.Notes, fmt.Sprintf("host phases per step, graph, %s: hand-off to the device goroutine %.1f µs, enqueue %.1f µs "+
			"(graph launch returned at %.1f µs), wait for the stream %.1f µs (the step's kernels alone: %.1f µs), hand-off back %.1f µs, results into the step %.1f µs",
			v.name, us(h.ToDevice), us(h.Enqueue), us(h.Launch), us(h.Wait), us(prof.Device), us(h.FromDevice), us(h.Scatter)))
	}
	downX := "down quantizes its own in a launch of its own"
	if prof.DownSliced > 0 {
		downX = fmt.Sprintf("down, in %d layers by column slices (kernels.GEMVSliced), has each block quantize the 1024 columns of x it reads; "+
			"elsewhere it quantizes its x in a launch of its own", prof.DownSliced)
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("GEMVs read %s per step (every layer's matrices and the output projection), timed as the step launches them, replayed from a graph of their own "+
			"(x of q/k/v, gate/up and the output arrives quantized from the norm before them and x of o from attention, as in the step; %s); "+
			"wall − device time also holds the logits' download and the host's share of Forward", gib(prof.WeightBytes), downX),
		fmt.Sprintf("per step: %.3f ms wall with the graph and greedy on the device, %.3f ms with the graph and the logits row, %.3f ms without the graph; the graph saves %.0f µs",
			ms(gg.PerPass), ms(gr.PerPass), ms(dr.PerPass), us(dr.PerPass-gr.PerPass)))
	return nil
}

// family measures one architecture's shape resident: decode at batch 1
// with the graph and greedy on the device, and a 512-token prefill.
func (rn *runner) family(ctx context.Context, res *ScenarioResult, arch, shape string) error {
	gm, cpu, _, err := rn.scenarioArchModel(res, "", arch, shape, "q4_k_m")
	if err != nil {
		return err
	}
	defer gm.Close()
	g, err := rn.load(cpu, gpu.Options{MaxSeqs: 1, MaxContext: 1024})
	if err != nil {
		return err
	}
	defer g.Close()
	defer func() { res.Placement = rn.placement(g, nil, 0, 0, "every layer resident") }()
	rn.dev.SetSpin(gpu.DefaultHandoffSpin)
	defer rn.dev.SetSpin(0)
	pf, err := gputime.TimePrefill(ctx, g.Model, 512, 4)
	if err != nil {
		return err
	}
	gg, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 128, Greedy: true})
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics,
		Metric{Key: "decode_tps_graph_greedy", Label: "decode, CUDA graph, greedy on the device", Value: gg.TokensPerSecond, Unit: "tok/s"},
		Metric{Key: "prefill_tps", Label: "prefill, 512-token prompt", Value: pf.TokensPerSecond, Unit: "tok/s"},
	)
	if !gg.Graph {
		res.Notes = append(res.Notes, "the run did not replay a CUDA graph on every timed step")
	}
	return nil
}

func (rn *runner) streamed(ctx context.Context, res *ScenarioResult) error {
	gm, cpu, _, err := rn.scenarioModel(res, rn.o.Model8B, "8b", "q4_k_m")
	if err != nil {
		return err
	}
	defer gm.Close()
	n := cpu.Config.Layers
	var half []int
	for l := n / 2; l < n; l++ {
		half = append(half, l)
	}
	res.Title = fmt.Sprintf("8b Q4_K_M, batch 1, layers %d..%d streamed from tier B (pinned host memory)", n/2, n-1)
	g, err := rn.load(cpu, gpu.Options{MaxSeqs: 8, MaxContext: 1024, StreamLayers: half, Slots: 2})
	if err != nil {
		return err
	}
	defer g.Close()
	place := func() {
		if res.Placement == nil {
			res.Placement = rn.placement(g, half, 2, 0, "the second half of the layers on tier B (llama.cpp's 16-of-32 split); KV cache for 8 x 1024 positions")
		}
	}
	defer place()

	rn.o.progress("  decode, batch 1")
	d1, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 4, Warmup: 2, Steps: 16})
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics, Metric{Key: "decode_tps", Label: "decode, batch 1", Value: d1.TokensPerSecond, Unit: "tok/s",
		Ratio: ratioToPeer(d1.TokensPerSecond, rn.o.Peers, PeerHalfDecode)})
	res.Metrics = append(res.Metrics, rn.pcieMetrics("", "", g.StreamedBytes(), d1.PerPass, 0.95, 1.05)...)

	rn.o.progress("  prefill of 512 tokens")
	pf, err := gputime.TimePrefill(ctx, g.Model, 512, 2)
	if err != nil {
		return err
	}
	pre := ratioToPeer(pf.TokensPerSecond, rn.o.Peers, PeerHalfPrefill)
	res.Metrics = append(res.Metrics, Metric{Key: "prefill_tps", Label: "prefill, 512-token prompt", Value: pf.TokensPerSecond, Unit: "tok/s",
		Ratio: pre, Goal: atLeast(pre, 4)})

	rn.o.progress("  decode, batch 8")
	d8, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 8, Prompt: 4, Warmup: 2, Steps: 6})
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics, Metric{Key: "decode_b8_tps", Label: "decode, batch 8 (aggregate)", Value: d8.TokensPerSecond, Unit: "tok/s",
		Ratio: ratioTo(d8.TokensPerSecond, d1.TokensPerSecond, fmt.Sprintf("batch 1 %s tok/s", formatValue(d1.TokensPerSecond)))})
	place()
	g.Close()
	return rn.hybrid(ctx, res, cpu, gpu.Options{MaxSeqs: 8, MaxContext: 1024, StreamLayers: half, Slots: 2}, PeerHalfDecode, d8)
}

// verifyPasses times a speculative verify pass of k guesses (k+1 tokens
// of one sequence in one pass) for k = 1, 2, 4, 8, 16 against the batch-1
// decode pass b1 (goal 1.1 up to k = 8: the streamed bytes dominate), and,
// given a measured acceptance a, projects the decode rate of each k:
// (1 − a^(k+1)) / (1 − a) tokens per verify pass.
func (rn *runner) verifyPasses(ctx context.Context, res *ScenarioResult, g *gpu.Model, b1 time.Duration) error {
	a := rn.o.Acceptance
	for _, k := range []int{1, 2, 4, 8, 16} {
		rn.o.progress("  verify pass, %d guesses", k)
		p, err := gputime.TimePrefill(ctx, g, k+1, 2)
		if err != nil {
			return err
		}
		r := ratioTo(ms(p.PerPass), ms(b1), fmt.Sprintf("batch-1 pass %.2f ms", ms(b1)))
		m := Metric{Key: fmt.Sprintf("verify_k%d_ms", k), Label: fmt.Sprintf("verify pass, %d guesses", k), Value: ms(p.PerPass), Unit: "ms", Ratio: r}
		if k <= 8 {
			m.Goal = atMost(r, 1.1)
		}
		res.Metrics = append(res.Metrics, m)
		if a > 0 {
			tokens := (1 - math.Pow(a, float64(k+1))) / (1 - a)
			tps := tokens / p.PerPass.Seconds()
			res.Metrics = append(res.Metrics, Metric{Key: fmt.Sprintf("spec_k%d_tps", k),
				Label: fmt.Sprintf("speculative decode at acceptance %.2f (projected), k=%d", a, k), Value: tps, Unit: "tok/s",
				Ratio: ratioTo(tps, 1/b1.Seconds(), fmt.Sprintf("plain %.2f tok/s", 1/b1.Seconds()))})
		}
	}
	return nil
}

// hybrid loads cpu again with opts plus the CPU beside the GPU
// (gpu.Hybrid, planned against the measured pinned peak) and times batch
// 1 against the peer's figure (goal 1.5x) and against the combined-link
// limit (the off-GPU bytes over the CPU's measured FFN rate plus the
// pinned peak; goal 1.15) and against the tighter bounds that host memory
// sets (its read rate, and the two links' rates measured at once), and
// batch 8 against streaming's (d8: the plan must keep streaming where it
// wins).
func (rn *runner) hybrid(ctx context.Context, res *ScenarioResult, cpu *model.Model, opts gpu.Options, peer string, d8 *gputime.DecodeTiming) error {
	opts.Hybrid = &gpu.Hybrid{HostToDevice: rn.ceil.H2D}
	g, err := rn.load(cpu, opts)
	if err != nil {
		return err
	}
	defer g.Close()
	plans, rates, _ := g.HybridPlans()
	if len(plans) == 0 || len(plans[0].CPU) == 0 {
		res.Notes = append(res.Notes, "hybrid: the plan gives the CPU no layer at batch 1")
		return nil
	}
	res.Notes = append(res.Notes, fmt.Sprintf("hybrid: at load the CPU measured %.1f GB/s alone, and the plan gave it the FFN of %d of the %d streamed layers at batch 1",
		rates[0]/1e9, len(plans[0].CPU), len(opts.StreamLayers)))
	if _, err := rn.hostRead(ctx); err != nil {
		return err
	}
	both, err := rn.atOnce(ctx)
	if err != nil {
		return err
	}
	rn.o.progress("  hybrid decode, batch 1")
	// The warm-up spans the passes in which the plan is made again from
	// the CPU's rate in passes (engine/gpu's re-planning).
	h1, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 4, Warmup: 12, Steps: 16})
	if err != nil {
		return err
	}
	if _, last, ok := g.PipelineStats(); ok && last.Copy.Busy > 0 && last.Wall > 0 {
		// The compute stream's waits for copies are part of the CPU
		// layers' hand-overs (the host waits for the stream before each
		// CPU FFN): what of them is PCIe's rather than the GPU's work.
		res.Notes = append(res.Notes, fmt.Sprintf("hybrid: the last timed pass copied %s at %.1f GB/s (%d copies carried over from the pass before), the copy engine busy %.0f%% of the pass (carried copies included); the GPU's lead %v and tail %v, its compute waiting for copies %v",
			gib(last.Copy.Bytes), float64(last.Copy.Bytes)/last.Copy.Busy.Seconds()/1e9, last.Carried, 100*last.Copy.Busy.Seconds()/last.Wall.Seconds(),
			last.Lead.Round(time.Microsecond), last.Tail.Round(time.Microsecond), last.Compute.Stall.Round(time.Microsecond)))
	}
	if rn.o.Timeline {
		if err := timelineNotes(res, g.Model); err != nil {
			return err
		}
		// Where a pass's wall time goes on the host: the CPU's FFNs and
		// the layers' launches are in the enqueue, the GPU's tail after
		// the last of them in the wait.
		h := h1.Phases
		res.Notes = append(res.Notes, fmt.Sprintf("hybrid: host phases per pass at batch 1: hand-off to the device goroutine %.1f µs, enqueue %.1f µs (before the first layer %.1f, the layers and the CPU's FFNs %.1f, the output head %.1f), wait for the stream %.1f µs, hand-off back %.1f µs (the pipeline's bookkeeping), results into the step %.1f µs; the pass %.1f µs",
			us(h.ToDevice), us(h.Enqueue), us(h.Setup), us(h.Enqueue-h.Setup-h.Head), us(h.Head), us(h.Wait), us(h.FromDevice), us(h.Scatter), us(h1.PerPass)))
	}
	plans, rates, _ = g.HybridPlans()
	p := plans[0]
	res.Notes = append(res.Notes, fmt.Sprintf("hybrid: in the timed passes the CPU computed the FFN of %d of the %d streamed layers at batch 1 (planned for %.1f GB/s; %s over PCIe, %s on the CPU a pass), planned %.2f ms (lead %v, tail %v) vs %.2f ms streaming alone",
		len(p.CPU), len(opts.StreamLayers), rates[0]/1e9, gib(p.Moved), gib(p.CPUBytes), ms(p.Pass), p.Lead.Round(time.Microsecond), p.Tail.Round(time.Microsecond), ms(p.Streamed)))
	r := ratioToPeer(h1.TokensPerSecond, rn.o.Peers, peer)
	off := float64(p.Moved + p.CPUBytes)
	limit := off / (rates[0] + rn.ceil.H2D)
	lr := ratioTo(ms(h1.PerPass), limit*1e3, fmt.Sprintf("combined-link limit %.2f ms (%s ÷ (CPU %.1f + H2D %.1f GB/s))", limit*1e3, gib(int64(off)), rates[0]/1e9, rn.ceil.H2D/1e9))
	// At batch 1 the CPU cannot start before the resident layers ahead of
	// the streamed ones are done (the plan's lead), while PCIe can: the
	// links' bound with that wait in it.
	ll := leadLimit(off, rates[0], rn.ceil.H2D, p.Lead)
	llr := ratioTo(ms(h1.PerPass), ll*1e3, fmt.Sprintf("links' limit after the lead %.2f ms (the CPU idle for the resident layers' %v)", ll*1e3, p.Lead.Round(time.Microsecond)))
	// Both links read the same DRAM; the CPU's read rate alone is not
	// their bound (the copy engine reads without the cores: the links at
	// once, below, are), but says how near the pass is to it.
	dl := off / rn.dram
	dr := ratioTo(ms(h1.PerPass), dl*1e3, fmt.Sprintf("memory-read limit %.2f ms (%s ÷ host read %.1f GB/s)", dl*1e3, gib(int64(off)), rn.dram/1e9))
	res.Metrics = append(res.Metrics,
		Metric{Key: "hybrid_decode_tps", Label: "hybrid decode, batch 1", Value: h1.TokensPerSecond, Unit: "tok/s", Ratio: r, Goal: atLeast(r, 1.5)},
		Metric{Key: "hybrid_time_per_pass_ms", Label: "hybrid time per decode pass", Value: ms(h1.PerPass), Unit: "ms", Ratio: lr, Goal: atMost(lr, 1.15)},
		Metric{Key: "hybrid_time_per_pass_lead", Label: "hybrid time per decode pass, after the lead", Value: ms(h1.PerPass), Unit: "ms", Ratio: llr},
		Metric{Key: "hybrid_time_per_pass_dram", Label: "hybrid time per decode pass, to host memory", Value: ms(h1.PerPass), Unit: "ms", Ratio: dr})
	// The links as they run in a pass, together: the CPU's share at the
	// lesser of its FFN rate alone and its read rate beside the copies,
	// PCIe's at its rate beside the CPU's reads, the lead as above.
	cb := min(rates[0], both.cpu)
	al := leadLimit(off, cb, both.h2d, p.Lead)
	ar := ratioTo(ms(h1.PerPass), al*1e3, fmt.Sprintf("the links' limit at once %.2f ms (%s ÷ (CPU %.1f + H2D %.1f GB/s, each beside the other), after the lead)",
		al*1e3, gib(int64(off)), cb/1e9, both.h2d/1e9))
	res.Metrics = append(res.Metrics, Metric{Key: "hybrid_time_per_pass_at_once", Label: "hybrid time per decode pass, to the links at once", Value: ms(h1.PerPass), Unit: "ms", Ratio: ar})
	res.Notes = append(res.Notes, fmt.Sprintf("hybrid: host memory read at once by the CPU (%.1f GB/s; alone %.1f) and the copy engine (%.1f GB/s; alone %.1f): %.1f GB/s together",
		both.cpu/1e9, rn.dram/1e9, both.h2d/1e9, rn.ceil.H2D/1e9, (both.cpu+both.h2d)/1e9))
	rn.o.progress("  hybrid decode, batch 8")
	h8, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 8, Prompt: 4, Warmup: 2, Steps: 6})
	if err != nil {
		return err
	}
	r8 := ratioTo(h8.TokensPerSecond, d8.TokensPerSecond, fmt.Sprintf("streaming's batch 8 %s tok/s", formatValue(d8.TokensPerSecond)))
	// Not below streaming's: where the plan gives the CPU nothing the two
	// run the same schedule, whose figures differ by up to 2% from one
	// measurement to the next on these hosts.
	res.Metrics = append(res.Metrics, Metric{Key: "hybrid_decode_b8_tps", Label: "hybrid decode, batch 8 (aggregate)", Value: h8.TokensPerSecond, Unit: "tok/s",
		Ratio: r8, Goal: atLeast(r8, 0.98)})
	st := g.HybridStats()
	if st.Layers > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("hybrid: %d FFNs on the CPU at %.1f GB/s, %.0f µs a hop; batch 8 plan: %d CPU layers",
			st.Layers, float64(st.Bytes)/st.Busy.Seconds()/1e9, float64(st.Hop.Microseconds())/float64(st.Layers), len(plans[len(plans)-1].CPU)))
	}
	return nil
}

// leadLimit is the least time, in seconds, for a pass whose off bytes
// are split between the CPU (cpu bytes a second) and PCIe (h2d) when the
// CPU can start only after lead, the resident layers ahead of the
// streamed ones, and PCIe from the pass's start (the slots fill ahead):
// the share x on the CPU that ends both at once, lead + x·a = (1-x)·p
// with a and p the whole on each link alone, gives p·(a+lead)/(a+p).
// With no lead it is the combined-link limit, off/(cpu+h2d); a lead as
// long as PCIe's whole leaves the CPU nothing.
func leadLimit(off, cpu, h2d float64, lead time.Duration) float64 {
	a, p := off/cpu, off/h2d
	if l := lead.Seconds(); l < p {
		return p * (a + l) / (a + p)
	}
	return p
}

// timelineNotes notes g's last pass, a streamed layer a line, times in
// microseconds from the pass's start on the GPU's clock: the copy's span,
// compute's wait for it (from reaching the layer to going on), and for a
// layer whose FFN the CPU took, the host's hand-over wait and FFN time.
func timelineNotes(res *ScenarioResult, g *gpu.Model) error {
	lt, ok, err := g.LastPassLayers()
	if err != nil || !ok {
		return err
	}
	for _, t := range lt {
		line := fmt.Sprintf("timeline: layer %2d copy %8.1f..%8.1f  compute waits %8.1f..%8.1f (%6.1f)", t.Layer,
			us(t.CopyStart), us(t.CopyEnd), us(t.WaitStart), us(t.WaitEnd), us(t.WaitEnd-t.WaitStart))
		if t.CPU {
			line += fmt.Sprintf("  CPU FFN: hand-over %6.1f, FFN %7.1f", us(t.Hand), us(t.FFN))
		}
		res.Notes = append(res.Notes, line)
	}
	return nil
}

// hostRead is the host's memory read rate, measured on first use (a hybrid
// or MoE scenario's ceiling: the CPU and the copy engine read the same
// DRAM) and kept for the run's later scenarios.
func (rn *runner) hostRead(ctx context.Context) (float64, error) {
	if rn.dram == 0 {
		rn.o.progress("  host memory read rate")
		r, err := cpubench.ReadBandwidth(ctx, 2<<30, time.Second)
		if err != nil {
			return 0, err
		}
		rn.dram = r
	}
	return rn.dram, nil
}

// atOnce is the CPU's read rate and pinned host-to-device's while both
// read host memory, measured on first use (a hybrid scenario's bound: a
// pass cannot have more of the two together) and kept for the run's
// later scenarios.
func (rn *runner) atOnce(ctx context.Context) (atOnce, error) {
	if rn.both.cpu == 0 {
		rn.o.progress("  host memory read by the CPU and the copy engine at once")
		var cpu float64
		h2d, err := gpu.HostToDeviceBeside(rn.dev, h2dBytes, func() (from, to time.Time, err error) {
			cpu, from, to, err = cpubench.ReadWindow(ctx, 2<<30, time.Second)
			return from, to, err
		})
		if err != nil {
			return atOnce{}, err
		}
		rn.both = atOnce{cpu: cpu, h2d: h2d}
	}
	return rn.both, nil
}

// loadInBudget plans cpu's layers (sizes) into budget for ctxLen x batch
// positions of KV cache, loads them with that plan's streamed layers and
// slots, and returns the model, the plan and a place func that records the
// placement (how: the plan's description) once, after the passes.
func (rn *runner) loadInBudget(res *ScenarioResult, cpu *model.Model, sizes tier.Sizes, budget int64, ctxLen, batch int, how string) (*loaded, []int, int, func(), error) {
	stream, depth, err := rn.planBudget(cpu.Config, sizes, budget, ctxLen, batch)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	g, err := rn.load(cpu, gpu.Options{MaxSeqs: batch, MaxContext: ctxLen, StreamLayers: stream, Slots: depth})
	if err != nil {
		return nil, nil, 0, nil, err
	}
	place := func() {
		if res.Placement == nil {
			res.Placement = rn.placement(g, stream, depth, budget, how)
		}
	}
	return g, stream, depth, place, nil
}

func (rn *runner) big(ctx context.Context, res *ScenarioResult) error {
	gm, cpu, sizes, err := rn.scenarioModel(res, rn.o.Model70B, "70b", "q4_k_m")
	if err != nil {
		return err
	}
	defer gm.Close()
	const batch, ctxLen = 8, 512
	g, stream, depth, place, err := rn.loadInBudget(res, cpu, sizes, rn.o.Budget70B, ctxLen, batch,
		fmt.Sprintf("planned by engine/tier into the budget, KV cache for %d x %d positions", batch, ctxLen))
	if err != nil {
		return err
	}
	defer g.Close()
	defer place()

	rn.o.progress("  decode, batch 1")
	d1, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 1, Prompt: 4, Warmup: 2, Steps: 4})
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics, Metric{Key: "decode_tps", Label: "decode, batch 1", Value: d1.TokensPerSecond, Unit: "tok/s",
		Ratio: ratioToPeer(d1.TokensPerSecond, rn.o.Peers, Peer70BHalfDecode)})
	res.Metrics = append(res.Metrics, rn.pcieMetrics("", "", g.StreamedBytes(), d1.PerPass, 0.95, 0)...)

	rn.o.progress("  decode, batch 8")
	d8, err := gputime.TimeDecode(ctx, g.Model, gputime.DecodeOptions{Batch: 8, Prompt: 4, Warmup: 2, Steps: 3})
	if err != nil {
		return err
	}
	vsPeer := ratioToPeer(d8.TokensPerSecond, rn.o.Peers, Peer70BHalfDecode)
	vsB1 := ratioTo(d8.TokensPerSecond, d1.TokensPerSecond, fmt.Sprintf("batch 1 %s tok/s", formatValue(d1.TokensPerSecond)))
	res.Metrics = append(res.Metrics,
		Metric{Key: "decode_b8_tps", Label: "decode, batch 8 (aggregate)", Value: d8.TokensPerSecond, Unit: "tok/s", Ratio: vsPeer, Goal: atLeast(vsPeer, 5)},
		Metric{Key: "decode_b8_vs_b1", Label: "decode, batch 8 (aggregate) vs batch 1", Value: d8.TokensPerSecond, Unit: "tok/s", Ratio: vsB1, Goal: atLeast(vsB1, 6)},
	)
	res.Metrics = append(res.Metrics, rn.pcieMetrics("b8_", ", batch 8", g.StreamedBytes(), d8.PerPass, 0, 0)...)
	if err := rn.verifyPasses(ctx, res, g.Model, d1.PerPass); err != nil {
		return err
	}
	place()
	g.Close()
	return rn.hybrid(ctx, res, cpu, gpu.Options{MaxSeqs: batch, MaxContext: ctxLen, StreamLayers: stream, Slots: depth}, Peer70BHalfDecode, d8)
}

// bf16Decode is the decode both bf16 runs time.
var bf16Decode = gputime.DecodeOptions{Batch: 1, Prompt: 4, Warmup: 2, Steps: 6}

const bf16Ctx = 512

// budgetDecode plans cpu (of sizes) into budget at batch 1, loads it and
// times bf16Decode, filling res with the decode figures against the bf16
// peer (when given) and the PCIe limit.
func (rn *runner) budgetDecode(ctx context.Context, res *ScenarioResult, cpu *model.Model, sizes tier.Sizes, budget int64, how string) (*gputime.DecodeTiming, error) {
	d, _, err := rn.budgetDecodePacked(ctx, res, cpu, sizes, budget, how, false, 0)
	return d, err
}

// budgetDecodePacked is budgetDecode, with tier-B layers packed
// (gpu.Options.PackBF16) when pack is set and scratch bytes of
// decode buffer accounted in the plan; it also returns the streamed layers.
func (rn *runner) budgetDecodePacked(ctx context.Context, res *ScenarioResult, cpu *model.Model, sizes tier.Sizes, budget int64, how string, pack bool, scratch int64) (*gputime.DecodeTiming, []int, error) {
	stream, depth, err := rn.planBudgetScratch(cpu.Config, sizes, budget, bf16Ctx, 1, scratch)
	if err != nil {
		return nil, nil, err
	}
	g, err := rn.load(cpu, gpu.Options{MaxSeqs: 1, MaxContext: bf16Ctx, StreamLayers: stream, Slots: depth, PackBF16: pack})
	if err != nil {
		return nil, nil, err
	}
	defer g.Close()
	defer func() { res.Placement = rn.placement(g, stream, depth, budget, how) }()
	rn.o.progress("  decode, batch 1")
	d, err := gputime.TimeDecode(ctx, g.Model, bf16Decode)
	if err != nil {
		return nil, nil, err
	}
	r := ratioToPeer(d.TokensPerSecond, rn.o.Peers, PeerBF16Budget)
	res.Metrics = append(res.Metrics, Metric{Key: "decode_tps", Label: "decode, batch 1", Value: d.TokensPerSecond, Unit: "tok/s", Ratio: r, Goal: atLeast(r, 10)})
	res.Metrics = append(res.Metrics, rn.pcieMetrics("", "", g.StreamedBytes(), d.PerPass, 0, 0)...)
	if sb := g.StreamedBytes(); sb > 0 {
		limit := rn.ceil.H2D / float64(sb)
		note := fmt.Sprintf("%s cross PCIe per token: at the measured pinned peak no schedule exceeds %.2f tok/s at batch 1", gib(sb), limit)
		if p, ok := rn.o.Peers.Figure(PeerBF16Budget); ok {
			note += fmt.Sprintf(" (%.1fx the %s figure)", limit/p.Value, p.System)
		}
		res.Notes = append(res.Notes, note)
	}
	return d, stream, nil
}

func (rn *runner) bf16(ctx context.Context, res *ScenarioResult) error {
	gm, cpu, sizes, err := rn.scenarioModel(res, rn.o.Model8BBF16, "8b", "bf16")
	if err != nil {
		return err
	}
	defer gm.Close()
	d, err := rn.budgetDecode(ctx, res, cpu, sizes, rn.o.BudgetBF16, "planned by engine/tier into the budget, KV cache for 1 x 512 positions")
	if err != nil {
		return err
	}
	rn.bf16Logits = d.PromptLogits
	rn.bf16TPS = d.TokensPerSecond
	return nil
}

// bf16Packed runs the bf16 8b with its tier-B layers losslessly packed
// (engine/quant's packed bf16): the planner sees each layer's packed size
// as its streamed size (smaller slots, fewer bytes per pass) and the
// decode scratch; the logits must equal the plain run's bit for bit.
func (rn *runner) bf16Packed(ctx context.Context, res *ScenarioResult) error {
	gm, cpu, sizes, err := rn.scenarioModel(res, rn.o.Model8BBF16, "8b", "bf16")
	if err != nil {
		return err
	}
	defer gm.Close()
	rn.o.progress("  sizing the packed layers")
	t := time.Now()
	packed, plain, scratch, err := gpu.PackedLayerBytes(cpu.Config, cpu.Weights)
	if err != nil {
		return err
	}
	rn.o.progress("  sized in %s", time.Since(t).Round(100*time.Millisecond))
	sizes.Streamed = packed
	d, stream, err := rn.budgetDecodePacked(ctx, res, cpu, sizes, rn.o.BudgetBF16,
		fmt.Sprintf("planned by engine/tier with the packed sizes as tier-B sizes and the %s decode scratch, KV cache for 1 x 512 positions", gib(scratch)), true, scratch)
	if err != nil {
		return err
	}
	var p, r int64
	for _, l := range stream {
		p += packed[l]
		r += plain[l]
	}
	if r > 0 {
		res.Metrics = append(res.Metrics, Metric{Key: "pack_ratio", Label: "streamed bytes packed ÷ plain bf16 (lossless)", Value: float64(p) / float64(r), Unit: "",
			Ratio: ratioTo(float64(p), float64(r), fmt.Sprintf("plain %s for the same %d layers", gib(r), len(stream)))})
	}
	if rn.bf16TPS > 0 {
		res.Metrics = append(res.Metrics, Metric{Key: "decode_vs_plain", Label: "decode, batch 1, vs the plain bf16 run", Value: d.TokensPerSecond, Unit: "tok/s",
			Ratio: ratioTo(d.TokensPerSecond, rn.bf16TPS, fmt.Sprintf("plain bf16 %s tok/s", formatValue(rn.bf16TPS)))})
	}
	if want := rn.bf16Logits; len(want) == len(d.PromptLogits) && len(want) > 0 {
		diff := 0
		for i, v := range d.PromptLogits {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				diff++
			}
		}
		same := 0.0
		if diff == 0 {
			same = 1
		}
		res.Metrics = append(res.Metrics, Metric{Key: "logits_bit_identical", Label: "logits after the prompt bit-identical to the plain bf16 run's (1 yes, 0 no)", Value: same, Unit: ""})
		if diff > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d of %d logits differ from the plain bf16 run: the packed path is NOT lossless here", diff, len(want)))
		}
	}
	res.Notes = append(res.Notes, "lossless: the same bf16 weights, packed on the host at load and decoded on the GPU bit for bit before use; the bf16 peer figure, where given, is bf16 too, so that ratio is like for like")
	return nil
}

func (rn *runner) int8(ctx context.Context, res *ScenarioResult) error {
	src, err := rn.synthModel(rn.o.Model8BBF16, "8b", "bf16")
	if err != nil {
		return err
	}
	path, err := rn.int8Pool(ctx, rn.o.Pool8BInt8, src)
	if err != nil {
		return err
	}
	res.Model = path
	pool, err := prefab.OpenPool(path)
	if err != nil {
		return err
	}
	defer pool.Close()
	if pool.Type() != prefab.TypeINT8 {
		return fmt.Errorf("%s is a %q pool, want %q", path, pool.Type(), prefab.TypeINT8)
	}
	rn.o.progress("  verifying the pool's extents")
	cpu, err := pool.Model()
	if err != nil {
		return err
	}
	d, err := rn.budgetDecode(ctx, res, cpu, pool.Sizes(), rn.o.BudgetBF16, "planned by engine/tier into the budget, KV cache for 1 x 512 positions")
	if err != nil {
		return err
	}
	res.Notes = append(res.Notes, "INT8-row requantizes every matrix of the bf16 model (one float32 scale per row): about half the bytes "+
		"to stream, different numerics; the bf16 peer figure, where given, is bf16, so that ratio is not like for like")
	if want := rn.bf16Logits; len(want) == len(d.PromptLogits) && len(want) > 0 {
		e := quant.NMSE(d.PromptLogits, want)
		same := 0.0
		if sample.Argmax(d.PromptLogits) == sample.Argmax(want) {
			same = 1
		}
		res.Metrics = append(res.Metrics,
			Metric{Key: "logits_nmse_vs_bf16", Label: "logits after the prompt vs the bf16 model's, NMSE", Value: e, Unit: ""},
			Metric{Key: "greedy_match_bf16", Label: "same greedy token as the bf16 model after the prompt (1 yes, 0 no)", Value: same, Unit: ""},
		)
	}
	return nil
}

// gemvProfileMetrics turns the resident decode step's GEMV profile into
// the report's rows and notes, as ratios to the device-to-device copy
// ceiling (bytes/s): the step's GEMVs (with their 0.8 goal), their
// read-only ceiling, each kind alone with its own ceiling, down with and
// without its x launch, and the same with programmatic dependent launch
// off.
func gemvProfileMetrics(prof *gputime.StepProfile, d2dBytesPerS float64) (metrics []Metric, notes []string) {
	d2d := d2dBytesPerS / 1e9
	d2dDesc := fmt.Sprintf("D2D copy %.0f GB/s", d2d)
	gemvBW := float64(prof.WeightBytes) / prof.GEMV.Seconds() / 1e9
	stepBW := float64(prof.WeightBytes) / prof.Device.Seconds() / 1e9
	gbw := ratioTo(gemvBW, d2d, d2dDesc)
	metrics = append(metrics,
		Metric{Key: "gemv_gbps", Label: fmt.Sprintf("GEMV effective bandwidth (the step's GEMVs alone, %.3f ms)", ms(prof.GEMV)),
			Value: gemvBW, Unit: "GB/s", Ratio: gbw, Goal: atLeast(gbw, 0.8)},
		Metric{Key: "step_gbps", Label: fmt.Sprintf("decode step on the device (%.3f ms)", ms(prof.Device)),
			Value: stepBW, Unit: "GB/s", Ratio: ratioTo(stepBW, d2d, d2dDesc)},
	)
	if prof.GEMVReadOnly > 0 {
		roBW := float64(prof.WeightBytes) / prof.GEMVReadOnly.Seconds() / 1e9
		metrics = append(metrics,
			Metric{Key: "gemv_readonly_gbps", Label: fmt.Sprintf("  read-only ceiling of the GEMVs' launches (each only reads its matrices, %.3f ms)", ms(prof.GEMVReadOnly)),
				Value: roBW, Unit: "GB/s", Ratio: ratioTo(roBW, d2d, d2dDesc)},
			Metric{Key: "gemv_vs_readonly", Label: "  GEMV effective bandwidth against that ceiling",
				Value: gemvBW, Unit: "GB/s", Ratio: ratioTo(gemvBW, roBW, fmt.Sprintf("read-only %.0f GB/s", roBW))})
		notes = append(notes, "read-only ceiling: the step's GEMV launch sequence, replayed from a graph with each integer GEMV "+
			"launch replaced by one that only streams its matrices (kernels.SetGEMVReadOnly: read_xor, every thread slot of every multiprocessor, "+
			"4 loads in flight a thread, the first before the wait; down's x launch kept) — what these launches reach on this device when they compute nothing")
	}
	for _, kp := range prof.GEMVKinds {
		bw := float64(kp.Bytes) / kp.Time.Seconds() / 1e9
		key := strings.NewReplacer("/", "", " ", "_").Replace(kp.Name)
		metrics = append(metrics, Metric{Key: "gemv_gbps_" + key,
			Label: fmt.Sprintf("  GEMV effective bandwidth, %s alone (%d launches back to back, %.1f µs each)", kp.Name, kp.Launches, us(kp.Time)/float64(kp.Launches)),
			Value: bw, Unit: "GB/s", Ratio: ratioTo(bw, d2d, d2dDesc)})
		if kp.ReadOnly > 0 {
			ro := float64(kp.Bytes) / kp.ReadOnly.Seconds() / 1e9
			metrics = append(metrics, Metric{Key: "gemv_readonly_gbps_" + key,
				Label: fmt.Sprintf("    read-only ceiling of the same launches (%.1f µs each)", us(kp.ReadOnly)/float64(kp.Launches)),
				Value: ro, Unit: "GB/s", Ratio: ratioTo(ro, d2d, d2dDesc)})
		}
		if kp.Name == "down" && prof.DownHeld > 0 {
			held := float64(kp.Bytes) / prof.DownHeld.Seconds() / 1e9
			label := fmt.Sprintf("    the same with x already quantized (%.1f µs each: down's x launch costs %.1f µs a layer)",
				us(prof.DownHeld)/float64(kp.Launches), (us(kp.Time)-us(prof.DownHeld))/float64(kp.Launches))
			if prof.DownSliced > 0 {
				label = fmt.Sprintf("    the one-vector kernels instead, x already quantized, no x launch (%.1f µs each; the slices' own x costs %+.1f µs a layer)",
					us(prof.DownHeld)/float64(kp.Launches), (us(kp.Time)-us(prof.DownHeld))/float64(kp.Launches))
			}
			metrics = append(metrics, Metric{Key: "gemv_gbps_down_x_held", Label: label,
				Value: held, Unit: "GB/s", Ratio: ratioTo(held, d2d, d2dDesc)})
		}
	}
	if prof.DownHeldErr != nil {
		notes = append(notes, fmt.Sprintf("down with x held: not measured (%v)", prof.DownHeldErr))
	}
	if prof.GEMVSerial > 0 {
		serialBW := float64(prof.WeightBytes) / prof.GEMVSerial.Seconds() / 1e9
		serialStep := float64(prof.WeightBytes) / prof.DeviceSerial.Seconds() / 1e9
		metrics = append(metrics,
			Metric{Key: "gemv_gbps_serial", Label: fmt.Sprintf("GEMV effective bandwidth, programmatic dependent launch off (%.3f ms)", ms(prof.GEMVSerial)),
				Value: serialBW, Unit: "GB/s", Ratio: ratioTo(serialBW, d2d, d2dDesc)},
			Metric{Key: "step_gbps_serial", Label: fmt.Sprintf("decode step on the device, programmatic dependent launch off (%.3f ms)", ms(prof.DeviceSerial)),
				Value: serialStep, Unit: "GB/s", Ratio: ratioTo(serialStep, d2d, d2dDesc)})
	}
	return metrics, notes
}
