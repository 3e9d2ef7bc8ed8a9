package daemon

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/daemon/toolcall"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// weatherTool is small: the tiny model's context is 256 tokens.
const weatherTool = `{"type":"function","function":{"name":"wx","parameters":{"type":"object","properties":{"c":{"type":"string"}}}}}`

// chatResponse is the part of a chat completion the tool tests read.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Role      string            `json:"role"`
			Content   *string           `json:"content"`
			ToolCalls []openai.ToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// TestChatToolsServed: against the tiny model (whose template shows no
// tools), requests with tools and a tools round trip are served and well
// formed; a required call is refused while the server cannot constrain
// the answer, and handed to the constraint hook, with the schema of the
// call, when it can.
func TestChatToolsServed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var schemas []string
	h := start(t, opts{})
	bare := start(t, opts{setup: func(s *Server) { s.constrainSchema = nil }})
	hc := start(t, opts{setup: func(s *Server) {
		s.constrainSchema = func(j *job, schema []byte) error {
			mu.Lock()
			defer mu.Unlock()
			schemas = append(schemas, string(schema))
			return nil
		}
	}})
	const q = `{"role":"user","content":"Paris?"}`
	roundTrip := q + `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"wx","arguments":"{\"c\":\"P\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"21"}`
	body := func(msgs, extra string) string {
		return `{"model":"tiny","max_tokens":8,"temperature":0,"tools":[` + weatherTool + `],"messages":[` + msgs + `]` + extra + `}`
	}
	for _, tc := range []struct {
		name, body string
	}{
		{"auto", body(q, "")},
		{"round trip", body(roundTrip, "")},
		{"none", body(roundTrip, `,"tool_choice":"none"`)},
		{"history without tools", `{"model":"tiny","max_tokens":4,"messages":[` + roundTrip + `]}`},
		{"n", body(q, `,"n":2,"parallel_tool_calls":false`)},
	} {
		code, b := h.post(t, "/v1/chat/completions", tc.body)
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.name, code, b)
		}
		var r chatResponse
		if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) == 0 {
			t.Fatalf("%s: %v %s", tc.name, err, b)
		}
		for _, c := range r.Choices {
			switch {
			case c.Message.Role != "assistant":
				t.Errorf("%s: role %q", tc.name, c.Message.Role)
			case c.FinishReason == "tool_calls" && len(c.Message.ToolCalls) == 0:
				t.Errorf("%s: finish_reason tool_calls without calls: %s", tc.name, b)
			case len(c.Message.ToolCalls) == 0 && c.Message.Content == nil:
				t.Errorf("%s: neither content nor calls: %s", tc.name, b)
			}
		}
	}
	h.stream(t, "/v1/chat/completions", body(roundTrip, `,"stream":true`), false)

	code, b := bare.post(t, "/v1/chat/completions", body(q, `,"tool_choice":"required"`))
	if code != 400 || !strings.Contains(string(b), `"param":"tool_choice"`) {
		t.Errorf("required without constrained decoding: %d %s", code, b)
	}
	checkError(t, b, openai.TypeInvalidRequest, "")

	// Constrained, even the tiny model's random weights call the named
	// function (one without parameters, to fit the tiny context).
	const now = `{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{},"additionalProperties":false}}}`
	code, b = h.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":40,"temperature":0,"tools":[`+now+`],"messages":[`+q+`],`+
		`"tool_choice":{"type":"function","function":{"name":"now"}}}`)
	var called chatResponse
	if code != 200 || json.Unmarshal(b, &called) != nil || called.Choices[0].FinishReason != "tool_calls" ||
		len(called.Choices[0].Message.ToolCalls) != 1 || called.Choices[0].Message.ToolCalls[0].Function.Name != "now" {
		t.Errorf("named function, constrained: %d %s", code, b)
	}
	code, b = h.post(t, "/v1/chat/completions", body(q, `,"tool_choice":"required","response_format":{"type":"json_object"}`))
	if code != 400 || !strings.Contains(string(b), `"param":"tool_choice"`) {
		t.Errorf("a required call beside response_format: %d %s", code, b)
	}
	bad := `{"type":"function","function":{"name":"m","parameters":{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}}}}`
	code, b = h.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":4,"tools":[`+bad+`],"messages":[`+q+`],"tool_choice":"required"}`)
	if code != 400 || !strings.Contains(string(b), `"param":"tools"`) || !strings.Contains(string(b), "multipleOf") {
		t.Errorf("a schema the grammar cannot follow: %d %s", code, b)
	}

	tools := []toolcall.Tool{{Name: "wx", Parameters: json.RawMessage(`{"type":"object","properties":{"c":{"type":"string"}}}`)}}
	for _, tc := range []struct {
		choice   string
		only     string
		parallel bool
	}{{`"required"`, "", true}, {`{"type":"function","function":{"name":"wx"}}`, "wx", false}} {
		mu.Lock()
		schemas = nil
		mu.Unlock()
		if code, b := hc.post(t, "/v1/chat/completions", body(q, `,"n":2,"tool_choice":`+tc.choice)); code != 200 {
			t.Fatalf("%s: %d %s", tc.choice, code, b)
		}
		want, err := toolcall.Schema(tools, tc.only, tc.parallel)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(schemas) != 2 || schemas[0] != string(want) || schemas[1] != string(want) {
			t.Errorf("%s: constrained with %q, want %s for each choice", tc.choice, schemas, want)
		}
		mu.Unlock()
	}
}

// scripted is a generation whose events are given: one choice's tokens
// (id and released text), then its finish.
func scripted(tokens []sched.Event, finish string) *gen {
	g := &gen{n: 1, events: make(chan choiceEvent, len(tokens)+1)}
	for _, ev := range tokens {
		g.events <- choiceEvent{0, ev}
	}
	g.events <- choiceEvent{0, sched.Event{Token: -1, Finish: finish, PromptTokens: 3, CompletionTokens: len(tokens)}}
	close(g.events)
	return g
}

// TestChatWithToolsAnswers reads scripted answers in each family's syntax
// into tool calls, whole and streamed: a marker the detokenizer hides
// (Mistral's [TOOL_CALLS], token 9 here) is restored from its id.
func TestChatWithToolsAnswers(t *testing.T) {
	t.Parallel()
	set := &openai.ToolSet{Tools: []toolcall.Tool{{Name: "get_weather"}}, Choice: openai.ToolChoiceAuto, Parallel: true}
	tok := func(id int32, text string) sched.Event { return sched.Event{Token: id, Text: text} }
	tests := []struct {
		name     string
		plan     toolPlan
		tokens   []sched.Event
		content  string
		calls    []openai.FunctionCall
		finish   string
		parallel bool
	}{
		{"hermes", toolPlan{family: toolcall.Hermes}, []sched.Event{tok(1, "Checking.\n<tool_"), tok(2, "call>\n{\"name\": \"get_weather\", "),
			tok(3, "\"arguments\": {\"city\": "), tok(4, "\"Paris\"}}\n</tool_call>")},
			"Checking.\n", []openai.FunctionCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}, "tool_calls", true},
		{"mistral hidden marker", toolPlan{family: toolcall.Mistral, markers: map[int32]string{9: "[TOOL_CALLS]"}},
			[]sched.Event{tok(9, ""), tok(2, `[{"name": "get_weather", "arguments": {}}, `), tok(3, `{"name": "get_weather", "arguments": {"city": "Rome"}}]`)},
			"", []openai.FunctionCall{{Name: "get_weather", Arguments: `{}`}, {Name: "get_weather", Arguments: `{"city": "Rome"}`}}, "tool_calls", true},
		{"one call at a time", toolPlan{family: toolcall.Generic},
			[]sched.Event{tok(2, `[{"name": "get_weather", "arguments": {}}, `), tok(3, `{"name": "get_weather", "arguments": {"city": "Rome"}}]`)},
			"", []openai.FunctionCall{{Name: "get_weather", Arguments: `{}`}}, "tool_calls", false},
		{"plain answer", toolPlan{family: toolcall.Llama3}, []sched.Event{tok(1, "It is "), tok(2, "sunny.")}, "It is sunny.", nil, "stop", true},
		{"malformed call", toolPlan{family: toolcall.Hermes}, []sched.Event{tok(1, "<tool_call>{\"oops\": 1}</tool_call>")},
			"<tool_call>{\"oops\": 1}</tool_call>", nil, "stop", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &Server{}
			lm := &loaded{name: "m"}
			c := &openai.Chat{}
			plan := tc.plan
			plan.set = &openai.ToolSet{Tools: set.Tools, Choice: set.Choice, Parallel: tc.parallel}

			// Whole.
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
			if err := s.chatAnswer(w, r, c, lm, &plan, scripted(tc.tokens, "stop"), func() {}); err != nil {
				t.Fatal(err)
			}
			var resp chatResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			m := resp.Choices[0].Message
			var got []openai.FunctionCall
			for _, call := range m.ToolCalls {
				if call.Type != "function" || !strings.HasPrefix(call.ID, "call_") {
					t.Errorf("call %+v: want type function and a call_ id", call)
				}
				got = append(got, call.Function)
			}
			if !reflect.DeepEqual(got, tc.calls) || resp.Choices[0].FinishReason != tc.finish {
				t.Errorf("calls %+v finish %q, want %+v %q", got, resp.Choices[0].FinishReason, tc.calls, tc.finish)
			}
			switch {
			case tc.content == "" && m.Content != nil:
				t.Errorf("content %q, want null", *m.Content)
			case tc.content != "" && (m.Content == nil || *m.Content != tc.content):
				t.Errorf("content %v, want %q", m.Content, tc.content)
			}

			// Streamed.
			c.Stream = true
			w = httptest.NewRecorder()
			if err := s.chatAnswer(w, r, c, lm, &plan, scripted(tc.tokens, "stop"), func() {}); err != nil {
				t.Fatal(err)
			}
			content, calls, finish := readToolStream(t, w.Body)
			if content != tc.content || !reflect.DeepEqual(calls, tc.calls) || finish != tc.finish {
				t.Errorf("streamed content %q calls %+v finish %q, want %q %+v %q", content, calls, finish, tc.content, tc.calls, tc.finish)
			}
		})
	}
}

// readToolStream reassembles a streamed chat answer: its content, its
// calls (each announced once with id and name, then argument fragments),
// its finish_reason.
func readToolStream(t *testing.T, body io.Reader) (string, []openai.FunctionCall, string) {
	t.Helper()
	er := openai.NewEventReader(body)
	var content strings.Builder
	var calls []openai.FunctionCall
	finish := ""
	for {
		data, err := er.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(data) == openai.Done {
			continue
		}
		var ch openai.ChatChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				content.WriteString(*c.Delta.Content)
			}
			for _, d := range c.Delta.ToolCalls {
				switch {
				case d.Index == len(calls) && d.ID != "" && d.Type == "function" && d.Function.Name != "":
					calls = append(calls, openai.FunctionCall{Name: d.Function.Name})
				case d.Index == len(calls)-1 && d.ID == "" && d.Function.Name == "":
					calls[d.Index].Arguments += d.Function.Arguments
				default:
					t.Fatalf("out of order tool call delta %+v after %d calls", d, len(calls))
				}
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	return content.String(), calls, finish
}

// templateTokenizer is a tokenizer with the given chat template whose
// vocabulary holds the families' markers as control tokens.
func templateTokenizer(t *testing.T, tmpl string) *tokenizer.Tokenizer {
	t.Helper()
	toks := []string{"<unk>", "<s>", "</s>", "[TOOL_CALLS]", "<|python_tag|>", "<tool_call>"}
	types := []int32{tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeUserDefined}
	v := &tokenizer.Vocab{Model: tokenizer.ModelLlama, Tokens: toks, Types: types, Scores: make([]float32, len(toks)),
		BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddBOS: true, ChatTemplate: tmpl}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "engine", "tokenizer", "testdata", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRenderTools: how a conversation with tools is prompted for the
// model's template, and what the answer is then read with.
func TestRenderTools(t *testing.T) {
	t.Parallel()
	set := &openai.ToolSet{Tools: []toolcall.Tool{{Name: "wx", Parameters: json.RawMessage(`{"type":"object"}`)}},
		JSON: json.RawMessage(`[{"type": "function", "function": {"name": "wx", "parameters": {"type": "object"}}}]`), Choice: openai.ToolChoiceAuto, Parallel: true}
	history := []openai.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Paris?"},
		{Role: "assistant", ToolCalls: []openai.MessageToolCall{{ID: "call_123", Name: "wx", Arguments: `{"c": "P"}`}}},
		{Role: "tool", ToolCallID: "call_123", Content: "21"},
	}

	// Mistral: OpenAI-shaped ids are fitted to the nine characters its
	// template demands, the same in the call and in its result; the
	// answer is read as Mistral's, its hidden [TOOL_CALLS] token restored.
	text, plan, err := renderTools(templateTokenizer(t, readTemplate(t, "mistral-nemo-instruct.jinja")), history, set, "messages")
	if err != nil {
		t.Fatal(err)
	}
	id := toolcall.FitID(toolcall.Mistral, "call_123")
	if !strings.Contains(text, `"id": "`+id+`"}]`) || !strings.Contains(text, `"call_id": "`+id+`"}`) || !strings.Contains(text, "[AVAILABLE_TOOLS]") {
		t.Errorf("Mistral prompt %q lacks the tools or the fitted id %s", text, id)
	}
	if plan.family != toolcall.Mistral || plan.markers[3] != "[TOOL_CALLS]" || plan.schema != nil || len(plan.newID()) != 9 {
		t.Errorf("Mistral plan %+v", plan)
	}

	// A template that names the tool in the result turn gets the name
	// of the function the call id called.
	named := "{% for m in messages %}{{ m.role }}:{{ m.name }}:{{ m.content }}|{% endfor %}{% for t in tools %}{{ t.function.name }}{% endfor %}:{{ tool_choice }}"
	if text, _, err := renderTools(templateTokenizer(t, named), history, set, "messages"); err != nil || !strings.HasSuffix(text, "tool:wx:21|wx:auto") {
		t.Errorf("tool turn rendered %q, %v; want its function's name, and the tool choice", text, err)
	}

	// A template without tools: they are described in the system
	// message, the earlier call written into the assistant turn, the
	// results (two here) into one user turn, and the answer read as
	// Generic JSON.
	plain := "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
	two := append(history, openai.Message{Role: "tool", ToolCallID: "call_123", Content: "again"})
	text, plan, err = renderTools(templateTokenizer(t, plain), two, set, "messages")
	if err != nil {
		t.Fatal(err)
	}
	if want := "<system>" + toolcall.Instructions(set.Tools, true) + "\nBe brief.<user>Paris?<assistant>" + `{"name":"wx","arguments":{"c":"P"}}` +
		"<user>Result of wx: 21\nResult of wx: again"; text != want {
		t.Errorf("prompt %q\nwant   %q", text, want)
	}
	if plan.family != toolcall.Generic || len(plan.markers) != 0 {
		t.Errorf("plan %+v", plan)
	}

	// A required call is read as Generic JSON (the schema's syntax) and
	// constrained to the schema of a call.
	req := *set
	req.Choice = openai.ToolChoiceRequired
	_, plan, err = renderTools(templateTokenizer(t, readTemplate(t, "qwen2.5-instruct.jinja")), history, &req, "messages")
	want, _ := toolcall.Schema(set.Tools, "", true)
	if err != nil || plan.family != toolcall.Generic || string(plan.schema) != string(want) {
		t.Errorf("required: plan %+v, %v; want Generic with schema %s", plan, err, want)
	}

	// tool_choice none: no tools in the prompt, nothing read for calls.
	none := *set
	none.Choice = openai.ToolChoiceNone
	text, plan, err = renderTools(templateTokenizer(t, readTemplate(t, "qwen2.5-instruct.jinja")), history, &none, "messages")
	if err != nil || plan != nil || strings.Contains(text, "<tools>") || !strings.Contains(text, "<tool_response>\n21\n</tool_response>") {
		t.Errorf("none: %q, %+v, %v", text, plan, err)
	}
}

// TestLlamaToolsRealVocabulary: with Llama 3's real vocabulary and the
// Llama 3.1 template, a call after <|python_tag|> (a control token the
// detokenizer hides) is read from the generated ids.
func TestLlamaToolsRealVocabulary(t *testing.T) {
	t.Parallel()
	base, err := tokenizer.FromGGUFFile(filepath.Join("..", "engine", "tokenizer", "testdata", "ggml-vocab-llama-bpe.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	v := base.Vocab()
	v.ChatTemplate = readTemplate(t, "llama3.1-instruct.jinja")
	// The test vocabulary is Llama 3.0's, where Llama 3.1's <|python_tag|>
	// (128010) was still a reserved control token: give it its 3.1 name.
	v.Tokens = append([]string(nil), v.Tokens...)
	if v.Tokens[128010] != "<|reserved_special_token_5|>" || v.Types[128010] != tokenizer.TypeControl {
		t.Fatalf("token 128010 is %q", v.Tokens[128010])
	}
	v.Tokens[128010] = "<|python_tag|>"
	tok, err := tokenizer.New(&v)
	if err != nil {
		t.Fatal(err)
	}
	set := &openai.ToolSet{Tools: []toolcall.Tool{{Name: "wx"}}, JSON: json.RawMessage(`[{"type": "function", "function": {"name": "wx"}}]`),
		Choice: openai.ToolChoiceAuto, Parallel: true}
	text, plan, err := renderTools(tok, []openai.Message{{Role: "user", Content: "Paris?"}}, set, "messages")
	if err != nil {
		t.Fatal(err)
	}
	tag := tok.Encode("<|python_tag|>", false, true)
	if len(tag) != 1 || plan.family != toolcall.Llama3 || plan.markers[tag[0]] != "<|python_tag|>" || !strings.Contains(text, `"name": "wx"`) {
		t.Fatalf("plan %+v (python_tag %v), prompt %q", plan, tag, text)
	}
	// What the model generates, as the scheduler reports it: the hidden
	// tag's event has no text.
	var events []sched.Event
	dec := tok.NewDecoder()
	// Text comes first, so only the restored tag can open the call (a
	// Llama 3 call without it must begin the answer).
	ids := tok.Encode("Let me check.", false, false)
	first := len(ids)
	ids = append(append(ids, tag...), tok.Encode(`{"name": "wx", "parameters": {"city": "Paris"}}`, false, false)...)
	for _, id := range ids {
		events = append(events, sched.Event{Token: id, Text: dec.Add(id)})
	}
	if events[first].Text != "" {
		t.Fatalf("the tag decodes to %q; the test wants it hidden", events[first].Text)
	}
	w := httptest.NewRecorder()
	if err := (&Server{}).chatAnswer(w, httptest.NewRequest("POST", "/v1/chat/completions", nil), &openai.Chat{}, &loaded{name: "m"},
		plan, scripted(events, "stop"), func() {}); err != nil {
		t.Fatal(err)
	}
	var resp chatResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices[0]; c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` ||
		c.Message.Content == nil || *c.Message.Content != "Let me check." {
		t.Errorf("answer %s", w.Body.Bytes())
	}
}
