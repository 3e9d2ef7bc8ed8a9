package gemv

import (
	"fmt"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// TestRowsPackedMatchesBatch: RowsPacked returns RowsBatchStride's bits for
// every format and family, for batches of whole groups of four, of groups
// and a rest, and of a rest padded to a group, rows with an odd number of
// blocks (the kernels' lone last block) and with an even one, a tile and
// a part, and rows read as a view of a wider matrix; extreme weights and
// vectors included.
func TestRowsPackedMatchesBatch(t *testing.T) {
	t.Parallel()
	for _, typ := range allTypes {
		for _, c := range []struct{ rows, n, width, batch int }{
			{37, 768, 768, 9},   // three blocks a row, two groups and one more
			{16, 1024, 1024, 4}, // four blocks, one group
			{5, 1280, 1536, 8},  // a view of five blocks of six
			{20, 256, 256, 3},   // no whole group: one padded
			{20, 512, 512, 2},   // too few to pad
			{9, 768, 768, 7},    // a group and a padded one
			{9, 768, 768, 6},    // a group and two more
			{12, 288, 288, 5},   // no whole block: the floats' kernels, the others' fallback
		} {
			name := fmt.Sprintf("%v/%d rows of %d of %d/batch %d", typ, c.rows, c.n, c.width, c.batch)
			if typ == quant.INT8Row && c.n != c.width {
				continue // a row's scale covers the whole row: no view
			}
			if _, err := typ.RowBytes(int64(c.width)); err != nil {
				continue // rows of whole 256-element blocks only (the K-quants)
			}
			for _, wild := range []bool{false, true} {
				_, rows, stride, xs := viewBatch(t, typ, c.rows, c.n, c.width, c.batch, wild)
				var p Packed
				if err := p.Pack(xs); err != nil {
					t.Fatal(err)
				}
				for _, impl := range Impls() {
					want, got := make([][]float32, c.batch), make([][]float32, c.batch)
					for j := range want {
						want[j], got[j] = make([]float32, c.rows), make([]float32, c.rows)
					}
					if err := RowsBatchStride(impl, typ, rows, stride, c.n, xs, want); err != nil {
						t.Fatalf("%s/%v: %v", name, impl, err)
					}
					if err := RowsPacked(impl, typ, rows, stride, c.n, &p, got); err != nil {
						t.Fatalf("%s/%v: %v", name, impl, err)
					}
					for j := range want {
						for i := range want[j] {
							if !sameBits(got[j][i], want[j][i]) {
								t.Fatalf("%s/%v/wild %v: vector %d row %d: %g, RowsBatch %g", name, impl, wild, j, i, got[j][i], want[j][i])
							}
						}
					}
				}
			}
		}
	}
}

// TestPackRefusesMixedLengths: the vectors of a pack share one length.
func TestPackRefusesMixedLengths(t *testing.T) {
	t.Parallel()
	a, b := new(X), new(X)
	if err := a.Set(make([]float32, 256)); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(make([]float32, 512)); err != nil {
		t.Fatal(err)
	}
	var p Packed
	if err := p.Pack([]*X{a, b}); err == nil {
		t.Fatal("packed vectors of 256 and 512 elements")
	}
}

// TestWorth: a batch takes the multi-vector kernels from three vectors
// on (three padded to a group), and a Packed reused for a batch that pads
// gives the padded group's vectors their own products.
func TestWorth(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]bool{0: false, 1: false, 2: false, 3: true, 4: true, 5: true, 7: true} {
		if got := Worth(n); got != want {
			t.Errorf("Worth(%d) = %v, want %v", n, got, want)
		}
	}
	const rows, n = 8, 512
	w := randomRows(t, quant.Q4_K, rows, n, 3, false)
	xs := make([]*X, 7)
	for j := range xs {
		xs[j] = new(X)
		if err := xs[j].Set(randomVector(n, uint64(j+11), false)); err != nil {
			t.Fatal(err)
		}
	}
	var p Packed
	for _, batch := range []int{7, 3} { // the second pads where the first held a vector
		if err := p.Pack(xs[:batch]); err != nil {
			t.Fatal(err)
		}
		for _, impl := range Impls() {
			want, got := make([][]float32, batch), make([][]float32, batch)
			for j := range want {
				want[j], got[j] = make([]float32, rows), make([]float32, rows)
			}
			if err := RowsBatch(impl, quant.Q4_K, w, n, xs[:batch], want); err != nil {
				t.Fatal(err)
			}
			if err := RowsPacked(impl, quant.Q4_K, w, len(w)/rows, n, &p, got); err != nil {
				t.Fatal(err)
			}
			for j := range want {
				for i := range want[j] {
					if !sameBits(got[j][i], want[j][i]) {
						t.Fatalf("batch %d, %v: vector %d row %d: %g, RowsBatch %g", batch, impl, j, i, got[j][i], want[j][i])
					}
				}
			}
		}
	}
}
