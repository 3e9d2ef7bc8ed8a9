package gemv

import (
	"fmt"
	"math"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// TestWidenMatchesDequant: each widening kernel gives, for every element,
// quant's decoded float32 rounded to bfloat16, for rows of realistic and
// of random bytes, several rows a stride apart and several blocks a row.
// Q4_K's kernel fuses d·q − m into one rounding where the reference rounds
// twice, so an element may land one bfloat16 step from the reference's
// rounding when the two float32 values straddle a rounding boundary; no
// further. A zero's sign may differ (Q6_K's reference multiplies a zero by
// a negative scale).
func TestWidenMatchesDequant(t *testing.T) {
	t.Parallel()
	if !amxReady() {
		t.Skip("no tile unit here: the widening kernels round with AVX512_BF16, which goes with it")
	}
	for typ, wd := range widens {
		for _, wild := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/wild %v", typ, wild), func(t *testing.T) {
				t.Parallel()
				const rows, n, ld = 5, 1024, 1024 + 64
				w := randomRows(t, typ, rows, n, 3, wild)
				stride := len(w) / rows
				out := make([]uint16, rows*ld)
				wd(&w[0], stride, rows, n/typ.BlockElems(), &out[0], 2*ld)
				ref := make([]float32, n)
				near := 0
				for r := range rows {
					if err := quant.Dequantize(typ, w[r*stride:(r+1)*stride], ref); err != nil {
						t.Fatal(err)
					}
					for i, f := range ref {
						got, want := out[r*ld+i], toBF16(f)
						if got == want || got&0x7fff == 0 && want&0x7fff == 0 {
							continue // equal, or zeros of either sign
						}
						d := int(got) - int(want)
						if typ != quant.Q4_K || (d != 1 && d != -1) {
							t.Fatalf("row %d element %d: %#04x (%g), want %#04x (%g of %g)", r, i, got, math.Float32frombits(uint32(got)<<16), want, math.Float32frombits(uint32(want)<<16), f)
						}
						near++
					}
					for i := n; i < ld; i++ {
						if out[r*ld+i] != 0 {
							t.Fatalf("row %d: element %d past the row written", r, i)
						}
					}
				}
				if near > rows*n/100 {
					t.Errorf("%d of %d elements a step from the reference's rounding", near, rows*n)
				}
			})
		}
	}
}

// BenchmarkWiden: one thread, each widening kernel over 16 rows of 4096
// columns (in cache, as RowsTiled calls them a panel's block at a time),
// in MB/s of encoded weights.
func BenchmarkWiden(b *testing.B) {
	if !amxReady() {
		b.Skip("no tile unit here")
	}
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0} {
		const rows, n = 16, 4096
		w := randomRows(&testing.T{}, typ, rows, n, 1, false)
		out := make([]uint16, rows*n)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				widens[typ](&w[0], len(w)/rows, rows, n/typ.BlockElems(), &out[0], 2*n)
			}
		})
	}
}
