package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

var (
	gpuOnce sync.Once
	gpuDev  *cudadrv.Device
	gpuK    *Kernels
	gpuErr  error
	gpuLoad time.Duration
)

// gpu returns the test device and its loaded kernels, or skips the test
// with the reason CUDA is not usable here (CI has no GPU).
func gpu(t testing.TB) (*cudadrv.Device, *Kernels) {
	t.Helper()
	gpuOnce.Do(func() {
		gpuDev, gpuErr = cudadrv.Open(0)
		if gpuErr != nil {
			return
		}
		start := time.Now()
		gpuErr = gpuDev.Do(func(c *cudadrv.Ctx) error {
			var err error
			gpuK, err = Load(c)
			return err
		})
		gpuLoad = time.Since(start)
	})
	if gpuErr != nil {
		if errors.Is(gpuErr, cudadrv.ErrUnavailable) {
			t.Skipf("skipping GPU test: %v", gpuErr)
		}
		t.Fatalf("GPU setup: %v", gpuErr)
	}
	return gpuDev, gpuK
}

// testKernels is a Kernels of a device with sms multiprocessors and the
// base tuning, nothing loaded: for the host-side tests of launch choices.
func testKernels(sms int) *Kernels {
	return &Kernels{loaded: &loaded{SMs: sms}, tune: baseTuning()}
}

// tuned is a view of k whose tuning is k's changed by set.
func tuned(k *Kernels, set func(*Tuning)) *Kernels {
	t := k.Tuning()
	set(&t)
	return k.WithTuning(t)
}

func TestLoad(t *testing.T) {
	d, k := gpu(t)
	maj, min := d.ComputeCapability()
	t.Logf("%s (cc %d.%d, %d SMs): loaded %d kernels from the %s in %v", d.Name(), maj, min, k.SMs, len(k.Names()), k.Image, gpuLoad)
	// Every kernel of the embedded PTX resolved (TestEmbeddedEntries
	// counts them), whichever image was loaded.
	want := 0
	for _, fam := range families {
		b, err := ptxFS.ReadFile("ptx/" + fam + "." + k.Arch + ".ptx")
		if err != nil {
			t.Fatal(err)
		}
		want += len(entryNames(b))
	}
	if len(k.Names()) != want {
		t.Errorf("%d kernels loaded, want %d", len(k.Names()), want)
	}
}

// arena tracks device allocations of one test and frees them together.
type arena struct {
	c    *cudadrv.Ctx
	ptrs []cudadrv.DevPtr
}

func (a *arena) alloc(n int64) cudadrv.DevPtr {
	p, err := a.c.Alloc(max(n, 16))
	if err != nil {
		panic(err)
	}
	a.ptrs = append(a.ptrs, p)
	return p
}

func (a *arena) free() {
	for _, p := range a.ptrs {
		a.c.Free(p)
	}
	a.ptrs = nil
}

func put[T cudadrv.Scalar](a *arena, v []T) cudadrv.DevPtr {
	p := a.alloc(int64(len(cudadrv.Bytes(v))))
	if err := cudadrv.Upload(a.c, p, v, 0); err != nil {
		panic(err)
	}
	return p
}

func get[T cudadrv.Scalar](a *arena, p cudadrv.DevPtr, n int) []T {
	v := make([]T, n)
	if err := cudadrv.Download(a.c, v, p, 0); err != nil {
		panic(err)
	}
	return v
}

// poison fills n float32s at p with NaN so unwritten outputs fail.
func poison(a *arena, p cudadrv.DevPtr, n int) {
	if err := a.c.MemsetD32(p, 0x7fc00000, int64(n), 0); err != nil {
		panic(err)
	}
}

// run executes fn on the device with an arena; a panic from the helpers
// becomes the test's failure.
func run(t *testing.T, fn func(c *cudadrv.Ctx, k *Kernels, a *arena)) {
	t.Helper()
	d, k := gpu(t)
	err := d.Do(func(c *cudadrv.Ctx) error {
		a := &arena{c: c}
		defer a.free()
		fn(c, k, a)
		return c.Synchronize()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// onStream runs fn on the device with an arena and a fresh non-blocking
// stream, which is destroyed after, with any integer-GEMV scratch
// reserved on it.
func onStream(d *cudadrv.Device, k *Kernels, fn func(c *cudadrv.Ctx, a *arena, s cudadrv.Stream) error) error {
	return d.Do(func(c *cudadrv.Ctx) error {
		a := &arena{c: c}
		defer a.free()
		s, err := c.NewStream(cudadrv.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		if err := fn(c, a, s); err != nil {
			return err
		}
		return k.ReleaseFastGEMV(c, s)
	})
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func randVec(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// randMatrix returns rows x cols random weights of type t and their
// dequantized values (engine/quant's Dequantize is the reference).
func randMatrix(t quant.Type, rows, cols int, seed uint64) ([]byte, []float32) {
	rb, err := t.RowBytes(int64(cols))
	if err != nil {
		panic(err)
	}
	data := make([]byte, int(rb)*rows)
	must(quant.FillRandomRows(t, data, cols, seed, 0.05))
	deq := make([]float32, rows*cols)
	must(quant.DequantizeRows(t, data, cols, deq))
	return data, deq
}

var gemvTypes = []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.INT8Row, quant.F16, quant.BF16, quant.F32}

// TestGEMV compares every type and batch size with float64 dot products of
// the dequantized weights, and with quant.Dot (the CPU engine's kernel).
// Tolerance: |gpu - ref| <= 2e-6 * sum|w_i x_i| + 1e-7 (float32 rounding
// of a 4096-term sum in a different order; the 0.5+q/256 decoding trick
// costs a few bits on top of plain float32).
func TestGEMV(t *testing.T) {
	shapes := []struct{ rows, cols int }{{257, 4096}, {100, 3584}, {64, 512}, {33, 14336}}
	for _, typ := range gemvTypes {
		for _, sh := range shapes {
			if sh.cols%typ.BlockElems() != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v/%dx%d", typ, sh.rows, sh.cols), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), uint64(sh.cols)))
				data, deq := randMatrix(typ, sh.rows, sh.cols, uint64(sh.rows*sh.cols)+uint64(typ))
				xs := randVec(r, 8*sh.cols, 1)
				rb := len(data) / sh.rows
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					w := Matrix{Type: typ, Rows: sh.rows, Cols: sh.cols, Ptr: put(a, data)}
					x := put(a, xs)
					y := a.alloc(int64(8 * sh.rows * 4))
					for _, nb := range []int{1, 2, 3, 5, 8} {
						poison(a, y, 8*sh.rows)
						must(k.GEMV(c, 0, w, x, y, nb))
						got := get[float32](a, y, nb*sh.rows)
						worst := 0.0
						for b := 0; b < nb; b++ {
							xb := xs[b*sh.cols : (b+1)*sh.cols]
							for i := 0; i < sh.rows; i++ {
								var ref, mag float64
								row := deq[i*sh.cols : (i+1)*sh.cols]
								for j, wv := range row {
									ref += float64(wv) * float64(xb[j])
									mag += math.Abs(float64(wv) * float64(xb[j]))
								}
								g := float64(got[b*sh.rows+i])
								cpu := float64(quant.Dot(typ, data[i*rb:(i+1)*rb], xb))
								tol := 2e-6*mag + 1e-7
								if e := math.Abs(g - ref); e > tol || math.IsNaN(g) {
									t.Fatalf("batch %d/%d row %d: gpu %v, float64 ref %v (err %.3g > tol %.3g)", b, nb, i, g, ref, e, tol)
								}
								if e := math.Abs(g - cpu); e > tol {
									t.Fatalf("batch %d/%d row %d: gpu %v, quant.Dot %v (err %.3g > tol %.3g)", b, nb, i, g, cpu, e, tol)
								}
								worst = max(worst, math.Abs(g-ref)/max(mag, 1e-30))
							}
						}
						if nb == 1 {
							t.Logf("worst |err|/sum|wx| = %.2g", worst)
						}
					}
				})
			})
		}
	}
}

// TestGEMM checks the tensor-core path against float64 products of the
// dequantized weights. Tolerance: operands are rounded to f16 (relative
// 2^-11 each), so |gpu - ref| <= 2e-3 * sum|w_i x_i| + 1e-6; the
// normalised mean squared error must also stay below 1e-6.
func TestGEMM(t *testing.T) {
	for _, typ := range gemvTypes {
		for _, sh := range []struct{ m, n, k int }{{1, 96, 512}, {17, 200, 3584}, {64, 64, 256}, {130, 130, 4096}} {
			if sh.k%typ.BlockElems() != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v/m%d_n%d_k%d", typ, sh.m, sh.n, sh.k), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ)+7, uint64(sh.k)))
				data, deq := randMatrix(typ, sh.n, sh.k, uint64(sh.n*sh.k)+uint64(typ)+1)
				xs := randVec(r, sh.m*sh.k, 1)
				run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
					w := Matrix{Type: typ, Rows: sh.n, Cols: sh.k, Ptr: put(a, data)}
					x := put(a, xs)
					y := a.alloc(int64(sh.m * sh.n * 4))
					poison(a, y, sh.m*sh.n)
					must(k.GEMM(c, 0, w, x, y, sh.m))
					got := get[float32](a, y, sh.m*sh.n)
					var se, sr float64
					for m := 0; m < sh.m; m++ {
						for n := 0; n < sh.n; n++ {
							var ref, mag float64
							for j := 0; j < sh.k; j++ {
								p := float64(deq[n*sh.k+j]) * float64(xs[m*sh.k+j])
								ref += p
								mag += math.Abs(p)
							}
							g := float64(got[m*sh.n+n])
							if e := math.Abs(g - ref); !(e <= 2e-3*mag+1e-6) {
								t.Fatalf("y[%d][%d] = %v, ref %v (err %.3g, sum|wx| %.3g)", m, n, g, ref, e, mag)
							}
							se += (g - ref) * (g - ref)
							sr += ref * ref
						}
					}
					if nmse := se / sr; nmse > 1e-6 {
						t.Fatalf("NMSE %.3g > 1e-6", nmse)
					} else {
						t.Logf("NMSE %.3g", nmse)
					}
				})
			})
		}
	}
}

// rmsRef is engine/model's rmsNorm.
func rmsRef(x, w []float32, eps float32) []float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	mean := float32(ss / float64(len(x)))
	inv := float32(1 / math.Sqrt(float64(mean+eps)))
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v*inv) * w[i]
	}
	return y
}

// closeRel fails when |got-want| > tol*max(|want|, floor).
func closeRel(t *testing.T, what string, got, want []float32, tol, floor float64) {
	t.Helper()
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if !(math.Abs(g-w) <= tol*max(math.Abs(w), floor)) {
			t.Fatalf("%s[%d] = %v, want %v (tolerance %g relative)", what, i, g, w, tol)
		}
	}
}

// TestRMSNorm: same arithmetic as the CPU (float64 sum of squares), so the
// only difference is the summation order: relative 1e-6.
func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dim := range []int{256, 3584, 4096} {
		n := 3
		xs := randVec(r, n*dim, 2)
		w := randVec(r, dim, 1)
		run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
			x, wp := put(a, xs), put(a, w)
			y := a.alloc(int64(n * dim * 4))
			poison(a, y, n*dim)
			must(k.RMSNorm(c, 0, x, wp, y, n, dim, 1e-5))
			got := get[float32](a, y, n*dim)
			// In place too.
			must(k.RMSNorm(c, 0, x, wp, x, n, dim, 1e-5))
			inplace := get[float32](a, x, n*dim)
			for i := 0; i < n; i++ {
				want := rmsRef(xs[i*dim:(i+1)*dim], w, 1e-5)
				closeRel(t, "rmsnorm", got[i*dim:(i+1)*dim], want, 1e-6, 1e-3)
				closeRel(t, "rmsnorm in place", inplace[i*dim:(i+1)*dim], want, 1e-6, 1e-3)
			}
		})
	}
}

// TestRoPE covers both pair layouts and llama3 frequency factors at
// positions up to 100k; angles are float64 on both sides, so the results
// match to float32 rounding (relative 1e-6 of the row's scale).
func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const ntok, heads, hd = 5, 4, 128
	factors := make([]float32, hd/2)
	for i := range factors {
		factors[i] = 1 + float32(i%7)
	}
	positions := []int32{0, 1, 77, 8191, 100000}
	for _, neox := range []bool{false, true} {
		for _, fac := range [][]float32{nil, factors} {
			freqs, err := RopeFreqs(500000, hd, fac)
			if err != nil {
				t.Fatal(err)
			}
			xs := randVec(r, ntok*heads*hd, 1)
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				x, pos, fp := put(a, xs), put(a, positions), put(a, freqs)
				must(k.RoPE(c, 0, x, ntok, heads, hd, heads*hd, pos, fp, neox))
				got := get[float32](a, x, len(xs))
				want := append([]float32(nil), xs...)
				for tk := 0; tk < ntok; tk++ {
					for h := 0; h < heads; h++ {
						v := want[(tk*heads+h)*hd : (tk*heads+h+1)*hd]
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
				closeRel(t, fmt.Sprintf("rope neox=%v factors=%v", neox, fac != nil), got, want, 1e-6, 1)
			})
		}
	}
}

// attnRef is engine/model's attention for one query over cache rows,
// in float64.
func attnRef(q []float32, kc, vc []float32, kvdim, off, lo, hi int, scale, capv float32) []float64 {
	hd := len(q)
	s := make([]float64, hi-lo+1)
	mx := math.Inf(-1)
	for j := lo; j <= hi; j++ {
		var d float64
		for i := 0; i < hd; i++ {
			d += float64(q[i]) * float64(kc[j*kvdim+off+i])
		}
		d *= float64(scale)
		if capv > 0 {
			d = float64(capv) * math.Tanh(d/float64(capv))
		}
		s[j-lo] = d
		mx = math.Max(mx, d)
	}
	var sum float64
	for i := range s {
		s[i] = math.Exp(s[i] - mx)
		sum += s[i]
	}
	out := make([]float64, hd)
	for j := lo; j <= hi; j++ {
		p := s[j-lo] / sum
		for i := 0; i < hd; i++ {
			out[i] += p * float64(vc[j*kvdim+off+i])
		}
	}
	return out
}

// TestAttention checks decode (several sequences of different lengths,
// forced and automatic splits) and causal prefill against float64, with
// GQA, soft-capping and sliding windows. Tolerance: relative 2e-5 of the
// output's scale (fast exp, float32 online softmax).
func TestAttention(t *testing.T) {
	cases := []struct {
		name       string
		at         Attention
		lens       []int
		splits     []int
		prefillP0  int
		prefillLen int
	}{
		{"llama-gqa4-hd128", Attention{Heads: 8, KVHeads: 2, HeadDim: 128, Scale: 1 / float32(math.Sqrt(128))}, []int{1, 700, 5000}, []int{0, 1, 7}, 37, 50},
		{"gemma-softcap-window", Attention{Heads: 4, KVHeads: 2, HeadDim: 256, Scale: 1 / 16.0, Softcap: 50, Window: 96}, []int{3, 97, 1000}, []int{0, 1, 3}, 100, 41},
		{"tiny-hd64", Attention{Heads: 4, KVHeads: 2, HeadDim: 64, Scale: 0.125}, []int{1, 2, 130}, []int{0, 2}, 0, 130},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, uint64(tc.at.HeadDim)))
			at := tc.at
			kvdim := at.KVHeads * at.HeadDim
			maxCtx := 0
			for _, l := range tc.lens {
				maxCtx = max(maxCtx, l)
			}
			maxCtx = max(maxCtx, tc.prefillP0+tc.prefillLen)
			nslot := len(tc.lens)
			kcH := randVec(r, nslot*maxCtx*kvdim, 1)
			vcH := randVec(r, nslot*maxCtx*kvdim, 1)
			ntok := len(tc.lens)
			qH := randVec(r, ntok*at.Heads*at.HeadDim, 1)
			slots := make([]int32, ntok)
			pos := make([]int32, ntok)
			for i, l := range tc.lens {
				slots[i], pos[i] = int32(i), int32(l-1)
			}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				kv := KVCache{K: put(a, kcH), V: put(a, vcH), MaxCtx: maxCtx, KVDim: kvdim}
				q := put(a, qH)
				sp, pp := put(a, slots), put(a, pos)
				out := a.alloc(int64(len(qH) * 4))
				scratchBytes := at.DecodeScratchBytes(ntok, 64)
				scratch := a.alloc(scratchBytes)
				group := at.Heads / at.KVHeads
				for _, ns := range tc.splits {
					poison(a, out, len(qH))
					must(k.AttentionDecode(c, 0, at, kv, q, out, ntok, sp, pp, maxCtx, ns, scratch, scratchBytes))
					got := get[float32](a, out, len(qH))
					for ti, l := range tc.lens {
						p := l - 1
						lo := 0
						if at.Window > 0 {
							lo = max(0, p-at.Window+1)
						}
						base := ti * maxCtx * kvdim
						for h := 0; h < at.Heads; h++ {
							qr := qH[(ti*at.Heads+h)*at.HeadDim : (ti*at.Heads+h+1)*at.HeadDim]
							want := attnRef(qr, kcH[base:], vcH[base:], kvdim, (h/group)*at.HeadDim, lo, p, at.Scale, at.Softcap)
							g := got[(ti*at.Heads+h)*at.HeadDim:]
							for i, w := range want {
								if e := math.Abs(float64(g[i]) - w); !(e <= 2e-5) {
									t.Fatalf("decode splits=%d token %d (len %d) head %d dim %d: %v, want %v", ns, ti, l, h, i, g[i], w)
								}
							}
						}
					}
				}
				// Prefill: prefillLen tokens of slot 0 from prefillP0.
				n := tc.prefillLen
				pq := randVec(r, n*at.Heads*at.HeadDim, 1)
				qp := put(a, pq)
				po := a.alloc(int64(len(pq) * 4))
				poison(a, po, len(pq))
				must(k.AttentionPrefill(c, 0, at, kv, qp, po, n, 0, tc.prefillP0))
				got := get[float32](a, po, len(pq))
				for ti := 0; ti < n; ti++ {
					p := tc.prefillP0 + ti
					lo := 0
					if at.Window > 0 {
						lo = max(0, p-at.Window+1)
					}
					for h := 0; h < at.Heads; h++ {
						qr := pq[(ti*at.Heads+h)*at.HeadDim : (ti*at.Heads+h+1)*at.HeadDim]
						want := attnRef(qr, kcH, vcH, kvdim, (h/group)*at.HeadDim, lo, p, at.Scale, at.Softcap)
						g := got[(ti*at.Heads+h)*at.HeadDim:]
						for i, w := range want {
							if e := math.Abs(float64(g[i]) - w); !(e <= 2e-5) {
								t.Fatalf("prefill token %d head %d dim %d: %v, want %v", ti, h, i, g[i], w)
							}
						}
					}
				}
			})
		})
	}
}

func TestStoreKV(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 7))
	const kvdim, maxCtx, nslot = 64, 10, 3
	keys, vals := randVec(r, 4*kvdim, 1), randVec(r, 4*kvdim, 1)
	slots, pos := []int32{2, 0, 1, 2}, []int32{0, 9, 4, 5}
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		kv := KVCache{K: a.alloc(nslot * maxCtx * kvdim * 4), V: a.alloc(nslot * maxCtx * kvdim * 4), MaxCtx: maxCtx, KVDim: kvdim}
		must(k.StoreKV(c, 0, kv, put(a, keys), put(a, vals), 4, put(a, slots), put(a, pos)))
		kc := get[float32](a, kv.K, nslot*maxCtx*kvdim)
		vc := get[float32](a, kv.V, nslot*maxCtx*kvdim)
		for t4 := range slots {
			o := (int(slots[t4])*maxCtx + int(pos[t4])) * kvdim
			closeRel(t, "k", kc[o:o+kvdim], keys[t4*kvdim:(t4+1)*kvdim], 0, 1)
			closeRel(t, "v", vc[o:o+kvdim], vals[t4*kvdim:(t4+1)*kvdim], 0, 1)
		}
	})
}

// TestElementwise: transcendentals in float64 on both sides, so results
// agree to 1e-6 relative.
func TestElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const n = 100003
	g, u, y := randVec(r, n, 3), randVec(r, n, 1), randVec(r, n, 40)
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		gp, up := put(a, g), put(a, u)
		out := a.alloc(n * 4)
		must(k.SwiGLU(c, 0, gp, up, out, n))
		got := get[float32](a, out, n)
		want := make([]float32, n)
		for i := range want {
			v := float64(g[i])
			want[i] = float32(v/(1+math.Exp(-v))) * u[i]
		}
		closeRel(t, "swiglu", got, want, 1e-6, 1e-6)
		must(k.GeGLU(c, 0, gp, up, out, n))
		got = get[float32](a, out, n)
		for i := range want {
			v := float64(g[i])
			want[i] = float32(0.5*v*(1+math.Tanh(0.7978845608028654*(v+0.044715*v*v*v)))) * u[i]
		}
		closeRel(t, "geglu", got, want, 1e-6, 1e-6)
		yp := put(a, y)
		must(k.Softcap(c, 0, yp, n, 30))
		got = get[float32](a, yp, n)
		for i := range want {
			want[i] = float32(math.Tanh(float64(y[i]/30))) * 30
		}
		closeRel(t, "softcap", got, want, 1e-6, 1e-6)
		must(k.Add(c, 0, yp, up, n))
		got2 := get[float32](a, yp, n)
		for i := range want {
			want[i] = got[i] + u[i]
		}
		closeRel(t, "add", got2, want, 0, 1)
	})
}

// TestCopyMapped: Copy moves floats bit for bit between device memory
// and mapped pinned host memory, both ways (the hybrid hand-over).
func TestCopyMapped(t *testing.T) {
	const n = 3*8192 + 5
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i%977)*0.37 - 100
		}
		src[1] = float32(math.Copysign(0, -1))
		src[2] = float32(math.Inf(-1))
		hm, err := c.HostAlloc(n*4, cudadrv.HostAllocDeviceMap)
		must(err)
		defer func() { must(c.FreeHost(hm)) }()
		hp, err := c.HostDevicePointer(hm)
		must(err)
		host, err := cudadrv.Values[float32](hm.Bytes())
		must(err)
		dp := put(a, src)
		must(k.Copy(c, 0, hp, dp, n))
		must(c.StreamSync(0))
		for i := range src {
			if math.Float32bits(host[i]) != math.Float32bits(src[i]) {
				t.Fatalf("to the host: [%d] = %v, want %v", i, host[i], src[i])
			}
		}
		for i := range host {
			host[i] = -host[i]
		}
		out := a.alloc(n * 4)
		must(k.Copy(c, 0, out, hp, n))
		got := get[float32](a, out, n)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(-src[i]) {
				t.Fatalf("from the host: [%d] = %v, want %v", i, got[i], -src[i])
			}
		}
	})
}

// TestEmbed: dequantization is exact float32 arithmetic on both sides
// (up to the decode trick's last bit): relative 1e-6.
func TestEmbed(t *testing.T) {
	for _, typ := range gemvTypes {
		t.Run(typ.String(), func(t *testing.T) {
			const vocab, dim = 300, 512
			data, deq := randMatrix(typ, vocab, dim, 99+uint64(typ))
			ids := []int32{0, 299, 17, 17, 150}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				table := Matrix{Type: typ, Rows: vocab, Cols: dim, Ptr: put(a, data)}
				out := a.alloc(int64(len(ids) * dim * 4))
				for _, scale := range []float32{1, 22.6} {
					poison(a, out, len(ids)*dim)
					must(k.Embed(c, 0, table, put(a, ids), len(ids), out, scale))
					got := get[float32](a, out, len(ids)*dim)
					for i, id := range ids {
						want := append([]float32(nil), deq[int(id)*dim:(int(id)+1)*dim]...)
						if scale != 1 {
							for j := range want {
								want[j] *= scale
							}
						}
						closeRel(t, "embed", got[i*dim:(i+1)*dim], want, 1e-6, 1e-4)
					}
				}
			})
		})
	}
}

// TestSampling: argmax must equal engine/sample's rule exactly (ties to
// the lowest index, NaN never chosen); temperature sampling must pick the
// same token as a float64 inverse-CDF reference for the same uniforms.
func TestSampling(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	const vocab = 50021
	rows := [][]float32{randVec(r, vocab, 3), randVec(r, vocab, 3), randVec(r, vocab, 0.01), randVec(r, vocab, 3)}
	rows[1][40000], rows[1][123] = 50, 50 // tie: lowest wins
	rows[3][5] = float32(math.NaN())
	rows[3][6] = 80
	flat := append(append(append(append([]float32(nil), rows[0]...), rows[1]...), rows[2]...), rows[3]...)
	us := []float32{0.1, 0.999, 0.5, 0.73}
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		lp := put(a, flat)
		out := a.alloc(16)
		must(k.Argmax(c, 0, lp, len(rows), vocab, out))
		got := get[int32](a, out, len(rows))
		for i, row := range rows {
			if best := refArgmax(row); int(got[i]) != best {
				t.Errorf("argmax row %d = %d, want %d", i, got[i], best)
			}
		}
		const temp = 0.8
		must(k.SampleTemperature(c, 0, lp, len(rows), vocab, temp, put(a, us), out))
		got = get[int32](a, out, len(rows))
		for i, row := range rows {
			mx := math.Inf(-1)
			for _, v := range row {
				if !math.IsNaN(float64(v)) {
					mx = math.Max(mx, float64(v))
				}
			}
			var total float64
			for _, v := range row {
				if !math.IsNaN(float64(v)) {
					total += math.Exp((float64(v) - mx) / temp)
				}
			}
			target := float64(us[i]) * total
			var run float64
			want := -1
			for j, v := range row {
				if math.IsNaN(float64(v)) {
					continue
				}
				run += math.Exp((float64(v) - mx) / temp)
				if target < run {
					want = j
					break
				}
			}
			if int(got[i]) != want {
				t.Errorf("sample row %d (u=%v) = %d, want %d", i, us[i], got[i], want)
			}
		}
	})
}

// TestGraphReplay captures a small decode-like step (RMSNorm, GEMV,
// residual add, argmax) into a CUDA graph and checks that replaying it
// twice gives bit-identical results to launching the same kernels twice.
func TestGraphReplay(t *testing.T) {
	const dim = 256
	r := rand.New(rand.NewPCG(12, 13))
	data, _ := randMatrix(quant.Q8_0, dim, dim, 5)
	h0 := randVec(r, dim, 1)
	nw := randVec(r, dim, 1)
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		s, err := c.NewStream(cudadrv.StreamNonBlocking)
		must(err)
		defer c.DestroyStream(s)
		w := Matrix{Type: quant.Q8_0, Rows: dim, Cols: dim, Ptr: put(a, data)}
		h, xn, tmp, normW, best := a.alloc(dim*4), a.alloc(dim*4), a.alloc(dim*4), put(a, nw), a.alloc(4)
		step := func() error {
			if err := k.RMSNorm(c, s, h, normW, xn, 1, dim, 1e-5); err != nil {
				return err
			}
			if err := k.GEMV(c, s, w, xn, tmp, 1); err != nil {
				return err
			}
			if err := k.Add(c, s, h, tmp, dim); err != nil {
				return err
			}
			return k.Argmax(c, s, h, 1, dim, best)
		}
		must(cudadrv.Upload(c, h, h0, s))
		var direct [2][]float32
		var directBest [2]int32
		for i := range direct {
			must(step())
			direct[i] = get[float32](a, h, dim)
			directBest[i] = get[int32](a, best, 1)[0]
		}
		must(cudadrv.Upload(c, h, h0, s))
		must(c.BeginCapture(s, cudadrv.CaptureThreadLocal))
		if err := step(); err != nil {
			c.EndCapture(s)
			panic(err)
		}
		g, err := c.EndCapture(s)
		must(err)
		defer c.DestroyGraph(g)
		if n, _ := c.GraphNodes(g); n != 4 {
			t.Errorf("graph has %d nodes, want 4", n)
		}
		ge, err := c.Instantiate(g)
		must(err)
		defer c.DestroyGraphExec(ge)
		for i := range direct {
			must(c.GraphLaunch(ge, s))
			must(c.StreamSync(s))
			got := get[float32](a, h, dim)
			for j := range got {
				if got[j] != direct[i][j] {
					t.Fatalf("replay %d: h[%d] = %v, direct launches gave %v", i, j, got[j], direct[i][j])
				}
			}
			if b := get[int32](a, best, 1)[0]; b != directBest[i] {
				t.Fatalf("replay %d: argmax %d, direct %d", i, b, directBest[i])
			}
		}
	})
}
