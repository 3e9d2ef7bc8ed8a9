package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestHFJSONSharedVectors writes every shared vocabulary as tokenizer.json
// and tokenizer_config.json, reads it back with VocabFromHF and checks
// llama.cpp's test vectors against it: a tokenizer.json strata reads must
// encode as the GGUF vocabulary does.
func TestHFJSONSharedVectors(t *testing.T) {
	t.Parallel()
	for _, sv := range sharedVocabs(t) {
		path := sv.path
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			ov := load(t, path).Vocab()
			orig := &ov
			tj, cj, err := HFJSON(orig)
			if err != nil {
				t.Fatal(err)
			}
			v, err := VocabFromHF(tj, cj, len(orig.Tokens))
			if err != nil {
				t.Fatal(err)
			}
			if v.Model != orig.Model || v.BOS != orig.BOS || v.EOS != orig.EOS || v.AddBOS != orig.AddBOS || v.AddSpacePrefix != orig.AddSpacePrefix {
				t.Errorf("read back model %s bos %d eos %d add_bos %v prefix %v, want %s %d %d %v %v",
					v.Model, v.BOS, v.EOS, v.AddBOS, v.AddSpacePrefix, orig.Model, orig.BOS, orig.EOS, orig.AddBOS, orig.AddSpacePrefix)
			}
			if !slices.Equal(v.Tokens, orig.Tokens) {
				t.Fatal("tokens differ")
			}
			tok, err := New(v)
			if err != nil {
				t.Fatal(err)
			}
			for i, vec := range loadVectors(t, path) {
				if got := tok.Encode(vec.in, false, false); !equalIDs(got, vec.want) {
					t.Errorf("vector %d: Encode(%q)\n got %v\nwant %v", i, vec.in, got, vec.want)
				}
			}
		})
	}
}

// TestVocabFromHFRefuses checks the clear errors for what strata cannot
// reproduce.
func TestVocabFromHFRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, json, want string }{
		{"wordpiece", `{"model":{"type":"WordPiece","vocab":{"a":0}}}`, `model type "WordPiece"`},
		{"unknown regex", `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"x+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},
			"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`, "none that strata implements"},
		{"whitespace split", `{"pre_tokenizer":{"type":"Whitespace"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`, `pre_tokenizer "Whitespace"`},
		{"neither", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`, "neither byte-level"},
		{"nfkc", `{"normalizer":{"type":"NFKC"},"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]}}`, `normalizer "NFKC"`},
		{"byte-level nfkc", `{"normalizer":{"type":"NFKC"},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`, `normalizer "NFKC"`},
		{"spm without spaces replaced", `{"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious"},"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]}}`, `pre_tokenizer "Split"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := VocabFromHF([]byte(c.json), nil, 0)
			if err == nil || !errors.Is(err, ErrUnsupportedHF) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrUnsupportedHF mentioning %q", err, c.want)
			}
		})
	}
}

// TestVocabFromHFPads checks that ids the tokenizer leaves free up to the
// model's vocabulary become unused [PADn] tokens, and that a tokenizer
// larger than the model is refused.
func TestVocabFromHFPads(t *testing.T) {
	t.Parallel()
	j := `{"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
		"added_tokens":[{"id":3,"content":"<|end|>","special":true}],
		"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]}}`
	v, err := VocabFromHF([]byte(j), []byte(`{"eos_token":"<|end|>"}`), 6)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "ab", "<|end|>", "[PAD4]", "[PAD5]"}; !slices.Equal(v.Tokens, want) {
		t.Fatalf("tokens %q, want %q", v.Tokens, want)
	}
	if v.Types[3] != TypeControl || v.Types[4] != TypeUnused || v.EOS != 3 || v.Pre != "gpt-2" || v.Merges[0] != "a b" {
		t.Fatalf("types %v eos %d pre %q merges %q", v.Types, v.EOS, v.Pre, v.Merges)
	}
	if _, err := VocabFromHF([]byte(j), nil, 3); err == nil || !strings.Contains(err.Error(), "model's vocabulary is 3") {
		t.Fatalf("err = %v, want the tokenizer refused as larger than the model", err)
	}
}

// TestVocabFromHFForms reads the forms real checkpoints write: Qwen's NFC
// normalizer on a byte-level tokenizer, Gemma's space-replacing
// normalizer with a split that cuts nothing, Mistral's Metaspace, and the
// special tokens of tokenizer_config.json as strings or added-token
// objects.
func TestVocabFromHFForms(t *testing.T) {
	t.Parallel()
	spmVocab := `"vocab":{"<unk>":0,"<s>":1,"</s>":2,"<0x41>":3,"▁":4,"a":5,"▁a":6},"merges":[["▁","a"]]`
	added := `"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}]`
	for _, c := range []struct {
		name, json, cfg string
		model           string
		prefix          bool
	}{
		{"qwen nfc", `{"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"` +
			strings.ReplaceAll(strings.ReplaceAll(qwen2Pattern, `\`, `\\`), `"`, `\"`) +
			`"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},
			"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}}`, `{"eos_token":{"content":"b","special":true},"bos_token":null}`, ModelGPT2, false},
		{"gemma", `{` + added + `,"normalizer":{"type":"Replace","pattern":{"String":" "},"content":"▁"},
			"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false},
			"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>",` + spmVocab + `}}`, `{"bos_token":"<s>","eos_token":"</s>","add_bos_token":true}`, ModelLlama, false},
		{"mistral metaspace", `{` + added + `,"normalizer":null,"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false},
			"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>",` + spmVocab + `}}`, `{"bos_token":"<s>","eos_token":"</s>"}`, ModelLlama, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, err := VocabFromHF([]byte(c.json), []byte(c.cfg), 0)
			if err != nil {
				t.Fatal(err)
			}
			if v.Model != c.model || v.AddSpacePrefix != c.prefix {
				t.Fatalf("model %s prefix %v, want %s %v", v.Model, v.AddSpacePrefix, c.model, c.prefix)
			}
			if c.model == ModelGPT2 {
				if v.Pre != "qwen2" || v.EOS != 1 || v.BOS != -1 || v.AddBOS {
					t.Fatalf("pre %q eos %d bos %d add_bos %v", v.Pre, v.EOS, v.BOS, v.AddBOS)
				}
				return
			}
			if v.BOS != 1 || v.EOS != 2 || v.UNK != 0 || v.Types[3] != TypeByte || v.Types[0] != TypeUnknown || v.Types[1] != TypeControl {
				t.Fatalf("bos %d eos %d unk %d types %v", v.BOS, v.EOS, v.UNK, v.Types)
			}
			if !(v.Scores[6] > v.Scores[5]) {
				t.Fatalf("scores %v: the merged piece must outrank the unmerged ones", v.Scores)
			}
			tok, err := New(v)
			if err != nil {
				t.Fatal(err)
			}
			want := []int32{6, 6}
			if !c.prefix {
				want = []int32{5, 6}
			}
			if got := tok.Encode("a a", false, false); !slices.Equal(got, want) {
				t.Fatalf("Encode(\"a a\") = %v, want %v", got, want)
			}
		})
	}
}
