package kernels

import "testing"

// TestGEMVSharedFits checks that every GEMV instance fits the shared
// memory its device class grants (96 KiB on compute_80; 48 KiB on
// compute_61 for one and two vectors is not required, but the common
// single-vector decode must fit everywhere).
func TestGEMVSharedFits(t *testing.T) {
	for _, typ := range gemvTypes {
		for nb := 1; nb <= MaxGEMVBatch; nb++ {
			r := 1
			if nb <= 2 {
				r = 2
			}
			s := gemvShared(typ, nb, r)
			if s > gemvSharedLimit {
				t.Errorf("%v nb %d: %d bytes > %d", typ, nb, s, gemvSharedLimit)
			}
			if nb == 1 && s > 48<<10 {
				t.Errorf("%v nb 1: %d bytes > 48 KiB", typ, s)
			}
		}
	}
}
