package openai

import (
	"errors"
	"strings"
	"testing"
)

// TestConstraintFields decodes response_format, text.format and
// llama-server's grammar and json_schema on every endpoint: accepted
// forms yield the constraint as sent, with the field it came in; badly
// shaped ones are 400s naming the field. (Translating the grammar or
// schema is the server's: daemon.TestConstraintTranslation.)
func TestConstraintFields(t *testing.T) {
	t.Parallel()
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}}}`
	cases := []struct {
		name     string
		endpoint string // chat, completion, responses
		body     string
		param    string // the constraint's Param, or the error's
		kind     string // "" = no constraint; "error" = a 400
		msg      string
	}{
		{"text", "chat", `{` + msgs + `,"response_format":{"type":"text"}}`, "", "", ""},
		{"json_object", "chat", `{` + msgs + `,"response_format":{"type":"json_object"}}`, "response_format", ConstraintJSONObject, ""},
		{"json_schema", "chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `,"strict":true}}}`, "response_format.json_schema.schema", ConstraintJSONSchema, schema},
		{"grammar", "chat", `{` + msgs + `,"grammar":"root ::= \"yes\""}`, "grammar", ConstraintGrammar, `root ::= "yes"`},
		{"empty grammar", "chat", `{` + msgs + `,"grammar":""}`, "", "", ""},
		{"bare json_schema", "chat", `{` + msgs + `,"json_schema":` + schema + `}`, "json_schema", ConstraintJSONSchema, schema},
		{"completion json_schema", "completion", `{"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `}}}`, "response_format.json_schema.schema", ConstraintJSONSchema, schema},
		{"completion grammar", "completion", `{"model":"m","prompt":"x","grammar":"root ::= [0-9]+"}`, "grammar", ConstraintGrammar, "root ::= [0-9]+"},
		{"completion bare json_schema", "completion", `{"model":"m","prompt":"x","json_schema":{}}`, "json_schema", ConstraintJSONSchema, "{}"},
		{"responses json_schema", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"r","schema":` + schema + `,"strict":true}}}`, "text.format.schema", ConstraintJSONSchema, schema},
		{"responses json_object", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_object"}}}`, "text.format", ConstraintJSONObject, ""},
		{"responses text", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"text"}}}`, "", "", ""},

		{"unknown type", "chat", `{` + msgs + `,"response_format":{"type":"yaml"}}`, "response_format.type", "error", "not supported"},
		{"no json_schema", "chat", `{` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "error", "needs a json_schema"},
		{"no schema", "chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r"}}}`, "response_format.json_schema.schema", "error", "needs a schema"},
		{"null schema", "completion", `{"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":null}}}`, "response_format.json_schema.schema", "error", "needs a schema"},
		{"grammar and format", "chat", `{` + msgs + `,"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}`, "grammar", "error", "grammar and response_format both constrain"},
		{"json_schema and grammar", "completion", `{"model":"m","prompt":"x","json_schema":{},"grammar":"root ::= \"a\""}`, "grammar", "error", "both constrain"},
		{"json_schema and format", "chat", `{` + msgs + `,"json_schema":{},"response_format":{"type":"json_object"}}`, "json_schema", "error", "json_schema and response_format both constrain"},
		{"grammar type", "chat", `{` + msgs + `,"grammar":5}`, "grammar", "error", "invalid type"},
		{"responses no schema", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"r"}}}`, "text.format.schema", "error", "needs a schema"},
		{"responses unknown format", "responses", `{"model":"m","input":"hi","text":{"format":{"type":"csv"}}}`, "text.format.type", "error", "not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got *Constraint
			var err error
			switch c.endpoint {
			case "chat":
				var r *Chat
				if r, err = DecodeChat([]byte(c.body)); err == nil {
					got = r.Constraint
				}
			case "completion":
				var r *Completion
				if r, err = DecodeCompletion([]byte(c.body)); err == nil {
					got = r.Constraint
				}
			default:
				var r *Responses
				if r, err = DecodeResponses([]byte(c.body)); err == nil {
					got = r.Constraint
				}
			}
			if c.kind == "error" {
				var e *Error
				if !errors.As(err, &e) || e.Status != 400 || e.Param != c.param || !strings.Contains(e.Message, c.msg) {
					t.Fatalf("got %v; want a 400 naming %q with %q", err, c.param, c.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.kind == "" {
				if got != nil {
					t.Fatalf("constraint %+v for free text", got)
				}
				return
			}
			if got == nil || got.Kind != c.kind || got.Param != c.param || got.Text+string(got.Schema) != c.msg {
				t.Fatalf("constraint %+v; want kind %q, param %q, content %q", got, c.kind, c.param, c.msg)
			}
		})
	}
}
