package model

import "math"

// The element-wise kernels below are deliberately plain: each output
// depends only on its own inputs and is computed in a fixed order, so a
// token's result never depends on which other tokens share its batch.
// Products feeding a sum are wrapped in float32() conversions, which the Go
// spec guarantees round, so the compiler never fuses them into FMAs and
// results are the same on every architecture.

// rmsNorm writes x/rms(x)*w to dst (dst may alias x). The sum of squares is
// accumulated in float64; the scale and products are float32, as in
// PyTorch's float32 RMSNorm.
func rmsNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	mean := float32(ss / float64(len(x)))
	inv := float32(1 / math.Sqrt(float64(mean+eps)))
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(v*inv) * w[i]
	}
}

// ropeInterleaved rotates adjacent pairs (x[2i], x[2i+1]) by the angle
// whose cosine and sine are cos[i], sin[i] (llama after the GGUF q/k
// permutation).
func ropeInterleaved(x, cos, sin []float32) {
	for i := range cos {
		c, s := cos[i], sin[i]
		x0, x1 := x[2*i], x[2*i+1]
		x[2*i] = float32(x0*c) - float32(x1*s)
		x[2*i+1] = float32(x0*s) + float32(x1*c)
	}
}

// ropeNeoX rotates the pairs (x[i], x[i+half]) (gemma2, HF rotate_half).
func ropeNeoX(x, cos, sin []float32) {
	half := len(cos)
	for i := range cos {
		c, s := cos[i], sin[i]
		x0, x1 := x[i], x[i+half]
		x[i] = float32(x0*c) - float32(x1*s)
		x[i+half] = float32(x1*c) + float32(x0*s)
	}
}

// silu is x*sigmoid(x), evaluated in float64 and rounded.
func silu(x float32) float32 {
	v := float64(x)
	return float32(v / (1 + math.Exp(-v)))
}

// geluTanh is PyTorch's gelu(approximate="tanh"):
// 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))), evaluated in float64.
func geluTanh(x float32) float32 {
	v := float64(x)
	const c = 0.7978845608028654 // sqrt(2/pi)
	return float32(0.5 * v * (1 + math.Tanh(c*(v+0.044715*v*v*v))))
}

// softcap returns cap*tanh(x/cap) with float32 rounding between steps, as a
// float32 PyTorch computation does.
func softcap(x, cap float32) float32 {
	return float32(math.Tanh(float64(x/cap))) * cap
}

// dot is a float32 dot product with four fixed accumulators.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float32(a[i] * b[i])
		s1 += float32(a[i+1] * b[i+1])
		s2 += float32(a[i+2] * b[i+2])
		s3 += float32(a[i+3] * b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float32(a[i] * b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy adds a*x to y.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += float32(a * x[i])
	}
}

// cosine is the cosine of the angle between a and b (0 when either is
// zero), in float64.
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
