package stream

import (
	"math"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/tier"
)

func TestStatsFinish(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name                      string
		read, copy, compute, wall time.Duration
		overlap, util             float64
	}{
		{"serial", 10 * ms, 10 * ms, 20 * ms, 40 * ms, 0, 0.5},
		{"perfect", 10 * ms, 10 * ms, 20 * ms, 20 * ms, 1, 1},
		{"half", 10 * ms, 10 * ms, 20 * ms, 30 * ms, 0.5, 20.0 / 30},
		{"compute only", 0, 0, 20 * ms, 20 * ms, 0, 1},
		{"clamped", 10 * ms, 10 * ms, 20 * ms, 50 * ms, 0, 0.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := Stats{Wall: tc.wall}
			s.Read.Busy, s.Copy.Busy, s.Compute.Busy = tc.read, tc.copy, tc.compute
			s.Read.Bytes = 1e9
			s.finish()
			if math.Abs(s.Overlap-tc.overlap) > 1e-9 || math.Abs(s.ComputeUtil-tc.util) > 1e-9 {
				t.Fatalf("overlap %v util %v, want %v %v", s.Overlap, s.ComputeUtil, tc.overlap, tc.util)
			}
			if tc.read > 0 && math.Abs(s.Read.GBps-1/tc.read.Seconds()) > 1e-6 {
				t.Fatalf("read GB/s %v", s.Read.GBps)
			}
		})
	}
}

func TestMixTiers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mix  string
		n    int
		want string
		err  bool
	}{
		{"all-A", 3, "AAA", false},
		{"all-b", 2, "BB", false},
		{"all-C", 1, "C", false},
		{"mixed", 6, "ABCBAB", false},
		{"a,c,B", 3, "ACB", false},
		{"A,C", 3, "", true},
		{"A,X,B", 3, "", true},
		{"bogus", 3, "", true},
	} {
		ts, err := tier.MixTiers(tc.mix, tc.n)
		if (err != nil) != tc.err {
			t.Fatalf("MixTiers(%q, %d): %v", tc.mix, tc.n, err)
		}
		got := ""
		for _, x := range ts {
			got += x.String()
		}
		if !tc.err && got != tc.want {
			t.Fatalf("MixTiers(%q, %d) = %s, want %s", tc.mix, tc.n, got, tc.want)
		}
	}
}
