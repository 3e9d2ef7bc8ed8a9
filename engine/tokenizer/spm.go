package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// spaceEscape is SentencePiece's visible space, U+2581 LOWER ONE EIGHTH BLOCK.
const spaceEscape = "\u2581"

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length announced by
// a lead byte, judged by its high nibble only (continuation bytes count as 1).
var utf8Len = [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}

type spmSymbol struct {
	start, end int
	prev, next int
}

// spmBigram is a candidate merge; size is the merged byte length, which
// detects stale entries (llama.cpp's check).
type spmBigram struct {
	score       float32
	left, right int32
	size        int32
}

// less reports whether a pops before b: higher score first, then leftmost.
func (a spmBigram) less(b spmBigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

type spmState struct {
	syms []spmSymbol
	heap []spmBigram
}

// encodeSPM appends the ids of text (already space-prefixed and escaped) to
// out, following llama.cpp's llm_tokenizer_spm_session: start from UTF-8
// characters, repeatedly merge the adjacent pair whose concatenation is the
// vocabulary token with the highest score (ties: leftmost), then emit each
// symbol's token or, for symbols that are not tokens, one byte token per byte
// (UNK when the vocabulary has no byte tokens, where llama.cpp would abort).
//
// For speed the symbol sequence is cut into segments that are merged
// independently. A cut is made before a U+2581 whose preceding character c
// never precedes U+2581 inside any token: no merge can then ever join the two
// sides (a merged symbol spanning the cut would be a token containing
// "c\u2581"), and since merges on one side never change bigrams on the other,
// and ties are broken by position in both cases, the result equals merging
// the whole sequence at once while the heaps stay word-sized.
func (t *Tokenizer) encodeSPM(st *spmState, text string, out []int32) []int32 {
	syms := st.syms[:0]
	for i := 0; i < len(text); {
		size := min(utf8Len[text[i]>>4], len(text)-i)
		syms = append(syms, spmSymbol{start: i, end: i + size, prev: len(syms) - 1, next: len(syms) + 1})
		i += size
	}
	st.syms = syms
	seg := 0
	for k := 1; k <= len(syms); k++ {
		if k == len(syms) || t.spmCut(text, syms[k-1], syms[k]) {
			out = t.spmSegment(st, text, seg, k, out)
			seg = k
		}
	}
	return out
}

// spmCut reports whether the sequence may be cut between symbols a and b.
func (t *Tokenizer) spmCut(text string, a, b spmSymbol) bool {
	if t.noSPMCut || text[b.start:b.end] != spaceEscape {
		return false
	}
	r, size := utf8.DecodeRuneInString(text[a.start:a.end])
	if size != a.end-a.start || (r == utf8.RuneError && size != 3) {
		return false // not a single valid character: be conservative
	}
	return !t.beforeSpace[r]
}

// spmSegment merges symbols [lo, hi) and appends their ids.
func (t *Tokenizer) spmSegment(st *spmState, text string, lo, hi int, out []int32) []int32 {
	syms := st.syms
	syms[lo].prev = -1
	syms[hi-1].next = -1
	st.heap = st.heap[:0]
	for i := lo + 1; i < hi; i++ {
		t.pushSPM(st, text, i-1, i)
	}
	for len(st.heap) > 0 {
		bg := heapPop(&st.heap)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.end == l.start || r.end == r.start || int32(l.end-l.start+r.end-r.start) != bg.size {
			continue // stale: one side already merged differently
		}
		l.end = r.end
		r.end = r.start
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = int(bg.left)
		}
		t.pushSPM(st, text, l.prev, int(bg.left))
		t.pushSPM(st, text, int(bg.left), l.next)
	}
	for i := lo; i != -1; i = syms[i].next {
		s := text[syms[i].start:syms[i].end]
		if id, ok := t.toID[s]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			if id := t.byteTok[s[j]]; id >= 0 {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

func (t *Tokenizer) pushSPM(st *spmState, text string, left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := st.syms[left], st.syms[right]
	id, ok := t.toID[text[l.start:r.end]]
	if !ok {
		return
	}
	var score float32
	if t.scores != nil {
		score = t.scores[id]
	}
	heapPush(&st.heap, spmBigram{score: score, left: int32(left), right: int32(right), size: int32(r.end - l.start)})
}

// escapeSPM prepares a raw-text fragment for SentencePiece: an optional
// leading space, then every ' ' replaced by U+2581.
func escapeSPM(text string, prefix bool) string {
	if prefix {
		text = " " + text
	}
	return strings.ReplaceAll(text, " ", spaceEscape)
}
