package gemv

import (
	"golang.org/x/sys/cpu"

	"github.com/strata-llm/strata/engine/quant"
)

// available reports whether this CPU (and OS, which must save the wide
// registers; x/sys/cpu checks that) runs impl's kernels.
func available(impl Impl) bool {
	x := &cpu.X86
	switch impl {
	case AVX2:
		return x.HasAVX2 && x.HasFMA && x.HasF16C && x.HasBMI2
	case AVX512:
		return available(AVX2) && x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL
	}
	return false
}

// kernels maps each SIMD family to its kernels; a family without a
// format's kernel falls back to the next one down, then to the reference.
var kernels = map[Impl]map[quant.Type]kernel{
	AVX2: {
		quant.Q4_K:    q4kAVX2,
		quant.Q5_K:    q5kAVX2,
		quant.Q6_K:    q6kAVX2,
		quant.Q8_0:    q8AVX2,
		quant.Q4_0:    q4AVX2,
		quant.INT8Row: i8AVX2,
		quant.F32:     f32AVX2,
		quant.F16:     f16AVX2,
		quant.BF16:    bf16AVX2,
	},
	AVX512: {},
}

func lookup(impl Impl, t quant.Type) kernel {
	for i := impl; i > Go; i-- {
		if !available(i) {
			continue
		}
		if k := kernels[i][t]; k != nil {
			return k
		}
	}
	return nil
}
