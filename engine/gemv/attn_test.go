package gemv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// attnCase is a block's inputs: four queries interleaved, keys and values
// rows stride apart, and the keys again in strips (KeyLanes keys a strip,
// each element's keys side by side; zeros past the last key up to a
// multiple of KeyBlock) and in a transposed panel of width columns.
type attnCase struct {
	n, keys, width, stride int
	q, k, v, strips, panel []float32
}

func newAttnCase(r *rand.Rand, n, keys int) *attnCase {
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	c := &attnCase{n: n, keys: keys, stride: n + 64}
	c.width = (keys + KeyBlock - 1) / KeyBlock * KeyBlock
	c.q, c.k, c.v = vec(4*n), vec((keys-1)*c.stride+n), vec((keys-1)*c.stride+n)
	c.strips, c.panel = make([]float32, c.width*n), make([]float32, c.width*n)
	for j := range keys {
		for d := range n {
			x := c.k[j*c.stride+d]
			c.strips[(j/KeyLanes)*KeyLanes*n+d*KeyLanes+j%KeyLanes] = x
			c.panel[d*c.width+j] = x
		}
	}
	return c
}

// TestAttnKernels: Scores4, Softmax and Mix4 of every kernel family
// against float64 arithmetic, for heads of 64 and 128 (the AVX-512
// kernels, or AVX2's), 96 (AVX2's under either family) and 40 (plain
// Go), and the properties the prompt's attention
// counts on: a query's scores do not depend on the other queries of its
// block; Mix4's outputs do not change when zero-weight keys join the
// block, and are the same bits mixed in one call or continued in two;
// −Inf scores get probability 0.
func TestAttnKernels(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, impl := range Impls() {
		for _, n := range []int{64, 128, 96, 40} {
			for _, keys := range []int{64, 192, 37} {
				name := fmt.Sprintf("%v/n %d/keys %d", impl, n, keys)
				c := newAttnCase(r, n, keys)
				sStride := c.width + 16
				s := make([]float32, 3*sStride+c.width)
				if err := Scores4(impl, c.q, n, c.strips, KeyLanes, KeyLanes*n, c.width, s, sStride); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				// The same keys as a transposed panel: the same bits.
				sp := make([]float32, len(s))
				if err := Scores4(impl, c.q, n, c.panel, c.width, KeyLanes, c.width, sp, sStride); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !slices.Equal(sp, s) {
					t.Fatalf("%s: scores from a panel differ from the strips'", name)
				}
				for i := range 4 {
					for j := range c.width {
						var exact, mag float64
						if j < keys {
							for d := range n {
								p := float64(c.q[4*d+i]) * float64(c.k[j*c.stride+d])
								exact, mag = exact+p, mag+math.Abs(p)
							}
						}
						if e := math.Abs(float64(s[i*sStride+j]) - exact); e > 1e-6*mag {
							t.Fatalf("%s: score [%d][%d] = %g, exact %g", name, i, j, s[i*sStride+j], exact)
						}
					}
				}
				// Query 0 alone (the others replaced) keeps its bits.
				q2 := append([]float32(nil), c.q...)
				for d := range n {
					for i := 1; i < 4; i++ {
						q2[4*d+i] = float32(r.NormFloat64())
					}
				}
				s2 := make([]float32, len(s))
				if err := Scores4(impl, q2, n, c.strips, KeyLanes, KeyLanes*n, c.width, s2, sStride); err != nil {
					t.Fatal(err)
				}
				for j := range c.width {
					if s2[j] != s[j] {
						t.Fatalf("%s: query 0's score %d changed with the other queries: %v, %v", name, j, s2[j], s[j])
					}
				}

				// Each row's softmax, its padding −Inf.
				scale := float32(1 / math.Sqrt(float64(n)))
				L := (keys + SoftmaxBlock - 1) / SoftmaxBlock * SoftmaxBlock
				p := make([]float32, 4*L)
				for i := range 4 {
					row := p[i*L : (i+1)*L]
					copy(row, s[i*sStride:i*sStride+keys])
					for j := keys; j < L; j++ {
						row[j] = float32(math.Inf(-1))
					}
					gm, gsum, err := Softmax(impl, row, scale)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					m := math.Inf(-1)
					for j := range keys {
						m = math.Max(m, float64(s[i*sStride+j]*scale))
					}
					var sum float64
					for j := range keys {
						sum += math.Exp(float64(s[i*sStride+j]*scale) - m)
					}
					if float64(gm) != m || math.Abs(gsum-sum) > 1e-6*sum {
						t.Fatalf("%s: row %d's max and sum %g, %g; want %g, %g", name, i, gm, gsum, m, sum)
					}
					for j := range L {
						want := 0.0
						if j < keys {
							want = math.Exp(float64(s[i*sStride+j]*scale)-m) / sum
						}
						if e := math.Abs(float64(row[j]) - want); e > 1e-6*want || (want == 0 && row[j] != 0) {
							t.Fatalf("%s: row %d probability %d = %g, want %g", name, i, j, row[j], want)
						}
					}
				}

				out := make([]float32, 4*n)
				if err := Mix4(impl, p, L, c.v, c.stride, keys, n, out, false); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for i := range 4 {
					for col := range n {
						var exact, mag float64
						for j := range keys {
							x := float64(p[i*L+j]) * float64(c.v[j*c.stride+col])
							exact, mag = exact+x, mag+math.Abs(x)
						}
						if e := math.Abs(float64(out[i*n+col]) - exact); e > 1e-6*mag {
							t.Fatalf("%s: mixed [%d][%d] = %g, exact %g", name, i, col, out[i*n+col], exact)
						}
					}
				}
				// The keys in two calls, the second continuing the
				// first's sums: one call's bits.
				cut := keys / 3
				two := make([]float32, 4*n)
				if err := Mix4(impl, p, L, c.v, c.stride, cut, n, two, false); err != nil {
					t.Fatal(err)
				}
				if err := Mix4(impl, p[cut:], L, c.v[cut*c.stride:], c.stride, keys-cut, n, two, true); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(two, out) {
					t.Fatalf("%s: keys mixed in two calls (%d, %d) differ from one call", name, cut, keys-cut)
				}
				// Keys of weight 0 before and after the block's own
				// change no bit.
				const extra = 5
				pw := make([]float32, 4*(L+2*extra))
				for i := range 4 {
					copy(pw[i*(L+2*extra)+extra:], p[i*L:i*L+keys])
				}
				vw := make([]float32, (keys+2*extra-1)*c.stride+n)
				for i := range vw {
					vw[i] = float32(r.NormFloat64())
				}
				copy(vw[extra*c.stride:], c.v)
				wide := make([]float32, 4*n)
				if err := Mix4(impl, pw, L+2*extra, vw, c.stride, keys+2*extra, n, wide, false); err != nil {
					t.Fatal(err)
				}
				for i := range wide {
					if wide[i] != out[i] {
						t.Fatalf("%s: output %d changed with zero-weight keys around: %v, %v", name, i, wide[i], out[i])
					}
				}
			}
		}
	}
	if _, _, err := Softmax(Go, make([]float32, 15), 1); err == nil {
		t.Error("softmax of 15: no error")
	}
	if err := Scores4(Go, make([]float32, 256), 64, make([]float32, 64*64), KeyLanes, KeyLanes*64, 32, make([]float32, 4*64), 64); err == nil {
		t.Error("scores4 of 32 keys: no error")
	}
	if err := Scores4(Go, make([]float32, 256), 64, make([]float32, 64*64-1), KeyLanes, KeyLanes*64, 64, make([]float32, 4*64), 64); err == nil {
		t.Error("scores4 of keys one element short: no error")
	}
	if err := Mix4(Go, make([]float32, 40), 10, make([]float32, 640), 64, 10, 64, make([]float32, 255), false); err == nil {
		t.Error("mix4 into a short output: no error")
	}
}

// TestAttnFamiliesAgree: AVX2's scores and mixed values are AVX-512's
// bits (the same fused chains in the same order), and both families'
// softmaxes agree within float32 rounding.
func TestAttnFamiliesAgree(t *testing.T) {
	t.Parallel()
	if !available(AVX512) {
		t.Skip("no AVX-512 here")
	}
	for _, n := range []int{64, 128} {
		c := newAttnCase(rand.New(rand.NewPCG(5, uint64(n))), n, 192)
		type res struct{ s, p, out []float32 }
		run := func(impl Impl) res {
			s := make([]float32, 4*c.width)
			if err := Scores4(impl, c.q, n, c.strips, KeyLanes, KeyLanes*n, c.width, s, c.width); err != nil {
				t.Fatal(err)
			}
			p := slices.Clone(s)
			for i := range 4 {
				if _, _, err := Softmax(impl, p[i*c.width:(i+1)*c.width], 0.125); err != nil {
					t.Fatal(err)
				}
			}
			out := make([]float32, 4*n)
			// The mix of AVX-512's probabilities, so that only the mix
			// differs.
			return res{s, p, out}
		}
		a, b := run(AVX2), run(AVX512)
		if !slices.Equal(a.s, b.s) {
			t.Fatalf("n %d: AVX2's scores differ from AVX-512's", n)
		}
		for j := range a.p {
			if e := math.Abs(float64(a.p[j] - b.p[j])); e > 4e-7*float64(b.p[j]) {
				t.Fatalf("n %d: probability %d: AVX2 %g, AVX-512 %g", n, j, a.p[j], b.p[j])
			}
		}
		for _, impl := range []Impl{AVX2, AVX512} {
			out := a.out
			if impl == AVX512 {
				out = b.out
			}
			if err := Mix4(impl, b.p, c.width, c.v, c.stride, c.keys, n, out, false); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(a.out, b.out) {
			t.Fatalf("n %d: AVX2's mixed values differ from AVX-512's", n)
		}
	}
}

// BenchmarkAttn: one thread, four queries of 128 elements against 1024
// keys in strips (Scores4, Softmax, Mix4), the values in pages of 64
// rows as the CPU cache keeps them (a Mix4 call a page), in keys a
// second, for every kernel family here.
func BenchmarkAttn(b *testing.B) {
	const n, keys, stride = 128, 1024, 128
	r := rand.New(rand.NewPCG(7, 8))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	v, q, strips := vec((keys-1)*stride+n), vec(4*n), vec(n*keys)
	s, out := make([]float32, 4*keys), make([]float32, 4*n)
	scale := float32(1 / math.Sqrt(n))
	for _, impl := range Impls() {
		b.Run(impl.String(), func(b *testing.B) {
			for b.Loop() {
				_ = Scores4(impl, q, n, strips, KeyLanes, KeyLanes*n, keys, s, keys)
				for i := range 4 {
					_, _, _ = Softmax(impl, s[i*keys:(i+1)*keys], scale)
				}
				for j := 0; j < keys; j += KeyBlock {
					_ = Mix4(impl, s[j:], keys, v[j*stride:], stride, KeyBlock, n, out, j > 0)
				}
			}
			b.ReportMetric(float64(b.N)*keys/b.Elapsed().Seconds()/1e6, "Mkeys/s")
		})
	}
}
