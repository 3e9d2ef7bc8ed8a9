package toolcall

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// seqIDs names calls id0, id1, … so that results can be compared.
func seqIDs() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("id%d", n-1) }
}

type parseCase struct {
	name    string
	f       Family
	text    string
	content string
	calls   []Call // IDs are filled in by index
}

var parseCases = []parseCase{
	// Hermes / Qwen 2.5.
	{"hermes one", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
		[]Call{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
	{"hermes text first, two calls", Hermes,
		"Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>",
		"Let me look.\n", []Call{{Name: "a", Arguments: `{"x": [1, {"y": "}"}]}`}, {Name: "b", Arguments: `{}`}}},
	{"hermes no closing tag at the end", Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1}}", "",
		[]Call{{Name: "f", Arguments: `{"q": 1}`}}},
	{"hermes arguments as a string", Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 2}\"}</tool_call>", "",
		[]Call{{Name: "f", Arguments: `{"q": 2}`}}},
	{"hermes OpenAI-shaped call", Hermes, "<tool_call>{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": true}}}</tool_call>", "",
		[]Call{{Name: "f", Arguments: `{"a": true}`}}},
	{"hermes text after the calls", Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone.", "Done.",
		[]Call{{Name: "f", Arguments: `{}`}}},
	{"hermes xml (qwen 3.5)", Hermes, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n" +
		"<parameter=note>\nline 1\nline 2\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{Name: "get_weather", Arguments: `{"city": "Paris", "days": 3, "note": "line 1\nline 2"}`}}},
	{"hermes xml without parameters", Hermes, "Now.\n<tool_call>\n<function=now>\n</function>\n</tool_call>", "Now.\n",
		[]Call{{Name: "now", Arguments: `{}`}}},
	{"hermes xml malformed", Hermes, "<tool_call>\n<function=f>\n<param>x</param>\n</function>\n</tool_call>",
		"<tool_call>\n<function=f>\n<param>x</param>\n</function>\n</tool_call>", nil},
	{"hermes plain text", Hermes, "The weather is <b>fine</b>.", "The weather is <b>fine</b>.", nil},
	{"hermes malformed json", Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": }}\n</tool_call>",
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": }}\n</tool_call>", nil},
	{"hermes not a call object", Hermes, "<tool_call>{\"weather\": 1}</tool_call> ok", "<tool_call>{\"weather\": 1}</tool_call> ok", nil},
	{"hermes truncated", Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"abc", "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"abc", nil},
	{"hermes no name", Hermes, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil},
	{"hermes arguments not an object", Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", nil},

	// Llama 3.x.
	{"llama json", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
		[]Call{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
	{"llama python tag", Llama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"n\": -1.5e3}}", "",
		[]Call{{Name: "f", Arguments: `{"n": -1.5e3}`}}},
	{"llama two calls", Llama3, " {\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"s\": \"a;b\"}}", "",
		[]Call{{Name: "f", Arguments: `{}`}, {Name: "g", Arguments: `{"s": "a;b"}`}}},
	{"llama text", Llama3, "Paris is sunny {\"name\": \"f\"}", "Paris is sunny {\"name\": \"f\"}", nil},
	{"llama json that is no call", Llama3, "{\"answer\": 42}", "{\"answer\": 42}", nil},
	{"llama builtin call syntax", Llama3, "<|python_tag|>brave_search.call(query=\"x\")", "<|python_tag|>brave_search.call(query=\"x\")", nil},

	// Mistral.
	{"mistral array", Mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}, {\"name\": \"g\", \"arguments\": {}}]", "",
		[]Call{{Name: "f", Arguments: `{"a": 1}`}, {Name: "g", Arguments: `{}`}}},
	{"mistral named form", Mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]g[CALL_ID]x1[ARGS]{}", "",
		[]Call{{Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Name: "g", Arguments: `{}`}}},
	{"mistral text", Mistral, "Sure [TOOL] calls", "Sure [TOOL] calls", nil},
	{"mistral malformed", Mistral, "[TOOL_CALLS] oops", "[TOOL_CALLS] oops", nil},

	// Generic.
	{"generic object", Generic, "{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}", "",
		[]Call{{Name: "f", Arguments: `{"a": [1, 2]}`}}},
	{"generic array", Generic, "[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {\"b\": null}}]", "",
		[]Call{{Name: "f", Arguments: `{}`}, {Name: "g", Arguments: `{"b": null}`}}},
	{"generic envelope", Generic, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}", "",
		[]Call{{Name: "f", Arguments: `{}`}}},
	{"generic fenced", Generic, "```json\n{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}\n```", "",
		[]Call{{Name: "f", Arguments: `{"x": 1}`}}},
	{"generic text", Generic, "Hello {\"name\": \"f\", \"arguments\": {}}", "Hello {\"name\": \"f\", \"arguments\": {}}", nil},
	{"generic other json", Generic, "{\"response\": \"hi\"}", "{\"response\": \"hi\"}", nil},
	{"generic truncated", Generic, "{\"name\": \"f\", \"arguments\": {", "{\"name\": \"f\", \"arguments\": {", nil},
}

func withIDs(calls []Call) []Call {
	if calls == nil {
		return nil
	}
	out := make([]Call, len(calls))
	for i, c := range calls {
		c.ID = fmt.Sprintf("id%d", i)
		out[i] = c
	}
	return out
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			content, calls := Parse(tc.f, tc.text, seqIDs())
			if content != tc.content {
				t.Errorf("content = %q, want %q", content, tc.content)
			}
			if want := withIDs(tc.calls); !reflect.DeepEqual(calls, want) {
				t.Errorf("calls = %+v, want %+v", calls, want)
			}
		})
	}
}

// stream feeds text to a parser in pieces of n bytes and reassembles what
// it streams, checking the order of the pieces on the way.
func stream(t *testing.T, f Family, text string, n int) (string, []Call) {
	t.Helper()
	p := NewParser(f, seqIDs())
	var content strings.Builder
	var calls []Call
	take := func(ds []Delta) {
		for _, d := range ds {
			if !d.Call {
				if d.Content == "" {
					t.Errorf("empty content delta")
				}
				content.WriteString(d.Content)
				continue
			}
			switch {
			case d.Index == len(calls):
				if d.ID == "" || d.Name == "" || d.Arguments != "" {
					t.Errorf("first delta of call %d = %+v, want id and name only", d.Index, d)
				}
				calls = append(calls, Call{ID: d.ID, Name: d.Name})
			case d.Index == len(calls)-1:
				if d.ID != "" || d.Name != "" {
					t.Errorf("later delta of call %d repeats id or name: %+v", d.Index, d)
				}
				calls[d.Index].Arguments += d.Arguments
			default:
				t.Errorf("delta for call %d while %d were announced", d.Index, len(calls))
			}
		}
	}
	for i := 0; i < len(text); i += n {
		take(p.Feed(text[i:min(i+n, len(text))]))
	}
	take(p.Close())
	if !reflect.DeepEqual(calls, p.Calls()) {
		t.Errorf("streamed calls %+v, Calls() %+v", calls, p.Calls())
	}
	return content.String(), calls
}

// TestParserStreams: whatever the pieces the text arrives in, a well-formed
// answer streams exactly what Parse reads from it, and a call's arguments
// arrive in more than one piece when the text does.
func TestParserStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		if tc.calls == nil || strings.Contains(tc.name, "string") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for n := 1; n <= len(tc.text); n++ {
				content, calls := stream(t, tc.f, tc.text, n)
				if content != tc.content || !reflect.DeepEqual(calls, withIDs(tc.calls)) {
					t.Fatalf("pieces of %d: content %q calls %+v, want %q %+v", n, content, calls, tc.content, withIDs(tc.calls))
				}
			}
		})
	}
}

// TestParserMalformedStreams: text that is not a call comes out whole as
// content when streamed, too, since nothing of it was announced. (Arguments
// that are well bracketed but not JSON, or cut off, are streamed as they
// come: a streamed call cannot be taken back; Parse refuses them.)
func TestParserMalformedStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		if tc.calls != nil || strings.Contains(tc.name, "truncated") || strings.Contains(tc.name, "malformed json") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, n := range []int{1, 3, len(tc.text)} {
				content, calls := stream(t, tc.f, tc.text, n)
				if content != tc.text || calls != nil {
					t.Errorf("pieces of %d: content %q calls %+v, want the text as content", n, content, calls)
				}
			}
		})
	}
}

// TestParserHoldsBack: text that may begin a call is not streamed until it
// is clear, and arguments stream before the call is complete.
func TestParserHoldsBack(t *testing.T) {
	t.Parallel()
	p := NewParser(Hermes, seqIDs())
	if d := p.Feed("Hi <tool_"); len(d) != 1 || d[0].Content != "Hi " {
		t.Fatalf("Feed = %+v, want the text before the possible opener", d)
	}
	if d := p.Feed("call>{\"name\": \"f\", \"arguments\": {\"a\""); len(d) != 2 || d[0].Name != "f" || d[1].Arguments != `{"a"` {
		t.Fatalf("Feed = %+v, want the call's header and its first arguments", d)
	}
	if d := p.Feed(": 1}}</tool_call>"); len(d) != 1 || d[0].Arguments != ": 1}" {
		t.Fatalf("Feed = %+v, want the rest of the arguments", d)
	}
	if d := p.Close(); len(d) != 0 {
		t.Fatalf("Close = %+v, want nothing", d)
	}

	l := NewParser(Llama3, seqIDs())
	if d := l.Feed("  "); len(d) != 0 {
		t.Fatalf("leading space streamed: %+v", d)
	}
	if d := l.Feed("{\"answ"); len(d) != 0 {
		t.Fatalf("a possible call streamed as content: %+v", d)
	}
	if d := l.Feed("er\": 1}"); len(d) != 1 || d[0].Content != "  {\"answer\": 1}" {
		t.Fatalf("Feed = %+v, want the object (and the space before it) back as content once its key rules out a call", d)
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tmpl string
		want Family
	}{
		{"", Generic},
		{"{{ '<|im_start|>' + m.content }}", Generic},
		{"{{- '<tool_call>\\n' }}{{ tools }}", Hermes},
		{"[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]", Mistral},
		{"<|start_header_id|>{% if tools %}{{ '<|python_tag|>' }}{% endif %}", Llama3},
		{"<|start_header_id|>{{ m.content }}", Generic},
	} {
		if got := Detect(tc.tmpl); got != tc.want {
			t.Errorf("Detect(%q) = %v, want %v", tc.tmpl, got, tc.want)
		}
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		m := NewID(Mistral)
		if len(m) != 9 || strings.Trim(m, idChars) != "" {
			t.Fatalf("Mistral id %q is not nine alphanumerics", m)
		}
		o := NewID(Hermes)
		if !strings.HasPrefix(o, "call_") || len(o) != 29 || seen[o] {
			t.Fatalf("id %q: want a fresh call_ id", o)
		}
		seen[o] = true
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	tools := []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}}}`)}, {Name: "g"}}
	tests := []struct {
		name     string
		only     string
		parallel bool
		want     string
		wantErr  string
	}{
		{"named", "g", true, `{"type":"object","properties":{"name":{"const":"g"},"arguments":{"type":"object"}},"required":["name","arguments"],"additionalProperties":false}`, ""},
		{"any one", "", false, `{"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object","properties":{"a":{"type":"integer"}}}},"required":["name","arguments"],"additionalProperties":false},` +
			`{"type":"object","properties":{"name":{"const":"g"},"arguments":{"type":"object"}},"required":["name","arguments"],"additionalProperties":false}]}`, ""},
		{"unknown", "h", false, "", `no tool is named "h"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Schema(tools, tc.only, tc.parallel)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("Schema = %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
	par, err := Schema(tools[:1], "", true)
	if err != nil || !strings.HasPrefix(string(par), `{"type":"array","items":{"type":"object"`) || !strings.HasSuffix(string(par), `,"minItems":1}`) {
		t.Errorf("parallel schema = %s, %v; want an array of calls", par, err)
	}
	// What the schema describes is what Parse reads as a Generic call.
	if _, calls := Parse(Generic, `[{"name": "f", "arguments": {"a": 1}}]`, nil); len(calls) != 1 || calls[0].Name != "f" {
		t.Errorf("a call shaped by the schema parses to %+v", calls)
	}
	if s := Instructions(tools, true); !strings.Contains(s, `{"name":"f","parameters":{"type":"object"`) || !strings.Contains(s, "array") {
		t.Errorf("Instructions = %q", s)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	one := []Call{{Name: "f", Arguments: `{"a": 1}`}}
	two := []Call{{Name: "f", Arguments: `{"a": 1}`}, {Name: "g", Arguments: `not json`}}
	if got := Format(one); got != `{"name":"f","arguments":{"a":1}}` {
		t.Errorf("Format(one) = %s", got)
	}
	got := Format(two)
	if got != `[{"name":"f","arguments":{"a":1}},{"name":"g","arguments":{}}]` {
		t.Errorf("Format(two) = %s", got)
	}
	// What Format writes, Parse reads back.
	if _, calls := Parse(Generic, got, nil); len(calls) != 2 || calls[1].Name != "g" {
		t.Errorf("Parse(Format(two)) = %+v", calls)
	}
}

// TestParserGenericStreams: a Generic call (what a required call is
// constrained to) streams its arguments as they come; an envelope waits
// for the end.
func TestParserGenericStreams(t *testing.T) {
	t.Parallel()
	p := NewParser(Generic, seqIDs())
	if d := p.Feed(`[{"name": "f", "arguments": {"a"`); len(d) != 2 || d[0].Name != "f" || d[1].Arguments != `{"a"` {
		t.Fatalf("Feed = %+v, want the call and the start of its arguments", d)
	}
	if d := p.Feed(`: 1}}]`); len(d) != 1 || d[0].Arguments != `: 1}` {
		t.Fatalf("Feed = %+v", d)
	}
	e := NewParser(Generic, seqIDs())
	if d := e.Feed(`{"tool_calls": [{"name": "f", "arguments": {}}]}`); len(d) != 0 {
		t.Fatalf("an envelope streamed before the end: %+v", d)
	}
	if d := e.Close(); len(d) != 2 || d[0].Name != "f" || d[1].Arguments != "{}" {
		t.Fatalf("Close = %+v", d)
	}
}

func TestFitID(t *testing.T) {
	t.Parallel()
	if got := FitID(Hermes, "call_x"); got != "call_x" {
		t.Errorf("FitID(Hermes) = %q", got)
	}
	if got := FitID(Mistral, "a1B2c3D4e"); got != "a1B2c3D4e" {
		t.Errorf("a fitting id was changed to %q", got)
	}
	a, b := FitID(Mistral, "call_123"), FitID(Mistral, "call_124")
	if len(a) != 9 || strings.Trim(a, idChars) != "" || a != FitID(Mistral, "call_123") || a == b {
		t.Errorf("FitID(Mistral) = %q, %q: want stable, distinct, nine alphanumerics", a, b)
	}
}

// TestParserTypes: an untyped XML value is read by its parameter's schema
// type.
func TestParserTypes(t *testing.T) {
	t.Parallel()
	tools := []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"zip":{"type":"string"},"n":{"type":"integer"}}}`)}}
	text := "<tool_call>\n<function=f>\n<parameter=zip>\n75001\n</parameter>\n<parameter=n>\n7\n</parameter>\n<parameter=x>\ntrue\n</parameter>\n</function>\n</tool_call>"
	_, calls := NewParser(Hermes, seqIDs()).Types(tools).Parse(text)
	if want := `{"zip": "75001", "n": 7, "x": true}`; len(calls) != 1 || calls[0].Arguments != want {
		t.Errorf("calls %+v, want arguments %s", calls, want)
	}
	_, calls = Parse(Hermes, text, seqIDs())
	if want := `{"zip": 75001, "n": 7, "x": true}`; len(calls) != 1 || calls[0].Arguments != want {
		t.Errorf("without types: calls %+v, want arguments %s", calls, want)
	}
}
