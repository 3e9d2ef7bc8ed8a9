package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/bench/enginebench"
)

// TestBenchEngineFlags checks how `strata bench engine`'s flags become the
// run's options, and that bad ones are usage errors.
// Sequential: it runs the command tree in-process, whose flags (backendFlag, jsonFlag) are package variables.
func TestBenchEngineFlags(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers.json")
	if err := os.WriteFile(peers, []byte(`{"source": "test", "figures": {"half_decode": {"system": "llama.cpp", "setup": "8b", "value": 26.3, "unit": "tok/s"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	badPeers := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badPeers, []byte(`{"source": "test", "figures": {"half_decode": {"system": "llama.cpp", "value": 26.3}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFlags(t, benchEngineCommand, benchEngineOptions, []flagCase[enginebench.Options]{
		{name: "defaults", check: func(o enginebench.Options) bool {
			return slices.Equal(o.Scenarios, enginebench.AllScenarios) && o.Budget70B == 24<<30 && o.BudgetBF16 == 6<<30 &&
				!o.NoInt8 && o.GPU == 0 && o.SynthDir == defaultSynthDir() && o.Model8B == "" && o.Pool8BInt8 == "" &&
				o.Variants == nil && !o.FloatGEMV && o.Peers == nil && o.MoEZipf == enginebench.DefaultMoEZipf && !o.Timeline &&
				o.MoEServed == enginebench.DefaultMoEServed
		}},
		{name: "timeline", args: []string{"--only", "streamed", "--timeline"}, check: func(o enginebench.Options) bool {
			return slices.Equal(o.Scenarios, []enginebench.Scenario{enginebench.Streamed}) && o.Timeline
		}},
		{name: "moe", args: []string{"--only", "moe", "--moe-zipf", "0.8"}, check: func(o enginebench.Options) bool {
			return slices.Equal(o.Scenarios, []enginebench.Scenario{enginebench.MoE}) && o.MoEZipf == 0.8
		}},
		{name: "moe own routing only", args: []string{"--moe-zipf", "0"}, check: func(o enginebench.Options) bool { return o.MoEZipf == 0 }},
		{name: "negative zipf", args: []string{"--moe-zipf", "-1"}, usage: "--moe-zipf"},
		{name: "moe served decode", args: []string{"--moe-served", "1024"}, check: func(o enginebench.Options) bool { return o.MoEServed == 1024 }},
		{name: "no served decode", args: []string{"--moe-served", "0"}, check: func(o enginebench.Options) bool { return o.MoEServed == 0 }},
		{name: "negative served decode", args: []string{"--moe-served", "-1"}, usage: "--moe-served"},
		{name: "served batch by default", args: nil, check: func(o enginebench.Options) bool {
			return o.MoEServedBatch == enginebench.DefaultMoEServedBatch && !o.MoEServedOnly
		}},
		{name: "served batch of 4", args: []string{"--moe-served-batch", "4"}, check: func(o enginebench.Options) bool { return o.MoEServedBatch == 4 }},
		{name: "negative served batch", args: []string{"--moe-served-batch", "-2"}, usage: "--moe-served-batch"},
		{name: "served rows only", args: []string{"--moe-fixed=false", "--moe-served", "0"}, check: func(o enginebench.Options) bool {
			return o.MoEServedOnly && o.MoEServed == 0 && o.MoEServedBatch == enginebench.DefaultMoEServedBatch
		}},
		{name: "one moe case", args: []string{"--moe-cases", "mixtral-8x7b-12GiB"}, check: func(o enginebench.Options) bool {
			return len(o.MoECases) == 1 && o.MoECases[0].Arch == "mixtral"
		}},
		{name: "moe cases in their order", args: []string{"--moe-cases", "mixtral-8x7b-12GiB, qwen3moe-30b-a3b-4GiB"}, check: func(o enginebench.Options) bool {
			return len(o.MoECases) == 2 && o.MoECases[0].Budget == 4<<30 && o.MoECases[1].Arch == "mixtral"
		}},
		{name: "unknown moe case", args: []string{"--moe-cases", "qwen3moe-30b-a3b-2GiB"}, usage: "want one of qwen3moe-30b-a3b-8GiB"},
		{name: "no moe case", args: []string{"--moe-cases", ","}, usage: "--moe-cases"},
		{name: "nothing to run", args: []string{"--moe-fixed=false", "--moe-served", "0", "--moe-served-batch", "0"}, usage: "--moe-fixed=false"},
		{name: "peers", args: []string{"--peers", peers}, check: func(o enginebench.Options) bool {
			f, ok := o.Peers.Figure(enginebench.PeerHalfDecode)
			return ok && f.Value == 26.3 && o.Peers.Source == "test"
		}},
		{name: "bad peers file", args: []string{"--peers", badPeers}, usage: `--peers: peers ` + badPeers + `: figure "half_decode": no unit`},
		{name: "missing peers file", args: []string{"--peers", filepath.Join(dir, "none.json")}, usage: "--peers: peers: open"},
		{name: "only and models", args: []string{"--only", "bf16,70b", "--model-8b", "a.gguf", "--model-70b", "b.gguf",
			"--model-8b-bf16", "c.gguf", "--pool-8b-int8", "d.pool", "--synth-dir", "/dev/shm", "--gpu", "1", "--int8=false"},
			check: func(o enginebench.Options) bool {
				return slices.Equal(o.Scenarios, []enginebench.Scenario{enginebench.Big, enginebench.BF16}) &&
					o.Model8B == "a.gguf" && o.Model70B == "b.gguf" && o.Model8BBF16 == "c.gguf" && o.Pool8BInt8 == "d.pool" &&
					o.SynthDir == "/dev/shm" && o.GPU == 1 && o.NoInt8
			}},
		{name: "budgets", args: []string{"--vram-70b", "16G", "--vram-bf16", "8GiB"}, check: func(o enginebench.Options) bool {
			return o.Budget70B == 16<<30 && o.BudgetBF16 == 8<<30
		}},
		{name: "variants", args: []string{"--variant", "no-overlap, jit", "--float-gemv"}, check: func(o enginebench.Options) bool {
			return slices.Equal(o.Variants, []string{"no-overlap", "jit"}) && o.FloatGEMV
		}},
		{name: "unknown variant", args: []string{"--variant", "jit,pairs-off"}, usage: "no tuning variant \"pairs-off\""},
		{name: "unknown scenario", args: []string{"--only", "resident,quick"}, usage: "unknown scenario"},
		{name: "bad budget", args: []string{"--vram-70b", "lots"}, usage: "--vram-70b"},
		{name: "zero budget", args: []string{"--vram-bf16", "0"}, usage: "--vram-bf16"},
		{name: "negative gpu", args: []string{"--gpu", "-1"}, usage: "--gpu"},
		{name: "empty synth dir", args: []string{"--synth-dir", ""}, usage: "--synth-dir"},
		{name: "argument", args: []string{"model.gguf"}, usage: "takes no arguments"},
	})
}

// TestBenchEngineNoGPU runs the binary where there is no GPU: it must say
// "CUDA unavailable: …" and exit 6 without writing a model.
func TestBenchEngineNoGPU(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if !noGPU() {
		t.Skip("a GPU is present: the command would measure it")
	}
	bin := buildStrata(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"bench", "engine", "--synth-dir", dir},
		{"bench", "engine", "--synth-dir", dir, "--only", "resident", "--json"},
	} {
		out, stderr, code := runStrata(t, bin, "", args...)
		if code != exitBusy || !strings.Contains(stderr, "CUDA unavailable: ") || out != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "*")); len(ents) != 0 {
		t.Fatalf("wrote %v without a GPU", ents)
	}
	// --cpuprofile profiles the run, a failed one too.
	prof := filepath.Join(t.TempDir(), "engine.prof")
	if _, stderr, code := runStrata(t, bin, "", "bench", "engine", "--synth-dir", dir, "--cpuprofile", prof); code != exitBusy {
		t.Fatalf("--cpuprofile: exit %d, stderr %q", code, stderr)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("--cpuprofile wrote %v (%v), want a profile", st, err)
	}
	if _, stderr, code := runStrata(t, bin, "", "bench", "engine", "--synth-dir", dir, "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "p")); code == 0 || code == exitBusy || !strings.Contains(stderr, "cpu profile") {
		t.Errorf("--cpuprofile in a missing directory: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code := runStrata(t, bin, "", "bench", "engine", "--only", "nope")
	if code != exitUsage || !strings.Contains(stderr, "unknown scenario") {
		t.Fatalf("bad --only: exit %d, %s", code, stderr)
	}
}

// TestBenchEngineJSONFile: --json-file writes the same report the run
// printed, as JSON.
func TestBenchEngineJSONFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.json")
	r := &enginebench.Report{Device: "NVIDIA H200", Ceilings: enginebench.Ceilings{H2D: 55.4e9},
		Scenarios: []enginebench.ScenarioResult{{Scenario: enginebench.Resident, Metrics: []enginebench.Metric{{Key: "decode_tps_graph", Value: 186.9}}}}}
	if err := writeJSONFile(path, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back enginebench.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Device != r.Device || back.Ceilings != r.Ceilings || back.Scenarios[0].Metrics[0].Value != 186.9 {
		t.Fatalf("read back %+v", back)
	}
	if err := writeJSONFile(filepath.Join(t.TempDir(), "no", "such", "dir.json"), r); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}
