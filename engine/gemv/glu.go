package gemv

import (
	"fmt"
	"math"
)

// SwiGLU sets x[i] to silu(x[i])·u[i], silu(v) = v/(1+e^−v): the gated
// activation of a SwiGLU FFN, between its gate/up and down products.
// With AVX-512 or AVX2 the exponential is the softmax's polynomial
// (Softmax) and the rest float32 arithmetic, within a few units in the
// last place of the plain Go's float64 evaluation; each element's result
// depends only on its own inputs and position in x modulo 16 (a tail
// shorter than 16 takes the plain Go).
func SwiGLU(impl Impl, x, u []float32) error {
	return glu("swiglu", impl, x, u, swigluAVX512, swigluAVX2, func(v float32) float32 {
		f := float64(v)
		return float32(f / (1 + math.Exp(-f)))
	})
}

// GeGLU sets x[i] to gelu(x[i])·u[i] with the tanh form of GELU,
// 0.5·v·(1+tanh(sqrt(2/π)·(v+0.044715·v³))), Gemma's FFN activation. The
// vector kernels evaluate it as v/(1+e^−2y), y the tanh's argument, with
// the softmax's exponential; the plain Go in float64, as SwiGLU.
func GeGLU(impl Impl, x, u []float32) error {
	return glu("geglu", impl, x, u, gegluAVX512, gegluAVX2, geluTanh)
}

// glu is SwiGLU's and GeGLU's one loop: a kernel (k512 on AVX-512, k2 on
// AVX2) over the whole 16-element groups, act in Go over the rest.
func glu(name string, impl Impl, x, u []float32, k512, k2 func(x, u *float32, n int), act func(float32) float32) error {
	if len(u) < len(x) {
		return fmt.Errorf("gemv: %s of %d elements with %d gates' partners", name, len(x), len(u))
	}
	n := 0
	if f := vecF(impl); f != Go && len(x) >= 16 {
		n = len(x) / 16 * 16
		if f == AVX512 {
			k512(&x[0], &u[0], n)
		} else {
			k2(&x[0], &u[0], n)
		}
	}
	for i := n; i < len(x); i++ {
		x[i] = act(x[i]) * u[i]
	}
	return nil
}

// geluTanh is PyTorch's gelu(approximate="tanh") in float64, as
// v/(1+e^−2y): the same function as 0.5·v·(1+tanh(y)) without the
// cancellation of 1+tanh(y), which gives 0 for y below about −19.
func geluTanh(x float32) float32 {
	v := float64(x)
	const c = 0.7978845608028654 // sqrt(2/pi)
	return float32(v / (1 + math.Exp(-2*c*(v+0.044715*v*v*v))))
}
