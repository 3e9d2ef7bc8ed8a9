package enginebench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/bench/gputime"
)

// MoECase is one model and device budget the moe scenario measures: a
// synthetic mixture-of-experts shape in Q4_K_M planned into Budget.
type MoECase struct {
	Arch, Shape string
	Budget      int64
}

// MoECases are the moe scenario's models and budgets (issue 25's
// benchmarks): Qwen3-30B-A3B's shape with 8 and with 4 GiB of device
// memory (one synthesized file for both), Mixtral-8x7B's with 12 GiB.
var MoECases = []MoECase{
	{"qwen3moe", "30b-a3b", 8 << 30},
	{"qwen3moe", "30b-a3b", 4 << 30},
	{"mixtral", "8x7b", 12 << 30},
}

// DefaultMoEZipf is the moe scenario's default router skew: a Zipf
// exponent over each layer's experts (model.Model.SetRouterSkew).
const DefaultMoEZipf = 1.0

// ParseMoECases picks MoECases by their names, comma-separated
// ("qwen3moe-30b-a3b-8GiB,mixtral-8x7b-12GiB"), in MoECases' order; an
// unknown name is an error that lists the known ones.
func ParseMoECases(s string) ([]MoECase, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []MoECase
	for _, c := range MoECases {
		if want[c.name()] {
			out = append(out, c)
			delete(want, c.name())
		}
	}
	if len(want) > 0 {
		unknown := slices.Sorted(maps.Keys(want))
		return nil, fmt.Errorf("moe case %q: want one of %s", unknown[0], MoECaseNames())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no moe case named: want one of %s", MoECaseNames())
	}
	return out, nil
}

// MoECaseNames lists MoECases' names, comma-separated, as ParseMoECases
// takes them.
func MoECaseNames() string {
	names := make([]string, len(MoECases))
	for i, c := range MoECases {
		names[i] = c.name()
	}
	return strings.Join(names, ", ")
}

// name is the case's variant name ("qwen3moe-30b-a3b-8GiB").
func (c MoECase) name() string { return fmt.Sprintf("%s-%s-%s", c.Arch, c.Shape, budgetName(c.Budget)) }

// peerName is the peers-file figure of llama.cpp's --n-cpu-moe decode on
// the case's file and budget ("moe_qwen3moe_30b_a3b_8gib_decode").
func (c MoECase) peerName() string {
	return strings.ToLower(strings.NewReplacer("-", "_").Replace("moe_" + c.name() + "_decode"))
}

// moePeerNames are the peer figures of MoECases: short decodes, the
// served decode's length, and the served batch's.
func moePeerNames() []string {
	var out []string
	for _, c := range MoECases {
		out = append(out, c.peerName(), c.servedPeerName(DefaultMoEServed), c.servedBatchPeerName(DefaultMoEServedBatch, DefaultMoEServedBatchTokens))
	}
	return out
}

// expertSizes returns each layer's experts' weight bytes (gate, up and
// down): what the CPU reads to apply one.
func expertSizes(layers []model.Layer, experts int) ([][]int64, error) {
	if experts < 1 || len(layers) == 0 {
		return nil, fmt.Errorf("not a mixture-of-experts model (%d experts, %d layers)", experts, len(layers))
	}
	out := make([][]int64, len(layers))
	for l := range layers {
		if n := len(layers[l].Experts); n != experts {
			return nil, fmt.Errorf("layer %d holds %d experts, want %d", l, n, experts)
		}
		for x := range layers[l].Experts {
			out[l] = append(out[l], layers[l].Experts[x].Bytes())
		}
	}
	return out, nil
}

// moeTraffic is what the timed passes of one decode routed, from the
// change in the router's counts over them.
type moeTraffic struct {
	// Tokens is how many tokens each layer routed.
	Tokens float64
	// RoutedPerToken is the bytes the experts each token was routed to
	// hold, summed over the layers: what the token's FFNs read.
	RoutedPerToken float64
	// ReadPerPass is the expert bytes a pass of Batch tokens reads when
	// each expert the pass routes to is read once for all of them,
	// expected from each expert's measured share of the tokens (the
	// tokens of a pass taken as routing independently): at batch 1 it is
	// RoutedPerToken.
	ReadPerPass float64
}

// routedTraffic computes a decode's moeTraffic from the router's counts
// before and after its timed passes (per layer and expert), the experts'
// sizes and the model's experts used per token.
func routedTraffic(before, after [][]uint64, sizes [][]int64, used, batch int) (moeTraffic, error) {
	var tr moeTraffic
	if len(after) == 0 || len(before) != len(after) || len(sizes) != len(after) || used < 1 || batch < 1 {
		return tr, fmt.Errorf("routing counts of %d and %d layers, sizes of %d, %d experts used, batch %d", len(before), len(after), len(sizes), used, batch)
	}
	var tokens float64
	for l := range after {
		if len(before[l]) != len(after[l]) || len(sizes[l]) != len(after[l]) {
			return tr, fmt.Errorf("layer %d: %d, %d counts and %d sizes", l, len(before[l]), len(after[l]), len(sizes[l]))
		}
		var routes uint64
		for e := range after[l] {
			if after[l][e] < before[l][e] {
				return tr, fmt.Errorf("layer %d expert %d: count went down from %d to %d", l, e, before[l][e], after[l][e])
			}
			routes += after[l][e] - before[l][e]
		}
		n := float64(routes) / float64(used)
		if l == 0 {
			tokens = n
		} else if n != tokens {
			return tr, fmt.Errorf("layer %d routed %v tokens, layer 0 %v", l, n, tokens)
		}
		if n == 0 {
			return tr, errors.New("no token routed")
		}
		for e := range after[l] {
			p := float64(after[l][e]-before[l][e]) / n
			b := float64(sizes[l][e])
			tr.RoutedPerToken += p * b
			tr.ReadPerPass += (1 - math.Pow(1-min(p, 1), float64(batch))) * b
		}
	}
	tr.Tokens = tokens
	return tr, nil
}

// moeLimits are the bounds a pass's off-GPU bytes set on its time.
type moeLimits struct {
	// Combined is issue 25's combined-link limit: the pass's off-GPU
	// bytes (experts read, attention streamed) over the CPU's and the
	// host-to-device link's rates together — what the best split of
	// those bytes between computing on the CPU in place and copying to
	// the GPU could reach.
	Combined time.Duration
	// CPU is the limit of this engine's placement: every expert read by
	// the CPU at its rate, the streamed attention over host-to-device,
	// one after the other (a layer's FFN waits for its attention).
	CPU time.Duration
}

// moeLimitsFor computes the limits of a pass reading experts bytes on the
// CPU and streaming streamed bytes to the GPU, at the CPU's rate cpu and
// the host-to-device rate h2d (bytes/s).
func moeLimitsFor(experts, streamed, cpu, h2d float64) (moeLimits, error) {
	if !(cpu > 0) || !(h2d > 0) || experts < 0 || streamed < 0 {
		return moeLimits{}, fmt.Errorf("limits of %v expert and %v streamed bytes at CPU %v and H2D %v bytes/s", experts, streamed, cpu, h2d)
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return moeLimits{Combined: sec((experts + streamed) / (cpu + h2d)), CPU: sec(experts/cpu + streamed/h2d)}, nil
}

// moeRouting is one routing a case decodes with.
type moeRouting struct {
	// prefix of its metric keys, and the words that say which it is.
	prefix, what string
	zipf         float64
}

// dev is rt's rows of experts in device memory (prefix dev_ + rt's) run
// a way named name: prefix dev_<name>_ + rt's.
func (rt moeRouting) dev(name string) moeRouting {
	rt.prefix = "dev_" + name + "_" + strings.TrimPrefix(rt.prefix, "dev_")
	return rt
}

// moe measures one MoECase: attention on the GPU planned into the budget
// (resident, tier B for what does not fit), routing on the GPU and every
// expert on the CPU from host memory (engine/gpu's gpuMoE with no expert
// resident), decode at batch 1 and 8, first
// on the model's own routing (random weights: near uniform) and then
// skewed by a Zipf law of exponent Options.MoEZipf; then the same with the
// experts each routing used most held in the device memory the budget
// leaves (moeOnDevice).
func (rn *runner) moe(ctx context.Context, res *ScenarioResult, mc MoECase) error {
	gm, cpu, sizes, err := rn.scenarioArchModel(res, "", mc.Arch, mc.Shape, "q4_k_m")
	if err != nil {
		return err
	}
	defer gm.Close()
	esizes, err := expertSizes(cpu.Weights.Layers, cpu.Config.Experts)
	if err != nil {
		return fmt.Errorf("%s: %w", res.Model, err)
	}
	var expertBytes int64
	experts := 0
	for _, l := range esizes {
		for _, b := range l {
			expertBytes += b
			experts++
		}
	}
	// The GPU holds attention, norms and router; the experts stay in host
	// memory, so only the layers' own tensors are planned.
	gpuSizes := sizes
	gpuSizes.Experts = nil
	const batch, ctxLen = 8, 64
	g, _, _, place, err := rn.loadInBudget(res, cpu, gpuSizes, mc.Budget, ctxLen, batch,
		fmt.Sprintf("attention, norms and routers planned by engine/tier into the budget (KV cache for %d x %d positions); every expert in host memory, computed on the CPU", batch, ctxLen))
	if err != nil {
		return err
	}
	defer g.Close()
	defer place()
	res.Notes = append(res.Notes, fmt.Sprintf("experts: all %d (%s) in host memory, routing on the GPU and every expert computed on the CPU beside it (engine/gpu's gpuMoE with none resident, llama.cpp's --cpu-moe shape); the budget places only attention",
		experts, gib(expertBytes)))
	if _, err := rn.hostRead(ctx); err != nil {
		return err
	}
	routings := []moeRouting{{"", "the model's router as it is: random weights route near uniformly, the worst case for a cache", 0}}
	if z := rn.o.MoEZipf; z > 0 {
		routings = append(routings, moeRouting{"zipf_", fmt.Sprintf("skewed by a fixed Zipf law of exponent %g over each layer's experts (--moe-zipf; model.Model.SetRouterSkew), a stand-in for a trained router's skew", z), z})
	}
	var measured []moeMeasured
	for _, rt := range routings {
		if err := g.SetRouterSkew(rt.zipf); err != nil {
			return err
		}
		keys := "JSON keys without a prefix"
		if rt.prefix != "" {
			keys = "JSON keys " + rt.prefix + "*"
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%s (%s): %s", rt.short(), keys, rt.what))
		c0 := g.ExpertCounts()
		for _, b := range []int{1, batch} {
			if err := rn.moeDecode(ctx, res, g, esizes, nil, mc, rt, b); err != nil {
				return err
			}
		}
		rows := tier.CountsSince(c0, g.ExpertCounts())
		counts, err := calibrateRouting(ctx, g.Model, batch, ctxLen)
		if err != nil {
			return fmt.Errorf("%s: routing calibration: %w", rt.short(), err)
		}
		measured = append(measured, moeMeasured{rt, counts, rows})
	}
	// Then the engine's placement: the device memory the budget leaves
	// holds the experts the decodes above routed to most. Rows of their
	// own, so a failure there leaves the CPU rows standing.
	if err := rn.moeOnDevice(ctx, res, g, cpu.Config, gpuSizes, esizes, mc, measured, ctxLen, batch); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("experts in device memory: not measured: %v", err))
	}
	if err := g.SetResidentExperts(ctx, nil); err != nil {
		return err
	}
	return g.SetRouterSkew(0)
}

// calibrateRouting prefills seqs fresh sequences of n prompt tokens each
// (gputime.Prompt, seeds apart from every timed row's) and returns the
// expert counts they routed: the placement's calibration, as engine's
// calibrateExperts runs its text. The timed rows' own counts are no
// calibration: a few prompt tokens and their greedy continuations make a
// near-uniform routing look skewed, and the experts they chose served the
// next tokens' picks no better than their share of the bytes.
func calibrateRouting(ctx context.Context, m *gpu.Model, seqs, n int) ([][]uint64, error) {
	before := m.ExpertCounts()
	for i := range seqs {
		s, err := m.NewSequence(0)
		if err != nil {
			return nil, err
		}
		err = m.Forward(ctx, []model.Step{{Seq: s, Tokens: gputime.Prompt(m.Config.Vocab, n, calibPromptSeed+i*n)}})
		s.Close()
		if err != nil {
			return nil, fmt.Errorf("prefill %d of %d: %w", i+1, seqs, err)
		}
	}
	return tier.CountsSince(before, m.ExpertCounts()), nil
}

// calibPromptSeed seeds the calibration's prompts, away from the timed
// rows' (0 and up, devPromptSeed and up).
const calibPromptSeed = 1 << 12

// moeMeasured is a routing, the expert counts its calibration routed,
// and those its timed rows routed: other tokens, decoded as the rows with
// experts in device memory are, the placement's held-out counts
// (tier.DeviceCost.Holdout).
type moeMeasured struct {
	rt      moeRouting
	counts  [][]uint64
	holdout [][]uint64
}

// moeOnDevice decodes g again, for each measured routing, with the
// experts that routing used most per byte in the device memory the
// budget leaves beyond the plan (engine.DeviceExpertBudget: the budget
// less the plan, gpu.MoEDeviceOverhead and gpu.PickStreamBytes; placed by
// tier.ExpertPlan.PlaceOnDevice), computed on the GPU; rows dev_*, the
// CPU computing every pick it has, and dev_stream_* at batch 1 with a
// share of them over PCIe (the engine's default, gpu.Model.SetStreamPicks).
func (rn *runner) moeOnDevice(ctx context.Context, res *ScenarioResult, g *loaded, cfg model.Config, sizes tier.Sizes, esizes [][]int64, mc MoECase, measured []moeMeasured, ctxLen, batch int) error {
	plan, err := rn.planFull(cfg, sizes, mc.Budget, ctxLen, batch, 0)
	if err != nil {
		return err
	}
	left := engine.DeviceExpertBudget(plan, &cfg, esizes)
	if left <= 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("experts in device memory: none, the plan leaves no room in %s", gib(mc.Budget)))
		return nil
	}
	hop, err := g.MoEHop(ctx)
	if err != nil {
		return err
	}
	for _, m := range measured {
		var xp, use tier.ExpertPlan
		xp.PlaceOnDevice(esizes, m.counts, left, tier.DeviceCost{Used: cfg.ExpertsUsed, Hop: hop, Holdout: m.holdout})
		use.PlaceOnDevice(esizes, m.counts, left, tier.DeviceCost{})
		if xp.Device == nil {
			res.Notes = append(res.Notes, fmt.Sprintf("experts in device memory, %s: none fits in the %s left", m.rt.short(), gib(left)))
			continue
		}
		if err := g.SetResidentExperts(ctx, xp.DeviceLists()); err != nil {
			return err
		}
		if err := g.SetRouterSkew(m.rt.zipf); err != nil {
			return err
		}
		rt := m.rt
		rt.prefix = "dev_" + rt.prefix
		res.Notes = append(res.Notes, fmt.Sprintf("%s with experts in device memory (JSON keys %s*): %d experts (%s, %d whole layers) in the %s the budget leaves, those that save the CPU most per byte by the routing measured on a prefill of %d other tokens, the way they are placed chosen by the CPU rows' routing (%.2f of the picks of both; a CPU layer's fixed cost measured as %s of reads, gpu.Model.MoEHop); the others on the CPU; routed and read bytes count only the experts off the device, or every expert where a batch size's trial kept the CPU alone",
			m.rt.short(), rt.prefix, xp.DeviceCount(), gib(xp.DeviceBytes), tier.WholeLayers(xp.Device), gib(left), batch*ctxLen, xp.DeviceHit, tier.FormatBytes(hop)))
		off := tier.OffDevice(esizes, xp.Device) // what the CPU reads: routedTraffic counts only the experts off the device
		for _, b := range []int{1, batch} {
			if err := rn.moeDecode(ctx, res, g, off, esizes, mc, rt, b); err != nil {
				return err
			}
		}
		if err := rn.moeStream(ctx, res, g, off, esizes, mc, rt); err != nil {
			return err
		}
		if err := rn.moeMapped(ctx, res, g, off, esizes, mc, rt); err != nil {
			return err
		}
		if err := rn.moeAuto(ctx, res, g, off, esizes, mc, rt); err != nil {
			return err
		}
		// The other placements, for comparison at batch 1: by use per
		// byte alone, and whole layers first (llama.cpp's --n-cpu-moe
		// shape), where they differ from the plan's.
		lay, _ := tier.WholeLayersFirst(esizes, m.counts, left)
		for _, alt := range []struct {
			prefix, what string
			device       [][]bool
		}{
			{"dev_use_", "by use per byte alone", use.Device},
			{"dev_layers_", "whole layers first, the most routed first, then by use per byte", lay},
		} {
			if tier.WholeLayers(alt.device) == tier.WholeLayers(xp.Device) {
				continue
			}
			xs := tier.ExpertPlan{Device: alt.device}
			if err := g.SetResidentExperts(ctx, xs.DeviceLists()); err != nil {
				return err
			}
			rt.prefix = alt.prefix + m.rt.prefix
			res.Notes = append(res.Notes, fmt.Sprintf("%s, experts in device memory %s (JSON keys %s*): %d experts (%d whole layers)",
				m.rt.short(), alt.what, rt.prefix, xs.DeviceCount(), tier.WholeLayers(alt.device)))
			if err := rn.moeDecode(ctx, res, g, tier.OffDevice(esizes, alt.device), esizes, mc, rt, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

// moeStream times batch 1 again with a share of each CPU layer's picks
// copied over PCIe and computed on the GPU beside the CPU
// (gpu.Model.SetStreamPicks; rows dev_stream_*), against the rows of
// routing without it in the same run; then, with the stream on, picks
// shared by their FFN width (SetSplitPicks; dev_split_*, against
// dev_stream_*); and turns both off again.
func (rn *runner) moeStream(ctx context.Context, res *ScenarioResult, g *loaded, sizes, all [][]int64, mc MoECase, routing moeRouting) error {
	if err := g.SetStreamPicks(true); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("%s, picks over PCIe: not run: %v", routing.short(), err))
		return nil
	}
	rt := routing.dev("stream")
	err := rn.streamRow(ctx, res, g, sizes, all, mc, routing, rt,
		"cpu_picks", "picks over PCIe too", "the CPU's picks on the CPU alone", "a share of each CPU layer's picks copied over PCIe and computed on the GPU")
	if err == nil {
		err = rn.moeSplit(ctx, res, g, sizes, all, mc, routing)
	}
	if serr := g.SetStreamPicks(false); err == nil {
		err = serr
	}
	return err
}

// moeSplit times batch 1 of routing's placement with the picks over PCIe
// on and shared by their FFN width where a layer has few CPU picks
// (gpu.Model.SetSplitPicks; rows dev_split_*), against its dev_stream_*
// rows, and turns the split off again.
func (rn *runner) moeSplit(ctx context.Context, res *ScenarioResult, g *loaded, sizes, all [][]int64, mc MoECase, routing moeRouting) error {
	if err := g.SetSplitPicks(true); err != nil {
		return err
	}
	err := rn.streamRow(ctx, res, g, sizes, all, mc, routing.dev("stream"), routing.dev("split"),
		"stream_picks", "picks also shared by width", "whole picks only", "picks shared by their FFN width with the CPU where a layer has few")
	if serr := g.SetSplitPicks(false); err == nil {
		err = serr
	}
	return err
}

// streamRow times batch 1 of g as it is set now, in rows rt.prefix,
// against base's rows (vs, what and basis name the comparison), and notes
// what the pick stream did meanwhile (what it is: how).
func (rn *runner) streamRow(ctx context.Context, res *ScenarioResult, g *loaded, sizes, all [][]int64, mc MoECase, base, rt moeRouting, vs, what, basis, how string) error {
	before, _ := g.MoEStats()
	if err := rn.moeDecode(ctx, res, g, sizes, all, mc, rt, 1); err != nil {
		return err
	}
	after, _ := g.MoEStats()
	addVersus(res, rt, base, vs, what, basis)
	st, st0 := after.Streamed, before.Streamed
	staged := st.Layers - st0.Layers
	res.Notes = append(res.Notes, fmt.Sprintf("%s, %s (JSON keys %s*): over its warm-up and timed passes, %d whole picks and %d split by width (%s) in %d layers (the host %v a layer issuing them), %d CPU layers; split by the links' fits in passes: the GPU's share %v + bytes at %.1f GB/s, the CPU %v + bytes at %.1f GB/s",
		rt.short(), how, rt.prefix, st.Picks-st0.Picks, st.Split-st0.Split, gib(st.Bytes-st0.Bytes), staged, ((st.Issue-st0.Issue)/time.Duration(max(1, staged))).Round(time.Microsecond), after.Layers-before.Layers,
		st.CopyFixed.Round(time.Microsecond), st.CopyRate/1e9, st.CPUFixed.Round(time.Microsecond), st.CPURate/1e9))
	return nil
}

// moeMapped times batch 1 again with the experts the device does not
// hold pulled over PCIe by the GPU (staged for its kernels), every layer
// without the host (gpu.Model.SetMappedExperts; rows dev_mapped_*),
// against the rows of routing (the CPU's picks on the CPU) and of the
// picks over PCIe (dev_stream_*) in the same run, and turns it off again.
func (rn *runner) moeMapped(ctx context.Context, res *ScenarioResult, g *loaded, sizes, all [][]int64, mc MoECase, routing moeRouting) error {
	if err := g.SetMappedExperts(gpu.MappedOn); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("%s, mapped experts: not run: %v", routing.short(), err))
		return nil
	}
	rt := routing.dev("mapped")
	before, _ := g.MoEStats()
	err := rn.moeDecode(ctx, res, g, sizes, all, mc, rt, 1)
	after, _ := g.MoEStats()
	if serr := g.SetMappedExperts(gpu.MappedOff); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	addVersus(res, rt, routing, "cpu_picks", "experts pulled over PCIe by the GPU", "the CPU's picks on the CPU alone")
	addVersus(res, rt, routing.dev("stream"), "stream_picks", "experts pulled over PCIe by the GPU", "a share of the CPU's picks over PCIe")
	picks, bytes := after.Mapped.Picks-before.Mapped.Picks, after.Mapped.Bytes-before.Mapped.Bytes
	layers := after.HostFree - before.HostFree
	res.Notes = append(res.Notes, fmt.Sprintf("%s, the experts the device does not hold pulled over PCIe by the GPU, staged into slots for the picked kernels (JSON keys %s*): over its warm-up and timed passes, %d picks (%s) pulled in %d layers that ran without the host, %d CPU layers",
		routing.short(), rt.prefix, picks, gib(bytes), layers, after.Layers-before.Layers))
	return nil
}

// moeAuto times batch 1 as the engine serves a model by default: the
// pick stream on and mapped experts by trial (gpu.MappedTrial; rows
// dev_auto_*), against the stream's rows and the mapped ones, notes the
// trial's decision, and turns both off again.
func (rn *runner) moeAuto(ctx context.Context, res *ScenarioResult, g *loaded, sizes, all [][]int64, mc MoECase, routing moeRouting) error {
	if err := g.SetStreamPicks(true); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("%s, the engine's default ways: not run: %v", routing.short(), err))
		return nil
	}
	rt := routing.dev("auto")
	err := g.SetMappedExperts(gpu.MappedTrial)
	if err == nil {
		err = rn.moeDecode(ctx, res, g, sizes, all, mc, rt, 1)
	}
	st, _ := g.MoEStats()
	err = errors.Join(err, g.SetMappedExperts(gpu.MappedOff), g.SetStreamPicks(false))
	if err != nil {
		return err
	}
	addVersus(res, rt, routing.dev("stream"), "stream_picks", "the engine's default ways", "the pick stream alone")
	addVersus(res, rt, routing.dev("mapped"), "mapped", "the engine's default ways", "mapped experts always")
	m := st.Mapped
	kept := "undecided"
	if m.Decided {
		kept = map[bool]string{true: "pulling them", false: "the host's way"}[m.Kept]
	}
	res.Notes = append(res.Notes, fmt.Sprintf("%s, the engine's default ways (JSON keys %s*): the pick stream, and mapped experts by trial at one token: kept %s (a pass %.2f ms pulled by the GPU, %.2f ms through the host)",
		routing.short(), rt.prefix, kept, ms(m.MappedPass), ms(m.HostPass)))
	return nil
}

// addVersus adds a row of rt's batch-1 tok/s against base's, both already
// in res, keyed rt's prefix + "decode_tps_vs_" + vs: the one way against
// the other in the same run. what says what rt adds, basis what base is.
func addVersus(res *ScenarioResult, rt, base moeRouting, vs, what, basis string) {
	var with, without float64
	for _, m := range res.Metrics {
		switch m.Key {
		case rt.prefix + "decode_tps":
			with = m.Value
		case base.prefix + "decode_tps":
			without = m.Value
		}
	}
	if with > 0 && without > 0 {
		res.Metrics = append(res.Metrics, Metric{Key: rt.prefix + "decode_tps_vs_" + vs, Label: "decode, batch 1, " + base.short() + ", " + what, Value: with, Unit: "tok/s",
			Ratio: ratioTo(with, without, fmt.Sprintf("%s %.2f tok/s", basis, without))})
	}
}

// moeDecode times one decode of g at batch b and adds its rows: tok/s
// (the peer's ratio for the model's own routing at batch 1), the expert
// bytes routed per token and read per pass, the CPU's busy time, and the
// time per pass against the limits. sizes are the expert bytes the CPU
// reads when the GPU computes its resident experts' picks; all, when some
// are resident, every expert's: the bytes it reads where the batch size's
// trial kept the CPU alone.
func (rn *runner) moeDecode(ctx context.Context, res *ScenarioResult, g *loaded, sizes, all [][]int64, mc MoECase, rt moeRouting, b int) error {
	rn.o.progress("  decode, batch %d, %s", b, rt.short())
	var counts0 [][]uint64
	var st0 gpu.MoEStats
	opts := gputime.DecodeOptions{Batch: b, Prompt: 4, Warmup: 2, Steps: 8}
	if b > 1 {
		opts.Warmup, opts.Steps = 1, 3
	}
	if all != nil {
		// Other tokens than the rows whose routing chose the resident
		// experts decoded: the same ones would route to them again.
		opts.PromptSeed = devPromptSeed
	}
	if st, _ := g.MoEStats(); st.ResidentExperts > 0 {
		// Past the trial of the GPU's way against the CPU alone.
		opts.Warmup = max(opts.Warmup, gpu.ExpertTrialPasses)
		if st.Mapped.Way == gpu.MappedTrial && b == 1 {
			// And past mapped experts' trial, which follows it.
			opts.Warmup = max(opts.Warmup, 2*gpu.ExpertTrialPasses)
		}
	}
	opts.BeforeTimed = func() {
		counts0 = g.ExpertCounts()
		st0, _ = g.MoEStats()
	}
	d, err := gputime.TimeDecode(ctx, g.Model, opts)
	if err != nil {
		return err
	}
	st1, _ := g.MoEStats()
	var kept string
	var cpuKept *bool
	for _, c := range st1.Choices {
		if c.Batch != b {
			continue
		}
		kept = "the GPU's resident experts"
		if !c.Device {
			kept, sizes = "the CPU alone", all
		}
		cpuKept = new(!c.Device)
		res.Notes = append(res.Notes, fmt.Sprintf("%s, batch %d: the trial kept %s (a pass %.2f ms with the GPU's experts, %.2f ms with the CPU alone)",
			rt.short(), b, kept, ms(c.DevicePass), ms(c.CPUPass)))
	}
	if all != nil && kept == "" {
		return fmt.Errorf("%s, batch %d: no way kept after %d warm-up passes", rt.short(), b, opts.Warmup)
	}
	tr, err := routedTraffic(counts0, g.ExpertCounts(), sizes, g.Config.ExpertsUsed, b)
	if err != nil {
		return fmt.Errorf("routing of the timed passes: %w", err)
	}
	if want := float64(b * opts.Steps); tr.Tokens != want {
		return fmt.Errorf("the timed passes routed %v tokens a layer, want %v", tr.Tokens, want)
	}
	var peer *Ratio
	if rt.zipf == 0 && b == 1 {
		peer = ratioToPeer(d.TokensPerSecond, rn.o.Peers, mc.peerName())
	}
	m, err := moeMetrics(moePass{
		routing: rt, batch: b, tps: d.TokensPerSecond, perPass: d.PerPass, traffic: tr,
		busy: (st1.Busy - st0.Busy) / time.Duration(opts.Steps), hop: (st1.Hop - st0.Hop) / time.Duration(opts.Steps),
		moved:    float64(st1.CPUBytes-st0.CPUBytes+st1.Streamed.Bytes-st0.Streamed.Bytes+st1.Mapped.Bytes-st0.Mapped.Bytes) / float64(opts.Steps),
		streamed: g.StreamedBytes(), cpu: rn.dram, h2d: rn.ceil.H2D, peer: peer, goal: rt.engineDefault(), cpuKept: cpuKept,
	})
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics, m...)
	return nil
}

// devPromptSeed seeds the prompts of the rows with experts in device
// memory (gputime.DecodeOptions.PromptSeed), away from the rows' before
// them, whose routing counts chose those experts.
const devPromptSeed = 1 << 10

// engineDefault reports whether rt's rows decode the way the engine does
// by default at a fixed placement (dev_auto_: the experts the budget
// leaves room for in device memory, its ways chosen by trial), the rows
// that carry the peer's goal; the others (every expert on the CPU, one
// way forced) compare ways and show the peer's ratio alone. The served
// rows (moeserved.go) carry it too, the placement following the routing.
func (rt moeRouting) engineDefault() bool { return strings.HasPrefix(rt.prefix, "dev_auto_") }

// short names the routing in a row's label.
func (rt moeRouting) short() string {
	if rt.zipf > 0 {
		return fmt.Sprintf("Zipf %g routing", rt.zipf)
	}
	return "own routing"
}

// way says, in a row's label, where the rows keyed by rt's prefix put the
// experts and how the ones off the device are computed: the report's
// rows of one routing differ by it alone.
func (rt moeRouting) way() string {
	for _, w := range []struct{ prefix, way string }{
		{"dev_auto_", "the engine's default ways (device experts, pick stream, mapped by trial)"},
		{"dev_stream_", "device experts, a share of the CPU's picks over PCIe"},
		{"dev_split_", "device experts, picks over PCIe also shared by width"},
		{"dev_mapped_", "device experts, the others pulled over PCIe by the GPU"},
		{"dev_use_", "device experts by use per byte alone, the rest on the CPU"},
		{"dev_layers_", "device experts by whole layers first, the rest on the CPU"},
		{"dev_", "device experts, the rest on the CPU"},
	} {
		if strings.HasPrefix(rt.prefix, w.prefix) {
			return w.way
		}
	}
	return "every expert on the CPU"
}

// moePass is what one timed decode of a moe case measured.
type moePass struct {
	routing moeRouting
	batch   int
	tps     float64
	perPass time.Duration
	traffic moeTraffic
	// busy and hop are the CPU's FFN time and hand-over time per pass
	// (gpu.MoEStats).
	busy, hop time.Duration
	// streamed is the attention bytes a pass copies from tier B.
	streamed int64
	// moved is the expert bytes a pass moved out of host memory, as
	// counted: the CPU's reads for its picks, the picks copied to the GPU
	// and those it pulled (gpu.MoEStats' CPUBytes, Streamed and Mapped).
	moved float64
	// cpu and h2d are the CPU's (host memory read) and the pinned
	// host-to-device rates, bytes/s.
	cpu, h2d float64
	// peer relates tps to a peer's figure (nil: none); goal says whether
	// the row carries the 1.5x goal against it (moeRouting.engineDefault).
	peer *Ratio
	goal bool
	// cpuKept, where experts are in device memory, is the batch size's
	// trial's choice: the CPU alone (true) or the GPU's experts.
	cpuKept *bool
}

// moeMetrics turns one timed decode into the report's rows: tok/s (with
// the peer's ratio where given, and its 1.5x goal on the engine's default
// way), the expert bytes
// routed per token (and, batched, read per token against them), the CPU's
// busy and hand-over time per pass and its expert read rate, and the time
// per pass against the combined-link limit and against every expert on
// the CPU.
func moeMetrics(p moePass) ([]Metric, error) {
	rt, b, tr := p.routing, p.batch, p.traffic
	if b < 1 || !(p.perPass > 0) {
		return nil, fmt.Errorf("moe rows: batch %d, pass %v", b, p.perPass)
	}
	sfx, lsfx := "", ", batch 1"
	if b > 1 {
		sfx, lsfx = fmt.Sprintf("_b%d", b), fmt.Sprintf(", batch %d (aggregate)", b)
	}
	m := []Metric{{Key: rt.prefix + "decode" + sfx + "_tps", Label: "decode" + lsfx + ", " + rt.short() + ", " + rt.way(), Value: p.tps, Unit: "tok/s", Ratio: p.peer}}
	if p.goal {
		m[0].Goal = atLeast(p.peer, 1.5)
	}
	if p.cpuKept != nil {
		v := 0.0
		if *p.cpuKept {
			v = 1
		}
		m = append(m, Metric{Key: rt.prefix + "trial_cpu" + sfx, Label: "  the trial kept the CPU alone over the GPU's experts (1 yes, 0 no)", Value: v, Unit: ""})
	}
	m = append(m, Metric{Key: rt.prefix + "routed" + sfx + "_mib_per_token", Label: "  expert bytes the routed experts hold, per token", Value: tr.RoutedPerToken / (1 << 20), Unit: "MiB"})
	if b > 1 && tr.RoutedPerToken > 0 {
		m = append(m, Metric{Key: rt.prefix + "read" + sfx + "_mib_per_token", Label: "  expert bytes read per token (each routed expert once a pass; expected from the measured shares)",
			Value: tr.ReadPerPass / float64(b) / (1 << 20), Unit: "MiB",
			Ratio: ratioTo(tr.ReadPerPass/float64(b), tr.RoutedPerToken, fmt.Sprintf("routed %.1f MiB per token", tr.RoutedPerToken/(1<<20)))})
	}
	if tr.RoutedPerToken > 0 {
		// What the engine counted moving against what the token's routed
		// experts hold: 1 at batch 1 (each pick's expert moved once),
		// below it batched (an expert several tokens picked moved once).
		// The expected row above models the same from the experts'
		// shares, which a few timed passes measure only roughly.
		m = append(m, Metric{Key: rt.prefix + "moved" + sfx + "_mib_per_token", Label: "  expert bytes moved per token, counted (the CPU's reads, the picks copied and pulled)",
			Value: p.moved / float64(b) / (1 << 20), Unit: "MiB",
			Ratio: ratioTo(p.moved/float64(b), tr.RoutedPerToken, fmt.Sprintf("routed %.1f MiB per token", tr.RoutedPerToken/(1<<20)))})
	}
	m = append(m,
		Metric{Key: rt.prefix + "cpu_busy" + sfx + "_ms", Label: "  CPU busy in the FFN blocks, per pass", Value: ms(p.busy), Unit: "ms",
			Ratio: ratioTo(ms(p.busy), ms(p.perPass), fmt.Sprintf("pass %.2f ms", ms(p.perPass)))},
		Metric{Key: rt.prefix + "cpu_hop" + sfx + "_ms", Label: "  hidden state handed between GPU and CPU, per pass", Value: ms(p.hop), Unit: "ms"})
	if p.busy > 0 {
		rate := tr.ReadPerPass / p.busy.Seconds()
		m = append(m, Metric{Key: rt.prefix + "cpu_expert" + sfx + "_gbps", Label: "  CPU's expert read rate while busy", Value: rate / 1e9, Unit: "GB/s",
			Ratio: ratioTo(rate/1e9, p.cpu/1e9, fmt.Sprintf("host read %.1f GB/s", p.cpu/1e9))})
	}
	lim, err := moeLimitsFor(tr.ReadPerPass, float64(p.streamed), p.cpu, p.h2d)
	if err != nil {
		return nil, err
	}
	off := gib(int64(tr.ReadPerPass) + p.streamed)
	// Nothing off the GPU (every routed expert in device memory, no layer
	// streamed): no link limits the pass, and a ratio to 0 has no value.
	var comb, cpuLim *Ratio
	if lim.Combined > 0 {
		comb = ratioTo(ms(p.perPass), ms(lim.Combined), fmt.Sprintf("combined-link limit %.2f ms (%s ÷ (host read %.1f + H2D %.1f GB/s))", ms(lim.Combined), off, p.cpu/1e9, p.h2d/1e9))
	}
	if lim.CPU > 0 {
		cpuLim = ratioTo(ms(p.perPass), ms(lim.CPU), fmt.Sprintf("CPU-experts limit %.2f ms (experts ÷ host read, then streamed ÷ H2D)", ms(lim.CPU)))
	}
	m = append(m,
		Metric{Key: rt.prefix + "time_per_pass" + sfx + "_ms", Label: "  time per pass vs the combined-link limit", Value: ms(p.perPass), Unit: "ms", Ratio: comb},
		Metric{Key: rt.prefix + "time_per_pass_cpu" + sfx + "_ms", Label: "  time per pass vs every expert on the CPU", Value: ms(p.perPass), Unit: "ms", Ratio: cpuLim})
	return m, nil
}
