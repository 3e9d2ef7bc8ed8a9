package tokenizer

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzVocabs are the real vocabularies the encoding fuzz target runs
// against: Llama 3's byte-level BPE and Llama 2's SentencePiece.
func fuzzVocabs(f *testing.F) []*Tokenizer {
	var toks []*Tokenizer
	for _, name := range []string{"ggml-vocab-llama-bpe.gguf", "ggml-vocab-llama-spm.gguf"} {
		tok, err := FromGGUFFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	return toks
}

// FuzzEncode encodes arbitrary text with both real vocabularies, with and
// without special-token parsing: every id is in range, decoding never
// panics, and byte-level BPE gives the text back exactly.
func FuzzEncode(f *testing.F) {
	toks := fuzzVocabs(f)
	for _, s := range []string{"Hello world", "<|eot_id|>x<|begin_of_text|>", " \t\n  ", "日本語のテキスト", "\xff\xfe", "a\u2581b", "<s></s><unk>"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, text string, special bool) {
		for k, tok := range toks {
			ids := tok.Encode(text, special, special)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("vocab %d: id %d out of range for %q", k, id, text)
				}
			}
			out := tok.Decode(ids)
			d := tok.NewDecoder()
			for _, id := range ids {
				d.Add(id)
			}
			if k == 0 && !special && utf8.ValidString(text) && out != text {
				t.Fatalf("BPE round trip: %q -> %v -> %q", text, ids, out)
			}
		}
	})
}

// FuzzVocab builds vocabularies from arbitrary token lists, types and
// merges: New either refuses with an error or gives a tokenizer that
// encodes and decodes without panicking.
func FuzzVocab(f *testing.F) {
	f.Add("<unk>\x00<s>\x00</s>\x00a\x00b\x00ab", []byte{2, 3, 3, 1, 1, 1}, "a b", false, int8(1), int8(2))
	f.Add("<unk>\x00\u2581\x00\u2581a\x00<0x41>", []byte{2, 1, 1, 6}, "", true, int8(-1), int8(0))
	f.Add("", []byte{}, "", false, int8(0), int8(0))
	f.Fuzz(func(t *testing.T, tokens string, types []byte, merges string, spm bool, bos, eos int8) {
		v := &Vocab{Model: ModelGPT2, Pre: "llama-bpe", Tokens: strings.Split(tokens, "\x00"), BOS: int32(bos), EOS: int32(eos), EOT: -1, PAD: -1, UNK: -1}
		if len(v.Tokens) > 256 {
			return
		}
		if spm {
			v.Model, v.Pre, v.UNK, v.AddSpacePrefix = ModelLlama, "", 0, true
		}
		if len(types) > 0 {
			v.Types = make([]int32, len(v.Tokens))
			for i := range v.Types {
				v.Types[i] = int32(types[i%len(types)] % 8)
			}
		}
		if merges != "" {
			v.Merges = strings.Split(merges, "\n")
		}
		tok, err := New(v)
		if err != nil {
			return
		}
		for _, s := range []string{"ab ba", tokens, "<s>x</s>"} {
			ids := tok.Encode(s, true, true)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range", id)
				}
			}
			_ = tok.Decode(ids)
		}
	})
}

// FuzzChatTemplate renders arbitrary templates over an arbitrary message
// in the bounded worker: whatever the template does, the fuzzing process
// survives and gets a result, a template error or a LimitError.
func FuzzChatTemplate(f *testing.F) {
	for _, s := range []string{
		"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
		"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"{% for i in range(100000000) %}x{% endfor %}",
		"{{ raise_exception('no') }}",
		"{% if tools %}{{ tools | tojson }}{% endif %}{{ messages[0]['content'] | trim }}",
		"{{ messages[99].content }}{{ x.y.z }}{%",
	} {
		f.Add(s, "Hello <|eot_id|>")
	}
	lim := ChatLimits{Time: 2 * time.Second, Memory: 64 << 20, Stack: 1 << 20, Output: 1 << 16, Range: 1000}
	f.Fuzz(func(t *testing.T, tmpl, content string) {
		if strings.TrimSpace(tmpl) == "" {
			return
		}
		tok := hostileTok(t, tmpl, lim)
		_, err := tok.RenderChat([]Message{{Role: "system", Content: "S"}, {Role: "user", Content: content}},
			ChatOptions{AddGenerationPrompt: true, Tools: []byte(`[{"type":"function","function":{"name":"f"}}]`)})
		if errors.Is(err, errWorker) {
			t.Fatalf("worker died without a named limit: %v", err)
		}
	})
}
