package tokenizer

import (
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// prePieces cuts text with the named pre-tokenizer and returns the pieces.
func prePieces(t *testing.T, name, text string) []string {
	t.Helper()
	spec, err := lookupPre(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := compiledPre(spec)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if p.llama3Digits > 0 {
		rs := decodeRunes(text, nil)
		cls := make([]uint8, len(rs))
		for i, r := range rs {
			cls[i] = runeClass(r)
		}
		splitLlama3(rs, cls, p.llama3Digits, func(s, e int) { got = append(got, string(rs[s:e])) })
		return got
	}
	ranges, _ := p.splitStages(text, nil, nil)
	for _, r := range ranges {
		got = append(got, text[r[0]:r[1]])
	}
	return got
}

// TestPreTokenizerPieces: what each family's regexes make of inputs that
// tell them apart (worked out by hand from the patterns).
func TestPreTokenizerPieces(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pre, in string
		want    []string
	}{
		{"llama-bpe", "abc 12345", []string{"abc", " ", "123", "45"}},
		{"qwen2", "abc 12345", []string{"abc", " ", "1", "2", "3", "4", "5"}},
		{"qwen2", "it's\n\n  x", []string{"it", "'s", "\n\n", " ", " x"}},
		{"gpt-2", "Hello  world x 123", []string{"Hello", " ", " world", " x", " 123"}},
		{"gpt-2", "a\t\tb", []string{"a", "\t", "\t", "b"}},
		{"gpt-2", "end   ", []string{"end", "   "}},
		{"starcoder", "x 123", []string{"x", " ", "1", "2", "3"}},
		{"falcon", "a+b=1234", []string{"a", "+", "b", "=", "123", "4"}},
		{"default", "Hello, world! 1234", []string{"Hello", ",", " world", "!", " ", "123", "4"}},
		{"tekken", "HelloWorld ABCdef helloWORLD", []string{"Hello", "World", " ABCdef", " hello", "WORLD"}},
		{"tekken", "a/b\n2024", []string{"a", "/b", "\n", "2", "0", "2", "4"}},
		{"gpt-4o", "I'm HappyDays 12345", []string{"I'm", " Happy", "Days", " ", "123", "45"}},
		{"deepseek-llm", "Hello 世界 123\n", []string{"Hello", " ", "世界", " ", "123", "\n"}},
		{"deepseek-llm", "a  ", []string{"a", "  "}},
		{"deepseek-coder", "x1 +y", []string{"x", "1", " +", "y"}},
		{"bloom", "Hi, there.", []string{"Hi", ",", " there", "."}},
		// Unicode White_Space is \s (U+3000 here), but only ' ' prefixes a word.
		{"gpt-2", "a\u3000\u3000b", []string{"a", "\u3000", "\u3000", "b"}},
		{"gpt-2", "a\u3000\u3000", []string{"a", "\u3000\u3000"}},
	}
	for _, tc := range tests {
		t.Run(tc.pre+"/"+tc.in, func(t *testing.T) {
			t.Parallel()
			if got := prePieces(t, tc.pre, tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s(%q) = %q, want %q", tc.pre, tc.in, got, tc.want)
			}
		})
	}
}

// TestPreRegexMatchesScanner runs the Llama 3 and Qwen2 regexes through the
// regex stage machinery (look-ahead rewrite, Unicode \s) and checks it cuts
// exactly like the hand-written scanner llama.cpp's vectors confirm, on the
// vectors' inputs and on random strings of the characters that matter.
func TestPreRegexMatchesScanner(t *testing.T) {
	t.Parallel()
	qwen := strings.Replace(llama3Pattern, `\p{N}{1,3}`, `\p{N}`, 1)
	alphabet := []string{" ", " ", "  ", "\t", "\n", "\r", "\v", "\u00a0", "\u3000", "\u2028",
		"a", "Z", "é", "ß", "世", "1", "٣", "'", "'s", "'LL", ".", ",", "!", "$", "\xff", "\xe2\x82", "🙂", "\u0301"}
	rng := rand.New(rand.NewSource(1))
	inputs := []string{"", " ", "  ", "a  b", "\n \n", " \t\n x"}
	for _, v := range loadVectors(t, bpeVocabFile) {
		inputs = append(inputs, v.in)
	}
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		for n := rng.Intn(12); n >= 0; n-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		inputs = append(inputs, b.String())
	}
	for _, tc := range []struct {
		pattern string
		digits  int
	}{{llama3Pattern, 3}, {qwen, 1}} {
		st, err := compilePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		p := &preTokenizer{stages: []*preStage{st}}
		for _, in := range inputs {
			rs := decodeRunes(in, nil)
			cls := make([]uint8, len(rs))
			for i, r := range rs {
				cls[i] = runeClass(r)
			}
			var want []string
			splitLlama3(rs, cls, tc.digits, func(s, e int) { want = append(want, string(rs[s:e])) })
			var got []string
			ranges, _ := p.splitStages(in, nil, nil)
			for _, r := range ranges {
				got = append(got, string(decodeRunes(in[r[0]:r[1]], nil)))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("digits %d: regex cut %q into %q, the scanner into %q", tc.digits, in, got, want)
			}
		}
	}
}

func TestCompilePatternRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pattern, want string }{
		{`a(?=b)`, "look-around"},
		{`\s+(?!\S)x|y`, "top-level alternative"},
		{`(\s+(?!\S))`, "top-level alternative"},
		{`a*`, "empty string"},
		{`[\S]`, `\S inside a class`},
		{`(`, "missing closing"},
	} {
		if _, err := compilePattern(tc.pattern); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compilePattern(%q) = %v, want an error mentioning %q", tc.pattern, err, tc.want)
		}
	}
}

// TestEveryPreCompiles: each listed pre-tokenizer builds.
func TestEveryPreCompiles(t *testing.T) {
	t.Parallel()
	for _, name := range PreTokenizers() {
		spec, _ := lookupPre(name)
		if _, err := compiledPre(spec); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestUnknownPreTokenizer: a name strata does not know is an error that
// names it and lists what is supported, both from GGUF metadata and New.
func TestUnknownPreTokenizer(t *testing.T) {
	t.Parallel()
	_, err := vocabFromMetadata(bpeMeta().with(keyPre, "nonesuch-bpe"))
	if err == nil || !strings.Contains(err.Error(), `"nonesuch-bpe"`) || !strings.Contains(err.Error(), "qwen2") {
		t.Errorf("vocabFromMetadata: error %v, want one naming nonesuch-bpe and listing qwen2", err)
	}
	v := &Vocab{Model: ModelGPT2, Pre: "nonesuch-bpe", Tokens: []string{"a", "b"}, BOS: -1, EOS: -1, EOT: -1, PAD: -1, UNK: -1}
	if _, err := New(v); err == nil || !strings.Contains(err.Error(), `"nonesuch-bpe"`) {
		t.Errorf("New: error %v, want one naming nonesuch-bpe", err)
	}
}

// TestPreTokenizersCoverInput: every pre-tokenizer cuts any text into
// non-empty pieces that join back to exactly the text, so no byte is lost
// or repeated before merging (random strings of the characters the
// patterns treat specially, invalid UTF-8 included).
func TestPreTokenizersCoverInput(t *testing.T) {
	t.Parallel()
	alphabet := []string{" ", "  ", "\t", "\n", "\r\n", "\u3000", "a", "Q", "é", "Σ", "世", "가", "ア", "1", "٣", "'", "'s", "'LL",
		".", ",", "!", "$", "+", "/", "<sentinel:12>", "IMGIMGABZ", "\xff", "\xe2\x82", "🙂", "\u0301", "µ"}
	rng := rand.New(rand.NewSource(2))
	for _, name := range PreTokenizers() {
		spec, _ := lookupPre(name)
		p, err := compiledPre(spec)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 300; i++ {
			var b strings.Builder
			for n := rng.Intn(16); n >= 0; n-- {
				b.WriteString(alphabet[rng.Intn(len(alphabet))])
			}
			in := b.String()
			var pieces []string
			if p.llama3Digits > 0 {
				pieces = prePieces(t, name, in)
				// The scanner works on code points: compare as such.
				in = string(decodeRunes(in, nil))
			} else {
				ranges, _ := p.splitStages(in, nil, nil)
				for _, r := range ranges {
					pieces = append(pieces, in[r[0]:r[1]])
				}
			}
			for _, s := range pieces {
				if s == "" {
					t.Fatalf("%s(%q): empty piece in %q", name, in, pieces)
				}
			}
			if got := strings.Join(pieces, ""); got != in {
				t.Fatalf("%s(%q): pieces %q join to %q", name, in, pieces, got)
			}
		}
	}
}
