package tokenizer

import (
	"reflect"
	"strings"
	"testing"
)

// fakeMeta implements metadata over a plain map, standing in for a GGUF file.
type fakeMeta map[string]any

func (m fakeMeta) Lookup(k string) (any, bool) { v, ok := m[k]; return v, ok }
func (m fakeMeta) String(k string) (string, bool) {
	s, ok := m[k].(string)
	return s, ok
}
func (m fakeMeta) Bool(k string) (bool, bool) {
	b, ok := m[k].(bool)
	return b, ok
}
func (m fakeMeta) Strings(k string) ([]string, bool) {
	s, ok := m[k].([]string)
	return s, ok
}
func (m fakeMeta) Float32s(k string) ([]float32, bool) {
	s, ok := m[k].([]float32)
	return s, ok
}
func (m fakeMeta) Int32s(k string) ([]int32, bool) {
	s, ok := m[k].([]int32)
	return s, ok
}

// with returns a copy of m with the given keys set (nil value: deleted).
func (m fakeMeta) with(kv ...any) fakeMeta {
	out := fakeMeta{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func spmMeta() fakeMeta {
	return fakeMeta{
		keyModel:     "llama",
		keyTokens:    []string{"<unk>", "<s>", "</s>", "\u2581a", "a"},
		keyScores:    []float32{0, 0, 0, -1, -2},
		keyTokenType: []int32{2, 3, 3, 1, 1},
	}
}

func bpeMeta() fakeMeta {
	return fakeMeta{
		keyModel:     "gpt2",
		keyPre:       "llama-bpe",
		keyTokens:    []string{"a", "b", "ab", "<|begin_of_text|>", "<|eot_id|>"},
		keyTokenType: []int32{1, 1, 1, 3, 3},
		keyMerges:    []string{"a b"},
		keyBOS:       uint32(3),
		keyEOS:       uint32(4),
	}
}

func TestVocabDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		md   fakeMeta
		want Vocab // only the scalar fields are compared
	}{
		{"spm defaults", spmMeta(), Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddBOS: true, AddSpacePrefix: true}},
		{"spm overrides", spmMeta().with(keyAddBOS, false, keyAddSpacePrefix, false, keyAddEOS, true, keyUNK, uint32(4), keyPAD, int32(3)),
			Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: -1, PAD: 3, UNK: 4, AddEOS: true}},
		{"gemma eot by text", spmMeta().with(keyTokens, []string{"<pad>", "<eos>", "<bos>", "<unk>", "<end_of_turn>"}),
			Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: 4, PAD: -1, UNK: 0, AddBOS: true, AddSpacePrefix: true}},
		{"llama3", bpeMeta(), Vocab{Model: "gpt2", Pre: "llama-bpe", BOS: 3, EOS: 4, EOT: 4, PAD: -1, UNK: -1, AddBOS: true}},
		{"gpt2 other pre", bpeMeta().with(keyPre, "gpt-2"), Vocab{Model: "gpt2", Pre: "gpt-2", BOS: 3, EOS: 4, EOT: 4, PAD: -1, UNK: -1}},
		{"eot key wins", bpeMeta().with(keyEOT, uint64(2)), Vocab{Model: "gpt2", Pre: "llama-bpe", BOS: 3, EOS: 4, EOT: 2, PAD: -1, UNK: -1, AddBOS: true}},
		// llama.cpp's gpt2 default BOS/EOS (11) does not exist in 5 tokens.
		{"gpt2 default ids out of vocab", bpeMeta().with(keyBOS, nil, keyEOS, nil, keyAddBOS, false),
			Vocab{Model: "gpt2", Pre: "llama-bpe", BOS: -1, EOS: -1, EOT: 4, PAD: -1, UNK: -1}},
		{"tekken adds bos", bpeMeta().with(keyPre, "tekken"), Vocab{Model: "gpt2", Pre: "tekken", BOS: 3, EOS: 4, EOT: 4, PAD: -1, UNK: -1, AddBOS: true}},
		{"qwen2 no bos", bpeMeta().with(keyPre, "qwen2"), Vocab{Model: "gpt2", Pre: "qwen2", BOS: 3, EOS: 4, EOT: 4, PAD: -1, UNK: -1}},
		{"glm4 has no default bos", bpeMeta().with(keyPre, "glm4", keyBOS, nil), Vocab{Model: "gpt2", Pre: "glm4", BOS: -1, EOS: 4, EOT: 4, PAD: -1, UNK: -1}},
		{"no pre is default", bpeMeta().with(keyPre, nil), Vocab{Model: "gpt2", Pre: "default", BOS: 3, EOS: 4, EOT: 4, PAD: -1, UNK: -1,
			Warnings: []string{`no tokenizer.ggml.pre: using llama.cpp's "default" pre-tokenizer, which may cut text differently from the model's own`}}},
		{"template", spmMeta().with(keyChatTemplate, "{{ x }}"),
			Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddBOS: true, AddSpacePrefix: true, ChatTemplate: "{{ x }}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := vocabFromMetadata(tc.md)
			if err != nil {
				t.Fatal(err)
			}
			got := *v
			got.Tokens, got.Scores, got.Types, got.Merges = nil, nil, nil, nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if _, err := New(v); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// TestVocabBadSpecialIDs: a special-token id outside the vocabulary (as
// UINT32_MAX, "none", in many converted files) is ignored with a warning
// naming the key, keeping llama.cpp's default, instead of refusing the file.
func TestVocabBadSpecialIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		md      fakeMeta
		key     string
		get     func(*Vocab) int32
		wantID  int32
		wantMsg string
	}{
		{"pad uint32 max", spmMeta().with(keyPAD, uint32(0xFFFFFFFF)), keyPAD, func(v *Vocab) int32 { return v.PAD }, -1, "token id 4294967295 out of range [0, 5)"},
		{"bos just past the end", spmMeta().with(keyBOS, uint32(5)), keyBOS, func(v *Vocab) int32 { return v.BOS }, 1, "token id 5 out of range"},
		{"eos negative", spmMeta().with(keyEOS, int32(-3)), keyEOS, func(v *Vocab) int32 { return v.EOS }, 2, "token id -3 out of range"},
		{"unk huge", spmMeta().with(keyUNK, uint64(1)<<40), keyUNK, func(v *Vocab) int32 { return v.UNK }, 0, "out of range"},
		{"eot uint32 max", bpeMeta().with(keyEOT, uint32(0xFFFFFFFF)), keyEOT, func(v *Vocab) int32 { return v.EOT }, 4, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := vocabFromMetadata(tc.md)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := tc.get(v); got != tc.wantID {
				t.Errorf("id = %d, want the default %d", got, tc.wantID)
			}
			if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], tc.key) || !strings.Contains(v.Warnings[0], tc.wantMsg) {
				t.Errorf("warnings %q, want one naming %s and %q", v.Warnings, tc.key, tc.wantMsg)
			}
			if _, err := New(v); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// TestVocabUnknownTokenType: a token type llama.cpp does not know is read
// as undefined, with a warning, as llama.cpp does; New still refuses one in
// a hand-built Vocab (TestNewErrors).
func TestVocabUnknownTokenType(t *testing.T) {
	t.Parallel()
	v, err := vocabFromMetadata(spmMeta().with(keyTokenType, []int32{2, 3, 3, 9, -1}))
	if err != nil {
		t.Fatal(err)
	}
	if v.Types[3] != TypeUndefined || v.Types[4] != TypeUndefined || v.Types[0] != TypeUnknown {
		t.Errorf("types %v", v.Types)
	}
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "2 tokens have an unknown type (the first, token 3, has 9)") {
		t.Errorf("warnings %q", v.Warnings)
	}
	if _, err := New(v); err != nil {
		t.Fatal(err)
	}
}

func TestVocabErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		md   fakeMeta
		want string // substring of the error
	}{
		{"missing model", spmMeta().with(keyModel, nil), "missing tokenizer.ggml.model"},
		{"model not string", spmMeta().with(keyModel, uint32(1)), "not a string"},
		{"unsupported model", spmMeta().with(keyModel, "bert"), "unsupported tokenizer model"},
		{"missing tokens", spmMeta().with(keyTokens, nil), "missing tokenizer.ggml.tokens"},
		{"tokens wrong type", spmMeta().with(keyTokens, []int32{1}), "not a string array"},
		{"empty tokens", spmMeta().with(keyTokens, []string{}), "is empty"},
		{"types length", spmMeta().with(keyTokenType, []int32{1, 1}), "token_type has 2 entries, want 5"},
		{"types wrong type", spmMeta().with(keyTokenType, []float32{1}), "not an int32 array"},
		{"scores length", spmMeta().with(keyScores, []float32{0}), "scores has 1 entries, want 5"},
		{"id not integer", spmMeta().with(keyBOS, "1"), "not an integer"},
		{"add_bos not bool", spmMeta().with(keyAddBOS, uint8(1)), "add_bos_token is not a bool"},
		{"template not string", spmMeta().with(keyChatTemplate, true), "chat_template is not a string"},
		{"missing merges", bpeMeta().with(keyMerges, nil), "missing tokenizer.ggml.merges"},
		{"bad merge", bpeMeta().with(keyMerges, []string{"ab"}), `merge 0 "ab"`},
		{"add bos without bos", spmMeta().with(keyTokens, []string{"a"}, keyScores, nil, keyTokenType, nil), "has no BOS token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := vocabFromMetadata(tc.md)
			if err == nil {
				t.Fatalf("no error, vocab %+v", v)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	good := func() *Vocab {
		return &Vocab{Model: ModelLlama, Tokens: []string{"<unk>", "<s>", "</s>"}, BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0}
	}
	tests := []struct {
		name   string
		mutate func(v *Vocab) *Vocab
		want   string
	}{
		{"nil", func(*Vocab) *Vocab { return nil }, "nil vocab"},
		{"model", func(v *Vocab) *Vocab { v.Model = "wpm"; return v }, "unsupported tokenizer model"},
		{"no tokens", func(v *Vocab) *Vocab { v.Tokens = nil; return v }, "no tokens"},
		{"scores", func(v *Vocab) *Vocab { v.Scores = []float32{1}; return v }, "1 scores for 3 tokens"},
		{"types", func(v *Vocab) *Vocab { v.Types = []int32{1, 1, 1, 1}; return v }, "4 token types for 3 tokens"},
		{"type value", func(v *Vocab) *Vocab { v.Types = []int32{1, 1, 7}; return v }, "unknown type 7"},
		{"unk range", func(v *Vocab) *Vocab { v.UNK = 3; return v }, "UNK token id 3 out of range"},
		{"pad range", func(v *Vocab) *Vocab { v.PAD = -2; return v }, "PAD token id -2 out of range"},
		{"add eos", func(v *Vocab) *Vocab { v.EOS = -1; v.AddEOS = true; return v }, "no EOS token"},
		{"merge", func(v *Vocab) *Vocab { v.Model = ModelGPT2; v.Merges = []string{"a "}; return v }, "not of the form"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.mutate(good()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New(good()); err != nil {
		t.Errorf("New(good) = %v", err)
	}
}

func TestFromGGUFFileErrors(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"testdata/does-not-exist.gguf", bpeVocabFile + ".inp"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			if _, err := FromGGUFFile(path); err == nil {
				t.Errorf("FromGGUFFile(%s) succeeded", path)
			}
		})
	}
}

func TestGGUFVocabs(t *testing.T) {
	t.Parallel()
	bpe := load(t, bpeVocabFile)
	spm := load(t, spmVocabFile)
	tests := []struct {
		name                string
		tok                 *Tokenizer
		size                int
		bos, eos, eot       int32
		addBOS, spacePrefix bool
		eog, notEOG         []int32
		format              ChatFormat
	}{
		{"llama-bpe", bpe, 128256, 128000, 128001, 128009, true, false, []int32{128001, 128009}, []int32{128000, 128006, 0}, ChatLlama3},
		{"llama-spm", spm, 32000, 1, 2, -1, true, true, []int32{2}, []int32{0, 1, 13}, ChatPlain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.tok.Vocab()
			if tc.tok.VocabSize() != tc.size || tc.tok.BOS() != tc.bos || tc.tok.EOS() != tc.eos || tc.tok.EOT() != tc.eot ||
				v.AddBOS != tc.addBOS || v.AddSpacePrefix != tc.spacePrefix {
				t.Errorf("size %d bos %d eos %d eot %d addBOS %v prefix %v", tc.tok.VocabSize(), tc.tok.BOS(),
					tc.tok.EOS(), tc.tok.EOT(), v.AddBOS, v.AddSpacePrefix)
			}
			for _, id := range tc.eog {
				if !tc.tok.IsEOG(id) {
					t.Errorf("IsEOG(%d %q) = false", id, tc.tok.Token(id))
				}
			}
			for _, id := range tc.notEOG {
				if tc.tok.IsEOG(id) {
					t.Errorf("IsEOG(%d %q) = true", id, tc.tok.Token(id))
				}
			}
			if f := tc.tok.ChatFormat(); f != tc.format {
				t.Errorf("ChatFormat = %v, want %v", f, tc.format)
			}
		})
	}
	if got := spm.Token(15043); got != "\u2581Hello" {
		t.Errorf("Token(15043) = %q", got)
	}
	if got := spm.Token(-1) + spm.Token(32000); got != "" {
		t.Errorf("Token out of range = %q", got)
	}
}
