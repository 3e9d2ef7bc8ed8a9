package hf_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/hf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/safetensors"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/synth"
)

// archs are the synth catalogue's architectures: every one engine/model
// implements, with Mistral and Mixtral as the llama GGUFs they convert to.
var archs = []string{"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3"}

// twin writes synth's tiny model of arch as a GGUF and its Hugging Face
// twin and returns both paths.
func twin(t *testing.T, arch, typ string, shard int64) (string, string) {
	t.Helper()
	dir := t.TempDir()
	path, hfDir := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "hf")
	err := synth.Write(path, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: 7, HFDir: hfDir, HFForce: true, HFMaxShardBytes: shard})
	if err != nil {
		t.Fatal(err)
	}
	return path, hfDir
}

// prompt is longer than the tiny phi3's original context (32), so LongRoPE's
// long factors are the ones both loaders pick.
var prompt = func() []int32 {
	p := make([]int32, 40)
	for i := range p {
		p[i] = int32(3 + (i*37)%500)
	}
	return p
}()

// greedy runs the prompt and steps-1 greedy steps and returns the logits
// of every step.
func greedy(t *testing.T, m *model.Model, steps int) [][]float32 {
	t.Helper()
	ctx := context.Background()
	seq := m.NewSequence(len(prompt) + steps)
	batch := []model.Step{{Seq: seq, Tokens: prompt}}
	var out [][]float32
	for s := 0; s < steps; s++ {
		if err := m.Forward(ctx, batch); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		logits := slices.Clone(batch[0].Logits[len(batch[0].Logits)-1])
		out = append(out, logits)
		batch[0] = model.Step{Seq: seq, Tokens: []int32{sample.Argmax(logits)}}
	}
	return out
}

// compare opens both and checks the HF model against the GGUF: the same
// config, logits equal bit for bit (identical weights) or within maxNMSE.
func compare(t *testing.T, path, hfDir string, maxNMSE float64) {
	t.Helper()
	gm, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Close()
	hm, err := hf.Open(hfDir)
	if err != nil {
		t.Fatal(err)
	}
	defer hm.Close()
	if !reflect.DeepEqual(gm.Config, hm.Model.Config) {
		t.Fatalf("configs differ:\n gguf %+v\n   hf %+v", gm.Config, hm.Model.Config)
	}
	want, got := greedy(t, gm, 4), greedy(t, hm.Model, 4)
	for s := range want {
		if maxNMSE == 0 {
			if !slices.Equal(got[s], want[s]) {
				t.Fatalf("step %d: logits differ (NMSE %.3g), want them bit-identical", s, quant.NMSE(got[s], want[s]))
			}
			continue
		}
		if n := quant.NMSE(got[s], want[s]); n > maxNMSE {
			t.Fatalf("step %d: NMSE %.3g > %g", s, n, maxNMSE)
		}
	}
}

// TestTwinsMatchGGUF loads every architecture's HF twin and checks it
// against the GGUF: same config, the same logits bit for bit over greedy
// steps on the CPU (the twin's F32 weights are the GGUF's values), and a
// tokenizer that encodes as the GGUF's.
func TestTwinsMatchGGUF(t *testing.T) {
	t.Parallel()
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			var shard int64
			if arch == "mixtral" {
				shard = 1 << 20 // sharded, with model.safetensors.index.json
			}
			path, hfDir := twin(t, arch, "f32", shard)
			if arch == "mixtral" {
				if _, err := os.Stat(filepath.Join(hfDir, safetensors.IndexFile)); err != nil {
					t.Fatalf("want a sharded twin: %v", err)
				}
			}
			compare(t, path, hfDir, 0)
			compareTokenizers(t, path, hfDir)
		})
	}
}

// compareTokenizers checks that the twin's tokenizer.json encodes text,
// special tokens included, as the GGUF's vocabulary does, with the same
// special ids and chat template.
func compareTokenizers(t *testing.T, path, hfDir string) {
	t.Helper()
	gt, err := tokenizer.FromGGUFFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hm, err := hf.Open(hfDir)
	if err != nil {
		t.Fatal(err)
	}
	defer hm.Close()
	ht, err := tokenizer.New(hm.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	gv, hv := gt.Vocab(), ht.Vocab()
	if gv.BOS != hv.BOS || gv.EOS != hv.EOS || gv.EOT != hv.EOT || gv.AddBOS != hv.AddBOS || gv.ChatTemplate != hv.ChatTemplate {
		t.Errorf("specials: hf bos %d eos %d eot %d add_bos %v, gguf %d %d %d %v (templates equal: %v)",
			hv.BOS, hv.EOS, hv.EOT, hv.AddBOS, gv.BOS, gv.EOS, gv.EOT, gv.AddBOS, gv.ChatTemplate == hv.ChatTemplate)
	}
	for _, text := range []string{
		"Hello world, this is a test of 12345 tokens.",
		"  leading spaces\n\nand newlines\ttabs, ÜTF-8 ñ 日本語 🙂",
		"The story of a small cat who found a big box " + gv.Tokens[max(gv.EOS, 0)] + " and more",
	} {
		if g, h := gt.Encode(text, true, true), ht.Encode(text, true, true); !slices.Equal(g, h) {
			t.Errorf("Encode(%q):\n   hf %v\n gguf %v", text, h, g)
		}
	}
}

// TestHalfTwins converts the twin's matrices to the GGUF's own F16 or
// BF16 (exact: the values came from them) and checks the logits are the
// GGUF's bit for bit: half-precision checkpoints load as views, with
// llama's q/k rows permuted in their encoded form.
func TestHalfTwins(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ arch, typ string }{{"llama", "bf16"}, {"qwen3moe", "bf16"}, {"mistral", "f16"}, {"gemma3", "f16"}} {
		t.Run(c.arch+"/"+c.typ, func(t *testing.T) {
			t.Parallel()
			path, hfDir := twin(t, c.arch, c.typ, 0)
			toHalf(t, hfDir, strings.ToUpper(c.typ))
			compare(t, path, hfDir, 0)
		})
	}
}

// toHalf rewrites the directory's 2-D F32 tensors as dtype.
func toHalf(t *testing.T, dir, dtype string) {
	t.Helper()
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range st.Names() {
		x, err := st.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		x.Data = slices.Clone(x.Data)
		if len(x.Shape) == 2 {
			vals, err := x.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			x.DType, x.Data = dtype, make([]byte, 2*len(vals))
			for i, v := range vals {
				h := quant.F32ToBF16(v)
				if dtype == "F16" {
					h = quant.F32ToF16(v)
				}
				binary.LittleEndian.PutUint16(x.Data[2*i:], h)
			}
		}
		ts = append(ts, x)
	}
	st.Close()
	if err := safetensors.WriteDir(dir, nil, ts, 0); err != nil {
		t.Fatal(err)
	}
}

// TestRefusals checks the errors for a directory strata cannot run: an
// architecture it does not implement (named, with the supported ones
// listed), a missing tensor, a dtype it does not load.
func TestRefusals(t *testing.T) {
	t.Parallel()
	_, base := twin(t, "qwen3", "f32", 0)
	st, err := safetensors.OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	var all []safetensors.Tensor
	for _, n := range st.Names() {
		x, _ := st.Tensor(n)
		x.Data = slices.Clone(x.Data)
		all = append(all, x)
	}
	st.Close()
	cfg, err := os.ReadFile(filepath.Join(base, safetensors.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		edit   func(cfg string, ts []safetensors.Tensor) (string, []safetensors.Tensor)
		want   []string
		unsupp bool
	}{
		{"architecture", func(c string, ts []safetensors.Tensor) (string, []safetensors.Tensor) {
			return strings.Replace(c, `"model_type": "qwen3"`, `"model_type": "bert"`, 1), ts
		}, []string{`model_type "bert"`, "Qwen3ForCausalLM", "gemma3_text", "mixtral", "qwen3_moe"}, true},
		{"missing tensor", func(c string, ts []safetensors.Tensor) (string, []safetensors.Tensor) {
			return c, slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == "model.layers.1.self_attn.k_norm.weight" })
		}, []string{"missing tensor model.layers.1.self_attn.k_norm.weight"}, false},
		{"dtype", func(c string, ts []safetensors.Tensor) (string, []safetensors.Tensor) {
			for i := range ts {
				if ts[i].Name == "model.layers.0.mlp.up_proj.weight" {
					ts[i].DType = "I32"
				}
			}
			return c, ts
		}, []string{"model.layers.0.mlp.up_proj.weight", "dtype I32"}, true},
		{"bias", func(c string, ts []safetensors.Tensor) (string, []safetensors.Tensor) {
			return strings.Replace(c, `"attention_bias": false`, `"attention_bias": true`, 1), ts
		}, []string{"attention_bias"}, true},
		{"activation", func(c string, ts []safetensors.Tensor) (string, []safetensors.Tensor) {
			return strings.Replace(c, `"hidden_act": "silu"`, `"hidden_act": "gelu"`, 1), ts
		}, []string{`activation "gelu"`}, true},
		{"rope", func(c string, ts []safetensors.Tensor) (string, []safetensors.Tensor) {
			return strings.Replace(c, `"rope_scaling": null`, `"rope_scaling": {"rope_type": "yarn", "factor": 4.0}`, 1), ts
		}, []string{`rope_scaling "yarn"`}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, f := range []string{hf.TokenizerFile, hf.TokenizerConfigFile} {
				b, err := os.ReadFile(filepath.Join(base, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cs, ts := c.edit(string(cfg), slices.Clone(all))
			if err := os.WriteFile(filepath.Join(dir, safetensors.ConfigFile), []byte(cs), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := safetensors.WriteDir(dir, nil, ts, 0); err != nil {
				t.Fatal(err)
			}
			m, err := hf.Open(dir)
			if err == nil {
				m.Close()
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if errors.Is(err, hf.ErrUnsupported) != c.unsupp {
				t.Errorf("errors.Is(err, ErrUnsupported) = %v, want %v", !c.unsupp, c.unsupp)
			}
		})
	}
}

// TestIsDir tells a model directory from a file and from a directory
// without config.json.
func TestIsDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if hf.IsDir(dir) {
		t.Error("a directory without config.json is a model")
	}
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !hf.IsDir(dir) || hf.IsDir(p) {
		t.Error("IsDir wrong")
	}
}

// TestGemma3WithVision reads a Gemma 3 checkpoint with a vision tower:
// the language model's config under text_config (sparse, transformers'
// defaults for the rest) and its tensors under language_model.model.,
// beside vision tensors strata ignores. It loads as the text-only twin.
func TestGemma3WithVision(t *testing.T) {
	t.Parallel()
	path, hfDir := twin(t, "gemma3", "f32", 0)
	cfg, err := os.ReadFile(filepath.Join(hfDir, safetensors.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var text map[string]any
	if err := json.Unmarshal(cfg, &text); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rope_local_base_freq", "sliding_window_pattern", "layer_types"} {
		delete(text, k) // transformers' defaults, as the hub's configs leave them out
	}
	wrapped, err := json.Marshal(map[string]any{"model_type": "gemma3", "architectures": []string{"Gemma3ForConditionalGeneration"},
		"text_config": text, "vision_config": map[string]any{"model_type": "siglip_vision_model"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.OpenDir(hfDir)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range st.Names() {
		x, _ := st.Tensor(n)
		x.Data = slices.Clone(x.Data)
		x.Name = "language_model." + n
		ts = append(ts, x)
	}
	st.Close()
	ts = append(ts, safetensors.Tensor{Name: "vision_tower.vision_model.post_layernorm.weight", DType: "F32", Shape: []int64{2}, Data: make([]byte, 8)})
	if err := os.WriteFile(filepath.Join(hfDir, safetensors.ConfigFile), wrapped, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteDir(hfDir, nil, ts, 0); err != nil {
		t.Fatal(err)
	}
	compare(t, path, hfDir, 0)
}

// TestChatTemplateFile reads the template from chat_template.jinja when
// tokenizer_config.json has none, and the special ids from
// generation_config.json when the tokenizer names no EOS.
func TestChatTemplateFile(t *testing.T) {
	t.Parallel()
	_, hfDir := twin(t, "qwen2", "f32", 0)
	cfgPath := filepath.Join(hfDir, hf.TokenizerConfigFile)
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	tmpl := c["chat_template"].(string)
	eos := c["eos_token"]
	delete(c, "chat_template")
	delete(c, "eos_token")
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hfDir, hf.ChatTemplateFile), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := hf.Open(hfDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Vocab.ChatTemplate != tmpl {
		t.Errorf("chat template %q, want chat_template.jinja's", m.Vocab.ChatTemplate)
	}
	if m.Vocab.EOS < 0 || m.Vocab.Tokens[m.Vocab.EOS] != eos {
		t.Errorf("EOS %d, want generation_config's id of %v", m.Vocab.EOS, eos)
	}
}
