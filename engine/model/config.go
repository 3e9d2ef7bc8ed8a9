package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/strata-llm/strata/engine/gguf"
)

// Architectures the engine implements (GGUF general.architecture values).
const (
	ArchLlama  = "llama"
	ArchGemma2 = "gemma2"
	ArchGemma3 = "gemma3"
	ArchPhi3   = "phi3"
	ArchQwen2  = "qwen2"
	ArchQwen3  = "qwen3"
	// ArchQwen3MoE is Qwen3's attention with mixture-of-experts FFNs
	// (Qwen3-30B-A3B, Qwen3-235B-A22B).
	ArchQwen3MoE = "qwen3moe"
)

// archs lists the implemented architectures, for the error that refuses
// any other: it names what the file says and what strata can run instead.
var archs = []string{ArchLlama, ArchGemma2, ArchGemma3, ArchPhi3, ArchQwen2, ArchQwen3, ArchQwen3MoE}

// Archs returns the architectures the engine implements.
func Archs() []string { return slices.Clone(archs) }

// errArch is the error for an architecture the engine does not implement.
func errArch(arch string) error {
	return fmt.Errorf("unsupported architecture %q: strata runs %s", arch, strings.Join(archs, ", "))
}

// Sanity limits on hyperparameters. They sit far above any real model and
// exist so a hostile or corrupt header cannot make the engine allocate
// absurd amounts of memory or overflow int arithmetic.
const (
	maxVocab   = 1 << 22
	maxDim     = 1 << 16
	maxFFN     = 1 << 18
	maxLayers  = 1 << 12
	maxHeads   = 1 << 10
	maxHeadDim = 1 << 11
	maxContext = 1 << 24
	maxExperts = 1 << 12
)

// Config holds the hyperparameters the forward pass needs. It is derived
// from GGUF metadata by ConfigFromGGUF, or filled in directly by tests and
// tools that build models in memory.
type Config struct {
	// Arch is one of Archs (the GGUF general.architecture).
	Arch string
	// Vocab is the number of token ids (rows of the embedding and output).
	Vocab int
	// Dim is the residual stream width (n_embd).
	Dim int
	// FFN is the feed-forward hidden width.
	FFN int
	// Layers is the number of transformer blocks.
	Layers int
	// Heads is the number of query heads.
	Heads int
	// KVHeads is the number of key/value heads (GQA); Heads % KVHeads == 0.
	KVHeads int
	// HeadDim is the per-head width of queries, keys and values.
	HeadDim int
	// Context is the trained context length: the largest KV cache a
	// sequence may have.
	Context int
	// RopeTheta is the RoPE base frequency.
	RopeTheta float64
	// RopeFreqs are llama3 per-pair frequency divisors (rope_freqs.weight,
	// HeadDim/2 entries): freq_i = theta^(-2i/HeadDim) / RopeFreqs[i].
	// Nil means no scaling.
	RopeFreqs []float32
	// RopeThetaLocal, when not 0, is the RoPE base of the sliding-window
	// layers, which then take no RopeFreqs scaling (Gemma 3's local
	// layers); 0 means they rotate as the global ones.
	RopeThetaLocal float64
	// RopeAttnFactor multiplies every RoPE cosine and sine (LongRoPE's
	// attention factor, Phi-3's rope.scaling.attn_factor), so scores grow
	// by its square; 0 means 1.
	RopeAttnFactor float32
	// NormEps is the RMSNorm epsilon.
	NormEps float32
	// AttnScale multiplies attention scores (1/sqrt(HeadDim) for llama,
	// query_pre_attn_scalar^-0.5 for gemma2).
	AttnScale float32
	// AttnSoftcap caps attention scores with cap*tanh(s/cap); 0 = off.
	AttnSoftcap float32
	// FinalSoftcap caps output logits the same way; 0 = off.
	FinalSoftcap float32
	// SlidingWindow is the window of the sliding layers (Config.Sliding):
	// keys with qpos-kpos >= SlidingWindow are masked. 0 = none.
	SlidingWindow int
	// EmbedScale multiplies the token embedding (gemma2: float32(sqrt(Dim));
	// otherwise 1).
	EmbedScale float32
	// TiedOutput reports that the output projection is the token embedding.
	TiedOutput bool
	// Experts is the number of experts in each mixture-of-experts layer
	// (0: every layer is dense). ExpertsUsed is how many of them the
	// router picks per token (top-k) and ExpertFFN one expert's hidden
	// width. The picked experts' softmax weights are renormalised to sum
	// to 1, as Mixtral and Qwen3-MoE do.
	Experts, ExpertsUsed, ExpertFFN int
}

// MoE reports whether the model's feed-forward blocks are mixtures of
// experts.
func (c *Config) MoE() bool { return c.Experts > 0 }

// ropeLinearScale reads RoPE scaling as llama.cpp does: the factor from
// rope.scaling.factor (or the older rope.scale_linear; absent or 0 means 1),
// applied as linear position interpolation when rope.scaling.type is
// linear, none or absent. YaRN and LongRoPE change the frequencies in ways
// this engine does not implement, so a file that asks for them with a
// factor other than 1 is refused rather than run with the wrong positions.
func ropeLinearScale(f *gguf.File, arch string) (float64, error) {
	scale := 0.0
	key := arch + ".rope.scaling.factor"
	if v, ok := f.Float(key); ok {
		scale = v
	} else if v, ok := f.Float(arch + ".rope.scale_linear"); ok {
		scale, key = v, arch+".rope.scale_linear"
	}
	if scale == 0 || scale == 1 {
		return 1, nil
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return 0, fmt.Errorf("%s %v must be positive and finite", key, scale)
	}
	typ := "linear"
	if v, ok := f.Lookup(arch + ".rope.scaling.type"); ok {
		s, isStr := v.(string)
		if !isStr {
			return 0, fmt.Errorf("%s.rope.scaling.type is %T, want a string", arch, v)
		}
		typ = s
	}
	switch typ {
	case "linear", "none":
		return scale, nil
	}
	return 0, fmt.Errorf("RoPE scaling %q (factor %v, %s.rope.scaling.type) is not supported: strata implements linear scaling only", typ, scale, arch)
}

// QDim is the width of the concatenated query heads.
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the concatenated key (or value) heads.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// gemma3Pattern is Gemma 3's layer cycle: five sliding-window layers, then
// a global one (llama.cpp's swa pattern 6; transformers' layer_types).
const gemma3Pattern = 6

// Sliding reports whether layer i uses the sliding-window mask. Gemma2
// alternates sliding (even index) and global (odd index) layers, Gemma 3
// has one global layer in six (the last of each six); every other
// architecture with a window (Mistral's, in a llama file) applies it at
// every layer.
func (c *Config) Sliding(i int) bool {
	if c.SlidingWindow <= 0 {
		return false
	}
	switch c.Arch {
	case ArchGemma2:
		return i%2 == 0
	case ArchGemma3:
		return i%gemma3Pattern < gemma3Pattern-1
	}
	return true
}

// NeoX reports whether RoPE rotates the pairs (x[i], x[i+HeadDim/2]), as
// Hugging Face's rotate_half does and llama.cpp's converter leaves the
// rows for every architecture but llama; llama's q/k rows are permuted by
// the converter so that its pairs are adjacent.
func (c *Config) NeoX() bool { return c.Arch != ArchLlama }

// QKVBias reports whether the q, k and v projections add a bias (Qwen2).
func (c *Config) QKVBias() bool { return c.Arch == ArchQwen2 }

// QKNorm reports whether each query and key head is RMS-normalised, with
// a weight of HeadDim values, before RoPE (Qwen3, Gemma 3).
func (c *Config) QKNorm() bool {
	return c.Arch == ArchQwen3 || c.Arch == ArchQwen3MoE || c.Arch == ArchGemma3
}

// Fused reports whether a layer stores q, k and v as one matrix
// (attn_qkv, QKV rows then KV then KV) and gate and up as one (ffn_up of
// 2*FFN rows, gate first): Phi-3. The forward pass splits them into views
// (SplitFused).
func (c *Config) Fused() bool { return c.Arch == ArchPhi3 }

// PostNorms reports whether the attention and FFN outputs are normalised
// again before they join the residual stream, and the FFN uses GELU rather
// than SiLU (Gemma).
func (c *Config) PostNorms() bool { return c.Arch == ArchGemma2 || c.Arch == ArchGemma3 }

// Validate checks that the hyperparameters are usable and mutually
// consistent.
func (c *Config) Validate() error {
	if !slices.Contains(archs, c.Arch) {
		return errArch(c.Arch)
	}
	for _, r := range []struct {
		name     string
		v, limit int
	}{
		{"vocab", c.Vocab, maxVocab},
		{"dim", c.Dim, maxDim},
		{"ffn", c.FFN, maxFFN},
		{"layers", c.Layers, maxLayers},
		{"heads", c.Heads, maxHeads},
		{"kv heads", c.KVHeads, maxHeads},
		{"head dim", c.HeadDim, maxHeadDim},
		{"context", c.Context, maxContext},
	} {
		if r.v <= 0 || r.v > r.limit {
			return fmt.Errorf("%s %d out of range [1, %d]", r.name, r.v, r.limit)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("heads %d not divisible by kv heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head dim %d is odd; RoPE needs pairs", c.HeadDim)
	}
	if c.QDim() > maxFFN {
		return fmt.Errorf("heads*head_dim %d exceeds %d", c.QDim(), maxFFN)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("rope theta %v must be positive and finite", c.RopeTheta)
	}
	if c.RopeAttnFactor < 0 || math.IsNaN(float64(c.RopeAttnFactor)) || math.IsInf(float64(c.RopeAttnFactor), 0) {
		return fmt.Errorf("rope attention factor %v must be 0 (none) or positive and finite", c.RopeAttnFactor)
	}
	if c.RopeThetaLocal < 0 || math.IsNaN(c.RopeThetaLocal) || math.IsInf(c.RopeThetaLocal, 0) {
		return fmt.Errorf("local rope theta %v must be 0 (none) or positive and finite", c.RopeThetaLocal)
	}
	if c.RopeFreqs != nil {
		if len(c.RopeFreqs) != c.HeadDim/2 {
			return fmt.Errorf("rope freqs has %d entries, want head_dim/2 = %d", len(c.RopeFreqs), c.HeadDim/2)
		}
		for i, f := range c.RopeFreqs {
			if !(f > 0) || math.IsInf(float64(f), 0) {
				return fmt.Errorf("rope freqs[%d] = %v must be positive and finite", i, f)
			}
		}
	}
	if !(c.NormEps > 0) || c.NormEps > 1 {
		return fmt.Errorf("rms norm epsilon %v out of range (0, 1]", c.NormEps)
	}
	if !(c.AttnScale > 0) || math.IsInf(float64(c.AttnScale), 0) {
		return fmt.Errorf("attention scale %v must be positive and finite", c.AttnScale)
	}
	if !(c.EmbedScale > 0) || math.IsInf(float64(c.EmbedScale), 0) {
		return fmt.Errorf("embedding scale %v must be positive and finite", c.EmbedScale)
	}
	for _, s := range []struct {
		name string
		v    float32
	}{{"attention softcap", c.AttnSoftcap}, {"final softcap", c.FinalSoftcap}} {
		if s.v < 0 || math.IsNaN(float64(s.v)) || math.IsInf(float64(s.v), 0) {
			return fmt.Errorf("%s %v must be 0 (off) or positive and finite", s.name, s.v)
		}
	}
	if c.SlidingWindow < 0 {
		return fmt.Errorf("sliding window %d is negative", c.SlidingWindow)
	}
	return c.validateExperts()
}

// validateExperts checks the mixture-of-experts hyperparameters: none for
// a dense model, and for a MoE one a top-k within the expert count.
func (c *Config) validateExperts() error {
	if c.Experts == 0 && c.Arch == ArchQwen3MoE {
		return fmt.Errorf("architecture %s without experts", c.Arch)
	}
	if c.Experts == 0 {
		if c.ExpertsUsed != 0 || c.ExpertFFN != 0 {
			return fmt.Errorf("experts used %d and expert FFN %d set without experts", c.ExpertsUsed, c.ExpertFFN)
		}
		return nil
	}
	if c.Experts < 0 || c.Experts > maxExperts {
		return fmt.Errorf("expert count %d out of range [0, %d]", c.Experts, maxExperts)
	}
	if c.ExpertsUsed < 1 || c.ExpertsUsed > c.Experts {
		return fmt.Errorf("experts used per token %d out of range [1, %d]", c.ExpertsUsed, c.Experts)
	}
	if c.ExpertFFN < 1 || c.ExpertFFN > maxFFN {
		return fmt.Errorf("expert FFN %d out of range [1, %d]", c.ExpertFFN, maxFFN)
	}
	return nil
}

// ConfigFromGGUF reads the hyperparameters from a GGUF file's metadata using
// llama.cpp's keys, applying llama.cpp's defaults where a key is optional.
// RopeFreqs holds only linear RoPE scaling (rope.scaling.factor) here: the
// rope_freqs.weight tensor, which LoadGGUF reads, multiplies into it. The token embedding's shape is checked against the
// metadata; LoadGGUF checks every other tensor.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	if f == nil {
		return Config{}, errors.New("config from gguf: nil file")
	}
	arch, ok := f.String("general.architecture")
	if !ok {
		return Config{}, errors.New("config from gguf: missing general.architecture")
	}
	c := Config{Arch: arch, EmbedScale: 1}
	if !slices.Contains(archs, arch) {
		return Config{}, fmt.Errorf("config from gguf: %w", errArch(arch))
	}
	var err error
	reqInt := func(key string, dst *int) {
		if err != nil {
			return
		}
		v, ok := f.Uint(arch + "." + key)
		if !ok {
			err = fmt.Errorf("config from gguf: missing or non-integer %s.%s", arch, key)
			return
		}
		if v > math.MaxInt32 {
			err = fmt.Errorf("config from gguf: %s.%s = %d too large", arch, key, v)
			return
		}
		*dst = int(v)
	}
	optInt := func(key string, dst *int) (present bool) {
		if err != nil {
			return false
		}
		v, ok := f.Uint(arch + "." + key)
		if !ok {
			return false
		}
		if v > math.MaxInt32 {
			err = fmt.Errorf("config from gguf: %s.%s = %d too large", arch, key, v)
			return false
		}
		*dst = int(v)
		return true
	}
	reqInt("context_length", &c.Context)
	reqInt("embedding_length", &c.Dim)
	reqInt("block_count", &c.Layers)
	reqInt("feed_forward_length", &c.FFN)
	reqInt("attention.head_count", &c.Heads)
	if err != nil {
		return Config{}, err
	}
	c.KVHeads = c.Heads
	optInt("attention.head_count_kv", &c.KVHeads)
	if err != nil {
		return Config{}, err
	}
	if c.Heads <= 0 || c.Heads > maxHeads {
		return Config{}, fmt.Errorf("config from gguf: head count %d out of range [1, %d]", c.Heads, maxHeads)
	}

	eps, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if !ok {
		return Config{}, fmt.Errorf("config from gguf: missing %s.attention.layer_norm_rms_epsilon", arch)
	}
	c.NormEps = float32(eps)
	c.RopeTheta = 10000 // llama.cpp's default when the key is absent
	if v, ok := f.Float(arch + ".rope.freq_base"); ok {
		c.RopeTheta = v
	}
	ropeScale, err := ropeLinearScale(f, arch)
	if err != nil {
		return Config{}, fmt.Errorf("config from gguf: %w", err)
	}

	// Head dim: explicit key_length, else n_embd/n_head.
	if !optInt("attention.key_length", &c.HeadDim) {
		if err != nil {
			return Config{}, err
		}
		if c.Dim%c.Heads != 0 {
			return Config{}, fmt.Errorf("config from gguf: embedding length %d not divisible by head count %d and no %s.attention.key_length", c.Dim, c.Heads, arch)
		}
		c.HeadDim = c.Dim / c.Heads
	}
	var vlen int
	if optInt("attention.value_length", &vlen) && vlen != c.HeadDim {
		return Config{}, fmt.Errorf("config from gguf: value length %d differs from key length %d (unsupported)", vlen, c.HeadDim)
	}
	var ropeDim int
	if optInt("rope.dimension_count", &ropeDim) && ropeDim != c.HeadDim {
		return Config{}, fmt.Errorf("config from gguf: rope dimension count %d differs from head dim %d (partial rotary is unsupported)", ropeDim, c.HeadDim)
	}
	if err != nil {
		return Config{}, err
	}

	// Vocabulary: the token embedding's shape is authoritative; the
	// metadata must agree with it where present.
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return Config{}, errors.New("config from gguf: missing tensor token_embd.weight")
	}
	if len(emb.Dims) != 2 {
		return Config{}, fmt.Errorf("config from gguf: token_embd.weight has %d dims, want 2", len(emb.Dims))
	}
	if emb.Dims[0] != uint64(c.Dim) {
		return Config{}, fmt.Errorf("config from gguf: token_embd.weight row length %d differs from embedding length %d", emb.Dims[0], c.Dim)
	}
	if emb.Dims[1] == 0 || emb.Dims[1] > maxVocab {
		return Config{}, fmt.Errorf("config from gguf: token_embd.weight vocab %d out of range [1, %d]", emb.Dims[1], maxVocab)
	}
	c.Vocab = int(emb.Dims[1])
	var vocabKey int
	if optInt("vocab_size", &vocabKey) && vocabKey != c.Vocab {
		return Config{}, fmt.Errorf("config from gguf: %s.vocab_size %d differs from token_embd.weight vocab %d", arch, vocabKey, c.Vocab)
	}
	if err != nil {
		return Config{}, err
	}
	_, hasOutput := f.Tensor("output.weight")
	c.TiedOutput = !hasOutput
	if ropeScale != 1 {
		// Linear position interpolation divides every frequency by the
		// factor: the same as a divisor table of that value.
		c.RopeFreqs = make([]float32, c.HeadDim/2)
		for i := range c.RopeFreqs {
			c.RopeFreqs[i] = float32(ropeScale)
		}
	}

	if err := expertsFromGGUF(f, arch, &c); err != nil {
		return Config{}, fmt.Errorf("config from gguf: %w", err)
	}

	c.AttnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	if arch == ArchLlama {
		// Mistral's window, when a file carries it, masks every layer as
		// transformers' MistralForCausalLM does. llama.cpp's converter
		// does not write the key for Mistral (its llama graph attends to
		// the whole context), so files without it run unwindowed, as
		// there.
		optInt("attention.sliding_window", &c.SlidingWindow)
		if err != nil {
			return Config{}, err
		}
	}
	if arch == ArchPhi3 {
		// Phi-3's window, where the file names one, masks every layer as
		// transformers' Phi3ForCausalLM does (llama.cpp turns it off);
		// LongRoPE's attention factor scales the rotations.
		optInt("attention.sliding_window", &c.SlidingWindow)
		if err != nil {
			return Config{}, err
		}
		if v, ok := f.Float("phi3.rope.scaling.attn_factor"); ok {
			c.RopeAttnFactor = float32(v)
		}
	}
	if arch == ArchGemma3 {
		if err := gemma3Config(f, &c); err != nil {
			return Config{}, fmt.Errorf("config from gguf: %w", err)
		}
	}
	if arch == ArchGemma2 {
		c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
		// llama.cpp's defaults for gemma2 when the keys are absent.
		c.AttnSoftcap, c.FinalSoftcap, c.SlidingWindow = 50, 30, 4096
		if v, ok := f.Float("gemma2.attn_logit_softcapping"); ok {
			c.AttnSoftcap = float32(v)
		}
		if v, ok := f.Float("gemma2.final_logit_softcapping"); ok {
			c.FinalSoftcap = float32(v)
		}
		optInt("attention.sliding_window", &c.SlidingWindow)
		if err != nil {
			return Config{}, err
		}
		// Float also accepts an integer-typed value.
		if v, ok := f.Float("gemma2.attention.query_pre_attn_scalar"); ok {
			if !(v > 0) || math.IsInf(v, 0) {
				return Config{}, fmt.Errorf("config from gguf: gemma2.attention.query_pre_attn_scalar %v must be positive", v)
			}
			c.AttnScale = float32(1 / math.Sqrt(v))
		} else if c.Layers == 46 {
			// llama.cpp's rule for Gemma-2-27B, which scales by
			// (n_embd/n_head)^-0.5 instead of head_dim^-0.5.
			c.AttnScale = float32(1 / math.Sqrt(float64(c.Dim)/float64(c.Heads)))
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config from gguf: %w", err)
	}
	return c, nil
}

// gemma3Config sets what Gemma 3 adds to the common keys, as llama.cpp
// reads them: embeddings scaled by sqrt(dim); a window (required) on five
// layers in six, which rotate with base 10000 and no scaling while
// rope.freq_base and rope.scaling apply to the global layers; queries
// scaled by head_dim^-0.5 (query_pre_attn_scalar when a file carries it,
// (dim/heads)^-0.5 for the 62-layer 27B, whose scalar that is); a final
// soft-cap only when the file names one.
func gemma3Config(f *gguf.File, c *Config) error {
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.RopeThetaLocal = 10000
	v, ok := f.Uint("gemma3.attention.sliding_window")
	if !ok {
		return errors.New("missing or non-integer gemma3.attention.sliding_window")
	}
	if v == 0 || v > maxContext {
		return fmt.Errorf("gemma3.attention.sliding_window %d out of range [1, %d]", v, maxContext)
	}
	c.SlidingWindow = int(v)
	if s, ok := f.Float("gemma3.attention.query_pre_attn_scalar"); ok {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("gemma3.attention.query_pre_attn_scalar %v must be positive", s)
		}
		c.AttnScale = float32(1 / math.Sqrt(s))
	} else if c.Layers == 62 {
		c.AttnScale = float32(1 / math.Sqrt(float64(c.Dim/c.Heads)))
	}
	if s, ok := f.Float("gemma3.final_logit_softcapping"); ok {
		c.FinalSoftcap = float32(s)
	}
	return nil
}
