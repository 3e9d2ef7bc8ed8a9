package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// gemvStagedVariants are the staged-path configurations the sweep and
// TestGEMVStaged cover; {0, 0} is the __ldg direct path (staging off).
var gemvStagedVariants = []gemvStagedConfig{
	{0, 0}, {4, 2}, {4, 4}, {8, 1}, {8, 2}, {8, 3}, {8, 4}, {2, 8},
}

// withStaged runs fn with a view of k whose staged path is configured as
// v.
func withStaged(k *Kernels, v gemvStagedConfig, fn func(k *Kernels)) {
	t := k.Tuning()
	t.gemvStaged = v
	fn(k.WithTuning(t))
}

// TestGEMVStagedGeometry checks the staged grid on the CPU: every row
// group is owned by one warp of the launched grid, each warp gets at most
// one group more than any other, and the staged vectors fit the limit.
func TestGEMVStagedGeometry(t *testing.T) {
	t.Parallel()
	for _, v := range gemvStagedVariants[1:] {
		tu := baseTuning()
		tu.gemvStaged = v
		func() {
			for _, sh := range [][2]int{{14336, 4096}, {4096, 14336}, {257, 4096}, {1, 512}, {33, 14336}} {
				for _, nb := range []int{1, 2} {
					p := gemvPlan{kind: planDirect, rows: 4, stageX: true}
					blocks, threads, smem := tu.gemvGeometry(quant.Q4_K, p, nb, sh[0], sh[1], 132, gemvSharedLimit)
					staged := nb*sh[1]*4 <= gemvSharedLimit
					if !staged {
						if smem != 0 {
							t.Errorf("%v %v nb %d: %d bytes of shared memory for the unstaged path", v, sh, nb, smem)
						}
						continue
					}
					groups := ceilDiv(sh[0], 4)
					warps := blocks * threads / 32
					if smem != nb*sh[1]*4 || threads%32 != 0 || threads > 256 || warps < 1 {
						t.Fatalf("%v %v nb %d: %d blocks x %d threads, %d bytes", v, sh, nb, blocks, threads, smem)
					}
					if lo, hi := groups/warps, ceilDiv(groups, warps); warps > groups+threads/32-1 || hi-lo > 1 {
						t.Errorf("%v %v nb %d: %d groups over %d warps", v, sh, nb, groups, warps)
					}
				}
			}
		}()
	}
}

// TestGEMVStaged checks every staged configuration of the sweep (and the
// unstaged direct path) for the direct-path types at one and two vectors
// (Q4_K and Q5_K take the direct path under every configuration),
// with TestGEMV's tolerance against float64 dot products of the
// dequantized weights.
func TestGEMVStaged(t *testing.T) {
	shapes := []struct{ rows, cols int }{{257, 4096}, {33, 14336}, {1, 512}}
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q5_K, quant.F16, quant.BF16} {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%v/%dx%d", typ, sh.rows, sh.cols), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ)+7, uint64(sh.cols)))
				data, deq := randMatrix(typ, sh.rows, sh.cols, uint64(sh.rows*sh.cols)+uint64(typ)+7)
				xs := randVec(r, 2*sh.cols, 1)
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					w := Matrix{Type: typ, Rows: sh.rows, Cols: sh.cols, Ptr: put(a, data)}
					x := put(a, xs)
					y := a.alloc(int64(2 * sh.rows * 4))
					for _, v := range gemvStagedVariants {
						for _, nb := range []int{1, 2} {
							poison(a, y, 2*sh.rows)
							withStaged(k, v, func(k *Kernels) { must(k.GEMV(c, 0, w, x, y, nb)) })
							got := get[float32](a, y, nb*sh.rows)
							for b := 0; b < nb; b++ {
								for i := 0; i < sh.rows; i++ {
									var ref, mag float64
									for j, wv := range deq[i*sh.cols : (i+1)*sh.cols] {
										p := float64(wv) * float64(xs[b*sh.cols+j])
										ref += p
										mag += math.Abs(p)
									}
									g := float64(got[b*sh.rows+i])
									if e := math.Abs(g - ref); !(e <= 2e-6*mag+1e-7) {
										t.Fatalf("%+v nb %d: y[%d][%d] = %v, float64 ref %v (err %.3g)", v, nb, b, i, g, ref, e)
									}
								}
							}
						}
					}
				})
			})
		}
	}
}

// BenchmarkGEMVStagedSweep measures the staged types (F16, BF16) at one and
// two vectors under every staged configuration (and staging off), as
// ratios to the D2D copy bandwidth of the same run, like
// BenchmarkMatVecTable (run with -test.benchtime 1x). Q4_K and Q5_K ran
// slower staged than on the direct path; their kernels no longer contain
// the staged path.
func BenchmarkGEMVStagedSweep(b *testing.B) {
	ceiling := copyBandwidth(b)
	d, k := gpu(b)
	var out strings.Builder
	fmt.Fprintf(&out, "D2D copy %.0f GB/s; cells: ratio to D2D for 14336x4096 nb1, nb2, 4096x14336 nb1\n", ceiling/1e9)
	err := d.Do(func(c *cudadrv.Ctx) error {
		for _, typ := range []quant.Type{quant.F16, quant.BF16} {
			a := &arena{c: c}
			const rows, cols = 14336, 4096
			rb, _ := typ.RowBytes(cols)
			size := rb * rows
			copies := int(max(4, (512<<20)/size))
			one := make([]byte, size)
			must(quant.FillRandomParallel(typ, one, 1, 0.05))
			ws, tws := make([]Matrix, copies), make([]Matrix, copies)
			for i := range ws {
				ws[i] = Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: a.alloc(size)}
				tws[i] = Matrix{Type: typ, Rows: cols, Cols: rows, Ptr: ws[i].Ptr}
				must(c.CopyHtoD(ws[i].Ptr, one, 0))
			}
			r := rand.New(rand.NewPCG(1, 1))
			x := put(a, randVec(r, 8*14336, 1))
			y := a.alloc(8 * 14336 * 4)
			for _, v := range gemvStagedVariants {
				fmt.Fprintf(&out, "%-6v w%d b%d", typ, v.warps, v.blocksPerSM)
				withStaged(k, v, func(k *Kernels) {
					for _, cs := range []struct {
						ms []Matrix
						nb int
					}{{ws, 1}, {ws, 2}, {tws, 1}} {
						us := timeIt(c, 300, func(i int) error { return k.GEMV(c, 0, cs.ms[i%len(cs.ms)], x, y, cs.nb) }) * 1e3
						fmt.Fprintf(&out, "  %7.2f us %5.3f", us, float64(size)/(us/1e6)/ceiling)
					}
				})
				fmt.Fprintln(&out)
			}
			a.free()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("\n%s", out.String())
}
