package openai

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeChatFull(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/requests/chat_full.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeChat(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Chat{
		Params: Params{Model: "tiny", MaxTokens: 8, Temperature: 0.5, TopP: 0.9, Seed: uint64(1<<64 - 3), SeedSet: true,
			Stop: []string{"\n", "END"}, Logprobs: true, TopLogprobs: 2, Presence: 0.5, Frequency: -0.5,
			LogitBias: map[int32]float64{7: -100}, Stream: true, IncludeUsage: true,
			TopK: 40, MinP: 0.05, RepeatPenalty: 1.1, RepeatLastN: 32, N: 1},
		Messages: []Message{{Role: "system", Content: "be brief"}, {Role: "system", Content: "ab"}, {Role: "user", Content: "hi"}, {Role: "assistant"}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
}

func TestDecodeCompletionForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body   string
		text   string
		tokens []int32
	}{
		{`{"model":"m","prompt":"hello"}`, "hello", nil},
		{`{"model":"m","prompt":["hello"]}`, "hello", nil},
		{`{"model":"m","prompt":[1,2]}`, "", []int32{1, 2}},
		{`{"model":"m","prompt":[[3]]}`, "", []int32{3}},
	}
	for _, tc := range tests {
		c, err := DecodeCompletion([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if c.Prompt.Text != tc.text || !reflect.DeepEqual(c.Prompt.Tokens, tc.tokens) {
			t.Fatalf("%s: got %+v", tc.body, c.Prompt)
		}
	}
	c, err := DecodeCompletion([]byte(`{"model":"m","prompt":"x","logprobs":3}`))
	if err != nil || !c.Logprobs || c.TopLogprobs != 3 {
		t.Fatalf("legacy logprobs: %+v %v", c, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body, param, msg string
		completion             bool
	}{
		{"empty", ``, "", "empty", false},
		{"not json", `{"model":`, "", "not valid JSON", false},
		{"array body", `[1]`, "", "JSON object", false},
		{"invalid utf8", "{\"model\":\"m\xff\"," + msgs + "}", "", "UTF-8", false},
		{"no model", `{` + msgs + `}`, "model", "model", false},
		{"no messages", `{"model":"m"}`, "messages", "non-empty", false},
		{"bad role", `{"model":"m","messages":[{"role":"function","content":"x"}]}`, "messages[0].role", "not supported", false},
		{"tool without id", `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "no tool_call_id", false},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "", "only \"text\"", false},
		{"content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, "", "content", false},
		{"negative max", `{"model":"m",` + msgs + `,"max_tokens":-1}`, "max_tokens", "at least 1", false},
		{"zero max", `{"model":"m",` + msgs + `,"max_completion_tokens":0}`, "max_completion_tokens", "at least 1", false},
		{"absurd max", `{"model":"m",` + msgs + `,"max_tokens":1e30}`, "max_tokens", "", false},
		{"huge max", `{"model":"m",` + msgs + `,"max_tokens":99999999999}`, "max_tokens", "absurdly", false},
		{"string max", `{"model":"m",` + msgs + `,"max_tokens":"5"}`, "max_tokens", "invalid type", false},
		{"temp", `{"model":"m",` + msgs + `,"temperature":2.5}`, "temperature", "between 0 and 2", false},
		{"neg temp", `{"model":"m",` + msgs + `,"temperature":-1}`, "temperature", "between 0 and 2", false},
		{"top_p", `{"model":"m",` + msgs + `,"top_p":1.5}`, "top_p", "between 0 and 1", false},
		{"top_p below float32", `{"model":"m",` + msgs + `,"top_p":1e-46}`, "top_p", "too small", false},
		{"n", `{"model":"m",` + msgs + `,"n":9}`, "n", "n must be between 1 and 8", false},
		{"n zero", `{"model":"m",` + msgs + `,"n":0}`, "n", "n must be between 1 and 8", false},
		{"stop count", `{"model":"m",` + msgs + `,"stop":["a","b","c","d","e"]}`, "stop", "at most 4", false},
		{"stop type", `{"model":"m",` + msgs + `,"stop":5}`, "", "string", false},
		{"stream_options alone", `{"model":"m",` + msgs + `,"stream_options":{"include_usage":true}}`, "stream_options", "only allowed", false},
		{"top_logprobs alone", `{"model":"m",` + msgs + `,"top_logprobs":2}`, "top_logprobs", "requires logprobs", false},
		{"top_logprobs big", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":21}`, "top_logprobs", "between 0 and 20", false},
		{"penalty", `{"model":"m",` + msgs + `,"presence_penalty":3}`, "presence_penalty", "between -2 and 2", false},
		{"bias key", `{"model":"m",` + msgs + `,"logit_bias":{"x":1}}`, "logit_bias", "not a token id", false},
		{"bias value", `{"model":"m",` + msgs + `,"logit_bias":{"1":101}}`, "logit_bias", "between -100 and 100", false},
		{"format type", `{"model":"m",` + msgs + `,"response_format":{"type":"xml"}}`, "response_format.type", "not supported", false},
		{"tools", `{"model":"m",` + msgs + `,"tools":[{"type":"function"}]}`, "tools[0].function", "missing", false},
		{"no prompt", `{"model":"m"}`, "prompt", "prompt", true},
		{"empty tokens", `{"model":"m","prompt":[]}`, "", "empty", true},
		{"two prompts", `{"model":"m","prompt":["a","b"]}`, "", "only one prompt", true},
		{"echo", `{"model":"m","prompt":"a","echo":true}`, "echo", "not supported", true},
		{"best_of", `{"model":"m","prompt":"a","best_of":3}`, "best_of", "best_of must be 1", true},
		{"legacy logprobs", `{"model":"m","prompt":"a","logprobs":6}`, "logprobs", "between 0 and 5", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.completion {
				_, err = DecodeCompletion([]byte(tc.body))
			} else {
				_, err = DecodeChat([]byte(tc.body))
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *Error", err)
			}
			if e.Status != 400 || e.Type != TypeInvalidRequest || e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("got %+v, want param %q message containing %q", e, tc.param, tc.msg)
			}
		})
	}
}

func TestEventReaderStrict(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteEvent(&buf, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if err := WriteDone(&buf); err != nil {
		t.Fatal(err)
	}
	r := NewEventReader(bytes.NewReader(buf.Bytes()))
	d, err := r.Next()
	if err != nil || string(d) != `{"a":1}` {
		t.Fatalf("first: %q %v", d, err)
	}
	if d, err = r.Next(); err != nil || string(d) != Done {
		t.Fatalf("done: %q %v", d, err)
	}
	if _, err = r.Next(); err != io.EOF {
		t.Fatalf("after done: %v", err)
	}
	bad := []string{
		"data: {}\n",             // no blank line
		"event: x\ndata: {}\n\n", // other field
		"data:{}\n\n",            // no space
		"data: {}\n\n",           // ends without [DONE]
		"data: [DONE]\n\ndata: {}\n\n",
		": comment\n\n",
	}
	for _, s := range bad {
		r := NewEventReader(strings.NewReader(s))
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if err == io.EOF {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestErrorBodyNulls(t *testing.T) {
	t.Parallel()
	e := BadRequest("", "x")
	b := e.Body()
	if b.Error.Param != nil || b.Error.Code != nil {
		t.Fatal("empty param/code must be null")
	}
	if AsError(errors.New("boom")).Status != 500 {
		t.Fatal("plain errors are 500s")
	}
}

// TestNothingIgnored: a field no request type has is refused by name,
// while the harmless ones clients send are accepted; llama-server's
// sampling fields are validated.
func TestNothingIgnored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body  string
		param string // "" = accepted
	}{
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"user":"u","store":false,"service_tier":"auto","metadata":{}}`, ""},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"mirostat":2}`, "mirostat"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"zeta":1,"beta":2}`, "beta"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":-1}`, "top_k"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"min_p":1.5}`, "min_p"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"repeat_penalty":0}`, "repeat_penalty"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"repeat_last_n":-2}`, "repeat_last_n"},
	} {
		_, err := DecodeChat([]byte(tc.body))
		if tc.param == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.body, err)
			}
			continue
		}
		var oe *Error
		if !errors.As(err, &oe) || oe.Param != tc.param {
			t.Errorf("%s: %v, want a 400 naming %q", tc.body, err, tc.param)
		}
	}
	if c, err := DecodeCompletion([]byte(`{"model":"m","prompt":"x","best_of":1,"echo":false,"grammar":"root ::= x"}`)); err != nil || c.Constraint == nil {
		t.Errorf("a completion's grammar was not taken: %v", err)
	}
}
