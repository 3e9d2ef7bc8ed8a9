package enginebench_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/bench/enginebench"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkEngine is `strata bench engine` as a Go benchmark: the same
// scenarios (timed by internal/bench/gputime), without peer figures,
// each metric and ratio reported with b.ReportMetric as
// "scenario.key" and "scenario.key.ratio", so benchstat can compare runs.
// STRATA_BENCH_ENGINE selects the scenarios ("resident,streamed", "all");
// STRATA_SYNTH_DIR is where the synthetic models are found or written
// (/dev/shm where the host has the memory). Run with -test.benchtime 1x.
func BenchmarkEngine(b *testing.B) {
	only := os.Getenv("STRATA_BENCH_ENGINE")
	if only == "" {
		b.Skip("skipping: STRATA_BENCH_ENGINE is not set (scenarios: resident, streamed, 70b, bf16 or all; models in STRATA_SYNTH_DIR)")
	}
	sc, err := enginebench.ParseScenarios(only)
	if err != nil {
		b.Fatal(err)
	}
	// STRATA_FAST_GEMV=0: the float GEMVs for Q4_K and Q6_K, as `strata
	// bench engine --float-gemv` runs them.
	float := os.Getenv("STRATA_FAST_GEMV") == "0"
	b.Logf("float GEMV: %v", float)
	for range b.N {
		r, err := enginebench.Run(context.Background(), enginebench.Options{
			Scenarios: sc, SynthDir: os.Getenv("STRATA_SYNTH_DIR"), Progress: func(s string) { b.Log(s) }, FloatGEMV: float,
		})
		if errors.Is(err, cudadrv.ErrUnavailable) {
			b.Skipf("skipping GPU benchmark: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		var text strings.Builder
		if err := r.WriteText(&text); err != nil {
			b.Fatal(err)
		}
		b.Log("\n" + text.String())
		for _, s := range r.Scenarios {
			name := string(s.Scenario)
			if s.Variant != "" {
				name += "-" + s.Variant
			}
			for _, m := range s.Metrics {
				b.ReportMetric(m.Value, name+"."+m.Key)
				if m.Ratio != nil {
					b.ReportMetric(m.Ratio.Value, name+"."+m.Key+".ratio")
				}
			}
		}
		if r.Failed() {
			b.Fatal("a scenario failed (see its FAILED line above)")
		}
	}
}

// TestMoEOnGPU runs the moe scenario on the tiny Mixtral and Qwen3-MoE
// shapes (seconds, where the real cases synthesize ~43 GiB): every row of
// both routings at batch 1 and 8, the CPU busy in every timed pass, and
// the skewed routing's expert reads per token at batch 8 no more than
// the model's own, and the dev_* rows with every expert in device memory
// (the CPU idle). Skips without a GPU.
func TestMoEOnGPU(t *testing.T) {
	r, err := enginebench.Run(context.Background(), enginebench.Options{
		Scenarios: []enginebench.Scenario{enginebench.MoE}, SynthDir: t.TempDir(), MoEZipf: 2,
		MoECases: []enginebench.MoECase{{Arch: "mixtral", Shape: "tiny", Budget: 1 << 30}, {Arch: "qwen3moe", Shape: "tiny", Budget: 1 << 30}},
		Progress: func(s string) { t.Log(s) },
	})
	if errors.Is(err, cudadrv.ErrUnavailable) {
		t.Skipf("skipping GPU test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + text.String())
	if len(r.Scenarios) != 2 || r.Failed() {
		t.Fatalf("%d results, failed %v", len(r.Scenarios), r.Failed())
	}
	for _, s := range r.Scenarios {
		got := map[string]float64{}
		for _, m := range s.Metrics {
			got[m.Key] = m.Value
		}
		for _, p := range []string{"", "zipf_"} {
			for _, sfx := range []string{"", "_b8"} {
				for _, k := range []string{"decode" + sfx + "_tps", "routed" + sfx + "_mib_per_token", "cpu_busy" + sfx + "_ms", "time_per_pass" + sfx + "_ms"} {
					if v, ok := got[p+k]; !ok || !(v > 0) {
						t.Errorf("%s: %s%s = %v (present %v)", s.Variant, p, k, v, ok)
					}
				}
			}
		}
		// The tiny shapes' experts all fit in 1 GiB: with them on the
		// device the CPU has nothing left to do, unless the trial of the
		// GPU's way against the CPU alone kept the CPU (on these tiny
		// shapes it may be the faster at batch 8: the trial_cpu rows say).
		for _, prefix := range []string{"dev_", "dev_zipf_"} {
			for _, sfx := range []string{"", "_b8"} {
				if v, ok := got[prefix+"decode"+sfx+"_tps"]; !ok || !(v > 0) {
					t.Errorf("%s: %sdecode%s_tps = %v (present %v)", s.Variant, prefix, sfx, v, ok)
				}
				kept, ok := got[prefix+"trial_cpu"+sfx]
				if !ok || (kept != 0 && kept != 1) {
					t.Errorf("%s: %strial_cpu%s = %v (present %v), want the trial's choice", s.Variant, prefix, sfx, kept, ok)
				}
				if v := got[prefix+"cpu_busy"+sfx+"_ms"]; v != 0 && kept != 1 {
					t.Errorf("%s: %scpu_busy%s_ms = %v with every expert on the device and the GPU's way kept", s.Variant, prefix, sfx, v)
				}
			}
		}
		if own, skew := got["read_b8_mib_per_token"], got["zipf_read_b8_mib_per_token"]; !(skew <= own) {
			t.Errorf("%s: batch 8 reads %v MiB a token skewed, %v on the model's own routing", s.Variant, skew, own)
		}
		if s.Placement == nil || s.Placement.Streamed != 0 {
			t.Errorf("%s: placement %+v, want every layer's attention resident", s.Variant, s.Placement)
		}
	}
}
