package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TestArgmaxWide covers the float4 path of argmax on vocabulary-sized rows:
// ties between elements read by different threads, rounds and float4 lanes,
// NaN, a winner in the scalar tail, and rows whose start is not 16-byte
// aligned (odd vocabularies), against engine/sample's rule.
func TestArgmaxWide(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	cases := []struct {
		name  string
		vocab int
		set   func(rows [][]float32)
	}{
		{"llama3 vocab", 128256, func(rows [][]float32) {
			rows[0][100003], rows[0][7] = 90, 90  // tie across rounds: 7 wins
			rows[1][4097], rows[1][4098] = 91, 91 // tie inside one float4: 4097 wins
			rows[2][0] = float32(math.NaN())
			rows[2][128255] = 92 // last element
		}},
		{"tail", 128258, func(rows [][]float32) {
			rows[0][128257] = 93 // scalar tail of an aligned row
			rows[1][2], rows[1][128256] = 94, 94
		}},
		{"odd rows", 50001, func(rows [][]float32) {
			rows[1][49999] = 95 // row 1 starts misaligned: scalar loop
			rows[2][3], rows[2][40000] = 96, 96
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := [][]float32{randVec(r, tc.vocab, 3), randVec(r, tc.vocab, 3), randVec(r, tc.vocab, 3)}
			tc.set(rows)
			var flat []float32
			for _, row := range rows {
				flat = append(flat, row...)
			}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				lp := put(a, flat)
				out := a.alloc(16)
				must(k.Argmax(c, 0, lp, len(rows), tc.vocab, out))
				got := get[int32](a, out, len(rows))
				for i, row := range rows {
					if best := refArgmax(row); int(got[i]) != best {
						t.Errorf("row %d: argmax %d, want %d", i, got[i], best)
					}
				}
			})
		})
	}
}

// refArgmax is engine/sample's greedy rule: the largest value, the lowest
// index on ties, NaN never chosen over a number.
func refArgmax(row []float32) int {
	best := 0
	for j, v := range row {
		if v > row[best] || (math.IsNaN(float64(row[best])) && !math.IsNaN(float64(v))) {
			best = j
		}
	}
	return best
}
