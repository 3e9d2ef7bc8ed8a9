package grammar

import (
	"errors"
	"strings"
	"testing"
)

// byteVocab is a vocabulary of the 256 single bytes plus an
// end-of-generation token (256), enough to match any text.
func byteVocab(t testing.TB) *Vocab {
	t.Helper()
	pieces := make([][]byte, 257)
	for i := range 256 {
		pieces[i] = []byte{byte(i)}
	}
	v, err := NewVocab(pieces, []int32{256})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// matchText reports whether text is a complete sentence of g.
func matchText(t testing.TB, m *Matcher, text string) bool {
	t.Helper()
	s, err := m.AdvanceBytes(m.Start(), []byte(text))
	if err != nil {
		t.Fatalf("matching %q: %v", text, err)
	}
	return s != Dead && m.Accepting(s)
}

func TestParseAndMatch(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	cases := []struct {
		name    string
		gbnf    string
		accept  []string
		reject  []string
		prefix  []string // not complete, but may go on
		noAfter []string // complete, and nothing may follow
	}{
		{"literal", `root ::= "hello"`, []string{"hello"}, []string{"", "hell", "hello!", "Hello"}, []string{"he"}, nil},
		{"alternation", `root ::= "a" | "bc" | ""`, []string{"a", "bc", ""}, []string{"b", "ab", "c"}, []string{"b"}, nil},
		{"sequence and groups", `root ::= ("a" | "b") ("c" "d")`, []string{"acd", "bcd"}, []string{"cd", "abcd", "ac"}, nil, nil},
		{"optional", `root ::= "x" "y"?`, []string{"x", "xy"}, []string{"y", "xyy"}, nil, nil},
		{"star", `root ::= "a"*`, []string{"", "a", "aaaa"}, []string{"b", "aab"}, nil, nil},
		{"plus", `root ::= [0-9]+`, []string{"0", "123"}, []string{"", "1a"}, nil, nil},
		{"exact count", `root ::= "ab"{3}`, []string{"ababab"}, []string{"abab", "abababab"}, []string{"abab"}, []string{"ababab"}},
		{"range count", `root ::= [a-c]{2,4}`, []string{"ab", "abc", "cccc"}, []string{"a", "abcab", "ad"}, nil, []string{"abca"}},
		{"at least", `root ::= "z"{2,}`, []string{"zz", "zzzzz"}, []string{"z", ""}, nil, nil},
		{"at most", `root ::= "z"{,2}`, []string{"", "z", "zz"}, []string{"zzz"}, nil, nil},
		{"class ranges", `root ::= [a-zA-Z_] [a-zA-Z0-9_]*`, []string{"x", "_a1", "Zz9"}, []string{"1a", "a-b"}, nil, nil},
		{"negated class", `root ::= "\"" [^"\\]* "\""`, []string{`""`, `"abc"`, `"é ✓"`}, []string{`"a"b"`, `"\"`}, nil, nil},
		{"any char", `root ::= . .`, []string{"ab", "é✓", "\n\t"}, []string{"a", "abc"}, nil, nil},
		{"escapes", `root ::= "\n\t\\\"\x41\u00e9\U0001F600"`, []string{"\n\t\\\"Aé😀"}, []string{"nt"}, nil, nil},
		{"class escapes", `root ::= [\]\[\-]+`, []string{"][-", "-"}, []string{"a"}, nil, nil},
		{"rule refs", "root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"\nname ::= [a-z]+", []string{"hi bob", "hello x"}, []string{"hi", "hey bob"}, nil, nil},
		{"recursion", "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9] | \"(\" expr \")\"", []string{"1", "1+2", "(1+(2+3))+4"}, []string{"(1", "1+", "()"}, nil, nil},
		{"comments and newlines", "# a grammar\nroot ::= ( # start\n  \"a\"\n  | \"b\" ) # end\n\n", []string{"a", "b"}, []string{"ab"}, nil, nil},
		{"continued alternation", "root ::= \"a\"\n  | \"b\"\nother ::= \"c\"", []string{"a", "b"}, []string{"c"}, nil, nil},
		{"body on the next line", "root ::=\n  \"a\" x\nx ::= \"b\"", []string{"ab"}, []string{"a"}, nil, nil},
		{"ambiguous", `root ::= ("a" | "ab") "b"?`, []string{"a", "ab", "abb"}, []string{"abbb"}, nil, nil},
		{"repeated nullable", "root ::= x* \"!\"\nx ::= \"a\"?", []string{"!", "aaa!"}, []string{"a", "!!"}, nil, nil},
		{"nested stars", `root ::= ("a"* | "b")* "."`, []string{".", "aab.", "bbaa."}, []string{"c."}, nil, nil},
		{"nullable prefix", "root ::= x \"!\"\nx ::= \"a\"? \"b\"?", []string{"!", "a!", "ab!", "b!"}, []string{"a", "ba!"}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, err := Parse(c.gbnf)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			m, err := NewMatcher(g, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.accept {
				if !matchText(t, m, s) {
					t.Errorf("%q rejected", s)
				}
			}
			for _, s := range c.reject {
				if matchText(t, m, s) {
					t.Errorf("%q accepted", s)
				}
			}
			for _, s := range c.prefix {
				st, err := m.AdvanceBytes(m.Start(), []byte(s))
				if err != nil || st == Dead {
					t.Errorf("prefix %q is dead (%v)", s, err)
				}
			}
			for _, s := range c.noAfter {
				st, _ := m.AdvanceBytes(m.Start(), []byte(s))
				if done, err := m.Done(st); err != nil || !done {
					t.Errorf("after %q: Done = %v, %v; want true", s, done, err)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, gbnf, want string
	}{
		{"empty", "", "no rules"},
		{"only comments", "# nothing\n", "no rules"},
		{"no root", `start ::= "a"`, `no "root" rule`},
		{"undefined rule", `root ::= missing`, `"missing" is used in "root" but never defined`},
		{"duplicate", "root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
		{"missing ::=", `root = "a"`, "expected ::="},
		{"unterminated string", `root ::= "abc`, "unterminated string"},
		{"unterminated class", `root ::= [abc`, "unterminated character class"},
		{"unclosed group", `root ::= ( "a" | "b"`, "expected )"},
		{"stray paren", `root ::= "a" )`, `unexpected ")"`},
		{"bad escape", `root ::= "\q"`, `unknown escape \q`},
		{"short hex", `root ::= "\x4"`, "hex digits"},
		{"surrogate", `root ::= "\uD800"`, "not a Unicode scalar value"},
		{"reversed range", `root ::= [z-a]`, "reversed"},
		{"empty negation", `root ::= [^\x00-\U0010FFFF]`, "matches nothing"},
		{"reversed count", `root ::= "a"{3,1}`, "reversed"},
		{"huge count", `root ::= "a"{1,99999}`, "larger than"},
		{"bad count", `root ::= "a"{x}`, "not a non-negative integer"},
		{"unterminated count", `root ::= "a"{2`, "unterminated"},
		{"left recursion", "root ::= root \"a\" | \"b\"", "left-recursive: root -> root"},
		{"indirect left recursion", "root ::= x | \"c\"\nx ::= y? root \"b\"\ny ::= \"a\"", "left-recursive: x -> root -> x"},
		{"never completes", "root ::= \"a\" | \"b\" x\nx ::= \"c\" x", `rule "x" can never complete`},
		{"matches nothing", "root ::= root", `rule "root" can never complete`},
		{"token reference", `root ::= <[1000]>`, "token references"},
		{"garbage after rule", `root ::= "a" = "b"`, `unexpected "= \"b\""`},
		{"rule start without a name", `::= "a"`, "expected a rule name"},
		{"invalid utf-8", "root ::= \"\xff\"", "not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(c.gbnf)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded; want an error containing %q", c.gbnf, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse(%q) = %v; want it to contain %q", c.gbnf, err, c.want)
			}
		})
	}
}

func TestSyntaxErrorLine(t *testing.T) {
	t.Parallel()
	_, err := Parse("root ::= a\n\na ::= \"x\" ]")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 3 {
		t.Fatalf("error %v; want a SyntaxError on line 3", err)
	}
}

func TestUTF8Partial(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	g, err := Parse(`root ::= [à-ÿ] "!"`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   []byte
		dead bool
	}{
		{[]byte{0xC3}, false},                // lead byte of U+00C0..U+00FF
		{[]byte{0xC3, 0xA9}, false},          // é
		{[]byte{0xC3, 0x80}, true},           // À is below the class
		{[]byte{0xC4}, true},                 // U+0100.. is above it
		{[]byte{0xE0}, true},                 // three-byte characters are all above
		{[]byte{0x80}, true},                 // a continuation byte first
		{[]byte{0xC0, 0xA9}, true},           // overlong
		{[]byte{0xC3, 0xA9, 0xA9}, true},     // a stray continuation
		{[]byte{0xC3, 0xA9, '!'}, false},     // complete
		{[]byte{0xC3, '!'}, true},            // interrupted character
		{[]byte{0xED, 0xA0, 0x80}, true},     // a surrogate
		{[]byte{0xF4, 0x90, 0x80}, true},     // beyond U+10FFFF
		{[]byte{0xF0, 0x80, 0x80}, true},     // overlong four bytes
		{[]byte{0xE0, 0x88}, true},           // can only end overlong
		{[]byte{0xF4, 0x90}, true},           // can only end beyond U+10FFFF
		{[]byte("é!"), false},                //
		{[]byte("e!"), true},                 //
		{[]byte{0xC3, 0xBF, '!', '!'}, true}, // nothing after the end
	}
	for _, c := range cases {
		s, err := m.AdvanceBytes(m.Start(), c.in)
		if err != nil {
			t.Fatal(err)
		}
		if (s == Dead) != c.dead {
			t.Errorf("% x: dead = %v, want %v", c.in, s == Dead, c.dead)
		}
	}
	// A negated class admits multi-byte characters but never surrogates.
	g, err = Parse(`root ::= [^a]`)
	if err != nil {
		t.Fatal(err)
	}
	m, err = NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := m.AdvanceBytes(m.Start(), []byte{0xED, 0xA0}); s != Dead {
		t.Errorf("ED A0 (only surrogates follow) is alive under [^a]")
	}
	for _, in := range [][]byte{{0xE0, 0x88}, {0xE0, 0x9F}, {0xF0, 0x8F}, {0xF4, 0x90}, {0xC1}} {
		if s, _ := m.AdvanceBytes(m.Start(), in); s != Dead {
			t.Errorf("% x (only overlong or out-of-range endings) is alive under [^a]", in)
		}
	}
	if !matchText(t, m, "✓") || matchText(t, m, "a") {
		t.Errorf("[^a] on ✓ / a")
	}
}

// TestAmbiguityBounded: nested repetitions of optional parts make the
// parses explode; the matcher refuses them instead of running away.
func TestAmbiguityBounded(t *testing.T) {
	t.Parallel()
	if _, err := Parse(`root ::= ((("a"?){0,40}){0,40}){0,40}`); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Parse: %v, want ErrAmbiguous", err)
	}
}

// TestPatternEscapes covers what the validator's regular expressions lack
// (\u escapes) by matching the translation directly.
func TestPatternEscapes(t *testing.T) {
	t.Parallel()
	e, err := patternGBNF(`^\u00e9\x41[\u0041-\u0043]$`)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse("root ::= " + e)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatcher(g, byteVocab(t))
	if err != nil {
		t.Fatal(err)
	}
	if !matchText(t, m, "éAB") || matchText(t, m, "éAD") {
		t.Fatal(`\u and \x escapes translated wrongly`)
	}
	if _, err := patternGBNF(`\uD800`); err == nil {
		t.Fatal("a surrogate escape was accepted")
	}
}
