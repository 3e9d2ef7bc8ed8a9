package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrUnsupportedHF is wrapped by VocabFromHF's errors for a tokenizer.json
// that is well formed but that strata cannot reproduce (a model other than
// BPE, a normalizer or pre-tokenizer it does not implement).
var ErrUnsupportedHF = errors.New("unsupported Hugging Face tokenizer")

// The Hugging Face tokenizer.json subset this package reads and writes.
type (
	hfTokenizer struct {
		AddedTokens   []hfAddedToken  `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         hfModel         `json:"model"`
	}
	hfAddedToken struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	hfModel struct {
		Type         string            `json:"type"`
		UnkToken     *string           `json:"unk_token"`
		ByteFallback bool              `json:"byte_fallback"`
		FuseUnk      bool              `json:"fuse_unk"`
		IgnoreMerges bool              `json:"ignore_merges"`
		Vocab        map[string]int    `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
	}
	// hfStep is one normalizer, pre-tokenizer, processor or decoder,
	// with the fields of every kind this package knows.
	hfStep struct {
		Type          string          `json:"type"`
		Steps         []hfStep        `json:"pretokenizers"`
		Normalizers   []hfStep        `json:"normalizers"`
		Processors    []hfStep        `json:"processors"`
		Decoders      []hfStep        `json:"decoders"`
		Pattern       json.RawMessage `json:"pattern"`
		Content       string          `json:"content"`
		Prepend       string          `json:"prepend"`
		Behavior      string          `json:"behavior"`
		Invert        bool            `json:"invert"`
		UseRegex      *bool           `json:"use_regex"`
		AddPrefix     *bool           `json:"add_prefix_space"`
		Individual    *bool           `json:"individual_digits"`
		Replacement   string          `json:"replacement"`
		PrependScheme string          `json:"prepend_scheme"`
		Split         *bool           `json:"split"`
		Single        []hfTemplate    `json:"single"`
	}
	hfTemplate struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	}
	hfPattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	}
)

// stringPattern is a Replace's or Split's literal pattern ("" if none).
func (s *hfStep) stringPattern() string {
	var p hfPattern
	if json.Unmarshal(s.Pattern, &p) != nil || p.String == nil {
		return ""
	}
	return *p.String
}

// steps flattens a Sequence into its parts (nil for null).
func parseSteps(b json.RawMessage) ([]hfStep, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var s hfStep
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.Type != "Sequence" {
		return []hfStep{s}, nil
	}
	return slices.Concat(s.Steps, s.Normalizers, s.Processors, s.Decoders), nil
}

// maxHFTokens bounds the ids a tokenizer.json may use, so that one id far
// out cannot make VocabFromHF allocate gigabytes (the largest real
// vocabularies have a few hundred thousand tokens).
const maxHFTokens = 1 << 22

// qwen2Pattern is Qwen2's regex: Llama 3's with one digit per piece.
var qwen2Pattern = strings.Replace(llama3Pattern, `\p{N}{1,3}`, `\p{N}`, 1)

// specPatterns returns the regex stages of a pre-tokenizer as its
// tokenizer.json states them.
func specPatterns(s *preSpec) []string {
	switch s.llama3Digits {
	case 0:
		return s.patterns
	case 1:
		return []string{qwen2Pattern}
	}
	return []string{llama3Pattern}
}

// VocabFromHF reads a Hugging Face tokenizer.json (and, when not nil,
// tokenizer_config.json for the special tokens, add_bos_token and the chat
// template) as a Vocab of vocabSize tokens: the ids the tokenizer leaves
// unused up to the model's embedding size become "[PADn]" tokens of type
// unused, as llama.cpp's converter pads them.
//
// Two forms are read: byte-level BPE (a ByteLevel pre-tokenizer or
// decoder), whose pre-tokenizer regexes must be those of one of the
// pre-tokenizers strata implements (PreTokenizers); and SentencePiece BPE
// converted by transformers (byte_fallback, U+2581 for spaces), whose
// merge ranks become the scores llama.cpp's SentencePiece merging orders
// by. Anything else is ErrUnsupportedHF, never a silent approximation.
func VocabFromHF(tokenizerJSON, configJSON []byte, vocabSize int) (*Vocab, error) {
	v, err := vocabFromHF(tokenizerJSON, configJSON, vocabSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	return v, nil
}

func vocabFromHF(tokenizerJSON, configJSON []byte, vocabSize int) (*Vocab, error) {
	var t hfTokenizer
	if err := json.Unmarshal(tokenizerJSON, &t); err != nil {
		return nil, err
	}
	if t.Model.Type != "BPE" && !(t.Model.Type == "" && t.Model.Merges != nil) {
		return nil, fmt.Errorf("model type %q: %w (strata reads BPE tokenizers)", t.Model.Type, ErrUnsupportedHF)
	}
	n := vocabSize
	for tok, id := range t.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("token %q has negative id %d", tok, id)
		}
		n = max(n, id+1)
	}
	for _, a := range t.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("added token %q has negative id %d", a.Content, a.ID)
		}
		n = max(n, a.ID+1)
	}
	if vocabSize > 0 && n > vocabSize {
		return nil, fmt.Errorf("the tokenizer has ids up to %d but the model's vocabulary is %d", n-1, vocabSize)
	}
	if n == 0 || n > maxHFTokens {
		return nil, fmt.Errorf("vocabulary of %d tokens out of range [1, %d]", n, maxHFTokens)
	}
	v := &Vocab{BOS: -1, EOS: -1, EOT: -1, PAD: -1, UNK: -1, Tokens: make([]string, n), Types: make([]int32, n)}
	seen := make([]bool, n)
	for tok, id := range t.Model.Vocab {
		if seen[id] {
			return nil, fmt.Errorf("id %d given to %q and %q", id, v.Tokens[id], tok)
		}
		v.Tokens[id], v.Types[id], seen[id] = tok, TypeNormal, true
	}
	for _, a := range t.AddedTokens {
		if seen[a.ID] && v.Tokens[a.ID] != a.Content {
			return nil, fmt.Errorf("added token %q has the id %d of %q", a.Content, a.ID, v.Tokens[a.ID])
		}
		v.Tokens[a.ID], seen[a.ID] = a.Content, true
		v.Types[a.ID] = TypeUserDefined
		if a.Special {
			v.Types[a.ID] = TypeControl
		}
	}
	for i := range v.Tokens {
		if !seen[i] {
			v.Tokens[i], v.Types[i] = "[PAD"+strconv.Itoa(i)+"]", TypeUnused
		}
	}
	merges, err := hfMerges(t.Model.Merges)
	if err != nil {
		return nil, err
	}
	pre, err := parseSteps(t.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	dec, err := parseSteps(t.Decoder)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	byteLevel := slices.ContainsFunc(pre, func(s hfStep) bool { return s.Type == "ByteLevel" }) ||
		slices.ContainsFunc(dec, func(s hfStep) bool { return s.Type == "ByteLevel" })
	switch {
	case byteLevel:
		norm, err := parseSteps(t.Normalizer)
		if err != nil {
			return nil, fmt.Errorf("normalizer: %w", err)
		}
		for _, s := range norm {
			// Qwen's NFC is the one normalizer byte-level tokenizers
			// carry; llama.cpp does not apply it either.
			if s.Type != "NFC" {
				return nil, fmt.Errorf("normalizer %q on a byte-level tokenizer: %w", s.Type, ErrUnsupportedHF)
			}
		}
		v.Model, v.Merges = ModelGPT2, make([]string, len(merges))
		for i, m := range merges {
			v.Merges[i] = m[0] + " " + m[1]
		}
		spec, err := hfPreSpec(pre, t.Model.IgnoreMerges)
		if err != nil {
			return nil, err
		}
		v.Pre, v.AddBOS = spec.names[0], spec.addBOS
	case t.Model.ByteFallback:
		v.Model = ModelLlama
		if err := hfSentencePiece(&t, pre, v, merges); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("a BPE model that is neither byte-level nor SentencePiece with byte fallback: %w", ErrUnsupportedHF)
	}
	if t.Model.UnkToken != nil {
		v.UNK = findToken(v.Tokens, []string{*t.Model.UnkToken})
		if v.UNK >= 0 {
			v.Types[v.UNK] = TypeUnknown
		}
	}
	if err := hfSpecials(&t, configJSON, v); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if v.EOT < 0 {
		v.EOT = findToken(v.Tokens, eotCandidates)
	}
	if err := v.validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// hfMerges reads merges written as "a b" strings or as ["a", "b"] pairs
// (tokenizers 0.20 and later).
func hfMerges(raw []json.RawMessage) ([][2]string, error) {
	out := make([][2]string, len(raw))
	for i, m := range raw {
		var s string
		if json.Unmarshal(m, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("merge %d %q is not \"a b\"", i, s)
			}
			out[i] = [2]string{a, b}
			continue
		}
		var p []string
		if err := json.Unmarshal(m, &p); err != nil || len(p) != 2 {
			return nil, fmt.Errorf("merge %d is neither \"a b\" nor a pair", i)
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// hfPreSpec finds the pre-tokenizer whose regex stages are those of the
// byte-level pre-tokenizer steps: Split(Regex, Isolated) stages, Digits,
// and a ByteLevel that applies GPT-2's regex when use_regex is on.
func hfPreSpec(pre []hfStep, ignoreMerges bool) (*preSpec, error) {
	var pats []string
	for _, s := range pre {
		switch s.Type {
		case "Split":
			var p hfPattern
			if err := json.Unmarshal(s.Pattern, &p); err != nil || p.Regex == nil {
				return nil, fmt.Errorf("pre_tokenizer Split without a Regex pattern: %w", ErrUnsupportedHF)
			}
			if s.Behavior != "Isolated" || s.Invert {
				return nil, fmt.Errorf("pre_tokenizer Split with behavior %q, invert %v: %w", s.Behavior, s.Invert, ErrUnsupportedHF)
			}
			pats = append(pats, *p.Regex)
		case "Digits":
			if s.Individual == nil || !*s.Individual {
				return nil, fmt.Errorf("pre_tokenizer Digits without individual_digits: %w", ErrUnsupportedHF)
			}
			pats = append(pats, `\p{N}`)
		case "ByteLevel":
			if s.AddPrefix != nil && *s.AddPrefix {
				return nil, fmt.Errorf("pre_tokenizer ByteLevel with add_prefix_space: %w", ErrUnsupportedHF)
			}
			if s.UseRegex == nil || *s.UseRegex {
				pats = append(pats, gpt2Pattern)
			}
		default:
			return nil, fmt.Errorf("pre_tokenizer %q: %w", s.Type, ErrUnsupportedHF)
		}
	}
	var match *preSpec
	for i := range preSpecs {
		s := &preSpecs[i]
		if !slices.Equal(specPatterns(s), pats) {
			continue
		}
		if s.ignoreMerges == ignoreMerges {
			return s, nil
		}
		if match == nil {
			match = s
		}
	}
	if match == nil || match.ignoreMerges != ignoreMerges {
		return nil, fmt.Errorf("pre-tokenizer regexes %q (ignore_merges %v) are none that strata implements (%s): %w",
			pats, ignoreMerges, strings.Join(PreTokenizers(), ", "), ErrUnsupportedHF)
	}
	return match, nil
}

// spmSpace is SentencePiece's visible space, U+2581.
const spmSpace = "\u2581"

// byteToken matches SentencePiece's byte-fallback pieces.
var byteToken = regexp.MustCompile(`^<0x[0-9A-F]{2}>$`)

// hfSentencePiece reads transformers' form of a SentencePiece BPE model:
// spaces replaced by U+2581 (a normalizer, or a Metaspace that does not
// split), a prefix space when the normalizer prepends one or Metaspace's
// scheme says so, <0xXX> byte pieces, and scores from merge ranks (a
// piece made by an earlier merge scores higher).
func hfSentencePiece(t *hfTokenizer, pre []hfStep, v *Vocab, merges [][2]string) error {
	norm, err := parseSteps(t.Normalizer)
	if err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	replaced := false
	for _, s := range norm {
		switch {
		case s.Type == "Prepend" && s.Prepend == spmSpace:
			v.AddSpacePrefix = true
		case s.Type == "Replace" && s.Content == spmSpace && s.stringPattern() == " ":
			replaced = true
		default:
			return fmt.Errorf("normalizer %q: %w", s.Type, ErrUnsupportedHF)
		}
	}
	for _, s := range pre {
		if s.Type == "Split" && s.stringPattern() == " " && replaced {
			// Gemma's: a split at spaces after the normalizer replaced
			// them all cuts nothing.
			continue
		}
		if s.Type != "Metaspace" || s.Replacement != spmSpace || s.Split != nil && *s.Split {
			return fmt.Errorf("pre_tokenizer %q: %w (SentencePiece tokenizers take a Metaspace that does not split)", s.Type, ErrUnsupportedHF)
		}
		replaced = true
		v.AddSpacePrefix = s.PrependScheme == "first" || s.PrependScheme == "always" || s.PrependScheme == "" && s.AddPrefix != nil && *s.AddPrefix
	}
	if !replaced {
		return fmt.Errorf("a SentencePiece model that does not replace spaces with U+2581: %w", ErrUnsupportedHF)
	}
	id := make(map[string]int, len(v.Tokens))
	for i, tok := range v.Tokens {
		if _, dup := id[tok]; !dup {
			id[tok] = i
		}
	}
	v.Scores = make([]float32, len(v.Tokens))
	for i := range v.Scores {
		v.Scores[i] = float32(-len(merges) - 1)
	}
	for r := len(merges) - 1; r >= 0; r-- {
		if i, ok := id[merges[r][0]+merges[r][1]]; ok {
			v.Scores[i] = float32(-r)
		}
	}
	for i, tok := range v.Tokens {
		if v.Types[i] == TypeNormal && byteToken.MatchString(tok) {
			v.Types[i] = TypeByte
		}
	}
	return nil
}

// hfSpecials sets the special tokens, add_bos/add_eos and the chat
// template from tokenizer_config.json, and add_bos from the
// post-processor's template when the config does not say.
func hfSpecials(t *hfTokenizer, configJSON []byte, v *Vocab) error {
	post, err := parseSteps(t.PostProcessor)
	if err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	for _, p := range post {
		if p.Type == "TemplateProcessing" && len(p.Single) > 0 && p.Single[0].SpecialToken != nil {
			if id := findToken(v.Tokens, []string{p.Single[0].SpecialToken.ID}); id >= 0 {
				v.AddBOS, v.BOS = true, id
			}
		}
	}
	if configJSON == nil {
		return nil
	}
	var c map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &c); err != nil {
		return err
	}
	for _, s := range []struct {
		key string
		dst *int32
	}{{"bos_token", &v.BOS}, {"eos_token", &v.EOS}, {"pad_token", &v.PAD}, {"unk_token", &v.UNK}} {
		raw, ok := c[s.key]
		if !ok || string(raw) == "null" {
			continue
		}
		var text string
		if json.Unmarshal(raw, &text) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &obj); err != nil {
				return fmt.Errorf("%s is neither a string nor an added token", s.key)
			}
			text = obj.Content
		}
		id := findToken(v.Tokens, []string{text})
		if id < 0 {
			return fmt.Errorf("%s %q is not in the vocabulary", s.key, text)
		}
		*s.dst = id
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"add_bos_token", &v.AddBOS}, {"add_eos_token", &v.AddEOS}} {
		if raw, ok := c[b.key]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, b.dst); err != nil {
				return fmt.Errorf("%s is not a bool", b.key)
			}
		}
	}
	if raw, ok := c["chat_template"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &v.ChatTemplate) != nil {
			// A list of named templates: the default one.
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw, &named); err != nil {
				return errors.New("chat_template is neither a string nor a list of named templates")
			}
			for _, n := range named {
				if n.Name == "default" {
					v.ChatTemplate = n.Template
				}
			}
		}
	}
	return nil
}

// HFJSON writes v as Hugging Face's tokenizer.json and
// tokenizer_config.json, the form VocabFromHF reads: the files of a model
// directory for tests and for the synthetic models' twins. Scores of a
// SentencePiece vocabulary become merge ranks: every split of a piece
// into two pieces is a merge, ranked by the piece's score.
func HFJSON(v *Vocab) (tokenizerJSON, configJSON []byte, err error) {
	if err := v.validate(); err != nil {
		return nil, nil, fmt.Errorf("tokenizer: %w", err)
	}
	vocab := make(map[string]int, len(v.Tokens))
	var added []hfAddedToken
	for i, tok := range v.Tokens {
		if _, dup := vocab[tok]; dup {
			return nil, nil, fmt.Errorf("tokenizer: token %q appears twice; tokenizer.json maps texts to ids", tok)
		}
		vocab[tok] = i
		typ := TypeNormal
		if v.Types != nil {
			typ = v.Types[i]
		}
		if typ == TypeControl || typ == TypeUserDefined {
			added = append(added, hfAddedToken{ID: i, Content: tok, Special: typ == TypeControl})
		}
	}
	t := map[string]any{"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added}
	m := map[string]any{"type": "BPE", "dropout": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
		"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "unk_token": nil, "vocab": vocab}
	if v.UNK >= 0 {
		m["unk_token"] = v.Tokens[v.UNK]
	}
	step := func(typ string, kv ...any) map[string]any {
		s := map[string]any{"type": typ}
		for i := 0; i+1 < len(kv); i += 2 {
			s[kv[i].(string)] = kv[i+1]
		}
		return s
	}
	switch v.Model {
	case ModelGPT2:
		spec, err := lookupPre(v.Pre)
		if err != nil {
			return nil, nil, fmt.Errorf("tokenizer: %w", err)
		}
		var pre []any
		for _, p := range specPatterns(spec) {
			pre = append(pre, step("Split", "pattern", map[string]string{"Regex": p}, "behavior", "Isolated", "invert", false))
		}
		pre = append(pre, step("ByteLevel", "add_prefix_space", false, "trim_offsets", true, "use_regex", false))
		t["normalizer"] = nil
		t["pre_tokenizer"] = step("Sequence", "pretokenizers", pre)
		t["decoder"] = step("ByteLevel", "add_prefix_space", true, "trim_offsets", true, "use_regex", true)
		m["merges"], m["ignore_merges"] = v.Merges, spec.ignoreMerges
	case ModelLlama:
		var norm []any
		if v.AddSpacePrefix {
			norm = append(norm, step("Prepend", "prepend", spmSpace))
		}
		norm = append(norm, step("Replace", "pattern", map[string]string{"String": " "}, "content", spmSpace))
		t["normalizer"] = step("Sequence", "normalizers", norm)
		t["pre_tokenizer"] = nil
		t["decoder"] = step("Sequence", "decoders", []any{
			step("Replace", "pattern", map[string]string{"String": spmSpace}, "content", " "),
			step("ByteFallback"), step("Fuse")})
		m["byte_fallback"], m["fuse_unk"] = true, true
		m["merges"] = spmMerges(v, vocab)
	default:
		return nil, nil, fmt.Errorf("tokenizer: cannot write a %q tokenizer as tokenizer.json", v.Model)
	}
	t["model"] = m
	if v.AddBOS && v.BOS >= 0 {
		t["post_processor"] = step("TemplateProcessing",
			"single", []any{map[string]any{"SpecialToken": map[string]any{"id": v.Tokens[v.BOS], "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair", []any{}, "special_tokens", map[string]any{})
	} else {
		t["post_processor"] = nil
	}
	cfg := map[string]any{"add_bos_token": v.AddBOS, "add_eos_token": v.AddEOS, "tokenizer_class": "PreTrainedTokenizerFast"}
	for _, s := range []struct {
		key string
		id  int32
	}{{"bos_token", v.BOS}, {"eos_token", v.EOS}, {"pad_token", v.PAD}, {"unk_token", v.UNK}} {
		if s.id >= 0 {
			cfg[s.key] = v.Tokens[s.id]
		}
	}
	if v.ChatTemplate != "" {
		cfg["chat_template"] = v.ChatTemplate
	}
	tj, err := json.MarshalIndent(t, "", " ")
	if err != nil {
		return nil, nil, fmt.Errorf("tokenizer: %w", err)
	}
	cj, err := json.MarshalIndent(cfg, "", " ")
	if err != nil {
		return nil, nil, fmt.Errorf("tokenizer: %w", err)
	}
	return tj, cj, nil
}

// spmMerges derives a SentencePiece vocabulary's merges: every split of a
// mergeable piece into two pieces, ranked by the piece's score (highest
// first; ties by id), as transformers' converter does.
func spmMerges(v *Vocab, id map[string]int) [][2]string {
	type merge struct {
		pair  [2]string
		score float32
		id    int
	}
	var ms []merge
	for i, tok := range v.Tokens {
		if v.Types != nil && v.Types[i] != TypeNormal && v.Types[i] != TypeUserDefined && v.Types[i] != TypeUnused {
			continue
		}
		var score float32
		if v.Scores != nil {
			score = v.Scores[i]
		}
		for k := 1; k < len(tok); k++ {
			if !validSplit(tok, k) {
				continue
			}
			if _, ok := id[tok[:k]]; !ok {
				continue
			}
			if _, ok := id[tok[k:]]; !ok {
				continue
			}
			ms = append(ms, merge{[2]string{tok[:k], tok[k:]}, score, i})
		}
	}
	sort.SliceStable(ms, func(a, b int) bool {
		if ms[a].score != ms[b].score {
			return ms[a].score > ms[b].score
		}
		return ms[a].id < ms[b].id
	})
	out := make([][2]string, len(ms))
	for i, m := range ms {
		out[i] = m.pair
	}
	return out
}

// validSplit reports whether byte k of s starts a UTF-8 character.
func validSplit(s string, k int) bool { return s[k]&0xC0 != 0x80 }
