package tokenizer

import (
	"reflect"
	"testing"
)

func TestDecoderStreaming(t *testing.T) {
	t.Parallel()
	spm := load(t, spmVocabFile)
	bpe := load(t, bpeVocabFile)
	tests := []struct {
		name  string
		tok   *Tokenizer
		ids   []int32
		want  []string // one chunk per Add
		flush string
	}{
		// 😁 under SentencePiece byte fallback: F0 9F 98 81 (vector ids).
		{"spm emoji", spm, []int32{29871, 243, 162, 155, 132, 1577}, []string{" ", "", "", "", "😁", " ?"}, ""},
		// 🦙 under byte-level BPE: 11410 99 247 from the vectors.
		{"bpe emoji", bpe, []int32{420, 11410, 99, 247}, []string{" this", " ", "", "🦙"}, ""},
		{"control hidden", bpe, []int32{9906, 128009, 1917}, []string{"Hello", "", " world"}, ""},
		{"incomplete at end", spm, []int32{15043, 243, 162}, []string{" Hello", "", ""}, "\xf0\x9f"},
		// A lone continuation byte or 0xFF can never complete: not held.
		{"invalid bytes", spm, []int32{3 + 0x80, 3 + 0xFF}, []string{"\x80", "\xff"}, ""},
		// A lead byte followed by a non-continuation is settled at once.
		{"broken sequence", spm, []int32{243, 3 + 'A'}, []string{"", "\xf0A"}, ""},
		{"out of range", spm, []int32{-1, 32000}, []string{"\uFFFD", "\uFFFD"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.tok.NewDecoder()
			var got []string
			for _, id := range tc.ids {
				got = append(got, d.Add(id))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("chunks %q, want %q", got, tc.want)
			}
			if f := d.Flush(); f != tc.flush {
				t.Errorf("Flush = %q, want %q", f, tc.flush)
			}
			if f := d.Flush(); f != "" {
				t.Errorf("second Flush = %q", f)
			}
		})
	}
}

func TestCompletePrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a\xc3", 1},
		{"a\xc3\xa9", 3},
		{"\xe2\x96", 0},
		{"x\xf0\x9f\x98", 1},
		{"\xf0\x9f\x98\x81", 4},
		{"\x80\x80\x80", 3},
		{"\xe0\x80", 2}, // can never be valid (overlong)
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			if got := completePrefix([]byte(tc.in)); got != tc.want {
				t.Errorf("completePrefix(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestPieceAndDecode(t *testing.T) {
	t.Parallel()
	spm := load(t, spmVocabFile)
	bpe := load(t, bpeVocabFile)
	tests := []struct {
		name string
		tok  *Tokenizer
		id   int32
		want string
	}{
		{"spm word", spm, 15043, " Hello"},
		{"spm byte", spm, 13, "\n"},
		{"spm high byte", spm, 3 + 0xF0, "\xf0"},
		{"spm control literal", spm, 1, "<s>"},
		{"bpe space word", bpe, 22691, " Hello"},
		{"bpe newline", bpe, 198, "\n"},
		{"bpe raw byte", bpe, 99, "\xa6"},
		{"bpe control literal", bpe, 128009, "<|eot_id|>"},
		{"out of range", bpe, 128256, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.tok.Piece(tc.id)); got != tc.want {
				t.Errorf("Piece(%d) = %q, want %q", tc.id, got, tc.want)
			}
		})
	}
	// The space prefix is removed from the first text token only, also
	// behind a leading BOS.
	if got := spm.Decode([]int32{1, 15043, 15043}); got != "Hello Hello" {
		t.Errorf("Decode = %q", got)
	}
	// Piece returns a copy.
	p := bpe.Piece(9906)
	p[0] = 'X'
	if got := bpe.Decode([]int32{9906}); got != "Hello" {
		t.Errorf("Piece aliased internal data: %q", got)
	}
}

func TestSplitLlama3(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"   Hello", []string{"  ", " Hello"}},
		{"I've been 'told he's", []string{"I", "'ve", " been", " '", "told", " he", "'s"}},
		{"'RE 'Ll 'D", []string{"'RE", " '", "Ll", " '", "D"}},
		{"don't", []string{"don", "'t"}},
		{"3333333", []string{"333", "333", "3"}},
		{"a\n\nb", []string{"a", "\n\n", "b"}},
		{"!!!\n\nx", []string{"!!!\n\n", "x"}},
		{"x  \n  y", []string{"x", "  \n", " ", " y"}},
		{"ÄÖ 12", []string{"ÄÖ", " ", "12"}},
		{"\t\tfoo", []string{"\t", "\tfoo"}},
		{"a ", []string{"a", " "}},
		{"a  ", []string{"a", "  "}},
		{"١٢٣٤", []string{"١٢٣", "٤"}},
		{" ?!x", []string{" ?!", "x"}},
		{"$5", []string{"$", "5"}},
		{"_foo", []string{"_foo"}},
		{"\u3000x", []string{"\u3000x"}},
		{"a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0b"}},
		{"\xffa", []string{"\uFFFDa"}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			rs := decodeRunes(tc.in, nil)
			cls := make([]uint8, len(rs))
			for i, r := range rs {
				cls[i] = runeClass(r)
			}
			var got []string
			splitLlama3(rs, cls, 3, func(s, e int) { got = append(got, string(rs[s:e])) })
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("split(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestByteMapping(t *testing.T) {
	t.Parallel()
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteToRune[b]
		if seen[r] {
			t.Fatalf("byte %#x maps to duplicate rune %U", b, r)
		}
		seen[r] = true
		if runeToByte[r] != byte(b) {
			t.Errorf("rune %U maps back to %#x, want %#x", r, runeToByte[r], b)
		}
	}
	// Fixed points of GPT-2's bytes_to_unicode.
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', 0: 'Ā', '!': '!', 0xAD: 'Ń', 0xFF: 'ÿ'} {
		if byteToRune[b] != want {
			t.Errorf("byte %#x -> %U, want %U", b, byteToRune[b], want)
		}
	}
}
