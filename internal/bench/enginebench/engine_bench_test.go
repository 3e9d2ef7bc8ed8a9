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
