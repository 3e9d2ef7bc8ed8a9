package synth

import (
	"fmt"
	"math"
	"sort"
)

// RopeScaling holds Llama 3's "llama3" RoPE frequency scaling parameters.
type RopeScaling struct {
	Factor         float64
	LowFreqFactor  float64
	HighFreqFactor float64
	// OrigContext is original_max_position_embeddings.
	OrigContext int
}

// Shape is one entry of strata's synthetic model catalogue: every
// hyperparameter a loader or the engine reads.
type Shape struct {
	// Arch is the GGUF architecture (general.architecture): "llama",
	// "gemma2", "qwen2" or "qwen3".
	Arch string
	// Family is the catalogue key when it differs from Arch: "mistral",
	// whose GGUF files are llama's (llama.cpp converts MistralForCausalLM
	// as llama) while its Hugging Face twin is MistralForCausalLM.
	Family string
	// Name is the catalogue name: "tiny", "8b" or "70b".
	Name string
	// Real names the public model whose shape this copies, if any.
	Real string

	Vocab   int
	Dim     int // n_embd, hidden_size
	FFN     int // feed_forward_length, intermediate_size
	Layers  int
	Heads   int
	KVHeads int
	HeadDim int

	RopeTheta float64
	// Rope is the llama3 frequency scaling (llama only, nil for gemma2).
	Rope    *RopeScaling
	Context int
	RMSEps  float64
	// Tied reports whether the output projection reuses token_embd.
	Tied bool

	// Gemma 2 only.
	QueryPreAttnScalar float64
	AttnSoftcap        float64
	FinalSoftcap       float64
	// SlidingWindow is Gemma's window of its sliding layers, or
	// Mistral's of every layer; 0 = none.
	SlidingWindow int

	// Gemma 3 only: the RoPE base of the sliding layers
	// (rope_local_base_freq), and the linear RoPE factor of the global
	// ones (0 = none).
	RopeLocalTheta float64
	RopeLinear     float64

	// Phi-3 only: original_max_position_embeddings; LongRoPE's long
	// factors apply since Context exceeds it (PhiRopeFactors).
	OrigContext int

	// Mixture of experts (Mixtral: llama with expert FFNs; Qwen3-MoE):
	// Experts per layer, ExpertsUsed per token; each expert's hidden width
	// is ExpertFFN (0: FFN, as Mixtral's).
	Experts, ExpertsUsed, ExpertFFN int
}

// qwenEps is Qwen 2.5's and Qwen 3's rms_norm_eps.
const qwenEps = 1e-6

var llama3Rope = RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigContext: 8192}

// Shapes is the catalogue, keyed by arch then shape name. Callers must treat
// it as read-only.
var Shapes = map[string]map[string]Shape{
	"llama": {
		"tiny": {
			Arch: "llama", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
			RopeTheta: 500000,
			// original_max_position_embeddings is tiny so that the
			// scaling changes some frequencies at test sequence lengths.
			Rope:    &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigContext: 32},
			Context: 256, RMSEps: 1e-5,
		},
		"8b": {
			Arch: "llama", Name: "8b", Real: "Llama-3.1-8B",
			Vocab: 128256, Dim: 4096, FFN: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128,
			RopeTheta: 500000, Rope: &llama3Rope, Context: 131072, RMSEps: 1e-5,
		},
		"70b": {
			Arch: "llama", Name: "70b", Real: "Llama-3.1-70B",
			Vocab: 128256, Dim: 8192, FFN: 28672, Layers: 80, Heads: 64, KVHeads: 8, HeadDim: 128,
			RopeTheta: 500000, Rope: &llama3Rope, Context: 131072, RMSEps: 1e-5,
		},
	},
	// Mixtral is llama.cpp's "llama" architecture with expert FFNs.
	"mixtral": {
		"tiny": {
			Arch: "llama", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
			RopeTheta: 1e6, Context: 256, RMSEps: 1e-5, Experts: 8, ExpertsUsed: 2,
		},
		// tiny with experts four blocks wide, as Mixtral's are many: a
		// pick can then be shared by its FFN width (engine/gpu's split
		// picks), where tiny's one block cannot be.
		"tiny-wide": {
			Arch: "llama", Name: "tiny-wide",
			Vocab: 512, Dim: 256, FFN: 1024, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
			RopeTheta: 1e6, Context: 256, RMSEps: 1e-5, Experts: 8, ExpertsUsed: 2,
		},
		"8x7b": {
			Arch: "llama", Name: "8x7b", Real: "Mixtral-8x7B-v0.1",
			Vocab: 32000, Dim: 4096, FFN: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128,
			RopeTheta: 1e6, Context: 32768, RMSEps: 1e-5, Experts: 8, ExpertsUsed: 2,
		},
	},
	"gemma2": {
		"tiny": {
			Arch: "gemma2", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 64,
			RopeTheta: 10000, Context: 256, RMSEps: 1e-6, Tied: true,
			QueryPreAttnScalar: 64, AttnSoftcap: 50, FinalSoftcap: 30,
			// Smaller than test sequences so the sliding mask matters.
			SlidingWindow: 8,
		},
		"8b": {
			Arch: "gemma2", Name: "8b", Real: "gemma-2-9b",
			Vocab: 256000, Dim: 3584, FFN: 14336, Layers: 42, Heads: 16, KVHeads: 8, HeadDim: 256,
			RopeTheta: 10000, Context: 8192, RMSEps: 1e-6, Tied: true,
			QueryPreAttnScalar: 256, AttnSoftcap: 50, FinalSoftcap: 30, SlidingWindow: 4096,
		},
		"70b": {
			Arch: "gemma2", Name: "70b", Real: "gemma-2-27b",
			Vocab: 256000, Dim: 4608, FFN: 36864, Layers: 46, Heads: 32, KVHeads: 16, HeadDim: 128,
			RopeTheta: 10000, Context: 8192, RMSEps: 1e-6, Tied: true,
			QueryPreAttnScalar: 144, AttnSoftcap: 50, FinalSoftcap: 30, SlidingWindow: 4096,
		},
	},
}

func init() {
	Shapes["qwen2"] = map[string]Shape{
		// Tied, as the small Qwen 2.5 checkpoints are (0.5B to 3B).
		"tiny": {
			Arch: "qwen2", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
			RopeTheta: 1000000, Context: 256, RMSEps: qwenEps, Tied: true,
		},
		"8b": {
			Arch: "qwen2", Name: "8b", Real: "Qwen2.5-7B",
			Vocab: 152064, Dim: 3584, FFN: 18944, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128,
			RopeTheta: 1000000, Context: 32768, RMSEps: qwenEps,
		},
	}
	Shapes["qwen3"] = map[string]Shape{
		// head_dim 128 is not dim/heads (64), as in Qwen3-0.6B and -4B,
		// so the q/k width differs from the residual width; untied, as
		// Qwen3-8B is.
		"tiny": {
			Arch: "qwen3", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 128,
			RopeTheta: 1000000, Context: 256, RMSEps: qwenEps,
		},
		"8b": {
			Arch: "qwen3", Name: "8b", Real: "Qwen3-8B",
			Vocab: 151936, Dim: 4096, FFN: 12288, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128,
			RopeTheta: 1000000, Context: 40960, RMSEps: qwenEps,
		},
	}
}

func init() {
	// Qwen3's attention with 128 experts a layer, of which a token takes
	// 8; FFN is the dense intermediate_size the files record though no
	// layer uses it.
	Shapes["qwen3moe"] = map[string]Shape{
		"tiny": {
			Arch: "qwen3moe", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 128,
			RopeTheta: 1000000, Context: 256, RMSEps: qwenEps, Experts: 8, ExpertsUsed: 4, ExpertFFN: 256,
		},
		// tiny with the real models' routing: 128 experts, 8 picked a
		// token, so the goldens hold a top-8 among many and its weights'
		// renormalisation where tiny's 4 of 8 hardly choose; narrow, so
		// the 768 expert matrices stay small in f32.
		"tiny-128": {
			Arch: "qwen3moe", Name: "tiny-128",
			Vocab: 512, Dim: 128, FFN: 256, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 64,
			RopeTheta: 1000000, Context: 256, RMSEps: qwenEps, Experts: 128, ExpertsUsed: 8, ExpertFFN: 64,
		},
		"30b-a3b": {
			Arch: "qwen3moe", Name: "30b-a3b", Real: "Qwen3-30B-A3B",
			Vocab: 151936, Dim: 2048, FFN: 6144, Layers: 48, Heads: 32, KVHeads: 4, HeadDim: 128,
			RopeTheta: 1000000, Context: 40960, RMSEps: qwenEps, Experts: 128, ExpertsUsed: 8, ExpertFFN: 768,
		},
		"235b-a22b": {
			Arch: "qwen3moe", Name: "235b-a22b", Real: "Qwen3-235B-A22B",
			Vocab: 151936, Dim: 4096, FFN: 12288, Layers: 94, Heads: 64, KVHeads: 4, HeadDim: 128,
			RopeTheta: 1000000, Context: 40960, RMSEps: qwenEps, Experts: 128, ExpertsUsed: 8, ExpertFFN: 1536,
		},
	}
	Shapes["mistral"] = map[string]Shape{
		// Nemo's layout: head_dim 128 is not dim/heads (64). The window
		// (8, shorter than test sequences) is Mistral 7B v0.1's kind.
		"tiny": {
			Arch: "llama", Family: "mistral", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 128,
			RopeTheta: 1000000, Context: 256, RMSEps: 1e-5, SlidingWindow: 8,
		},
		"8b": {
			Arch: "llama", Family: "mistral", Name: "8b", Real: "Mistral-7B-v0.3",
			Vocab: 32768, Dim: 4096, FFN: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128,
			RopeTheta: 1000000, Context: 32768, RMSEps: 1e-5,
		},
		"12b": {
			Arch: "llama", Family: "mistral", Name: "12b", Real: "Mistral-Nemo-Base-2407",
			Vocab: 131072, Dim: 5120, FFN: 14336, Layers: 40, Heads: 32, KVHeads: 8, HeadDim: 128,
			RopeTheta: 1000000, Context: 131072, RMSEps: 1e-5,
		},
	}
}

func init() {
	Shapes["gemma3"] = map[string]Shape{
		// Six layers: five sliding (window 8, shorter than test
		// sequences) and a global one, with Gemma 3's two RoPE bases and
		// the 4B-and-up linear scaling of the global one; head_dim 128 is
		// not dim/heads (64), as in every Gemma 3.
		"tiny": {
			Arch: "gemma3", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 6, Heads: 4, KVHeads: 2, HeadDim: 128,
			RopeTheta: 1000000, RopeLocalTheta: 10000, RopeLinear: 8, Context: 256, RMSEps: 1e-6, Tied: true,
			QueryPreAttnScalar: 128, SlidingWindow: 8,
		},
		"4b": {
			Arch: "gemma3", Name: "4b", Real: "gemma-3-4b (text)",
			Vocab: 262208, Dim: 2560, FFN: 10240, Layers: 34, Heads: 8, KVHeads: 4, HeadDim: 256,
			RopeTheta: 1000000, RopeLocalTheta: 10000, RopeLinear: 8, Context: 131072, RMSEps: 1e-6, Tied: true,
			QueryPreAttnScalar: 256, SlidingWindow: 1024,
		},
		"12b": {
			Arch: "gemma3", Name: "12b", Real: "gemma-3-12b (text)",
			Vocab: 262208, Dim: 3840, FFN: 15360, Layers: 48, Heads: 16, KVHeads: 8, HeadDim: 256,
			RopeTheta: 1000000, RopeLocalTheta: 10000, RopeLinear: 8, Context: 131072, RMSEps: 1e-6, Tied: true,
			QueryPreAttnScalar: 256, SlidingWindow: 1024,
		},
	}
}

func init() {
	Shapes["phi3"] = map[string]Shape{
		// Phi-3-mini-128k's kind: LongRoPE with the long factors (the
		// context, 256, is past the original 32, which the test prompt
		// itself exceeds) and their attention factor; no window.
		"tiny": {
			Arch: "phi3", Name: "tiny",
			Vocab: 512, Dim: 256, FFN: 512, Layers: 2, Heads: 4, KVHeads: 4, HeadDim: 64,
			RopeTheta: 10000, Context: 256, OrigContext: 32, RMSEps: 1e-5,
		},
		"4b": {
			Arch: "phi3", Name: "4b", Real: "Phi-3-mini-128k-instruct",
			Vocab: 32064, Dim: 3072, FFN: 8192, Layers: 32, Heads: 32, KVHeads: 32, HeadDim: 96,
			RopeTheta: 10000, Context: 131072, OrigContext: 4096, RMSEps: 1e-5,
		},
		"14b": {
			Arch: "phi3", Name: "14b", Real: "Phi-3-medium-128k-instruct",
			Vocab: 32064, Dim: 5120, FFN: 17920, Layers: 40, Heads: 40, KVHeads: 10, HeadDim: 128,
			RopeTheta: 10000, Context: 131072, OrigContext: 4096, RMSEps: 1e-5,
		},
	}
}

// PhiRopeFactors returns a Phi-3 shape's LongRoPE divisors, head_dim/2 of
// each: short ones near 1 and long ones growing to 8 towards the low
// frequencies, as trained ones do (made up: synthetic weights have no
// trained context to fit).
func PhiRopeFactors(s Shape) (long, short []float32) {
	n := s.HeadDim / 2
	long, short = make([]float32, n), make([]float32, n)
	for i := range long {
		x := float64(i) / float64(max(n-1, 1))
		long[i] = float32(1 + 7*x*x)
		short[i] = float32(1 + 0.25*x)
	}
	return long, short
}

// PhiAttnFactor is the LongRoPE attention factor llama.cpp's converter
// stores and transformers applies: sqrt(1 + ln(s)/ln(orig)) for s =
// context/orig above 1, else 1.
func PhiAttnFactor(s Shape) float64 {
	scale := float64(s.Context) / float64(s.OrigContext)
	if scale <= 1 {
		return 1
	}
	return math.Sqrt(1 + math.Log(scale)/math.Log(float64(s.OrigContext)))
}

// gemma reports whether s is a Gemma (gemma2 or gemma3): tied, with
// post-attention and post-FFN norms and norms stored in Hugging Face as
// w for a scale of 1 + w.
func (s Shape) gemma() bool { return s.Arch == "gemma2" || s.Arch == "gemma3" }

// family is the catalogue key of s.
func (s Shape) family() string {
	if s.Family != "" {
		return s.Family
	}
	return s.Arch
}

// LookupShape returns the catalogue entry for arch and shape.
func LookupShape(arch, shape string) (Shape, error) {
	byName, ok := Shapes[arch]
	if !ok {
		return Shape{}, fmt.Errorf("synth: unknown architecture %q (want one of %v)", arch, sortedKeys(Shapes))
	}
	s, ok := byName[shape]
	if !ok {
		return Shape{}, fmt.Errorf("synth: unknown %s shape %q (want one of %v)", arch, shape, sortedKeys(byName))
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
