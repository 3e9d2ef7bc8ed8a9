package synth

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/safetensors"
)

var allTypes = []string{"f32", "f16", "bf16", "q8_0", "q4_k_m"}

type wantTensor struct {
	name string
	dims []uint64
}

// wantTinyLayout spells out, independently of Layout, the tensors of the
// tiny shapes (dims from conv.txt's catalogue).
func wantTinyLayout(arch string) []wantTensor {
	var out []wantTensor
	add := func(name string, dims ...uint64) { out = append(out, wantTensor{name, dims}) }
	if arch == "llama" {
		add("rope_freqs.weight", 32)
		add("token_embd.weight", 256, 512)
		for i := 0; i < 2; i++ {
			b := fmt.Sprintf("blk.%d.", i)
			add(b+"attn_norm.weight", 256)
			add(b+"attn_q.weight", 256, 256)
			add(b+"attn_k.weight", 256, 128)
			add(b+"attn_v.weight", 256, 128)
			add(b+"attn_output.weight", 256, 256)
			add(b+"ffn_norm.weight", 256)
			add(b+"ffn_gate.weight", 256, 512)
			add(b+"ffn_up.weight", 256, 512)
			add(b+"ffn_down.weight", 512, 256)
		}
		add("output_norm.weight", 256)
		add("output.weight", 256, 512)
		return out
	}
	if arch == "phi3" {
		add("rope_factors_long.weight", 32)
		add("rope_factors_short.weight", 32)
		add("token_embd.weight", 256, 512)
		for i := 0; i < 2; i++ {
			b := fmt.Sprintf("blk.%d.", i)
			add(b+"attn_norm.weight", 256)
			add(b+"attn_qkv.weight", 256, 768)
			add(b+"attn_output.weight", 256, 256)
			add(b+"ffn_norm.weight", 256)
			add(b+"ffn_up.weight", 256, 1024)
			add(b+"ffn_down.weight", 512, 256)
		}
		add("output_norm.weight", 256)
		add("output.weight", 256, 512)
		return out
	}
	if arch == "gemma3" {
		add("token_embd.weight", 256, 512)
		for i := 0; i < 6; i++ {
			b := fmt.Sprintf("blk.%d.", i)
			add(b+"attn_norm.weight", 256)
			add(b+"attn_q.weight", 256, 512)
			add(b+"attn_k.weight", 256, 256)
			add(b+"attn_v.weight", 256, 256)
			add(b+"attn_q_norm.weight", 128)
			add(b+"attn_k_norm.weight", 128)
			add(b+"attn_output.weight", 512, 256)
			add(b+"post_attention_norm.weight", 256)
			add(b+"ffn_norm.weight", 256)
			add(b+"ffn_gate.weight", 256, 512)
			add(b+"ffn_up.weight", 256, 512)
			add(b+"ffn_down.weight", 512, 256)
			add(b+"post_ffw_norm.weight", 256)
		}
		add("output_norm.weight", 256)
		return out
	}
	if arch == "mistral" {
		add("token_embd.weight", 256, 512)
		for i := 0; i < 2; i++ {
			b := fmt.Sprintf("blk.%d.", i)
			add(b+"attn_norm.weight", 256)
			add(b+"attn_q.weight", 256, 512)
			add(b+"attn_k.weight", 256, 256)
			add(b+"attn_v.weight", 256, 256)
			add(b+"attn_output.weight", 512, 256)
			add(b+"ffn_norm.weight", 256)
			add(b+"ffn_gate.weight", 256, 512)
			add(b+"ffn_up.weight", 256, 512)
			add(b+"ffn_down.weight", 512, 256)
		}
		add("output_norm.weight", 256)
		add("output.weight", 256, 512)
		return out
	}
	if arch == "qwen2" || arch == "qwen3" {
		q, kv := uint64(256), uint64(128) // qwen2: head_dim 64
		if arch == "qwen3" {
			q, kv = 512, 256 // head_dim 128
		}
		add("token_embd.weight", 256, 512)
		for i := 0; i < 2; i++ {
			b := fmt.Sprintf("blk.%d.", i)
			add(b+"attn_norm.weight", 256)
			add(b+"attn_q.weight", 256, q)
			add(b+"attn_k.weight", 256, kv)
			add(b+"attn_v.weight", 256, kv)
			if arch == "qwen2" {
				add(b+"attn_q.bias", q)
				add(b+"attn_k.bias", kv)
				add(b+"attn_v.bias", kv)
			} else {
				add(b+"attn_q_norm.weight", 128)
				add(b+"attn_k_norm.weight", 128)
			}
			add(b+"attn_output.weight", q, 256)
			add(b+"ffn_norm.weight", 256)
			add(b+"ffn_gate.weight", 256, 512)
			add(b+"ffn_up.weight", 256, 512)
			add(b+"ffn_down.weight", 512, 256)
		}
		add("output_norm.weight", 256)
		if arch == "qwen3" {
			add("output.weight", 256, 512)
		}
		return out
	}
	add("token_embd.weight", 256, 512)
	for i := 0; i < 4; i++ {
		b := fmt.Sprintf("blk.%d.", i)
		add(b+"attn_norm.weight", 256)
		add(b+"attn_q.weight", 256, 256)
		add(b+"attn_k.weight", 256, 128)
		add(b+"attn_v.weight", 256, 128)
		add(b+"attn_output.weight", 256, 256)
		add(b+"post_attention_norm.weight", 256)
		add(b+"ffn_norm.weight", 256)
		add(b+"ffn_gate.weight", 256, 512)
		add(b+"ffn_up.weight", 256, 512)
		add(b+"ffn_down.weight", 512, 256)
		add(b+"post_ffw_norm.weight", 256)
	}
	add("output_norm.weight", 256)
	return out
}

// wantType is the expected storage type of a tiny-shape tensor.
func wantType(arch, typ, name string) quant.Type {
	if strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".bias") || strings.HasPrefix(name, "rope_") {
		return quant.F32
	}
	if typ == "q4_k_m" && strings.HasSuffix(name, "attn_qkv.weight") {
		return quant.Q5_K
	}
	switch typ {
	case "f32":
		return quant.F32
	case "f16":
		return quant.F16
	case "bf16":
		return quant.BF16
	case "q8_0":
		return quant.Q8_0
	}
	q6 := map[string][]string{
		// 2 layers: use_more_bits is true for layer 1 only.
		"llama": {"output.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"},
		// 4 layers: layers 2 ((2-0)%3 == 2) and 3 (>= 7*4/8); tied
		// token_embd is the output.
		"gemma2": {"token_embd.weight", "blk.2.attn_v.weight", "blk.2.ffn_down.weight", "blk.3.attn_v.weight", "blk.3.ffn_down.weight"},
		// qwen2 is tied, qwen3 is not.
		"qwen2":   {"token_embd.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"},
		"qwen3":   {"output.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"},
		"mistral": {"output.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"},
		// 6 layers: n/8 = 0, so layers 2 and 5 ((i-0)%3 == 2; 5 is also
		// >= 7*6/8); tied token_embd is the output.
		"phi3":   {"output.weight", "blk.1.ffn_down.weight"},
		"gemma3": {"token_embd.weight", "blk.2.attn_v.weight", "blk.2.ffn_down.weight", "blk.5.attn_v.weight", "blk.5.ffn_down.weight"},
	}
	if slices.Contains(q6[arch], name) {
		return quant.Q6_K
	}
	return quant.Q4_K
}

func writeTiny(t *testing.T, arch, typ string, seed uint64, hf bool) (string, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gguf")
	opts := Options{Arch: arch, Shape: "tiny", Type: typ, Seed: seed}
	if hf {
		opts.HFDir = filepath.Join(dir, "hf")
		opts.HFForce = true
	}
	if err := Write(path, opts); err != nil {
		t.Fatalf("Write(%+v): %v", opts, err)
	}
	return path, opts.HFDir
}

func TestTinyGGUFLayout(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"llama", "gemma2", "gemma3", "mistral", "phi3", "qwen2", "qwen3"} {
		for _, typ := range allTypes {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				path, _ := writeTiny(t, arch, typ, 1, false)
				m, err := gguf.Map(path)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				want := wantTinyLayout(arch)
				if len(m.Tensors) != len(want) {
					t.Fatalf("%d tensors, want %d", len(m.Tensors), len(want))
				}
				for i, w := range want {
					ti := m.Tensors[i]
					if ti.Name != w.name || !slices.Equal(ti.Dims, w.dims) || ti.Type != wantType(arch, typ, w.name) {
						t.Errorf("tensor %d: %s %v %v, want %s %v %v", i, ti.Name, ti.Type, ti.Dims, w.name, wantType(arch, typ, w.name), w.dims)
					}
					if ti.Offset%Alignment != 0 {
						t.Errorf("%s at offset %d, not %d-aligned", ti.Name, ti.Offset, Alignment)
					}
				}
				checkMetadata(t, m.File, arch, typ)
			})
		}
	}
}

func checkMetadata(t *testing.T, f *gguf.File, arch, typ string) {
	t.Helper()
	switch arch {
	case "qwen2", "qwen3":
		checkQwenMetadata(t, f, arch, typ)
		return
	case "mistral":
		checkMistralMetadata(t, f)
		return
	case "gemma3":
		checkGemma3Metadata(t, f)
		return
	case "phi3":
		checkPhi3Metadata(t, f)
		return
	}
	wantU := map[string]uint64{
		"general.file_type":                      map[string]uint64{"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_k_m": 15}[typ],
		"general.alignment":                      32,
		arch + ".context_length":                 256,
		arch + ".embedding_length":               256,
		arch + ".feed_forward_length":            512,
		arch + ".attention.head_count":           4,
		arch + ".attention.head_count_kv":        2,
		"tokenizer.ggml.bos_token_id":            map[string]uint64{"llama": 496, "gemma2": 2}[arch],
		"tokenizer.ggml.eos_token_id":            map[string]uint64{"llama": 505, "gemma2": 1}[arch],
		arch + ".block_count":                    map[string]uint64{"llama": 2, "gemma2": 4}[arch],
		"gemma2.attention.sliding_window":        8,
		"gemma2.attention.key_length":            64,
		"gemma2.attention.value_length":          64,
		"tokenizer.ggml.padding_token_id":        0,
		"tokenizer.ggml.unknown_token_id":        3,
		"llama.vocab_size":                       512,
		"llama.rope.dimension_count":             64,
		"gemma2.attention.query_pre_attn_scalar": 64,
	}
	for k, want := range wantU {
		if strings.HasPrefix(k, "gemma2.") && arch != "gemma2" || strings.HasPrefix(k, "llama.") && arch != "llama" ||
			(strings.Contains(k, "padding") || strings.Contains(k, "unknown")) && arch != "gemma2" {
			if _, ok := f.Lookup(k); ok {
				t.Errorf("%s present in a %s file", k, arch)
			}
			continue
		}
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	wantF := map[string]float64{
		arch + ".attention.layer_norm_rms_epsilon": map[string]float64{"llama": 1e-5, "gemma2": 1e-6}[arch],
		arch + ".rope.freq_base":                   map[string]float64{"llama": 500000, "gemma2": 10000}[arch],
	}
	if arch == "gemma2" {
		wantF["gemma2.attn_logit_softcapping"] = 50
		wantF["gemma2.final_logit_softcapping"] = 30
	}
	for k, want := range wantF {
		if got, ok := f.Float(k); !ok || math.Abs(got-want) > want*1e-6 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if got, _ := f.String("general.architecture"); got != arch {
		t.Errorf("general.architecture = %q", got)
	}
	wantModel := map[string]string{"llama": "gpt2", "gemma2": "llama"}[arch]
	if got, _ := f.String("tokenizer.ggml.model"); got != wantModel {
		t.Errorf("tokenizer.ggml.model = %q, want %q", got, wantModel)
	}
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	types, ok2 := f.Int32s("tokenizer.ggml.token_type")
	if !ok || !ok2 || len(toks) != 512 || len(types) != 512 {
		t.Fatalf("tokens %d (%v), types %d (%v), want 512", len(toks), ok, len(types), ok2)
	}
	if arch == "llama" {
		if toks[496] != "<|begin_of_text|>" || toks[505] != "<|eot_id|>" || types[496] != TokenControl {
			t.Errorf("llama specials: %q %q type %d", toks[496], toks[505], types[496])
		}
		if m, _ := f.Strings("tokenizer.ggml.merges"); len(m) != 512-256-16 {
			t.Errorf("%d merges, want %d", len(m), 512-256-16)
		}
		if pre, _ := f.String("tokenizer.ggml.pre"); pre != "llama-bpe" {
			t.Errorf("tokenizer.ggml.pre = %q", pre)
		}
	} else {
		if toks[2] != "<bos>" || toks[1] != "<eos>" || toks[6] != "<0x00>" || types[6] != TokenByte {
			t.Errorf("gemma2 specials: %q %q %q type %d", toks[2], toks[1], toks[6], types[6])
		}
		if sc, _ := f.Float32s("tokenizer.ggml.scores"); len(sc) != 512 {
			t.Errorf("%d scores, want 512", len(sc))
		}
		if asp, ok := f.Bool("tokenizer.ggml.add_space_prefix"); !ok || asp {
			t.Errorf("add_space_prefix = %v (present %v), want false", asp, ok)
		}
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || !b {
		t.Errorf("add_bos_token = %v, %v", b, ok)
	}
	if tmpl, _ := f.String("tokenizer.chat_template"); tmpl == "" {
		t.Error("no chat template")
	}
}

// checkPhi3Metadata checks a Phi-3 file's keys as llama.cpp's converter
// writes them, with LongRoPE's original context and attention factor.
func checkPhi3Metadata(t *testing.T, f *gguf.File) {
	t.Helper()
	for k, want := range map[string]uint64{
		"phi3.context_length": 256, "phi3.rope.scaling.original_context_length": 32, "phi3.rope.dimension_count": 64,
		"phi3.attention.sliding_window": 0, "phi3.attention.head_count_kv": 4, "phi3.feed_forward_length": 512,
		"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 3,
	} {
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	if got, ok := f.Float("phi3.rope.scaling.attn_factor"); !ok || math.Abs(got-math.Sqrt(1+math.Log(8)/math.Log(32))) > 1e-6 {
		t.Errorf("phi3.rope.scaling.attn_factor = %v (present %v)", got, ok)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if len(toks) != 512 || toks[1] != "<s>" || toks[3] != "<|endoftext|>" {
		t.Errorf("%d tokens; specials %q", len(toks), toks[:7])
	}
}

// checkGemma3Metadata checks a Gemma 3 file's keys as llama.cpp's
// converter writes them: no soft-caps, no query_pre_attn_scalar, the
// global layers' linear RoPE scaling.
func checkGemma3Metadata(t *testing.T, f *gguf.File) {
	t.Helper()
	for k, want := range map[string]uint64{
		"gemma3.attention.key_length": 128, "gemma3.attention.value_length": 128, "gemma3.attention.sliding_window": 8,
		"gemma3.block_count": 6, "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 2,
		"tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1,
	} {
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	for k, want := range map[string]float64{"gemma3.rope.freq_base": 1e6, "gemma3.rope.scaling.factor": 8} {
		if got, ok := f.Float(k); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if typ, _ := f.String("gemma3.rope.scaling.type"); typ != "linear" {
		t.Errorf("gemma3.rope.scaling.type = %q", typ)
	}
	for _, k := range []string{"gemma3.attn_logit_softcapping", "gemma3.final_logit_softcapping", "gemma3.attention.query_pre_attn_scalar"} {
		if _, ok := f.Lookup(k); ok {
			t.Errorf("%s present in a gemma3 file", k)
		}
	}
	if m, _ := f.String("tokenizer.ggml.model"); m != "llama" {
		t.Errorf("tokenizer.ggml.model = %q", m)
	}
}

// checkMistralMetadata checks a Mistral file: llama's keys (llama.cpp
// converts Mistral as llama), Nemo's head size and the window.
func checkMistralMetadata(t *testing.T, f *gguf.File) {
	t.Helper()
	if got, _ := f.String("general.architecture"); got != "llama" {
		t.Errorf("general.architecture = %q, want llama", got)
	}
	for k, want := range map[string]uint64{
		"llama.attention.key_length": 128, "llama.attention.value_length": 128, "llama.rope.dimension_count": 128,
		"llama.attention.sliding_window": 8, "llama.embedding_length": 256, "llama.attention.head_count": 4,
		"tokenizer.ggml.bos_token_id": 497, "tokenizer.ggml.eos_token_id": 498,
	} {
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	if pre, _ := f.String("tokenizer.ggml.pre"); pre != "tekken" {
		t.Errorf("tokenizer.ggml.pre = %q", pre)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if len(toks) != 512 || toks[497] != "<s>" || toks[498] != "</s>" || toks[499] != "[INST]" {
		t.Errorf("%d tokens; specials %q", len(toks), toks[496:500])
	}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		t.Error("rope_freqs.weight in a Mistral file")
	}
}

// checkQwenMetadata checks the keys llama.cpp's converter writes for
// Qwen2 and Qwen3 (the latter with its head size) and Qwen's tokenizer.
func checkQwenMetadata(t *testing.T, f *gguf.File, arch, typ string) {
	t.Helper()
	wantU := map[string]uint64{
		"general.file_type":               map[string]uint64{"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_k_m": 15}[typ],
		arch + ".context_length":          256,
		arch + ".embedding_length":        256,
		arch + ".feed_forward_length":     512,
		arch + ".block_count":             2,
		arch + ".attention.head_count":    4,
		arch + ".attention.head_count_kv": 2,
		"tokenizer.ggml.bos_token_id":     496,
		"tokenizer.ggml.eos_token_id":     498,
		"qwen3.attention.key_length":      128,
		"qwen3.attention.value_length":    128,
	}
	for k, want := range wantU {
		if strings.HasPrefix(k, "qwen3.") && arch != "qwen3" {
			continue
		}
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	for _, k := range []string{"qwen2.attention.key_length", "tokenizer.ggml.padding_token_id", arch + ".vocab_size"} {
		if _, ok := f.Lookup(k); ok {
			t.Errorf("%s present in a %s file", k, arch)
		}
	}
	if got, ok := f.Float(arch + ".rope.freq_base"); !ok || got != 1e6 {
		t.Errorf("rope.freq_base = %v (present %v)", got, ok)
	}
	if got, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon"); !ok || math.Abs(got-1e-6) > 1e-12 {
		t.Errorf("rms epsilon = %v (present %v)", got, ok)
	}
	if got, _ := f.String("general.architecture"); got != arch {
		t.Errorf("general.architecture = %q", got)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if len(toks) != 512 || toks[496] != "<|endoftext|>" || toks[497] != "<|im_start|>" || toks[498] != "<|im_end|>" {
		t.Errorf("%d tokens; specials %q", len(toks), toks[496:499])
	}
	if m, _ := f.String("tokenizer.ggml.model"); m != "gpt2" {
		t.Errorf("tokenizer.ggml.model = %q", m)
	}
	if pre, _ := f.String("tokenizer.ggml.pre"); pre != "qwen2" {
		t.Errorf("tokenizer.ggml.pre = %q", pre)
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || b {
		t.Errorf("add_bos_token = %v, %v; Qwen adds none", b, ok)
	}
	if tmpl, _ := f.String("tokenizer.chat_template"); !strings.Contains(tmpl, "<|im_start|>") {
		t.Errorf("chat template %q is not ChatML", tmpl)
	}
}

// TestTensorTypeRules checks the q4_k_m assignment on the full-size shapes
// without writing them.
func TestTensorTypeRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		arch, shape, typ, name string
		want                   quant.Type
	}{
		{"llama", "8b", "q4_k_m", "token_embd.weight", quant.Q4_K},
		{"llama", "8b", "q4_k_m", "output.weight", quant.Q6_K},
		{"llama", "8b", "q4_k_m", "output_norm.weight", quant.F32},
		{"llama", "8b", "q4_k_m", "rope_freqs.weight", quant.F32},
		{"llama", "8b", "q4_k_m", "blk.0.attn_v.weight", quant.Q6_K},   // i < 32/8
		{"llama", "8b", "q4_k_m", "blk.3.ffn_down.weight", quant.Q6_K}, // i < 4
		{"llama", "8b", "q4_k_m", "blk.4.attn_v.weight", quant.Q4_K},   // (4-4)%3 == 0
		{"llama", "8b", "q4_k_m", "blk.6.attn_v.weight", quant.Q6_K},   // (6-4)%3 == 2
		{"llama", "8b", "q4_k_m", "blk.7.ffn_down.weight", quant.Q4_K},
		{"llama", "8b", "q4_k_m", "blk.27.ffn_down.weight", quant.Q6_K}, // (27-4)%3 == 2
		{"llama", "8b", "q4_k_m", "blk.28.attn_v.weight", quant.Q6_K},   // i >= 28
		{"llama", "8b", "q4_k_m", "blk.6.attn_q.weight", quant.Q4_K},
		{"llama", "8b", "q4_k_m", "blk.6.ffn_gate.weight", quant.Q4_K},
		{"llama", "70b", "q4_k_m", "blk.10.attn_v.weight", quant.Q5_K}, // not more bits: Q5_K in the 70B
		{"llama", "70b", "q4_k_m", "blk.12.attn_v.weight", quant.Q6_K}, // (12-10)%3 == 2
		{"llama", "70b", "q4_k_m", "blk.9.attn_v.weight", quant.Q6_K},
		{"llama", "70b", "q4_k_m", "blk.70.attn_v.weight", quant.Q6_K},
		{"llama", "70b", "q4_k_m", "blk.68.attn_v.weight", quant.Q5_K},   // (68-10)%3 == 1
		{"llama", "70b", "q4_k_m", "blk.69.attn_v.weight", quant.Q6_K},   // (69-10)%3 == 2
		{"llama", "70b", "q4_k_m", "blk.10.ffn_down.weight", quant.Q4_K}, // Q5_K rule is attn_v only
		{"llama", "70b", "q4_k_m", "blk.10.attn_k.weight", quant.Q4_K},
		{"gemma2", "70b", "q4_k_m", "blk.8.attn_v.weight", quant.Q4_K},  // 46 layers: (8-5)%3 == 0, and not the 70B rule
		{"gemma2", "70b", "q4_k_m", "blk.10.attn_v.weight", quant.Q6_K}, // (10-5)%3 == 2
		{"gemma2", "8b", "q4_k_m", "token_embd.weight", quant.Q6_K},     // tied output
		{"gemma2", "8b", "q4_k_m", "blk.0.post_ffw_norm.weight", quant.F32},
		{"gemma2", "8b", "q8_0", "token_embd.weight", quant.Q8_0},
		{"llama", "70b", "q8_0", "blk.10.attn_v.weight", quant.Q8_0},
		{"llama", "70b", "f16", "output.weight", quant.F16},
		{"llama", "70b", "f16", "blk.0.ffn_norm.weight", quant.F32},
		{"llama", "8b", "bf16", "blk.3.ffn_down.weight", quant.BF16},
		{"llama", "8b", "bf16", "output.weight", quant.BF16},
		{"llama", "8b", "bf16", "blk.3.attn_norm.weight", quant.F32},
		{"gemma2", "8b", "f32", "token_embd.weight", quant.F32},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%s-%s-%s", c.arch, c.shape, c.typ, c.name), func(t *testing.T) {
			s, err := LookupShape(c.arch, c.shape)
			if err != nil {
				t.Fatal(err)
			}
			got, err := TensorType(s, c.typ, c.name)
			if err != nil || got != c.want {
				t.Fatalf("TensorType = %v, %v; want %v", got, err, c.want)
			}
		})
	}
	s, _ := LookupShape("llama", "70b")
	specs, err := Layout(s, "q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[quant.Type]int{}
	for _, sp := range specs {
		if strings.HasSuffix(sp.Name, "attn_v.weight") {
			counts[sp.Type]++
		}
	}
	// 80 layers: 10 below n/8, 10 at or above 7n/8, and 20 of the middle
	// 60 with (i-10)%3 == 2.
	if counts[quant.Q6_K] != 40 || counts[quant.Q5_K] != 40 {
		t.Errorf("70b attn_v types %v, want 40 Q6_K and 40 Q5_K", counts)
	}
}

// TestLayoutSizes checks the full-size shapes against the public models'
// parameter counts.
func TestLayoutSizes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		arch, shape string
		params      int64 // excluding rope_freqs
	}{
		{"llama", "8b", 8_030_261_248},
		{"llama", "70b", 70_553_706_496},
		{"gemma2", "8b", 9_241_705_984},
		{"gemma2", "70b", 27_227_128_320},
		{"qwen2", "8b", 7_615_616_512},
		{"qwen3", "8b", 8_190_735_360},
		{"mistral", "8b", 7_248_023_552},
		{"mistral", "12b", 12_247_782_400},
		{"phi3", "4b", 3_821_079_552},
		{"phi3", "14b", 13_960_238_080},
	}
	for _, c := range cases {
		t.Run(c.arch+"-"+c.shape, func(t *testing.T) {
			s, err := LookupShape(c.arch, c.shape)
			if err != nil {
				t.Fatal(err)
			}
			specs, err := Layout(s, "f32")
			if err != nil {
				t.Fatal(err)
			}
			n := paramCount(specs)
			if s.Rope != nil {
				n -= int64(s.HeadDim / 2)
			}
			if s.Arch == "phi3" { // rope_factors_long and _short
				n -= int64(s.HeadDim)
			}
			if n != c.params {
				t.Errorf("%d parameters, want %d", n, c.params)
			}
			hf, err := HFBytes(Options{Arch: c.arch, Shape: c.shape, Type: "q4_k_m"})
			if err != nil || hf != 4*c.params {
				t.Errorf("HFBytes = %d, %v; want %d", hf, err, 4*c.params)
			}
		})
	}
	if _, err := LookupShape("llama", "13b"); err == nil {
		t.Error("unknown shape accepted")
	}
	if _, err := LookupShape("falcon", "tiny"); err == nil {
		t.Error("unknown arch accepted")
	}
	if _, err := Size(Options{Arch: "llama", Shape: "tiny", Type: "q3_k"}); err == nil {
		t.Error("unknown type accepted")
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestDeterminism(t *testing.T) {
	for _, arch := range []string{"llama", "gemma2"} {
		t.Run(arch, func(t *testing.T) {
			a, _ := writeTiny(t, arch, "q4_k_m", 7, false)
			b, _ := writeTiny(t, arch, "q4_k_m", 7, false)
			c, _ := writeTiny(t, arch, "q4_k_m", 8, false)
			prev := runtime.GOMAXPROCS(1)
			d, _ := writeTiny(t, arch, "q4_k_m", 7, false)
			runtime.GOMAXPROCS(prev)
			ha, hb, hc, hd := fileHash(t, a), fileHash(t, b), fileHash(t, c), fileHash(t, d)
			if ha != hb {
				t.Error("same seed wrote different files")
			}
			if ha == hc {
				t.Error("different seeds wrote identical files")
			}
			if ha != hd {
				t.Error("output depends on GOMAXPROCS")
			}
		})
	}
}

// mediumShape has tensors of several generation chunks (token_embd spans
// 2.06 chunks), so the pipeline's ordering and the partial last chunk are
// exercised.
var mediumShape = Shape{
	Arch: "llama", Name: "medium", Vocab: 8448, Dim: 256, FFN: 512, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 64,
	RopeTheta: 500000, Rope: &llama3Rope, Context: 256, RMSEps: 1e-5,
}

func mediumPlan(t *testing.T, typ string, seed uint64) *plan {
	t.Helper()
	specs, err := Layout(mediumShape, typ)
	if err != nil {
		t.Fatal(err)
	}
	v, err := BPEVocab(mediumShape.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	return &plan{shape: mediumShape, specs: specs, vocab: v, opts: Options{Type: typ, Seed: seed}}
}

// TestChunkedTensors checks that multi-chunk tensors come out of the
// parallel pipeline in order: chunk c of tensor i must equal FillRandom of
// that chunk with its own seed, which depends only on (seed, i, c).
func TestChunkedTensors(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"f16", "q4_k_m"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			p := mediumPlan(t, typ, 99)
			var buf bytes.Buffer
			var calls int
			var last int64
			p.opts.Progress = func(done, total int64) {
				calls++
				if done <= last || done > total {
					t.Errorf("progress %d/%d after %d", done, total, last)
				}
				last = done
			}
			if _, err := p.writeGGUF(&buf); err != nil {
				t.Fatal(err)
			}
			total, _ := dataBytes(p.specs)
			if last != total {
				t.Errorf("progress ended at %d of %d", last, total)
			}
			f, err := gguf.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err != nil {
				t.Fatal(err)
			}
			for i, spec := range p.specs {
				got, err := f.ReadTensor(spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				if spec.kind != kindMatrix {
					continue
				}
				nc := numChunks(&p.specs[i])
				if spec.Name == "token_embd.weight" && nc != 3 {
					t.Fatalf("token_embd has %d chunks, want 3", nc)
				}
				var off int64
				for c := 0; c < nc; c++ {
					_, n, err := chunkRange(&p.specs[i], c)
					if err != nil {
						t.Fatal(err)
					}
					want := make([]byte, n)
					if err := quant.FillRandom(spec.Type, want, chunkSeed(tensorSeed(99, i), c), spec.std); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got[off:off+n], want) {
						t.Fatalf("%s chunk %d differs", spec.Name, c)
					}
					off += n
				}
				if off != int64(len(got)) {
					t.Fatalf("%s: chunks cover %d of %d bytes", spec.Name, off, len(got))
				}
			}
		})
	}
}

// failWriter fails after n bytes.
type failWriter struct{ n int64 }

var errDiskFull = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.n {
		k := w.n
		w.n = 0
		return int(k), errDiskFull
	}
	w.n -= int64(len(p))
	return len(p), nil
}

func TestWriteFailureStopsPipeline(t *testing.T) {
	before := runtime.NumGoroutine()
	p := mediumPlan(t, "f32", 1)
	_, err := p.writeGGUF(&failWriter{n: 6 << 20})
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("err = %v, want disk full", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after a failed write, %d before", n, before)
	}
}

func TestWriteLeavesNoPartialFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		path string
		opts Options
	}{
		{"missing dir", filepath.Join(dir, "missing", "m.gguf"), Options{Arch: "llama", Shape: "tiny", Type: "f32"}},
		{"path under a file", filepath.Join(notDir, "m.gguf"), Options{Arch: "llama", Shape: "tiny", Type: "f32"}},
		// The GGUF is complete but the HF copy fails: nothing may remain.
		{"hf dir fails", filepath.Join(dir, "a.gguf"), Options{Arch: "gemma2", Shape: "tiny", Type: "f32", HFDir: filepath.Join(notDir, "hf")}},
		{"hf refused", filepath.Join(dir, "b.gguf"), Options{Arch: "llama", Shape: "8b", Type: "q4_k_m", HFDir: filepath.Join(dir, "hf")}},
		{"bad type", filepath.Join(dir, "c.gguf"), Options{Arch: "llama", Shape: "tiny", Type: "q2_k"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := Write(c.path, c.opts); err == nil {
				t.Fatal("Write succeeded")
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(c.path), ".*.tmp"))
			for _, p := range append(left, c.path) {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s exists after a failed write", p)
				}
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only the blocking file", names)
	}
}

func TestHFRoundTrip(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"llama", "gemma2", "gemma3", "mistral", "phi3", "qwen2", "qwen3"} {
		for _, typ := range allTypes {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				path, hfDir := writeTiny(t, arch, typ, 3, true)
				m, err := gguf.Map(path)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				hf, err := safetensors.OpenDir(hfDir)
				if err != nil {
					t.Fatal(err)
				}
				defer hf.Close()
				checkHFConfig(t, hf.Config, arch)
				names := map[string]string{ // GGUF suffix -> HF suffix
					"attn_norm.weight":   "input_layernorm.weight",
					"attn_q.weight":      "self_attn.q_proj.weight",
					"attn_k.weight":      "self_attn.k_proj.weight",
					"attn_v.weight":      "self_attn.v_proj.weight",
					"attn_output.weight": "self_attn.o_proj.weight",
					"ffn_gate.weight":    "mlp.gate_proj.weight",
					"ffn_up.weight":      "mlp.up_proj.weight",
					"ffn_down.weight":    "mlp.down_proj.weight",
				}
				switch arch {
				case "llama", "mistral", "phi3", "qwen2", "qwen3":
					names["attn_qkv.weight"] = "self_attn.qkv_proj.weight"
					if arch == "phi3" {
						names["ffn_up.weight"] = "mlp.gate_up_proj.weight"
					}
					names["ffn_norm.weight"] = "post_attention_layernorm.weight"
					names["attn_q.bias"] = "self_attn.q_proj.bias"
					names["attn_k.bias"] = "self_attn.k_proj.bias"
					names["attn_v.bias"] = "self_attn.v_proj.bias"
					names["attn_q_norm.weight"] = "self_attn.q_norm.weight"
					names["attn_k_norm.weight"] = "self_attn.k_norm.weight"
				default:
					names["attn_q_norm.weight"] = "self_attn.q_norm.weight"
					names["attn_k_norm.weight"] = "self_attn.k_norm.weight"
					names["post_attention_norm.weight"] = "post_attention_layernorm.weight"
					names["ffn_norm.weight"] = "pre_feedforward_layernorm.weight"
					names["post_ffw_norm.weight"] = "post_feedforward_layernorm.weight"
				}
				seen := 0
				for _, ti := range m.Tensors {
					var hfName string
					switch ti.Name {
					case "token_embd.weight":
						hfName = "model.embed_tokens.weight"
					case "output_norm.weight":
						hfName = "model.norm.weight"
					case "output.weight":
						hfName = "lm_head.weight"
					case "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight":
						continue
					default:
						layer := layerOf(ti.Name)
						suffix := strings.TrimPrefix(ti.Name, fmt.Sprintf("blk.%d.", layer))
						hfName = fmt.Sprintf("model.layers.%d.%s", layer, names[suffix])
					}
					seen++
					ht, err := hf.Tensor(hfName)
					if err != nil {
						t.Fatalf("%s: %v", ti.Name, err)
					}
					wantShape := make([]int64, len(ti.Dims))
					for k, d := range ti.Dims {
						wantShape[len(ti.Dims)-1-k] = int64(d)
					}
					if ht.DType != "F32" || !slices.Equal(ht.Shape, wantShape) {
						t.Fatalf("%s: HF %s %v for GGUF dims %v", hfName, ht.DType, ht.Shape, ti.Dims)
					}
					hv, err := ht.Float32s()
					if err != nil {
						t.Fatal(err)
					}
					gv := make([]float32, ti.Elems())
					if err := quant.Dequantize(ti.Type, m.Data(&ti), gv); err != nil {
						t.Fatal(err)
					}
					want := hfFromGGUF(t, arch, ti, gv, hv)
					for j := range want {
						if math.Float32bits(want[j]) != math.Float32bits(hv[j]) {
							t.Fatalf("%s[%d]: HF %v, want %v", hfName, j, hv[j], want[j])
						}
					}
				}
				if seen != len(hf.Names()) {
					t.Errorf("HF has %d tensors, GGUF maps to %d", len(hf.Names()), seen)
				}
			})
		}
	}
}

// hfFromGGUF converts dequantized GGUF values to the HF tensor, with an
// independent implementation of the conventions: llama q/k rows
// un-permuted; gemma2 norms checked as GGUF == float32(1 + HF) and
// returned as HF.
func hfFromGGUF(t *testing.T, arch string, ti gguf.TensorInfo, gv, hv []float32) []float32 {
	t.Helper()
	if (arch == "gemma2" || arch == "gemma3") && strings.HasSuffix(ti.Name, "norm.weight") {
		for j := range gv {
			if 1+hv[j] != gv[j] {
				t.Fatalf("%s[%d]: float32(1 + %v) = %v, GGUF %v", ti.Name, j, hv[j], 1+hv[j], gv[j])
			}
		}
		return hv
	}
	if (arch == "llama" || arch == "mistral") && (strings.HasSuffix(ti.Name, "attn_q.weight") || strings.HasSuffix(ti.Name, "attn_k.weight")) {
		hd := 64
		if arch == "mistral" {
			hd = 128
		}
		row := int(ti.Dims[0])
		out := make([]float32, len(gv))
		for r := 0; r < int(ti.Dims[1]); r++ {
			h, rem := r/hd, r%hd
			j, i := rem/(hd/2), rem%(hd/2)
			g := h*hd + 2*i + j
			copy(out[r*row:(r+1)*row], gv[g*row:(g+1)*row])
		}
		return out
	}
	return gv
}

func checkHFConfig(t *testing.T, c map[string]any, arch string) {
	t.Helper()
	want := map[string]any{
		"hidden_size": 256.0, "intermediate_size": 512.0, "num_attention_heads": 4.0,
		"num_key_value_heads": 2.0, "head_dim": 64.0, "vocab_size": 512.0, "torch_dtype": "float32",
		"max_position_embeddings": 256.0, "attention_bias": false,
	}
	switch arch {
	case "phi3":
		delete(want, "head_dim")
		want["model_type"] = "phi3"
		want["architectures"] = "Phi3ForCausalLM"
		want["num_hidden_layers"] = 2.0
		want["num_key_value_heads"] = 4.0
		want["tie_word_embeddings"] = false
		want["original_max_position_embeddings"] = 32.0
		want["rope_theta"] = 10000.0
		want["sliding_window"] = nil
		want["bos_token_id"] = 1.0
		want["eos_token_id"] = 3.0
		if a, _ := c["architectures"].([]any); len(a) == 1 {
			c["architectures"] = a[0]
		}
		rs, _ := c["rope_scaling"].(map[string]any)
		lf, _ := rs["long_factor"].([]any)
		sf, _ := rs["short_factor"].([]any)
		if rs["rope_type"] != "longrope" || len(lf) != 32 || len(sf) != 32 || lf[31] != 8.0 || sf[31] != 1.25 || lf[0] != 1.0 {
			t.Errorf("rope_scaling = %v", c["rope_scaling"])
		}
	case "gemma3":
		want["model_type"] = "gemma3_text"
		want["architectures"] = "Gemma3ForCausalLM"
		want["num_hidden_layers"] = 6.0
		want["head_dim"] = 128.0
		want["tie_word_embeddings"] = true
		want["query_pre_attn_scalar"] = 128.0
		want["sliding_window"] = 8.0
		want["rope_theta"] = 1e6
		want["rope_local_base_freq"] = 10000.0
		want["attn_logit_softcapping"] = nil
		want["final_logit_softcapping"] = nil
		want["hidden_activation"] = "gelu_pytorch_tanh"
		want["rms_norm_eps"] = 1e-6
		want["bos_token_id"] = 2.0
		want["eos_token_id"] = 1.0
		if a, _ := c["architectures"].([]any); len(a) == 1 {
			c["architectures"] = a[0]
		}
		lt, _ := c["layer_types"].([]any)
		if len(lt) != 6 || lt[4] != "sliding_attention" || lt[5] != "full_attention" {
			t.Errorf("layer_types = %v", c["layer_types"])
		}
		rs, _ := c["rope_scaling"].(map[string]any)
		if rs["rope_type"] != "linear" || rs["factor"] != 8.0 {
			t.Errorf("rope_scaling = %v", c["rope_scaling"])
		}
		rp, _ := c["rope_parameters"].(map[string]any)
		full, _ := rp["full_attention"].(map[string]any)
		local, _ := rp["sliding_attention"].(map[string]any)
		if full["rope_type"] != "linear" || full["factor"] != 8.0 || full["rope_theta"] != 1e6 || local["rope_theta"] != 10000.0 || local["rope_type"] != "default" {
			t.Errorf("rope_parameters = %v", c["rope_parameters"])
		}
	case "mistral":
		delete(want, "attention_bias")
		want["model_type"] = "mistral"
		want["architectures"] = "MistralForCausalLM"
		want["num_hidden_layers"] = 2.0
		want["head_dim"] = 128.0
		want["sliding_window"] = 8.0
		want["tie_word_embeddings"] = false
		want["rope_theta"] = 1e6
		want["bos_token_id"] = 497.0
		want["eos_token_id"] = 498.0
		if a, _ := c["architectures"].([]any); len(a) == 1 {
			c["architectures"] = a[0]
		}
	case "qwen2", "qwen3":
		want["model_type"] = arch
		want["num_hidden_layers"] = 2.0
		want["tie_word_embeddings"] = arch == "qwen2"
		want["rope_theta"] = 1e6
		want["hidden_act"] = "silu"
		want["rms_norm_eps"] = 1e-6
		want["use_sliding_window"] = false
		want["bos_token_id"] = 496.0
		want["eos_token_id"] = 498.0
		if arch == "qwen2" {
			delete(want, "attention_bias") // always true in Qwen2
			want["architectures"] = "Qwen2ForCausalLM"
		} else {
			want["head_dim"] = 128.0
			want["architectures"] = "Qwen3ForCausalLM"
		}
		if a, _ := c["architectures"].([]any); len(a) == 1 {
			c["architectures"] = a[0]
		}
	case "llama":
		want["model_type"] = "llama"
		want["num_hidden_layers"] = 2.0
		want["tie_word_embeddings"] = false
		want["rope_theta"] = 500000.0
		want["hidden_act"] = "silu"
		want["bos_token_id"] = 496.0
		want["eos_token_id"] = 505.0
		rs, _ := c["rope_scaling"].(map[string]any)
		if rs["rope_type"] != "llama3" || rs["factor"] != 8.0 || rs["original_max_position_embeddings"] != 32.0 {
			t.Errorf("rope_scaling = %v", c["rope_scaling"])
		}
	default:
		want["model_type"] = "gemma2"
		want["num_hidden_layers"] = 4.0
		want["tie_word_embeddings"] = true
		want["query_pre_attn_scalar"] = 64.0
		want["sliding_window"] = 8.0
		want["attn_logit_softcapping"] = 50.0
		want["final_logit_softcapping"] = 30.0
		want["hidden_activation"] = "gelu_pytorch_tanh"
		want["rms_norm_eps"] = 1e-6
		want["pad_token_id"] = 0.0
		want["bos_token_id"] = 2.0
		want["eos_token_id"] = 1.0
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("config %s = %v (%T), want %v", k, c[k], c[k], v)
		}
	}
}

func TestHFConfigFloats(t *testing.T) {
	t.Parallel()
	s, _ := LookupShape("llama", "8b")
	v := &Vocab{BOS: 128000, EOS: 128009, PAD: -1, UNK: -1}
	b, err := json.Marshal(HFConfig(s, v))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"factor":8.0`, `"rope_theta":500000.0`, `"rms_norm_eps":1e-05`, `"original_max_position_embeddings":8192`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %s: %s", want, b)
		}
	}
}

func TestRopeFreqs(t *testing.T) {
	t.Parallel()
	s, _ := LookupShape("llama", "8b")
	f := RopeFreqs(s)
	if len(f) != 64 {
		t.Fatalf("%d freqs", len(f))
	}
	// High frequencies (short wavelengths) are unscaled, the lowest are
	// divided by the factor, and the band between interpolates.
	if f[0] != 1 || f[63] != 8 {
		t.Errorf("f[0]=%v f[63]=%v, want 1 and 8", f[0], f[63])
	}
	for i := 1; i < len(f); i++ {
		if f[i] < f[i-1] {
			t.Fatalf("factors not monotonic at %d: %v", i, f)
		}
	}
	// Pair i with wavelength between 8192/4 and 8192/1 interpolates.
	i := 30
	inv := math.Pow(500000, -2*float64(i)/128)
	wl := 2 * math.Pi / inv
	if wl < 2048 || wl > 8192 {
		t.Fatalf("test pair %d has wavelength %v outside the band", i, wl)
	}
	sm := (8192/wl - 1) / 3
	want := 1 / ((1-sm)/8 + sm)
	if math.Abs(float64(f[i])-want) > 1e-5 {
		t.Errorf("f[%d] = %v, want %v", i, f[i], want)
	}
}

func TestUnpermuteRowsErrors(t *testing.T) {
	t.Parallel()
	if _, err := UnpermuteRows(make([]float32, 10), 3, 2); err == nil {
		t.Error("ragged input accepted")
	}
	if _, err := UnpermuteRows(make([]float32, 12), 2, 3); err == nil {
		t.Error("odd head dim accepted")
	}
}

// readF32 decodes a little-endian float32 slice.
func readF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
