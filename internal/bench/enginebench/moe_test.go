package enginebench

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
)

// TestMoECases: "all" leaves the moe scenario out, its cases are issue
// 25's three (one Qwen3-30B-A3B file for two budgets), and each case's
// peer figure has a name a peers file may use, absent from the H200's.
func TestMoECases(t *testing.T) {
	t.Parallel()
	if slices.Contains(AllScenarios, MoE) {
		t.Fatal(`"all" runs the moe scenario, which synthesizes about 43 GiB`)
	}
	var names []string
	for _, c := range MoECases {
		names = append(names, c.name()+" "+c.peerName())
	}
	want := []string{
		"qwen3moe-30b-a3b-8GiB moe_qwen3moe_30b_a3b_8gib_decode",
		"qwen3moe-30b-a3b-4GiB moe_qwen3moe_30b_a3b_4gib_decode",
		"mixtral-8x7b-12GiB moe_mixtral_8x7b_12gib_decode",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("cases %q, want %q", names, want)
	}
	const fig = `{"system": "llama.cpp", "setup": "--n-cpu-moe 48, tg128", "value": 20, "unit": "tok/s"}`
	p, err := ParsePeers(strings.NewReader(`{"source": "s", "figures": {"moe_mixtral_8x7b_12gib_decode": ` + fig + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := ratioToPeer(30, p, MoECases[2].peerName()); r == nil || r.Value != 1.5 {
		t.Fatalf("ratio to the mixtral peer %+v", r)
	}
	if r := ratioToPeer(30, p, MoECases[0].peerName()); r != nil {
		t.Fatalf("ratio to a figure the file leaves out: %+v", r)
	}
	h200, err := LoadPeers("../../../docs/peers-h200.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range MoECases {
		if f, ok := h200.Figure(c.peerName()); !ok || f.System != "llama.cpp" || f.Unit != "tok/s" || !strings.Contains(f.Setup, "--n-cpu-moe") {
			t.Errorf("docs/peers-h200.json's %s is %+v (present %v), want llama.cpp's --n-cpu-moe decode in tok/s", c.peerName(), f, ok)
		}
	}
}

// TestRoutedTraffic: the bytes routed per token weigh each expert by its
// share of the tokens; a batched pass reads each expert it routes to
// once, 1 − (1 − share)^batch of it expected; bad counts are errors.
func TestRoutedTraffic(t *testing.T) {
	t.Parallel()
	sizes := [][]int64{{100, 200, 300, 400}, {10, 10, 10, 10}}
	before := [][]uint64{{5, 5, 5, 5}, {1, 0, 0, 0}}
	// 4 tokens, 2 experts each: layer 0 sends every token to experts 0
	// and 1; layer 1 spreads them evenly.
	after := [][]uint64{{9, 9, 5, 5}, {3, 2, 2, 2}}
	for _, c := range []struct {
		batch            int
		routed, readPass float64
	}{
		{1, 300 + 20, 300 + 20},
		// Layer 0 reads experts 0 and 1 once; layer 1's experts each have
		// a share of 1/2: 1 − (1/2)^4 of each.
		{4, 300 + 20, 300 + 40*(1-1.0/16)},
	} {
		tr, err := routedTraffic(before, after, sizes, 2, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Tokens != 4 || math.Abs(tr.RoutedPerToken-c.routed) > 1e-9 || math.Abs(tr.ReadPerPass-c.readPass) > 1e-9 {
			t.Errorf("batch %d: %+v, want 4 tokens, %v routed, %v read a pass", c.batch, tr, c.routed, c.readPass)
		}
	}
	for _, c := range []struct {
		name          string
		before, after [][]uint64
		used, batch   int
		err           string
	}{
		{"layers differ", before, after[:1], 2, 1, "routing counts of 2 and 1 layers"},
		{"no batch", before, after, 2, 0, "batch 0"},
		{"count fell", after, before, 2, 1, "count went down"},
		{"layers routed apart", before, [][]uint64{{9, 9, 5, 5}, {1, 0, 0, 2}}, 2, 1, "layer 1 routed 1 tokens"},
		{"nothing routed", before, before, 2, 1, "no token routed"},
		{"experts differ", before, [][]uint64{{9, 9, 5}, {3, 2, 2, 2}}, 2, 1, "layer 0: 4, 3 counts"},
	} {
		if _, err := routedTraffic(c.before, c.after, sizes, c.used, c.batch); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
}

// TestMoELimits: the combined-link limit moves every off-GPU byte over
// both links at once; the CPU-experts limit reads the experts on the CPU,
// then streams the attention.
func TestMoELimits(t *testing.T) {
	t.Parallel()
	l, err := moeLimitsFor(3e9, 1e9, 100e9, 50e9)
	sec := float64(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 4 GB over 150 GB/s; 3 GB over 100 GB/s plus 1 GB over 50 GB/s.
	if want := time.Duration(4e9 / 150e9 * sec); l.Combined != want {
		t.Errorf("combined %v, want %v", l.Combined, want)
	}
	if want := 50 * time.Millisecond; l.CPU != want {
		t.Errorf("CPU %v, want %v", l.CPU, want)
	}
	for _, bad := range [][4]float64{{1, 0, 0, 1}, {1, 0, 1, math.NaN()}, {-1, 0, 1, 1}} {
		if _, err := moeLimitsFor(bad[0], bad[1], bad[2], bad[3]); err == nil {
			t.Errorf("limits of %v: no error", bad)
		}
	}
}

// TestMoEMetrics: one timed decode's rows, keyed by routing and batch:
// the peer's ratio only where given and its goal only on the engine's
// default way, the read-per-token row only when batched, the limits'
// ratios, and the rows render.
func TestMoEMetrics(t *testing.T) {
	t.Parallel()
	tr := moeTraffic{Tokens: 24, RoutedPerToken: 1 << 30, ReadPerPass: 4 << 30}
	own := moeRouting{"", "own", 0}
	zipf := moeRouting{"zipf_", "zipf", 1.2}
	peer := &Ratio{Value: 2, Basis: "llama.cpp 10 tok/s", BasisValue: 10, Peer: &Peer{System: "llama.cpp", Value: 10, Unit: "tok/s"}}
	one := moePass{routing: own, batch: 1, tps: 20, perPass: 50 * time.Millisecond, traffic: moeTraffic{Tokens: 8, RoutedPerToken: 1 << 30, ReadPerPass: 1 << 30},
		busy: 40 * time.Millisecond, hop: 5 * time.Millisecond, cpu: 100e9, h2d: 50e9, peer: peer, moved: 1.5 * (1 << 30)}
	// A way the engine does not take by default: the peer's ratio, no goal.
	ablation, err := moeMetrics(one)
	if err != nil {
		t.Fatal(err)
	}
	if a := ablation[0]; a.Ratio != peer || a.Goal != nil {
		t.Errorf("a forced way's row: ratio %+v, goal %+v; want the peer's ratio and no goal", a.Ratio, a.Goal)
	}
	one.goal = true
	m1, err := moeMetrics(one)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(ms []Metric) []string {
		var k []string
		for _, m := range ms {
			k = append(k, m.Key)
		}
		return k
	}
	want1 := []string{"decode_tps", "routed_mib_per_token", "moved_mib_per_token", "cpu_busy_ms", "cpu_hop_ms", "cpu_expert_gbps", "time_per_pass_ms", "time_per_pass_cpu_ms"}
	if !slices.Equal(keys(m1), want1) {
		t.Fatalf("batch-1 keys %q, want %q", keys(m1), want1)
	}
	if g := m1[0].Goal; g == nil || g.Op != ">=" || g.Target != 1.5 || !g.Met {
		t.Errorf("peer goal %+v", g)
	}
	if m1[1].Value != 1024 || m1[3].Ratio.Value != 0.8 {
		t.Errorf("routed %v MiB, busy share %v", m1[1].Value, m1[3].Ratio.Value)
	}
	// Counted 1.5 GiB moved where the routed experts hold 1 GiB.
	if m1[2].Value != 1536 || m1[2].Ratio.Value != 1.5 {
		t.Errorf("moved %v MiB, %v of the routed", m1[2].Value, m1[2].Ratio.Value)
	}
	// 1 GiB at 100 GB/s in 40 ms: 26.8 GB/s, 0.268 of the host read.
	if r := m1[5].Ratio.Value; math.Abs(r-float64(1<<30)/0.04/100e9) > 1e-9 {
		t.Errorf("CPU expert rate ratio %v", r)
	}
	// Nothing streamed: the combined limit is 1 GiB over 150 GB/s.
	if r := m1[6].Ratio.Value; math.Abs(r-0.05/(float64(1<<30)/150e9)) > 1e-6 {
		t.Errorf("combined-limit ratio %v", r)
	}
	m8, err := moeMetrics(moePass{routing: zipf, batch: 8, tps: 80, perPass: 100 * time.Millisecond, traffic: tr, cpu: 100e9, h2d: 50e9, streamed: 1 << 30, moved: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	want8 := []string{"zipf_decode_b8_tps", "zipf_routed_b8_mib_per_token", "zipf_read_b8_mib_per_token", "zipf_moved_b8_mib_per_token", "zipf_cpu_busy_b8_ms", "zipf_cpu_hop_b8_ms",
		"zipf_time_per_pass_b8_ms", "zipf_time_per_pass_cpu_b8_ms"}
	if !slices.Equal(keys(m8), want8) {
		t.Fatalf("batch-8 keys %q, want %q", keys(m8), want8)
	}
	if m8[0].Ratio != nil || m8[0].Goal != nil || !strings.Contains(m8[0].Label, "Zipf 1.2") {
		t.Errorf("skewed row %+v", m8[0])
	}
	if r := m8[2].Ratio.Value; r != 0.5 {
		t.Errorf("read per token ÷ routed %v, want 0.5", r)
	}
	// 2 GiB counted a pass of 8: 256 MiB a token, a quarter of what the
	// routed experts hold.
	if m := m8[3]; m.Value != 256 || m.Ratio.Value != 0.25 {
		t.Errorf("moved %v MiB a token, %v of the routed", m.Value, m.Ratio.Value)
	}
	// Every routed expert in device memory, nothing streamed: no limit,
	// no ratio (a ratio to 0 would not encode as JSON).
	dev := moeRouting{"dev_", "dev", 0}
	m0, err := moeMetrics(moePass{routing: dev, batch: 1, tps: 200, perPass: 5 * time.Millisecond, traffic: moeTraffic{Tokens: 8}, cpu: 100e9, h2d: 50e9})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range m0 {
		if r := m.Ratio; r != nil && (math.IsInf(r.Value, 0) || math.IsNaN(r.Value)) {
			t.Errorf("%s: ratio %v", m.Key, r.Value)
		}
	}
	if _, err := json.Marshal(m0); err != nil {
		t.Errorf("rows with nothing off the GPU: %v", err)
	}
	// The trial's choice, where there was one: a row of its own, the
	// second, 1 for the CPU alone; none without a trial.
	for _, c := range []struct {
		kept *bool
		want float64
	}{{new(true), 1}, {new(false), 0}} {
		mk, err := moeMetrics(moePass{routing: dev, batch: 8, tps: 90, perPass: 80 * time.Millisecond, traffic: tr, cpu: 100e9, h2d: 50e9, cpuKept: c.kept})
		if err != nil {
			t.Fatal(err)
		}
		if mk[1].Key != "dev_trial_cpu_b8" || mk[1].Value != c.want {
			t.Errorf("trial kept CPU %v: row %+v", *c.kept, mk[1])
		}
	}
	for _, m := range m0 {
		if strings.Contains(m.Key, "trial") {
			t.Errorf("a trial row %q without a trial", m.Key)
		}
	}
	if _, err := moeMetrics(moePass{routing: own, batch: 1, traffic: tr, cpu: 1, h2d: 1}); err == nil {
		t.Error("rows of a pass of no time")
	}
	r := &Report{Device: "H200", Scenarios: []ScenarioResult{{Scenario: MoE, Variant: MoECases[0].name(), Title: "moe", Metrics: append(m1, m8...)}}}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"moe/qwen3moe-30b-a3b-8GiB", "decode, batch 1, own routing", "combined-link limit", "decode, batch 8 (aggregate), Zipf 1.2 routing"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
}

// TestEngineDefault: the goal's rows are the engine's default way's
// (dev_auto_, on either routing), not every expert on the CPU's nor one
// way forced.
func TestEngineDefault(t *testing.T) {
	t.Parallel()
	own, zipf := moeRouting{"", "own", 0}, moeRouting{"zipf_", "zipf", 1}
	for _, tc := range []struct {
		rt   moeRouting
		want bool
	}{
		{own, false}, {zipf, false}, {own.dev("stream"), false}, {own.dev("mapped"), false}, {own.dev("split"), false},
		{moeRouting{"dev_", "dev", 0}, false}, {own.dev("auto"), true}, {zipf.dev("auto"), true},
	} {
		if got := tc.rt.engineDefault(); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.rt.prefix, got, tc.want)
		}
	}
}

// TestMoEWays: the rows of one routing that differ in where the experts
// are, or how the ones off the device are computed, differ in their
// labels; the Zipf routing's rows name the same ways.
func TestMoEWays(t *testing.T) {
	t.Parallel()
	own, zipf := moeRouting{"", "own", 0}, moeRouting{"zipf_", "zipf", 1}
	seen := map[string]string{}
	for _, rt := range []moeRouting{own, {"dev_", "dev", 0}, own.dev("stream"), own.dev("split"), own.dev("mapped"), own.dev("auto"),
		{"dev_use_", "use", 0}, {"dev_layers_", "layers", 0}} {
		w := rt.way()
		if prev, ok := seen[w]; ok {
			t.Errorf("%q and %q both %q", prev, rt.prefix, w)
		}
		seen[w] = rt.prefix
		z := rt
		z.prefix += "zipf_"
		if rt.prefix == "" {
			z = zipf
		}
		if z.way() != w {
			t.Errorf("%q: %q, %q: %q", rt.prefix, w, z.prefix, z.way())
		}
	}
	if own.way() != "every expert on the CPU" || !strings.Contains(own.dev("auto").way(), "default") {
		t.Errorf("ways %q, %q", own.way(), own.dev("auto").way())
	}
}

// TestExpertSizes: an expert's bytes are its three matrices'; a dense
// model or a layer short of experts is an error.
func TestExpertSizes(t *testing.T) {
	t.Parallel()
	x := func(g, u, d int) model.Expert {
		return model.Expert{Gate: model.Tensor{Data: make([]byte, g)}, Up: model.Tensor{Data: make([]byte, u)}, Down: model.Tensor{Data: make([]byte, d)}}
	}
	layers := []model.Layer{{Experts: []model.Expert{x(1, 2, 3), x(4, 5, 6)}}, {Experts: []model.Expert{x(0, 0, 1), x(10, 10, 10)}}}
	got, err := expertSizes(layers, 2)
	if err != nil || !slices.Equal(got[0], []int64{6, 15}) || !slices.Equal(got[1], []int64{1, 30}) {
		t.Fatalf("sizes %v, %v", got, err)
	}
	if _, err := expertSizes(layers, 3); err == nil || !strings.Contains(err.Error(), "layer 0 holds 2 experts, want 3") {
		t.Errorf("short layer: %v", err)
	}
	if _, err := expertSizes([]model.Layer{{}}, 0); err == nil {
		t.Error("a dense model has expert sizes")
	}
}

// TestMoEPlan runs the moe scenario's steps before the GPU on the tiny
// shapes: the synthetic file written once and found again, its experts
// sized from the weights (within the pool's page alignment of the
// planner's extents), and attention alone planned into a budget: every
// layer resident where it fits, a budget too small refused by the planner.
func TestMoEPlan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rn := &runner{o: &Options{SynthDir: dir}, ceil: Ceilings{H2D: 50e9}}
	for _, arch := range []string{"mixtral", "qwen3moe"} {
		path, err := rn.synthArch("", arch, "tiny", "q4_k_m")
		if err != nil {
			t.Fatal(err)
		}
		if again, err := rn.synthArch("", arch, "tiny", "q4_k_m"); err != nil || again != path {
			t.Fatalf("second look-up %q, %v; want %q", again, err, path)
		}
		gm, cpu, sizes, err := openGGUF(path)
		if err != nil {
			t.Fatal(err)
		}
		es, err := expertSizes(cpu.Weights.Layers, cpu.Config.Experts)
		if err != nil {
			t.Fatal(err)
		}
		for l := range es {
			for e, b := range es[l] {
				if ext := sizes.Experts[l][e]; b > ext || ext-b >= 2*4096 {
					t.Errorf("%s layer %d expert %d: %d bytes, extent %d", arch, l, e, b, ext)
				}
			}
		}
		attn := sizes
		attn.Experts = nil
		stream, _, err := rn.planBudget(cpu.Config, attn, 1<<30, 64, 8)
		if err != nil || len(stream) != 0 {
			t.Errorf("%s in 1 GiB: streamed %v, %v", arch, stream, err)
		}
		if _, _, err := rn.planBudget(cpu.Config, attn, 1<<20, 64, 8); err == nil || !strings.Contains(err.Error(), "planning into") {
			t.Errorf("%s in 1 MiB: %v, want the planner's refusal", arch, err)
		}
		gm.Close()
	}
}

// TestAddVersus: a way's batch-1 row against another's in the same run,
// and no row where either is missing.
func TestAddVersus(t *testing.T) {
	t.Parallel()
	base := moeRouting{"dev_", "dev", 0}
	rt := moeRouting{"dev_stream_", "dev stream", 0}
	res := &ScenarioResult{Metrics: []Metric{{Key: "dev_decode_tps", Value: 40}, {Key: "dev_stream_decode_tps", Value: 50}}}
	addVersus(res, rt, base, "cpu_picks", "picks over PCIe too", "the CPU alone")
	if len(res.Metrics) != 3 {
		t.Fatalf("%d rows, want 3", len(res.Metrics))
	}
	m := res.Metrics[2]
	if m.Key != "dev_stream_decode_tps_vs_cpu_picks" || m.Value != 50 || m.Ratio == nil || m.Ratio.Value != 1.25 || m.Ratio.BasisValue != 40 {
		t.Errorf("row %+v (ratio %+v)", m, m.Ratio)
	}
	addVersus(res, moeRouting{"dev_stream_zipf_", "zipf", 0}, rt, "cpu_picks", "picks over PCIe too", "the CPU alone")
	if len(res.Metrics) != 3 {
		t.Errorf("a row against a way not timed: %+v", res.Metrics[3:])
	}
}
