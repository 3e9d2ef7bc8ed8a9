package kernels

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// refTopK is engine/model's routing of one row of scores: the k highest,
// ties to the lower index, weighted by the softmax over the picked scores
// (exp of the float32 difference to the best, in float64, summed in pick
// order). Written as a stable sort rather than engine/model's insertion,
// so the kernel is checked against a second statement of the rule.
func refTopK(scores []float32, k int) ([]int32, []float32) {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	ids := make([]int32, k)
	ws := make([]float32, k)
	mx := scores[idx[0]]
	var sum float64
	for j := range k {
		ids[j] = int32(idx[j])
		sum += math.Exp(float64(scores[idx[j]] - mx))
	}
	for j := range k {
		ws[j] = float32(math.Exp(float64(scores[idx[j]]-mx)) / sum)
	}
	return ids, ws
}

// TestMoERoute: the router's scores (MoELogits, with and without a skew
// bias) against a float64 dot product, and each token's top-k (MoETopK)
// against refTopK on those same scores: ids bit-exact, weights within
// float rounding, for Mixtral's and Qwen3-MoE's expert counts, 1 to 8
// tokens, rows with ties (equal scores placed across and within the
// warp's lanes, at and past the k-th place).
func TestMoERoute(t *testing.T) {
	for _, sh := range []struct{ E, k, dim int }{{8, 2, 64}, {128, 8, 256}, {6, 2, 64}} {
		for T := 1; T <= 8; T++ {
			t.Run(fmt.Sprintf("E%d/k%d/T%d", sh.E, sh.k, T), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(sh.E), uint64(T)))
				x := randVec(r, T*sh.dim, 1)
				router := randVec(r, sh.E*sh.dim, 0.2)
				bias := randVec(r, sh.E, 1)
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					xp, rp, bp := put(a, x), put(a, router), put(a, bias)
					lp := a.alloc(int64(T * sh.E * 4))
					for _, withBias := range []bool{false, true} {
						b := cudadrv.DevPtr(0)
						if withBias {
							b = bp
						}
						poison(a, lp, T*sh.E)
						must(k.MoELogits(c, 0, xp, rp, b, lp, T, sh.E, sh.dim))
						got := get[float32](a, lp, T*sh.E)
						for tok := range T {
							for e := range sh.E {
								var want float64
								for i := range sh.dim {
									want += float64(x[tok*sh.dim+i]) * float64(router[e*sh.dim+i])
								}
								if withBias {
									want += float64(bias[e])
								}
								if d := math.Abs(float64(got[tok*sh.E+e]) - want); !(d <= 1e-4*(1+math.Abs(want))) {
									t.Fatalf("bias %v: token %d expert %d score %v, want %v", withBias, tok, e, got[tok*sh.E+e], want)
								}
							}
						}
					}
					// Ties: the GPU's own scores with some made equal.
					scores := get[float32](a, lp, T*sh.E)
					for tok := range T {
						row := scores[tok*sh.E : (tok+1)*sh.E]
						best := slices.Index(row, slices.Max(row))
						switch tok % 4 {
						case 0: // the best, tied with the last expert
							row[sh.E-1] = row[best]
						case 1: // every score equal
							for e := range row {
								row[e] = 0.5
							}
						case 2: // a tie at the k-th place, lanes apart
							row[0], row[sh.E/2], row[sh.E-1] = 3, 2, 2
						}
					}
					lp2 := put(a, scores)
					ids, ws := a.alloc(int64(T*sh.k*4)), a.alloc(int64(T*sh.k*4))
					must(k.MoETopK(c, 0, lp2, T, sh.E, sh.k, ids, ws))
					gi, gw := get[int32](a, ids, T*sh.k), get[float32](a, ws, T*sh.k)
					for tok := range T {
						wi, ww := refTopK(scores[tok*sh.E:(tok+1)*sh.E], sh.k)
						if g := gi[tok*sh.k : (tok+1)*sh.k]; !slices.Equal(g, wi) {
							t.Fatalf("token %d: ids %v, want %v (scores %v)", tok, g, wi, scores[tok*sh.E:(tok+1)*sh.E])
						}
						for j := range sh.k {
							if d := math.Abs(float64(gw[tok*sh.k+j] - ww[j])); d > 1e-6 {
								t.Fatalf("token %d pick %d: weight %v, want %v", tok, j, gw[tok*sh.k+j], ww[j])
							}
						}
					}
				})
			})
		}
	}
}

// TestMoEGatherCombine: MoEGather's rows and MoECombine's weighted sum
// (with and without a base, picks the CPU took marked -1) against the
// host's.
func TestMoEGatherCombine(t *testing.T) {
	const T, topk, dim = 5, 3, 96
	r := rand.New(rand.NewPCG(3, 4))
	h := randVec(r, T*dim, 1)
	base := randVec(r, T*dim, 1)
	ws := randVec(r, T*topk, 1)
	// Grouped rows: every other pick on the GPU.
	var rows, where []int32
	for i := range T * topk {
		if i%2 == 0 {
			where = append(where, int32(len(rows)))
			rows = append(rows, int32(i/topk))
		} else {
			where = append(where, -1)
		}
	}
	n := len(rows)
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		hp, rp := put(a, h), put(a, rows)
		g := a.alloc(int64(n * dim * 4))
		must(k.MoEGather(c, 0, hp, rp, g, n, dim))
		gathered := get[float32](a, g, n*dim)
		for p, row := range rows {
			if !slices.Equal(gathered[p*dim:(p+1)*dim], h[int(row)*dim:(int(row)+1)*dim]) {
				t.Fatalf("gathered row %d is not h's row %d", p, row)
			}
		}
		out := randVec(r, n*dim, 1)
		op, wp, wherep, bp := put(a, out), put(a, ws), put(a, where), put(a, base)
		for _, withBase := range []bool{false, true} {
			dst := put(a, h)
			b := cudadrv.DevPtr(0)
			if withBase {
				b = bp
			}
			must(k.MoECombine(c, 0, dst, b, op, wp, wherep, T, topk, dim))
			got := get[float32](a, dst, T*dim)
			for tok := range T {
				for i := range dim {
					var acc float32
					for j := range topk {
						if p := where[tok*topk+j]; p >= 0 {
							acc += ws[tok*topk+j] * out[int(p)*dim+i]
						}
					}
					want := h[tok*dim+i] + acc
					if withBase {
						want = base[tok*dim+i] + acc
					}
					if d := math.Abs(float64(got[tok*dim+i] - want)); d > 1e-5*(1+math.Abs(float64(want))) {
						t.Fatalf("base %v: h[%d][%d] = %v, want %v", withBase, tok, i, got[tok*dim+i], want)
					}
				}
			}
		}
	})
}
