package synth

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/engine/gguf"
)

// Alignment is the GGUF data alignment synth writes (llama.cpp's default).
const Alignment = 32

// kv is one metadata entry in file order.
type kv struct {
	key   string
	value any
}

// metadata returns the GGUF key/values of a model, in the order llama.cpp's
// converter writes them: general.*, architecture hyperparameters, then the
// tokenizer.
func metadata(s Shape, typ string, v *Vocab) []kv {
	a := s.Arch
	u := func(n int) uint32 { return uint32(n) }
	kvs := []kv{
		{"general.architecture", a},
		{"general.name", fmt.Sprintf("strata synth %s %s", s.family(), s.Name)},
		{"general.file_type", FileTypes[typ]},
		{"general.alignment", uint32(Alignment)},
	}
	if typ == "q8_0" || typ == "q4_k_m" {
		kvs = append(kvs, kv{"general.quantization_version", uint32(2)})
	}
	kvs = append(kvs,
		kv{a + ".context_length", u(s.Context)},
		kv{a + ".embedding_length", u(s.Dim)},
		kv{a + ".block_count", u(s.Layers)},
		kv{a + ".feed_forward_length", u(s.FFN)},
		kv{a + ".attention.head_count", u(s.Heads)},
		kv{a + ".attention.head_count_kv", u(s.KVHeads)},
		kv{a + ".attention.layer_norm_rms_epsilon", float32(s.RMSEps)},
		kv{a + ".rope.freq_base", float32(s.RopeTheta)},
	)
	switch a {
	case "llama":
		kvs = append(kvs,
			kv{"llama.vocab_size", u(s.Vocab)},
			kv{"llama.rope.dimension_count", u(s.HeadDim)},
		)
		if s.family() == "mistral" {
			// The converter writes the head size from config.json's
			// head_dim, which Mistral's configs carry.
			kvs = append(kvs,
				kv{"llama.attention.key_length", u(s.HeadDim)},
				kv{"llama.attention.value_length", u(s.HeadDim)},
			)
			if s.SlidingWindow > 0 {
				kvs = append(kvs, kv{"llama.attention.sliding_window", u(s.SlidingWindow)})
			}
		}
	case "phi3":
		kvs = append(kvs,
			kv{"phi3.rope.scaling.original_context_length", u(s.OrigContext)},
			kv{"phi3.rope.dimension_count", u(s.HeadDim)},
			kv{"phi3.attention.sliding_window", u(s.SlidingWindow)},
			kv{"phi3.rope.scaling.attn_factor", float32(PhiAttnFactor(s))},
		)
	case "qwen2":
		// The converter writes no head size for Qwen2 (its config has no
		// head_dim): readers take dim/heads.
	case "qwen3", "qwen3moe":
		kvs = append(kvs,
			kv{a + ".attention.key_length", u(s.HeadDim)},
			kv{a + ".attention.value_length", u(s.HeadDim)},
		)
	case "gemma3":
		// As the converter writes them: no soft-caps (Gemma 3 has none)
		// and no query_pre_attn_scalar (readers use head_dim); the
		// linear scaling of the global layers' RoPE.
		kvs = append(kvs,
			kv{"gemma3.attention.key_length", u(s.HeadDim)},
			kv{"gemma3.attention.value_length", u(s.HeadDim)},
			kv{"gemma3.attention.sliding_window", u(s.SlidingWindow)},
		)
		if s.RopeLinear > 0 {
			kvs = append(kvs,
				kv{"gemma3.rope.scaling.type", "linear"},
				kv{"gemma3.rope.scaling.factor", float32(s.RopeLinear)},
			)
		}
	default:
		kvs = append(kvs,
			kv{"gemma2.attention.key_length", u(s.HeadDim)},
			kv{"gemma2.attention.value_length", u(s.HeadDim)},
			kv{"gemma2.attn_logit_softcapping", float32(s.AttnSoftcap)},
			kv{"gemma2.final_logit_softcapping", float32(s.FinalSoftcap)},
			kv{"gemma2.attention.sliding_window", u(s.SlidingWindow)},
			kv{"gemma2.attention.query_pre_attn_scalar", u(int(s.QueryPreAttnScalar))},
		)
	}
	if s.Experts > 0 {
		kvs = append(kvs,
			kv{a + ".expert_count", u(s.Experts)},
			kv{a + ".expert_used_count", u(s.ExpertsUsed)},
		)
		if s.ExpertFFN > 0 {
			kvs = append(kvs, kv{a + ".expert_feed_forward_length", u(s.ExpertFFN)})
		}
	}
	kvs = append(kvs, kv{"tokenizer.ggml.model", v.Model})
	if v.Pre != "" {
		kvs = append(kvs, kv{"tokenizer.ggml.pre", v.Pre})
	}
	kvs = append(kvs,
		kv{"tokenizer.ggml.tokens", gguf.Array{Type: gguf.TypeString, Values: v.Tokens}},
		kv{"tokenizer.ggml.token_type", gguf.Array{Type: gguf.TypeInt32, Values: v.Types}},
	)
	if v.Scores != nil {
		kvs = append(kvs, kv{"tokenizer.ggml.scores", gguf.Array{Type: gguf.TypeFloat32, Values: v.Scores}})
	}
	if v.Merges != nil {
		kvs = append(kvs, kv{"tokenizer.ggml.merges", gguf.Array{Type: gguf.TypeString, Values: v.Merges}})
	}
	kvs = append(kvs,
		kv{"tokenizer.ggml.bos_token_id", u(v.BOS)},
		kv{"tokenizer.ggml.eos_token_id", u(v.EOS)},
	)
	if v.UNK >= 0 {
		kvs = append(kvs, kv{"tokenizer.ggml.unknown_token_id", u(v.UNK)})
	}
	if v.PAD >= 0 {
		kvs = append(kvs, kv{"tokenizer.ggml.padding_token_id", u(v.PAD)})
	}
	kvs = append(kvs,
		kv{"tokenizer.ggml.add_bos_token", !v.NoBOS},
		kv{"tokenizer.ggml.add_eos_token", false},
	)
	if v.Model == "llama" {
		kvs = append(kvs, kv{"tokenizer.ggml.add_space_prefix", v.AddSpacePrefix})
	}
	kvs = append(kvs, kv{"tokenizer.chat_template", v.ChatTemplate})
	return kvs
}

// pyFloat renders x as a JSON number that Python parses as a float
// ("8.0", not "8"), as transformers writes config values.
func pyFloat(x float64) json.Number {
	s := strconv.FormatFloat(x, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return json.Number(s)
}

// HFConfig returns the transformers config.json of shape s with the
// tokenizer's special ids, for float32 weights.
func HFConfig(s Shape, v *Vocab) map[string]any {
	c := map[string]any{
		"hidden_size":             s.Dim,
		"intermediate_size":       s.FFN,
		"num_hidden_layers":       s.Layers,
		"num_attention_heads":     s.Heads,
		"num_key_value_heads":     s.KVHeads,
		"head_dim":                s.HeadDim,
		"rms_norm_eps":            pyFloat(s.RMSEps),
		"rope_theta":              pyFloat(s.RopeTheta),
		"max_position_embeddings": s.Context,
		"vocab_size":              s.Vocab,
		"attention_bias":          false,
		"attention_dropout":       pyFloat(0),
		"initializer_range":       pyFloat(0.02),
		"torch_dtype":             "float32",
		"use_cache":               true,
		"bos_token_id":            v.BOS,
		"eos_token_id":            v.EOS,
	}
	switch s.family() {
	case "mistral":
		c["architectures"] = []string{"MistralForCausalLM"}
		c["model_type"] = "mistral"
		c["hidden_act"] = "silu"
		c["tie_word_embeddings"] = false
		delete(c, "attention_bias")
		c["sliding_window"] = nil
		if s.SlidingWindow > 0 {
			c["sliding_window"] = s.SlidingWindow
		}
	case "llama":
		c["architectures"] = []string{"LlamaForCausalLM"}
		c["model_type"] = "llama"
		c["hidden_act"] = "silu"
		c["mlp_bias"] = false
		c["tie_word_embeddings"] = false
		c["pretraining_tp"] = 1
		if s.Experts > 0 {
			c["architectures"] = []string{"MixtralForCausalLM"}
			c["model_type"] = "mixtral"
			c["num_local_experts"] = s.Experts
			c["num_experts_per_tok"] = s.ExpertsUsed
			c["router_aux_loss_coef"] = pyFloat(0.02)
			c["output_router_logits"] = false
			c["sliding_window"] = nil
			delete(c, "mlp_bias")
			delete(c, "pretraining_tp")
			delete(c, "attention_bias")
		}
		if r := s.Rope; r != nil {
			c["rope_scaling"] = map[string]any{
				"rope_type":                        "llama3",
				"factor":                           pyFloat(r.Factor),
				"low_freq_factor":                  pyFloat(r.LowFreqFactor),
				"high_freq_factor":                 pyFloat(r.HighFreqFactor),
				"original_max_position_embeddings": r.OrigContext,
			}
		}
	case "qwen2", "qwen3", "qwen3moe":
		switch s.Arch {
		case "qwen2":
			// Qwen2's q/k/v biases are not a config option.
			delete(c, "attention_bias")
			c["architectures"] = []string{"Qwen2ForCausalLM"}
		case "qwen3":
			c["architectures"] = []string{"Qwen3ForCausalLM"}
		}
		c["model_type"] = s.Arch
		if s.Arch == "qwen3moe" {
			c["architectures"] = []string{"Qwen3MoeForCausalLM"}
			c["model_type"] = "qwen3_moe"
			c["num_experts"] = s.Experts
			c["num_experts_per_tok"] = s.ExpertsUsed
			c["moe_intermediate_size"] = s.ExpertFFN
			c["norm_topk_prob"] = true
			c["decoder_sparse_step"] = 1
			c["mlp_only_layers"] = []int{}
			c["router_aux_loss_coef"] = pyFloat(0.001)
			c["output_router_logits"] = false
		}
		c["hidden_act"] = "silu"
		c["tie_word_embeddings"] = s.Tied
		c["use_sliding_window"] = false
		c["sliding_window"] = nil
		c["max_window_layers"] = s.Layers
		c["rope_scaling"] = nil
	case "phi3":
		delete(c, "head_dim") // Phi3Config derives it from hidden_size
		c["architectures"] = []string{"Phi3ForCausalLM"}
		c["model_type"] = "phi3"
		c["hidden_act"] = "silu"
		c["tie_word_embeddings"] = false
		c["original_max_position_embeddings"] = s.OrigContext
		c["partial_rotary_factor"] = pyFloat(1)
		c["resid_pdrop"] = pyFloat(0)
		c["embd_pdrop"] = pyFloat(0)
		c["sliding_window"] = nil
		if s.SlidingWindow > 0 {
			c["sliding_window"] = s.SlidingWindow
		}
		long, short := PhiRopeFactors(s)
		lf, sf := make([]json.Number, len(long)), make([]json.Number, len(short))
		for i := range long {
			lf[i], sf[i] = pyFloat(float64(long[i])), pyFloat(float64(short[i]))
		}
		c["rope_scaling"] = map[string]any{"type": "longrope", "rope_type": "longrope", "long_factor": lf, "short_factor": sf}
		// transformers 5's form of the same.
		c["rope_parameters"] = map[string]any{"rope_type": "longrope", "rope_theta": pyFloat(s.RopeTheta),
			"long_factor": lf, "short_factor": sf, "original_max_position_embeddings": s.OrigContext}
		if v.PAD >= 0 {
			c["pad_token_id"] = v.PAD
		}
	case "gemma3":
		// The text-only Gemma3ForCausalLM, as gemma-3-1b ships.
		c["architectures"] = []string{"Gemma3ForCausalLM"}
		c["model_type"] = "gemma3_text"
		c["hidden_activation"] = "gelu_pytorch_tanh"
		c["tie_word_embeddings"] = true
		c["query_pre_attn_scalar"] = int(s.QueryPreAttnScalar)
		c["attn_logit_softcapping"] = nil
		c["final_logit_softcapping"] = nil
		c["sliding_window"] = s.SlidingWindow
		c["sliding_window_pattern"] = 6
		types := make([]string, s.Layers)
		for i := range types {
			types[i] = "sliding_attention"
			if (i+1)%6 == 0 {
				types[i] = "full_attention"
			}
		}
		c["layer_types"] = types
		c["rope_local_base_freq"] = pyFloat(s.RopeLocalTheta)
		c["rope_scaling"] = nil
		global := map[string]any{"rope_type": "default", "rope_theta": pyFloat(s.RopeTheta)}
		if s.RopeLinear > 0 {
			c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": pyFloat(s.RopeLinear)}
			global = map[string]any{"rope_type": "linear", "factor": pyFloat(s.RopeLinear), "rope_theta": pyFloat(s.RopeTheta)}
		}
		// The same RoPE in transformers 5's form, per layer type; the
		// keys above are the form of 4.x, which 5 also reads.
		c["rope_parameters"] = map[string]any{
			"full_attention":    global,
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": pyFloat(s.RopeLocalTheta)},
		}
		c["cache_implementation"] = "hybrid"
		if v.PAD >= 0 {
			c["pad_token_id"] = v.PAD
		}
	case "gemma2":
		c["architectures"] = []string{"Gemma2ForCausalLM"}
		c["model_type"] = "gemma2"
		c["hidden_activation"] = "gelu_pytorch_tanh"
		c["hidden_act"] = "gelu_pytorch_tanh"
		c["tie_word_embeddings"] = true
		c["query_pre_attn_scalar"] = int(s.QueryPreAttnScalar)
		c["attn_logit_softcapping"] = pyFloat(s.AttnSoftcap)
		c["final_logit_softcapping"] = pyFloat(s.FinalSoftcap)
		c["sliding_window"] = s.SlidingWindow
		c["cache_implementation"] = "hybrid"
		if v.PAD >= 0 {
			c["pad_token_id"] = v.PAD
		}
	}
	return c
}
