package model

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/quant"
)

// llama3Scaling holds the llama3 RoPE scaling parameters as HF's
// rope_scaling dict has them.
type llama3Scaling struct{ factor, low, high, orig float64 }

// testSpec describes a small model built in memory for tests. It carries
// HF-side hyperparameters (query_pre_attn_scalar, llama3 scaling) so the
// reference can derive its own values instead of reading the engine's
// Config.
type testSpec struct {
	arch                                                      string
	vocab, dim, ffn, layers, heads, kvHeads, headDim, context int
	theta                                                     float64
	llama3                                                    *llama3Scaling
	qpas                                                      float64 // gemma2 query_pre_attn_scalar
	attnCap, finalCap                                         float32
	window                                                    int
	eps                                                       float32
	experts, used                                             int // mixture of experts (Mixtral)
	// denseFFN is a MoE file's dense feed_forward_length (Qwen3-MoE's,
	// which no layer uses; 0: ffn); ffn is then each expert's width.
	denseFFN int
	// tied shares the embedding as the output projection (gemma2 always).
	tied bool
	// linear is the linear RoPE factor of Gemma 3's global layers.
	linear float64
	// longFactors and shortFactors are Phi-3's LongRoPE divisors, of
	// which the long ones apply (context > origContext); attnFactor
	// scales cos and sin.
	longFactors, shortFactors []float32
	origContext               int
	attnFactor                float64
}

// phi3Spec is a tiny Phi-3: fused qkv and gate_up, GQA (as Phi-3 medium),
// a window at every layer, LongRoPE's long factors (the context, 64, is
// past the original 16) and attention factor.
func phi3Spec() testSpec {
	long, short := make([]float32, 8), make([]float32, 8)
	for i := range long {
		long[i] = 1 + float32(i*i)/4
		short[i] = 1 + float32(i)/16
	}
	return testSpec{
		arch: ArchPhi3, vocab: 97, dim: 64, ffn: 96, layers: 2, heads: 4, kvHeads: 2, headDim: 16,
		context: 64, theta: 10000, window: 7, eps: 1e-5,
		longFactors: long, shortFactors: short, origContext: 16, attnFactor: math.Sqrt(1 + math.Log(4)/math.Log(16)),
	}
}

// gemma3Spec is a tiny Gemma 3: five sliding layers and a global one,
// whose RoPE bases differ and whose global rotation is linearly scaled,
// q/k norms, head_dim 24 (not dim/heads) and query_pre_attn_scalar 20.
func gemma3Spec() testSpec {
	return testSpec{
		arch: ArchGemma3, vocab: 97, dim: 64, ffn: 96, layers: 6, heads: 4, kvHeads: 2, headDim: 24,
		context: 64, theta: 1000000, qpas: 20, window: 5, eps: 1e-6, tied: true, linear: 8,
	}
}

// mistralSpec is a tiny Mistral (a llama file): head_dim 24 is not
// dim/heads (16), as in Nemo, and every layer has a sliding window.
func mistralSpec() testSpec {
	return testSpec{
		arch: ArchLlama, vocab: 97, dim: 64, ffn: 96, layers: 2, heads: 4, kvHeads: 2, headDim: 24,
		context: 64, theta: 1000000, window: 5, eps: 1e-5,
	}
}

// qwen2Spec is a tiny tied Qwen2: q/k/v biases, NeoX RoPE.
func qwen2Spec() testSpec {
	return testSpec{
		arch: ArchQwen2, vocab: 97, dim: 64, ffn: 96, layers: 2, heads: 4, kvHeads: 2, headDim: 16,
		context: 64, theta: 1000000, eps: 1e-6, tied: true,
	}
}

// qwen3Spec is a tiny Qwen3 whose head_dim (24) is not dim/heads (16), with
// per-head q/k RMSNorm.
func qwen3Spec() testSpec {
	return testSpec{
		arch: ArchQwen3, vocab: 97, dim: 64, ffn: 96, layers: 2, heads: 4, kvHeads: 2, headDim: 24,
		context: 64, theta: 1000000, eps: 1e-6,
	}
}

// llamaSpec is a tiny llama with GQA and llama3 scaling chosen so all three
// scaling regimes (unscaled, smoothed, fully scaled) occur.
func llamaSpec() testSpec {
	return testSpec{
		arch: ArchLlama, vocab: 97, dim: 64, ffn: 96, layers: 2, heads: 4, kvHeads: 2, headDim: 16,
		context: 64, theta: 500000, llama3: &llama3Scaling{8, 1, 4, 64}, eps: 1e-5,
	}
}

// qwen3moeSpec is a tiny Qwen3-MoE: Qwen3's attention (head_dim 24, not
// dim/heads; q/k norms) and eight experts of which each token takes
// three.
func qwen3moeSpec() testSpec {
	return testSpec{
		arch: ArchQwen3MoE, vocab: 97, dim: 64, ffn: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 24,
		context: 64, theta: 1000000, eps: 1e-6, experts: 8, used: 3,
	}
}

// mixtralSpec is a tiny Mixtral: llama attention, and FFNs that are
// mixtures of six experts of which each token takes two.
func mixtralSpec() testSpec {
	return testSpec{
		arch: ArchLlama, vocab: 97, dim: 64, ffn: 48, layers: 3, heads: 4, kvHeads: 2, headDim: 16,
		context: 64, theta: 1e6, eps: 1e-5, experts: 6, used: 2,
	}
}

// gemmaSpec is a tiny gemma2 whose soft-caps and window are small enough to
// matter, and whose query_pre_attn_scalar differs from head_dim.
func gemmaSpec() testSpec {
	return testSpec{
		arch: ArchGemma2, vocab: 97, dim: 64, ffn: 96, layers: 4, heads: 4, kvHeads: 2, headDim: 16,
		context: 64, theta: 10000, qpas: 24, attnCap: 2, finalCap: 4, window: 5, eps: 1e-6,
	}
}

// config derives the engine Config from the spec the way ConfigFromGGUF
// and LoadGGUF would.
func (s testSpec) config() Config {
	c := Config{
		Arch: s.arch, Vocab: s.vocab, Dim: s.dim, FFN: s.ffn, Layers: s.layers, Heads: s.heads,
		KVHeads: s.kvHeads, HeadDim: s.headDim, Context: s.context, RopeTheta: s.theta, NormEps: s.eps,
		AttnScale: float32(1 / math.Sqrt(float64(s.headDim))), EmbedScale: 1,
	}
	if s.llama3 != nil {
		c.RopeFreqs = llama3Factors(s.headDim, s.theta, *s.llama3)
	}
	if s.experts > 0 {
		c.Experts, c.ExpertsUsed, c.ExpertFFN = s.experts, s.used, s.ffn
		if s.denseFFN > 0 {
			c.FFN = s.denseFFN
		}
	}
	c.TiedOutput = s.tied
	c.SlidingWindow = s.window
	if s.arch == ArchPhi3 {
		c.RopeFreqs = s.longFactors
		c.RopeAttnFactor = float32(s.attnFactor)
	}
	if s.arch == ArchGemma3 {
		c.AttnScale = float32(1 / math.Sqrt(s.qpas))
		c.EmbedScale = float32(math.Sqrt(float64(s.dim)))
		c.RopeThetaLocal = 10000
		if s.linear > 0 {
			c.RopeFreqs = make([]float32, s.headDim/2)
			for i := range c.RopeFreqs {
				c.RopeFreqs[i] = float32(s.linear)
			}
		}
	}
	if s.arch == ArchGemma2 {
		c.AttnScale = float32(1 / math.Sqrt(s.qpas))
		c.AttnSoftcap, c.FinalSoftcap, c.SlidingWindow = s.attnCap, s.finalCap, s.window
		c.EmbedScale = float32(math.Sqrt(float64(s.dim)))
		c.TiedOutput = true
	}
	return c
}

// llama3Factors computes rope_freqs.weight the way llama.cpp's converter
// does.
func llama3Factors(hd int, theta float64, sc llama3Scaling) []float32 {
	out := make([]float32, hd/2)
	for i := range out {
		inv := 1 / math.Pow(theta, float64(2*i)/float64(hd))
		wl := 2 * math.Pi / inv
		switch {
		case wl < sc.orig/sc.high:
			out[i] = 1
		case wl > sc.orig/sc.low:
			out[i] = float32(sc.factor)
		default:
			s := (sc.orig/wl - sc.low) / (sc.high - sc.low)
			out[i] = float32(1 / ((1-s)/sc.factor + s))
		}
	}
	return out
}

// randomWeights fills every tensor with deterministic random F32 values:
// matrices uniform with variance 1/cols, embeddings unit-ish, norms near 1.
func randomWeights(s testSpec, seed uint64) *Weights {
	r := rand.New(rand.NewPCG(seed, 99))
	mat := func(name string, rows, cols int) Tensor {
		v := make([]float32, rows*cols)
		a := math.Sqrt(3 / float64(cols))
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * a)
		}
		return F32Tensor(name, rows, cols, v)
	}
	normN := func(name string, n int) Tensor {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(1 + 0.3*(2*r.Float64()-1))
		}
		return F32Tensor(name, 1, n, v)
	}
	norm := func(name string) Tensor { return normN(name, s.dim) }
	bias := func(name string, n int) Tensor {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(2*r.Float64() - 1)
		}
		return F32Tensor(name, 1, n, v)
	}
	q, kv := s.heads*s.headDim, s.kvHeads*s.headDim
	emb := mat("token_embd.weight", s.vocab, s.dim)
	for i := range s.vocab * s.dim { // embeddings: uniform [-1, 1]
		binaryPutF32(emb.Data, i, float32(2*r.Float64()-1))
	}
	w := &Weights{Embed: emb, OutputNorm: norm("output_norm.weight")}
	if s.arch == ArchGemma2 || s.tied {
		w.Output = w.Embed
	} else {
		w.Output = mat("output.weight", s.vocab, s.dim)
	}
	for i := 0; i < s.layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		l := Layer{
			AttnNorm: norm(p + "attn_norm.weight"),
			Q:        mat(p+"attn_q.weight", q, s.dim),
			K:        mat(p+"attn_k.weight", kv, s.dim),
			V:        mat(p+"attn_v.weight", kv, s.dim),
			O:        mat(p+"attn_output.weight", s.dim, q),
			FFNNorm:  norm(p + "ffn_norm.weight"),
			Gate:     mat(p+"ffn_gate.weight", s.ffn, s.dim),
			Up:       mat(p+"ffn_up.weight", s.ffn, s.dim),
			Down:     mat(p+"ffn_down.weight", s.dim, s.ffn),
		}
		if s.arch == ArchGemma2 {
			l.PostAttnNorm = norm(p + "post_attention_norm.weight")
			l.PostFFNNorm = norm(p + "post_ffw_norm.weight")
		}
		if s.experts > 0 {
			l.Gate, l.Up, l.Down = Tensor{}, Tensor{}, Tensor{}
			l.Router = mat(p+"ffn_gate_inp.weight", s.experts, s.dim)
			for e := range s.experts {
				l.Experts = append(l.Experts, Expert{
					Gate: mat(expertName(p+"ffn_gate_exps.weight", e), s.ffn, s.dim),
					Up:   mat(expertName(p+"ffn_up_exps.weight", e), s.ffn, s.dim),
					Down: mat(expertName(p+"ffn_down_exps.weight", e), s.dim, s.ffn),
				})
			}
		}
		if s.arch == ArchQwen2 {
			l.QBias, l.KBias, l.VBias = bias(p+"attn_q.bias", q), bias(p+"attn_k.bias", kv), bias(p+"attn_v.bias", kv)
		}
		if s.arch == ArchPhi3 {
			l.QKV = mat(p+"attn_qkv.weight", q+2*kv, s.dim)
			l.GateUp = mat(p+"ffn_up.weight", 2*s.ffn, s.dim)
			l.Q, l.K, l.V, l.Gate, l.Up = Tensor{}, Tensor{}, Tensor{}, Tensor{}, Tensor{}
		}
		if s.arch == ArchGemma3 {
			l.PostAttnNorm = norm(p + "post_attention_norm.weight")
			l.PostFFNNorm = norm(p + "post_ffw_norm.weight")
		}
		if s.arch == ArchQwen3 || s.arch == ArchQwen3MoE || s.arch == ArchGemma3 {
			l.QNorm, l.KNorm = normN(p+"attn_q_norm.weight", s.headDim), normN(p+"attn_k_norm.weight", s.headDim)
		}
		w.Layers = append(w.Layers, l)
	}
	return w
}

func binaryPutF32(b []byte, i int, v float32) {
	u := math.Float32bits(v)
	b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

func newTestModel(t testing.TB, s testSpec, seed uint64) *Model {
	t.Helper()
	m, err := New(s.config(), randomWeights(s, seed))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// randTokens returns n token ids below vocab.
func randTokens(n, vocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 5))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}

// forward runs one step on seq and returns its logits, failing the test on
// error.
func forward(t testing.TB, m *Model, seq *Sequence, toks []int32, all bool) [][]float32 {
	t.Helper()
	b := []Step{{Seq: seq, Tokens: toks, AllLogits: all}}
	if err := m.Forward(context.Background(), b); err != nil {
		t.Fatalf("Forward: %v", err)
	}
	return b[0].Logits
}

// ggufPlan is the content of a GGUF file to write, editable by tests
// before writing (drop a key, drop a tensor, change dims).
type ggufPlan struct {
	kv      []gguf.KV
	tensors []planTensor
}

type planTensor struct {
	name string
	typ  quant.Type
	dims []uint64
	data []byte
}

// planFor lays out a spec and its weights as llama.cpp would.
func planFor(s testSpec, w *Weights) *ggufPlan {
	a := s.arch
	p := &ggufPlan{kv: []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: "general.name", Value: "test"},
		{Key: a + ".context_length", Value: uint32(s.context)},
		{Key: a + ".embedding_length", Value: uint32(s.dim)},
		{Key: a + ".block_count", Value: uint32(s.layers)},
		{Key: a + ".feed_forward_length", Value: uint32(s.ffn)},
		{Key: a + ".attention.head_count", Value: uint32(s.heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(s.kvHeads)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: s.eps},
		{Key: a + ".rope.freq_base", Value: float32(s.theta)},
	}}
	if s.experts > 0 {
		p.kv = append(p.kv,
			gguf.KV{Key: a + ".expert_count", Value: uint32(s.experts)},
			gguf.KV{Key: a + ".expert_used_count", Value: uint32(s.used)})
		if a == ArchQwen3MoE {
			p.kv = append(p.kv, gguf.KV{Key: a + ".expert_feed_forward_length", Value: uint32(s.ffn)})
		}
	}
	if a == ArchLlama {
		p.kv = append(p.kv,
			gguf.KV{Key: a + ".vocab_size", Value: uint32(s.vocab)},
			gguf.KV{Key: a + ".rope.dimension_count", Value: uint32(s.headDim)})
		if s.headDim*s.heads != s.dim {
			p.kv = append(p.kv, gguf.KV{Key: a + ".attention.key_length", Value: uint32(s.headDim)})
		}
		if s.window > 0 {
			p.kv = append(p.kv, gguf.KV{Key: a + ".attention.sliding_window", Value: uint32(s.window)})
		}
	} else {
		p.kv = append(p.kv,
			gguf.KV{Key: a + ".attention.key_length", Value: uint32(s.headDim)},
			gguf.KV{Key: a + ".attention.value_length", Value: uint32(s.headDim)})
	}
	if a == ArchPhi3 {
		p.kv = append(p.kv,
			gguf.KV{Key: "phi3.attention.sliding_window", Value: uint32(s.window)},
			gguf.KV{Key: "phi3.rope.scaling.original_context_length", Value: uint32(s.origContext)},
			gguf.KV{Key: "phi3.rope.scaling.attn_factor", Value: float32(s.attnFactor)})
	}
	if a == ArchGemma3 {
		p.kv = append(p.kv,
			gguf.KV{Key: "gemma3.attention.sliding_window", Value: uint32(s.window)},
			gguf.KV{Key: "gemma3.attention.query_pre_attn_scalar", Value: uint32(s.qpas)})
		if s.linear > 0 {
			p.kv = append(p.kv,
				gguf.KV{Key: "gemma3.rope.scaling.type", Value: "linear"},
				gguf.KV{Key: "gemma3.rope.scaling.factor", Value: float32(s.linear)})
		}
	}
	if a == ArchGemma2 {
		p.kv = append(p.kv,
			gguf.KV{Key: "gemma2.attn_logit_softcapping", Value: s.attnCap},
			gguf.KV{Key: "gemma2.final_logit_softcapping", Value: s.finalCap},
			gguf.KV{Key: "gemma2.attention.sliding_window", Value: uint32(s.window)},
			gguf.KV{Key: "gemma2.attention.query_pre_attn_scalar", Value: uint32(s.qpas)})
	}
	add := func(t Tensor, vector bool) {
		dims := []uint64{uint64(t.Cols), uint64(t.Rows)}
		if vector {
			dims = dims[:1]
		}
		p.tensors = append(p.tensors, planTensor{t.Name, t.Type, dims, t.Data})
	}
	add(w.Embed, false)
	add(w.OutputNorm, true)
	if a != ArchGemma2 && !s.tied {
		add(w.Output, false)
	}
	if a == ArchPhi3 {
		add(F32Tensor("rope_factors_long.weight", 1, len(s.longFactors), s.longFactors), true)
		add(F32Tensor("rope_factors_short.weight", 1, len(s.shortFactors), s.shortFactors), true)
	}
	if a == ArchLlama {
		if s.llama3 != nil {
			rf := llama3Factors(s.headDim, s.theta, *s.llama3)
			add(F32Tensor("rope_freqs.weight", 1, len(rf), rf), true)
		}
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		for _, t := range []*Tensor{&l.AttnNorm, &l.Q, &l.K, &l.V, &l.QBias, &l.KBias, &l.VBias, &l.QNorm, &l.KNorm, &l.QKV, &l.O, &l.PostAttnNorm, &l.FFNNorm, &l.Gate, &l.Up, &l.GateUp, &l.Down, &l.PostFFNNorm} {
			if t.Data != nil {
				add(*t, t.Rows == 1)
			}
		}
		if len(l.Experts) > 0 {
			add(l.Router, false)
			// llama.cpp's merged expert tensors: dims [cols, rows, experts].
			pfx := fmt.Sprintf("blk.%d.", i)
			for _, part := range []struct {
				name string
				t    func(x *Expert) *Tensor
			}{
				{"ffn_gate_exps.weight", func(x *Expert) *Tensor { return &x.Gate }},
				{"ffn_up_exps.weight", func(x *Expert) *Tensor { return &x.Up }},
				{"ffn_down_exps.weight", func(x *Expert) *Tensor { return &x.Down }},
			} {
				var data []byte
				for e := range l.Experts {
					data = append(data, part.t(&l.Experts[e]).Data...)
				}
				t0 := part.t(&l.Experts[0])
				p.tensors = append(p.tensors, planTensor{pfx + part.name, t0.Type,
					[]uint64{uint64(t0.Cols), uint64(t0.Rows), uint64(len(l.Experts))}, data})
			}
		}
	}
	return p
}

func (p *ggufPlan) dropKV(key string) {
	for i := range p.kv {
		if p.kv[i].Key == key {
			p.kv = append(p.kv[:i], p.kv[i+1:]...)
			return
		}
	}
	panic("no key " + key)
}

func (p *ggufPlan) setKV(key string, v any) {
	for i := range p.kv {
		if p.kv[i].Key == key {
			p.kv[i].Value = v
			return
		}
	}
	p.kv = append(p.kv, gguf.KV{Key: key, Value: v})
}

func (p *ggufPlan) tensor(name string) *planTensor {
	for i := range p.tensors {
		if p.tensors[i].name == name {
			return &p.tensors[i]
		}
	}
	panic("no tensor " + name)
}

func (p *ggufPlan) dropTensor(name string) {
	for i := range p.tensors {
		if p.tensors[i].name == name {
			p.tensors = append(p.tensors[:i], p.tensors[i+1:]...)
			return
		}
	}
	panic("no tensor " + name)
}

// write stores the plan as a GGUF file in dir and returns its path.
// Tensor data is zero-padded or cut to the size the (possibly edited) dims
// and type need.
func (p *ggufPlan) write(t testing.TB, dir string) string {
	t.Helper()
	w := gguf.NewWriter(3)
	for _, kv := range p.kv {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatalf("AddKV %s: %v", kv.Key, err)
		}
	}
	for _, pt := range p.tensors {
		if err := w.AddTensor(pt.name, pt.typ, pt.dims); err != nil {
			t.Fatalf("AddTensor %s: %v", pt.name, err)
		}
	}
	path := filepath.Join(dir, "model.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = w.WriteTo(f, func(i int, ti gguf.TensorInfo, dst io.Writer) error {
		d := p.tensors[i].data
		if int64(len(d)) > ti.Size {
			d = d[:ti.Size]
		}
		if _, err := dst.Write(d); err != nil {
			return err
		}
		_, err := dst.Write(bytes.Repeat([]byte{0}, int(ti.Size)-len(d)))
		return err
	})
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
