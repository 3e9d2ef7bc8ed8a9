package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// normLike returns n RMSNorm outputs of width cols as a llama layer feeds
// its q/k/v and gate/up: Gaussian channels with a few 30x outlier channels
// (the massive activations of real models), normalised, times a norm
// weight around 1.
func normLike(r *rand.Rand, n, cols int) []float32 {
	out := make([]float32, n*cols)
	g := make([]float64, cols)
	for i := range g {
		g[i] = math.Abs(1 + 0.3*r.NormFloat64())
	}
	outl := map[int]bool{}
	for len(outl) < 4 {
		outl[r.IntN(cols)] = true
	}
	for b := 0; b < n; b++ {
		v := make([]float64, cols)
		var ss float64
		for i := range v {
			v[i] = r.NormFloat64()
			if outl[i] {
				v[i] *= 30
			}
			ss += v[i] * v[i]
		}
		rms := math.Sqrt(ss/float64(cols) + 1e-5)
		for i := range v {
			out[b*cols+i] = float32(v[i] / rms * g[i])
		}
	}
	return out
}

// swigluLike returns n SwiGLU outputs silu(a)*b (what ffn_down reads):
// heavy-tailed products of two Gaussians.
func swigluLike(r *rand.Rand, n, cols int) []float32 {
	out := make([]float32, n*cols)
	for i := range out {
		a, b := 2*r.NormFloat64(), 2*r.NormFloat64()
		out[i] = float32(a / (1 + math.Exp(-a)) * b)
	}
	return out
}

// TestGEMVQQuantize checks the CPU model of gemvq_x on edge cases the
// GPU test meets only by chance: zeros, exact ties, the clamp, NaN.
func TestGEMVQQuantize(t *testing.T) {
	t.Parallel()
	x := make([]float32, 128)
	x[1], x[2], x[3] = 1, -0.5, 0.25 // block 0: max 1
	for i := 64; i < 128; i++ {
		x[i] = float32(math.NaN())
	}
	x[64] = 2
	xq := gemvqQuantizeRef(x)
	got := gemvqDequantX(xq, 128)
	for i, want := range []float64{0, 1, -0.5, 0.25} {
		if math.Abs(got[i]-want) > 1.0/65534 {
			t.Errorf("x[%d] = %v after quantization, want %v", i, got[i], want)
		}
	}
	if xq[0] != 0 || xq[128] != 0 {
		t.Errorf("zero element quantized to %d/%d", xq[0], xq[128])
	}
	if !math.IsNaN(got[64]) {
		t.Errorf("a block with NaN dequantizes to %v, want NaN", got[64])
	}
}

// TestGEMVQLayouts checks the CPU model's L6 and LP (the copies of
// quantized x arranged for the Q6_K units and the Q4_K pair units,
// common.cuh) against L0: L6 as the Q6_K unit reads it (q6_dot's elements
// 256sb + 128n + 32qq + 16h + j, the sums and scales of the unit's two
// 64-blocks), LP as the pair unit does (64-block v's elements in 16-byte
// pieces, its half sums and scale), for rows of 4, 12 and 64 blocks; the
// GPU tests hold the kernels' bytes to this model bit for bit.
func TestGEMVQLayouts(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	for _, cols := range []int{256, 768, 4096} {
		x := normLike(r, 1, cols)
		xq := gemvqQuantizeRef(x)
		if n := int64(len(xq)); n != gemvqBytes(cols) || n%16 != 0 || gemvqL6(cols)%16 != 0 || gemvqLP(cols)%16 != 0 {
			t.Fatalf("cols %d: %d bytes, L6 at %d, LP at %d: want gemvqBytes %d, 16-byte aligned", cols, n, gemvqL6(cols), gemvqLP(cols), gemvqBytes(cols))
		}
		nu, l6 := cols/64, xq[gemvqL6(cols):]
		le := binary.LittleEndian
		for u := 0; u < nu; u++ {
			sb, n, h := u>>2, (u>>1)&1, u&1
			for qq := 0; qq < 4; qq++ {
				for j := 0; j < 16; j++ {
					e := 256*sb + 128*n + 32*qq + 16*h + j
					if gh, gl := l6[16*(qq*nu+u)+j], l6[16*((4+qq)*nu+u)+j]; gh != xq[e] || gl != xq[cols+e] {
						t.Fatalf("cols %d unit %d quarter %d byte %d: L6 %d/%d, L0 %d/%d", cols, u, qq, j, gh, gl, xq[e], xq[cols+e])
					}
				}
			}
			lp := xq[gemvqLP(cols):]
			for i := 0; i < 8; i++ { // LP: block u, piece i (high bytes, then low)
				for j := 0; j < 16; j++ {
					e := 64*u + 16*(i&3) + j
					want := xq[e]
					if i >= 4 {
						want = xq[cols+e]
					}
					if got := lp[16*(i*nu+u)+j]; got != want {
						t.Fatalf("cols %d LP block %d piece %d byte %d: %d, want %d", cols, u, i, j, got, want)
					}
				}
			}
			hb := xq[2*cols+32*u:]
			g := func(o int) int32 { return int32(le.Uint32(hb[o:])) }
			if s0, s1 := int32(le.Uint32(lp[128*nu+8*u:])), int32(le.Uint32(lp[128*nu+8*u+4:])); s0 != g(16)+g(24) || s1 != g(20)+g(28) {
				t.Fatalf("cols %d LP block %d: half sums %d, %d, want %d, %d", cols, u, s0, s1, g(16)+g(24), g(20)+g(28))
			}
			if got, want := le.Uint32(lp[136*nu+4*u:]), le.Uint32(hb); got != want {
				t.Fatalf("cols %d LP block %d: scale %#x, want %#x", cols, u, got, want)
			}
			for k := 0; k < 2; k++ {
				hdr := xq[2*cols+32*(4*sb+2*n+k):]
				if got, want := le.Uint32(l6[144*nu+8*u+4*k:]), le.Uint32(hdr); got != want {
					t.Fatalf("cols %d unit %d: scale %d is %#x, want %#x", cols, u, k, got, want)
				}
				for i := 0; i < 2; i++ { // quarter 2k+i: group h (i = 0) or 2+h of block 4sb+2n+k
					if got, want := le.Uint32(l6[128*nu+16*u+4*(2*k+i):]), le.Uint32(hdr[16+8*h+4*i:]); got != want {
						t.Fatalf("cols %d unit %d: quarter %d sum %d, want %d", cols, u, 2*k+i, int32(got), int32(want))
					}
				}
			}
		}
	}
}

// TestGEMVQFidelity measures, on the CPU, the error the integer path adds
// on an 8b-shaped GEMV (14336x4096 Q4_K against norm-like activations,
// 4096x14336 against SwiGLU-like ones): the emulated kernel (every integer
// and float32 operation of gemvq.cu in its order) against float64 dot
// products with the float32 x. Expected: x's rounding is uniform within
// +-sx/2, so NMSE ~ mean(sx^2/12) / mean(x^2) (~5e-10 for Gaussian blocks
// of 64; the outlier channels make their blocks' steps 30x coarser) —
// printed next to the measurement. Asserted: NMSE <= 2x that estimate +
// the float32 summation floor (1e-12), and <= 1e-7 outright (f16 x, which
// the prefill GEMM already uses, costs ~1e-7; the engine's 8b fidelity
// budget is 1e-4 on the logits); every row within its hard error bound
// sum|w_i| sx_i/2 + TestGEMV's float32 tolerance.
func TestGEMVQFidelity(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name       string
		typ        quant.Type
		rows, cols int
		x          func(r *rand.Rand, n, cols int) []float32
	}{
		{"gate Q4_K 14336x4096 norm-like x", quant.Q4_K, 14336, 4096, normLike},
		{"down Q4_K 4096x14336 swiglu-like x", quant.Q4_K, 4096, 14336, swigluLike},
		{"down Q6_K 4096x14336 swiglu-like x", quant.Q6_K, 4096, 14336, swigluLike},
		{"output Q6_K 16384x4096 norm-like x", quant.Q6_K, 16384, 4096, normLike},
	}
	for si, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			rows := sh.rows
			if testing.Short() {
				rows = 512
			}
			r := rand.New(rand.NewPCG(uint64(si), 5))
			rb, _ := sh.typ.RowBytes(int64(sh.cols))
			data := make([]byte, int(rb)*rows)
			must(quant.FillRandomParallel(sh.typ, data, uint64(si+1), 0.05))
			deq := make([]float32, rows*sh.cols)
			must(quant.DequantizeRows(sh.typ, data, sh.cols, deq))
			x := sh.x(r, 1, sh.cols)
			xq := gemvqQuantizeRef(x)
			xd := gemvqDequantX(xq, sh.cols)
			var est, xx float64
			for i, v := range x {
				sx := float64(gemvqScale(xq, sh.cols, i))
				est += sx * sx / 12
				xx += float64(v) * float64(v)
			}
			est /= xx
			// For comparison (logged, not asserted): x rounded to f16 (the
			// half2 option) and to int8 per 32-block (llama.cpp's q8_1).
			xf16, xi8 := make([]float32, sh.cols), make([]float32, sh.cols)
			for i, v := range x {
				xf16[i] = quant.F16ToF32(quant.F32ToF16(v))
			}
			for b := 0; b < sh.cols; b += 32 {
				var mx float64
				for _, v := range x[b : b+32] {
					mx = max(mx, math.Abs(float64(v)))
				}
				for i, v := range x[b : b+32] {
					if mx > 0 {
						xi8[b+i] = float32(math.RoundToEven(float64(v)*127/mx) * mx / 127)
					}
				}
			}
			var num, den, worst, n16, n8 float64
			for row := 0; row < rows; row++ {
				ref, mag := refDot(deq, sh.cols, row, x)
				got := float64(gemvqRowRef(sh.typ, data[row*int(rb):(row+1)*int(rb)], sh.cols, xq, 8, 0))
				var bound float64
				for j, w := range deq[row*sh.cols : (row+1)*sh.cols] {
					bound += math.Abs(float64(w)) * math.Abs(xd[j]-float64(x[j]))
				}
				e := math.Abs(got - ref)
				if tol := bound*(1+1e-6) + gemvTol(mag); !(e <= tol) {
					t.Fatalf("row %d: emulated %v, float64 %v: error %.3g beyond its bound %.3g", row, got, ref, e, tol)
				}
				worst = max(worst, e/max(mag, 1e-30))
				num += (got - ref) * (got - ref)
				den += ref * ref
				r16, _ := refDot(deq, sh.cols, row, xf16)
				r8, _ := refDot(deq, sh.cols, row, xi8)
				n16 += (r16 - ref) * (r16 - ref)
				n8 += (r8 - ref) * (r8 - ref)
			}
			nmse := num / den
			t.Logf("%d rows: NMSE %.3g (x rounding estimate %.3g), worst |err|/sum|w x| %.3g; for comparison f16 x %.3g, int8 x per 32 %.3g",
				rows, nmse, est, worst, n16/den, n8/den)
			if !(nmse <= 2*est+1e-12) || !(nmse <= 1e-7) {
				t.Errorf("NMSE %.3g: above 2x the estimate %.3g or 1e-7", nmse, est)
			}
		})
	}
}

// TestGEMVQ checks the integer path on the GPU: the quantized x bit for
// bit against gemvqQuantizeRef, every output against the CPU emulation of
// the kernel (the same integer and float32 operations in the same order:
// tolerance 1e-6 of sum|w x|, for the double-rounding the emulation's
// float64 FMA can differ by), and against float64 dot products with the
// float32 x within the hard bound of x's rounding (sum |w_i| |x_i - sx
// x_int_i|) plus TestGEMV's tolerance. Shapes: GEMV alone, GEMVFused with
// all Q4_K and with a Q6_K matrix, GEMVGLU; batches 1-2; with Q6_K on the
// float path (Tuning.IntegerQ6K off: checked with TestGEMV's tolerance)
// and on the integer path, plain or re-laid (Q6KA), and with one and two
// units in flight forced (Tuning.unroll).
func TestGEMVQ(t *testing.T) {
	t.Parallel()
	_, _ = gpu(t)
	type mat = gemvqMat
	cases := []gemvqCase{
		{"gemv-259x4096", 4096, []mat{{quant.Q4_K, 259}}, 0},
		{"gemv-33x14336", 14336, []mat{{quant.Q4_K, 33}}, 0},
		{"gemv-64x512", 512, []mat{{quant.Q4_K, 64}}, 0},
		{"fused-q4k-q4k-q4k", 4096, []mat{{quant.Q4_K, 130}, {quant.Q4_K, 33}, {quant.Q4_K, 33}}, 0},
		// The 8b shape's q/k/v: gemvq_ps6_1 where the split is on (and in
		// fused-q4k-q4k-q4k).
		{"fused-qkv-8b", 4096, []mat{{quant.Q4_K, 4096}, {quant.Q4_K, 1024}, {quant.Q4_K, 1024}}, 0},
		// The 8b shape's q/k/v with a Q6_K v: gemvq_mixed_s_1 where the
		// split is on and v re-laid (and in fused-q4k-q4k-q6k).
		{"fused-qkv6-8b", 4096, []mat{{quant.Q4_K, 4096}, {quant.Q4_K, 1024}, {quant.Q6_K, 1024}}, 0},
		{"fused-q4k-q4k-q6k", 4096, []mat{{quant.Q4_K, 66}, {quant.Q4_K, 17}, {quant.Q6_K, 17}}, 0},
		{"glu-swiglu", 4096, []mat{{quant.Q4_K, 203}, {quant.Q4_K, 203}}, SwiGLU},
		{"glu-geglu", 3584, []mat{{quant.Q4_K, 45}, {quant.Q4_K, 45}}, GeGLU},
		{"q6k-gemv-4096", 4096, []mat{{quant.Q6_K, 67}}, 0},
		{"q6k-gemv-14336", 14336, []mat{{quant.Q6_K, 19}}, 0},
		{"q6k-gemv-512", 512, []mat{{quant.Q6_K, 9}}, 0},
		// Tall enough for gemvq_q6k_s (two blocks per multiprocessor of
		// up to 144) .
		{"q6k-gemv-4096-tall", 4096, []mat{{quant.Q6_K, 1153}}, 0},
		{"q6k-gemv-14336-tall", 14336, []mat{{quant.Q6_K, 1155}}, 0},
	}
	for _, v := range []struct {
		q6     bool
		unroll int
		relay  bool
	}{{false, 0, false}, {true, 0, false}, {true, 1, false}, {true, 2, false}, {true, 0, true}, {true, 2, true}, {false, 0, true}} {
		set := func(tu *Tuning) { tu.IntegerQ6K, tu.unroll = v.q6, v.unroll }
		t.Run(fmt.Sprintf("q6k=%v/unroll=%d/q6ka=%v", v.q6, v.unroll, v.relay), func(t *testing.T) { testGEMVQCases(t, set, v.relay, cases) })
	}
}

type gemvqCase struct {
	name string
	cols int
	ms   []gemvqMat
	glu  GLU
}

type gemvqMat struct {
	typ  quant.Type
	rows int
}

// testGEMVQCases runs cases on a view of the test device's kernels whose
// tuning set changes, re-laying the Q6_K matrices on the device first
// (RelayQ6K: they then run as Q6KA) where relay is set.
func testGEMVQCases(t *testing.T, set func(*Tuning), relay bool, cases []gemvqCase) {
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 99))
			xs := normLike(r, 2, tc.cols)
			datas := make([][]byte, len(tc.ms))
			deqs := make([][]float32, len(tc.ms))
			for i, m := range tc.ms {
				datas[i], deqs[i] = randMatrix(m.typ, m.rows, tc.cols, uint64(200*ci+i))
			}
			xqs := [][]byte{gemvqQuantizeRef(xs[:tc.cols]), gemvqQuantizeRef(xs[tc.cols:])}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				k = tuned(k, set)
				s, done := gemvqStream(c, k, tc.cols)
				defer done()
				x := put(a, xs)
				outs := make([]GEMVOut, len(tc.ms))
				for i, m := range tc.ms {
					outs[i] = GEMVOut{W: Matrix{Type: m.typ, Rows: m.rows, Cols: tc.cols, Ptr: put(a, datas[i])}, Y: a.alloc(int64(2 * m.rows * 4))}
					if relay && m.typ == quant.Q6_K {
						w, err := k.RelayQ6K(c, s, outs[i].W)
						must(err)
						outs[i].W = w
					}
				}
				for nb := 1; nb <= MaxFusedGEMVBatch; nb++ {
					for i, m := range tc.ms {
						poison(a, outs[i].Y, 2*m.rows)
					}
					switch {
					case tc.glu != 0:
						must(k.GEMVGLU(c, s, outs[0].W, outs[1].W, x, outs[0].Y, nb, tc.glu))
					case len(outs) == 1:
						must(k.GEMV(c, s, outs[0].W, x, outs[0].Y, nb))
					default:
						must(k.GEMVFused(c, s, x, nb, outs...))
					}
					must(c.StreamSync(s))
					fast, q6 := false, false
					for _, o := range outs {
						fast = fast || k.fastType(o.W.Type)
						q6 = q6 || (matrixType(o.W.Type) == quant.Q6_K && k.fastType(o.W.Type))
					}
					if !fast {
						checkGEMVQ(t, c, a, k, tc.cols, nb, xs, xqs, deqs, datas, outs, tc.glu)
						continue
					}
					// The scratch holds this launch's quantized x.
					gq := make([]byte, int64(nb)*gemvqBytes(tc.cols))
					must(c.CopyDtoH(gq, k.gemvq.ws[s].ptr, s))
					for b := 0; b < nb; b++ {
						if want := xqs[b]; !bytes.Equal(gq[int64(b)*gemvqBytes(tc.cols):int64(b+1)*gemvqBytes(tc.cols)], want) {
							failOnDevice("nb %d: quantized x %d differs from gemvqQuantizeRef", nb, b)
						}
					}
					checkGEMVQ(t, c, a, k, tc.cols, nb, xs, xqs, deqs, datas, outs, tc.glu)
				}
			})
		})
	}
}

// checkGEMVQ compares one launch's outputs (see TestGEMVQ).
func checkGEMVQ(t *testing.T, c *cudadrv.Ctx, a *arena, k *Kernels, cols, nb int, xs []float32, xqs [][]byte, deqs [][]float32, datas [][]byte, outs []GEMVOut, glu GLU) {
	t.Helper()
	q4, q6 := splitQ6(outs)
	groups := q4Groups(q4)
	if glu != 0 {
		groups = ceilDiv(outs[0].W.Rows, gemvqRows/2)
	}
	// Warps per block of each output's launch, as gemvqLaunch sizes them,
	// and the kernel's unit walk (splits: gemvq_q6k_s's halves).
	nws, splits := make([]int, len(outs)), make([]int, len(outs))
	mixed := k.fastType(quant.Q6_K) && k.gemvqMixed(nb, int(glu), q4, q6)
	for i, o := range outs {
		_, _, th := k.gemvq4Geometry(nb, groups, cols)
		if o.W.Type == quant.Q6KA && !mixed {
			// gemvq_q6ka: gemvq_q6k's unit walk with its own warps.
			_, _, th = k.gemvq6aWaveGeometry(nb, o.W.Rows, cols)
		} else if matrixType(o.W.Type) == quant.Q6_K {
			_, th = k.tune.gemvqGeometry(ceilDiv(o.W.Rows, gemvq6Rows), cols)
			if ok, sth := k.gemvq6Staged(o.W); ok && !mixed {
				th = sth
				// gemvq_q6k_s: the super-blocks whole within the first
				// of its gemvq6sChunks copies come first.
				chunks := int(o.W.RowBytes() / 16)
				splits[i] = 4 * (16 * (chunks / gemvq6sChunks) / 210)
			}
		}
		nws[i] = th / 32
	}
	// gemvq_p4_1 / gemvq_p2u2_1 / gemvq_ps6_1: the pair units' walk for
	// every output; gemvq_mixed_s_1: for the Q4_K ones, the Q6KA one's
	// one unit a lane as gemvq_q6ka's walk with as many warps.
	pair := make([]bool, len(outs))
	if _, _, pth, ok := k.gemvqPairGeometry(nb, int(glu), q4); ok && len(q6) == 0 {
		for i := range nws {
			nws[i], pair[i] = pth/32, true
		}
	}
	if mixed {
		if _, th, ok := k.gemvqMixedSplitGeometry(q4, q6[0]); ok {
			for i, o := range outs {
				nws[i], pair[i] = th/32, o.W.Type == quant.Q4_K
			}
		}
	}
	rowRef := func(i, b, row int) (emu, ref, mag, bound float64) {
		ref, mag = refDot(deqs[i], cols, row, xs[b*cols:])
		xd := gemvqDequantX(xqs[b], cols)
		for j, w := range deqs[i][row*cols : (row+1)*cols] {
			bound += math.Abs(float64(w)) * math.Abs(xd[j]-float64(xs[b*cols+j]))
		}
		rb := int(outs[i].W.RowBytes())
		if pair[i] {
			emu = float64(gemvqPairRowRef(datas[i][row*rb:(row+1)*rb], cols, xqs[b], nws[i]))
			return
		}
		// datas holds the Q6_K bytes a Q6KA matrix was re-laid from.
		emu = float64(gemvqRowRef(matrixType(outs[i].W.Type), datas[i][row*rb:(row+1)*rb], cols, xqs[b], nws[i], splits[i]))
		return
	}
	if glu != 0 {
		rows := outs[0].W.Rows
		got := get[float32](a, outs[0].Y, nb*rows)
		for b := 0; b < nb; b++ {
			for row := 0; row < rows; row++ {
				ge, g, gm, gb := rowRef(0, b, row)
				ue, u, um, ub := rowRef(1, b, row)
				emu := float64(gemvqGLURef(glu, float32(ge), float32(ue)))
				var av float64
				if glu == SwiGLU {
					av = g / (1 + math.Exp(-g))
				} else {
					av = 0.5 * g * (1 + math.Tanh(0.7978845608028654*(g+0.044715*g*g*g)))
				}
				want := av * u
				gv := float64(got[b*rows+row])
				if e := math.Abs(gv - emu); !(e <= 1e-6*(gm+um)*(1+math.Abs(ue)+math.Abs(av))+1e-9) {
					failOnDevice("nb %d: out[%d][%d] = %v, emulation %v (err %.3g)", nb, b, row, gv, emu, e)
				}
				tol := 1.2*math.Abs(u)*(gemvTol(gm)+gb) + math.Abs(av)*(gemvTol(um)+ub) + 3e-7*math.Abs(want) + 1e-7
				if e := math.Abs(gv - want); !(e <= tol) {
					failOnDevice("nb %d: out[%d][%d] = %v, float64 ref %v (err %.3g > %.3g)", nb, b, row, gv, want, e, tol)
				}
			}
		}
		return
	}
	for i, o := range outs {
		rows := o.W.Rows
		got := get[float32](a, o.Y, nb*rows)
		for b := 0; b < nb; b++ {
			for row := 0; row < rows; row++ {
				gv := float64(got[b*rows+row])
				if !k.fastType(o.W.Type) { // float path
					ref, mag := refDot(deqs[i], cols, row, xs[b*cols:])
					if e := math.Abs(gv - ref); !(e <= gemvTol(mag)) {
						failOnDevice("nb %d matrix %d (%v): y[%d][%d] = %v, float64 ref %v (err %.3g)", nb, i, o.W.Type, b, row, gv, ref, e)
					}
					continue
				}
				emu, ref, mag, bound := rowRef(i, b, row)
				if e := math.Abs(gv - emu); !(e <= 1e-6*mag+1e-9) {
					failOnDevice("nb %d matrix %d: y[%d][%d] = %v, emulation %v (err %.3g)", nb, i, b, row, gv, emu, e)
				}
				if e := math.Abs(gv - ref); !(e <= bound*(1+1e-6)+gemvTol(mag)) {
					failOnDevice("nb %d matrix %d: y[%d][%d] = %v, float64 ref %v (err %.3g > bound %.3g + %.3g)", nb, i, b, row, gv, ref, e, bound, gemvTol(mag))
				}
			}
		}
	}
}

// TestGEMVQFallback: with the integer path in the tuning but no scratch
// reserved for the stream (or a scratch too narrow), and with it out of
// the tuning, GEMV takes the float path and meets TestGEMV's tolerance.
func TestGEMVQFallback(t *testing.T) {
	t.Parallel()
	const rows, cols = 67, 4096
	r := rand.New(rand.NewPCG(8, 8))
	xs := normLike(r, 1, cols)
	data, deq := randMatrix(quant.Q4_K, rows, cols, 9)
	for _, tc := range []struct {
		name    string
		on      bool
		reserve int
	}{{"off", false, cols}, {"no scratch", true, 0}, {"narrow scratch", true, 1024}} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, tc.reserve)
				defer done()
				k = tuned(k, func(tu *Tuning) { tu.IntegerGEMV = tc.on })
				w := Matrix{Type: quant.Q4_K, Rows: rows, Cols: cols, Ptr: put(a, data)}
				x, y := put(a, xs), a.alloc(rows*4)
				poison(a, y, rows)
				if _, ok := k.fastScratch(s, x, 1, w); ok {
					failOnDevice("fast path chosen")
				}
				must(k.GEMV(c, s, w, x, y, 1))
				must(c.StreamSync(s))
				got := get[float32](a, y, rows)
				for row := range got {
					ref, mag := refDot(deq, cols, row, xs)
					if e := math.Abs(float64(got[row]) - ref); !(e <= gemvTol(mag)) {
						failOnDevice("y[%d] = %v, float64 ref %v (err %.3g)", row, got[row], ref, e)
					}
				}
			})
		})
	}
}

// failOnDevice fails a check made inside run's callback, which runs on the
// device goroutine: t.Fatal there would end that goroutine (runtime.Goexit)
// and hang Device.Do, while a panic comes back from Do as an error.
func failOnDevice(format string, args ...any) { panic(fmt.Errorf(format, args...)) }

// TestGEMVQGeometry pins the warps per block of the integer launches at
// the 8b decode shapes, and the rule's limits.
func TestGEMVQGeometry(t *testing.T) {
	t.Parallel()
	tu := baseTuning()
	for _, tc := range []struct {
		name         string
		groups, cols int
		threads      int
	}{
		{"4096 cols (q, o, gate+up; Q6_K v, output)", 1024, 4096, 64},
		{"14336 cols (down)", 1024, 14336, 256},
		{"512 cols", 16, 512, 32},
		{"2048 cols", 16, 2048, 32},
		{"8192 cols", 16, 8192, 128},
		{"65536 cols", 4, 65536, 256},
	} {
		blocks, threads := tu.gemvqGeometry(tc.groups, tc.cols)
		if blocks != tc.groups || threads != tc.threads {
			t.Errorf("%s: %d blocks of %d threads, want %d of %d", tc.name, blocks, threads, tc.groups, tc.threads)
		}
	}
	// Q6KA: 4-row groups for one vector (2 for two), gemvqGeometry's warps;
	// a forced unroll changes nothing (one Q6KA kernel a batch).
	for _, tc := range []struct {
		nb, unroll, rows, cols int
		name                   string
		blocks, threads        int
	}{
		{1, 0, 4096, 14336, "gemvq_q6ka_1", 1024, 256},
		{1, 2, 4096, 14336, "gemvq_q6ka_1", 1024, 256},
		{1, 0, 128256, 4096, "gemvq_q6ka_1", 32064, 64},
		{2, 0, 1025, 4096, "gemvq_q6ka_2", 513, 64},
		{1, 2, 9, 512, "gemvq_q6ka_1", 3, 32},
	} {
		tu := baseTuning()
		tu.unroll = tc.unroll
		name, blocks, threads := tu.gemvq6aGeometry(tc.nb, tc.rows, tc.cols)
		if name != tc.name || blocks != tc.blocks || threads != tc.threads {
			t.Errorf("Q6KA %dx%d nb %d unroll %d: %s, %d blocks of %d threads; want %s, %d of %d",
				tc.rows, tc.cols, tc.nb, tc.unroll, name, blocks, threads, tc.name, tc.blocks, tc.threads)
		}
	}
	// The one-wave kernel: a one-vector Q6KA launch whose 2-row blocks of
	// one warp all fit the device (132 multiprocessors, 17 such blocks each
	// where the occupancy query is not made), unforced.
	for _, tc := range []struct {
		nb, unroll, rows, cols int
		name                   string
		blocks, threads        int
	}{
		{1, 0, 4096, 14336, "gemvq_q6ka_r2u2_1", 2048, 32},
		{1, 0, 4488, 14336, "gemvq_q6ka_r2u2_1", 2244, 32},
		{1, 0, 4489, 14336, "gemvq_q6ka_1", 1123, 256},
		{1, 0, 1024, 4096, "gemvq_q6ka_r2u2_1", 512, 32},
		{1, 0, 128256, 4096, "gemvq_q6ka_1", 32064, 64},
		{2, 0, 4096, 14336, "gemvq_q6ka_2", 2048, 256},
		{1, 2, 4096, 14336, "gemvq_q6ka_1", 1024, 256},
	} {
		k := testKernels(132)
		k.tune.unroll = tc.unroll
		name, blocks, threads := k.gemvq6aWaveGeometry(tc.nb, tc.rows, tc.cols)
		if name != tc.name || blocks != tc.blocks || threads != tc.threads {
			t.Errorf("Q6KA %dx%d nb %d unroll %d: %s, %d blocks of %d threads; want %s, %d of %d",
				tc.rows, tc.cols, tc.nb, tc.unroll, name, blocks, threads, tc.name, tc.blocks, tc.threads)
		}
	}
}

// TestNormQ checks the norms that leave their output quantized for the
// integer GEMVs (RMSNormQ, AddRMSNormQ): y equals the plain norm's bit for
// bit, the scratch holds gemvq_x's bytes of y (gemvqQuantizeRef), the GEMV
// that follows skips its quantizing launch and gives what a freshly
// quantized x gives, and any other launch in between (here an Add that
// changes y) drops the held x so the GEMV quantizes the new y. Past
// MaxFusedGEMVBatch rows the norms fall back to the plain ones.
func TestNormQ(t *testing.T) {
	t.Parallel()
	const rows = 37
	r := rand.New(rand.NewPCG(31, 32))
	for _, tc := range []struct {
		add    bool
		n, dim int
	}{{false, 1, 4096}, {false, 2, 512}, {true, 1, 4096}, {true, 2, 1024}, {false, 3, 512}} {
		t.Run(fmt.Sprintf("add=%v/n=%d/dim=%d", tc.add, tc.n, tc.dim), func(t *testing.T) {
			n, dim := tc.n, tc.dim
			xs, as, ws := randVec(r, n*dim, 2), randVec(r, n*dim, 1), randVec(r, dim, 1)
			data, _ := randMatrix(quant.Q4_K, rows, dim, 33)
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, dim)
				defer done()
				wm := Matrix{Type: quant.Q4_K, Rows: rows, Cols: dim, Ptr: put(a, data)}
				wp, ap := put(a, ws), put(a, as)
				// The plain norm first, on copies of x.
				x0, y0 := put(a, xs), a.alloc(int64(n*dim*4))
				if tc.add {
					must(k.AddRMSNorm(c, s, x0, ap, wp, y0, n, dim, 1e-5))
				} else {
					must(k.RMSNorm(c, s, x0, wp, y0, n, dim, 1e-5))
				}
				x, y := put(a, xs), a.alloc(int64(n*dim*4))
				poison(a, y, n*dim)
				if tc.add {
					must(k.AddRMSNormQ(c, s, x, ap, wp, y, n, dim, 1e-5))
				} else {
					must(k.RMSNormQ(c, s, x, wp, y, n, dim, 1e-5))
				}
				held := k.gemvq.ws[s].held == y
				if held != (n <= MaxFusedGEMVBatch) {
					failOnDevice("held %v with %d rows", held, n)
				}
				must(c.StreamSync(s))
				want, got := get[float32](a, y0, n*dim), get[float32](a, y, n*dim)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						failOnDevice("y[%d] = %v, plain norm %v", i, got[i], want[i])
					}
				}
				if !held {
					return
				}
				checkScratch(a, k, s, want, n, dim)
				// The GEMV on the held x, and on a copy (quantized afresh).
				g1, g2 := a.alloc(int64(n*rows*4)), a.alloc(int64(n*rows*4))
				must(k.GEMV(c, s, wm, y, g1, n))
				if k.gemvq.ws[s].held != y {
					failOnDevice("an integer GEMV dropped the held x")
				}
				must(k.GEMV(c, s, wm, put(a, want), g2, n))
				must(c.StreamSync(s))
				r1, r2 := get[float32](a, g1, n*rows), get[float32](a, g2, n*rows)
				for i := range r1 {
					if math.Float32bits(r1[i]) != math.Float32bits(r2[i]) {
						failOnDevice("GEMV on the held x: y[%d] = %v, on x quantized afresh %v", i, r1[i], r2[i])
					}
				}
				// y changes: the held x must not be used.
				if tc.add {
					must(k.RMSNormQ(c, s, x, wp, y, n, dim, 1e-5))
				} else {
					must(k.AddRMSNormQ(c, s, x, ap, wp, y, n, dim, 1e-5))
				}
				must(k.Add(c, s, y, ap, int64(n*dim)))
				if k.gemvq.ws[s].held != 0 {
					failOnDevice("held x kept across an Add")
				}
				must(k.GEMV(c, s, wm, y, g1, n))
				must(c.StreamSync(s))
				changed := get[float32](a, y, n*dim)
				must(k.GEMV(c, s, wm, put(a, changed), g2, n))
				must(c.StreamSync(s))
				r1, r2 = get[float32](a, g1, n*rows), get[float32](a, g2, n*rows)
				for i := range r1 {
					if math.Float32bits(r1[i]) != math.Float32bits(r2[i]) {
						failOnDevice("GEMV after y changed: y[%d] = %v, on the new y quantized afresh %v", i, r1[i], r2[i])
					}
				}
			})
		})
	}
}

// checkScratch fails the test unless stream s's integer-GEMV scratch
// holds gemvq_x's bytes (gemvqQuantizeRef) of the n vectors of dim floats
// in x (after the stream is synchronised).
func checkScratch(a *arena, k *Kernels, s cudadrv.Stream, x []float32, n, dim int) {
	xq := get[byte](a, k.gemvq.ws[s].ptr, int(int64(n)*gemvqBytes(dim)))
	for b := 0; b < n; b++ {
		ref := gemvqQuantizeRef(x[b*dim : (b+1)*dim])
		off := int64(b) * gemvqBytes(dim)
		for i, v := range ref {
			if xq[off+int64(i)] != v {
				failOnDevice("vector %d: quantized byte %d = %#x, gemvq_x's %#x", b, i, xq[off+int64(i)], v)
			}
		}
	}
}

// TestGEMVEach: each vector against its own matrix (Q4_K and Q6_K mixed)
// gives what a GEMV of that vector alone gives, bit for bit, on the
// integer path (the scratch then holds every vector quantized, one launch
// for them all) and where the scratch is too small for them all (a GEMV
// each); one vector is a GEMV.
func TestGEMVEach(t *testing.T) {
	t.Parallel()
	const rows, cols = 37, 768
	r := rand.New(rand.NewPCG(51, 52))
	for _, tc := range []struct {
		n, reserve int
		together   bool // the integer path's one launch for every vector
	}{{8, 4096, true}, {3, 4096, true}, {1, 768, true}, {8, 768, false}} {
		t.Run(fmt.Sprintf("n=%d/reserve=%d", tc.n, tc.reserve), func(t *testing.T) {
			n := tc.n
			xs := randVec(r, n*cols, 2)
			datas := make([][]byte, n)
			types := make([]quant.Type, n)
			for i := range n {
				types[i] = quant.Q4_K
				if i%3 == 2 {
					types[i] = quant.Q6_K
				}
				datas[i], _ = randMatrix(types[i], rows, cols, uint64(60+i))
			}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, tc.reserve)
				defer done()
				outs := make([]GEMVOut, n)
				fresh := make([]cudadrv.DevPtr, n)
				for i := range n {
					outs[i] = GEMVOut{W: Matrix{Type: types[i], Rows: rows, Cols: cols, Ptr: put(a, datas[i])}, Y: a.alloc(rows * 4)}
					fresh[i] = a.alloc(rows * 4)
				}
				must(k.GEMVEach(c, s, put(a, xs), outs))
				must(c.StreamSync(s))
				if tc.together && n > 1 {
					checkScratch(a, k, s, xs, n, cols)
				}
				for i, o := range outs {
					must(k.GEMV(c, s, o.W, put(a, xs[i*cols:(i+1)*cols]), fresh[i], 1))
				}
				must(c.StreamSync(s))
				for i, o := range outs {
					got, want := get[float32](a, o.Y, rows), get[float32](a, fresh[i], rows)
					for j := range got {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							failOnDevice("vector %d (%v): y[%d] = %v, GEMV's %v", i, types[i], j, got[j], want[j])
						}
					}
				}
			})
		})
	}
}

// TestQuantizeHeld: QuantizeHeld leaves gemvq_x's bytes of x in the
// scratch (gemvqQuantizeRef) and holds x, so that GEMVs and a GEMVGLU in a
// row read it without quantizing again and give what x quantized afresh
// gives, bit for bit; more vectors than the integer path takes hold nothing.
func TestQuantizeHeld(t *testing.T) {
	t.Parallel()
	const rows = 37
	r := rand.New(rand.NewPCG(41, 42))
	for _, tc := range []struct {
		n, dim int
		held   bool
	}{{1, 2048, true}, {2, 512, true}, {MaxFusedGEMVBatch + 1, 512, false}} {
		t.Run(fmt.Sprintf("n=%d/dim=%d", tc.n, tc.dim), func(t *testing.T) {
			n, dim := tc.n, tc.dim
			xs := randVec(r, n*dim, 2)
			d1, _ := randMatrix(quant.Q4_K, rows, dim, 43)
			d2, _ := randMatrix(quant.Q4_K, rows, dim, 44)
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, dim)
				defer done()
				w1 := Matrix{Type: quant.Q4_K, Rows: rows, Cols: dim, Ptr: put(a, d1)}
				w2 := Matrix{Type: quant.Q4_K, Rows: rows, Cols: dim, Ptr: put(a, d2)}
				x := put(a, xs)
				must(k.QuantizeHeld(c, s, x, n, dim))
				if held := k.gemvq.ws[s].held == x; held != tc.held {
					failOnDevice("held %v, want %v", held, tc.held)
				}
				if !tc.held {
					return
				}
				must(c.StreamSync(s))
				checkScratch(a, k, s, xs, n, dim)
				// Two GEMVs and a GLU on the held x, then the same on a
				// copy of x, quantized afresh by each.
				var held, fresh [3]cudadrv.DevPtr
				for i := range held {
					held[i], fresh[i] = a.alloc(int64(n*rows*4)), a.alloc(int64(n*rows*4))
				}
				must(k.GEMV(c, s, w1, x, held[0], n))
				must(k.GEMV(c, s, w2, x, held[1], n))
				must(k.GEMVGLU(c, s, w1, w2, x, held[2], n, SwiGLU))
				if k.gemvq.ws[s].held != x {
					failOnDevice("the products dropped the held x")
				}
				x2 := put(a, xs)
				must(k.GEMV(c, s, w1, x2, fresh[0], n))
				must(k.GEMV(c, s, w2, put(a, xs), fresh[1], n))
				must(k.GEMVGLU(c, s, w1, w2, put(a, xs), fresh[2], n, SwiGLU))
				must(c.StreamSync(s))
				for j := range held {
					r1, r2 := get[float32](a, held[j], n*rows), get[float32](a, fresh[j], n*rows)
					for i := range r1 {
						if math.Float32bits(r1[i]) != math.Float32bits(r2[i]) {
							failOnDevice("product %d on the held x: y[%d] = %v, on x quantized afresh %v", j, i, r1[i], r2[i])
						}
					}
				}
			})
		})
	}
}

// TestAttentionDecodeQ: decode attention that leaves its output quantized
// (AttentionDecodeQ, one split and several, head widths 64 and 128)
// writes the same output as AttentionDecode, bit for bit, and the same
// quantized bytes as gemvq_x would (gemvqQuantizeRef of that output); the
// stream then holds it, and the o GEMV on the held x equals the GEMV on a
// copy quantized afresh.
func TestAttentionDecodeQ(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		heads, kvHeads, hd, ntok, split int
	}{{32, 8, 128, 1, 1}, {32, 8, 128, 1, 5}, {32, 8, 128, 2, 1}, {8, 4, 64, 2, 3}} {
		t.Run(fmt.Sprintf("heads=%d/hd=%d/ntok=%d/split=%d", tc.heads, tc.hd, tc.ntok, tc.split), func(t *testing.T) {
			r := rand.New(rand.NewPCG(41, uint64(tc.hd)))
			at := Attention{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd, Scale: 1 / float32(math.Sqrt(float64(tc.hd)))}
			kvdim, cols, maxCtx := tc.kvHeads*tc.hd, tc.heads*tc.hd, 300
			kcH, vcH := randVec(r, tc.ntok*maxCtx*kvdim, 1), randVec(r, tc.ntok*maxCtx*kvdim, 1)
			qH := randVec(r, tc.ntok*cols, 1)
			slots, pos := make([]int32, tc.ntok), make([]int32, tc.ntok)
			for i := range slots {
				slots[i], pos[i] = int32(i), int32(maxCtx-1-37*i)
			}
			const rows = 29
			data, _ := randMatrix(quant.Q4_K, rows, cols, 43)
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				s, done := gemvqStream(c, k, cols)
				defer done()
				kv := KVCache{K: put(a, kcH), V: put(a, vcH), MaxCtx: maxCtx, KVDim: kvdim}
				q, sp, pp := put(a, qH), put(a, slots), put(a, pos)
				scratchBytes := at.DecodeScratchBytes(tc.ntok, 64)
				scratch := a.alloc(scratchBytes)
				o0, o1 := a.alloc(int64(tc.ntok*cols*4)), a.alloc(int64(tc.ntok*cols*4))
				must(k.AttentionDecode(c, s, at, kv, q, o0, tc.ntok, sp, pp, maxCtx, tc.split, scratch, scratchBytes))
				poison(a, o1, tc.ntok*cols)
				must(k.AttentionDecodeQ(c, s, at, kv, q, o1, tc.ntok, sp, pp, maxCtx, tc.split, scratch, scratchBytes))
				if k.gemvq.ws[s].held != o1 {
					failOnDevice("the attention output is not held quantized")
				}
				must(c.StreamSync(s))
				want, got := get[float32](a, o0, tc.ntok*cols), get[float32](a, o1, tc.ntok*cols)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						failOnDevice("out[%d] = %v, AttentionDecode's %v", i, got[i], want[i])
					}
				}
				checkScratch(a, k, s, want, tc.ntok, cols)
				wm := Matrix{Type: quant.Q4_K, Rows: rows, Cols: cols, Ptr: put(a, data)}
				g1, g2 := a.alloc(int64(tc.ntok*rows*4)), a.alloc(int64(tc.ntok*rows*4))
				must(k.GEMV(c, s, wm, o1, g1, tc.ntok))
				must(k.GEMV(c, s, wm, put(a, want), g2, tc.ntok))
				must(c.StreamSync(s))
				r1, r2 := get[float32](a, g1, tc.ntok*rows), get[float32](a, g2, tc.ntok*rows)
				for i := range r1 {
					if math.Float32bits(r1[i]) != math.Float32bits(r2[i]) {
						failOnDevice("GEMV on the held x: y[%d] = %v, on x quantized afresh %v", i, r1[i], r2[i])
					}
				}
			})
		})
	}
}

// TestU2Occupancy: Load's occupancy figure for gemvq_fused_u2_1 (the
// one-wave rule of gemvq4Geometry) is the driver's, it falls as blocks
// grow, and with the sm_90 cubin it is the 8 blocks of 64 threads the
// rule was chosen with; another figure there means the cubin's registers
// changed and the rule wants measuring again.
func TestU2Occupancy(t *testing.T) {
	d, k := gpu(t)
	var by [3]int
	err := d.Do(func(c *cudadrv.Ctx) error {
		f, err := k.fn("gemvq_fused_u2_1")
		if err != nil {
			return err
		}
		for i, th := range []int{64, 128, 256} {
			if by[i], err = c.MaxActiveBlocks(f, th, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gemvq_fused_u2_1 blocks a multiprocessor holds (%s): %d of 64 threads, %d of 128, %d of 256", k.Image, by[0], by[1], by[2])
	if by[0] != k.u2PerSM || k.u2BlocksPerSM() != by[0] {
		t.Fatalf("Load kept %d (rule uses %d), the driver says %d", k.u2PerSM, k.u2BlocksPerSM(), by[0])
	}
	if !(by[0] >= by[1] && by[1] >= by[2] && by[2] >= 1 && by[0] <= 32) {
		t.Fatalf("occupancy %v: want non-increasing with block size, 1..32", by)
	}
	if strings.Contains(k.Image, "cubin") && by[0] != gemvqU2BlocksPerSMDefault {
		t.Errorf("sm_90 cubin: %d blocks of 64 threads, the rule was measured with %d", by[0], gemvqU2BlocksPerSMDefault)
	}
}

// TestGEMVQ4GeometryOccupancy: the one-wave rule takes the two-units
// kernel only while the row groups fit the device in one wave of the
// blocks the driver says a multiprocessor holds (the sm_90 cubin's figure
// where the query failed); host-only, a Kernels of 132 multiprocessors.
func TestGEMVQ4GeometryOccupancy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		perSM, groups int
		want          string
	}{
		{0, 1024, "gemvq_fused_u2_1"}, // o, down of the 8b shape, the cubin's figure
		{0, 1056, "gemvq_fused_u2_1"}, // 8 x 132: exactly one wave
		{0, 1057, "gemvq_fused_1"},
		{0, 1536, "gemvq_fused_1"}, // q/k/v
		{4, 1024, "gemvq_fused_1"}, // a JIT image of more registers: two waves
		{4, 528, "gemvq_fused_u2_1"},
		{12, 1536, "gemvq_fused_u2_1"},
	} {
		k := testKernels(132)
		k.u2PerSM = c.perSM
		if got, _, _ := k.gemvq4Geometry(1, c.groups, 4096); got != c.want {
			t.Errorf("%d blocks a multiprocessor, %d groups: %s, want %s", c.perSM, c.groups, got, c.want)
		}
	}
	k := testKernels(132)
	if got, _, _ := k.gemvq4Geometry(2, 100, 4096); got != "gemvq_fused_2" {
		t.Errorf("two vectors: %s, want gemvq_fused_2", got)
	}
}

// gemvqStream is a fresh non-blocking stream for a run callback, with the
// integer GEMVs' scratch reserved on it for cols columns (none where cols
// is 0); done releases the scratch and destroys the stream.
func gemvqStream(c *cudadrv.Ctx, k *Kernels, cols int) (s cudadrv.Stream, done func()) {
	s, err := c.NewStream(cudadrv.StreamNonBlocking)
	must(err)
	done = func() {
		defer c.DestroyStream(s)
		must(k.ReleaseFastGEMV(c, s))
	}
	if cols > 0 {
		if err := k.ReserveFastGEMV(c, s, cols); err != nil {
			done()
			panic(err)
		}
	}
	return s, done
}

// TestGEMVQPairGeometry pins which launches take the pair-unit kernels:
// one-vector launches of one Q4_K matrix in gemvq_p4_1 / gemvq_p2u2_1
// where their blocks fit the device in one wave (o and down of the 8b
// shape), else of up to three Q4_K matrices of up to 4096 columns in
// gemvq_ps6_1 where its blocks do (q/k/v), with nothing forced;
// host-only, a Kernels of 132 multiprocessors with the sm_90 cubin's
// figures.
func TestGEMVQPairGeometry(t *testing.T) {
	t.Parallel()
	q4 := func(rows, cols int) GEMVOut { return GEMVOut{W: Matrix{Type: quant.Q4_K, Rows: rows, Cols: cols}} }
	qkv := []GEMVOut{q4(4096, 4096), q4(1024, 4096), q4(1024, 4096)}
	for _, c := range []struct {
		name     string
		nb, mode int
		outs     []GEMVOut
		unroll   int
		want     string
		blocks   int
		threads  int
	}{
		{"o", 1, 0, []GEMVOut{q4(4096, 4096)}, 0, "gemvq_p4_1", 1024, 64},
		{"down", 1, 0, []GEMVOut{q4(4096, 14336)}, 0, "gemvq_p2u2_1", 2048, 32},
		{"512 columns", 1, 0, []GEMVOut{q4(64, 512)}, 0, "gemvq_p4_1", 16, 32},
		{"q/k/v fused", 1, 0, qkv, 0, "gemvq_ps6_1", 1025, 64},
		{"two small matrices of 512 columns", 1, 0, []GEMVOut{q4(64, 512), q4(7, 512)}, 0, "gemvq_ps6_1", 13, 32},
		{"o, two waves of gemvq_p4_1: gemvq_ps6_1", 1, 0, []GEMVOut{q4(8*132*4+4, 4096)}, 0, "gemvq_ps6_1", 705, 64},
		{"1056 6-row blocks", 1, 0, []GEMVOut{q4(8*132*6, 4096)}, 0, "gemvq_ps6_1", 1056, 64},
		{"1057 6-row blocks", 1, 0, []GEMVOut{q4(8*132*6+6, 4096)}, 0, "", 0, 0},
		{"down, two waves", 1, 0, []GEMVOut{q4(17*132*2+2, 14336)}, 0, "", 0, 0},
		{"two matrices of 14336 columns", 1, 0, []GEMVOut{q4(64, 14336), q4(64, 14336)}, 0, "", 0, 0},
		{"columns differ", 1, 0, []GEMVOut{q4(64, 4096), q4(64, 2048)}, 0, "", 0, 0},
		{"four matrices", 1, 0, []GEMVOut{q4(64, 4096), q4(64, 4096), q4(64, 4096), q4(64, 4096)}, 0, "", 0, 0},
		{"glu", 1, 1, []GEMVOut{q4(14336, 4096), q4(14336, 4096)}, 0, "", 0, 0},
		{"two vectors", 2, 0, []GEMVOut{q4(4096, 4096)}, 0, "", 0, 0},
		{"Q6_K", 1, 0, []GEMVOut{{W: Matrix{Type: quant.Q6_K, Rows: 4096, Cols: 4096}}}, 0, "", 0, 0},
		{"Q4_K and Q6_K", 1, 0, []GEMVOut{q4(4096, 4096), {W: Matrix{Type: quant.Q6_K, Rows: 1024, Cols: 4096}}}, 0, "", 0, 0},
		{"unroll forced", 1, 0, []GEMVOut{q4(4096, 4096)}, 2, "", 0, 0},
	} {
		k := testKernels(132)
		k.tune.unroll = c.unroll
		name, blocks, threads, ok := k.gemvqPairGeometry(c.nb, c.mode, c.outs)
		if !ok {
			name, blocks, threads = "", 0, 0
		}
		if name != c.want || blocks != c.blocks || threads != c.threads {
			t.Errorf("%s: %q %d blocks of %d threads (taken %v), want %q %d of %d", c.name, name, blocks, threads, ok, c.want, c.blocks, c.threads)
		}
	}
}

// TestGEMVQMixedSplitGeometry pins which mixed q/k/v launches take
// gemvq_mixed_s_1: a Q6KA matrix and Q4_K ones of the same columns, at
// most 4096, in 6-row blocks that fit the device in one wave, nothing
// forced (host-only, the sm_90 cubin's figures).
func TestGEMVQMixedSplitGeometry(t *testing.T) {
	t.Parallel()
	m := func(typ quant.Type, rows, cols int) GEMVOut {
		return GEMVOut{W: Matrix{Type: typ, Rows: rows, Cols: cols}}
	}
	qk := []GEMVOut{m(quant.Q4_K, 4096, 4096), m(quant.Q4_K, 1024, 4096)}
	for _, c := range []struct {
		name       string
		q4         []GEMVOut
		q6         GEMVOut
		unroll     int
		blocks, th int
	}{
		{"8b q/k/v, Q6KA v", qk, m(quant.Q6KA, 1024, 4096), 0, 1025, 64},
		{"512 columns", []GEMVOut{m(quant.Q4_K, 66, 512)}, m(quant.Q6KA, 17, 512), 0, 14, 32},
		{"unroll forced", qk, m(quant.Q6KA, 1024, 4096), 1, 0, 0},
		{"plain Q6_K v", qk, m(quant.Q6_K, 1024, 4096), 0, 0, 0},
		{"14336 columns", []GEMVOut{m(quant.Q4_K, 64, 14336)}, m(quant.Q6KA, 64, 14336), 0, 0, 0},
		{"columns differ", []GEMVOut{m(quant.Q4_K, 64, 2048)}, m(quant.Q6KA, 64, 4096), 0, 0, 0},
		{"1057 blocks", []GEMVOut{m(quant.Q4_K, 1050*6, 4096)}, m(quant.Q6KA, 42, 4096), 0, 0, 0},
		{"1056 blocks", []GEMVOut{m(quant.Q4_K, 1049*6, 4096)}, m(quant.Q6KA, 42, 4096), 0, 1056, 64},
	} {
		k := testKernels(132)
		k.tune.unroll = c.unroll
		blocks, th, ok := k.gemvqMixedSplitGeometry(c.q4, c.q6)
		if !ok {
			blocks, th = 0, 0
		}
		if blocks != c.blocks || th != c.th {
			t.Errorf("%s: %d blocks of %d threads (taken %v), want %d of %d", c.name, blocks, th, ok, c.blocks, c.th)
		}
	}
}

// TestGEMVQPairRef holds the CPU model of the pair-unit kernels
// (gemvqPairRowRef) to the model of gemvq_fused (gemvqRowRef) and to
// float64 dot products with the x both multiply by (sx * x_int): they sum
// the same exact integers and differ only in float32 rounding.
func TestGEMVQPairRef(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 11))
	for _, cols := range []int{512, 4096, 14336} {
		rows := 16
		rb, _ := quant.Q4_K.RowBytes(int64(cols))
		data := make([]byte, int(rb)*rows)
		must(quant.FillRandomParallel(quant.Q4_K, data, uint64(cols), 0.05))
		deq := make([]float32, rows*cols)
		must(quant.DequantizeRows(quant.Q4_K, data, cols, deq))
		xq := gemvqQuantizeRef(normLike(r, 1, cols))
		xd := gemvqDequantX(xq, cols)
		for row := 0; row < rows; row++ {
			var ref, mag float64
			for j, w := range deq[row*cols : (row+1)*cols] {
				ref += float64(w) * xd[j]
				mag += math.Abs(float64(w) * xd[j])
			}
			w := data[row*int(rb) : (row+1)*int(rb)]
			for _, nw := range []int{1, 2} {
				p := float64(gemvqPairRowRef(w, cols, xq, nw))
				f := float64(gemvqRowRef(quant.Q4_K, w, cols, xq, nw, 0))
				if e := math.Abs(p - ref); !(e <= 1e-6*mag) {
					t.Fatalf("cols %d row %d, %d warps: pair model %v, float64 %v (err %.3g, sum|w x| %.3g)", cols, row, nw, p, ref, e, mag)
				}
				if e := math.Abs(p - f); !(e <= 2e-6*mag) {
					t.Fatalf("cols %d row %d, %d warps: pair model %v, gemvq_fused's %v", cols, row, nw, p, f)
				}
			}
		}
	}
}
