package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/strata-llm/strata/engine/model"
)

// ErrUnsupported is wrapped by the errors for what a directory holds and
// strata cannot run (an architecture, a RoPE scaling, a tokenizer), as
// opposed to malformed files.
var ErrUnsupported = errors.New("not supported")

// family is what one config.json model_type means for the engine: the GGUF
// architecture it runs as and how its tensors differ from the GGUF ones.
type family struct {
	arch string
	// permuteQK: transformers rotates halves of each head, llama's GGUF
	// rows are permuted for adjacent pairs (model.Config.NeoX is false).
	permuteQK bool
	// unitOffsetNorms: the norm weights are stored as w for a scale of
	// 1 + w (Gemma); the GGUF holds 1 + w.
	unitOffsetNorms bool
	// tied is tie_word_embeddings' default when config.json omits it.
	tied bool
	// moe names the expert tensors: the block's prefix after
	// "model.layers.N." and the gate, up and down projections.
	moe      string
	moeNames [3]string
}

// families maps config.json's model_type to the engine's architecture.
// Mistral and Mixtral are llama in GGUF (llama.cpp converts them so).
var families = map[string]family{
	"llama":       {arch: model.ArchLlama, permuteQK: true},
	"mistral":     {arch: model.ArchLlama, permuteQK: true},
	"mixtral":     {arch: model.ArchLlama, permuteQK: true, moe: "block_sparse_moe.", moeNames: [3]string{"w1", "w3", "w2"}},
	"qwen2":       {arch: model.ArchQwen2},
	"qwen3":       {arch: model.ArchQwen3},
	"qwen3_moe":   {arch: model.ArchQwen3MoE, moe: "mlp.", moeNames: [3]string{"gate_proj", "up_proj", "down_proj"}},
	"gemma2":      {arch: model.ArchGemma2, unitOffsetNorms: true, tied: true},
	"gemma3_text": {arch: model.ArchGemma3, unitOffsetNorms: true, tied: true},
	"phi3":        {arch: model.ArchPhi3},
}

// ModelTypes returns the config.json model_type values strata runs, sorted.
func ModelTypes() []string {
	out := make([]string, 0, len(families))
	for k := range families {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// rawConfig is the part of config.json the engine reads. Pointers tell an
// absent (or null) key from a zero one.
type rawConfig struct {
	ModelType             string          `json:"model_type"`
	Architectures         []string        `json:"architectures"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	VocabSize             int             `json:"vocab_size"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	SlidingWindow         *int            `json:"sliding_window"`
	HiddenAct             string          `json:"hidden_act"`
	HiddenActivation      string          `json:"hidden_activation"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`

	// Gemma.
	QueryPreAttnScalar    *float64 `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping  *float64 `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
	RopeLocalBaseFreq     *float64 `json:"rope_local_base_freq"`
	SlidingWindowPattern  *int     `json:"sliding_window_pattern"`
	LayerTypes            []string `json:"layer_types"`

	// Phi-3.
	OriginalMaxPositionEmbeddings int      `json:"original_max_position_embeddings"`
	PartialRotaryFactor           *float64 `json:"partial_rotary_factor"`

	// Mixture of experts: Mixtral's num_local_experts, Qwen3-MoE's
	// num_experts and moe_intermediate_size.
	NumLocalExperts     int   `json:"num_local_experts"`
	NumExperts          int   `json:"num_experts"`
	NumExpertsPerTok    int   `json:"num_experts_per_tok"`
	MoeIntermediateSize int   `json:"moe_intermediate_size"`
	NormTopkProb        *bool `json:"norm_topk_prob"`
	DecoderSparseStep   *int  `json:"decoder_sparse_step"`
	MlpOnlyLayers       []int `json:"mlp_only_layers"`
	SharedExpertSize    int   `json:"shared_expert_intermediate_size"`

	// TextConfig is a multimodal model's language model (Gemma 3).
	TextConfig json.RawMessage `json:"text_config"`
}

// gemma3TextDefaults is transformers' Gemma3TextConfig for the keys a
// Gemma 3 text_config may leave out.
func gemma3TextDefaults() rawConfig {
	i := func(v int) *int { return &v }
	f := func(v float64) *float64 { return &v }
	tied := true
	return rawConfig{
		VocabSize: 262208, HiddenSize: 2304, IntermediateSize: 9216, NumHiddenLayers: 26, NumAttentionHeads: 8,
		NumKeyValueHeads: i(4), HeadDim: i(256), MaxPositionEmbeddings: 131072, RMSNormEps: f(1e-6),
		RopeTheta: f(1_000_000), QueryPreAttnScalar: f(256), SlidingWindow: i(4096), RopeLocalBaseFreq: f(10000),
		TieWordEmbeddings: &tied,
	}
}

// ropeScaling is config.json's rope_scaling (or one entry of transformers
// 5's rope_parameters).
type ropeScaling struct {
	RopeType       string    `json:"rope_type"`
	Type           string    `json:"type"`
	Factor         *float64  `json:"factor"`
	LowFreqFactor  float64   `json:"low_freq_factor"`
	HighFreqFactor float64   `json:"high_freq_factor"`
	OrigContext    int       `json:"original_max_position_embeddings"`
	LongFactor     []float64 `json:"long_factor"`
	ShortFactor    []float64 `json:"short_factor"`
	AttnFactor     *float64  `json:"attention_factor"`
	RopeTheta      *float64  `json:"rope_theta"`
}

// kind is the scaling's name: rope_type, else the older type.
func (r *ropeScaling) kind() string {
	if r.RopeType != "" {
		return r.RopeType
	}
	return r.Type
}

// maxHeadDim bounds the head size before anything is sized by it (the
// engine's own limit, which Validate applies later, is lower).
const maxHeadDim = 1 << 12

// spec is a parsed config.json: the engine's config and how to read the
// tensors into it.
type spec struct {
	family
	modelType string
	cfg       model.Config
}

// parseConfig reads config.json's bytes into the engine's hyperparameters,
// with transformers' defaults for the keys a config may omit. The
// vocabulary size is config.json's; the loader checks it against the
// embedding.
func parseConfig(b []byte) (*spec, error) {
	var r rawConfig
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if r.ModelType == "gemma3" && len(r.TextConfig) > 0 {
		// Gemma 3 with a vision tower: strata runs its language model,
		// whose config is sparse, leaving the rest to transformers'
		// Gemma3TextConfig defaults.
		tc := r.TextConfig
		r = gemma3TextDefaults()
		if err := json.Unmarshal(tc, &r); err != nil {
			return nil, fmt.Errorf("config.json: text_config: %w", err)
		}
		r.ModelType = "gemma3_text"
	}
	fam, ok := families[r.ModelType]
	if !ok {
		what := fmt.Sprintf("model_type %q", r.ModelType)
		if len(r.Architectures) > 0 {
			what += fmt.Sprintf(" (%s)", strings.Join(r.Architectures, ", "))
		}
		return nil, fmt.Errorf("config.json: %s: %w: strata runs the model types %s", what, ErrUnsupported, strings.Join(ModelTypes(), ", "))
	}
	s := &spec{family: fam, modelType: r.ModelType}
	c := &s.cfg
	*c = model.Config{
		Arch: fam.arch, Vocab: r.VocabSize, Dim: r.HiddenSize, FFN: r.IntermediateSize, Layers: r.NumHiddenLayers,
		Heads: r.NumAttentionHeads, KVHeads: r.NumAttentionHeads, Context: r.MaxPositionEmbeddings,
		RopeTheta: 10000, NormEps: 1e-6, EmbedScale: 1,
	}
	if r.NumKeyValueHeads != nil {
		c.KVHeads = *r.NumKeyValueHeads
	}
	if r.NumAttentionHeads <= 0 {
		return nil, fmt.Errorf("config.json: num_attention_heads %d must be positive", r.NumAttentionHeads)
	}
	if r.HeadDim != nil && *r.HeadDim > 0 {
		c.HeadDim = *r.HeadDim
	} else {
		if r.HiddenSize%r.NumAttentionHeads != 0 {
			return nil, fmt.Errorf("config.json: hidden_size %d not divisible by num_attention_heads %d and no head_dim", r.HiddenSize, r.NumAttentionHeads)
		}
		c.HeadDim = r.HiddenSize / r.NumAttentionHeads
	}
	if c.HeadDim <= 0 || c.HeadDim > maxHeadDim {
		// Checked before the RoPE tables below are sized by it.
		return nil, fmt.Errorf("config.json: head dim %d out of range [1, %d]", c.HeadDim, maxHeadDim)
	}
	if r.RMSNormEps != nil {
		c.NormEps = float32(*r.RMSNormEps)
	}
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	} else if rp, err := ropeParams(r.RopeParameters); err == nil && rp != nil && rp.RopeTheta != nil {
		c.RopeTheta = *rp.RopeTheta
	}
	if r.PartialRotaryFactor != nil && *r.PartialRotaryFactor != 1 {
		return nil, fmt.Errorf("config.json: partial_rotary_factor %v: %w (strata rotates whole heads)", *r.PartialRotaryFactor, ErrUnsupported)
	}
	c.AttnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	c.TiedOutput = fam.tied
	if r.TieWordEmbeddings != nil {
		c.TiedOutput = *r.TieWordEmbeddings
	}
	var rs *ropeScaling
	if len(r.RopeScaling) > 0 && string(r.RopeScaling) != "null" {
		rs = new(ropeScaling)
		if err := json.Unmarshal(r.RopeScaling, rs); err != nil {
			return nil, fmt.Errorf("config.json: rope_scaling: %w", err)
		}
	}

	if err := s.checkVariant(&r); err != nil {
		return nil, fmt.Errorf("config.json (%s): %w", r.ModelType, err)
	}
	var err error
	switch fam.arch {
	case model.ArchLlama:
		err = s.llamaConfig(&r, rs)
	case model.ArchQwen2, model.ArchQwen3, model.ArchQwen3MoE:
		err = s.plainRope(rs)
		if err == nil && fam.arch == model.ArchQwen3MoE {
			err = s.qwen3MoEConfig(&r)
		}
	case model.ArchPhi3:
		err = s.phi3Config(&r, rs)
	case model.ArchGemma2:
		err = s.gemma2Config(&r, rs)
	case model.ArchGemma3:
		err = s.gemma3Config(&r, rs)
	}
	if err != nil {
		return nil, fmt.Errorf("config.json (%s): %w", r.ModelType, err)
	}
	if c.Vocab <= 0 {
		return nil, fmt.Errorf("config.json: vocab_size %d must be positive", c.Vocab)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config.json (%s): %w", r.ModelType, err)
	}
	return s, nil
}

// checkVariant refuses the options a family's config can set that the
// engine does not implement, rather than run without them: biases where
// the architecture has none, another activation.
func (s *spec) checkVariant(r *rawConfig) error {
	if r.AttentionBias != nil && *r.AttentionBias && !s.cfg.QKVBias() {
		return fmt.Errorf("attention_bias: %w for %s", ErrUnsupported, s.modelType)
	}
	if r.MLPBias != nil && *r.MLPBias {
		return fmt.Errorf("mlp_bias: %w", ErrUnsupported)
	}
	act, want := r.HiddenAct, "silu"
	if s.cfg.PostNorms() {
		want = "gelu_pytorch_tanh"
		if r.HiddenActivation != "" {
			act = r.HiddenActivation
		}
	}
	if act != "" && act != want {
		return fmt.Errorf("activation %q: %w (strata's %s uses %s)", act, ErrUnsupported, s.modelType, want)
	}
	return nil
}

// ropeParams decodes transformers 5's rope_parameters when it is one
// scaling for every layer (nil when absent or per layer type).
func ropeParams(b json.RawMessage) (*ropeScaling, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var r ropeScaling
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// plainRope accepts no scaling, or linear position interpolation (as the
// GGUF's rope.scaling.factor), and refuses the rest.
func (s *spec) plainRope(rs *ropeScaling) error {
	if rs == nil {
		return nil
	}
	switch rs.kind() {
	case "", "default":
		return nil
	case "linear":
		return s.linearRope(rs)
	}
	return fmt.Errorf("rope_scaling %q: %w (strata implements linear, llama3 and Phi-3's longrope)", rs.kind(), ErrUnsupported)
}

// linearRope divides every frequency by the factor.
func (s *spec) linearRope(rs *ropeScaling) error {
	if rs.Factor == nil || !(*rs.Factor > 0) || math.IsInf(*rs.Factor, 0) {
		return fmt.Errorf("rope_scaling linear needs a positive factor")
	}
	if *rs.Factor == 1 {
		return nil
	}
	s.cfg.RopeFreqs = make([]float32, s.cfg.HeadDim/2)
	for i := range s.cfg.RopeFreqs {
		s.cfg.RopeFreqs[i] = float32(*rs.Factor)
	}
	return nil
}

// llamaConfig reads llama's, Mistral's and Mixtral's keys: the llama3
// frequency scaling (the divisors llama.cpp's converter writes as
// rope_freqs.weight), Mistral's window on every layer, Mixtral's experts.
func (s *spec) llamaConfig(r *rawConfig, rs *ropeScaling) error {
	c := &s.cfg
	if rs != nil && rs.kind() == "llama3" {
		if rs.Factor == nil || !(*rs.Factor > 0) || rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OrigContext <= 0 {
			return fmt.Errorf("rope_scaling llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings")
		}
		c.RopeFreqs = llama3Freqs(c.RopeTheta, c.HeadDim, *rs.Factor, rs.LowFreqFactor, rs.HighFreqFactor, float64(rs.OrigContext))
	} else if err := s.plainRope(rs); err != nil {
		return err
	}
	if s.modelType != "llama" && r.SlidingWindow != nil && *r.SlidingWindow > 0 {
		c.SlidingWindow = *r.SlidingWindow
	}
	if s.modelType == "mixtral" {
		c.Experts, c.ExpertsUsed, c.ExpertFFN = r.NumLocalExperts, r.NumExpertsPerTok, c.FFN
		if c.Experts <= 0 {
			return errors.New("num_local_experts must be positive")
		}
	}
	return nil
}

// llama3Freqs computes Llama 3's per-pair frequency divisors as llama.cpp's
// converter does (in float64, stored as float32).
func llama3Freqs(theta float64, headDim int, factor, low, high, orig float64) []float32 {
	out := make([]float32, headDim/2)
	lowWave, highWave := orig/low, orig/high
	for i := range out {
		inv := math.Pow(theta, -2*float64(i)/float64(headDim))
		wavelen := 2 * math.Pi / inv
		switch {
		case wavelen < highWave:
			out[i] = 1
		case wavelen > lowWave:
			out[i] = float32(factor)
		default:
			sm := (orig/wavelen - low) / (high - low)
			out[i] = float32(1 / ((1-sm)/factor + sm))
		}
	}
	return out
}

// qwen3MoEConfig reads Qwen3-MoE's experts: every layer sparse, the top-k
// weights renormalised (what the engine implements).
func (s *spec) qwen3MoEConfig(r *rawConfig) error {
	c := &s.cfg
	c.Experts, c.ExpertsUsed, c.ExpertFFN = r.NumExperts, r.NumExpertsPerTok, r.MoeIntermediateSize
	if c.Experts <= 0 {
		return errors.New("num_experts must be positive")
	}
	if r.NormTopkProb != nil && !*r.NormTopkProb {
		return fmt.Errorf("norm_topk_prob false: %w (strata renormalises the picked experts' weights)", ErrUnsupported)
	}
	if r.DecoderSparseStep != nil && *r.DecoderSparseStep != 1 || len(r.MlpOnlyLayers) > 0 {
		return fmt.Errorf("dense layers among the sparse ones (decoder_sparse_step, mlp_only_layers): %w", ErrUnsupported)
	}
	if r.SharedExpertSize > 0 {
		return fmt.Errorf("shared experts: %w", ErrUnsupported)
	}
	return nil
}

// phi3Config reads Phi-3's window (every layer, as transformers masks) and
// LongRoPE: the long factors when the trained context exceeds the original
// one, as the GGUF path picks them, and the attention factor.
func (s *spec) phi3Config(r *rawConfig, rs *ropeScaling) error {
	c := &s.cfg
	if r.SlidingWindow != nil && *r.SlidingWindow > 0 {
		c.SlidingWindow = *r.SlidingWindow
	}
	if rs == nil {
		return nil
	}
	switch rs.kind() {
	case "longrope", "su":
	default:
		return s.plainRope(rs)
	}
	orig := r.OriginalMaxPositionEmbeddings
	if rs.OrigContext > 0 {
		orig = rs.OrigContext
	}
	if orig <= 0 {
		return errors.New("longrope needs original_max_position_embeddings")
	}
	factors := rs.ShortFactor
	name := "short_factor"
	if c.Context > orig {
		factors, name = rs.LongFactor, "long_factor"
	}
	if len(factors) != c.HeadDim/2 {
		return fmt.Errorf("rope_scaling %s has %d entries, want head_dim/2 = %d", name, len(factors), c.HeadDim/2)
	}
	c.RopeFreqs = make([]float32, len(factors))
	for i, f := range factors {
		c.RopeFreqs[i] = float32(f)
	}
	if rs.AttnFactor != nil {
		c.RopeAttnFactor = float32(*rs.AttnFactor)
	} else if scale := float64(c.Context) / float64(orig); scale > 1 {
		c.RopeAttnFactor = float32(math.Sqrt(1 + math.Log(scale)/math.Log(float64(orig))))
	}
	return nil
}

// gemma2Config reads Gemma 2's soft-caps, window and query scale, with
// transformers' defaults.
func (s *spec) gemma2Config(r *rawConfig, rs *ropeScaling) error {
	c := &s.cfg
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.AttnSoftcap, c.FinalSoftcap, c.SlidingWindow = 50, 30, 4096
	if r.AttnLogitSoftcapping != nil {
		c.AttnSoftcap = float32(*r.AttnLogitSoftcapping)
	}
	if r.FinalLogitSoftcapping != nil {
		c.FinalSoftcap = float32(*r.FinalLogitSoftcapping)
	}
	if r.SlidingWindow != nil {
		c.SlidingWindow = *r.SlidingWindow
	}
	if err := s.queryScale(r, 256); err != nil {
		return err
	}
	return s.plainRope(rs)
}

// gemma3Config reads Gemma 3's window (five sliding layers in six, the
// cycle the engine implements), the local layers' RoPE base, the global
// ones' linear scaling, the query scale and an optional final soft-cap.
func (s *spec) gemma3Config(r *rawConfig, rs *ropeScaling) error {
	c := &s.cfg
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.RopeThetaLocal = 10000
	if r.RopeLocalBaseFreq != nil {
		c.RopeThetaLocal = *r.RopeLocalBaseFreq
	}
	if r.SlidingWindow == nil || *r.SlidingWindow <= 0 {
		return errors.New("sliding_window must be positive")
	}
	c.SlidingWindow = *r.SlidingWindow
	if r.SlidingWindowPattern != nil && *r.SlidingWindowPattern != 6 {
		return fmt.Errorf("sliding_window_pattern %d: %w (strata runs Gemma 3's one global layer in six)", *r.SlidingWindowPattern, ErrUnsupported)
	}
	if len(r.LayerTypes) > 0 {
		if len(r.LayerTypes) != c.Layers {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(r.LayerTypes), c.Layers)
		}
		for i, t := range r.LayerTypes {
			want := "full_attention"
			if c.Sliding(i) {
				want = "sliding_attention"
			}
			if t != want {
				return fmt.Errorf("layer_types[%d] is %q where strata's Gemma 3 has %q: %w", i, t, want, ErrUnsupported)
			}
		}
	}
	if r.FinalLogitSoftcapping != nil {
		c.FinalSoftcap = float32(*r.FinalLogitSoftcapping)
	}
	if r.AttnLogitSoftcapping != nil {
		c.AttnSoftcap = float32(*r.AttnLogitSoftcapping)
	}
	if err := s.queryScale(r, c.HeadDim); err != nil {
		return err
	}
	return s.plainRope(rs)
}

// queryScale sets the attention scale from query_pre_attn_scalar (def
// when absent).
func (s *spec) queryScale(r *rawConfig, def int) error {
	q := float64(def)
	if r.QueryPreAttnScalar != nil {
		q = *r.QueryPreAttnScalar
	}
	if !(q > 0) || math.IsInf(q, 0) {
		return fmt.Errorf("query_pre_attn_scalar %v must be positive", q)
	}
	s.cfg.AttnScale = float32(1 / math.Sqrt(q))
	return nil
}
