package synth

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/quant"
)

// refModel is a plain float64 forward pass over a synth GGUF, following
// conv.txt, used only to check that the chosen weight scales keep a model
// numerically healthy.
type refModel struct {
	s Shape
	w map[string][]float32
}

func loadRef(t *testing.T, path string, s Shape) *refModel {
	t.Helper()
	m, err := gguf.Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := &refModel{s: s, w: map[string][]float32{}}
	for _, ti := range m.Tensors {
		v := make([]float32, ti.Elems())
		if err := quant.Dequantize(ti.Type, m.Data(&ti), v); err != nil {
			t.Fatal(err)
		}
		r.w[ti.Name] = v
	}
	return r
}

// matvec computes W x for a GGUF matrix with rows of len(x).
func matvec(w []float32, x []float64) []float64 {
	n := len(x)
	out := make([]float64, len(w)/n)
	for r := range out {
		var s float64
		for k, xv := range x {
			s += float64(w[r*n+k]) * xv
		}
		out[r] = s
	}
	return out
}

func rmsnorm(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * inv * float64(w[i])
	}
	return out
}

func rms(x []float64) float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	return math.Sqrt(ss / float64(len(x)))
}

// rope rotates each head of x in place: adjacent pairs for llama, pairs
// (i, i+hd/2) for gemma2.
func (r *refModel) rope(x []float64, pos int) {
	hd := r.s.HeadDim
	for h := 0; h < len(x)/hd; h++ {
		for i := 0; i < hd/2; i++ {
			f := math.Pow(r.s.RopeTheta, -2*float64(i)/float64(hd))
			a, b := h*hd+i, h*hd+i+hd/2
			if r.s.Arch == "llama" {
				f /= float64(r.w["rope_freqs.weight"][i])
				a, b = h*hd+2*i, h*hd+2*i+1
			}
			c, sn := math.Cos(f*float64(pos)), math.Sin(f*float64(pos))
			x[a], x[b] = x[a]*c-x[b]*sn, x[a]*sn+x[b]*c
		}
	}
}

// forward returns the logits after each position and the residual RMS after
// each layer (last position).
func (r *refModel) forward(tokens []int) (logits [][]float64, layerRMS []float64) {
	s := r.s
	gem := s.Arch == "gemma2"
	hd := s.HeadDim
	hs := make([][]float64, len(tokens))
	for p, tok := range tokens {
		e := r.w["token_embd.weight"][tok*s.Dim : (tok+1)*s.Dim]
		hs[p] = make([]float64, s.Dim)
		for i, v := range e {
			hs[p][i] = float64(v)
			if gem {
				hs[p][i] *= float64(float32(math.Sqrt(float64(s.Dim))))
			}
		}
	}
	scale := 1 / math.Sqrt(float64(hd))
	if gem {
		scale = 1 / math.Sqrt(s.QueryPreAttnScalar)
	}
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		qs, ks, vs := make([][]float64, len(tokens)), make([][]float64, len(tokens)), make([][]float64, len(tokens))
		for p := range tokens {
			x := rmsnorm(hs[p], r.w[b+"attn_norm.weight"], s.RMSEps)
			qs[p], ks[p], vs[p] = matvec(r.w[b+"attn_q.weight"], x), matvec(r.w[b+"attn_k.weight"], x), matvec(r.w[b+"attn_v.weight"], x)
			r.rope(qs[p], p)
			r.rope(ks[p], p)
		}
		for p := range tokens {
			att := make([]float64, s.Heads*hd)
			for h := 0; h < s.Heads; h++ {
				kh := h / (s.Heads / s.KVHeads)
				var sc []float64
				for k := 0; k <= p; k++ {
					var d float64
					for i := 0; i < hd; i++ {
						d += qs[p][h*hd+i] * ks[k][kh*hd+i]
					}
					d *= scale
					if gem {
						d = math.Tanh(d/s.AttnSoftcap) * s.AttnSoftcap
						if l%2 == 0 && p-k >= s.SlidingWindow {
							d = math.Inf(-1)
						}
					}
					sc = append(sc, d)
				}
				mx := slices.Max(sc)
				var z float64
				for k := range sc {
					sc[k] = math.Exp(sc[k] - mx)
					z += sc[k]
				}
				for k := range sc {
					for i := 0; i < hd; i++ {
						att[h*hd+i] += sc[k] / z * vs[k][kh*hd+i]
					}
				}
			}
			o := matvec(r.w[b+"attn_output.weight"], att)
			if gem {
				o = rmsnorm(o, r.w[b+"post_attention_norm.weight"], s.RMSEps)
			}
			for i := range o {
				hs[p][i] += o[i]
			}
			x := rmsnorm(hs[p], r.w[b+"ffn_norm.weight"], s.RMSEps)
			g, u := matvec(r.w[b+"ffn_gate.weight"], x), matvec(r.w[b+"ffn_up.weight"], x)
			for i := range g {
				if gem {
					g[i] = 0.5 * g[i] * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g[i]+0.044715*g[i]*g[i]*g[i])))
				} else {
					g[i] = g[i] / (1 + math.Exp(-g[i]))
				}
				g[i] *= u[i]
			}
			f := matvec(r.w[b+"ffn_down.weight"], g)
			if gem {
				f = rmsnorm(f, r.w[b+"post_ffw_norm.weight"], s.RMSEps)
			}
			for i := range f {
				hs[p][i] += f[i]
			}
		}
		layerRMS = append(layerRMS, rms(hs[len(tokens)-1]))
	}
	out := r.w["output.weight"]
	if gem {
		out = r.w["token_embd.weight"]
	}
	for p := range tokens {
		lg := matvec(out, rmsnorm(hs[p], r.w["output_norm.weight"], s.RMSEps))
		if gem {
			for i := range lg {
				lg[i] = math.Tanh(lg[i]/s.FinalSoftcap) * s.FinalSoftcap
			}
		}
		logits = append(logits, lg)
	}
	return logits, layerRMS
}

// TestForwardHealth runs the tiny models through a reference forward pass
// and checks the properties the weight scales were chosen for: the
// residual stream stays O(1), logits have a spread of a few units, and the
// argmax is clear (top-1 beats top-2 by a visible margin) at most
// positions.
func TestForwardHealth(t *testing.T) {
	t.Parallel()
	tokens := []int{5, 300, 17, 42, 42, 7, 100, 255, 3, 64, 128, 9, 11, 200, 33, 1}
	for _, arch := range []string{"llama", "gemma2"} {
		for _, typ := range []string{"f32", "q4_k_m"} {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				path, _ := writeTiny(t, arch, typ, 11, false)
				s, _ := LookupShape(arch, "tiny")
				r := loadRef(t, path, s)
				logits, layerRMS := r.forward(tokens)
				for l, v := range layerRMS {
					if v < 0.3 || v > 30 {
						t.Errorf("layer %d residual RMS %.3g outside [0.3, 30]", l, v)
					}
				}
				clear, echoes := 0, 0
				argmaxes := map[int]bool{}
				var stds, gaps []float64
				for p, lg := range logits {
					best := 0
					for i, v := range lg {
						if v > lg[best] {
							best = i
						}
					}
					argmaxes[best] = true
					if best == tokens[p] {
						echoes++
					}
					sd := rms(lg)
					stds = append(stds, sd)
					if sd < 1 || sd > 8 {
						t.Errorf("logit std %.3g outside [1, 8]", sd)
					}
					sorted := slices.Clone(lg)
					slices.Sort(sorted)
					gap := sorted[len(sorted)-1] - sorted[len(sorted)-2]
					gaps = append(gaps, gap)
					if gap > 0.05 {
						clear++
					}
				}
				t.Logf("layer RMS %.3g, logit std %.3g, top-2 gaps %.3g", layerRMS, stds, gaps)
				if clear < len(logits)*3/4 {
					t.Errorf("only %d of %d positions have a top-1 margin above 0.05", clear, len(logits))
				}
				// Predictions must depend on the context, not just echo
				// the input token (the tied-embedding failure mode).
				if slices.Equal(logits[3], logits[4]) {
					t.Error("logits do not depend on context")
				}
				if echoes > len(tokens)/4 || len(argmaxes) < len(tokens)/2 {
					t.Errorf("argmax is the input token at %d of %d positions; %d distinct argmaxes", echoes, len(tokens), len(argmaxes))
				}
			})
		}
	}
}
