package kernels

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
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

// needIntegerGEMV skips where the device's tuning leaves the integer GEMV
// path off (the picked expert kernels are built on it), before any work
// reaches the device goroutine, where a skip would end that goroutine.
func needIntegerGEMV(t testing.TB) {
	t.Helper()
	if _, k := gpu(t); !k.tune.IntegerGEMV {
		t.Skip("the integer GEMV path is off on this device")
	}
}

// pickedExpert is one expert's matrices for the picked kernels' tests.
type pickedExpert struct{ gate, up, down []byte }

// pickedExperts makes len(held) random experts (Q4_K gate and up of ffn x
// dim, a down of the given type) and puts the held ones' matrices and the
// table of all of them on the device.
func pickedExperts(a *arena, held []bool, dim, ffn int, down quant.Type, seed uint64) ([]pickedExpert, MoEPicked) {
	xs := make([]pickedExpert, len(held))
	table := make([]uint64, 3*len(held))
	for e := range xs {
		s := seed + 3*uint64(e)
		xs[e].gate, _ = randMatrix(quant.Q4_K, ffn, dim, s)
		xs[e].up, _ = randMatrix(quant.Q4_K, ffn, dim, s+1)
		xs[e].down, _ = randMatrix(down, dim, ffn, s+2)
		if held[e] {
			table[3*e], table[3*e+1], table[3*e+2] = uint64(put(a, xs[e].gate)), uint64(put(a, xs[e].up)), uint64(put(a, xs[e].down))
		}
	}
	return xs, MoEPicked{Table: put(a, table), Experts: len(held),
		Gate: Matrix{Type: quant.Q4_K, Rows: ffn, Cols: dim}, Up: Matrix{Type: quant.Q4_K, Rows: ffn, Cols: dim},
		Down: Matrix{Type: down, Rows: dim, Cols: ffn}}
}

// pickedSentinel fills the rows the picked kernels must leave alone.
const pickedSentinel = float32(-7.5)

// fillSentinel puts n sentinels on the device.
func fillSentinel(a *arena, n int) cudadrv.DevPtr {
	v := make([]float32, n)
	for i := range v {
		v[i] = pickedSentinel
	}
	return put(a, v)
}

// checkPicked checks the picked kernels' rows for the picks ids (topk a
// token; x the tokens' inputs, dim wide): each pick of a held expert as
// the integer GEMVs' emulation computes it for its token, bit for bit up
// to the float sums' order, its where its own row; each other pick's rows
// untouched and its where -1.
func checkPicked(k *Kernels, xs []pickedExpert, held []bool, ids []int32, topk int, x []float32, dim, ffn int, down quant.Type, gotG, gotOut []float32, gotWhere []int32) {
	_, gth := k.tune.gemvqGeometry(ceilDiv(ffn, gemvqRows/2), dim)
	dRows := gemvqRows
	if down == quant.Q6_K {
		dRows = gemvq6Rows
	}
	_, dth := k.tune.gemvqGeometry(ceilDiv(dim, dRows), ffn)
	for y, e := range ids {
		on := int(e) < len(xs) && held[e]
		if want := map[bool]int32{true: int32(y), false: -1}[on]; gotWhere[y] != want {
			failOnDevice("where[%d] = %d, want %d (expert %d)", y, gotWhere[y], want, e)
		}
		gr, or := gotG[y*ffn:(y+1)*ffn], gotOut[y*dim:(y+1)*dim]
		if !on {
			for i, v := range append(slices.Clone(gr), or...) {
				if v != pickedSentinel {
					failOnDevice("pick %d (expert %d, not held): element %d written (%v)", y, e, i, v)
				}
			}
			continue
		}
		tok := y / topk
		xq := gemvqQuantizeRef(x[tok*dim : (tok+1)*dim])
		grb, drb := len(xs[e].gate)/ffn, len(xs[e].down)/dim
		for row := range ffn {
			ge := gemvqRowRef(quant.Q4_K, xs[e].gate[row*grb:(row+1)*grb], dim, xq, gth/32, 0)
			ue := gemvqRowRef(quant.Q4_K, xs[e].up[row*grb:(row+1)*grb], dim, xq, gth/32, 0)
			want := gemvqGLURef(SwiGLU, ge, ue)
			if d := math.Abs(float64(gr[row] - want)); !(d <= 1e-5*(1+math.Abs(float64(want)))) {
				failOnDevice("pick %d (token %d, expert %d): g[%d] = %v, emulation %v", y, tok, e, row, gr[row], want)
			}
		}
		gq := gemvqQuantizeRef(gr)
		for row := range dim {
			want := gemvqRowRef(down, xs[e].down[row*drb:(row+1)*drb], ffn, gq, dth/32, 0)
			if d := math.Abs(float64(or[row] - want)); !(d <= 1e-5*(1+math.Abs(float64(want)))) {
				failOnDevice("pick %d (token %d, expert %d): out[%d] = %v, emulation %v", y, tok, e, row, or[row], want)
			}
		}
	}
}

// TestMoEPicked: the picked expert kernels compute each pick whose expert
// the table holds as the integer GEMVs do (gemvqRowRef's emulation of
// their walk, on x and the activations quantized as gemvq_x does), with
// Q4_K and Q6_K downs; picks of experts the table lacks, and ids out of
// range, leave their rows alone and get -1 in where; the host passes no
// pick. A scratch too small for the downs' inputs is refused.
func TestMoEPicked(t *testing.T) {
	t.Parallel()
	needIntegerGEMV(t)
	const experts, topk, dim, ffn = 6, 4, 512, 256
	for _, down := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		t.Run(down.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(71, uint64(down)))
			held := []bool{true, false, true, true, false, true}
			x := randVec(r, dim, 1)
			// Picks: held, not held, held, out of range.
			ids := []int32{3, 1, 0, experts}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, dim)
				defer done()
				xs, p := pickedExperts(a, held, dim, ffn, down, 100)
				if !k.CanMoEPicked(s, p, topk) {
					failOnDevice("the picked expert kernels refuse %v downs", down)
				}
				g, out, where := fillSentinel(a, topk*ffn), fillSentinel(a, topk*dim), put(a, []int32{9, 9, 9, 9})
				one := MoEPicks{IDs: put(a, ids), T: 1, TopK: topk}
				must(k.MoEPickedGLU(c, s, p, one, put(a, x), g, where, SwiGLU))
				must(c.StreamSync(s))
				gotG := get[float32](a, g, topk*ffn)
				must(k.MoEPickedDown(c, s, p, one, g, out))
				must(c.StreamSync(s))
				checkPicked(k, xs, held, ids, topk, x, dim, ffn, down, gotG, get[float32](a, out, topk*dim), get[int32](a, where, topk))
				small, done2 := gemvqStream(c, k, 256)
				defer done2()
				if k.CanMoEPicked(small, p, topk) {
					failOnDevice("a 256-column scratch taken for %d-column inputs", dim)
				}
				if err := k.MoEPickedGLU(c, small, p, one, put(a, x), g, where, SwiGLU); err == nil {
					failOnDevice("MoEPickedGLU on a scratch too small: no error")
				}
			})
		})
	}
}

// TestMoEPickedTokens: over several tokens' picks (a batch pass, with a
// scratch of the caller's), each pick whose expert the table holds gets
// its own token's products, as the integer GEMVs compute them for that
// token alone; the others keep their rows and get -1 in where. One token
// on the caller's scratch computes what it computes on the stream's, and
// what it computes in the pass; more than one on the stream's is refused.
func TestMoEPickedTokens(t *testing.T) {
	t.Parallel()
	needIntegerGEMV(t)
	const experts, topk, dim, ffn, T = 6, 3, 512, 256, 3
	r := rand.New(rand.NewPCG(73, 5))
	held := []bool{true, false, true, true, false, true}
	x := randVec(r, T*dim, 1)
	// Token 0 picks a held, an unheld and a held expert; token 1 the same
	// held expert as token 0 and another; token 2 one out of range.
	ids := []int32{3, 1, 0, 3, 5, 4, 2, experts, 0}
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		s, done := gemvqStream(c, k, dim)
		defer done()
		xs, p := pickedExperts(a, held, dim, ffn, quant.Q6_K, 200)
		if !k.CanMoEPicked(s, p, topk) {
			failOnDevice("the picked expert kernels refuse the shape")
		}
		n := T * topk
		g, out, where := fillSentinel(a, n*ffn), fillSentinel(a, n*dim), put(a, make([]int32, n))
		xq := put(a, make([]byte, MoEPickedScratch(dim, ffn, T, topk)))
		picks := MoEPicks{IDs: put(a, ids), T: T, TopK: topk, XQ: xq}
		dx := put(a, x)
		must(k.MoEPickedGLU(c, s, p, picks, dx, g, where, SwiGLU))
		must(k.MoEPickedDown(c, s, p, picks, g, out))
		must(c.StreamSync(s))
		gotG, gotOut := get[float32](a, g, n*ffn), get[float32](a, out, n*dim)
		checkPicked(k, xs, held, ids, topk, x, dim, ffn, quant.Q6_K, gotG, gotOut, get[int32](a, where, n))
		// Token 1 alone, on the stream's scratch and on the caller's.
		alone := func(xqp cudadrv.DevPtr) ([]float32, []float32) {
			g1, o1, w1 := fillSentinel(a, topk*ffn), fillSentinel(a, topk*dim), put(a, make([]int32, topk))
			pk := MoEPicks{IDs: put(a, ids[topk:2*topk]), T: 1, TopK: topk, XQ: xqp}
			must(k.MoEPickedGLU(c, s, p, pk, put(a, x[dim:2*dim]), g1, w1, SwiGLU))
			must(k.MoEPickedDown(c, s, p, pk, g1, o1))
			must(c.StreamSync(s))
			return get[float32](a, g1, topk*ffn), get[float32](a, o1, topk*dim)
		}
		g1, o1 := alone(0)
		g2, o2 := alone(xq)
		if !slices.Equal(g1, g2) || !slices.Equal(o1, o2) {
			failOnDevice("one token on the caller's scratch differs from the stream's")
		}
		if !slices.Equal(g1, gotG[topk*ffn:2*topk*ffn]) || !slices.Equal(o1, gotOut[topk*dim:2*topk*dim]) {
			failOnDevice("token 1 alone differs from token 1 in the pass of %d", T)
		}
		if err := k.MoEPickedGLU(c, s, p, MoEPicks{IDs: picks.IDs, T: T, TopK: topk}, dx, g, where, SwiGLU); err == nil {
			failOnDevice("%d tokens on the stream's scratch: no error", T)
		}
	})
}

// TestMoEPickedDownView: the picked downs over a view of some columns of
// each expert's down (Matrix.Stride the full rows' bytes, the table at the
// view's first column), as an expert split by its FFN width takes them,
// give the bits of the same columns copied out into packed rows, for Q4_K
// and Q6_K downs.
func TestMoEPickedDownView(t *testing.T) {
	t.Parallel()
	needIntegerGEMV(t)
	const experts, topk, dim, ffn, from, cols = 3, 2, 256, 768, 256, 512
	for _, down := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		t.Run(down.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(17, uint64(down)))
			full := make([][]byte, experts)
			packed := make([][]byte, experts)
			rb, _ := down.RowBytes(ffn)
			vb, _ := down.RowBytes(cols)
			ob, _ := down.RowBytes(from)
			for e := range full {
				full[e], _ = randMatrix(down, dim, ffn, uint64(40+e))
				for row := range dim {
					packed[e] = append(packed[e], full[e][int64(row)*rb+ob:int64(row)*rb+ob+vb]...)
				}
			}
			g := randVec(r, topk*cols, 1)
			ids := []int32{2, 0}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, ffn)
				defer done()
				shape := Matrix{Type: quant.Q4_K, Rows: cols, Cols: dim}
				outs := [2][]float32{}
				for w, view := range []bool{false, true} {
					table := make([]uint64, 3*experts)
					for e := range experts {
						if view {
							table[3*e+2] = uint64(put(a, full[e]).Add(ob))
						} else {
							table[3*e+2] = uint64(put(a, packed[e]))
						}
						table[3*e], table[3*e+1] = 1, 1 // the downs read no gate or up
					}
					d := Matrix{Type: down, Rows: dim, Cols: cols}
					if view {
						d.Stride = rb
					}
					p := MoEPicked{Table: put(a, table), Experts: experts, Gate: shape, Up: shape, Down: d}
					if !k.CanMoEPicked(s, p, topk) {
						failOnDevice("the picked expert kernels refuse a %v down (view %v)", down, view)
					}
					out := a.alloc(int64(topk * dim * 4))
					must(k.MoEPickedDown(c, s, p, MoEPicks{IDs: put(a, ids), T: 1, TopK: topk}, put(a, g), out))
					must(c.StreamSync(s))
					outs[w] = get[float32](a, out, topk*dim)
				}
				for i := range outs[0] {
					if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
						failOnDevice("output %d: %v over the view, %v over packed rows", i, outs[1][i], outs[0][i])
					}
				}
			})
		})
	}
}

// TestMoEStage: MoEStage copies a token's picks of experts in host memory
// (pinned, mapped) into its slots, byte for byte, points their entries of
// its table at them and leaves the device's picks' entries as they were;
// the picked kernels over the staged table give the bits they give
// reading the host experts in place. Picks: in host memory, on the
// device, in host memory, out of range.
func TestMoEStage(t *testing.T) {
	t.Parallel()
	needIntegerGEMV(t)
	const experts, topk, dim, ffn = 5, 4, 512, 256
	for _, down := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		t.Run(down.String(), func(t *testing.T) {
			t.Parallel()
			onDevice := []bool{true, false, true, false, true}
			parts := make([][3][]byte, experts)
			for e := range parts {
				s := uint64(300 + 3*e)
				parts[e][0], _ = randMatrix(quant.Q4_K, ffn, dim, s)
				parts[e][1], _ = randMatrix(quant.Q4_K, ffn, dim, s+1)
				parts[e][2], _ = randMatrix(down, dim, ffn, s+2)
			}
			x := randVec(rand.New(rand.NewPCG(5, uint64(down))), dim, 1)
			ids := []int32{1, 2, 3, experts}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, topk*ffn)
				defer done()
				p := MoEPicked{Experts: experts,
					Gate: Matrix{Type: quant.Q4_K, Rows: ffn, Cols: dim}, Up: Matrix{Type: quant.Q4_K, Rows: ffn, Cols: dim},
					Down: Matrix{Type: down, Rows: dim, Cols: ffn}}
				uo, do, size, err := MoEStageLayout(p)
				must(err)
				// The device's experts in one allocation (the range the
				// kernel tells them by), the others in mapped host memory.
				dev := a.alloc(int64(experts) * size)
				host, err := c.HostAlloc(experts*int(size), cudadrv.HostAllocDeviceMap)
				must(err)
				defer c.FreeHost(host)
				hostDev, err := c.HostDevicePointer(host)
				must(err)
				table := make([]uint64, 3*experts)
				for e := range parts {
					base := int64(e) * size
					for i, off := range []int64{0, uo, do} {
						if onDevice[e] {
							must(c.CopyHtoD(dev.Add(base+off), parts[e][i], s))
							table[3*e+i] = uint64(dev.Add(base + off))
						} else {
							copy(host.Bytes()[base+off:], parts[e][i])
							table[3*e+i] = uint64(hostDev.Add(base + off))
						}
					}
				}
				p.Table = put(a, table)
				st := MoEStaging{Table: a.alloc(int64(8 * 3 * experts)), Slots: a.alloc(int64(topk)*size + stageAlign), SlotBytes: size,
					Lo: dev, Hi: dev.Add(int64(experts) * size)}
				st.Slots = cudadrv.DevPtr(hostmem.AlignUp(int64(st.Slots), stageAlign))
				dids := put(a, ids)
				q, err := k.MoEStage(c, s, p, st, dids, topk)
				must(err)
				must(c.StreamSync(s))
				got := get[uint64](a, st.Table, 3*experts)
				for j, e := range ids {
					if int(e) >= experts {
						continue
					}
					for i, off := range []int64{0, uo, do} {
						ent := got[3*int(e)+i]
						if onDevice[e] {
							if ent != table[3*int(e)+i] {
								failOnDevice("pick %d (expert %d on the device): entry %d is %#x, want the table's %#x", j, e, i, ent, table[3*int(e)+i])
							}
							continue
						}
						if want := uint64(st.Slots.Add(int64(j)*size + off)); ent != want {
							failOnDevice("pick %d (expert %d in host memory): entry %d is %#x, want its slot's %#x", j, e, i, ent, want)
						}
						if b := get[byte](a, cudadrv.DevPtr(ent), len(parts[e][i])); !slices.Equal(b, parts[e][i]) {
							failOnDevice("pick %d (expert %d): matrix %d differs from the host copy", j, e, i)
						}
					}
				}
				// The picked kernels over the staged table and over the host
				// copies in place.
				var outs [2][]float32
				for w, pp := range []MoEPicked{q, p} {
					g, out, where := a.alloc(int64(topk*ffn*4)), a.alloc(int64(topk*dim*4)), a.alloc(int64(topk*4))
					must(k.MoEPickedGLU(c, s, pp, MoEPicks{IDs: dids, T: 1, TopK: topk}, put(a, x), g, where, SwiGLU))
					must(k.MoEPickedDown(c, s, pp, MoEPicks{IDs: dids, T: 1, TopK: topk}, g, out))
					must(c.StreamSync(s))
					outs[w] = get[float32](a, out, 3*dim) // the last pick is out of range
				}
				for i := range outs[0] {
					if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
						failOnDevice("output %d: %v staged, %v read in place", i, outs[0][i], outs[1][i])
					}
				}
				if _, err := k.MoEStage(c, s, p, MoEStaging{Table: st.Table, Slots: st.Slots, SlotBytes: size - stageAlign}, dids, topk); err == nil {
					failOnDevice("slots smaller than an expert taken")
				}
			})
		})
	}
}

// TestMoEStageLayout: the slot layout puts each matrix at a 256-byte
// boundary after the one before, and refuses views and matrices that are
// not whole 16-byte units.
func TestMoEStageLayout(t *testing.T) {
	t.Parallel()
	p := MoEPicked{Gate: Matrix{Type: quant.Q4_K, Rows: 768, Cols: 2048}, Up: Matrix{Type: quant.Q4_K, Rows: 768, Cols: 2048},
		Down: Matrix{Type: quant.Q6_K, Rows: 2048, Cols: 768}}
	up, down, size, err := MoEStageLayout(p)
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3-30B-A3B's experts: 768 rows of 1152 bytes, 2048 of 630.
	if up != 884736 || down != 2*884736 || size != hostmem.AlignUp(int64(2*884736+2048*630), 256) {
		t.Errorf("layout %d, %d, %d", up, down, size)
	}
	v := p
	v.Down.Stride = 1000
	if _, _, _, err := MoEStageLayout(v); err == nil {
		t.Error("a view of the down laid out")
	}
	odd := p
	odd.Down = Matrix{Type: quant.Q6_K, Rows: 3, Cols: 256} // 3 x 210 bytes
	if _, _, _, err := MoEStageLayout(odd); err == nil {
		t.Error("a down of 630 bytes laid out")
	}
}
