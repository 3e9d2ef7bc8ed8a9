package tokenizer

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids to text for one
// vocabulary. It is immutable after New and safe for concurrent use.
type Tokenizer struct {
	vocab Vocab // private copy; slices are not modified

	spm          bool          // SentencePiece (ModelLlama) rather than byte-level BPE
	pre          *preTokenizer // BPE: how raw text is cut before merging
	ignoreMerges bool          // Llama 3, Tekken: a pre-token that is a whole token is emitted as is

	types  []int32 // effective token types (control-looking tokens forced to control)
	scores []float32
	toID   map[string]int32
	ranks  map[string]int32 // "left right" -> merge rank (BPE)

	byteTok [256]int32 // SPM byte fallback token per byte, -1 if none
	// beforeSpace holds the characters that precede U+2581 inside some
	// token (SPM); see encodeSPM.
	beforeSpace map[rune]bool
	noSPMCut    bool // tests: merge whole fragments, as llama.cpp does
	unk         int32

	// special tokens split out of the text before tokenization, longest
	// first; specialFirst marks bytes that start at least one of them.
	specials     []int32
	specialFirst [256]bool
	trie         []trieNode

	eog map[int32]bool

	pieceData []byte   // concatenated decoded pieces
	pieceOff  []uint32 // piece i is pieceData[pieceOff[i]:pieceOff[i+1]]

	bpePool sync.Pool // *bpeState
	spmPool sync.Pool // *spmState

	// chatLimits replaces DefaultChatLimits for this vocabulary (tests).
	chatLimits *ChatLimits
}

// eogTexts are the token texts llama.cpp treats as end of generation in
// addition to EOS and EOT.
var eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"}

// New builds a Tokenizer from a vocabulary. The vocabulary is validated
// (model, array lengths, token types, special ids, merge syntax) and its
// slices must not be modified afterwards.
//
// For ModelGPT2, v.Pre selects the pre-tokenizer (PreTokenizers lists the
// names; "" means llama.cpp's "default"); an unknown name is an error, as
// cutting text differently from the model's own tokenizer gives it ids it
// was never trained on.
//
// As in llama.cpp, tokens whose text is an end-of-turn marker
// ("<|eot_id|>", "<end_of_turn>", ...) are treated as control tokens even if
// the vocabulary types them otherwise.
func New(v *Vocab) (*Tokenizer, error) {
	if err := v.validate(); err != nil {
		return nil, fmt.Errorf("tokenizer: invalid vocab: %w", err)
	}
	n := len(v.Tokens)
	var (
		pre          *preTokenizer
		ignoreMerges bool
	)
	if v.Model == ModelGPT2 {
		name := v.Pre
		if name == "" {
			name = "default"
		}
		spec, err := lookupPre(name)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if pre, err = compiledPre(spec); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		ignoreMerges = spec.ignoreMerges
	}
	t := &Tokenizer{
		vocab:        *v,
		spm:          v.Model == ModelLlama,
		pre:          pre,
		ignoreMerges: ignoreMerges,
		scores:       v.Scores,
		unk:          v.UNK,
		toID:         make(map[string]int32, n),
		eog:          map[int32]bool{},
	}
	t.types = make([]int32, n)
	for i, s := range v.Tokens {
		if v.Types != nil {
			t.types[i] = v.Types[i]
		} else {
			t.types[i] = TypeNormal
		}
		if s == "" {
			// llama.cpp's placeholder keeps the text-to-id map one to one.
			s = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		t.toID[s] = int32(i) // later duplicates win, as in llama.cpp
	}

	for _, s := range eogTexts {
		if id, ok := t.toID[s]; ok {
			t.eog[id] = true
			t.types[id] = TypeControl
		}
	}
	for _, id := range []int32{v.EOS, v.EOT} {
		if id >= 0 {
			t.eog[id] = true
		}
	}

	if t.spm {
		t.beforeSpace = map[rune]bool{}
		for _, s := range v.Tokens {
			for i := 0; ; {
				j := strings.Index(s[i:], spaceEscape)
				if j < 0 {
					break
				}
				if i+j > 0 {
					r, _ := utf8.DecodeLastRuneInString(s[:i+j])
					t.beforeSpace[r] = true
				}
				i += j + len(spaceEscape)
			}
		}
		for b := 0; b < 256; b++ {
			t.byteTok[b] = -1
			if id, ok := t.toID[fmt.Sprintf("<0x%02X>", b)]; ok {
				t.byteTok[b] = id
			} else if id, ok := t.toID[string([]byte{byte(b)})]; ok {
				t.byteTok[b] = id
			}
		}
	} else {
		t.ranks = make(map[string]int32, len(v.Merges))
		for i, m := range v.Merges {
			if _, dup := t.ranks[m]; !dup { // the first (best) rank wins
				t.ranks[m] = int32(i)
			}
		}
	}

	t.buildSpecials()
	t.buildPieces()
	t.bpePool.New = func() any { return new(bpeState) }
	t.spmPool.New = func() any { return new(spmState) }
	return t, nil
}

// buildSpecials collects control, user-defined and unknown tokens, sorted by
// decreasing length (ties by id), and a byte trie over their texts.
func (t *Tokenizer) buildSpecials() {
	for id, typ := range t.types {
		if (typ == TypeControl || typ == TypeUserDefined || typ == TypeUnknown) && t.vocab.Tokens[id] != "" {
			t.specials = append(t.specials, int32(id))
		}
	}
	sort.SliceStable(t.specials, func(i, j int) bool {
		return len(t.vocab.Tokens[t.specials[i]]) > len(t.vocab.Tokens[t.specials[j]])
	})
	t.trie = []trieNode{{}}
	for _, id := range t.specials {
		s := t.vocab.Tokens[id]
		t.specialFirst[s[0]] = true
		node := 0
		for i := 0; i < len(s); i++ {
			next, ok := t.trie[node].child(s[i])
			if !ok {
				next = len(t.trie)
				t.trie = append(t.trie, trieNode{})
				t.trie[node].children = append(t.trie[node].children, trieEdge{b: s[i], to: int32(next)})
			}
			node = next
		}
		t.trie[node].ids = append(t.trie[node].ids, id)
	}
}

type trieEdge struct {
	b  byte
	to int32
}

type trieNode struct {
	children []trieEdge
	ids      []int32 // special tokens ending here (duplicated texts share a node)
}

func (n *trieNode) child(b byte) (int, bool) {
	for _, e := range n.children {
		if e.b == b {
			return int(e.to), true
		}
	}
	return 0, false
}

// buildPieces precomputes the decoded bytes of every token.
func (t *Tokenizer) buildPieces() {
	n := len(t.vocab.Tokens)
	t.pieceOff = make([]uint32, n+1)
	var data []byte
	for id, s := range t.vocab.Tokens {
		t.pieceOff[id] = uint32(len(data))
		data = t.appendPiece(data, int32(id), s)
	}
	t.pieceOff[n] = uint32(len(data))
	t.pieceData = data
}

func (t *Tokenizer) appendPiece(dst []byte, id int32, s string) []byte {
	switch typ := t.types[id]; {
	case typ == TypeControl || typ == TypeUserDefined || typ == TypeUnknown:
		return append(dst, s...)
	case t.spm && typ == TypeByte:
		if b, ok := parseByteToken(s); ok {
			return append(dst, b)
		}
		return append(dst, s...)
	case t.spm:
		return append(dst, strings.ReplaceAll(s, spaceEscape, " ")...)
	default:
		// Byte-level BPE: every character stands for one byte. Characters
		// outside the mapping (malformed vocabularies only) are kept as UTF-8.
		for _, r := range s {
			if b, ok := runeToByte[r]; ok {
				dst = append(dst, b)
			} else {
				dst = utf8.AppendRune(dst, r)
			}
		}
		return dst
	}
}

// parseByteToken parses SentencePiece byte tokens of the form <0xXX>.
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

// fragment is a piece of the input: raw text [start, end) or a special token.
type fragment struct {
	start, end int
	id         int32 // -1 for raw text
}

// Encode converts text to token ids.
//
// With parseSpecial, the texts of control and unknown tokens occurring in
// text are emitted as those single tokens ("<|eot_id|>" becomes one id);
// without it they are tokenized as ordinary text. User-defined tokens are
// always matched, as in llama.cpp and Hugging Face tokenizers. Matching
// follows llama.cpp: tokens are tried longest first, each claiming its
// leftmost non-overlapping occurrences in the text not yet claimed.
//
// With addSpecial, BOS is prepended when the vocabulary's AddBOS is set and
// EOS appended when AddEOS is set. For SentencePiece vocabularies with
// AddSpacePrefix, a space is prepended to every text fragment that starts the
// input or follows a special token (llama.cpp's behaviour).
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	return t.encode(text, addSpecial, parseSpecial, nil)
}

// span is a byte range [start, end) of a text.
type span struct{ start, end int }

// encode is Encode where no special token is recognised inside the
// literal spans (sorted, not overlapping): their bytes are text, and the
// text around them is encoded exactly as it would be without them.
func (t *Tokenizer) encode(text string, addSpecial, parseSpecial bool, literal []span) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if addSpecial && t.vocab.AddBOS {
		out = append(out, t.vocab.BOS)
	}
	frags := t.partition(text, parseSpecial, literal)
	if t.spm {
		st := t.spmPool.Get().(*spmState)
		prevSpecial := true
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				prevSpecial = true
				continue
			}
			s := escapeSPM(text[f.start:f.end], t.vocab.AddSpacePrefix && prevSpecial)
			out = t.encodeSPM(st, s, out)
			prevSpecial = false
		}
		t.spmPool.Put(st)
	} else {
		st := t.bpePool.Get().(*bpeState)
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				continue
			}
			out = t.encodeBPE(st, text[f.start:f.end], out)
		}
		t.bpePool.Put(st)
	}
	if addSpecial && t.vocab.AddEOS {
		out = append(out, t.vocab.EOS)
	}
	return out
}

// overlaps reports whether [a, b) meets one of the spans.
func overlaps(spans []span, a, b int) bool {
	for _, s := range spans {
		if a < s.end && s.start < b {
			return true
		}
	}
	return false
}

// partition splits text into raw-text fragments and special tokens with the
// semantics of llama.cpp's tokenizer_st_partition. A trie pass first finds
// which special tokens occur at all, so long texts cost one scan instead of
// one scan per special token.
func (t *Tokenizer) partition(text string, parseSpecial bool, literal []span) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{start: 0, end: len(text), id: -1}}
	present := t.presentSpecials(text, parseSpecial)
	if len(present) == 0 {
		return frags
	}
	// Keep llama.cpp's order: longest first, ties by id.
	order := make([]int32, 0, len(present))
	for _, id := range t.specials {
		if present[id] {
			order = append(order, id)
		}
	}
	var next []fragment
	for _, id := range order {
		tok := t.vocab.Tokens[id]
		next = next[:0]
		for _, f := range frags {
			if f.id >= 0 {
				next = append(next, f)
				continue
			}
			start, from := f.start, f.start
			for from < f.end {
				i := strings.Index(text[from:f.end], tok)
				if i < 0 {
					break
				}
				m := from + i
				if overlaps(literal, m, m+len(tok)) {
					from = m + 1 // text, not the token: look further
					continue
				}
				if m > start {
					next = append(next, fragment{start: start, end: m, id: -1})
				}
				next = append(next, fragment{start: m, end: m + len(tok), id: id})
				start = m + len(tok)
				from = start
			}
			if start < f.end {
				next = append(next, fragment{start: start, end: f.end, id: -1})
			}
		}
		frags, next = next, frags
	}
	return frags
}

// presentSpecials returns the special tokens eligible under parseSpecial
// whose text occurs somewhere in text.
func (t *Tokenizer) presentSpecials(text string, parseSpecial bool) map[int32]bool {
	var present map[int32]bool
	for i := 0; i < len(text); i++ {
		if !t.specialFirst[text[i]] {
			continue
		}
		node := 0
		for j := i; j < len(text); j++ {
			next, ok := t.trie[node].child(text[j])
			if !ok {
				break
			}
			node = next
			for _, id := range t.trie[node].ids {
				if !parseSpecial && t.types[id] != TypeUserDefined {
					continue
				}
				if present == nil {
					present = map[int32]bool{}
				}
				present[id] = true
			}
		}
	}
	return present
}

// piece returns the decoded bytes of a valid id without copying.
func (t *Tokenizer) piece(id int32) []byte {
	return t.pieceData[t.pieceOff[id]:t.pieceOff[id+1]]
}

func (t *Tokenizer) valid(id int32) bool {
	return id >= 0 && int(id) < len(t.vocab.Tokens)
}

// Piece returns the raw bytes one token stands for: the byte-level mapping is
// undone for BPE vocabularies; for SentencePiece U+2581 becomes a space and
// <0xXX> tokens become the byte. Control, user-defined and unknown tokens
// return their literal text. The result is a fresh copy; nil for ids outside
// the vocabulary.
func (t *Tokenizer) Piece(id int32) []byte {
	if !t.valid(id) {
		return nil
	}
	return append([]byte(nil), t.piece(id)...)
}

// Decode converts ids back to text by concatenating their pieces. Control
// and unknown-type tokens (BOS, EOS, <|eot_id|>, <unk>, ...) produce no text,
// like llama.cpp's detokenizer without special rendering; ids outside the
// vocabulary produce U+FFFD. For SentencePiece vocabularies with
// AddSpacePrefix, the leading space of the first text-producing token is
// removed (it is the prefix Encode added), so Decode(Encode(x)) == x for
// ordinary text. Pieces are joined byte-wise, so the result is valid UTF-8
// only if the ids encode valid UTF-8. No clean-up of spaces before
// punctuation is done.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	first := true
	for _, id := range ids {
		if !t.valid(id) {
			b = append(b, "\uFFFD"...)
			first = false
			continue
		}
		if t.hidden(id) {
			continue
		}
		p := t.piece(id)
		if first && t.spm && t.vocab.AddSpacePrefix && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		b = append(b, p...)
		first = false
	}
	return string(b)
}

// hidden reports whether Decode omits the token's text.
func (t *Tokenizer) hidden(id int32) bool {
	typ := t.types[id]
	return typ == TypeControl || typ == TypeUnknown
}

// BOS returns the beginning-of-sequence token id, or -1.
func (t *Tokenizer) BOS() int32 { return t.vocab.BOS }

// EOS returns the end-of-sequence token id, or -1.
func (t *Tokenizer) EOS() int32 { return t.vocab.EOS }

// EOT returns the end-of-turn token id, or -1.
func (t *Tokenizer) EOT() int32 { return t.vocab.EOT }

// IsEOG reports whether generation should stop at id: EOS, EOT and the
// end-of-turn markers llama.cpp recognizes by text ("<|eot_id|>",
// "<|eom_id|>", "<end_of_turn>", "<|im_end|>", "<|end|>", "<|endoftext|>",
// "<EOT>").
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.vocab.Tokens) }

// Token returns the stored text of a token ("" for ids outside the vocabulary).
func (t *Tokenizer) Token(id int32) string {
	if !t.valid(id) {
		return ""
	}
	return t.vocab.Tokens[id]
}

// TokenType returns the effective llama token type of id (see the Type*
// constants), or TypeUndefined for ids outside the vocabulary.
func (t *Tokenizer) TokenType(id int32) int32 {
	if !t.valid(id) {
		return TypeUndefined
	}
	return t.types[id]
}

// Vocab returns a copy of the vocabulary header the tokenizer was built from.
// The slices are shared and must not be modified.
func (t *Tokenizer) Vocab() Vocab { return t.vocab }
