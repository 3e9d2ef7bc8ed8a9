package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkMatVecTable measures, in one process and with each type's data
// set up once, what BenchmarkGEMV and BenchmarkGEMM measure: GEMV on
// 14336x4096 weights for 1, 2, 4 and 8 vectors (and 4096x14336 for one),
// cycling through >= 512 MiB of copies so the weights come from HBM, as a
// ratio to the device-to-device copy bandwidth measured in the same run;
// then the prefill GEMM (64 and 512 tokens) in TFLOP/s. Prints one table
// (run with -test.benchtime 1x; each entry is the mean of 300 launches).
func BenchmarkMatVecTable(b *testing.B) {
	ceiling := copyBandwidth(b)
	d, k := gpu(b)
	var out strings.Builder
	fmt.Fprintf(&out, "D2D copy %.0f GB/s (read+write)\n", ceiling/1e9)
	fmt.Fprintf(&out, "%-9s %26s %26s %26s %26s %26s\n", "GEMV", "nb1", "nb2", "nb4", "nb8", "nb1 4096x14336")
	var gemm strings.Builder
	err := d.Do(func(c *cudadrv.Ctx) error {
		for _, typ := range gemvTypes {
			a := &arena{c: c}
			const rows, cols = 14336, 4096
			rb, _ := typ.RowBytes(cols)
			size := rb * rows
			copies := int(max(4, (512<<20)/size))
			one := make([]byte, size)
			must(quant.FillRandomParallel(typ, one, 1, 0.05))
			ws := make([]Matrix, copies)
			for i := range ws {
				ws[i] = Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: a.alloc(size)}
				must(c.CopyHtoD(ws[i].Ptr, one, 0))
			}
			r := rand.New(rand.NewPCG(1, 1))
			x := put(a, randVec(r, 8*14336, 1))
			y := a.alloc(8 * 14336 * 4)
			cell := func(ms []Matrix, nb int, bytes int64) string {
				us := timeIt(c, 300, func(i int) error { return k.GEMV(c, 0, ms[i%len(ms)], x, y, nb) }) * 1e3
				return fmt.Sprintf("%7.2f us %5.3f xD2D", us, float64(bytes)/(us/1e6)/ceiling)
			}
			fmt.Fprintf(&out, "%-9v", typ)
			for _, nb := range []int{1, 2, 4, 8} {
				fmt.Fprintf(&out, " %26s", cell(ws, nb, size))
			}
			if typ != quant.INT8Row { // same bytes read as a 4096x14336 matrix
				tws := make([]Matrix, copies)
				for i := range ws {
					tws[i] = Matrix{Type: typ, Rows: cols, Cols: rows, Ptr: ws[i].Ptr}
				}
				fmt.Fprintf(&out, " %26s", cell(tws, 1, size))
			}
			fmt.Fprintln(&out)
			if typ != quant.F32 && typ != quant.INT8Row {
				xm := put(a, randVec(r, 512*cols, 1))
				ym := a.alloc(512 * rows * 4)
				fmt.Fprintf(&gemm, "GEMM %-9v", typ)
				for _, m := range []int{64, 512} {
					us := timeIt(c, 20, func(int) error { return k.GEMM(c, 0, ws[0], xm, ym, m) }) * 1e3
					fmt.Fprintf(&gemm, "  m%-3d %8.1f us %6.1f TFLOP/s", m, us, 2*float64(m)*rows*cols/(us/1e6)/1e12)
				}
				fmt.Fprintln(&gemm)
			}
			a.free()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("\n%s%s", out.String(), gemm.String())
}
