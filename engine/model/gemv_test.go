package model

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// TestGEMVMatchesReference: a model on engine/gemv's kernels (every kernel
// family this machine runs) against the same model on quant's float
// reference: logits NMSE at most 1e-4 at every step of a decode and a
// prefill, and the same greedy token at every step. Llama and Gemma 2 in
// every type, the other architectures in Q4_K_M (what they add to the pass
// is not a matrix product; their Q4_K_M files hold Q4_K, Q5_K and Q6_K).
func TestGEMVMatchesReference(t *testing.T) {
	t.Parallel()
	types := func(arch string) []string {
		if arch == ArchLlama || arch == ArchGemma2 {
			return synthTypes
		}
		return []string{"q4_k_m"}
	}
	for _, arch := range []string{ArchLlama, ArchGemma2, ArchGemma3, "mistral", ArchPhi3, ArchQwen2, ArchQwen3, "mixtral", ArchQwen3MoE} {
		for _, typ := range types(arch) {
			for _, impl := range gemv.Impls() {
				t.Run(arch+"/"+typ+"/"+impl.String(), func(t *testing.T) {
					t.Parallel()
					if raceEnabled && arch != ArchLlama && arch != ArchGemma2 && impl != gemv.Detect() {
						t.Skip("the race detector's run checks the newer architectures on this machine's best kernels only")
					}
					ref, err := Open(synthModel(t, arch, typ))
					if err != nil {
						t.Fatal(err)
					}
					defer ref.Close()
					fast, err := Open(synthModel(t, arch, typ))
					if err != nil {
						t.Fatal(err)
					}
					defer fast.Close()
					fast.UseGEMV(impl)
					toks := randTokens(12, ref.Config.Vocab, 5)
					rs, fs := ref.NewSequence(0), fast.NewSequence(0)
					worst := 0.0
					for i, tok := range toks {
						want := forward(t, ref, rs, []int32{tok}, false)[0]
						got := forward(t, fast, fs, []int32{tok}, false)[0]
						e := quant.NMSE(got, want)
						worst = max(worst, e)
						if !(e <= 1e-4) {
							t.Fatalf("step %d: logits NMSE %.3g", i, e)
						}
						if a, b := argmax(got), argmax(want); a != b {
							t.Fatalf("step %d: greedy token %d, reference %d (NMSE %.3g)", i, a, b, e)
						}
					}
					all := forward(t, fast, fast.NewSequence(0), toks, true)
					allRef := forward(t, ref, ref.NewSequence(0), toks, true)
					for i := range toks {
						if e := quant.NMSE(all[i], allRef[i]); !(e <= 1e-4) {
							t.Fatalf("prefill token %d: NMSE %.3g", i, e)
						}
					}
					t.Logf("worst decode NMSE %.3g", worst)
				})
			}
		}
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// TestFFN: Model.FFN, on quant's reference and on every gemv kernel
// family, against the float64 reference's feed-forward block for a batch
// of rows (the residual included);
// and its errors for bad arguments.
func TestFFN(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{ArchLlama, ArchGemma2, ArchPhi3} {
		for _, typ := range []string{"f16", "q4_k_m"} {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				spec := catalogue[arch]
				m, err := Open(synthModel(t, arch, typ))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				ref := newRef(t, refParamsOf(spec), m.Weights)
				const rows = 3
				impls := append([]string{"reference"}, func() (s []string) {
					for _, i := range gemv.Impls() {
						s = append(s, i.String())
					}
					return s
				}()...)
				for ii, name := range impls {
					if ii == 0 {
						m.UseReference()
					} else {
						m.UseGEMV(gemv.Impls()[ii-1])
					}
					for l := 0; l < m.Config.Layers; l++ {
						h := make([][]float32, rows)
						want := make([][]float64, rows)
						for r := range h {
							v := randomVector(m.Config.Dim, uint64(10*l+r))
							h[r] = v
							want[r] = make([]float64, len(v))
							for i, x := range v {
								want[r][i] = float64(x)
							}
							ref.ffn(l, want[r])
						}
						if err := m.FFN(context.Background(), l, &m.Weights.Layers[l], h); err != nil {
							t.Fatal(err)
						}
						for r := range h {
							// The reference's float32 products land within 1e-4 of
							// the largest element; gemv's 12-bit vector adds its
							// rounding, held to an NMSE of 1e-5.
							if ii == 0 {
								if e := relErr(h[r], want[r]); e > 1e-4 {
									t.Fatalf("%s: layer %d row %d: relative error %.3g", name, l, r, e)
								}
								continue
							}
							w32 := make([]float32, len(want[r]))
							for i, v := range want[r] {
								w32[i] = float32(v)
							}
							if e := quant.NMSE(h[r], w32); !(e <= 1e-5) {
								t.Fatalf("%s: layer %d row %d: NMSE %.3g", name, l, r, e)
							}
						}
					}
				}
				dev, err := NewFFNDevice(m.Config, gemv.Detect())
				if err != nil {
					t.Fatal(err)
				}
				h := [][]float32{randomVector(m.Config.Dim, 1)}
				want := [][]float32{append([]float32(nil), h[0]...)}
				m.UseGEMV(gemv.Detect())
				if err := m.FFN(context.Background(), 1, &m.Weights.Layers[1], want); err != nil {
					t.Fatal(err)
				}
				if err := dev.Run(context.Background(), 1, &m.Weights.Layers[1], h); err != nil {
					t.Fatal(err)
				}
				for i := range h[0] {
					if h[0][i] != want[0][i] {
						t.Fatalf("FFNDevice element %d: %g, the model's FFN %g", i, h[0][i], want[0][i])
					}
				}
				if m.Config.Fused() {
					// The same layer with gate and up already split (as
					// engine/gpu hands its host copy to the CPU's FFN share).
					split := m.Config.SplitFused(&m.Weights.Layers[1])
					split.GateUp = Tensor{}
					hs := [][]float32{randomVector(m.Config.Dim, 1)}
					if err := m.FFN(context.Background(), 1, &split, hs); err != nil {
						t.Fatal(err)
					}
					for i := range hs[0] {
						if hs[0][i] != want[0][i] {
							t.Fatalf("split layer element %d: %g, the fused layer's %g", i, hs[0][i], want[0][i])
						}
					}
					split.Up.Rows--
					if err := m.FFN(context.Background(), 1, &split, hs); err == nil {
						t.Error("split layer with a bad up shape: no error")
					}
				}
				bad := m.Weights.Layers[0]
				bad.Gate.Rows--
				bad.GateUp.Rows-- // Phi-3's fused gate_up (absent elsewhere)
				for _, tc := range []struct {
					name string
					l    int
					w    *Layer
					h    [][]float32
				}{
					{"layer out of range", m.Config.Layers, &m.Weights.Layers[0], [][]float32{make([]float32, m.Config.Dim)}},
					{"wrong row width", 0, &m.Weights.Layers[0], [][]float32{make([]float32, m.Config.Dim-1)}},
					{"bad gate shape", 0, &bad, [][]float32{make([]float32, m.Config.Dim)}},
				} {
					if err := m.FFN(context.Background(), tc.l, tc.w, tc.h); err == nil {
						t.Errorf("%s: no error", tc.name)
					}
				}
			})
		}
	}
}

func randomVector(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 3))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// TestSkipAndCosines: a skipped layer leaves the hidden state as it was
// (skipping every layer gives the logits of the embedding alone, whatever
// the layers hold), skipping none restores the model, bad layers are
// refused; LayerCosines gives one cosine in (-1, 1] per layer.
func TestSkipAndCosines(t *testing.T) {
	t.Parallel()
	m, err := Open(synthModel(t, ArchLlama, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := randTokens(6, m.Config.Vocab, 2)
	full := forward(t, m, m.NewSequence(0), toks, true)
	all := make([]int, m.Config.Layers)
	for l := range all {
		all[l] = l
	}
	if err := m.SetSkip(all); err != nil {
		t.Fatal(err)
	}
	none := forward(t, m, m.NewSequence(0), toks, true)
	m2, err := Open(synthModel(t, ArchLlama, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	for l := range m2.Weights.Layers { // other layers entirely: no effect when skipped
		m2.Weights.Layers[l] = m2.Weights.Layers[(l+1)%len(m2.Weights.Layers)]
	}
	if err := m2.SetSkip(all); err != nil {
		t.Fatal(err)
	}
	none2 := forward(t, m2, m2.NewSequence(0), toks, true)
	for i := range none {
		for j := range none[i] {
			if none[i][j] != none2[i][j] {
				t.Fatalf("token %d logit %d: %g and %g with every layer skipped", i, j, none[i][j], none2[i][j])
			}
		}
	}
	if quant.NMSE(none[0], full[0]) < 1e-3 {
		t.Fatal("skipping every layer changed nothing")
	}
	if err := m.SetSkip(nil); err != nil {
		t.Fatal(err)
	}
	again := forward(t, m, m.NewSequence(0), toks, true)
	if quant.NMSE(again[5], full[5]) != 0 {
		t.Fatal("SetSkip(nil) did not restore the model")
	}
	if err := m.SetSkip([]int{m.Config.Layers}); err == nil {
		t.Fatal("skipping a layer past the last accepted")
	}
	cos, err := m.LayerCosines(context.Background(), toks)
	if err != nil || len(cos) != m.Config.Layers {
		t.Fatalf("%v, %v", cos, err)
	}
	for l, c := range cos {
		if !(c > -1 && c <= 1+1e-9) {
			t.Fatalf("layer %d cosine %g", l, c)
		}
	}
}

// TestEmbed: the embedding has unit length, leaves the model's sequences
// alone, and is the output head's input: the output matrix times it points
// where the mean of the tokens' logit rows points (the head is linear).
func TestEmbed(t *testing.T) {
	t.Parallel()
	m, err := Open(synthModel(t, ArchLlama, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := randTokens(7, m.Config.Vocab, 4)
	e, err := m.Embed(context.Background(), toks)
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, v := range e {
		n += float64(v) * float64(v)
	}
	if math.Abs(n-1) > 1e-5 {
		t.Fatalf("|embedding|² = %g", n)
	}
	rows := forward(t, m, m.NewSequence(0), toks, true)
	mean := make([]float64, m.Config.Vocab)
	for _, r := range rows {
		for i, v := range r {
			mean[i] += float64(v) / float64(len(rows))
		}
	}
	w := make([]float32, m.Config.Vocab*m.Config.Dim)
	if err := quant.DequantizeRows(m.Weights.Output.Type, m.Weights.Output.Data, m.Config.Dim, w); err != nil {
		t.Fatal(err)
	}
	proj := make([]float64, m.Config.Vocab)
	for v := range proj {
		for i, x := range e {
			proj[v] += float64(w[v*m.Config.Dim+i]) * float64(x)
		}
	}
	var dot, a, b float64
	for i := range proj {
		dot += proj[i] * mean[i]
		a += proj[i] * proj[i]
		b += mean[i] * mean[i]
	}
	if c := dot / math.Sqrt(a*b); c < 1-1e-5 {
		t.Fatalf("cosine of W·embedding and the mean logits: %g", c)
	}
	if _, err := m.Embed(context.Background(), nil); err == nil {
		t.Fatal("an empty input embedded")
	}
}
