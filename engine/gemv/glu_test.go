package gemv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSwiGLU: every kernel family against float64 silu(v)·u, within 4e-7
// of the result's magnitude (a few float32 roundings), over values from
// tiny to large in both signs (the exponential's clamps: e^−v overflows
// for v below −88, vanishes above 120), lengths with and without a tail;
// a short partner slice is refused.
func TestSwiGLU(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for _, impl := range Impls() {
		for _, n := range []int{16, 100, 14336} {
			x, u := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
				u[i] = float32(r.NormFloat64())
			}
			x[0], x[1], x[2] = -200, 200, 0
			want := make([]float64, n)
			for i, v := range x {
				f := float64(v)
				want[i] = f / (1 + math.Exp(-f)) * float64(u[i])
			}
			if err := SwiGLU(impl, x, u); err != nil {
				t.Fatal(err)
			}
			for i, got := range x {
				if e := math.Abs(float64(got) - want[i]); e > 4e-7*math.Abs(want[i]) && e > 1e-30 {
					t.Fatalf("%v n %d: element %d = %g, want %g", impl, n, i, got, want[i])
				}
			}
		}
		name := fmt.Sprint(impl)
		if err := SwiGLU(impl, make([]float32, 32), make([]float32, 31)); err == nil {
			t.Errorf("%s: short partners: no error", name)
		}
	}
}

// BenchmarkSwiGLU: one thread, the 8b FFN's width (14336).
func BenchmarkSwiGLU(b *testing.B) {
	x, u := make([]float32, 14336), make([]float32, 14336)
	for i := range x {
		x[i], u[i] = float32(i%7)-3, 0.5
	}
	for _, impl := range []Impl{Go, Detect()} {
		b.Run(impl.String(), func(b *testing.B) {
			b.SetBytes(int64(len(x)) * 4)
			for b.Loop() {
				_ = SwiGLU(impl, x, u)
			}
		})
	}
}
