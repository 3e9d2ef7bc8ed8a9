package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/bench/cpubench"
	"github.com/strata-llm/strata/internal/hostcpu"
	"github.com/strata-llm/strata/internal/synth"
)

// TestBenchCPUFlags checks how `strata bench cpu`'s flags become the
// run's options, and that bad ones are usage errors.
func TestBenchCPUFlags(t *testing.T) {
	t.Parallel()
	checkFlags(t, benchCPUCommand, benchCPUOptions, []flagCase[cpubench.Options]{
		{name: "defaults", check: func(o cpubench.Options) bool {
			return o.Threads == nil && o.ReadBytes == 0 && o.WeightBytes == 0 && slices.Equal(o.Types, cpubench.Types) &&
				o.Impl == "" && o.Time == cpubench.DefaultTime
		}},
		{name: "everything", args: []string{"--threads", "1..8", "--size", "8GiB", "--weights", "2g", "--only", "q4_k, INT8_ROW,bf16",
			"--impl", "avx2", "--time", "1s"}, check: func(o cpubench.Options) bool {
			return slices.Equal(o.Threads, []int{1, 2, 4, 8}) && o.ReadBytes == 8<<30 && o.WeightBytes == 2<<30 &&
				slices.Equal(o.Types, []quant.Type{quant.Q4_K, quant.INT8Row, quant.BF16}) && o.Impl == "avx2" && o.Time == time.Second
		}},
		{name: "thread list", args: []string{"--threads", "3,16"}, check: func(o cpubench.Options) bool { return slices.Equal(o.Threads, []int{3, 16}) }},
		{name: "bad threads", args: []string{"--threads", "0"}, usage: "--threads"},
		{name: "bad size", args: []string{"--size", "lots"}, usage: "--size"},
		{name: "zero weights", args: []string{"--weights", "0"}, usage: "--weights"},
		{name: "unknown type", args: []string{"--only", "q4_k,q3_k"}, usage: `weight type "q3_k"`},
		{name: "zero time", args: []string{"--time", "0s"}, usage: "--time"},
		{name: "argument", args: []string{"model.gguf"}, usage: "takes no arguments"},
	})
}

// TestBenchCPUCLI runs `strata bench cpu` with tiny sizes: the JSON has a
// read point per thread count, every weight type is measured or skipped
// with a reason, and every rate and ratio is finite and positive.
func TestBenchCPUCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cpus, _, err := hostcpu.CPUs()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildStrata(t)
	threads := cpubench.DefaultThreads(len(cpus))
	positive := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

	out, stderr, code := runStrata(t, bin, "", "bench", "cpu", "--size", "16m", "--weights", "4m", "--time", "1ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "memory read: 1 threads") {
		t.Errorf("no progress lines on stderr: %q", stderr)
	}
	var r cpubench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(r.CPU.CPUs) != len(cpus) || r.CPU.Cores < 1 || r.CPU.Impl == "" || r.Read.Bytes != 16<<20 || r.Read.Loop == "" ||
		!strings.Contains(r.Command, "bench cpu") || !positive(r.Read.LoopCache) || !positive(r.Read.NaiveCache) || !positive(r.Read.Naive) {
		t.Fatalf("report %+v", r)
	}
	if len(r.Read.Points) != len(threads) {
		t.Fatalf("%d read points, want one for each of %v", len(r.Read.Points), threads)
	}
	for i, p := range r.Read.Points {
		if p.Threads != threads[i] || !positive(p.Best) || !positive(p.Median) || p.Median > p.Best || p.Passes < 3 || p.Ratio != 0 {
			t.Errorf("read point %d: %+v", i, p)
		}
	}
	var seen []string
	for _, g := range r.GEMV {
		seen = append(seen, g.Type)
		if g.Impl != r.CPU.Impl || g.N <= 0 || g.Rows <= 0 || g.Matrices < 2 || g.WeightBytes < 4<<20 || len(g.Points) != len(threads) {
			t.Errorf("%s: %+v", g.Type, g)
		}
		for i, p := range g.Points {
			if p.Threads != threads[i] || !positive(p.Best) || !positive(p.Median) || !positive(p.Ratio) || p.Passes < 3 {
				t.Errorf("%s point %d: %+v", g.Type, i, p)
			}
		}
	}
	for _, s := range r.Skipped {
		seen = append(seen, s.Type)
		if s.Reason == "" {
			t.Errorf("%s skipped without a reason", s.Type)
		}
	}
	if len(r.GEMV) == 0 || len(seen) != len(cpubench.Types) {
		t.Errorf("measured or skipped %v, want every one of %v", seen, cpubench.Types)
	}

	// A model's CPU-only decode: its rate, bytes a token and their ratio
	// to the read rate.
	dir := t.TempDir()
	tiny := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(tiny, synth.Options{Arch: "llama", Shape: "tiny", Type: "q4_k_m", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = runStrata(t, bin, "", "bench", "cpu", "--size", "8m", "--weights", "2m", "--time", "1ms", "--threads", "1",
		"--only", "q4_k", "--model", tiny, "--tokens", "8", "--json", "-q")
	if code != 0 {
		t.Fatalf("bench cpu --model: exit %d: %s", code, stderr)
	}
	r = cpubench.Report{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if d := r.Decode; d == nil || d.Tokens != 8 || !positive(d.TokensPerSecond) || !positive(d.BytesPerSecond) || !positive(d.Ratio) ||
		d.WeightBytes <= 0 || !strings.HasPrefix(d.Kernels, "gemv ") {
		t.Errorf("decode %+v", r.Decode)
	}
	if _, stderr, code := runStrata(t, bin, "", "bench", "cpu", "--time", "1ms", "--model", tiny, "--tokens", "0"); code != exitUsage {
		t.Errorf("--tokens 0: exit %d: %s", code, stderr)
	}

	// The reference takes every type; the table names each.
	out, stderr, code = runStrata(t, bin, "", "bench", "cpu", "--size", "8m", "--weights", "2m", "--time", "1ms", "--threads", "1",
		"--impl", "go", "--only", "q6_k,int8_row,bf16", "-q")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"memory read: 8.00 MiB", "the loop itself", "Q6_K", "INT8_ROW", "BF16", "  go  ", "1 thr", "note: the read buffer"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--threads", "100000"}, "this process may use"},
		{[]string{"--impl", "sse9"}, `kernel family "sse9"`},
		{[]string{"--size", "1024p"}, "--size"},
		{[]string{"--only", "f32"}, "weight type"},
	} {
		_, stderr, code := runStrata(t, bin, "", append([]string{"bench", "cpu", "--time", "1ms"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q in %s", tc.args, code, exitUsage, tc.want, stderr)
		}
	}
}
