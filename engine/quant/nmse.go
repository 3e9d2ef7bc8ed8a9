package quant

// NMSE is the normalised mean squared error of got against want,
// Σ(got−want)² ÷ Σwant², the measure every fidelity check in strata states
// its tolerance in (a backend's logits against the CPU reference, a
// quantized row against its floats). Where want is all zeros it is the
// plain Σ(got−want)², so equal vectors still give 0. got must be at least
// as long as want.
func NMSE(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return num
	}
	return num / den
}
