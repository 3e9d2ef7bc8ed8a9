package gemv

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// The tile path's stated bounds against the exact product (float64 over
// the decoded rows and the float vectors). A weight rounded to bfloat16 is
// off by 2⁻⁹ of itself at most, so no product is off by more than 2⁻⁹ of
// Σ|w·x| (with room for the vector's low part and float32's sums); over a
// case's products of realistic weights the error's energy stays near 1e-6
// of theirs, the integer path's size (random bytes' sums cancel too much
// for that ratio to mean anything). BF16 weights are exact, and their products are off
// by the vector's 16-bit split and float32's sums alone.
const (
	tiledTol     = 2.2e-3 // of Σ|w·x|, any product
	tiledNMSE    = 2e-5   // error energy over product energy, a case
	tiledTolBF16 = 2e-6
)

// TestRowsTiledAccuracy: RowsTiled against the exact products (float64
// over the decoded rows and the float vectors) for every tiled format, for
// batches of one vector, of a tile and a part, of a group of four tiles
// and of more than a group, one panel of fewer than 16 rows and pairs of
// panels whole and part empty, with a lone panel after them,
// rows of one column block and of several with a short last one, rows
// read as a view of a wider matrix, and extreme weights and vectors. The
// integer path (RowsBatch) is held to the same bound with the vector's
// quantization error added, to show what the tiles are measured against.
func TestRowsTiledAccuracy(t *testing.T) {
	t.Parallel()
	impl := Detect()
	if !Tiled(impl, quant.Q4_K) {
		t.Skipf("no tile unit here (%v)", impl)
	}
	worst := map[quant.Type][2]float64{}
	for _, typ := range allTypes {
		if !Tiled(impl, typ) {
			continue
		}
		for _, c := range []struct{ rows, n, width, batch int }{
			{5, 256, 256, 1},
			{16, 768, 768, 17},
			{33, 1280, 1536, 64}, // a view; a short last column block
			{40, 512, 512, 70},   // more than a group of four tiles
			{1, 1024, 1024, 3},
			{20, 512, 512, 33}, // two panels, the second part empty; three token tiles
		} {
			for _, wild := range []bool{false, true} {
				name := fmt.Sprintf("%v/%d rows of %d of %d/batch %d/wild %v", typ, c.rows, c.n, c.width, c.batch, wild)
				full, rows, stride, xs := viewBatch(t, typ, c.rows, c.n, c.width, c.batch, wild)
				rb := len(rows) - (c.rows-1)*stride
				var p Tiles
				if err := p.Pack(xs); err != nil {
					t.Fatal(err)
				}
				got := make([][]float32, c.batch)
				for j := range got {
					got[j] = make([]float32, c.rows)
				}
				if err := RowsTiled(impl, typ, rows, stride, c.n, &p, got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				tol, nmse := tiledTol, tiledNMSE
				if typ == quant.BF16 {
					tol, nmse = tiledTolBF16, tiledTolBF16*tiledTolBF16
				}
				var errE, prodE float64
				w := make([]float32, c.n)
				for r := range c.rows {
					if err := quant.Dequantize(typ, full[r*stride:r*stride+rb], w); err != nil {
						t.Fatal(err)
					}
					for j, x := range xs {
						var exact, mag float64
						for i, e := range w {
							exact += float64(e) * float64(x.F[i])
							mag += math.Abs(float64(e) * float64(x.F[i]))
						}
						if mag == 0 {
							mag = 1
						}
						d := float64(got[j][r]) - exact
						errE, prodE = errE+d*d, prodE+exact*exact
						e := math.Abs(d) / mag
						wt := worst[typ]
						wt[0] = max(wt[0], e)
						worst[typ] = wt
						if e > tol {
							t.Fatalf("%s: row %d vector %d: %g, exact %g: error %.3g of Σ|w·x|, bound %g", name, r, j, got[j][r], exact, e, tol)
						}
					}
				}
				if prodE > 0 {
					e := errE / prodE
					wt := worst[typ]
					wt[1] = max(wt[1], e)
					worst[typ] = wt
					if e > nmse && !wild {
						t.Fatalf("%s: error energy %.3g of the products', bound %g", name, e, nmse)
					}
				}
			}
		}
	}
	for typ, wt := range worst {
		t.Logf("%v: worst product error %.3g of Σ|w·x|, worst case's error energy %.3g", typ, wt[0], wt[1])
	}
}

// TestRowsTiledChecks: RowsTiled refuses what it cannot compute, with an
// error, where the tile unit exists; Tiles refuses vectors of two lengths
// and elements that are not finite.
func TestRowsTiledChecks(t *testing.T) {
	t.Parallel()
	impl := Detect()
	if !Tiled(impl, quant.Q8_0) {
		t.Skipf("no tile unit here (%v)", impl)
	}
	rows := randomRows(t, quant.Q8_0, 4, 256, 1, false)
	xs := []*X{new(X), new(X)}
	for _, x := range xs {
		if err := x.Set(randomVector(256, 3, false)); err != nil {
			t.Fatal(err)
		}
	}
	var p Tiles
	if err := p.Pack(xs); err != nil {
		t.Fatal(err)
	}
	ys := [][]float32{make([]float32, 4), make([]float32, 4)}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"one output for two vectors", RowsTiled(impl, quant.Q8_0, rows, len(rows)/4, 256, &p, ys[:1])},
		{"rows of another width", RowsTiled(impl, quant.Q8_0, rows[:len(rows)/2], len(rows)/4/2, 128, &p, ys)},
		{"no tile path for INT8Row", RowsTiled(impl, quant.INT8Row, rows, len(rows)/4, 256, &p, ys)},
		{"outputs of unequal rows", RowsTiled(impl, quant.Q8_0, rows, len(rows)/4, 256, &p, [][]float32{ys[0], ys[1][:3]})},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	var bad Tiles
	if err := bad.Pack([]*X{xs[0], {N: 128}}); err == nil {
		t.Error("vectors of two lengths packed")
	}
	if err := bad.Size(1, 64); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, 64)
	v[40] = float32(math.Inf(1))
	if err := bad.SetBlocks(0, v, 0, 1); err == nil || !strings.Contains(err.Error(), "element 40 ") {
		t.Errorf("an infinite element 40: %v", err)
	}
	v[40], v[41] = 0, float32(math.NaN())
	if err := bad.SetBlocks(0, v, 0, 1); err == nil || !strings.Contains(err.Error(), "element 41 ") {
		t.Errorf("a NaN element 41: %v", err)
	}
}

// TestTilesSetKernel: Tiles.SetBlocks' AVX-512 kernel lays vectors out
// with the plain Go loop's bits (bfloat16 rounding to nearest even of
// normal numbers), for whole vectors and for block ranges, a last token
// tile part full; and it stops at a chunk that is not finite, which the
// Go loop then names.
func TestTilesSetKernel(t *testing.T) {
	t.Parallel()
	if !available(AVX512) {
		t.Skip("no AVX-512 here")
	}
	const count, n = 37, 768
	var kern, ref Tiles
	for _, x := range []*Tiles{&kern, &ref} {
		if err := x.Size(count, n); err != nil {
			t.Fatal(err)
		}
	}
	for v := range count {
		f := randomVector(n, uint64(v+1), false)
		for i := range f {
			f[i] *= float32(1 + v%5) // several magnitudes
		}
		b0, b1 := 0, n/Block
		if v%3 == 1 {
			b0, b1 = 1, 2
		}
		if err := kern.SetBlocks(v, f, b0, b1); err != nil {
			t.Fatal(err)
		}
		if err := ref.setChunks(v, f, b0*Block/TileCols, b1*Block/TileCols); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ref.x {
		if kern.x[i] != ref.x[i] {
			t.Fatalf("tile word %d: kernel %#04x, Go %#04x", i, kern.x[i], ref.x[i])
		}
	}
	f := randomVector(n, 99, false)
	f[100] = float32(math.Inf(-1))
	if err := kern.SetBlocks(3, f, 0, n/Block); err == nil || !strings.Contains(err.Error(), "element 100 ") {
		t.Fatalf("an infinite element 100: %v", err)
	}
}
