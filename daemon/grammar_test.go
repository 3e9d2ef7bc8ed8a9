package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/grammar"
)

// storiesPath is the real stories260K model: STRATA_STORIES_GGUF, or the
// shared models directory beside the checkout; tests skip without it.
func storiesPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("STRATA_STORIES_GGUF")
	if p == "" {
		p = filepath.Join("..", "..", "shared", "models", "stories260K.gguf")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no stories260K model (set STRATA_STORIES_GGUF): %v", err)
	}
	p, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startModel serves the model at path under name on a temporary socket.
func startModel(t *testing.T, path, name string) *harness {
	t.Helper()
	srv, err := New(Config{ModelDirs: []string{filepath.Dir(path)}, Log: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.LoadFile(context.Background(), path, api.LoadRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "strata.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{srv: srv, sock: sock, c: client.New(sock, ""), done: make(chan error, 1)}
	h.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- srv.Serve(ctx, []net.Listener{ul}, nil) }()
	t.Cleanup(h.stop)
	return h
}

// personSchema is what a structured-output client sends: required
// properties in order, an enum, a bounded array, a nested object.
const personSchema = `{"type":"object","properties":{
 "name":{"type":"string","maxLength":24},
 "age":{"type":"integer","minimum":1,"maximum":120},
 "mood":{"enum":["happy","sad"]},
 "friends":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3},
 "pet":{"anyOf":[{"type":"null"},{"type":"object","properties":{"kind":{"type":"string","maxLength":10}},"required":["kind"],"additionalProperties":false}]}},
 "required":["name","age","mood","friends","pet"],"additionalProperties":false}`

// byteMatcher matches text against the json_object grammar.
func byteMatcher(t *testing.T) *grammar.Matcher {
	t.Helper()
	pieces := make([][]byte, 256)
	for i := range pieces {
		pieces[i] = []byte{byte(i)}
	}
	v, err := grammar.NewVocab(pieces, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.JSONObject()
	if err != nil {
		t.Fatal(err)
	}
	m, err := grammar.NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func validator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustValidate(t *testing.T, s *jsonschema.Schema, text string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("output %q does not parse: %v", text, err)
	}
	if err := s.Validate(doc); err != nil {
		t.Fatalf("output %q does not validate: %v", text, err)
	}
}

// TestStructuredOutputStories serves the real stories260K model (a tiny
// story writer that has never seen JSON) and asks every endpoint for
// structured output: the outputs parse and validate, streamed or not,
// greedy or sampled, n > 1 included.
func TestStructuredOutputStories(t *testing.T) {
	t.Parallel()
	h := startModel(t, storiesPath(t), tiny) // named as checkStream expects
	v := validator(t, personSchema)
	rf := `"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":` + personSchema + `}}`
	msgs := `"messages":[{"role":"user","content":"Once upon a time there was a girl"}]`

	// Free output first: the model's own text is not JSON, so the
	// constraint is what makes the rest pass.
	code, b := h.post(t, "/v1/chat/completions", `{"model":"tiny",`+msgs+`,"max_tokens":40,"temperature":0}`)
	var free struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if code != 200 || json.Unmarshal(b, &free) != nil || json.Valid([]byte(free.Choices[0].Message.Content)) {
		t.Fatalf("free output: %d %s", code, b)
	}

	for _, body := range []string{
		`{"model":"tiny",` + msgs + `,` + rf + `,"max_tokens":400,"temperature":0}`,
		`{"model":"tiny",` + msgs + `,` + rf + `,"max_tokens":400,"temperature":0.9,"seed":5,"n":2}`,
	} {
		code, b := h.post(t, "/v1/chat/completions", body)
		var resp struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
		}
		if code != 200 || json.Unmarshal(b, &resp) != nil || len(resp.Choices) == 0 {
			t.Fatalf("chat: %d %s", code, b)
		}
		for _, c := range resp.Choices {
			if c.FinishReason != "stop" {
				t.Fatalf("finish %q: %s", c.FinishReason, b)
			}
			mustValidate(t, v, c.Message.Content)
		}
	}

	// Streamed: the deltas put together.
	var text strings.Builder
	for _, ev := range h.stream(t, "/v1/chat/completions", `{"model":"tiny",`+msgs+`,`+rf+`,"max_tokens":400,"temperature":0.7,"seed":1,"stream":true}`, false) {
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	mustValidate(t, v, text.String())

	// Legacy completions with response_format and with a GBNF grammar.
	code, b = h.post(t, "/v1/completions", `{"model":"tiny","prompt":"Lily said","max_tokens":400,"temperature":0.8,"seed":2,`+rf+`}`)
	var cmpl struct{ Choices []struct{ Text string } }
	if code != 200 || json.Unmarshal(b, &cmpl) != nil {
		t.Fatalf("completion: %d %s", code, b)
	}
	mustValidate(t, v, cmpl.Choices[0].Text)
	code, b = h.post(t, "/v1/completions", `{"model":"tiny","prompt":"Lily said","max_tokens":50,"temperature":1,"seed":3,"grammar":"root ::= (\"yes\" | \"no\") \", \" [a-z]{1,5} \".\""}`)
	if code != 200 || json.Unmarshal(b, &cmpl) != nil {
		t.Fatalf("grammar completion: %d %s", code, b)
	}
	if out := cmpl.Choices[0].Text; !(strings.HasPrefix(out, "yes, ") || strings.HasPrefix(out, "no, ")) || !strings.HasSuffix(out, ".") {
		t.Fatalf("grammar output %q", out)
	}

	// json_object, and the Responses API's text.format.
	// json_object leaves strings unbounded, and this model, once in a
	// string, tells its story there: a choice may run out of tokens
	// (finish "length", cut off). Every one that stops is an object.
	code, b = h.post(t, "/v1/chat/completions", `{"model":"tiny",`+msgs+`,"response_format":{"type":"json_object"},"max_tokens":300,"temperature":1,"seed":4,"n":6}`)
	var objs struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if code != 200 || json.Unmarshal(b, &objs) != nil {
		t.Fatalf("json_object: %d %s", code, b)
	}
	jm := byteMatcher(t)
	for _, c := range objs.Choices {
		if c.FinishReason == "stop" {
			var obj map[string]any
			if err := json.Unmarshal([]byte(c.Message.Content), &obj); err != nil {
				t.Fatalf("json_object output %q: %v", c.Message.Content, err)
			}
			continue
		}
		if s, err := jm.AdvanceBytes(jm.Start(), []byte(c.Message.Content)); err != nil || s == grammar.Dead {
			t.Fatalf("cut-off json_object output %q is not the start of a JSON object", c.Message.Content)
		}
	}
	code, b = h.post(t, PathResponses, `{"model":"tiny","input":"Tell me about a dog","max_output_tokens":400,"temperature":0,"text":{"format":{"type":"json_schema","name":"person","strict":true,"schema":`+personSchema+`}}}`)
	var rs struct {
		Output []struct{ Content []struct{ Text string } }
		Text   struct{ Format struct{ Type string } }
	}
	if code != 200 || json.Unmarshal(b, &rs) != nil || len(rs.Output) == 0 || rs.Text.Format.Type != "json_schema" {
		t.Fatalf("responses: %d %s", code, b)
	}
	mustValidate(t, v, rs.Output[0].Content[0].Text)

	// A schema the translation refuses is a 400 naming the field.
	code, b = h.post(t, "/v1/chat/completions", `{"model":"tiny",`+msgs+`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","multipleOf":2}}}}`)
	if code != 400 || !strings.Contains(string(b), `"param":"response_format.json_schema.schema"`) {
		t.Fatalf("bad schema: %d %s", code, b)
	}
}

// TestMatcherCache: one Matcher per grammar text and model, shared by
// requests; the least recently used go beyond the limit.
func TestMatcherCache(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	lm, err := h.srv.lookup(tiny)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(i int) *grammar.Grammar {
		g, err := grammar.Parse(fmt.Sprintf("root ::= \"%d\"", i))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	first, err := lm.matcher(parse(0))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := lm.matcher(parse(0)); again != first {
		t.Fatal("the same grammar got a second Matcher")
	}
	for i := 1; i <= maxMatchers; i++ {
		if _, err := lm.matcher(parse(i)); err != nil {
			t.Fatal(err)
		}
	}
	lm.grammars.mu.Lock()
	n := len(lm.grammars.matchers)
	lm.grammars.mu.Unlock()
	if n != maxMatchers {
		t.Fatalf("%d matchers cached, want %d", n, maxMatchers)
	}
	if again, _ := lm.matcher(parse(0)); again == first {
		t.Fatal("the least recently used Matcher was kept beyond the limit")
	}
	if again, _ := lm.matcher(parse(maxMatchers)); again == nil {
		t.Fatal("no matcher")
	}
}

// TestConstraintTranslation: each way of asking for constrained output
// becomes a Matcher that accepts what it promises and nothing else; a
// grammar or schema that does not translate is a 400 naming its field,
// on the wire as well.
func TestConstraintTranslation(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	lm, err := h.srv.lookup(tiny)
	if err != nil {
		t.Fatal(err)
	}
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	for _, c := range []struct {
		name             string
		con              openai.Constraint
		accepts, rejects string
	}{
		{"grammar", openai.Constraint{Kind: openai.ConstraintGrammar, Text: `root ::= "yes" | "no"`, Param: "grammar"}, "yes", "maybe"},
		{"json_object", openai.Constraint{Kind: openai.ConstraintJSONObject, Param: "response_format"}, `{"x":[1,{}]}`, `[1]`},
		{"json_schema", openai.Constraint{Kind: openai.ConstraintJSONSchema, Schema: json.RawMessage(schema), Param: "json_schema"}, `{"a":1}`, `{"a":"1"}`},
	} {
		m, err := lm.constraintMatcher(&c.con)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if again, _ := lm.constraintMatcher(&c.con); again != m {
			t.Errorf("%s: a second Matcher for the same constraint", c.name)
		}
		for text, want := range map[string]bool{c.accepts: true, c.rejects: false} {
			s, err := m.AdvanceBytes(m.Start(), []byte(text))
			if got := err == nil && s != grammar.Dead && m.Accepting(s); got != want {
				t.Errorf("%s: %q accepted = %v, want %v", c.name, text, got, want)
			}
		}
	}
	msgs := `"model":"tiny","messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ body, param, msg string }{
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"string","pattern":"(?=a)"}}}}`, "response_format.json_schema.schema", `lookaround`},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","required":["z"]}}}}`, "response_format.json_schema.schema", `required property \"z\"`},
		{`{` + msgs + `,"grammar":"root ::= (\"a\""}`, "grammar", "invalid grammar"},
		{`{` + msgs + `,"grammar":"root ::= x"}`, "grammar", `\"x\" is used in \"root\" but never defined`},
		{`{` + msgs + `,"grammar":"root ::= ((((\"a\"?){0,40}){0,40}){0,40})"}`, "grammar", "too ambiguous"},
		{`{` + msgs + `,"json_schema":{"type":"number","multipleOf":2}}`, "json_schema", `keyword \"multipleOf\"`},
	} {
		code, b := h.post(t, "/v1/chat/completions", c.body)
		if code != 400 || !strings.Contains(string(b), `"param":"`+c.param+`"`) || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s: %d %s; want a 400 naming %s with %s", c.body, code, b, c.param, c.msg)
		}
	}
	code, b := h.post(t, PathResponses, `{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","name":"r","schema":{"type":"string","pattern":"\\bx"}}}}`)
	if code != 400 || !strings.Contains(string(b), `"param":"text.format.schema"`) {
		t.Errorf("responses: %d %s", code, b)
	}
}

// TestConstrainJobSchema: the hook a required tool call goes through
// constrains the job's request, and names "tools" when the schema does
// not translate.
func TestConstrainJobSchema(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	lm, err := h.srv.lookup(tiny)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{lm: lm}
	if err := h.srv.constrainJobSchema(j, []byte(`{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object"}},"required":["name","arguments"]}`)); err != nil {
		t.Fatal(err)
	}
	m := j.req.Grammar
	if m == nil {
		t.Fatal("no grammar on the job")
	}
	s, err := m.AdvanceBytes(m.Start(), []byte(`{"name":"f","arguments":{"x":1}}`))
	if err != nil || !m.Accepting(s) {
		t.Fatalf("a call under the schema is refused: %v", err)
	}
	var oe *openai.Error
	if err := h.srv.constrainJobSchema(&job{lm: lm}, []byte(`{"type":"string","pattern":"(?=x)"}`)); !errors.As(err, &oe) || oe.Param != "tools" {
		t.Fatalf("bad schema: %v", err)
	}
}
