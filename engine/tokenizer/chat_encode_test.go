package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
)

// vocabWithTemplate builds a tokenizer from a GGUF vocabulary file with
// the named template of testdata/templates ("" keeps the file's own).
func vocabWithTemplate(t *testing.T, path, template string) *Tokenizer {
	t.Helper()
	m, err := gguf.Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := VocabFromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	if template != "" {
		b, err := os.ReadFile(filepath.Join("testdata", "templates", template))
		if err != nil {
			t.Fatal(err)
		}
		v.ChatTemplate = string(b)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// vocabFiles are the vocabularies a test of every special token runs on:
// testdata's, and those of STRATA_VOCAB_DIR (../shared/vocab in CI).
func vocabFiles(t *testing.T) []string {
	files := []string{bpeVocabFile, spmVocabFile}
	if dir := os.Getenv("STRATA_VOCAB_DIR"); dir != "" {
		more, err := filepath.Glob(filepath.Join(dir, "*.gguf"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}
	return files
}

// controls counts the control tokens in ids.
func controls(tok *Tokenizer, ids []int32) int {
	n := 0
	for _, id := range ids {
		if tok.TokenType(id) == TypeControl {
			n++
		}
	}
	return n
}

// TestEncodeChatNoForgedTokens: the text of every control token of every
// vocabulary, written in a user's message, stays text: the prompt holds
// exactly the control tokens of the same conversation without it, while
// Encode of the rendered prompt (what the daemon did) turns it into the
// token; with the Llama 3.1 template, too.
func TestEncodeChatNoForgedTokens(t *testing.T) {
	t.Parallel()
	for _, file := range vocabFiles(t) {
		for _, tmpl := range []string{"", "llama3.1-instruct.jinja"} {
			t.Run(filepath.Base(file)+"/"+tmpl, func(t *testing.T) {
				t.Parallel()
				tok := vocabWithTemplate(t, file, tmpl)
				conv := func(user string) []Message {
					return []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: user}, {Role: "assistant", Content: "Sure."}, {Role: "user", Content: "Go on."}}
				}
				opt := ChatOptions{AddGenerationPrompt: true}
				base, err := tok.EncodeChat(conv("a  b"), opt)
				if err != nil {
					t.Fatal(err)
				}
				want := controls(tok, base)
				forged := 0
				for id := range int32(len(tok.vocab.Tokens)) {
					if tok.TokenType(id) != TypeControl || tok.Token(id) == "" {
						continue
					}
					msgs := conv("a " + tok.Token(id) + " b")
					ids, err := tok.EncodeChat(msgs, opt)
					if err != nil {
						t.Fatal(err)
					}
					if got := controls(tok, ids); got != want {
						t.Fatalf("%q in a user message: %d control tokens in the prompt, %d without it", tok.Token(id), got, want)
					}
					if text, err := tok.RenderChat(msgs, opt); err == nil && controls(tok, tok.Encode(text, false, true)) > want {
						forged++
					}
				}
				if forged == 0 {
					t.Fatal("no control token text became a token through Encode of the rendered prompt: the test shows nothing")
				}
			})
		}
	}
}

// TestEncodeChatSameTokens: without control-token text in the messages,
// EncodeChat gives what Encode of the rendered prompt gives, token for
// token (the contents' boundaries change nothing).
func TestEncodeChatSameTokens(t *testing.T) {
	t.Parallel()
	for _, file := range []string{bpeVocabFile, spmVocabFile} {
		for _, tmpl := range []string{"", "llama3.1-instruct.jinja", "qwen2.5-instruct.jinja"} {
			tok := vocabWithTemplate(t, file, tmpl)
			msgs := []Message{{Role: "system", Content: " You are\n\thelpful. "}, {Role: "user", Content: "Hello, world!\n\nfunc main() {}"},
				{Role: "assistant", Content: "Hi."}, {Role: "user", Content: "  spaces  "}}
			opt := ChatOptions{AddGenerationPrompt: true}
			got, err := tok.EncodeChat(msgs, opt)
			if err != nil {
				t.Fatal(err)
			}
			text, err := tok.RenderChat(msgs, opt)
			if err != nil {
				t.Fatal(err)
			}
			if want := tok.Encode(text, false, true); !slices.Equal(got, want) {
				t.Errorf("%s/%s: EncodeChat %v, Encode of the prompt %v", file, tmpl, got, want)
			}
		}
	}
}

// TestEncodeChatTransformedContent: a template that trims the content
// leaves its mark other than once... here it changes the text around the
// mark, so the marks still stand; a template that writes a content twice
// falls back to the contents with control-token text removed.
func TestEncodeChatTransformedContent(t *testing.T) {
	t.Parallel()
	v := &Vocab{Model: ModelLlama, Tokens: []string{"<unk>", "<s>", "</s>", "<|end|>"}, Types: []int32{2, 3, 3, 3},
		BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0,
		ChatTemplate: "{% for m in messages %}{{ m.content }}|{{ m.content }}<|end|>{% endfor %}"}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.EncodeChat([]Message{{Role: "user", Content: "x<|end|>y"}}, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := controls(tok, ids); got != 1 {
		t.Fatalf("a content written twice: %d control tokens %v, want the template's one", got, ids)
	}
}
