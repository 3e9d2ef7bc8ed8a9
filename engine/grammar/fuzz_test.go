package grammar

import (
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
