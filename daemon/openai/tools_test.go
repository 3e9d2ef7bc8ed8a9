package openai

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/toolcall"
)

const weather = `{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`

func TestDecodeChatTools(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","tools":[` + weather + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,
		"messages":[{"role":"user","content":"Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`
	c, err := DecodeChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := &ToolSet{
		Tools:  []toolcall.Tool{{Name: "get_weather", Description: "Weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
		JSON:   json.RawMessage(`[{"type": "function", "function": {"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`),
		Choice: ToolChoiceFunction, Function: "get_weather", Parallel: false,
	}
	if !reflect.DeepEqual(c.Tools, want) {
		t.Errorf("Tools = %+v\nwant    %+v", c.Tools, want)
	}
	wantMsgs := []Message{
		{Role: "user", Content: "Paris?"},
		{Role: "assistant", ToolCalls: []MessageToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "call_1"},
	}
	if !reflect.DeepEqual(c.Messages, wantMsgs) {
		t.Errorf("Messages = %+v\nwant %+v", c.Messages, wantMsgs)
	}
	for _, tc := range []struct {
		choice string
		want   string
	}{{`"auto"`, ToolChoiceAuto}, {`"none"`, ToolChoiceNone}, {`"required"`, ToolChoiceRequired}, {`null`, ToolChoiceAuto}} {
		c, err := DecodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[` + weather + `],"tool_choice":` + tc.choice + `}`))
		if err != nil || c.Tools.Choice != tc.want || !c.Tools.Parallel {
			t.Errorf("tool_choice %s: %+v, %v", tc.choice, c.Tools, err)
		}
	}
	if c, err := DecodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":"none"}`)); err != nil || c.Tools != nil {
		t.Errorf("empty tools: %+v, %v", c, err)
	}
}

func TestDecodeToolErrors(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tools := `"tools":[` + weather + `]`
	tests := []struct {
		name, body, param, msg string
	}{
		{"tools not array", `{"model":"m",` + msgs + `,"tools":{}}`, "tools", "array"},
		{"tool type", `{"model":"m",` + msgs + `,"tools":[{"type":"code_interpreter"}]}`, "tools[0].type", "only \"function\""},
		{"no name", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name", "1 to 64"},
		{"bad name", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0].function.name", "letters"},
		{"twice", `{"model":"m",` + msgs + `,"tools":[` + weather + `,` + weather + `]}`, "tools[1].function.name", "twice"},
		{"parameters", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, "tools[0].function.parameters", "schema object"},
		{"choice unknown", `{"model":"m",` + msgs + `,` + tools + `,"tool_choice":"always"}`, "tool_choice", "not supported"},
		{"choice shape", `{"model":"m",` + msgs + `,` + tools + `,"tool_choice":{"type":"x"}}`, "tool_choice", "naming a function"},
		{"choice missing function", `{"model":"m",` + msgs + `,` + tools + `,"tool_choice":{"type":"function"}}`, "tool_choice.function", "missing"},
		{"choice not a tool", `{"model":"m",` + msgs + `,` + tools + `,"tool_choice":{"type":"function","function":{"name":"f"}}}`, "tool_choice.function.name", "not among the tools"},
		{"choice without tools", `{"model":"m",` + msgs + `,"tool_choice":"required"}`, "tool_choice", "only allowed when tools"},
		{"parallel type", `{"model":"m",` + msgs + `,"parallel_tool_calls":"yes"}`, "parallel_tool_calls", "invalid type"},
		{"user tool_calls", `{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls", "only assistant"},
		{"call without id", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].id", "no id"},
		{"call without name", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.name", "names no function"},
		{"call type", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"custom","function":{"name":"f"}}]}]}`, "messages[0].tool_calls[0].type", "only \"function\""},
		{"unanswered id", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"b","content":"x"}]}`, "messages[1].tool_call_id", "no earlier assistant message"},
		{"id on user", `{"model":"m","messages":[{"role":"user","content":"x","tool_call_id":"a"}]}`, "messages[0].tool_call_id", "only tool messages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeChat([]byte(tc.body))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *Error", err)
			}
			if e.Status != 400 || e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("got %+v, want param %q message containing %q", e, tc.param, tc.msg)
			}
		})
	}
}

func TestAssistantMessageJSON(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "f", Arguments: "{}"}}}
	for _, tc := range []struct {
		m    AssistantMessage
		want string
	}{
		{AssistantMessage{Role: "assistant", Content: "hi"}, `{"role":"assistant","content":"hi","refusal":null}`},
		{AssistantMessage{Role: "assistant", ToolCalls: calls}, `{"role":"assistant","refusal":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}],"content":null}`},
		{AssistantMessage{Role: "assistant", Content: "x", ToolCalls: calls}, `{"role":"assistant","content":"x","refusal":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
	} {
		b, err := json.Marshal(tc.m)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal = %s, %v\nwant %s", b, err, tc.want)
		}
	}
}

func TestDecodeResponsesTools(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","tools":[{"type":"function","name":"wx","description":"d","parameters":{"type":"object"},"strict":true}],
		"tool_choice":{"type":"function","name":"wx"},"parallel_tool_calls":false,
		"input":[{"role":"user","content":"Paris?"},{"type":"message","role":"assistant","content":"Checking."},
		{"type":"function_call","call_id":"c1","name":"wx","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"wx","arguments":"{\"a\":1}"},
		{"type":"function_call_output","call_id":"c1","output":"sunny"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}]}`
	r, err := DecodeResponses([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Tools.Choice != ToolChoiceFunction || r.Tools.Function != "wx" || r.Tools.Parallel {
		t.Errorf("ToolSet %+v", r.Tools)
	}
	if want := `[{"type": "function", "function": {"name": "wx", "description": "d", "parameters": {"type":"object"}}}]`; string(r.Tools.JSON) != want {
		t.Errorf("JSON %s\nwant %s", r.Tools.JSON, want)
	}
	want := []Message{
		{Role: "user", Content: "Paris?"},
		{Role: "assistant", Content: "Checking.", ToolCalls: []MessageToolCall{{ID: "c1", Name: "wx", Arguments: "{}"}, {ID: "c2", Name: "wx", Arguments: `{"a":1}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "c1"},
		{Role: "tool", Content: "rain", ToolCallID: "c2"},
	}
	if !reflect.DeepEqual(r.Messages, want) {
		t.Errorf("Messages %+v\nwant %+v", r.Messages, want)
	}
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","input":"x","tools":[{"type":"function"}]}`, "tools[0].name"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice.name"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c"}]}`, "input[0].name"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"},{"type":"function_call_output","call_id":"c","output":5}]}`, "input[1].output"},
		{`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, "input[0].call_id"},
		{`{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, "input[0].type"},
	} {
		_, err := DecodeResponses([]byte(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Param != tc.param {
			t.Errorf("%s: %v, want an error naming %s", tc.body, err, tc.param)
		}
	}
}
