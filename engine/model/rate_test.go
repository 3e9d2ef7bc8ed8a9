package model

import (
	"math"
	"testing"
	"time"
)

// TestRateTimer checks that Rate's figure is its fastest round's: a slow
// stretch (the first layers' reads on cores just woken) does not set it.
func TestRateTimer(t *testing.T) {
	t.Parallel()
	const layer = 128 << 20 // an 8b Q4_K_M FFN's size, about
	at := func(gbs float64) time.Duration { return time.Duration(layer / gbs) }
	tests := []struct {
		name  string
		reads []time.Duration
		want  float64 // GB/s
	}{
		{"steady", repeat(at(90), 16), 90},
		{"slow start", append(repeat(at(25), 4), repeat(at(90), 12)...), 90},
		{"one stall", append(append(repeat(at(80), 6), at(5)), repeat(at(80), 9)...), 80},
		{"slow round between", append(append(repeat(at(60), 4), repeat(at(20), 4)...), repeat(at(70), 8)...), 70},
		{"fewer bytes than a round", repeat(at(40), 3), 40},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r rateTimer
			for _, d := range tc.reads {
				r.add(layer, d)
			}
			if got := r.fastest() / 1e9; math.Abs(got/tc.want-1) > 0.01 {
				t.Errorf("rate %.2f GB/s, want %.2f", got, tc.want)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}
