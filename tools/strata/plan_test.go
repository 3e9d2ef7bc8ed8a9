package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/synth"
)

// runCLI runs the strata command tree in-process and returns stdout and
// stderr.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := rootCommand()
	var out, errb bytes.Buffer
	root.Writer, root.ErrWriter = &out, &errb
	err := root.Run(context.Background(), append([]string{"strata"}, args...))
	return out.String(), errb.String(), err
}

// TestPrefabAndPlanCLI drives `strata model prefab` and `strata plan` on a
// tiny model: the pool is written and opens, and the plan prints a table
// (and JSON) for both the GGUF and the pool.
// Sequential: it runs the command tree in-process, whose flags (backendFlag, jsonFlag) are package variables.
func TestPrefabAndPlanCLI(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(src, synth.Options{Arch: "llama", Shape: "tiny", Type: "q4_k_m", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(dir, "tiny.pool")
	_, stderr, err := runCLI(t, "model", "prefab", src, "-o", pool, "--type", "q8_0", "-q")
	if err != nil {
		t.Fatalf("prefab: %v", err)
	}
	if !strings.Contains(stderr, "wrote "+pool) {
		t.Errorf("prefab stderr %q", stderr)
	}
	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	if p.Type() != prefab.TypeQ8_0 || p.Source() != "tiny.gguf" {
		t.Errorf("pool type %q source %q", p.Type(), p.Source())
	}
	p.Close()

	for _, model := range []string{src, pool} {
		out, _, err := runCLI(t, "plan", model, "--ram", "64MiB", "--no-measure")
		if err != nil {
			t.Fatalf("plan %s: %v", model, err)
		}
		// No link measured: no speed is promised.
		for _, want := range []string{"layer", "tier", "moved/token", "bound", "total", "tier A: 2 layers", "pipeline depth 0", "expected speed unknown"} {
			if !strings.Contains(out, want) {
				t.Errorf("plan %s output lacks %q:\n%s", model, want, out)
			}
		}
	}
	// A device too small for the layers streams them; JSON is parseable.
	g := filepath.Join(dir, "gemma.gguf")
	if err := synth.Write(g, synth.Options{Arch: "gemma2", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "plan", g, "--ctx", "32", "--vram", "2MiB", "--ram", "1GiB", "--storage-bw", "2GB/s", "--h2d-bw", "20GB/s", "--compute-bw", "100GB/s", "--json")
	if err != nil {
		t.Fatalf("plan --json: %v", err)
	}
	var doc struct {
		Plan tier.Plan `json:"plan"`
		Info planInfo  `json:"inputs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("plan --json output: %v\n%s", err, out)
	}
	if len(doc.Plan.Layers) != 4 || doc.Plan.Tiers[tier.TierB].Layers != 4 || doc.Plan.Depth != 2 || doc.Plan.Links.StorageToHost != 2e9 {
		t.Errorf("JSON plan %+v", doc.Plan)
	}
	// The CPU's share of tier B: one plan (batch 1) from a measured rate,
	// its layers among tier B's, its bytes the streamed ones split.
	if len(doc.Info.Hybrid) != 1 || len(doc.Info.CPURates) != 1 || !(doc.Info.CPURates[0] > 0) {
		t.Fatalf("hybrid plans %+v, rates %v", doc.Info.Hybrid, doc.Info.CPURates)
	}
	hp := doc.Info.Hybrid[0]
	if hp.Batch != 1 || hp.Moved+hp.CPUBytes != doc.Plan.Moved.HostToDevice || hp.Pass > hp.Streamed {
		t.Errorf("hybrid plan %+v against %d bytes streamed", hp, doc.Plan.Moved.HostToDevice)
	}
	out, _, err = runCLI(t, "plan", g, "--ctx", "32", "--vram", "2MiB", "--ram", "1GiB", "--h2d-bw", "20GB/s", "--no-measure", "--batch", "2")
	if err != nil || !strings.Contains(out, "hybrid, batch 1:") || !strings.Contains(out, "hybrid, batch 2:") {
		t.Errorf("plan with hybrid lines: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "plan", g, "--ctx", "32", "--vram", "2MiB", "--ram", "1GiB", "--no-measure", "--no-hybrid")
	if err != nil || strings.Contains(out, "hybrid") {
		t.Errorf("plan --no-hybrid: %v\n%s", err, out)
	}
	// The default (measured) path works too.
	if _, _, err := runCLI(t, "plan", pool); err != nil {
		t.Errorf("plan with measured links: %v", err)
	}
}

// Sequential: it runs the command tree in-process, whose flags (backendFlag, jsonFlag) are package variables.
func TestPlanCLIUsage(t *testing.T) {
	cases := [][]string{
		{"plan"},
		{"plan", "x.gguf", "--vram", "lots"},
		{"plan", "x.gguf", "--storage-bw", "0GB/s"},
		{"plan", "x.gguf", "--ctx", "0"},
		{"model", "prefab", "x.gguf", "-o", "y.pool", "--type", "q3"},
		{"model", "prefab", "-o", "y.pool"},
	}
	for _, args := range cases {
		_, _, err := runCLI(t, args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("strata %v: %v, want a usage error", args, err)
		}
	}
	if _, _, err := runCLI(t, "plan", filepath.Join(t.TempDir(), "missing.gguf"), "--no-measure"); err == nil {
		t.Errorf("plan of a missing file succeeded")
	}
}

// TestPlanExpertsCLI: `strata plan` of a mixture-of-experts pool places its
// experts in what the layers leave of the host budget, on the CPU and
// beside a GPU's plan alike, and on a GPU as many as fit in the device
// memory the plan leaves (none when there is no room).
// Sequential: it runs the command tree in-process.
func TestPlanExpertsCLI(t *testing.T) {
	src, pool := moeGGUFAndPool(t)
	cases := []struct {
		name string
		args []string
		want []string
		not  string // a line the output must not have
	}{
		{"all resident", []string{"plan", pool, "--ram", "1GiB", "--no-measure"}, []string{"experts: all 16 resident"}, ""},
		{"some on storage", []string{"plan", pool, "--ram", "4MiB", "--no-measure", "--ctx", "64"}, []string{"of 16 resident", "read when a token is routed to them", "8 buffers"}, ""},
		{"gguf", []string{"plan", src, "--ram", "4MiB", "--no-measure", "--ctx", "64"}, []string{"convert it with `strata model prefab`"}, ""},
		{"device", []string{"plan", pool, "--vram", "1GiB", "--ram", "1GiB", "--no-measure"}, []string{"routes on the device", "experts in device memory: 16 of 16", "experts: all 16 resident"}, ""},
		{"device, some experts", []string{"plan", pool, "--vram", "10MiB", "--ram", "1GiB", "--no-measure"}, []string{"experts in device memory: ", " of 16 (", "experts: all 16 resident"}, "experts in device memory: 16 of 16"},
		{"device, no room", []string{"plan", pool, "--vram", "8MiB", "--ram", "1GiB", "--no-measure"}, []string{"routes on the device", "experts: all 16 resident"}, "experts in device memory"},
		{"routing", []string{"plan", pool, "--ram", "4MiB", "--no-measure", "--ctx", "64", "--routing"},
			[]string{"of 16 resident", "resident experts serve an expected ", "of the picks (by the routing of the calibration text's "}, "by size and order"},
		{"routing, device", []string{"plan", pool, "--vram", "10MiB", "--ram", "1GiB", "--no-measure", "--routing"},
			[]string{"experts in device memory: ", "(by the routing of the calibration text's "}, "by size and order"},
	}
	for _, tc := range cases {
		out, _, err := runCLI(t, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
		if tc.not != "" && strings.Contains(out, tc.not) {
			t.Errorf("%s: output has %q:\n%s", tc.name, tc.not, out)
		}
	}
}

// moeGGUFAndPool writes the tiny Mixtral (q8_0, seed 1) and the pool
// `strata model prefab` makes of it.
func moeGGUFAndPool(t *testing.T) (gguf, pool string) {
	t.Helper()
	dir := t.TempDir()
	gguf = filepath.Join(dir, "moe.gguf")
	if err := synth.Write(gguf, synth.Options{Arch: "mixtral", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	pool = filepath.Join(dir, "moe.pool")
	if _, _, err := runCLI(t, "model", "prefab", gguf, "-o", pool, "-q"); err != nil {
		t.Fatal(err)
	}
	return gguf, pool
}

// TestPlanRoutingCLI: `strata plan --routing` places the experts by the
// calibration text's routing: the JSON says how many tokens it routed and
// the resident experts' expected share of the picks, which is more than
// their share of the experts (the most used experts, per byte, are the
// resident ones); for a dense model it is an error.
func TestPlanRoutingCLI(t *testing.T) {
	_, pool := moeGGUFAndPool(t)
	dir := t.TempDir()
	type planJSON struct {
		Info struct {
			RoutedTokens int              `json:"routed_tokens"`
			Experts      *tier.ExpertPlan `json:"experts"`
		} `json:"inputs"`
	}
	read := func(args ...string) planJSON {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"plan", pool, "--ram", "4MiB", "--no-measure", "--ctx", "64", "--json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var p planJSON
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if p.Info.Experts == nil {
			t.Fatalf("no expert plan:\n%s", out)
		}
		return p
	}
	blind, routed := read(), read("--routing")
	if blind.Info.RoutedTokens != 0 || routed.Info.RoutedTokens < 64 {
		t.Fatalf("routed tokens %d without --routing, %d with", blind.Info.RoutedTokens, routed.Info.RoutedTokens)
	}
	xp := routed.Info.Experts
	if xp.AllResident() || xp.ResidentCount() == 0 || !(xp.Hit > 0 && xp.Hit <= 1) {
		t.Fatalf("routed plan: %d resident, hit %v; want some of each and a share of the picks", xp.ResidentCount(), xp.Hit)
	}
	// The share of experts resident is what a placement that knows
	// nothing of the routing expects (and what Hit is without counts);
	// the counts' own placement, their most used experts, does better on
	// them unless every expert was picked alike, which 256 tokens' picks
	// of 2 in 8 are not.
	if share := float64(xp.ResidentCount()) / 16; xp.Hit <= share {
		t.Errorf("routed plan: hit %.3f, no more than its share of the experts %.3f", xp.Hit, share)
	}
	dense := filepath.Join(dir, "dense.gguf")
	if err := synth.Write(dense, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "plan", dense, "--no-measure", "--routing"); err == nil || !strings.Contains(err.Error(), "not a mixture-of-experts model") {
		t.Fatalf("dense model with --routing: %v, want a clear refusal", err)
	}
}

// TestBenchMoECLI: `strata bench moe` decodes a tiny synthetic Qwen3-MoE
// and prints its table; bad flags are usage errors.
// Sequential: it runs the command tree in-process.
func TestBenchMoECLI(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "moe.prof")
	out, _, err := runCLI(t, "bench", "moe", "--dir", dir, "--type", "q8_0", "--tokens", "2", "--batch", "1", "--zipf", "0.5", "--cpuprofile", prof, "-q")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "all resident       1   16/16") || !strings.Contains(out, "exponent 0.5") {
		t.Fatalf("output:\n%s", out)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("--cpuprofile wrote %v (%v), want a profile", st, err)
	}
	if _, _, err := runCLI(t, "bench", "moe", "--dir", dir, "--type", "q8_0", "--tokens", "2", "--batch", "1", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "p"), "-q"); err == nil || !strings.Contains(err.Error(), "cpu profile") {
		t.Errorf("a profile path that cannot be created: %v, want an error naming the profile", err)
	}
	for _, args := range [][]string{{"--batch", "0"}, {"--budgets", "lots"}, {"--zipf", "-1"}} {
		_, _, err := runCLI(t, append([]string{"bench", "moe", "--dir", dir, "-q"}, args...)...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestPlanHFDirectoryCLI plans a Hugging Face directory: the same plan as
// its GGUF (it plans as the pool it would prefab to), with the hybrid
// probe run over the directory's own weights.
// Sequential: it runs the command tree in-process.
func TestPlanHFDirectoryCLI(t *testing.T) {
	dir := t.TempDir()
	src, hfDir := filepath.Join(dir, "tiny.gguf"), filepath.Join(dir, "hf")
	if err := synth.Write(src, synth.Options{Arch: "gemma3", Shape: "tiny", Type: "f32", Seed: 1, HFDir: hfDir}); err != nil {
		t.Fatal(err)
	}
	plans := map[string]tier.Plan{}
	for _, model := range []string{src, hfDir} {
		out, _, err := runCLI(t, "plan", model, "--ctx", "32", "--vram", "8MiB", "--ram", "1GiB", "--storage-bw", "2GB/s", "--h2d-bw", "20GB/s", "--compute-bw", "100GB/s", "--json")
		if err != nil {
			t.Fatalf("plan %s: %v", model, err)
		}
		var doc struct {
			Plan tier.Plan `json:"plan"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("plan %s --json: %v\n%s", model, err, out)
		}
		plans[model] = doc.Plan
	}
	g, h := plans[src], plans[hfDir]
	if len(h.Layers) != 6 || h.Tiers[tier.TierB].Layers == 0 || !reflect.DeepEqual(g.Layers, h.Layers) || g.Device != h.Device {
		t.Errorf("the directory plans as\n%+v\nits GGUF as\n%+v", h, g)
	}
}
