package gemv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowsF: DotRows and AddRows, with every kernel family, against
// float64 sums: each result within 1e-6 of Σ|terms| (float32 rounding of
// a few hundred terms), for heads of 64, 128 and 256 (the AVX-512
// kernels) and 96 (plain Go), one row and many, rows a stride apart. Bad
// shapes are refused.
func TestRowsF(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for _, impl := range Impls() {
		for _, n := range []int{64, 128, 256, 96} {
			for _, rows := range []int{1, 7, 300} {
				name := fmt.Sprintf("%v/n %d/rows %d", impl, n, rows)
				stride := n + 64
				k, q, w := vec((rows-1)*stride+n), vec(n), vec(rows)
				y := make([]float32, rows)
				if err := DotRows(impl, q, k, stride, y); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for i := range rows {
					var exact, mag float64
					for j := range n {
						p := float64(q[j]) * float64(k[i*stride+j])
						exact, mag = exact+p, mag+math.Abs(p)
					}
					if e := math.Abs(float64(y[i]) - exact); e > 1e-6*mag {
						t.Fatalf("%s: dot row %d: %g, exact %g", name, i, y[i], exact)
					}
				}
				out := vec(n)
				start := append([]float32(nil), out...)
				if err := AddRows(impl, out, w, k, stride); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for j := range n {
					exact, mag := float64(start[j]), math.Abs(float64(start[j]))
					for i := range rows {
						p := float64(w[i]) * float64(k[i*stride+j])
						exact, mag = exact+p, mag+math.Abs(p)
					}
					if e := math.Abs(float64(out[j]) - exact); e > 1e-6*mag {
						t.Fatalf("%s: add column %d: %g, exact %g", name, j, out[j], exact)
					}
				}
			}
		}
		if err := DotRows(impl, make([]float32, 64), make([]float32, 100), 64, make([]float32, 2)); err == nil {
			t.Errorf("%v: dot over rows past the slice's end: no error", impl)
		}
		if err := AddRows(impl, make([]float32, 64), make([]float32, 2), make([]float32, 200), 32); err == nil {
			t.Errorf("%v: add over overlapping rows: no error", impl)
		}
	}
}
