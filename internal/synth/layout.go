package synth

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/engine/quant"
)

// FileTypes maps the synth type names to llama.cpp's llama_ftype values,
// stored as general.file_type.
var FileTypes = map[string]uint32{
	"f32":    0,  // LLAMA_FTYPE_ALL_F32
	"f16":    1,  // LLAMA_FTYPE_MOSTLY_F16
	"bf16":   32, // LLAMA_FTYPE_MOSTLY_BF16
	"q8_0":   7,  // LLAMA_FTYPE_MOSTLY_Q8_0
	"q4_k_m": 15, // LLAMA_FTYPE_MOSTLY_Q4_K_M
}

// tensorKind says how a tensor's values are generated.
type tensorKind int

const (
	kindMatrix    tensorKind = iota // random, std from fan-in
	kindNorm                        // F32 1 + small noise
	kindRopeFreqs                   // llama3 frequency factors, computed
	kindRopeLong                    // Phi-3 LongRoPE long factors, computed
	kindRopeShort                   // Phi-3 LongRoPE short factors, computed
)

// TensorSpec is one GGUF tensor of a synthetic model.
type TensorSpec struct {
	Name string
	Type quant.Type
	// Dims are in ggml order (Dims[0] is the row length).
	Dims []uint64
	// HFName is the Hugging Face tensor holding the same weights, or ""
	// when transformers has no such tensor (rope_freqs, gemma2's tied
	// output).
	HFName string

	kind tensorKind
	std  float32
	// normOffset is the mean of a norm's w (GGUF value 1 + w): 0, or
	// gemmaPostNormGain-1 for gemma2's post-attention/post-FFN norms.
	normOffset float32
	// permuteHeadDim is the head size when the rows are permuted between
	// HF and GGUF (llama attn_q/attn_k), else 0.
	permuteHeadDim int
	// hfExperts says the tensor merges one matrix per expert (dims[2]
	// experts): HFName holds a %d for the expert, and each expert's slab
	// is its own HF tensor.
	hfExperts bool
}

// Elems returns the number of elements.
func (t TensorSpec) Elems() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= int64(d)
	}
	return n
}

// useMoreBits is llama.cpp's use_more_bits(i_layer, n_layers): the layers
// whose attn_v and ffn_down Q4_K_M keeps at Q6_K.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// layerOf returns N for a "blk.N.*" name, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// TensorType returns the storage type of the named GGUF tensor in a model of
// shape s and synth type typ ("f32", "f16", "bf16", "q8_0", "q4_k_m"),
// following llama.cpp's rules: norms and rope_freqs are always F32;
// f16/bf16/q8_0 store every matrix as F16/BF16/Q8_0 (bf16 being the format
// Hugging Face checkpoints ship in, the one transformers runs); q4_k_m
// stores matrices as Q4_K except the output projection (output.weight, or
// token_embd.weight when the output is tied) as Q6_K, attn_v and ffn_down
// of the use_more_bits layers as Q6_K, and, in the 80-layer llama 70b
// shape, the remaining attn_v as Q5_K.
func TensorType(s Shape, typ, name string) (quant.Type, error) {
	if _, ok := FileTypes[typ]; !ok {
		return 0, fmt.Errorf("synth: unknown type %q (want one of %v)", typ, sortedKeys(FileTypes))
	}
	if strings.HasSuffix(name, "_norm.weight") || strings.HasSuffix(name, ".bias") || strings.HasPrefix(name, "rope_") {
		return quant.F32, nil
	}
	if strings.HasSuffix(name, ".ffn_gate_inp.weight") && (typ == "q8_0" || typ == "q4_k_m") {
		// llama.cpp's quantizer leaves the expert router as it is.
		return quant.F32, nil
	}
	switch typ {
	case "f32":
		return quant.F32, nil
	case "f16":
		return quant.F16, nil
	case "bf16":
		return quant.BF16, nil
	case "q8_0":
		return quant.Q8_0, nil
	}
	// q4_k_m
	if name == "output.weight" || (s.Tied && name == "token_embd.weight") {
		return quant.Q6_K, nil
	}
	layer := layerOf(name)
	switch {
	case layer >= 0 && strings.HasSuffix(name, ".attn_qkv.weight"):
		// llama.cpp's Q4_K_M keeps fused qkv at Q5_K.
		return quant.Q5_K, nil
	case layer >= 0 && strings.HasSuffix(name, ".attn_v.weight"):
		if useMoreBits(layer, s.Layers) {
			return quant.Q6_K, nil
		}
		if s.Arch == "llama" && s.Layers == 80 {
			return quant.Q5_K, nil
		}
	case layer >= 0 && (strings.HasSuffix(name, ".ffn_down.weight") || strings.HasSuffix(name, ".ffn_down_exps.weight")):
		if useMoreBits(layer, s.Layers) {
			return quant.Q6_K, nil
		}
	}
	return quant.Q4_K, nil
}

// Weight scales. The goal is a forward pass that is numerically healthy at
// every depth rather than a trained-looking spectrum:
//
//   - Projections reading a normalized vector (attn_q/k/v, ffn_gate/up) use
//     std 1/sqrt(dim): their outputs have unit RMS, so attention scores
//     q·k/sqrt(head_dim) have std ~1 (softmax neither uniform nor one-hot)
//     and SiLU/GELU see O(1) inputs.
//   - attn_output and ffn_down use 1/sqrt(fan_in), so each block adds an
//     O(1) update to the residual stream, which grows only like
//     sqrt(layers).
//   - The output projection is scaled so logits have std ~logitStd (3): with
//     a 128k vocabulary the top logit then sits ~4σ out and its gap to the
//     runner-up is typically a few tenths, so argmax is not a near tie and
//     small kernel differences do not flip it; gemma2's final soft-cap (30)
//     stays mostly linear.
//   - llama token_embd has std 1 (the first RMSNorm removes the scale
//     anyway, and unit embeddings make the token identity comparable to the
//     layer updates). gemma2 ties token_embd to the output and multiplies
//     embeddings by sqrt(dim), so its std is logitStd/sqrt(dim): this gives
//     both logits of std ~3 and input embeddings of std ~3.
//   - Norm weights are 1 + w with w ~ N(0, normNoiseStd) in float32 (see
//     normValues), so norms scale features mildly unevenly, as trained ones
//     do, without changing magnitudes.
//   - Exception: gemma2's post_attention_norm and post_ffw_norm are centred
//     on gemmaPostNormGain (8), not 1. With tied embeddings the input token's
//     own embedding sits in the residual stream, and its logit is about
//     sqrt(dim)·e²/R (e: embedding input std, R: final residual RMS) while
//     the other logits have std e. With unit post-norms R stays near e and
//     the model simply predicts its input token (top-1 margins of ~15, the
//     same argmax whatever the context). Gain 8 makes each block's update
//     RMS 8, so R ~ 8·sqrt(2·layers) dominates, the echo logit drops below
//     the typical maximum of the others, and predictions depend on context.
//     Trained Gemma 2 checkpoints have large post-norm weights for the same
//     reason.
//   - Tied models without post-norms (the small Qwen2) meet the same echo;
//     their attn_output and ffn_down std is multiplied by tiedUpdateGain
//     (4) instead, which makes each block's update RMS a few units.
const (
	qwenBiasStd       = 0.1
	logitStd          = 3.0
	normNoiseStd      = 0.02
	gemmaPostNormGain = 8.0
	tiedUpdateGain    = 4.0
)

// Layout returns the GGUF tensors of a model of shape s stored as typ, in
// file order: rope_freqs (llama3 scaling), token_embd, each layer's tensors in
// compute order (so a streaming reader finds a layer in one extent), then
// output_norm and output (llama).
func Layout(s Shape, typ string) ([]TensorSpec, error) {
	if _, ok := FileTypes[typ]; !ok {
		return nil, fmt.Errorf("synth: unknown type %q (want one of %v)", typ, sortedKeys(FileTypes))
	}
	if !slices.Contains([]string{"llama", "gemma2", "gemma3", "phi3", "qwen2", "qwen3", "qwen3moe"}, s.Arch) {
		return nil, fmt.Errorf("synth: unknown architecture %q", s.Arch)
	}
	d, ff := uint64(s.Dim), uint64(s.FFN)
	qd, kvd := uint64(s.Heads*s.HeadDim), uint64(s.KVHeads*s.HeadDim)
	inv := func(n uint64) float32 { return float32(1 / math.Sqrt(float64(n))) }
	llama := s.Arch == "llama"
	gemma := s.gemma()
	upd := float32(1)
	if s.Tied && !gemma {
		upd = tiedUpdateGain
	}

	var out []TensorSpec
	add := func(name, hf string, kind tensorKind, std float32, dims ...uint64) {
		out = append(out, TensorSpec{Name: name, HFName: hf, Dims: dims, kind: kind, std: std})
	}
	if s.Rope != nil {
		add("rope_freqs.weight", "", kindRopeFreqs, 0, uint64(s.HeadDim/2))
	}
	phi := s.Arch == "phi3"
	if phi {
		// The converter yields them before the model's tensors; their
		// values go to config.json's rope_scaling in the HF twin.
		add("rope_factors_long.weight", "", kindRopeLong, 0, uint64(s.HeadDim/2))
		add("rope_factors_short.weight", "", kindRopeShort, 0, uint64(s.HeadDim/2))
	}
	if s.Tied {
		// The embedding is the output projection too: scaled for logits
		// of std logitStd (gemma2 multiplies its input side by sqrt(dim)).
		add("token_embd.weight", "model.embed_tokens.weight", kindMatrix, float32(logitStd)*inv(d), d, uint64(s.Vocab))
	} else {
		add("token_embd.weight", "model.embed_tokens.weight", kindMatrix, 1, d, uint64(s.Vocab))
	}
	for i := 0; i < s.Layers; i++ {
		b := fmt.Sprintf("blk.%d.", i)
		h := fmt.Sprintf("model.layers.%d.", i)
		add(b+"attn_norm.weight", h+"input_layernorm.weight", kindNorm, 0, d)
		if phi {
			add(b+"attn_qkv.weight", h+"self_attn.qkv_proj.weight", kindMatrix, inv(d), d, qd+2*kvd)
			add(b+"attn_output.weight", h+"self_attn.o_proj.weight", kindMatrix, inv(qd), qd, d)
			add(b+"ffn_norm.weight", h+"post_attention_layernorm.weight", kindNorm, 0, d)
			add(b+"ffn_up.weight", h+"mlp.gate_up_proj.weight", kindMatrix, inv(d), d, 2*ff)
			add(b+"ffn_down.weight", h+"mlp.down_proj.weight", kindMatrix, inv(ff), ff, d)
			continue
		}
		add(b+"attn_q.weight", h+"self_attn.q_proj.weight", kindMatrix, inv(d), d, qd)
		add(b+"attn_k.weight", h+"self_attn.k_proj.weight", kindMatrix, inv(d), d, kvd)
		if llama {
			out[len(out)-2].permuteHeadDim = s.HeadDim
			out[len(out)-1].permuteHeadDim = s.HeadDim
		}
		add(b+"attn_v.weight", h+"self_attn.v_proj.weight", kindMatrix, inv(d), d, kvd)
		if s.Arch == "qwen2" {
			// Qwen2's q/k/v biases, small beside the projections' unit
			// outputs: a large v bias is the same vector at every
			// position, which would make every step predict one token.
			add(b+"attn_q.bias", h+"self_attn.q_proj.bias", kindMatrix, qwenBiasStd, qd)
			add(b+"attn_k.bias", h+"self_attn.k_proj.bias", kindMatrix, qwenBiasStd, kvd)
			add(b+"attn_v.bias", h+"self_attn.v_proj.bias", kindMatrix, qwenBiasStd, kvd)
		}
		if s.Arch == "qwen3" || s.Arch == "qwen3moe" || s.Arch == "gemma3" {
			add(b+"attn_q_norm.weight", h+"self_attn.q_norm.weight", kindNorm, 0, uint64(s.HeadDim))
			add(b+"attn_k_norm.weight", h+"self_attn.k_norm.weight", kindNorm, 0, uint64(s.HeadDim))
		}
		add(b+"attn_output.weight", h+"self_attn.o_proj.weight", kindMatrix, upd*inv(qd), qd, d)
		if !gemma {
			add(b+"ffn_norm.weight", h+"post_attention_layernorm.weight", kindNorm, 0, d)
		} else {
			add(b+"post_attention_norm.weight", h+"post_attention_layernorm.weight", kindNorm, 0, d)
			out[len(out)-1].normOffset = gemmaPostNormGain - 1
			add(b+"ffn_norm.weight", h+"pre_feedforward_layernorm.weight", kindNorm, 0, d)
		}
		if s.Experts > 0 {
			// The router and experts: llama.cpp merges each matrix over
			// the experts (dims [cols, rows, experts]); transformers
			// keeps one module per expert (Mixtral's w1 gate, w3 up, w2
			// down; Qwen3-MoE's gate_proj, up_proj, down_proj).
			e, ef := uint64(s.Experts), ff
			if s.ExpertFFN > 0 {
				ef = uint64(s.ExpertFFN)
			}
			m, names := h+"block_sparse_moe.", [3]string{"w1", "w3", "w2"}
			if s.Arch == "qwen3moe" {
				m, names = h+"mlp.", [3]string{"gate_proj", "up_proj", "down_proj"}
			}
			add(b+"ffn_gate_inp.weight", m+"gate.weight", kindMatrix, inv(d), d, e)
			add(b+"ffn_gate_exps.weight", m+"experts.%d."+names[0]+".weight", kindMatrix, inv(d), d, ef, e)
			out[len(out)-1].hfExperts = true
			add(b+"ffn_up_exps.weight", m+"experts.%d."+names[1]+".weight", kindMatrix, inv(d), d, ef, e)
			out[len(out)-1].hfExperts = true
			add(b+"ffn_down_exps.weight", m+"experts.%d."+names[2]+".weight", kindMatrix, upd*inv(ef), ef, d, e)
			out[len(out)-1].hfExperts = true
		} else {
			add(b+"ffn_gate.weight", h+"mlp.gate_proj.weight", kindMatrix, inv(d), d, ff)
			add(b+"ffn_up.weight", h+"mlp.up_proj.weight", kindMatrix, inv(d), d, ff)
			add(b+"ffn_down.weight", h+"mlp.down_proj.weight", kindMatrix, upd*inv(ff), ff, d)
		}
		if gemma {
			add(b+"post_ffw_norm.weight", h+"post_feedforward_layernorm.weight", kindNorm, 0, d)
			out[len(out)-1].normOffset = gemmaPostNormGain - 1
		}
	}
	add("output_norm.weight", "model.norm.weight", kindNorm, 0, d)
	if !s.Tied {
		add("output.weight", "lm_head.weight", kindMatrix, float32(logitStd)*inv(d), d, uint64(s.Vocab))
	}
	for i := range out {
		t, err := TensorType(s, typ, out[i].Name)
		if err != nil {
			return nil, err
		}
		out[i].Type = t
	}
	return out, nil
}

// RopeFreqs returns llama's rope_freqs.weight: for each of head_dim/2
// frequency pairs, the divisor that Llama 3's "llama3" scaling applies to
// the base inverse frequency theta^(-2i/head_dim), computed as llama.cpp's
// converter does.
func RopeFreqs(s Shape) []float32 {
	n := s.HeadDim / 2
	out := make([]float32, n)
	r := s.Rope
	for i := range out {
		out[i] = 1
		if r == nil {
			continue
		}
		inv := math.Pow(s.RopeTheta, -2*float64(i)/float64(s.HeadDim))
		wavelen := 2 * math.Pi / inv
		orig := float64(r.OrigContext)
		lowWave := orig / r.LowFreqFactor
		highWave := orig / r.HighFreqFactor
		switch {
		case wavelen < highWave:
			out[i] = 1
		case wavelen > lowWave:
			out[i] = float32(r.Factor)
		default:
			sm := (orig/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			out[i] = float32(1 / ((1-sm)/r.Factor + sm))
		}
	}
	return out
}
