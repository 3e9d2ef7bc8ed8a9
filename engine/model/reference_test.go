package model

import (
	"encoding/binary"
	"math"
	"sort"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// This file is an independent, deliberately naive reference of the two
// architectures, written from the Hugging Face modelling code: one token at
// a time, float64 throughout, weights in HF layout ([out][in], llama q/k
// rows un-permuted back to HF order) and HF's rotate_half RoPE with the
// llama3 inv_freq rule. It shares no code with the engine's fast path.

// refParams are the HF-side hyperparameters the reference needs.
type refParams struct {
	arch                                             string
	vocab, dim, ffn, layers, heads, kvHeads, headDim int
	theta                                            float64
	llama3                                           *llama3Scaling
	qpas                                             float64
	attnCap, finalCap                                float64
	window                                           int
	eps                                              float64
	experts, used                                    int
	// linear is Gemma 3's linear RoPE factor of its global layers (0 =
	// none); its local layers rotate with base 10000 unscaled.
	linear float64
	// longFactor and attnFactor are Phi-3's LongRoPE parameters (nil and
	// 0 for other architectures): inv_freq / long_factor, cos and sin
	// times attention_factor.
	longFactor []float32
	attnFactor float64
}

func refParamsOf(s testSpec) refParams {
	return refParams{
		arch: s.arch, vocab: s.vocab, dim: s.dim, ffn: s.ffn, layers: s.layers, heads: s.heads,
		kvHeads: s.kvHeads, headDim: s.headDim, theta: s.theta, llama3: s.llama3, qpas: s.qpas,
		attnCap: float64(s.attnCap), finalCap: float64(s.finalCap), window: s.window, eps: float64(s.eps),
		experts: s.experts, used: s.used,
		linear: s.linear, longFactor: s.longFactors, attnFactor: s.attnFactor,
	}
}

type refLayer struct {
	attnNorm, postAttn, ffnNorm, postFFN []float64
	qb, kb, vb, qNorm, kNorm             []float64
	q, k, v, o, gate, up, down           [][]float64
	// router and experts (gate, up, down each) for a MoE layer.
	router  [][]float64
	experts [][3][][]float64
}

type refModel struct {
	p       refParams
	embed   [][]float64
	out     [][]float64
	outNorm []float64
	layers  []refLayer
	invFreq []float64
	// invLocal is Gemma 3's local layers' inv_freq (rope_local_base_freq).
	invLocal []float64
	kc, vc   [][][]float64 // [layer][pos][kvHeads*headDim], HF layout
	position int
}

// refMatrix decodes a tensor to float64 rows ([Rows][Cols]).
func refMatrix(t testing.TB, x Tensor) [][]float64 {
	t.Helper()
	flat := make([]float32, x.Rows*x.Cols)
	if x.Type == quant.F32 {
		for i := range flat {
			flat[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
		}
	} else if err := quant.DequantizeRows(x.Type, x.Data, x.Cols, flat); err != nil {
		t.Fatalf("dequantize %s: %v", x.Name, err)
	}
	out := make([][]float64, x.Rows)
	for r := range out {
		out[r] = make([]float64, x.Cols)
		for c := range out[r] {
			out[r][c] = float64(flat[r*x.Cols+c])
		}
	}
	return out
}

func refVector(t testing.TB, x Tensor) []float64 { return refMatrix(t, x)[0] }

// unpermute undoes llama.cpp's q/k row permutation: GGUF row
// h*hd + 2i + j holds HF row h*hd + j*(hd/2) + i.
func unpermute(m [][]float64, heads, hd int) [][]float64 {
	out := make([][]float64, len(m))
	for h := 0; h < heads; h++ {
		for i := 0; i < hd/2; i++ {
			for j := 0; j < 2; j++ {
				out[h*hd+j*(hd/2)+i] = m[h*hd+2*i+j]
			}
		}
	}
	return out
}

func newRef(t testing.TB, p refParams, w *Weights) *refModel {
	t.Helper()
	r := &refModel{p: p, embed: refMatrix(t, w.Embed), outNorm: refVector(t, w.OutputNorm)}
	if w.Output.Data == nil || &w.Output.Data[0] == &w.Embed.Data[0] {
		r.out = r.embed // tied
	} else {
		r.out = refMatrix(t, w.Output)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		rl := refLayer{attnNorm: refVector(t, l.AttnNorm), ffnNorm: refVector(t, l.FFNNorm), o: refMatrix(t, l.O), down: refMatrix(t, l.Down)}
		if p.arch == ArchPhi3 {
			// qkv_proj: q rows, then k, then v; gate_up_proj: gate, then up.
			qkv, gu := refMatrix(t, l.QKV), refMatrix(t, l.GateUp)
			qd, kvd := p.heads*p.headDim, p.kvHeads*p.headDim
			rl.q, rl.k, rl.v = qkv[:qd], qkv[qd:qd+kvd], qkv[qd+kvd:]
			rl.gate, rl.up = gu[:p.ffn], gu[p.ffn:]
		} else {
			rl.q, rl.k, rl.v = refMatrix(t, l.Q), refMatrix(t, l.K), refMatrix(t, l.V)
			rl.gate, rl.up = refMatrix(t, l.Gate), refMatrix(t, l.Up)
		}
		if len(l.Experts) > 0 {
			rl.router = refMatrix(t, l.Router)
			for _, x := range l.Experts {
				rl.experts = append(rl.experts, [3][][]float64{refMatrix(t, x.Gate), refMatrix(t, x.Up), refMatrix(t, x.Down)})
			}
		}
		switch p.arch {
		case ArchLlama:
			rl.q = unpermute(rl.q, p.heads, p.headDim)
			rl.k = unpermute(rl.k, p.kvHeads, p.headDim)
		case ArchGemma2:
			rl.postAttn = refVector(t, l.PostAttnNorm)
			rl.postFFN = refVector(t, l.PostFFNNorm)
		case ArchGemma3:
			rl.postAttn = refVector(t, l.PostAttnNorm)
			rl.postFFN = refVector(t, l.PostFFNNorm)
			rl.qNorm, rl.kNorm = refVector(t, l.QNorm), refVector(t, l.KNorm)
		case ArchQwen2:
			rl.qb, rl.kb, rl.vb = refVector(t, l.QBias), refVector(t, l.KBias), refVector(t, l.VBias)
		case ArchQwen3, ArchQwen3MoE:
			rl.qNorm, rl.kNorm = refVector(t, l.QNorm), refVector(t, l.KNorm)
		}
		r.layers = append(r.layers, rl)
	}
	// HF inv_freq, with _compute_llama3_parameters when scaling is set.
	hd := p.headDim
	r.invFreq = make([]float64, hd/2)
	for i := range r.invFreq {
		inv := 1 / math.Pow(p.theta, float64(2*i)/float64(hd))
		if sc := p.llama3; sc != nil {
			lowWl, highWl := sc.orig/sc.low, sc.orig/sc.high
			wl := 2 * math.Pi / inv
			scaled := inv
			if wl > lowWl {
				scaled = inv / sc.factor
			}
			if !(wl < highWl) && !(wl > lowWl) {
				smooth := (sc.orig/wl - sc.low) / (sc.high - sc.low)
				scaled = (1-smooth)*scaled/sc.factor + smooth*scaled
			}
			inv = scaled
		}
		if p.linear > 0 { // rope_type linear: inv_freq / factor
			inv /= p.linear
		}
		if p.longFactor != nil { // longrope: 1 / (ext_factor * base^(2i/d))
			inv /= float64(p.longFactor[i])
		}
		r.invFreq[i] = inv
	}
	if p.arch == ArchGemma3 {
		r.invLocal = make([]float64, hd/2)
		for i := range r.invLocal {
			r.invLocal[i] = 1 / math.Pow(10000, float64(2*i)/float64(hd))
		}
	}
	r.kc = make([][][]float64, p.layers)
	r.vc = make([][][]float64, p.layers)
	return r
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i := range x {
		out[i] = x[i] * inv * w[i]
	}
	return out
}

func refMatVec(m [][]float64, x []float64) []float64 {
	out := make([]float64, len(m))
	for r, row := range m {
		var s float64
		for c, v := range row {
			s += v * x[c]
		}
		out[r] = s
	}
	return out
}

// refRope applies HF apply_rotary_pos_emb (rotate_half) to one head.
func refRope(x []float64, pos int, inv []float64, scale float64) {
	half := len(x) / 2
	out := make([]float64, len(x))
	for i := 0; i < half; i++ {
		c, s := math.Cos(float64(pos)*inv[i])*scale, math.Sin(float64(pos)*inv[i])*scale
		out[i] = x[i]*c - x[i+half]*s
		out[i+half] = x[i+half]*c + x[i]*s
	}
	copy(x, out)
}

// step feeds one token and returns the logits.
func (r *refModel) step(tok int32) []float64 {
	p := r.p
	gemma := p.arch == ArchGemma2 || p.arch == ArchGemma3
	pos := r.position
	r.position++
	h := append([]float64(nil), r.embed[tok]...)
	if gemma {
		norm := float64(float32(math.Sqrt(float64(p.dim))))
		for i := range h {
			h[i] *= norm
		}
	}
	hd := p.headDim
	group := p.heads / p.kvHeads
	scale := 1 / math.Sqrt(float64(hd))
	if gemma {
		scale = 1 / math.Sqrt(p.qpas)
	}
	for li := range r.layers {
		l := &r.layers[li]
		// HF layer_types: gemma2 alternates, Gemma 3 has a global layer
		// in six, Mistral's window is at every layer.
		sliding := p.window > 0
		switch p.arch {
		case ArchGemma2:
			sliding = sliding && (li+1)%2 == 1
		case ArchGemma3:
			sliding = sliding && (li+1)%6 != 0
		}
		mscale := 1.0
		if p.attnFactor != 0 {
			mscale = p.attnFactor
		}
		inv := r.invFreq
		if sliding && r.invLocal != nil {
			inv = r.invLocal
		}
		x := refRMSNorm(h, l.attnNorm, p.eps)
		q, k, v := refMatVec(l.q, x), refMatVec(l.k, x), refMatVec(l.v, x)
		if l.qb != nil { // nn.Linear(bias=True)
			for i := range q {
				q[i] += l.qb[i]
			}
			for i := range k {
				k[i] += l.kb[i]
				v[i] += l.vb[i]
			}
		}
		for hh := 0; hh < p.heads; hh++ {
			if l.qNorm != nil { // q_norm over each head, before RoPE
				copy(q[hh*hd:(hh+1)*hd], refRMSNorm(q[hh*hd:(hh+1)*hd], l.qNorm, p.eps))
			}
			refRope(q[hh*hd:(hh+1)*hd], pos, inv, mscale)
		}
		for hh := 0; hh < p.kvHeads; hh++ {
			if l.kNorm != nil {
				copy(k[hh*hd:(hh+1)*hd], refRMSNorm(k[hh*hd:(hh+1)*hd], l.kNorm, p.eps))
			}
			refRope(k[hh*hd:(hh+1)*hd], pos, inv, mscale)
		}
		r.kc[li] = append(r.kc[li], k)
		r.vc[li] = append(r.vc[li], v)
		att := make([]float64, p.heads*hd)
		for hh := 0; hh < p.heads; hh++ {
			kvh := hh / group
			scores := make([]float64, pos+1)
			mx := math.Inf(-1)
			for j := 0; j <= pos; j++ {
				var s float64
				for d := 0; d < hd; d++ {
					s += q[hh*hd+d] * r.kc[li][j][kvh*hd+d]
				}
				s *= scale
				if p.attnCap > 0 {
					s = math.Tanh(s/p.attnCap) * p.attnCap
				}
				if sliding && pos-j >= p.window {
					s = math.Inf(-1)
				}
				scores[j] = s
				mx = math.Max(mx, s)
			}
			var z float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - mx)
				z += scores[j]
			}
			for j := range scores {
				for d := 0; d < hd; d++ {
					att[hh*hd+d] += scores[j] / z * r.vc[li][j][kvh*hd+d]
				}
			}
		}
		o := refMatVec(l.o, att)
		if gemma {
			o = refRMSNorm(o, l.postAttn, p.eps)
		}
		for i := range h {
			h[i] += o[i]
		}
		r.ffn(li, h)
	}
	x := refRMSNorm(h, r.outNorm, p.eps)
	logits := refMatVec(r.out, x)
	if p.finalCap > 0 {
		for i := range logits {
			logits[i] = math.Tanh(logits[i]/p.finalCap) * p.finalCap
		}
	}
	return logits
}

// ffn adds layer li's feed-forward block to h.
func (r *refModel) ffn(li int, h []float64) {
	p := r.p
	gemma := p.arch == ArchGemma2 || p.arch == ArchGemma3
	l := &r.layers[li]
	x := refRMSNorm(h, l.ffnNorm, p.eps)
	if l.router != nil {
		r.moe(l, x, h)
		return
	}
	g, u := refMatVec(l.gate, x), refMatVec(l.up, x)
	for i := range g {
		if gemma {
			g[i] = 0.5 * g[i] * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g[i]+0.044715*g[i]*g[i]*g[i]))) * u[i]
		} else {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
	}
	f := refMatVec(l.down, g)
	if gemma {
		f = refRMSNorm(f, l.postFFN, p.eps)
	}
	for i := range h {
		h[i] += f[i]
	}
}

// relErr returns max|got-want| / max|want|.
func relErr(got []float32, want []float64) float64 {
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		m = math.Max(m, math.Abs(want[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// moe adds a Mixtral sparse MoE block to h, as HF's MixtralSparseMoeBlock
// computes it: softmax over the router logits, the top `used` experts,
// their weights divided by their sum, and each picked expert's
// w2(silu(w1 x) * w3 x) scaled by its weight.
func (r *refModel) moe(l *refLayer, x, h []float64) {
	logits := refMatVec(l.router, x)
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, v)
	}
	probs := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		probs[i] = math.Exp(v - mx)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	order := make([]int, len(probs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
	top := order[:r.p.used]
	var norm float64
	for _, e := range top {
		norm += probs[e]
	}
	for _, e := range top {
		x3 := l.experts[e]
		g, u := refMatVec(x3[0], x), refMatVec(x3[1], x)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		f := refMatVec(x3[2], g)
		w := probs[e] / norm
		for i := range h {
			h[i] += w * f[i]
		}
	}
}
