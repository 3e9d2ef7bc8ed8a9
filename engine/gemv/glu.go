package gemv

import (
	"fmt"
	"math"
)

// SwiGLU sets x[i] to silu(x[i])·u[i], silu(v) = v/(1+e^−v): the gated
// activation of a SwiGLU FFN, between its gate/up and down products.
// With AVX-512 the exponential is the softmax's polynomial (Softmax) and
// the rest float32 arithmetic, within a few units in the last place of
// the plain Go's float64 evaluation; each element's result depends only
// on its own inputs and position in x modulo 16 (a tail shorter than 16
// takes the plain Go).
func SwiGLU(impl Impl, x, u []float32) error {
	if len(u) < len(x) {
		return fmt.Errorf("gemv: swiglu of %d elements with %d gates' partners", len(x), len(u))
	}
	n := 0
	if available(AVX512) && impl >= AVX512 {
		n = len(x) / 16 * 16
		if n > 0 {
			swigluAVX512(&x[0], &u[0], n)
		}
	}
	for i := n; i < len(x); i++ {
		v := float64(x[i])
		x[i] = float32(v/(1+math.Exp(-v))) * u[i]
	}
	return nil
}
