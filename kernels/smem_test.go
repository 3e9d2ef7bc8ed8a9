package kernels

import "testing"

// TestGEMVSharedFits checks that every GEMV plan fits both device
// classes' shared-memory limits (96 KiB on compute_80, 48 KiB on
// compute_61) at the geometry the launcher picks, with 1..8 warps.
func TestGEMVSharedFits(t *testing.T) {
	t.Parallel()
	for _, typ := range gemvTypes {
		for nb := 1; nb <= MaxGEMVBatch; nb++ {
			p := gemvPlanFor(typ, nb)
			for _, limit := range []int{gemvSharedLimit, 48 << 10} {
				for _, sh := range [][2]int{{14336, 4096}, {4096, 14336}, {32, 512}} {
					_, threads, smem := baseTuning().gemvGeometry(typ, p, nb, sh[0], sh[1], 132, limit)
					if p.kind == planTiled && limit == 48<<10 && nb > 1 {
						continue // compute_61 devices are only promised single-vector decode
					}
					if smem > limit || threads < 32 || threads > 256 || threads%32 != 0 {
						t.Errorf("%v nb %d %dx%d: %d threads, %d bytes of shared memory (limit %d)", typ, nb, sh[0], sh[1], threads, smem, limit)
					}
				}
			}
		}
	}
}
