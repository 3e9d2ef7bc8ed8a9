package grammar

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: any text either parses into a grammar a Matcher can run or
// is refused with an error; never a panic or a hang.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`root ::= "a" | [b-d]+ x{2,3}` + "\nx ::= (\"y\" | .)?",
		"root ::= ( \"\\x41\" | [^\\n] )* # c\n",
		`root ::= "a"{0,5} "b"{3,} [\u00e9-\U0001F600]`,
		"root ::= x\nx ::= x",
		strings.Repeat("(", 300) + `root ::= "a"`,
	} {
		f.Add(s)
	}
	v := byteVocab(f)
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Parse(src)
		if err != nil {
			return
		}
		m, err := NewMatcher(g, v)
		if err != nil {
			return
		}
		s := m.Start()
		for i := 0; i < 32 && s != Dead; i++ {
			if s, err = m.AdvanceBytes(s, []byte{byte('a' + i%3)}); err != nil {
				return
			}
		}
	})
}

// FuzzFromJSONSchema: any bytes are either translated into a grammar
// that parses or refused with an error; never a panic.
func FuzzFromJSONSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"array","items":{"$ref":"#/$defs/x"}}},"required":["a"],"$defs":{"x":{"enum":[1,"b",null]}}}`,
		`{"anyOf":[{"type":"string","maxLength":3},{"type":["integer","null"]}]}`,
		`{"$ref":"#/properties/a","properties":{"a":{"const":{"k":[true]}}}}`,
		`true`, `{}`, `[]`, `{"type":"string","minLength":99999}`,
	} {
		f.Add([]byte(s))
	}
	v := byteVocab(f)
	f.Fuzz(func(t *testing.T, schema []byte) {
		g, err := FromJSONSchema(schema)
		if err != nil {
			return
		}
		if _, err := NewMatcher(g, v); err != nil {
			t.Fatalf("schema %q translated into a grammar that cannot start: %v", schema, err)
		}
	})
}

// FuzzPattern: a pattern either translates into GBNF that parses, or is
// refused with an error.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{`^[a-z]+(\d{2,3})?$`, `(a|b)*?[^\s\]]\.`, `\u00e9\x41[\w-]{0,3}`, `[\b\0-\x1f"\\]`, `.{0,4}$`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		e, err := patternGBNF(pattern)
		if err != nil {
			return
		}
		if _, err := Parse("root ::= " + e); err != nil && !errors.Is(err, ErrAmbiguous) && !strings.Contains(err.Error(), "too large") && !strings.Contains(err.Error(), "never complete") {
			t.Fatalf("pattern %q translated into GBNF that does not parse: %v\n%s", pattern, err, e)
		}
	})
}
