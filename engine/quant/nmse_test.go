package quant

import (
	"math"
	"testing"
)

func TestNMSE(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		got, want []float32
		nmse      float64
	}{
		{"equal", []float32{1, -2, 3}, []float32{1, -2, 3}, 0},
		{"one off", []float32{1, 0}, []float32{1, 1}, 0.5},
		{"scaled", []float32{2, 4}, []float32{1, 2}, 1},
		{"zero reference", []float32{0, 3}, []float32{0, 0}, 9},
		{"zero both", []float32{0, 0}, []float32{0, 0}, 0},
	} {
		if got := NMSE(tc.got, tc.want); math.Abs(got-tc.nmse) > 1e-12 {
			t.Errorf("%s: NMSE = %g, want %g", tc.name, got, tc.nmse)
		}
	}
}
