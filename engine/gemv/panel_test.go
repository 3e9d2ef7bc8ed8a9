package gemv

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// TestRowsPanel: with panels packed, RowsPacked gives ref.go's bits for
// every vector and row: whole panels of eight rows and a short last one,
// rows as a view of a wider matrix, batches of one and two panel groups
// with and without vectors past them (which the four-vector kernels and
// the one-vector ones take), extreme weights and vectors (the integer
// sums' bounds) included.
func TestRowsPanel(t *testing.T) {
	t.Parallel()
	if !panelReady() {
		t.Skip("no panel kernels on this CPU (AVX-512 with VNNI and DQ)")
	}
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		for _, c := range []struct{ rows, n, width, batch int }{
			{8, 256, 256, 16},    // one panel, one group
			{21, 768, 768, 37},   // two panels and five rows; two groups, a four-vector group and one more
			{16, 1280, 1536, 32}, // a view of five blocks of six
			{13, 1024, 1024, 19}, // a panel and five rows; a group and three more (padded to a four-vector group)
			{3, 512, 512, 16},    // no whole panel
			{9, 4096, 4096, 48},  // three groups
		} {
			for _, wild := range []bool{false, true} {
				name := fmt.Sprintf("%v/%d rows of %d of %d/batch %d/wild %v", typ, c.rows, c.n, c.width, c.batch, wild)
				_, rows, stride, xs := viewBatch(t, typ, c.rows, c.n, c.width, c.batch, wild)
				var p Packed
				if err := p.Pack(xs); err != nil {
					t.Fatal(err)
				}
				p.pn.pack(xs, c.n/Block, nil) // as Pack does on a CPU without the tile unit
				if p.pn.pg != c.batch/PanelGroup {
					t.Fatalf("%s: %d panel groups", name, p.pn.pg)
				}
				// Shared out over goroutines (PackWith), the layout is the same.
				var q panels
				q.pack(xs, c.n/Block, func(n int, fn func(int)) {
					var wg sync.WaitGroup
					for i := range n {
						wg.Go(func() { fn(i) })
					}
					wg.Wait()
				})
				if !slices.Equal(q.x, p.pn.x) || !slices.Equal(q.s, p.pn.s) || !slices.Equal(q.d, p.pn.d) {
					t.Fatalf("%s: the panels laid out in parallel differ", name)
				}
				got := make([][]float32, c.batch)
				for j := range got {
					got[j] = make([]float32, c.rows)
				}
				if err := RowsPacked(AVX512, typ, rows, stride, c.n, &p, got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for j := range got {
					for i := range got[j] {
						if want := refRow(typ, rows[i*stride:], c.n, xs[j]); !sameBits(got[j][i], want) {
							t.Fatalf("%s: vector %d row %d: %g, ref.go %g", name, j, i, got[j][i], want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkRowsPanel: Q4_K and Q6_K rows against a batch, one thread, the panel
// kernels against the four-vector ones (the way without the tile unit
// before them); GMAC/s of the products.
func BenchmarkRowsPanel(b *testing.B) {
	if !panelReady() {
		b.Skip("no panel kernels on this CPU")
	}
	const nr, n = 512, 4096
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		for _, batch := range []int{16, 64, 128} {
			_, rows, stride, xs := viewBatch(b, typ, nr, n, n, batch, false)
			ys := make([][]float32, batch)
			for j := range ys {
				ys[j] = make([]float32, nr)
			}
			for _, way := range []string{"four", "panel"} {
				b.Run(fmt.Sprintf("%v/T%d/%s", typ, batch, way), func(b *testing.B) {
					var p Packed
					if err := p.Pack(xs); err != nil {
						b.Fatal(err)
					}
					p.pn.pg = 0
					if way == "panel" {
						p.pn.pack(xs, n/Block, nil)
					}
					for b.Loop() {
						if err := RowsPacked(AVX512, typ, rows, stride, n, &p, ys); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(nr*n*batch)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
				})
			}
		}
	}
}

// BenchmarkPanelPack: laying out 128 vectors of 4096 for the panel
// kernels (Pack's extra work where they run), one thread.
func BenchmarkPanelPack(b *testing.B) {
	_, _, _, xs := viewBatch(b, quant.Q4_K, 1, 4096, 4096, 128, false)
	var pn panels
	for b.Loop() {
		pn.pack(xs, 4096/Block, nil)
	}
}
