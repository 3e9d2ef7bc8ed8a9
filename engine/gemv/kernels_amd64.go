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
		// DQ too: the float kernels' and the activations' conversions
		// and masks (f32AVX512, swigluAVX512, ...) are AVX512DQ's.
		return available(AVX2) && x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512DQ
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
	AVX512: avx512Kernels(cpu.X86.HasAVX512VNNI),
}

// avx512Kernels is the AVX512 family's table. Its K-quant and INT8Row
// kernels are generated twice, once with VNNI's VPDPWSSD (int16 pairs
// multiplied and added into int32 in one instruction) and once with
// VPMADDWD and VPADDD for the AVX-512 CPUs without VNNI (Skylake-SP); both
// return the same bits, so the choice is made here, once, and Impl stays
// one family. The float kernels multiply floats: both tables hold the
// same ones. Q8_0 and Q4_0 have no one-vector AVX-512 kernel: the one
// each had (a 32-element block a zmm, eight blocks reduced together) lost
// to the AVX2 kernel from memory once both prefetched, Q4_0 in cache too,
// so both fall back to AVX2 (their four-vector kernels, which share the
// weights' widening, are AVX-512's: avx512Kernels4).
func avx512Kernels(vnni bool) map[quant.Type]kernel {
	if vnni {
		return map[quant.Type]kernel{
			quant.Q4_K:    q4kVNNI,
			quant.Q5_K:    q5kVNNI,
			quant.Q6_K:    q6kVNNI,
			quant.INT8Row: i8VNNI,
			quant.F32:     f32AVX512,
			quant.F16:     f16AVX512,
			quant.BF16:    bf16AVX512,
		}
	}
	return map[quant.Type]kernel{
		quant.Q4_K:    q4kAVX512,
		quant.Q5_K:    q5kAVX512,
		quant.Q6_K:    q6kAVX512,
		quant.INT8Row: i8AVX512,
		quant.F32:     f32AVX512,
		quant.F16:     f16AVX512,
		quant.BF16:    bf16AVX512,
	}
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

// kernels4 maps each SIMD family to its multi-vector kernels (four packed
// vectors a call; see Packed), chosen as kernels' are.
var kernels4 = map[Impl]map[quant.Type]kernel{
	AVX2:   {quant.Q4_K: q4kAVX2x4, quant.Q5_K: q5kAVX2x4, quant.Q6_K: q6kAVX2x4},
	AVX512: avx512Kernels4(cpu.X86.HasAVX512VNNI),
}

// avx512Kernels4 is the AVX512 family's multi-vector table, with VNNI or
// without as avx512Kernels: the K-quants (a Q4_K_M model's matrices are
// Q4_K and Q6_K, a Q5_K_M's Q5_K and Q6_K), Q8_0 and Q4_0 (whose
// one-vector kernels are AVX2's: every kernel of theirs gives ref.go's
// bits), and F16 and BF16, whose
// sixteen accumulators fit AVX-512's registers and not AVX2's (F32's
// weights need no widening to share: its build lost to RowsBatch).
func avx512Kernels4(vnni bool) map[quant.Type]kernel {
	k := map[quant.Type]kernel{quant.Q4_K: q4kAVX512x4, quant.Q5_K: q5kAVX512x4, quant.Q6_K: q6kAVX512x4,
		quant.Q8_0: q8AVX512x4, quant.Q4_0: q4AVX512x4, quant.F16: f16AVX512x4, quant.BF16: bf16AVX512x4}
	if vnni {
		k[quant.Q4_K], k[quant.Q5_K], k[quant.Q6_K] = q4kVNNIx4, q5kVNNIx4, q6kVNNIx4
	}
	return k
}

// lookup4 is lookup for the multi-vector kernels: the best family's
// that impl allows and the machine runs, nil where none has one. The
// integer formats' kernels all give ref.go's bits, so one family's
// multi-vector kernel may stand beside another's one-vector kernel; the
// float formats' results depend on the family, and theirs come from the
// same family as the one-vector kernels (AVX-512 has both).
func lookup4(impl Impl, t quant.Type) kernel {
	for i := impl; i > Go; i-- {
		if !available(i) {
			continue
		}
		if k := kernels4[i][t]; k != nil {
			return k
		}
	}
	return nil
}

// attnF is the family whose attention kernels (attn.go) run for heads of
// n elements under impl: AVX-512's take heads of a multiple of 64
// elements, AVX2's of 16; Go where neither does.
func attnF(impl Impl, n int) Impl {
	switch {
	case n <= 0:
		return Go
	case impl >= AVX512 && available(AVX512) && n%64 == 0:
		return AVX512
	case impl >= AVX2 && available(AVX2) && n%16 == 0:
		return AVX2
	}
	return Go
}

// vecF is the family whose softmax and gated activations run under impl.
func vecF(impl Impl) Impl {
	switch {
	case impl >= AVX512 && available(AVX512):
		return AVX512
	case impl >= AVX2 && available(AVX2):
		return AVX2
	}
	return Go
}
