package enginebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/internal/bench/gputime"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

func TestParseScenarios(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want []Scenario
		err  string
	}{
		{in: "all", want: AllScenarios},
		{in: "bf16,resident", want: []Scenario{Resident, BF16}},
		{in: " 70B , streamed,70b", want: []Scenario{Streamed, Big}},
		{in: "resident,all", want: AllScenarios},
		{in: "families,resident", want: []Scenario{Resident, Families}},
		{in: "all,families", want: append(append([]Scenario(nil), AllScenarios...), Families)},
		{in: "moe", want: []Scenario{MoE}},
		{in: "MoE,all", want: append(append([]Scenario(nil), AllScenarios...), MoE)},
		{in: "moe,families,bf16", want: []Scenario{BF16, Families, MoE}},
		{in: "", err: "no scenario"},
		{in: ",", err: "no scenario"},
		{in: "resident,fast", err: `unknown scenario "fast"`},
	} {
		t.Run(c.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseScenarios(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, %v; want error %q", got, err, c.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestGoals(t *testing.T) {
	t.Parallel()
	nan := &Ratio{Value: math.NaN()}
	for _, c := range []struct {
		name string
		g    *Goal
		want bool
	}{
		{"at least, above", atLeast(ratioTo(2, 1, ""), 1.2), true},
		{"at least, equal", atLeast(ratioTo(1.2, 1, ""), 1.2), true},
		{"at least, below", atLeast(ratioToPeer(186.9, testPeers, PeerResidentDecode), 1.2), false},
		{"at most, below", atMost(ratioTo(1.021, 1, ""), 1.05), true},
		{"at most, above", atMost(ratioTo(1.2, 1, ""), 1.05), false},
		{"NaN never meets", atLeast(nan, 0), false},
		{"NaN never meets at most", atMost(nan, 10), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.g.Met != c.want {
				t.Fatalf("%+v: met %v, want %v", c.g, c.g.Met, c.want)
			}
		})
	}
	r := ratioToPeer(26.3*2, testPeers, PeerHalfDecode)
	if r.Value != 2 || r.Peer == nil || r.Peer.Value != 26.3 || r.Basis != "llama.cpp 26.30 tok/s" {
		t.Fatalf("peer ratio %+v", r)
	}
	// Without the figure there is no ratio, and so no goal to judge.
	for _, peers := range []*Peers{nil, {Source: "s", Figures: map[string]Peer{}}} {
		if r := ratioToPeer(10, peers, PeerHalfDecode); r != nil {
			t.Errorf("ratio %+v to a figure not given", r)
		}
	}
	if g := atLeast(nil, 1); g != nil {
		t.Errorf("goal %+v without a ratio", g)
	}
	if g := atMost(nil, 1); g != nil {
		t.Errorf("goal %+v without a ratio", g)
	}
}

// testPeers are reference figures for the report's tests.
var testPeers = &Peers{Source: "test figures", Figures: map[string]Peer{
	PeerResidentDecode: {"llama.cpp", "8b, all 32 layers on the GPU, tg128", 261.4, "tok/s"},
	PeerHalfDecode:     {"llama.cpp", "8b, 16 of 32 layers on the GPU, tg128", 26.3, "tok/s"},
}}

// sampleReport is a report as a run given testPeers would fill it
// (made-up figures of a plausible size).
func sampleReport() *Report {
	dec := ratioToPeer(186.9, testPeers, PeerResidentDecode)
	h2d := ratioTo(54.3, 55.4, "pinned H2D peak 55.4 GB/s")
	tpt := ratioTo(38.6, 37.76, "PCIe limit 37.76 ms (1.95 GiB ÷ peak)")
	return &Report{
		Device: "NVIDIA H200", ComputeCapability: "9.0", DeviceMemory: 150 << 30,
		Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Seconds: 161,
		Ceilings:   Ceilings{D2D: 4241e9, D2DBytes: 1 << 30, H2D: 55.4e9, H2DBytes: 256 << 20},
		PeerSource: testPeers.Source,
		Scenarios: []ScenarioResult{
			{Scenario: Resident, Title: "8b Q4_K_M, batch 1", Model: "/dev/shm/llama-8b-q4_k_m-seed1.gguf", Seconds: 9,
				Placement: &Placement{Layers: 32, Resident: 32, WeightBytes: 4918000000, DeviceBytes: 6 << 30, How: "every layer resident"},
				Metrics: []Metric{
					{Key: "decode_tps_graph", Label: "decode, CUDA graph", Value: 186.9, Unit: "tok/s", Ratio: dec, Goal: atLeast(dec, 1.2)},
					{Key: "launch_host_graph_us", Label: "launch: host graph launch per step", Value: 11.1, Unit: "µs"},
				}},
			{Scenario: Streamed, Title: "8b half streamed", Model: "m.gguf", Seconds: 5,
				Placement: &Placement{Layers: 32, Resident: 16, Streamed: 16, Slots: 2, WeightBytes: 2 << 30, StreamedBytes: 2 << 30, How: "second half"},
				Metrics: []Metric{
					{Key: "h2d_gbps", Label: "H2D during decode", Value: 54.3, Unit: "GB/s", Ratio: h2d, Goal: atLeast(h2d, 0.95)},
					{Key: "time_per_pass_ms", Label: "time per decode pass", Value: 38.6, Unit: "ms", Ratio: tpt, Goal: atMost(tpt, 1.05)},
				}},
			{Scenario: BF16, Variant: "int8", Title: "INT8-row variant", Model: "p.pool", Error: "loading: out of memory",
				Notes: []string{"INT8-row is lossy"}},
		},
	}
}

func TestWriteText(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	r := sampleReport()
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"strata bench engine on NVIDIA H200 (GPU 0, sm 9.0, 150.00 GiB), started 2026-11-30T12:00:00Z, took 2m41s",
		"peer figures (marked *) are references read from a file, not measured by this run: test figures",
		"device-to-device copy     4241.0 GB/s (read + write, 1 GiB copies)",
		"pinned host-to-device       55.4 GB/s (256 MiB copies)",
		"[resident] 8b Q4_K_M, batch 1 (9 s)",
		"placement: 32 of 32 layers resident (4.58 GiB of weights); every layer resident",
		"device memory taken: 6.00 GiB\n",
		"0.715x llama.cpp 261.4 tok/s*",
		">= 1.2: MISS",
		"* llama.cpp 261.4 tok/s: 8b, all 32 layers on the GPU, tg128",
		"11.10 µs",
		"[streamed] 8b half streamed",
		"16 of 32 layers resident (2.00 GiB of weights), 16 streamed from pinned host memory (2.00 GiB per pass) through 2 device slots; second half",
		"0.980x pinned H2D peak 55.4 GB/s",
		">= 0.95: met",
		"1.022x PCIe limit 37.76 ms (1.95 GiB ÷ peak)",
		"<= 1.05: met",
		"[bf16/int8] INT8-row variant",
		"note: INT8-row is lossy",
		"FAILED: loading: out of memory",
		"goals met: 2 of 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	// The streamed row's reference mark belongs only to peer figures.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "pinned H2D peak") && strings.Contains(line, "*") {
			t.Errorf("measured basis marked as a reference: %q", line)
		}
	}
	if !r.Failed() {
		t.Error("a report with a FAILED scenario does not say it failed")
	}
	if met, total := r.Goals(); met != 2 || total != 3 {
		t.Errorf("goals %d of %d", met, total)
	}
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Ceilings != r.Ceilings || len(back.Scenarios) != 3 || back.Scenarios[2].Error == "" || back.PeerSource != testPeers.Source {
		t.Fatalf("round trip: %+v", back)
	}
	m := back.Scenarios[0].Metrics[0]
	if m.Key != "decode_tps_graph" || m.Ratio == nil || m.Ratio.Peer == nil || m.Ratio.Peer.System != "llama.cpp" || m.Goal == nil || m.Goal.Met {
		t.Fatalf("metric %+v", m)
	}
	// Scripts read these names.
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"device", "ceilings", "scenarios", "peer_source", "seconds"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	sc := raw["scenarios"].([]any)[1].(map[string]any)
	met := sc["metrics"].([]any)[0].(map[string]any)
	if met["ratio"].(map[string]any)["peer"] != nil {
		t.Errorf("a measured basis carries a peer: %v", met)
	}
	if sc["placement"].(map[string]any)["streamed_bytes_per_pass"].(float64) != 2<<30 {
		t.Errorf("placement %v", sc["placement"])
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    Options
		err  string
	}{
		{"negative gpu", Options{GPU: -1}, "GPU ordinal"},
		{"negative budget", Options{Budget70B: -5}, "negative device budget"},
		{"unknown scenario", Options{Scenarios: []Scenario{"fast"}}, "unknown scenario"},
		{"negative zipf", Options{MoEZipf: -1}, "moe Zipf exponent -1"},
		{"NaN zipf", Options{MoEZipf: math.NaN()}, "moe Zipf exponent NaN"},
		{"moe case without budget", Options{MoECases: []MoECase{{"mixtral", "tiny", 0}}}, "moe case"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(context.Background(), c.o)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Run: %v, want %q", err, c.err)
			}
		})
	}
	var o Options
	if err := o.fill(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Scenarios, AllScenarios) || o.Budget70B != 24<<30 || o.BudgetBF16 != 6<<30 || o.SynthDir == "" {
		t.Fatalf("defaults %+v", o)
	}
}

// TestRunWithoutGPU: on a host without a usable GPU, Run says CUDA is
// unavailable before writing any model.
func TestRunWithoutGPU(t *testing.T) {
	t.Parallel()
	if cudadrv.Load() == nil {
		if n, err := cudadrv.DeviceCount(); err == nil && n > 0 {
			t.Skip("a GPU is present: Run would measure it")
		}
	}
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{SynthDir: dir})
	if !errors.Is(err, cudadrv.ErrUnavailable) || r != nil || !strings.Contains(err.Error(), "CUDA unavailable: ") {
		t.Fatalf("Run = %v, %v; want CUDA unavailable", r, err)
	}
}

func TestPercent(t *testing.T) {
	t.Parallel()
	var got []string
	o := &Options{Progress: func(s string) { got = append(got, s) }}
	rn := &runner{o: o}
	p := rn.percent("x")
	for done := int64(0); done <= 1000; done += 7 {
		p(done, 1000)
	}
	p(1000, 1000)
	if len(got) != 9 || got[0] != "  x: 10%" || got[8] != "  x: 90%" {
		t.Fatalf("%q", got)
	}
}

// TestLeadLimit: the links' bound with the CPU's wait for the resident
// layers: the combined-link limit without a lead, growing by lead/a·limit
// while the lead is shorter than PCIe's whole (run28's 8b half: 11.04 ->
// ~11.88 ms), PCIe's whole from there; the CPU's share ends with PCIe's.
func TestLeadLimit(t *testing.T) {
	t.Parallel()
	off, cpu, h2d := 2.09e9, 134.2e9, 55.4e9
	combined := off / (cpu + h2d)
	for _, tc := range []struct {
		name string
		lead time.Duration
		want float64
	}{
		{"no lead", 0, combined},
		{"run28's lead", 1180 * time.Microsecond, combined * (1 + 1.18e-3/(off/cpu))},
		{"as long as PCIe's whole", time.Duration(off / h2d * 1e9), off / h2d},
		{"longer", time.Second, off / h2d},
	} {
		got := leadLimit(off, cpu, h2d, tc.lead)
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %.6f s, want %.6f", tc.name, got, tc.want)
		}
		// The CPU's share, started after the lead, ends when PCIe's does.
		if l := tc.lead.Seconds(); l < off/h2d {
			x := (off/h2d - l) / (off/cpu + off/h2d)
			if cpuEnd, pcieEnd := l+x*off/cpu, (1-x)*off/h2d; math.Abs(cpuEnd-got) > 1e-9 || math.Abs(pcieEnd-got) > 1e-9 {
				t.Errorf("%s: the CPU ends at %.6f, PCIe at %.6f, the limit %.6f", tc.name, cpuEnd, pcieEnd, got)
			}
		}
	}
	if got := leadLimit(off, cpu, h2d, 1180*time.Microsecond); got < 11.8e-3 || got > 11.95e-3 {
		t.Errorf("run28's 8b half: %.3f ms, want ~11.88", got*1e3)
	}
}

// TestGEMVProfileMetrics: the resident profile's GEMV rows, from a made-up
// profile: the step's ratio and its goal, each kind with its read-only
// ceiling where measured, down's x launch as the difference of its two
// chains, the note where the held chain failed, and no ceiling rows where
// none was measured.
func TestGEMVProfileMetrics(t *testing.T) {
	t.Parallel()
	const d2d = 4000e9
	prof := &gputime.StepProfile{
		GEMV: 1450 * time.Microsecond, Device: 2 * time.Millisecond, WeightBytes: 4400e6,
		GEMVReadOnly: 1200 * time.Microsecond,
		GEMVKinds: []gputime.GEMVKindProfile{
			{Name: "o", Bytes: 32 * 9437184, Launches: 32, Time: 128 * time.Microsecond, ReadOnly: 96 * time.Microsecond},
			{Name: "down", Bytes: 32 * 40e6, Launches: 32, Time: 480 * time.Microsecond, ReadOnly: 360 * time.Microsecond},
			{Name: "output", Bytes: 431e6, Launches: 1, Time: 105 * time.Microsecond},
		},
		DownHeld: 416 * time.Microsecond,
	}
	ms, notes := gemvProfileMetrics(prof, d2d)
	by := map[string]Metric{}
	for _, m := range ms {
		by[m.Key] = m
	}
	near := func(key string, want float64) {
		t.Helper()
		m, ok := by[key]
		if !ok || m.Ratio == nil {
			t.Fatalf("%s: missing (have %v)", key, ms)
		}
		if math.Abs(m.Ratio.Value-want) > 1e-9*want {
			t.Errorf("%s: ratio %v, want %v", key, m.Ratio.Value, want)
		}
	}
	near("gemv_gbps", 4400e6/1450e-6/d2d)
	if g := by["gemv_gbps"].Goal; g == nil || g.Met {
		t.Errorf("gemv_gbps goal %+v, want 0.8 missed", g)
	}
	near("gemv_readonly_gbps", 4400e6/1200e-6/d2d)
	near("gemv_gbps_o", 32*9437184/128e-6/d2d)
	near("gemv_readonly_gbps_o", 32*9437184/96e-6/d2d)
	near("gemv_readonly_gbps_down", 32*40e6/360e-6/d2d)
	near("gemv_gbps_down_x_held", 32*40e6/416e-6/d2d)
	if l := by["gemv_gbps_down_x_held"].Label; !strings.Contains(l, "13.0 µs each") || !strings.Contains(l, "costs 2.0 µs a layer") {
		t.Errorf("down x held label %q, want 13.0 µs each and 2.0 µs a layer", l)
	}
	if _, ok := by["gemv_readonly_gbps_output"]; ok {
		t.Error("a ceiling row for a kind without one")
	}
	if len(notes) != 1 {
		t.Errorf("notes %q, want the read-only note alone", notes)
	}
	prof.DownHeld, prof.DownHeldErr = 0, errors.New("no scratch")
	prof.GEMVReadOnly = 0
	for i := range prof.GEMVKinds {
		prof.GEMVKinds[i].ReadOnly = 0
	}
	ms, notes = gemvProfileMetrics(prof, d2d)
	for _, m := range ms {
		if strings.Contains(m.Key, "readonly") || m.Key == "gemv_gbps_down_x_held" {
			t.Errorf("row %s without its measurement", m.Key)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "no scratch") {
		t.Errorf("notes %q, want why down with x held is missing", notes)
	}
}
