package gemv

import (
	"fmt"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// BenchmarkRows: one thread, a 4096 x 4096 matrix of each format (its
// weight bytes per second as MB/s), for every kernel family here.
func BenchmarkRows(b *testing.B) {
	const rows, n = 4096, 4096
	for _, typ := range allTypes {
		t := &testing.T{}
		w := randomRows(t, typ, rows, n, 1, false)
		var x X
		if err := x.Set(randomVector(n, 2, false)); err != nil {
			b.Fatal(err)
		}
		y := make([]float32, rows)
		for _, impl := range Impls() {
			if impl != Go && !Supports(impl, typ) {
				continue
			}
			b.Run(fmt.Sprintf("%v/%v", typ, impl), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					if err := Rows(impl, typ, w, n, &x, y); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSet: quantizing a 14336-element vector (the FFN's down input).
func BenchmarkSet(b *testing.B) {
	v := randomVector(14336, 1, false)
	var x X
	b.SetBytes(int64(4 * len(v)))
	for b.Loop() {
		if err := x.Set(v); err != nil {
			b.Fatal(err)
		}
	}
}

var _ = quant.Q4_K
