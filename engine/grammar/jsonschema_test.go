package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// loadVocab loads one of the tokenizer's test vocabularies once.
var loadVocab = sync.OnceValues(func() (map[string]*Vocab, error) {
	out := map[string]*Vocab{}
	for _, name := range []string{"llama-bpe", "llama-spm"} {
		tok, err := tokenizer.FromGGUFFile("../tokenizer/testdata/ggml-vocab-" + name + ".gguf")
		if err != nil {
			return nil, err
		}
		v, err := VocabFromTokenizer(tok)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
})

func testVocab(t testing.TB, name string) *Vocab {
	t.Helper()
	vs, err := loadVocab()
	if err != nil {
		t.Fatal(err)
	}
	return vs[name]
}

// generate runs constrained generation with random logits (a fake
// model: fresh uniform scores over the vocabulary every step)
// and returns the text and whether the grammar completed within limit
// tokens.
func generate(t testing.TB, m *Matcher, rng *rand.Rand, p sample.Params, limit int) (string, bool) {
	t.Helper()
	v := m.Vocab()
	smp, err := sample.New(p)
	if err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, v.Size())
	s := m.Start()
	var out []byte
	for range limit {
		if done, err := m.Done(s); err != nil {
			t.Fatal(err)
		} else if done {
			return string(out), true
		}
		mask, err := m.Allowed(s)
		if err != nil {
			t.Fatal(err)
		}
		if mask.Count() == 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		for i := range logits {
			logits[i] = rng.Float32() * 8
		}
		mask.Apply(logits)
		id := smp.Sample(logits, nil)
		if !mask.Has(id) {
			t.Fatalf("sampler chose token %d, which the mask forbids", id)
		}
		if v.pieces[id] == nil { // end of generation
			if !m.Accepting(s) {
				t.Fatalf("end of generation allowed before the grammar completes, after %q", out)
			}
			return string(out), true
		}
		if s, err = m.Accept(s, id); err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		out = append(out, v.pieces[id]...)
	}
	return string(out), false
}

// schemaGen makes random JSON Schemas within what FromJSONSchema
// supports. Branches of anyOf/oneOf have distinct types, so that any
// output matches exactly one (oneOf's rule).
type schemaGen struct {
	r    *rand.Rand
	defs *object
}

func obj(kv ...any) *object {
	o := &object{vals: map[string]any{}}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		o.keys = append(o.keys, k)
		o.vals[k] = kv[i+1]
	}
	return o
}

func num(n int) json.Number { return json.Number(fmt.Sprint(n)) }

var propNames = []string{"id", "name", "a b", "é", `q"uote`, "x/y", "n", "tags", "ok", "value"}

func (g *schemaGen) scalar(kind int) *object {
	switch kind {
	case 0:
		s := obj("type", "string")
		if g.r.IntN(6) == 0 {
			return obj("type", "string", "pattern", []string{`^[a-f0-9]{2,6}$`, `^(yes|no|maybe)!?$`, `\d{2}:\d{2}`, `^[^\s"\\]{0,8}$`, `^.{0,4}$`}[g.r.IntN(5)])
		}
		if g.r.IntN(3) == 0 {
			return obj("type", "string", "format", []string{"date", "time", "date-time", "uuid", "ipv4", "email", "uri", "hostname"}[g.r.IntN(8)])
		}
		if g.r.IntN(2) == 0 {
			lo := g.r.IntN(4)
			s = obj("type", "string", "minLength", num(lo), "maxLength", num(lo+g.r.IntN(8)))
		}
		return s
	case 1:
		if g.r.IntN(2) == 0 {
			lo := g.r.IntN(200) - 100
			return obj("type", "integer", "minimum", num(lo), "exclusiveMaximum", num(lo+1+g.r.IntN(300)))
		}
		return obj("type", "integer")
	case 2:
		if g.r.IntN(2) == 0 {
			return obj("type", "number", "exclusiveMinimum", json.Number("-2.5"), "maximum", num(g.r.IntN(50)))
		}
		return obj("type", "number", "description", "a number")
	case 3:
		return obj("type", "boolean")
	}
	return obj("type", "null")
}

func (g *schemaGen) schema(depth int) any {
	k := g.r.IntN(12)
	if depth <= 0 {
		k = g.r.IntN(5)
	}
	switch k {
	case 0, 1, 2, 3, 4:
		return g.scalar(k)
	case 5:
		return obj("enum", []any{"red", "green", json.Number("3"), nil, true, "a \"quoted\" one"}[:1+g.r.IntN(6)])
	case 6:
		return obj("const", obj("k", []any{json.Number("1"), "two"}))
	case 7, 8:
		o := obj("type", "object")
		props := obj()
		var req []any
		for _, i := range g.r.Perm(len(propNames))[:g.r.IntN(5)] {
			props.keys = append(props.keys, propNames[i])
			props.vals[propNames[i]] = g.schema(depth - 1)
			if g.r.IntN(2) == 0 {
				req = append(req, propNames[i])
			}
		}
		o.keys = append(o.keys, "properties", "required", "additionalProperties")
		o.vals["properties"], o.vals["required"], o.vals["additionalProperties"] = props, req, false
		return o
	case 9:
		lo := g.r.IntN(3)
		a := obj("type", "array", "items", g.schema(depth-1), "minItems", num(lo))
		if g.r.IntN(2) == 0 {
			a.keys = append(a.keys, "maxItems")
			a.vals["maxItems"] = num(lo + g.r.IntN(3))
		}
		return a
	case 10:
		kw := []string{"anyOf", "oneOf"}[g.r.IntN(2)]
		kinds := g.r.Perm(5)[:2]
		if kinds[0]+kinds[1] == 3 && kinds[0]*kinds[1] == 2 { // number and integer overlap
			kinds[1] = 0
		}
		return obj(kw, []any{g.scalar(kinds[0]), g.scalar(kinds[1])})
	}
	name := fmt.Sprintf("d%d", len(g.defs.keys))
	g.defs.keys = append(g.defs.keys, name)
	g.defs.vals[name] = g.schema(depth - 1)
	return obj("$ref", "#/$defs/"+name)
}

func (g *schemaGen) root() []byte {
	g.defs = obj()
	s := g.schema(3)
	if o, ok := s.(*object); ok && len(g.defs.keys) > 0 {
		if _, isRef := o.vals["$ref"]; !isRef {
			o.keys = append(o.keys, "$defs")
			o.vals["$defs"] = g.defs
		} else {
			s = obj("allOf", []any{o}, "$defs", g.defs)
		}
	}
	var b strings.Builder
	compactJSON(&b, s)
	return []byte(b.String())
}

func compileSchema(t testing.TB, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(schema)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // the formats the translation follows must hold
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://schema.json")
	if err != nil {
		t.Fatalf("the validator refuses schema %s: %v", schema, err)
	}
	return sch
}

// TestSchemaProperty generates random schemas, runs constrained
// generation over a real vocabulary with random logits, and validates
// every output with an independent JSON Schema validator.
func TestSchemaProperty(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vocab   string
		schemas int
	}{{"llama-spm", 200}, {"llama-bpe", 60}} {
		t.Run(c.vocab, func(t *testing.T) {
			t.Parallel()
			schemas := c.schemas
			if testing.Short() || raceEnabled {
				schemas /= 5
			}
			schemaProperty(t, testVocab(t, c.vocab), schemas, uint64(len(c.vocab)))
		})
	}
}

func schemaProperty(t *testing.T, v *Vocab, schemas int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 2))
	gen := &schemaGen{r: r}
	complete := 0
	for i := range schemas {
		schema := gen.root()
		g, err := FromJSONSchema(schema)
		if err != nil {
			t.Fatalf("schema %d %s: %v", i, schema, err)
		}
		m, err := NewMatcher(g, v)
		if err != nil {
			t.Fatal(err)
		}
		sch := compileSchema(t, schema)
		p := sample.Params{Temperature: 1, TopP: 1, TopK: 64, RepeatPenalty: 1, Seed: uint64(i)}
		if i%4 == 0 {
			p = sample.Greedy()
		}
		out, ok := generate(t, m, r, p, 300)
		if !ok {
			continue // ran out of tokens: a cut-off text is not expected to parse
		}
		complete++
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			t.Fatalf("schema %s: output %q does not parse: %v", schema, out, err)
		}
		if err := sch.Validate(doc); err != nil {
			t.Fatalf("schema %s: output %q does not validate: %v", schema, out, err)
		}
	}
	if complete < schemas*3/4 {
		t.Fatalf("only %d of %d generations completed within the token limit", complete, schemas)
	}
	t.Logf("%d of %d generations completed and validated", complete, schemas)
}

// TestJSONObject runs json_object generation with random logits: every
// completed output is a JSON object.
func TestJSONObject(t *testing.T) {
	t.Parallel()
	g, err := JSONObject()
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatcher(g, testVocab(t, "llama-spm"))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	complete := 0
	const runs = 12
	for i := range runs {
		out, ok := generate(t, m, r, sample.Params{Temperature: 1, TopP: 1, TopK: 64, RepeatPenalty: 1, Seed: uint64(i)}, 600)
		if !ok {
			continue
		}
		complete++
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("output %q is not a JSON object: %v", out, err)
		}
	}
	// A random walk through nested objects often outgrows the limit;
	// the runs are seeded, so the count is fixed.
	if complete < runs/4 {
		t.Fatalf("only %d of %d generations completed", complete, runs)
	}
	t.Logf("%d of %d generations completed", complete, runs)
}

func TestSchemaTexts(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	cases := []struct {
		name   string
		schema string
		accept []string
		reject []string
	}{
		{"strict object", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"],"additionalProperties":false}`,
			[]string{`{"a":1,"b":"x"}`, "{ \"a\" : -20 ,\n  \"b\": \"\" }"},
			[]string{`{"b":"x","a":1}`, `{"a":1}`, `{"a":1,"b":"x","c":2}`, `{"a":1.5,"b":"x"}`, `{"a":01,"b":"x"}`}},
		{"optional properties", `{"type":"object","properties":{"a":{"type":"null"},"b":{"type":"boolean"},"c":{"type":"null"}},"required":["b"]}`,
			[]string{`{"b":true}`, `{"a":null,"b":false}`, `{"b":true,"c":null}`, `{"a":null,"b":true,"c":null}`},
			[]string{`{}`, `{"a":null}`, `{"b":true,}`, `{,"b":true}`, `{"c":null,"b":true}`}},
		{"all optional", `{"properties":{"x":{"const":1},"y":{"const":2}}}`,
			[]string{`{}`, `{"x":1}`, `{"y":2}`, `{"x":1,"y":2}`},
			[]string{`{"x":2}`, `{"y":2,"x":1}`, `{"x":1 "y":2}`}},
		{"array bounds", `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
			[]string{`[1]`, `[1,2,3]`, `[ 1 , 2 ]`},
			[]string{`[]`, `[1,2,3,4]`, `[1,]`, `["a"]`}},
		{"array no bounds", `{"type":"array"}`,
			[]string{`[]`, `[1,"a",null,{"k":[true]}]`},
			[]string{`[`, `{}`}},
		{"empty array only", `{"type":"array","maxItems":0}`, []string{`[]`, `[ ]`}, []string{`[1]`}},
		{"string lengths", `{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"abc"`, `"\n\"é"`, `"\u00e9x"`},
			[]string{`"a"`, `"abcd"`, `"a"b"`, "\"a\nb\""}},
		{"enum", `{"enum":["red",3,null,true,{"k":[1]},"a\"b"]}`,
			[]string{`"red"`, `3`, `null`, `true`, `{"k":[1]}`, `"a\"b"`},
			[]string{`"blue"`, `4`, `false`, `{"k":[2]}`}},
		{"type list", `{"type":["string","null"]}`, []string{`"x"`, `null`}, []string{`1`, `true`}},
		{"numbers", `{"type":"number"}`, []string{`0`, `-1.5`, `2e10`, `3.25E-2`}, []string{`01`, `.5`, `1.`, `-`, `1e`, `NaN`}},
		{"anyOf", `{"anyOf":[{"type":"integer"},{"type":"object","properties":{"k":{"type":"string"}},"required":["k"]}]}`,
			[]string{`7`, `{"k":"v"}`}, []string{`"7"`, `{}`}},
		{"ref and defs", `{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}},"type":"array","items":{"$ref":"#/$defs/pt"}}`,
			[]string{`[]`, `[{"x":1},{"x":2.5}]`}, []string{`[{"y":1}]`}},
		{"recursive ref", `{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["v","next"]}`,
			[]string{`{"v":1,"next":null}`, `{"v":1,"next":{"v":2,"next":null}}`}, []string{`{"v":1,"next":{}}`}},
		{"definitions", `{"definitions":{"s":{"type":"string"}},"allOf":[{"$ref":"#/definitions/s"}]}`, []string{`"x"`}, []string{`1`}},
		{"additionalProperties schema", `{"type":"object","additionalProperties":{"type":"integer"}}`,
			[]string{`{}`, `{"a":1,"b":2}`}, []string{`{"a":"x"}`}},
		{"closed empty object", `{"type":"object","additionalProperties":false}`, []string{`{}`}, []string{`{"a":1}`}},
		{"any", `{}`, []string{`1`, `"s"`, `[{}]`, `null`}, []string{``, `nul`}},
		{"true schema", `true`, []string{`false`}, []string{`x`}},
		{"integer bounds", `{"type":"integer","minimum":-3,"exclusiveMaximum":12}`, []string{`-3`, `0`, `11`, `5`}, []string{`-4`, `12`, `100`, `1.5`, `-0`}},
		{"integer fractional bounds", `{"type":"integer","minimum":1.5,"maximum":3.5}`, []string{`2`, `3`}, []string{`1`, `4`}},
		{"number bounds", `{"type":"number","minimum":0,"maximum":1}`, []string{`0`, `1`, `0.25`, `0.0`}, []string{`-0.5`, `1.5`, `2`, `-1`}},
		{"number exclusive", `{"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":2}`, []string{`-1`, `-1.999`, `0`, `1.5`}, []string{`-2`, `2`, `-2.5`, `2.0`}},
		{"number fractional bounds", `{"type":"number","minimum":-1.5,"maximum":2.5}`, []string{`-1`, `2`, `1.75`, `-0.5`}, []string{`-2`, `3`, `2.75`}},
		{"date", `{"type":"string","format":"date"}`, []string{`"2024-02-28"`, `"1999-12-31"`, `"2023-04-30"`}, []string{`"2024-02-30"`, `"2023-04-31"`, `"2023-13-01"`, `"2023-00-10"`, `"2023-1-1"`}},
		{"date-time", `{"type":"string","format":"date-time"}`, []string{`"2024-01-05T10:20:30Z"`, `"2024-01-05t23:59:59.123+05:30"`}, []string{`"2024-01-05 10:20:30Z"`, `"2024-01-05T24:00:00Z"`, `"2024-01-05T10:20:30"`}},
		{"uuid", `{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567e89b12d3a456426614174000"`}},
		{"ipv4", `{"type":"string","format":"ipv4"}`, []string{`"192.168.0.1"`, `"255.255.255.255"`}, []string{`"256.1.1.1"`, `"01.1.1.1"`, `"1.1.1"`}},
		{"email", `{"type":"string","format":"email"}`, []string{`"a.b+c@example.co.uk"`}, []string{`"a..b@x.com"`, `"a@x"`, `"@x.com"`, `"a.@x.com"`}},
		{"uri", `{"type":"string","format":"uri"}`, []string{`"https://example.com/a/b"`, `"s3://bucket"`, `"https://x.org/p;q=1/"`}, []string{`"example.com"`, `"http://"`}},
		{"hostname", `{"type":"string","format":"hostname"}`, []string{`"a-b.example"`, `"localhost"`}, []string{`"-a.com"`, `"a_b"`}},
		{"unfollowed format", `{"type":"string","format":"x-custom"}`, []string{`"anything"`}, nil},
		{"annotations", `{"type":"string","title":"t","description":"d","format":"hostname-ish","default":"x","examples":["y"]}`, []string{`"x"`}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, err := FromJSONSchema([]byte(c.schema))
			if err != nil {
				t.Fatalf("FromJSONSchema: %v", err)
			}
			m, err := NewMatcher(g, v)
			if err != nil {
				t.Fatal(err)
			}
			sch := compileSchema(t, []byte(c.schema))
			for _, s := range c.accept {
				if !matchText(t, m, s) {
					t.Errorf("%s rejected", s)
				}
				doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
				if err != nil || sch.Validate(doc) != nil {
					t.Errorf("test case %s is not valid under the schema itself", s)
				}
			}
			for _, s := range c.reject {
				if matchText(t, m, s) {
					t.Errorf("%s accepted", s)
				}
			}
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, schema, want string }{
		{"not json", `{"type":`, "at #: not valid JSON"},
		{"trailing", `{} {}`, "trailing data"},
		{"false", `false`, "allows no value"},
		{"not a schema", `[1]`, "must be an object or a boolean"},
		{"lookahead", `{"type":"string","pattern":"^(?=a)"}`, "#/pattern: lookaround"},
		{"backreference", `{"type":"string","pattern":"(a)\\1"}`, `escape \1 is not supported`},
		{"word boundary", `{"type":"string","pattern":"\\bx"}`, `\b (word boundary)`},
		{"inner anchor", `{"type":"string","pattern":"a^b"}`, "anchor"},
		{"dangling quantifier", `{"type":"string","pattern":"*a"}`, "follows nothing"},
		{"unclosed group", `{"type":"string","pattern":"(ab"}`, "missing )"},
		{"pattern and length", `{"type":"string","pattern":"a+","maxLength":3}`, "pattern beside"},
		{"multipleOf", `{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}`, `#/properties/n: keyword "multipleOf"`},
		{"empty range", `{"type":"integer","minimum":3,"maximum":2.5}`, "no integer lies within the bounds"},
		{"bad bound", `{"type":"number","minimum":"1"}`, "minimum must be a number"},
		{"format and length", `{"type":"string","format":"date","maxLength":4}`, "beside minLength or maxLength"},
		{"prefixItems", `{"prefixItems":[{}]}`, `"prefixItems" is not supported`},
		{"unknown type", `{"type":"date"}`, `unknown type "date"`},
		{"bad type", `{"type":3}`, "type must be a string"},
		{"empty enum", `{"enum":[]}`, "enum must be a non-empty array"},
		{"required not declared", `{"type":"object","properties":{"a":{}},"required":["b"]}`, `required property "b" is not among the properties`},
		{"required without properties", `{"type":"object","required":["b"]}`, `required property "b"`},
		{"maxLength below minLength", `{"type":"string","minLength":3,"maxLength":2}`, "maxLength 2 is below minLength 3"},
		{"negative count", `{"type":"array","minItems":-1}`, "minItems must be a non-negative integer"},
		{"huge count", `{"type":"string","maxLength":1000000}`, "larger than the supported"},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`, "not a local reference"},
		{"dangling ref", `{"$ref":"#/$defs/nope"}`, "points at nothing"},
		{"anchor ref", `{"$ref":"#foo"}`, "anchors are not supported"},
		{"self ref", `{"$ref":"#"}`, "can never complete"},
		{"endless list", `{"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]}`, "can never complete"},
		{"allOf of two", `{"allOf":[{},{}]}`, "allOf with more than one"},
		{"anyOf beside type", `{"type":"string","anyOf":[{}]}`, `anyOf beside "type"`},
		{"two combinators", `{"enum":[1],"const":1}`, "combining"},
		{"mixed keywords", `{"minLength":1,"minItems":1}`, "keywords of both"},
		{"duplicate key", `{"type":"string","type":"integer"}`, "appears twice"},
		{"additionalProperties type", `{"type":"object","additionalProperties":1}`, "additionalProperties must be a boolean or a schema"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromJSONSchema([]byte(c.schema))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("FromJSONSchema(%s) = %v; want an error containing %q", c.schema, err, c.want)
			}
		})
	}
	if _, err := SchemaGBNF([]byte(`{}`), "bad name"); err == nil {
		t.Fatal("SchemaGBNF accepted a rule name with a space")
	}
}

// TestSchemaGBNFEmbeds checks that a schema's rules embed in a larger
// grammar under their own name (a tool call's envelope).
func TestSchemaGBNFEmbeds(t *testing.T) {
	t.Parallel()
	rules, err := SchemaGBNF([]byte(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`), "args")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse("root ::= " + Literal("<call>") + " args " + Literal("</call>\n\t\"\\") + "\n" + rules)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatcher(g, byteVocab(t))
	if err != nil {
		t.Fatal(err)
	}
	if !matchText(t, m, "<call>{\"q\":\"x\"}</call>\n\t\"\\") || matchText(t, m, "<call>{}</call>\n\t\"\\") {
		t.Fatal("embedded schema grammar matches wrongly")
	}
}

// TestMaskMatchesBruteForce compares masks from the trie walk with a
// token-by-token check over the 128k vocabulary, in states along a JSON
// text, and checks where end-of-generation is allowed.
func TestMaskMatchesBruteForce(t *testing.T) {
	t.Parallel()
	v := testVocab(t, "llama-bpe")
	g, err := FromJSONSchema([]byte(`{"type":"object","properties":{"s":{"type":"string","maxLength":4},"n":{"type":"number"}},"required":["s","n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	text := `{"s":"é✓x","n":-1.5}`
	for i := 0; i <= len(text); i += 3 {
		s, err := m.AdvanceBytes(m.Start(), []byte(text[:i]))
		if err != nil || s == Dead {
			t.Fatalf("prefix %q dead: %v", text[:i], err)
		}
		mask, err := m.Allowed(s)
		if err != nil {
			t.Fatal(err)
		}
		for id := range int32(v.Size()) {
			want := false
			switch p := v.pieces[id]; {
			case slices.Contains(v.eog, id):
				want = m.Accepting(s)
			case len(p) > 0:
				ns, err := m.AdvanceBytes(s, p)
				want = err == nil && ns != Dead
			}
			if mask.Has(id) != want {
				t.Fatalf("after %q: token %d (%q) allowed = %v, want %v", text[:i], id, v.pieces[id], mask.Has(id), want)
			}
		}
		if i == len(text) && !m.Accepting(s) {
			t.Fatal("complete text not accepting")
		}
	}
	end, _ := m.AdvanceBytes(m.Start(), []byte(text))
	if done, err := m.Done(end); err != nil || !done {
		t.Fatalf("Done after the whole object = %v, %v", done, err)
	}
	if _, err := m.Accept(m.Start(), v.eog[0]); err == nil {
		t.Fatal("end of generation accepted at the start")
	}
	if s, err := m.Accept(end, v.eog[0]); err != nil || s != end {
		t.Fatalf("end of generation at the end: %v, %v", s, err)
	}
}

// TestEmbeddedRefs: a schema embedded in another (tools' parameters in a
// call's schema) keeps its own #/$defs references, each resolved in its
// own scope even where two embedded schemas use the same name.
func TestEmbeddedRefs(t *testing.T) {
	t.Parallel()
	call := func(name, x string) string {
		return `{"type":"object","properties":{"name":{"const":"` + name + `"},"arguments":{"type":"object","properties":{"p":{"$ref":"#/$defs/X"}},"required":["p"],"$defs":{"X":` + x + `}}},"required":["name","arguments"]}`
	}
	g, err := FromJSONSchema([]byte(`{"anyOf":[` + call("a", `{"type":"integer"}`) + `,` + call("b", `{"type":"boolean"}`) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatcher(g, byteVocab(t))
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]bool{
		`{"name":"a","arguments":{"p":1}}`:    true,
		`{"name":"b","arguments":{"p":true}}`: true,
		`{"name":"a","arguments":{"p":true}}`: false,
		`{"name":"b","arguments":{"p":1}}`:    false,
	} {
		if got := matchText(t, m, text); got != want {
			t.Errorf("%s accepted = %v, want %v", text, got, want)
		}
	}
	// The document's root still comes first.
	g, err = FromJSONSchema([]byte(`{"$defs":{"X":{"type":"null"}},"type":"object","properties":{"p":{"type":"object","properties":{"q":{"$ref":"#/$defs/X"}},"required":["q"],"$defs":{"X":{"type":"integer"}}}},"required":["p"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m, err = NewMatcher(g, byteVocab(t)); err != nil {
		t.Fatal(err)
	}
	if !matchText(t, m, `{"p":{"q":null}}`) || matchText(t, m, `{"p":{"q":1}}`) {
		t.Error("a pointer that resolves from the root was resolved from an inner scope")
	}
}
