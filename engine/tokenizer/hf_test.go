package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestHFJSONSharedVectors writes every shared vocabulary as tokenizer.json
// and tokenizer_config.json, reads it back with VocabFromHF and checks
// llama.cpp's test vectors against it: a tokenizer.json strata reads must
// encode as the GGUF vocabulary does.
func TestHFJSONSharedVectors(t *testing.T) {
	t.Parallel()
	dir := sharedVocabDir(t)
	if dir == "" {
		t.Skip("no ../shared/vocab beside the checkout (set STRATA_VOCAB_DIR)")
	}
	files, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, path := range files {
		if _, err := os.Stat(path + ".inp"); err != nil {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		t.Run(name, func(t *testing.T) {
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
