package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// gemmShapes are the Llama-3.1-8B projections (rows x cols) and the token
// counts each is measured at; the output matrix runs only for the last
// token of each sequence, so only small m.
var gemmShapes = []struct {
	rows, cols int
	ms         []int
}{
	{4096, 4096, []int{16, 64, 128, 512, 2048}},
	{1024, 4096, []int{16, 64, 128, 512, 2048}},
	{14336, 4096, []int{16, 64, 128, 512, 2048}},
	{4096, 14336, []int{16, 64, 128, 512, 2048}},
	{128256, 4096, []int{16, 64, 128}},
}

// gemmWeights uploads copies of one random rows x cols matrix of type typ,
// enough that cycling through them reads weights from HBM, not the L2.
func gemmWeights(c *cudadrv.Ctx, a *arena, typ quant.Type, rows, cols int) []Matrix {
	rb, _ := typ.RowBytes(int64(cols))
	size := rb * int64(rows)
	one := make([]byte, size)
	must(quant.FillRandomParallel(typ, one, 3, 0.05))
	copies := int(min(4, max(1, (160<<20)/size)))
	ws := make([]Matrix, copies)
	for i := range ws {
		ws[i] = Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: a.alloc(size)}
		must(c.CopyHtoD(ws[i].Ptr, one, 0))
	}
	return ws
}

// gemmIters picks the launches per measurement: ~2 TFLOP in all, 5..50.
func gemmIters(flop float64) int { return int(min(50, max(5, 2e12/flop))) }

// BenchmarkGEMMSweep prints, for Q4_K, Q6_K and F16 weights on every 8b
// shape and m = 16..2048, the TFLOP/s of the automatic choice, of every f16
// GEMM configuration forced, and of the on-the-fly kernel (m <= 512); then
// the dequantization and x conversion bandwidth, and the weight-panel cap
// sweep. Lines are printed as they are measured. Run with -test.benchtime
// 1x.
func BenchmarkGEMMSweep(b *testing.B) {
	d, k := gpu(b)
	if !k.mma() {
		b.Skipf("the f16 GEMM path needs compute_80, device loaded %s", k.Arch)
	}
	fmt.Printf("device-to-device copy: %.0f GB/s (read+write)\n", copyBandwidth(b)/1e9)
	err := d.Do(func(c *cudadrv.Ctx) error {
		r := rand.New(rand.NewPCG(4, 4))
		a := &arena{c: c}
		defer a.free()
		x := put(a, randVec(r, 2048*14336, 1))
		y := a.alloc(2048 * 14336 * 4) // >= 128 x 128256
		for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.F16} {
			for _, sh := range gemmShapes {
				wa := &arena{c: c}
				ws := gemmWeights(c, wa, typ, sh.rows, sh.cols)
				for _, m := range sh.ms {
					flop := 2 * float64(m) * float64(sh.rows) * float64(sh.cols)
					iters := gemmIters(flop)
					variants := []string{"auto"}
					if m <= 512 {
						variants = append(variants, "fused")
					}
					for _, g := range gemmConfigs {
						variants = append(variants, g.name)
					}
					line := fmt.Sprintf("sweep %-5v %6dx%-5d m%-5d", typ, sh.rows, sh.cols, m)
					for _, v := range variants {
						var us float64
						withTuning(k, func(tu *gemmTuning) {
							switch v {
							case "fused":
								tu.fusedMaxM = 1 << 30
							case "auto":
							default:
								tu.config = v
							}
						}, func(k *Kernels) {
							us = timeIt(c, iters, func(i int) error { return k.GEMM(c, 0, ws[i%len(ws)], x, y, m) }) * 1e3
						})
						label := v
						if v == "auto" {
							label = "auto=" + gemmPick(k.tune.gemm, m, min(sh.rows, planGEMM(k.tune.gemm, ws[0], m, typ == quant.F16).panelRowsOr(sh.rows)), k.SMs).name
						}
						line += fmt.Sprintf(" %s %.1f", label, flop/(us/1e6)/1e12)
					}
					fmt.Println(line, "TFLOP/s")
				}
				// Dequantization of the whole matrix, both store patterns.
				out := wa.alloc(int64(sh.rows) * int64(sh.cols) * 2)
				suf, _ := ws[0].check("bench")
				line := fmt.Sprintf("dequant %-5v %6dx%-5d", typ, sh.rows, sh.cols)
				for _, direct := range []bool{false, true} {
					var us float64
					withTuning(k, func(tu *gemmTuning) { tu.deqDirect = direct }, func(k *Kernels) {
						us = timeIt(c, 20, func(i int) error { return k.gemmDequant(c, 0, suf, ws[i%len(ws)], 0, sh.rows, out) }) * 1e3
					})
					bytes := float64(ws[0].Bytes()) + 2*float64(sh.rows)*float64(sh.cols)
					line += fmt.Sprintf("  direct=%v %7.1f us %5.0f GB/s", direct, us, bytes/(us/1e6)/1e9)
				}
				fmt.Println(line, "(read+write)")
				wa.free()
			}
		}
		x16 := a.alloc(2048 * 14336 * 2)
		us := timeIt(c, 20, func(int) error { return k.gemmX16(c, 0, x, x16, 2048*14336) }) * 1e3
		fmt.Printf("x16 2048x14336 %8.1f us %7.0f GB/s (read+write)\n", us, 6*2048*14336/(us/1e6)/1e9)
		for _, sh := range []struct{ rows, cols int }{{14336, 4096}, {4096, 14336}} {
			wa := &arena{c: c}
			ws := gemmWeights(c, wa, quant.Q4_K, sh.rows, sh.cols)
			for _, m := range []int{512, 2048} {
				flop := 2 * float64(m) * float64(sh.rows) * float64(sh.cols)
				line := fmt.Sprintf("panel Q4_K %6dx%-5d m%-5d", sh.rows, sh.cols, m)
				for _, mib := range []int64{32, 128, 1024} {
					var us float64
					withTuning(k, func(tu *gemmTuning) { tu.panelBytes = mib << 20 }, func(k *Kernels) {
						us = timeIt(c, gemmIters(flop), func(i int) error { return k.GEMM(c, 0, ws[i%len(ws)], x, y, m) }) * 1e3
					})
					line += fmt.Sprintf(" %dMiB %.1f", mib, flop/(us/1e6)/1e12)
				}
				fmt.Println(line, "TFLOP/s")
			}
			wa.free()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// panelRowsOr returns the plan's panel rows, or n when the weights are
// used in place.
func (p gemmPlan) panelRowsOr(n int) int {
	if p.panelRows == 0 {
		return n
	}
	return p.panelRows
}

// BenchmarkGEMMPrefill8B times the GEMMs of a whole Llama-3.1-8B Q4_K_M
// prefill of m tokens: 32 layers of q, k, v, o (4096/1024 x 4096), gate,
// up (14336 x 4096) and down (4096 x 14336), each layer's matrices distinct
// in device memory, with the synth types (attn_v and ffn_down Q6_K in the
// 16 use_more_bits layers, Q4_K elsewhere). Reports the time per
// projection summed over the layers, the total, the GEMM-only tokens per
// second, and the same with the on-the-fly kernel.
func BenchmarkGEMMPrefill8B(b *testing.B) {
	d, k := gpu(b)
	const layers, dim, kv, ffn = 32, 4096, 1024, 14336
	more := func(i int) bool { return i < layers/8 || i >= 7*layers/8 || (i-layers/8)%3 == 2 }
	type proj struct {
		name       string
		rows, cols int
		q6         bool // Q6_K in the use_more_bits layers
	}
	projs := []proj{{"q", dim, dim, false}, {"k", kv, dim, false}, {"v", kv, dim, true}, {"o", dim, dim, false},
		{"gate", ffn, dim, false}, {"up", ffn, dim, false}, {"down", dim, ffn, true}}
	err := d.Do(func(c *cudadrv.Ctx) error {
		a := &arena{c: c}
		defer a.free()
		// One random template per (type, shape), copied into every layer.
		tmpl := map[string]cudadrv.DevPtr{}
		w := make([][]Matrix, len(projs))
		for pi, p := range projs {
			for l := 0; l < layers; l++ {
				typ := quant.Q4_K
				if p.q6 && more(l) {
					typ = quant.Q6_K
				}
				rb, _ := typ.RowBytes(int64(p.cols))
				size := rb * int64(p.rows)
				key := fmt.Sprint(typ, p.rows, p.cols)
				if _, ok := tmpl[key]; !ok {
					one := make([]byte, size)
					must(quant.FillRandomParallel(typ, one, uint64(pi), 0.05))
					tmpl[key] = put(a, one)
				}
				m := Matrix{Type: typ, Rows: p.rows, Cols: p.cols, Ptr: a.alloc(size)}
				must(c.CopyDtoD(m.Ptr, tmpl[key], size, 0))
				w[pi] = append(w[pi], m)
			}
		}
		r := rand.New(rand.NewPCG(5, 5))
		for _, m := range []int{512, 2048} {
			x := put(a, randVec(r, m*ffn, 1))
			y := a.alloc(int64(m) * ffn * 4)
			for _, variant := range []string{"auto", "fused"} {
				if variant == "fused" && m > 512 {
					continue
				}
				var total, flop float64
				line := ""
				withTuning(k, func(tu *gemmTuning) {
					if variant == "fused" {
						tu.fusedMaxM = 1 << 30
					}
				}, func(k *Kernels) {
					for pi, p := range projs {
						ms := timeIt(c, 3, func(int) error {
							for l := 0; l < layers; l++ {
								if err := k.GEMM(c, 0, w[pi][l], x, y, m); err != nil {
									return err
								}
							}
							return nil
						})
						f := 2 * float64(m) * float64(p.rows) * float64(p.cols) * layers
						line += fmt.Sprintf(" %s %.2f ms (%.0f TFLOP/s)", p.name, ms, f/(ms/1e3)/1e12)
						total += ms
						flop += f
					}
				})
				fmt.Printf("prefill8b %s m%d:%s\n", variant, m, line)
				fmt.Printf("prefill8b %s m%d: total %.2f ms, %.0f TFLOP/s, %.0f tok/s (GEMMs only)\n", variant, m, total, flop/(total/1e3)/1e12, float64(m)/(total/1e3))
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
