package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/strata-llm/strata/engine/sample"
)

// TestPattern: JSON strings (as JSON text, escapes included) that the
// translated pattern accepts or not, each checked against the validator.
func TestPattern(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	cases := []struct {
		pattern          string
		accepts, rejects []string
	}{
		{`^[a-z]+$`, []string{`"abc"`}, []string{`""`, `"aB"`}},
		{`^\d{3}-\d{4}$`, []string{`"555-1234"`}, []string{`"5551234"`, `"55-1234"`}},
		{`^(\+\d{1,3} )?\(\d{3}\) \d{3}-\d{4}$`, []string{`"(555) 123-4567"`, `"+44 (555) 123-4567"`}, []string{`"555 123-4567"`}},
		{`^[A-Z]{2}\d{2}(?:[ ]?\d{4}){2}$`, []string{`"GB12 3456 7890"`, `"GB1234567890"`}, []string{`"gb1234567890"`}},
		{`^(cat|dog)s?$`, []string{`"cat"`, `"dogs"`}, []string{`"cow"`, `"catss"`}},
		{`a.c`, []string{`"abc"`, `"a\"c"`, `"a\\c"`, `"aéc"`}, []string{`"a\nc"`, `"ac"`}},
		{`^[^"\\]*$`, []string{`"plain text"`, `""`}, []string{`"a\"b"`, `"a\\b"`}},
		{`^\w+@\w+\.com$`, []string{`"me@site.com"`}, []string{`"me@site.org"`}},
		{`^[\s\S]{2}$`, []string{`"\n\t"`, `"ab"`, `"\u0001x"`}, []string{`"a"`}},
		{`^\x41é[\]\-]$`, []string{`"Aé]"`, `"Aé-"`}, []string{`"Aéx"`}},
		{`^a{2,3}?b*?$`, []string{`"aa"`, `"aaabbb"`}, []string{`"a"`}},
		{`^$`, []string{`""`}, []string{`"a"`}},
		{`^[\d.]+$`, []string{`"1.5"`}, []string{`"1,5"`}},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			t.Parallel()
			b, _ := json.Marshal(c.pattern)
			schema := `{"type":"string","pattern":` + string(b) + `}`
			g, err := FromJSONSchema([]byte(schema))
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMatcher(g, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := compileSchema(t, []byte(schema))
			for _, s := range c.accepts {
				if !matchText(t, m, s) {
					t.Errorf("%s rejected", s)
				}
				if doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s)); err != nil || sch.Validate(doc) != nil {
					t.Errorf("test case %s is not valid under the schema itself", s)
				}
			}
			for _, s := range c.rejects {
				if matchText(t, m, s) {
					t.Errorf("%s accepted", s)
				}
			}
		})
	}
}

// TestPatternGeneration: constrained generation over a real vocabulary
// under patterns; the validator checks every output.
func TestPatternGeneration(t *testing.T) {
	t.Parallel()
	v := testVocab(t, "llama-spm")
	r := rand.New(rand.NewPCG(9, 9))
	for _, pat := range []string{`^[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8})?$`, `^\d{3}-\d{2}-\d{4}$`, `^(red|green|blue)(-\d)?$`,
		`^[^\s"]{3,12}$`, `^[\w.+-]{1,10}@[a-z]{1,8}\.(com|org)$`, `^\S{0,5}\s?\S{0,5}$`, `^.{1,6}$`} {
		b, _ := json.Marshal(pat)
		schema := []byte(`{"type":"object","properties":{"v":{"type":"string","pattern":` + string(b) + `}},"required":["v"]}`)
		g, err := FromJSONSchema(schema)
		if err != nil {
			t.Fatalf("%s: %v", pat, err)
		}
		m, err := NewMatcher(g, v)
		if err != nil {
			t.Fatal(err)
		}
		sch := compileSchema(t, schema)
		for i := range 6 {
			out, ok := generate(t, m, r, sample.Params{Temperature: 1, TopP: 1, TopK: 64, RepeatPenalty: 1, Seed: uint64(i)}, 200)
			if !ok {
				t.Fatalf("%s: generation did not complete: %q", pat, out)
			}
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
			if err != nil || sch.Validate(doc) != nil {
				t.Fatalf("%s: output %q does not validate (%v)", pat, out, err)
			}
		}
	}
}
