package gemv

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// TestAVX512Variants: both builds of the AVX512 family's kernels, with and
// without VNNI, meet the contract. The dispatch table holds only the one
// this CPU prefers, so TestKernelsMatchReference alone would leave the
// other untested on a VNNI machine.
func TestAVX512Variants(t *testing.T) {
	t.Parallel()
	if !available(AVX512) {
		t.Skip("CPU without AVX-512 F/BW/VL")
	}
	for _, vnni := range []bool{false, true} {
		if vnni && !cpu.X86.HasAVX512VNNI {
			continue
		}
		for typ, k := range avx512Kernels(vnni) {
			matchReference(t, fmt.Sprintf("vnni=%v", vnni), typ, func(w []byte, n int, x *X, y []float32) error {
				k(unsafe.SliceData(w), len(w)/len(y), len(y), n, unsafe.SliceData(x.Q), unsafe.SliceData(x.D), unsafe.SliceData(x.S), unsafe.SliceData(x.F), unsafe.SliceData(y))
				return nil
			})
		}
	}
}
