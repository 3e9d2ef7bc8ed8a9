package tokenizer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/strata-llm/strata/engine/gguf"
)

// Token types as stored in tokenizer.ggml.token_type (llama.cpp's
// llama_token_type enum).
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Tokenizer model names (tokenizer.ggml.model) supported by this package.
const (
	ModelGPT2  = "gpt2"  // byte-level BPE with merges
	ModelLlama = "llama" // SentencePiece BPE with scores
)

// GGUF metadata keys read by VocabFromGGUF.
const (
	keyModel          = "tokenizer.ggml.model"
	keyPre            = "tokenizer.ggml.pre"
	keyTokens         = "tokenizer.ggml.tokens"
	keyTokenType      = "tokenizer.ggml.token_type"
	keyMerges         = "tokenizer.ggml.merges"
	keyScores         = "tokenizer.ggml.scores"
	keyBOS            = "tokenizer.ggml.bos_token_id"
	keyEOS            = "tokenizer.ggml.eos_token_id"
	keyEOT            = "tokenizer.ggml.eot_token_id"
	keyPAD            = "tokenizer.ggml.padding_token_id"
	keyUNK            = "tokenizer.ggml.unknown_token_id"
	keyAddBOS         = "tokenizer.ggml.add_bos_token"
	keyAddEOS         = "tokenizer.ggml.add_eos_token"
	keyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	keyChatTemplate   = "tokenizer.chat_template"
)

// Vocab is the tokenizer description stored in a GGUF file, with llama.cpp's
// per-model defaults already applied. It can also be built by hand (tests,
// converters) and passed to New.
type Vocab struct {
	// Model is the tokenizer family: ModelGPT2 or ModelLlama.
	Model string
	// Pre names the BPE pre-tokenizer (tokenizer.ggml.pre), e.g. "llama-bpe".
	// Only meaningful for ModelGPT2.
	Pre string
	// Tokens holds the text of every token; the index is the token id.
	Tokens []string
	// Scores holds SentencePiece merge scores (nil or one per token).
	Scores []float32
	// Types holds llama token types (nil or one per token): 1 normal,
	// 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
	Types []int32
	// Merges holds BPE merges "left right" in rank order (ModelGPT2).
	Merges []string
	// Special token ids; -1 when the vocabulary has no such token.
	BOS, EOS, EOT, PAD, UNK int32
	// AddBOS and AddEOS say whether Encode with addSpecial adds BOS/EOS.
	AddBOS, AddEOS bool
	// AddSpacePrefix makes SentencePiece prepend a space to text that
	// starts the input or follows a special token.
	AddSpacePrefix bool
	// ChatTemplate is the Jinja chat template (tokenizer.chat_template), if any.
	ChatTemplate string
	// Warnings lists what VocabFromGGUF ignored or assumed in the file (a
	// special-token id out of range, no pre-tokenizer name), for the
	// loader to log: real files carry such quirks and still run.
	Warnings []string
}

// metadata is the subset of *gguf.File that VocabFromGGUF needs; it lets the
// tests feed hand-made (and malformed) metadata without writing GGUF files.
type metadata interface {
	String(key string) (string, bool)
	Bool(key string) (bool, bool)
	Strings(key string) ([]string, bool)
	Float32s(key string) ([]float32, bool)
	Int32s(key string) ([]int32, bool)
	Lookup(key string) (any, bool)
}

// VocabFromGGUF reads the tokenizer.ggml.* keys and tokenizer.chat_template
// from a GGUF file and applies llama.cpp's defaults for absent keys:
//
//   - "llama" (SentencePiece): BOS 1, EOS 2, UNK 0, AddBOS true, AddEOS false,
//     AddSpacePrefix true.
//   - "gpt2" (BPE): BOS and EOS 11 (llama.cpp's historical default; no BOS
//     for GLM-4), no UNK, AddSpacePrefix false, AddBOS true only for the
//     pre-tokenizers that llama.cpp says add it (Llama 3's family, Tekken,
//     Chameleon). A missing tokenizer.ggml.pre means "default" (with a
//     warning); an unknown one is an error naming it.
//   - EOT, when tokenizer.ggml.eot_token_id is absent, is the first token
//     found among "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
//     "<|endoftext|>", "<EOT>" (so Llama 3 gets <|eot_id|> and Gemma
//     <end_of_turn>).
//
// Defaults that fall outside the vocabulary become -1. A special-token id
// outside the vocabulary (UINT32_MAX is a common way to write "none") is
// ignored with a warning in Vocab.Warnings and the default kept, as
// llama.cpp does. Missing tokens or merges, arrays whose lengths disagree
// with the token list and keys of the wrong type are errors. All strings are copied, so
// the result stays valid after the file is closed or unmapped.
func VocabFromGGUF(f *gguf.File) (*Vocab, error) {
	if f == nil {
		return nil, errors.New("tokenizer: nil gguf file")
	}
	v, err := vocabFromMetadata(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocab: %w", err)
	}
	return v, nil
}

// FromGGUFFile reads the vocabulary in the header of the GGUF file at path
// (none of its tensors) and builds a Tokenizer.
func FromGGUFFile(path string) (*Tokenizer, error) {
	f, err := gguf.ReadHeader(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", path, err)
	}
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", path, err)
	}
	t, err := New(v)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", path, err)
	}
	return t, nil
}

// eotCandidates are the token texts llama.cpp recognizes as end-of-turn when
// the GGUF has no eot_token_id, in the order this package tries them.
var eotCandidates = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
	"<\uff5cend\u2581of\u2581sentence\uff5c>", // DeepSeek
}

func vocabFromMetadata(md metadata) (*Vocab, error) {
	v := &Vocab{BOS: -1, EOS: -1, EOT: -1, PAD: -1, UNK: -1}

	model, ok := md.String(keyModel)
	if !ok {
		if _, present := md.Lookup(keyModel); present {
			return nil, fmt.Errorf("%s is not a string", keyModel)
		}
		return nil, fmt.Errorf("missing %s", keyModel)
	}
	v.Model = strings.Clone(model)
	if pre, ok := md.String(keyPre); ok {
		v.Pre = strings.Clone(pre)
	} else if _, present := md.Lookup(keyPre); present {
		return nil, fmt.Errorf("%s is not a string", keyPre)
	}

	tokens, ok := md.Strings(keyTokens)
	if !ok {
		if _, present := md.Lookup(keyTokens); present {
			return nil, fmt.Errorf("%s is not a string array", keyTokens)
		}
		return nil, fmt.Errorf("missing %s", keyTokens)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s is empty", keyTokens)
	}
	if int64(len(tokens)) > int64(1)<<31-1 {
		return nil, fmt.Errorf("%s has %d entries, more than int32 ids allow", keyTokens, len(tokens))
	}
	v.Tokens = cloneStrings(tokens)
	n := len(v.Tokens)

	if types, ok := md.Int32s(keyTokenType); ok {
		if len(types) != n {
			return nil, fmt.Errorf("%s has %d entries, want %d (one per token)", keyTokenType, len(types), n)
		}
		v.Types = append([]int32(nil), types...)
		bad, first := 0, -1
		for i, t := range v.Types {
			if t < TypeUndefined || t > TypeByte {
				if bad == 0 {
					first = i
				}
				bad++
				v.Types[i] = TypeUndefined
			}
		}
		if bad > 0 {
			// llama.cpp reads a type it does not know as undefined.
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s: %d tokens have an unknown type (the first, token %d, has %d); treating them as undefined",
				keyTokenType, bad, first, types[first]))
		}
	} else if _, present := md.Lookup(keyTokenType); present {
		return nil, fmt.Errorf("%s is not an int32 array", keyTokenType)
	}
	if scores, ok := md.Float32s(keyScores); ok {
		if len(scores) != n {
			return nil, fmt.Errorf("%s has %d entries, want %d (one per token)", keyScores, len(scores), n)
		}
		v.Scores = append([]float32(nil), scores...)
	} else if _, present := md.Lookup(keyScores); present {
		return nil, fmt.Errorf("%s is not a float32 array", keyScores)
	}

	switch v.Model {
	case ModelLlama:
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS = true
		v.AddSpacePrefix = true
	case ModelGPT2:
		merges, ok := md.Strings(keyMerges)
		if !ok {
			if _, present := md.Lookup(keyMerges); present {
				return nil, fmt.Errorf("%s is not a string array", keyMerges)
			}
			return nil, fmt.Errorf("missing %s (required by the %q tokenizer)", keyMerges, ModelGPT2)
		}
		v.Merges = cloneStrings(merges)
		if _, present := md.Lookup(keyPre); !present {
			v.Pre = "default"
			v.Warnings = append(v.Warnings, fmt.Sprintf("no %s: using llama.cpp's \"default\" pre-tokenizer, which may cut text differently from the model's own", keyPre))
		}
		spec, err := lookupPre(v.Pre)
		if err != nil {
			return nil, err
		}
		v.BOS, v.EOS = 11, 11
		if spec.noBOS {
			v.BOS = -1
		}
		v.AddBOS = spec.addBOS
	default:
		return nil, fmt.Errorf("unsupported tokenizer model %q (want %q or %q)", v.Model, ModelGPT2, ModelLlama)
	}
	// Defaults that do not fit this vocabulary mean "absent".
	for _, id := range []*int32{&v.BOS, &v.EOS, &v.UNK} {
		if *id >= int32(n) {
			*id = -1
		}
	}

	ids := []struct {
		key string
		dst *int32
	}{
		{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyEOT, &v.EOT}, {keyPAD, &v.PAD}, {keyUNK, &v.UNK},
	}
	for _, e := range ids {
		raw, present := md.Lookup(e.key)
		if !present {
			continue
		}
		id, err := tokenID(raw, n)
		if errors.Is(err, errTokenRange) {
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s: %v; keeping the default %d", e.key, err, *e.dst))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
		*e.dst = id
	}
	if v.EOT < 0 {
		v.EOT = findToken(v.Tokens, eotCandidates)
	}

	for _, b := range []struct {
		key string
		dst *bool
	}{
		{keyAddBOS, &v.AddBOS}, {keyAddEOS, &v.AddEOS}, {keyAddSpacePrefix, &v.AddSpacePrefix},
	} {
		val, ok := md.Bool(b.key)
		if !ok {
			if _, present := md.Lookup(b.key); present {
				return nil, fmt.Errorf("%s is not a bool", b.key)
			}
			continue
		}
		*b.dst = val
	}

	if tmpl, ok := md.String(keyChatTemplate); ok {
		v.ChatTemplate = strings.Clone(tmpl)
	} else if _, present := md.Lookup(keyChatTemplate); present {
		return nil, fmt.Errorf("%s is not a string", keyChatTemplate)
	}

	if err := v.validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// errTokenRange marks an integer that is no token id of the vocabulary.
var errTokenRange = errors.New("out of range")

// tokenID converts a GGUF integer value to a token id in [0, n).
func tokenID(raw any, n int) (int32, error) {
	var id int64
	switch x := raw.(type) {
	case uint8:
		id = int64(x)
	case uint16:
		id = int64(x)
	case uint32:
		id = int64(x)
	case uint64:
		if x > uint64(n) {
			return 0, fmt.Errorf("token id %d %w [0, %d)", x, errTokenRange, n)
		}
		id = int64(x)
	case int8:
		id = int64(x)
	case int16:
		id = int64(x)
	case int32:
		id = int64(x)
	case int64:
		id = x
	default:
		return 0, fmt.Errorf("value of type %T is not an integer", raw)
	}
	if id < 0 || id >= int64(n) {
		return 0, fmt.Errorf("token id %d %w [0, %d)", id, errTokenRange, n)
	}
	return int32(id), nil
}

// findToken returns the id of the first of names present in tokens, or -1.
func findToken(tokens []string, names []string) int32 {
	want := make(map[string]int, len(names))
	for i, s := range names {
		want[s] = i
	}
	best, bestRank := int32(-1), len(names)
	for id, s := range tokens {
		if r, ok := want[s]; ok && r < bestRank {
			best, bestRank = int32(id), r
		}
	}
	return best
}

func cloneStrings(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.Clone(s)
	}
	return out
}

// validate checks the internal consistency New relies on.
func (v *Vocab) validate() error {
	if v == nil {
		return errors.New("nil vocab")
	}
	switch v.Model {
	case ModelGPT2, ModelLlama:
	default:
		return fmt.Errorf("unsupported tokenizer model %q (want %q or %q)", v.Model, ModelGPT2, ModelLlama)
	}
	n := len(v.Tokens)
	if n == 0 {
		return errors.New("vocabulary has no tokens")
	}
	if int64(n) > int64(1)<<31-1 {
		return fmt.Errorf("vocabulary has %d tokens, more than int32 ids allow", n)
	}
	if v.Types != nil && len(v.Types) != n {
		return fmt.Errorf("%d token types for %d tokens", len(v.Types), n)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return fmt.Errorf("%d scores for %d tokens", len(v.Scores), n)
	}
	for i, t := range v.Types {
		if t < TypeUndefined || t > TypeByte {
			return fmt.Errorf("token %d (%q) has unknown type %d", i, v.Tokens[i], t)
		}
	}
	for _, s := range []struct {
		name string
		id   int32
	}{{"BOS", v.BOS}, {"EOS", v.EOS}, {"EOT", v.EOT}, {"PAD", v.PAD}, {"UNK", v.UNK}} {
		if s.id < -1 || s.id >= int32(n) {
			return fmt.Errorf("%s token id %d out of range [0, %d)", s.name, s.id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return errors.New("vocabulary asks to add BOS but has no BOS token")
	}
	if v.AddEOS && v.EOS < 0 {
		return errors.New("vocabulary asks to add EOS but has no EOS token")
	}
	if v.Model == ModelGPT2 {
		for i, m := range v.Merges {
			if mergeSplit(m) <= 0 {
				return fmt.Errorf("merge %d %q is not of the form \"left right\"", i, m)
			}
		}
	}
	return nil
}

// mergeSplit returns the index of the space separating a merge's two halves
// (llama.cpp splits at the first space after the first byte), or -1.
func mergeSplit(m string) int {
	if len(m) < 3 {
		return -1
	}
	i := strings.IndexByte(m[1:], ' ')
	if i < 0 || i+2 >= len(m) {
		return -1
	}
	return i + 1
}
