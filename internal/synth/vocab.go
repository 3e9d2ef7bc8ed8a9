package synth

import (
	_ "embed"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// corpus is a few KB of English prose (written for strata) from which the
// synthetic tokenizers learn their first merges, so that ordinary text
// tokenizes into plausible word pieces rather than single bytes.
//
//go:embed corpus.txt
var corpus string

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// Vocab is a synthetic tokenizer as stored in GGUF metadata.
type Vocab struct {
	// Model is tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama"
	// (SentencePiece).
	Model string
	// Pre is tokenizer.ggml.pre ("" when absent).
	Pre    string
	Tokens []string
	Types  []int32
	// Merges are the BPE merges "a b" in rank order (gpt2 only).
	Merges []string
	// Scores are the SentencePiece scores (llama/SPM only).
	Scores []float32
	BOS    int
	EOS    int
	// PAD and UNK are -1 when the vocabulary has none.
	PAD, UNK int
	// NoBOS makes tokenizer.ggml.add_bos_token false (Qwen prepends
	// nothing).
	NoBOS bool
	// AddSpacePrefix is tokenizer.ggml.add_space_prefix (SPM only).
	AddSpacePrefix bool
	ChatTemplate   string
}

// vocabRand is a fixed-seed generator for filler tokens: the vocabulary of
// a shape is the same for every model seed, as a real model family shares
// one tokenizer.
type vocabRand uint64

func (r *vocabRand) intn(n int) int {
	*r += 0x9e3779b97f4a7c15
	return int(mix64(uint64(*r)) % uint64(n))
}

// maxFillerRunes bounds filler token length so fillers look like tokens.
const maxFillerRunes = 16

// maxFillerFails bounds consecutive rejected filler candidates; the
// candidate space is far larger than any vocabulary, so hitting it means a
// bug, reported as an error rather than a hang.
const maxFillerFails = 1 << 20

// fillerPick returns the index of a filler's first half: half of the time
// a learned token in [lo, learned), otherwise any token in [lo, n), so the
// candidate space grows with the vocabulary while typical lengths stay
// short.
func fillerPick(r *vocabRand, lo, learned, n int) int {
	if r.intn(2) == 0 {
		return lo + r.intn(learned-lo)
	}
	return lo + r.intn(n-lo)
}

// byteUnicode is GPT-2's bytes_to_unicode table: printable Latin-1 bytes
// map to themselves, the rest to U+0100 upwards, so every byte has a
// visible, non-space character. byteOrder lists the bytes in the order the
// table is built (printable ranges first), which is also the order of the
// first 256 Llama 3 tokens.
var byteUnicode, byteOrder = func() ([256]rune, []byte) {
	var table [256]rune
	var order []byte
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	for b := 0; b < 256; b++ {
		if printable(b) {
			table[b] = rune(b)
			order = append(order, byte(b))
		}
	}
	n := 0
	for b := 0; b < 256; b++ {
		if !printable(b) {
			table[b] = rune(256 + n)
			n++
			order = append(order, byte(b))
		}
	}
	return table, order
}()

// byteLevel maps a string's bytes to GPT-2's unicode form.
func byteLevel(s string) []string {
	out := make([]string, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = string(byteUnicode[s[i]])
	}
	return out
}

// preSplit cuts text into pre-tokens roughly as Llama 3's regex does:
// an optional leading space joined to a run of letters (with apostrophes),
// digits in runs of up to three, an optional space joined to punctuation,
// and runs of other whitespace.
func preSplit(text string) []string {
	var out []string
	rs := []rune(text)
	for i := 0; i < len(rs); {
		start := i
		if rs[i] == ' ' && i+1 < len(rs) && !unicode.IsSpace(rs[i+1]) {
			i++
		}
		switch r := rs[i]; {
		case unicode.IsLetter(r):
			for i < len(rs) && (unicode.IsLetter(rs[i]) || rs[i] == '\'') {
				i++
			}
		case unicode.IsDigit(r):
			for n := 0; i < len(rs) && unicode.IsDigit(rs[i]) && n < 3; n++ {
				i++
			}
		case unicode.IsSpace(r):
			for i < len(rs) && unicode.IsSpace(rs[i]) {
				i++
			}
		default:
			for i < len(rs) && !unicode.IsSpace(rs[i]) && !unicode.IsLetter(rs[i]) && !unicode.IsDigit(rs[i]) {
				i++
			}
		}
		out = append(out, string(rs[start:i]))
	}
	return out
}

// learnMerges runs BPE training: words (each a sequence of symbols, with a
// count) are merged pairwise, most frequent adjacent pair first (ties
// broken by the pair's text, for determinism), until max merges are made or
// no pair occurs at least minCount times. It returns the merged pairs in
// order.
func learnMerges(words map[string]int, split func(string) []string, max, minCount int) [][2]string {
	type word struct {
		syms []string
		n    int
	}
	keys := make([]string, 0, len(words))
	for w := range words {
		keys = append(keys, w)
	}
	sort.Strings(keys)
	ws := make([]word, len(keys))
	for i, k := range keys {
		ws[i] = word{split(k), words[k]}
	}
	var merges [][2]string
	counts := map[[2]string]int{}
	for len(merges) < max {
		clear(counts)
		for _, w := range ws {
			for j := 0; j+1 < len(w.syms); j++ {
				counts[[2]string{w.syms[j], w.syms[j+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range counts {
			if n > bestN || (n == bestN && p[0]+" "+p[1] < best[0]+" "+best[1]) {
				best, bestN = p, n
			}
		}
		if bestN < minCount {
			break
		}
		merges = append(merges, best)
		joined := best[0] + best[1]
		for wi := range ws {
			s := ws[wi].syms
			out := s[:0]
			for j := 0; j < len(s); j++ {
				if j+1 < len(s) && s[j] == best[0] && s[j+1] == best[1] {
					out = append(out, joined)
					j++
				} else {
					out = append(out, s[j])
				}
			}
			ws[wi].syms = out
		}
	}
	return merges
}

// llama3Special returns the name of Llama 3.1's special token at offset k
// of the special range (k = id - 128000 in the real vocabulary).
func llama3Special(k int) string {
	switch k {
	case 0:
		return "<|begin_of_text|>"
	case 1:
		return "<|end_of_text|>"
	case 2, 3:
		return fmt.Sprintf("<|reserved_special_token_%d|>", k-2)
	case 4:
		return "<|finetune_right_pad_id|>"
	case 5:
		return "<|reserved_special_token_2|>"
	case 6:
		return "<|start_header_id|>"
	case 7:
		return "<|end_header_id|>"
	case 8:
		return "<|eom_id|>"
	case 9:
		return "<|eot_id|>"
	case 10:
		return "<|python_tag|>"
	}
	return fmt.Sprintf("<|reserved_special_token_%d|>", k-8)
}

// llamaChatTemplate follows the Llama 3 prompt format: each message is
// <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, after the
// begin-of-text token.
const llamaChatTemplate = `{{- bos_token }}
{%- for message in messages %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}`

// gemmaChatTemplate follows the Gemma prompt format: each turn is
// <start_of_turn>role\ncontent<end_of_turn>\n, with "assistant" spelled
// "model".
const gemmaChatTemplate = `{{- bos_token }}
{%- for message in messages %}
{%- if message['role'] == 'assistant' %}
{%- set role = 'model' %}
{%- else %}
{%- set role = message['role'] %}
{%- endif %}
{{- '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<start_of_turn>model\n' }}
{%- endif %}`

// qwenSpecials are Qwen 2.5's first special tokens, in id order after the
// byte-level BPE pieces.
var qwenSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
	"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
	"<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
	"<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}

// qwenSpecial returns the name of the special token at offset k of the
// special range.
func qwenSpecial(k int) string {
	if k < len(qwenSpecials) {
		return qwenSpecials[k]
	}
	return fmt.Sprintf("<|extra_%d|>", k-len(qwenSpecials))
}

// qwenChatTemplate is ChatML, Qwen's prompt format: each message is
// <|im_start|>role\ncontent<|im_end|>\n.
const qwenChatTemplate = `{%- for message in messages %}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}`

// QwenVocab is BPEVocab with Qwen's pre-tokenizer ("qwen2"), special
// tokens and chat template: <|endoftext|> is BOS (never added, as in
// Qwen's GGUFs) and <|im_end|> EOS.
func QwenVocab(n int) (*Vocab, error) {
	v, err := BPEVocab(n)
	if err != nil {
		return nil, err
	}
	base := v.BOS
	if err := renameSpecials(v, "Qwen special token", qwenSpecial); err != nil {
		return nil, err
	}
	v.Pre, v.ChatTemplate, v.NoBOS = "qwen2", qwenChatTemplate, true
	v.BOS, v.EOS = base, base+2
	return v, nil
}

// renameSpecials gives BPEVocab's special tokens (from v.BOS on) the
// family's names, name(k) for the k-th, refusing a name that is also a
// learned piece (what names them, kind, says in the error).
func renameSpecials(v *Vocab, kind string, name func(k int) string) error {
	base := v.BOS
	seen := make(map[string]struct{}, len(v.Tokens))
	for _, t := range v.Tokens[:base] {
		seen[t] = struct{}{}
	}
	for k := base; k < len(v.Tokens); k++ {
		t := name(k - base)
		if _, dup := seen[t]; dup {
			return fmt.Errorf("synth: internal error: %s %q is also a piece", kind, t)
		}
		seen[t] = struct{}{}
		v.Tokens[k] = t
	}
	return nil
}

// mistralSpecials are Tekken's first control tokens (Mistral Nemo).
var mistralSpecials = []string{"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
	"[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]"}

// mistralChatTemplate follows Mistral's instruct format:
// <s>[INST]user[/INST]assistant</s>.
const mistralChatTemplate = `{{- bos_token }}
{%- for message in messages %}
{%- if message['role'] == 'user' %}
{{- '[INST]' + message['content'] + '[/INST]' }}
{%- elif message['role'] == 'assistant' %}
{{- message['content'] + eos_token }}
{%- endif %}
{%- endfor %}`

// MistralVocab is BPEVocab with Tekken's pre-tokenizer and control tokens
// (<s> is BOS, </s> EOS) and Mistral's chat template.
func MistralVocab(n int) (*Vocab, error) {
	v, err := BPEVocab(n)
	if err != nil {
		return nil, err
	}
	base := v.BOS
	err = renameSpecials(v, "Mistral control token", func(k int) string {
		if k < len(mistralSpecials) {
			return mistralSpecials[k]
		}
		return fmt.Sprintf("<SPECIAL_%d>", k)
	})
	if err != nil {
		return nil, err
	}
	v.Pre, v.ChatTemplate = "tekken", mistralChatTemplate
	v.BOS, v.EOS = base+1, base+2
	return v, nil
}

// BPEVocab builds the byte-level BPE vocabulary of a llama shape with n
// tokens: the 256 byte tokens (GPT-2 unicode form, in bytes_to_unicode
// order), merges learned from the embedded corpus, then — when the corpus
// runs out before the base size — filler merges of random pairs of earlier
// tokens, then Llama 3.1's special tokens in the last slots (256 of them
// for a full-size vocabulary, 16 for small ones). bos is
// <|begin_of_text|>, eos <|eot_id|>.
func BPEVocab(n int) (*Vocab, error) {
	nSpecial := 256
	if n < 128256 {
		nSpecial = 16
	}
	base := n - nSpecial
	if base < 256 {
		return nil, fmt.Errorf("synth: BPE vocabulary of %d tokens is too small", n)
	}
	v := &Vocab{Model: "gpt2", Pre: "llama-bpe", PAD: -1, UNK: -1, ChatTemplate: llamaChatTemplate}
	v.Tokens = make([]string, 0, n)
	v.Types = make([]int32, 0, n)
	v.Merges = make([]string, 0, base-256)
	seen := make(map[string]struct{}, n)
	add := func(tok string, typ int32) {
		seen[tok] = struct{}{}
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
	}
	for _, b := range byteOrder {
		add(string(byteUnicode[b]), TokenNormal)
	}
	words := map[string]int{}
	for _, w := range preSplit(corpus) {
		words[w]++
	}
	split := func(w string) []string { return byteLevel(w) }
	for _, m := range learnMerges(words, split, base-256, 2) {
		tok := m[0] + m[1]
		if _, dup := seen[tok]; dup {
			continue
		}
		v.Merges = append(v.Merges, m[0]+" "+m[1])
		add(tok, TokenNormal)
	}
	learned := len(v.Tokens)
	rng := vocabRand(0x5eed)
	for fails := 0; len(v.Tokens) < base; {
		a, b := v.Tokens[fillerPick(&rng, 0, learned, len(v.Tokens))], v.Tokens[rng.intn(learned)]
		tok := a + b
		if _, dup := seen[tok]; dup || utf8.RuneCountInString(tok) > maxFillerRunes {
			if fails++; fails > maxFillerFails {
				return nil, fmt.Errorf("synth: internal error: cannot find new filler merges after %d tokens", len(v.Tokens))
			}
			continue
		}
		fails = 0
		v.Merges = append(v.Merges, a+" "+b)
		add(tok, TokenNormal)
	}
	for k := 0; k < nSpecial; k++ {
		add(llama3Special(k), TokenControl)
	}
	v.BOS, v.EOS = base, base+9
	if len(seen) != n {
		return nil, fmt.Errorf("synth: internal error: BPE vocabulary has %d unique tokens, want %d", len(seen), n)
	}
	return v, nil
}

// spmSpace is SentencePiece's visible space, U+2581.
const spmSpace = "\u2581"

// SPMVocab builds the SentencePiece vocabulary of a gemma2 shape with n
// tokens: <pad>, <eos>, <bos>, <unk>, <start_of_turn>, <end_of_turn>, the
// 256 byte tokens <0x00>..<0xFF>, then the corpus's characters (most
// frequent first) and BPE merges learned on it with spaces written as ▁,
// then unique filler pieces joining two earlier pieces. Pieces score minus
// their rank; special and byte tokens score 0.
func SPMVocab(n int) (*Vocab, error) {
	v := &Vocab{Model: "llama", PAD: 0, EOS: 1, BOS: 2, UNK: 3, ChatTemplate: gemmaChatTemplate}
	return spmVocab(n, v, []spmSpecial{{"<pad>", TokenControl}, {"<eos>", TokenControl}, {"<bos>", TokenControl}, {"<unk>", TokenUnknown},
		{"<start_of_turn>", TokenControl}, {"<end_of_turn>", TokenControl}})
}

// spmSpecial is one of a SentencePiece vocabulary's leading special
// tokens.
type spmSpecial struct {
	tok string
	typ int32
}

// phiChatTemplate follows Phi-3's prompt format: <|role|>\ncontent<|end|>\n.
const phiChatTemplate = `{%- for message in messages %}
{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|assistant|>\n' }}
{%- endif %}`

// PhiVocab is a SentencePiece vocabulary with Phi-3's special tokens
// (<unk>, <s> as BOS, </s>, <|endoftext|> as EOS and padding, and the chat
// roles), its space prefix and chat template.
func PhiVocab(n int) (*Vocab, error) {
	v := &Vocab{Model: "llama", UNK: 0, BOS: 1, EOS: 3, PAD: 3, AddSpacePrefix: true, ChatTemplate: phiChatTemplate}
	return spmVocab(n, v, []spmSpecial{{"<unk>", TokenUnknown}, {"<s>", TokenControl}, {"</s>", TokenControl},
		{"<|endoftext|>", TokenControl}, {"<|user|>", TokenControl}, {"<|assistant|>", TokenControl}, {"<|end|>", TokenControl}})
}

// spmVocab fills v with n SentencePiece pieces: the specials, the 256 byte
// tokens, then pieces learned from the corpus and fillers (SPMVocab).
func spmVocab(n int, v *Vocab, specials []spmSpecial) (*Vocab, error) {
	v.Tokens = make([]string, 0, n)
	v.Types = make([]int32, 0, n)
	v.Scores = make([]float32, 0, n)
	seen := make(map[string]struct{}, n)
	rank := 0
	add := func(tok string, typ int32) bool {
		if _, dup := seen[tok]; dup {
			return false
		}
		seen[tok] = struct{}{}
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
		score := float32(0)
		if typ == TokenNormal {
			score = -float32(rank)
			rank++
		}
		v.Scores = append(v.Scores, score)
		return true
	}
	for _, s := range specials {
		add(s.tok, s.typ)
	}
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), TokenByte)
	}
	if len(v.Tokens) >= n {
		return nil, fmt.Errorf("synth: SentencePiece vocabulary of %d tokens is too small", n)
	}

	text := strings.ReplaceAll(corpus, " ", spmSpace)
	charCount := map[string]int{}
	for _, r := range text {
		charCount[string(r)]++
	}
	chars := sortedKeys(charCount)
	sort.SliceStable(chars, func(i, j int) bool { return charCount[chars[i]] > charCount[chars[j]] })
	for _, c := range chars {
		if len(v.Tokens) < n {
			add(c, TokenNormal)
		}
	}
	// Words: a ▁ followed by non-space characters, or a run of newlines.
	words := map[string]int{}
	for _, line := range strings.SplitAfter(text, "\n") {
		body := strings.TrimRight(line, "\n")
		for _, w := range strings.Split(strings.ReplaceAll(body, spmSpace, "\x00"+spmSpace), "\x00") {
			if w != "" {
				words[w]++
			}
		}
		if len(body) < len(line) {
			words["\n"]++
		}
	}
	delete(words, "")
	split := func(w string) []string {
		var out []string
		for _, r := range w {
			out = append(out, string(r))
		}
		return out
	}
	for _, m := range learnMerges(words, split, n-len(v.Tokens), 2) {
		if len(v.Tokens) >= n {
			break
		}
		add(m[0]+m[1], TokenNormal)
	}
	first := len(specials) + 256
	learned := len(v.Tokens)
	rng := vocabRand(0x5eed5)
	for fails := 0; len(v.Tokens) < n; {
		tok := v.Tokens[fillerPick(&rng, first, learned, len(v.Tokens))] + v.Tokens[first+rng.intn(learned-first)]
		if utf8.RuneCountInString(tok) > maxFillerRunes || !add(tok, TokenNormal) {
			if fails++; fails > maxFillerFails {
				return nil, fmt.Errorf("synth: internal error: cannot find new filler pieces after %d tokens", len(v.Tokens))
			}
			continue
		}
		fails = 0
	}
	return v, nil
}

// VocabFor returns the tokenizer of shape s.
func VocabFor(s Shape) (*Vocab, error) {
	switch s.family() {
	case "mistral":
		return MistralVocab(s.Vocab)
	case "llama":
		return BPEVocab(s.Vocab)
	case "gemma2", "gemma3":
		return SPMVocab(s.Vocab)
	case "phi3":
		return PhiVocab(s.Vocab)
	case "qwen2", "qwen3", "qwen3moe":
		return QwenVocab(s.Vocab)
	}
	return nil, fmt.Errorf("synth: no tokenizer for architecture %q", s.Arch)
}
