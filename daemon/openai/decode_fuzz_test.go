package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

func seedCorpus(f *testing.F) {
	files, _ := filepath.Glob("testdata/requests/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","prompt":[[1,2,3]],"logprobs":3}`))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required",` +
		`"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"a","content":"y"}]}`))
	f.Add([]byte(`{"model":"m","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"},` +
		`"input":[{"type":"function_call","call_id":"a","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"y"}]}`))
}

// checkDecoded asserts the invariants every accepted request satisfies and
// that every rejection is a 400 *Error.
func checkDecoded(t *testing.T, p *Params, err error) {
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Type != TypeInvalidRequest || e.Message == "" {
			t.Fatalf("rejection is not a well-formed 400: %#v", err)
		}
		return
	}
	if p.Model == "" || p.MaxTokens < 0 || p.Temperature < 0 || p.Temperature > 2 || p.TopP < 0 || p.TopP > 1 ||
		len(p.Stop) > MaxStop || p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs {
		t.Fatalf("accepted out-of-range params: %+v", p)
	}
	if p.IncludeUsage && !p.Stream {
		t.Fatalf("include_usage without stream")
	}
	for _, s := range p.Stop {
		if s == "" || !utf8.ValidString(s) {
			t.Fatalf("bad stop %q", s)
		}
	}
}

// FuzzDecodeRequest feeds arbitrary bytes to both request decoders: they
// must never panic, must reject with a 400 OpenAI error, and must only
// accept parameters inside their documented ranges.
func FuzzDecodeRequest(f *testing.F) {
	seedCorpus(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := DecodeChat(body)
		if err == nil {
			checkDecoded(t, &c.Params, nil)
			if len(c.Messages) == 0 {
				t.Fatal("accepted a chat without messages")
			}
			for _, m := range c.Messages {
				if m.Role != "system" && m.Role != "user" && m.Role != "assistant" && m.Role != "tool" {
					t.Fatalf("accepted role %q", m.Role)
				}
				if (m.Role == "tool") != (m.ToolCallID != "") || len(m.ToolCalls) > 0 && m.Role != "assistant" {
					t.Fatalf("accepted a tool turn or call out of place: %+v", m)
				}
				if !utf8.ValidString(m.Content) {
					t.Fatal("accepted invalid UTF-8 content")
				}
			}
		} else {
			checkDecoded(t, nil, err)
		}
		if c != nil && c.Tools != nil {
			checkTools(t, c.Tools)
		}
		if r, err := DecodeResponses(body); err == nil {
			checkDecoded(t, &r.Params, nil)
			if r.Tools != nil {
				checkTools(t, r.Tools)
			}
		} else {
			checkDecoded(t, nil, err)
		}
		tc, err := DecodeCompletion(body)
		if err == nil {
			checkDecoded(t, &tc.Params, nil)
			if tc.Prompt.Tokens != nil && len(tc.Prompt.Tokens) == 0 {
				t.Fatal("accepted an empty token prompt")
			}
		} else {
			checkDecoded(t, nil, err)
		}
	})
}

// checkTools asserts an accepted tool set is usable: named functions, a
// known choice naming one of them when it names one, templates' JSON valid.
func checkTools(t *testing.T, ts *ToolSet) {
	t.Helper()
	names := map[string]bool{}
	for _, tool := range ts.Tools {
		if !functionName.MatchString(tool.Name) || names[tool.Name] {
			t.Fatalf("accepted tool name %q", tool.Name)
		}
		names[tool.Name] = true
	}
	switch ts.Choice {
	case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
	case ToolChoiceFunction:
		if !names[ts.Function] {
			t.Fatalf("tool_choice names %q, not a tool", ts.Function)
		}
	default:
		t.Fatalf("tool choice %q", ts.Choice)
	}
	if !json.Valid(ts.JSON) {
		t.Fatalf("tools JSON for templates is invalid: %s", ts.JSON)
	}
}
