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

// BenchmarkRowsPacked: one thread, a batch of 2, 3, 4, 7, 8 or 16 vectors
// (2 too few to pad, 3 padded to a group, 7 a group and a padded one) over
// a 4096 x 4096 matrix of each K-quant, Q8_0, Q4_0 and 16-bit float format
// (9-32 MiB, in cache here: the batched products are bound by
// arithmetic), RowsPacked against RowsBatch for each family with
// four-vector kernels; MB/s of weights times the batch.
func BenchmarkRowsPacked(b *testing.B) {
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.F16, quant.BF16} {
		benchPacked(b, typ)
	}
}

func benchPacked(b *testing.B, typ quant.Type) {
	const rows, n = 4096, 4096
	w := randomRows(&testing.T{}, typ, rows, n, 1, false)
	for _, batch := range []int{2, 3, 4, 7, 8, 16} {
		xs, ys := benchBatch(b, batch, rows, n)
		var p Packed
		if err := p.Pack(xs); err != nil {
			b.Fatal(err)
		}
		for _, impl := range Impls() {
			if !Packs(impl, typ) {
				continue
			}
			benchPackedWays(b, impl, typ, w, n, batch, &p, xs, ys)
		}
	}
}

// benchBatch is a batch of random vectors of n elements and their
// outputs of rows rows, as the batched benchmarks take them.
func benchBatch(b *testing.B, batch, rows, n int) ([]*X, [][]float32) {
	xs := make([]*X, batch)
	ys := make([][]float32, batch)
	for j := range xs {
		xs[j] = new(X)
		if err := xs[j].Set(randomVector(n, uint64(j+2), false)); err != nil {
			b.Fatal(err)
		}
		ys[j] = make([]float32, rows)
	}
	return xs, ys
}

// benchPackedWays times RowsBatch, then RowsPacked, with impl's kernels.
func benchPackedWays(b *testing.B, impl Impl, typ quant.Type, w []byte, n, batch int, p *Packed, xs []*X, ys [][]float32) {
	rows := len(ys[0])
	for _, way := range []string{"batch", "packed"} {
		b.Run(fmt.Sprintf("%v/%v/T%d/%s", typ, impl, batch, way), func(b *testing.B) {
			b.SetBytes(int64(len(w) * batch))
			for b.Loop() {
				var err error
				if way == "packed" {
					err = RowsPacked(impl, typ, w, len(w)/rows, n, p, ys)
				} else {
					err = RowsBatch(impl, typ, w, n, xs, ys)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRowsTiled: one thread, a batch of 4 to 64 vectors over a 4096 x
// 4096 matrix of each tiled format, RowsTiled against RowsPacked (the
// four-vector kernels); MB/s of weights times the batch.
func BenchmarkRowsTiled(b *testing.B) {
	impl := Detect()
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.BF16} {
		if !Tiled(impl, typ) {
			continue
		}
		const rows, n = 4096, 4096
		w := randomRows(&testing.T{}, typ, rows, n, 1, false)
		for _, batch := range []int{2, 3, 4, 6, 8, 12, 16, 32, 64} {
			xs, ys := benchBatch(b, batch, rows, n)
			var p Packed
			var tl Tiles
			if err := p.Pack(xs); err != nil {
				b.Fatal(err)
			}
			if err := tl.Pack(xs); err != nil {
				b.Fatal(err)
			}
			for _, way := range []string{"packed", "tiled"} {
				b.Run(fmt.Sprintf("%v/T%d/%s", typ, batch, way), func(b *testing.B) {
					b.SetBytes(int64(len(w) * batch))
					for b.Loop() {
						var err error
						if way == "tiled" {
							err = RowsTiled(impl, typ, w, len(w)/rows, n, &tl, ys)
						} else {
							err = RowsPacked(impl, typ, w, len(w)/rows, n, &p, ys)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
