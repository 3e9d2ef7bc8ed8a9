package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// refDot returns sum_j deq[row][j] x[j] in float64 and sum |deq x| (the
// scale TestGEMV's tolerance is relative to).
func refDot(deq []float32, cols, row int, x []float32) (ref, mag float64) {
	for j, wv := range deq[row*cols : (row+1)*cols] {
		p := float64(wv) * float64(x[j])
		ref += p
		mag += math.Abs(p)
	}
	return ref, mag
}

// gemvTol is TestGEMV's tolerance.
func gemvTol(mag float64) float64 { return 2e-6*mag + 1e-7 }

// TestGEMVFused checks gemv_fused's plain mode (up to three matrices of
// mixed types and heights in one launch, as decode's q, k, v; and a single
// Q6_K matrix, the Q6_K direct path, also 2 bytes past an aligned address)
// against float64 dot products of the dequantized weights, with TestGEMV's
// tolerance.
func TestGEMVFused(t *testing.T) {
	type mat struct {
		typ  quant.Type
		rows int
		off  int
	}
	cases := []struct {
		name string
		cols int
		ms   []mat
	}{
		{"qkv-q4k-q4k-q6k", 4096, []mat{{quant.Q4_K, 259, 0}, {quant.Q4_K, 66, 0}, {quant.Q6_K, 67, 0}}},
		{"qkv-q4k-q4k-q4k", 512, []mat{{quant.Q4_K, 64, 0}, {quant.Q4_K, 32, 0}, {quant.Q4_K, 32, 0}}},
		{"q6k-alone", 14336, []mat{{quant.Q6_K, 37, 0}}},
		{"q6k-misaligned", 4096, []mat{{quant.Q6_K, 33, 2}}},
		{"f16-bf16-q6k", 1024, []mat{{quant.F16, 45, 0}, {quant.BF16, 7, 0}, {quant.Q6_K, 9, 0}}},
		{"two", 3584, []mat{{quant.Q6_K, 5, 0}, {quant.Q4_K, 100, 0}}},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 77))
			xs := randVec(r, 2*tc.cols, 1)
			datas := make([][]byte, len(tc.ms))
			deqs := make([][]float32, len(tc.ms))
			for i, m := range tc.ms {
				datas[i], deqs[i] = randMatrix(m.typ, m.rows, tc.cols, uint64(100*ci+i))
			}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				x := put(a, xs)
				outs := make([]GEMVOut, len(tc.ms))
				for i, m := range tc.ms {
					base := a.alloc(int64(len(datas[i]) + 16))
					must(c.CopyHtoD(base+cudadrv.DevPtr(m.off), datas[i], 0))
					outs[i] = GEMVOut{W: Matrix{Type: m.typ, Rows: m.rows, Cols: tc.cols, Ptr: base + cudadrv.DevPtr(m.off)}, Y: a.alloc(int64(2 * m.rows * 4))}
				}
				for nb := 1; nb <= MaxFusedGEMVBatch; nb++ {
					for i, m := range tc.ms {
						poison(a, outs[i].Y, 2*m.rows)
					}
					must(k.GEMVFused(c, 0, x, nb, outs...))
					for i, m := range tc.ms {
						got := get[float32](a, outs[i].Y, nb*m.rows)
						for b := 0; b < nb; b++ {
							for row := 0; row < m.rows; row++ {
								ref, mag := refDot(deqs[i], tc.cols, row, xs[b*tc.cols:])
								g := float64(got[b*m.rows+row])
								if e := math.Abs(g - ref); !(e <= gemvTol(mag)) {
									t.Fatalf("nb %d matrix %d (%v): y[%d][%d] = %v, float64 ref %v (err %.3g)", nb, i, m.typ, b, row, g, ref, e)
								}
							}
						}
					}
				}
			})
		})
	}
	// Not fusable: Q8_0, unequal widths, three vectors, misaligned Q4_K.
	_, k := gpu(t)
	q4 := Matrix{Type: quant.Q4_K, Rows: 4, Cols: 256, Ptr: 256}
	for _, tc := range []struct {
		nb int
		ms []Matrix
	}{
		{1, []Matrix{{Type: quant.Q8_0, Rows: 4, Cols: 256, Ptr: 256}}},
		{1, []Matrix{q4, {Type: quant.Q4_K, Rows: 4, Cols: 512, Ptr: 256}}},
		{3, []Matrix{q4}},
		{1, []Matrix{{Type: quant.Q4_K, Rows: 4, Cols: 256, Ptr: 258}}},
		{1, []Matrix{q4, q4, q4, q4}},
	} {
		if k.CanFuseGEMV(tc.nb, tc.ms...) {
			t.Errorf("CanFuseGEMV(%d, %+v) = true", tc.nb, tc.ms)
		}
	}
}

// TestGEMVGLU checks the gate/up GEMV with the activation in its epilogue
// against float64: act(g)*u with g, u the float64 dot products.
// Tolerance: the GEMV tolerance of g and u carried through the activation
// (|act'| < 1.2) plus float32 rounding of the result.
func TestGEMVGLU(t *testing.T) {
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.F16} {
		for _, act := range []GLU{SwiGLU, GeGLU} {
			t.Run(fmt.Sprintf("%v/%d", typ, act), func(t *testing.T) {
				const rows, cols = 203, 4096
				r := rand.New(rand.NewPCG(uint64(typ), uint64(act)))
				xs := randVec(r, 2*cols, 1)
				gd, gq := randMatrix(typ, rows, cols, 11+uint64(typ))
				ud, uq := randMatrix(typ, rows, cols, 12+uint64(typ))
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					gate := Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: put(a, gd)}
					up := Matrix{Type: typ, Rows: rows, Cols: cols, Ptr: put(a, ud)}
					x, out := put(a, xs), a.alloc(2*rows*4)
					for nb := 1; nb <= MaxFusedGEMVBatch; nb++ {
						poison(a, out, 2*rows)
						must(k.GEMVGLU(c, 0, gate, up, x, out, nb, act))
						got := get[float32](a, out, nb*rows)
						for b := 0; b < nb; b++ {
							for row := 0; row < rows; row++ {
								g, gm := refDot(gq, cols, row, xs[b*cols:])
								u, um := refDot(uq, cols, row, xs[b*cols:])
								var av float64
								if act == SwiGLU {
									av = g / (1 + math.Exp(-g))
								} else {
									av = 0.5 * g * (1 + math.Tanh(0.7978845608028654*(g+0.044715*g*g*g)))
								}
								want := av * u
								tol := 1.2*math.Abs(u)*gemvTol(gm) + math.Abs(av)*gemvTol(um) + 3e-7*math.Abs(want) + 1e-7
								if e := math.Abs(float64(got[b*rows+row]) - want); !(e <= tol) {
									t.Fatalf("nb %d: out[%d][%d] = %v, float64 ref %v (err %.3g > %.3g)", nb, b, row, got[b*rows+row], want, e, tol)
								}
							}
						}
					}
				})
			})
		}
	}
}

// TestAddRMSNorm: x += a exactly as Add (float32 sum), then the norm with
// TestRMSNorm's tolerance.
func TestAddRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, dim := range []int{256, 4096} {
		const n = 3
		xs, as, w := randVec(r, n*dim, 2), randVec(r, n*dim, 1), randVec(r, dim, 1)
		run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
			x, ap, wp := put(a, xs), put(a, as), put(a, w)
			y := a.alloc(int64(n * dim * 4))
			poison(a, y, n*dim)
			must(k.AddRMSNorm(c, 0, x, ap, wp, y, n, dim, 1e-5))
			gx, gy := get[float32](a, x, n*dim), get[float32](a, y, n*dim)
			sum := make([]float32, n*dim)
			for i := range sum {
				sum[i] = xs[i] + as[i]
			}
			closeRel(t, "add_rmsnorm x", gx, sum, 0, 1)
			for i := 0; i < n; i++ {
				closeRel(t, "add_rmsnorm y", gy[i*dim:(i+1)*dim], rmsRef(sum[i*dim:(i+1)*dim], w, 1e-5), 1e-6, 1e-3)
			}
		})
	}
}

// TestRoPEStore: q and k rotated as TestRoPE's reference (relative 1e-6),
// the rotated k and the v rows stored in the cache bit-exactly where
// StoreKV puts them.
func TestRoPEStore(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const ntok, heads, kvheads, hd, maxCtx, nslot = 3, 8, 2, 128, 40, 2
	const qd, kvd = heads * hd, kvheads * hd
	slots, positions := []int32{1, 0, 1}, []int32{0, 39, 17}
	for _, neox := range []bool{false, true} {
		freqs, err := RopeFreqs(500000, hd, nil)
		if err != nil {
			t.Fatal(err)
		}
		qs, ks, vs := randVec(r, ntok*qd, 1), randVec(r, ntok*kvd, 1), randVec(r, ntok*kvd, 1)
		run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
			kv := KVCache{K: a.alloc(nslot * maxCtx * kvd * 4), V: a.alloc(nslot * maxCtx * kvd * 4), MaxCtx: maxCtx, KVDim: kvd}
			q, kp, vp := put(a, qs), put(a, ks), put(a, vs)
			at := Attention{Heads: heads, KVHeads: kvheads, HeadDim: hd}
			must(k.RoPEStore(c, 0, at, kv, q, kp, vp, ntok, qd, put(a, positions), put(a, slots), put(a, freqs), neox))
			gq, gk := get[float32](a, q, ntok*qd), get[float32](a, kp, ntok*kvd)
			kc, vc := get[float32](a, kv.K, nslot*maxCtx*kvd), get[float32](a, kv.V, nslot*maxCtx*kvd)
			rot := func(x []float32, nh, stride int) []float32 {
				want := append([]float32(nil), x...)
				for tk := 0; tk < ntok; tk++ {
					for h := 0; h < nh; h++ {
						v := want[tk*stride+h*hd : tk*stride+(h+1)*hd]
						for i, f := range freqs {
							ang := float64(positions[tk]) * f
							cs, sn := float32(math.Cos(ang)), float32(math.Sin(ang))
							ia, ib := 2*i, 2*i+1
							if neox {
								ia, ib = i, i+hd/2
							}
							x0, x1 := v[ia], v[ib]
							v[ia] = float32(x0*cs) - float32(x1*sn)
							v[ib] = float32(x0*sn) + float32(x1*cs)
						}
					}
				}
				return want
			}
			closeRel(t, "rope_store q", gq, rot(qs, heads, qd), 1e-6, 1)
			closeRel(t, "rope_store k", gk, rot(ks, kvheads, kvd), 1e-6, 1)
			for tk := range slots {
				o := (int(slots[tk])*maxCtx + int(positions[tk])) * kvd
				closeRel(t, "k cache", kc[o:o+kvd], gk[tk*kvd:(tk+1)*kvd], 0, 1)
				closeRel(t, "v cache", vc[o:o+kvd], vs[tk*kvd:(tk+1)*kvd], 0, 1)
			}
		})
	}
}
