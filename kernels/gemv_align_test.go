package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TestGEMVMisaligned runs the formats whose fast paths need 16-byte aligned
// weights on weights placed 2 and 4 bytes past an aligned address (the
// launcher then takes the word-load fallback) and compares with float64
// dot products of the dequantized weights, with TestGEMV's tolerance.
func TestGEMVMisaligned(t *testing.T) {
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.F16, quant.BF16} {
		for _, off := range []int{2, 4} {
			t.Run(fmt.Sprintf("%v/+%d", typ, off), func(t *testing.T) {
				const rows, cols = 37, 4096
				data, deq := randMatrix(typ, rows, cols, uint64(typ)+uint64(off))
				r := rand.New(rand.NewPCG(uint64(typ), uint64(off)))
				xs := randVec(r, 2*cols, 1)
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					base := a.alloc(int64(len(data) + 16))
					must(c.CopyHtoD(base+cudadrv.DevPtr(off), data, 0))
					w := Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: base + cudadrv.DevPtr(off)}
					x := put(a, xs)
					y := a.alloc(2 * rows * 4)
					for _, nb := range []int{1, 2} {
						poison(a, y, 2*rows)
						must(k.GEMV(c, 0, w, x, y, nb))
						got := get[float32](a, y, nb*rows)
						for b := 0; b < nb; b++ {
							for i := 0; i < rows; i++ {
								var ref, mag float64
								for j, wv := range deq[i*cols : (i+1)*cols] {
									p := float64(wv) * float64(xs[b*cols+j])
									ref += p
									mag += math.Abs(p)
								}
								g := float64(got[b*rows+i])
								if e := math.Abs(g - ref); !(e <= 2e-6*mag+1e-7) {
									t.Fatalf("nb %d: y[%d][%d] = %v, float64 ref %v (err %.3g)", nb, b, i, g, ref, e)
								}
							}
						}
					}
				})
			})
		}
	}
}
