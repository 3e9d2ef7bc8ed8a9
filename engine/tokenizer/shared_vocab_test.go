package tokenizer

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sharedVocabDir is the directory of llama.cpp's vocabulary test files
// beside the checkout (../shared/vocab): STRATA_VOCAB_DIR, or that
// directory next to the module root. It is "" when neither exists; a
// STRATA_VOCAB_DIR that does not exist fails the test.
func sharedVocabDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("STRATA_VOCAB_DIR"); d != "" {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("STRATA_VOCAB_DIR: %v", err)
		}
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(dir, "..", "shared", "vocab")
			if _, err := os.Stat(d); err == nil {
				return d
			}
			return ""
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// TestSharedVocabVectors checks every llama.cpp test-tokenizer-0 vector of
// every vocabulary in the shared directory (deepseek-llm, falcon, mpt,
// qwen2, refact, starcoder, the Llama ones): each must match in full.
func TestSharedVocabVectors(t *testing.T) {
	t.Parallel()
	for _, sv := range sharedVocabs(t) {
		name, path := sv.name, sv.path
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tok := load(t, path)
			vs := loadVectors(t, path)
			pass := 0
			for i, v := range vs {
				got := tok.Encode(v.in, false, false)
				if !equalIDs(got, v.want) {
					t.Errorf("vector %d: Encode(%q)\n got %v\nwant %v", i, v.in, got, v.want)
					continue
				}
				pass++
				if dec := tok.Decode(got); dec != v.in && tok.Vocab().Model == ModelGPT2 {
					t.Errorf("vector %d: Decode(Encode(%q)) = %q", i, v.in, dec)
				}
			}
			t.Logf("%s (pre %q): %d/%d vectors match", name, tok.Vocab().Pre, pass, len(vs))
		})
	}
}

// sharedVocab is one vocabulary of the shared directory with test vectors.
type sharedVocab struct{ name, path string }

// sharedVocabs lists the shared directory's vocabularies that have
// llama.cpp's test vectors beside them (path.inp), by name; it skips the
// test without the directory and fails it when the directory has none.
func sharedVocabs(t *testing.T) []sharedVocab {
	t.Helper()
	dir := sharedVocabDir(t)
	if dir == "" {
		t.Skip("no ../shared/vocab beside the checkout (set STRATA_VOCAB_DIR)")
	}
	files, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatalf("no ggml-vocab-*.gguf in %s", dir)
	}
	var out []sharedVocab
	for _, path := range files {
		if _, err := os.Stat(path + ".inp"); err != nil {
			continue
		}
		out = append(out, sharedVocab{strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf"), path})
	}
	return out
}
