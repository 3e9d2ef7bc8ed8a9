package openai

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/grammar"
)

// TestConstraintFields decodes response_format, grammar and text.format
// on every endpoint: accepted forms set a grammar that matches what they
// promise; bad ones are 400s naming the field.
func TestConstraintFields(t *testing.T) {
	t.Parallel()
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	v := func() *grammar.Vocab {
		pieces := make([][]byte, 256)
		for i := range pieces {
			pieces[i] = []byte{byte(i)}
		}
		v, err := grammar.NewVocab(pieces, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}()
	cases := []struct {
		name     string
		endpoint string // chat, completion, responses
		body     string
		param    string // "" = accepted
		msg      string
		accepts  string // accepted: a text the grammar must accept ("" = no grammar)
		rejects  string
	}{
		{"text", "chat", `{` + msgs + `,"response_format":{"type":"text"}}`, "", "", "", ""},
		{"json_object", "chat", `{` + msgs + `,"response_format":{"type":"json_object"}}`, "", "", `{"x":[1,{}]}`, `[1]`},
		{"json_schema", "chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `,"strict":true}}}`, "", "", `{"a":1}`, `{"a":"1"}`},
		{"json_schema not strict", "chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `,"strict":false}}}`, "", "", `{"a":1}`, `{}`},
		{"grammar", "chat", `{` + msgs + `,"grammar":"root ::= \"yes\" | \"no\""}`, "", "", "yes", "maybe"},
		{"empty grammar", "chat", `{` + msgs + `,"grammar":""}`, "", "", "", ""},
		{"completion json_schema", "completion", `{"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `}}}`, "", "", `{"a":-3}`, `{"a":1,"b":2}`},
		{"completion grammar", "completion", `{"model":"m","prompt":"x","grammar":"root ::= [0-9]+"}`, "", "", "42", "4a"},
		{"responses json_schema", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"r","schema":` + schema + `,"strict":true}}}`, "", "", `{"a":0}`, `{"a":01}`},
		{"responses json_object", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_object"}}}`, "", "", `{}`, `"s"`},
		{"responses text", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"text"}}}`, "", "", "", ""},

		{"llama-server json_schema", "chat", `{` + msgs + `,"json_schema":` + schema + `}`, "", "", `{"a":2}`, `{"a":true}`},
		{"completion json_schema field", "completion", `{"model":"m","prompt":"x","json_schema":{"type":"array","items":{"type":"boolean"},"maxItems":1}}`, "", "", `[true]`, `[true,false]`},
		{"json_schema and grammar", "completion", `{"model":"m","prompt":"x","json_schema":{},"grammar":"root ::= \"a\""}`, "json_schema", "both constrain", "", ""},
		{"json_schema and response_format", "chat", `{` + msgs + `,"json_schema":{},"response_format":{"type":"json_object"}}`, "json_schema", "both constrain", "", ""},
		{"bad json_schema", "chat", `{` + msgs + `,"json_schema":{"type":"string","pattern":"x"}}`, "json_schema", `keyword "pattern"`, "", ""},
		{"unknown type", "chat", `{` + msgs + `,"response_format":{"type":"yaml"}}`, "response_format.type", "not supported", "", ""},
		{"no json_schema", "chat", `{` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "needs a json_schema", "", ""},
		{"no schema", "chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r"}}}`, "response_format.json_schema.schema", "needs a schema", "", ""},
		{"unsupported keyword", "chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"string","pattern":"a+"}}}}`, "response_format.json_schema.schema", `keyword "pattern" is not supported`, "", ""},
		{"bad required", "completion", `{"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","required":["z"]}}}}`, "response_format.json_schema.schema", `required property "z"`, "", ""},
		{"bad grammar", "chat", `{` + msgs + `,"grammar":"root ::= (\"a\""}`, "grammar", "invalid grammar", "", ""},
		{"undefined rule", "completion", `{"model":"m","prompt":"x","grammar":"root ::= x"}`, "grammar", `"x" is used in "root" but never defined`, "", ""},
		{"both", "chat", `{` + msgs + `,"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}`, "grammar", "both constrain", "", ""},
		{"grammar type", "chat", `{` + msgs + `,"grammar":5}`, "grammar", "invalid type", "", ""},
		{"responses bad schema", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"r","schema":{"type":"object","properties":{"n":{"type":"number","multipleOf":1}}}}}}`, "text.format.schema", `#/properties/n: keyword "multipleOf"`, "", ""},
		{"responses no schema", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"r"}}}`, "text.format.schema", "needs a schema", "", ""},
		{"responses unknown format", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"csv"}}}`, "text.format.type", "not supported", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var g *grammar.Grammar
			var err error
			switch c.endpoint {
			case "chat":
				var r *Chat
				if r, err = DecodeChat([]byte(c.body)); err == nil {
					g = r.Grammar
				}
			case "completion":
				var r *Completion
				if r, err = DecodeCompletion([]byte(c.body)); err == nil {
					g = r.Grammar
				}
			default:
				var r *Responses
				if r, err = DecodeResponses([]byte(c.body)); err == nil {
					g = r.Grammar
				}
			}
			if c.param != "" {
				var e *Error
				if !errors.As(err, &e) || e.Status != 400 || e.Param != c.param || !strings.Contains(e.Message, c.msg) {
					t.Fatalf("got %v; want a 400 naming %q with %q", err, c.param, c.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (g != nil) != (c.accepts != "") {
				t.Fatalf("grammar %v, want one: %v", g, c.accepts != "")
			}
			if g == nil {
				return
			}
			m, err := grammar.NewMatcher(g, v)
			if err != nil {
				t.Fatal(err)
			}
			for text, want := range map[string]bool{c.accepts: true, c.rejects: false} {
				s, err := m.AdvanceBytes(m.Start(), []byte(text))
				if got := err == nil && s != grammar.Dead && m.Accepting(s); got != want {
					t.Errorf("%q accepted = %v, want %v", text, got, want)
				}
			}
		})
	}
}
