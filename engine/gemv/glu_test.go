package gemv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGLU: SwiGLU and GeGLU of every kernel family against their float64
// definitions, within 4e-7 (SwiGLU) and 3e-6 (GeGLU: its argument takes
// four float32 roundings) of the result's magnitude, or within 1e-12 of
// the input's |v·u| where the result is that much smaller (far in the
// tail the exponential's relative error grows with its argument), over
// values from tiny to large in both signs (the exponential's clamps: e^−t
// overflows for t below −88, vanishes above 120), lengths with and
// without a tail; a short partner slice is refused.
func TestGLU(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	acts := []struct {
		name string
		fn   func(Impl, []float32, []float32) error
		def  func(v float64) float64
		tol  float64
	}{
		{"swiglu", SwiGLU, func(v float64) float64 { return v / (1 + math.Exp(-v)) }, 4e-7},
		{"geglu", GeGLU, func(v float64) float64 {
			// 0.5·v·(1+tanh(y)) without 1+tanh(y)'s cancellation.
			return v / (1 + math.Exp(-2*0.7978845608028654*(v+0.044715*v*v*v)))
		}, 3e-6},
	}
	for _, act := range acts {
		for _, impl := range Impls() {
			for _, n := range []int{16, 100, 14336} {
				x, u := make([]float32, n), make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
					u[i] = float32(r.NormFloat64())
				}
				x[0], x[1], x[2] = -200, 200, 0
				want, scale := make([]float64, n), make([]float64, n)
				for i, v := range x {
					want[i] = act.def(float64(v)) * float64(u[i])
					scale[i] = math.Abs(float64(v) * float64(u[i]))
				}
				if err := act.fn(impl, x, u); err != nil {
					t.Fatal(err)
				}
				for i, got := range x {
					if e := math.Abs(float64(got) - want[i]); e > act.tol*math.Abs(want[i]) && e > 1e-12*scale[i] {
						t.Fatalf("%s %v n %d: element %d = %g, want %g", act.name, impl, n, i, got, want[i])
					}
				}
			}
			if err := act.fn(impl, make([]float32, 32), make([]float32, 31)); err == nil {
				t.Errorf("%s %v: short partners: no error", act.name, fmt.Sprint(impl))
			}
		}
	}
}

// BenchmarkSwiGLU: one thread, the 8b FFN's width (14336), for every
// kernel family here.
func BenchmarkSwiGLU(b *testing.B) {
	x, u := make([]float32, 14336), make([]float32, 14336)
	for i := range x {
		x[i], u[i] = float32(i%7)-3, 0.5
	}
	for _, impl := range Impls() {
		b.Run(impl.String(), func(b *testing.B) {
			b.SetBytes(int64(len(x)) * 4)
			for b.Loop() {
				_ = SwiGLU(impl, x, u)
			}
		})
	}
}
