package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// GPT-2 byte-level mapping (bytes_to_unicode): the printable bytes '!'..'~',
// '¡'..'¬' and '®'..'ÿ' map to the code point of the same value; the other 68
// bytes map, in increasing byte order, to U+0100, U+0101, ... so that every
// byte has a visible, non-whitespace character.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
	byteToStr  [256]string
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
		byteToStr[b] = string(byteToRune[b])
	}
}

// Character classes used by the Llama 3 pre-tokenizer: \p{L}, \p{N} and \s.
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass [128]uint8

func init() {
	for r := 0; r < 128; r++ {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			asciiClass[r] = clsLetter
		case r >= '0' && r <= '9':
			asciiClass[r] = clsNumber
		case r == ' ', r >= '\t' && r <= '\r':
			asciiClass[r] = clsSpace
		}
	}
}

func runeClass(r rune) uint8 {
	if r < 128 {
		if r < 0 {
			return clsOther
		}
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r): // Unicode White_Space, as llama.cpp's table
		return clsSpace
	}
	return clsOther
}

// splitLlama3 splits text into pre-tokens following the Llama 3 regex
// (llama3Pattern) with \p{N}{1,maxDigits} for its number alternative
// (Qwen2's regex is the same with single digits), the alternatives tried in
// order at each position, exactly like llama.cpp's
// unicode_regex_split_custom_llama3. rs holds the code points of the text
// and cls their classes; emit receives [start, end) rune ranges.
func splitLlama3(rs []rune, cls []uint8, maxDigits int, emit func(start, end int)) {
	n := len(rs)
	prev := 0
	add := func(end int) {
		if end > prev {
			emit(prev, end)
		}
		prev = end
	}
	for pos := 0; pos < n; {
		c := rs[pos]
		k := cls[pos]

		// (?i:'s|'t|'re|'ve|'m|'ll|'d)
		if c == '\'' && pos+1 < n {
			c1 := unicode.ToLower(rs[pos+1])
			if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
				pos += 2
				add(pos)
				continue
			}
			if pos+2 < n {
				c2 := unicode.ToLower(rs[pos+2])
				if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
					pos += 3
					add(pos)
					continue
				}
			}
		}

		// [^\r\n\p{L}\p{N}]?\p{L}+
		if c != '\r' && c != '\n' && k != clsNumber {
			if k == clsLetter || (pos+1 < n && cls[pos+1] == clsLetter) {
				pos++
				for pos < n && cls[pos] == clsLetter {
					pos++
				}
				add(pos)
				continue
			}
		}

		// \p{N}{1,maxDigits}
		if k == clsNumber {
			ini := pos
			for pos < n && cls[pos] == clsNumber {
				pos++
				if pos-ini >= maxDigits {
					add(pos)
					ini = pos
				}
			}
			add(pos)
			continue
		}

		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		j := pos
		if c == ' ' {
			j++
		}
		if j < n && cls[j] == clsOther {
			pos = j
			for pos < n && cls[pos] == clsOther {
				pos++
			}
			for pos < n && (rs[pos] == '\r' || rs[pos] == '\n') {
				pos++
			}
			add(pos)
			continue
		}

		// \s*[\r\n]+ | \s+(?!\S) | \s+
		nws, lastNL := 0, 0
		for pos+nws < n && cls[pos+nws] == clsSpace {
			if r := rs[pos+nws]; r == '\r' || r == '\n' {
				lastNL = pos + nws + 1
			}
			nws++
		}
		switch {
		case lastNL > 0:
			pos = lastNL
		case nws > 1 && pos+nws < n:
			pos += nws - 1
		case nws > 0:
			pos += nws
		default:
			pos++ // no alternative matches: a single code point
		}
		add(pos)
	}
}

// decodeRunes converts text to code points the way llama.cpp does: every
// byte of an invalid UTF-8 sequence becomes U+FFFD.
func decodeRunes(text string, rs []rune) []rune {
	rs = rs[:0]
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		rs = append(rs, r) // RuneError with size 1 for invalid bytes
		i += size
	}
	return rs
}

// bpeSymbol is one node of the doubly linked symbol list used while merging.
type bpeSymbol struct {
	start, end int // byte range in the encoded word
	prev, next int // neighbour indices, -1 at the ends
}

// bpeBigram is a candidate merge of symbols left and right. The symbol
// lengths at push time detect stale entries: symbols only ever grow.
type bpeBigram struct {
	rank        int32
	left, right int32
	lenL, lenR  int32
}

func (a bpeBigram) less(b bpeBigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

// bpeState holds the reusable buffers of one Encode call.
type bpeState struct {
	runes  []rune
	cls    []uint8
	word   []byte   // byte-level encoded current word
	key    []byte   // "left right" lookup buffer
	ranges [][2]int // pre-token byte ranges (regex stages)
	spare  [][2]int
	syms   []bpeSymbol
	heap   []bpeBigram
}

// encodeBPE appends the ids of a raw-text fragment to out.
func (t *Tokenizer) encodeBPE(st *bpeState, text string, out []int32) []int32 {
	if t.pre.llama3Digits > 0 {
		st.runes = decodeRunes(text, st.runes)
		st.cls = st.cls[:0]
		for _, r := range st.runes {
			st.cls = append(st.cls, runeClass(r))
		}
		splitLlama3(st.runes, st.cls, t.pre.llama3Digits, func(start, end int) {
			st.setWord(st.runes[start:end])
			out = t.bpeWord(st, out)
		})
		return out
	}
	st.ranges, st.spare = t.pre.splitStages(text, st.ranges, st.spare)
	for _, r := range st.ranges {
		st.runes = decodeRunes(text[r[0]:r[1]], st.runes)
		st.setWord(st.runes)
		out = t.bpeWord(st, out)
	}
	return out
}

// setWord byte-level encodes the UTF-8 of rs (invalid input already became
// U+FFFD) into st.word.
func (st *bpeState) setWord(rs []rune) {
	st.word = st.word[:0]
	for _, r := range rs {
		var buf [utf8.UTFMax]byte
		nb := utf8.EncodeRune(buf[:], r)
		for _, b := range buf[:nb] {
			st.word = append(st.word, byteToStr[b]...)
		}
	}
}

// bpeWord merges the byte-level encoded word in st.word and appends its ids.
func (t *Tokenizer) bpeWord(st *bpeState, out []int32) []int32 {
	word := st.word
	if t.ignoreMerges {
		if id, ok := t.toID[string(word)]; ok {
			return append(out, id)
		}
	}
	syms := st.syms[:0]
	for i := 0; i < len(word); {
		_, size := utf8.DecodeRune(word[i:])
		syms = append(syms, bpeSymbol{start: i, end: i + size, prev: len(syms) - 1, next: len(syms) + 1})
		i += size
	}
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	st.syms = syms
	st.heap = st.heap[:0]
	for i := 1; i < len(syms); i++ {
		t.pushBigram(st, i-1, i)
	}
	for len(st.heap) > 0 {
		bg := heapPop(&st.heap)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.end == l.start || r.end == r.start ||
			int32(l.end-l.start) != bg.lenL || int32(r.end-r.start) != bg.lenR {
			continue // stale: one side already merged differently
		}
		l.end = r.end
		r.end = r.start
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = int(bg.left)
		}
		t.pushBigram(st, l.prev, int(bg.left))
		t.pushBigram(st, int(bg.left), l.next)
	}
	for i := 0; i != -1; i = syms[i].next {
		s := word[syms[i].start:syms[i].end]
		if id, ok := t.toID[string(s)]; ok {
			out = append(out, id)
			continue
		}
		// llama.cpp falls back to single-byte tokens and drops bytes that
		// have none; with a complete byte-level vocabulary this never runs.
		for _, b := range s {
			if id, ok := t.toID[string([]byte{b})]; ok {
				out = append(out, id)
			}
		}
	}
	return out
}

func (t *Tokenizer) pushBigram(st *bpeState, left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := st.syms[left], st.syms[right]
	st.key = append(st.key[:0], st.word[l.start:l.end]...)
	st.key = append(st.key, ' ')
	st.key = append(st.key, st.word[r.start:r.end]...)
	rank, ok := t.ranks[string(st.key)]
	if !ok {
		return
	}
	heapPush(&st.heap, bpeBigram{
		rank: rank, left: int32(left), right: int32(right),
		lenL: int32(l.end - l.start), lenR: int32(r.end - r.start),
	})
}
