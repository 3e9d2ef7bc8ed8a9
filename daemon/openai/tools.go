package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/strata-llm/strata/daemon/toolcall"
)

// ToolCall is one function call of an assistant message, in requests (the
// history) and responses.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallDelta is a piece of a streamed tool call: the first piece of a
// call has its id, type and name, the next ones fragments of its arguments.
type ToolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function FunctionDelta `json:"function"`
}

// FunctionDelta is the function part of a ToolCallDelta.
type FunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// MessageToolCall is a validated call of an assistant message in the
// history.
type MessageToolCall struct {
	ID, Name, Arguments string
}

// Tool choices after validation.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
	ToolChoiceFunction = "function" // one named function (ToolSet.Function)
)

// ToolSet is a request's validated tools and how the model may use them.
type ToolSet struct {
	Tools []toolcall.Tool
	// JSON is the tools list in the chat completions form
	// ([{"type": "function", "function": {...}}], the client's key order
	// kept), as chat templates read it.
	JSON json.RawMessage
	// Choice is one of the ToolChoice constants; Function names the
	// function when Choice is ToolChoiceFunction.
	Choice   string
	Function string
	// Parallel allows several calls in one answer (parallel_tool_calls,
	// default true).
	Parallel bool
}

// Active reports whether the model is offered tools at all.
func (t *ToolSet) Active() bool {
	return t != nil && len(t.Tools) > 0 && t.Choice != ToolChoiceNone
}

// functionName is what OpenAI accepts as a function's name.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolSpec is a function tool of either API: chat completions nests the
// function ({"type":"function","function":{"name":…}}), Responses does not
// ({"type":"function","name":…}).
type toolSpec struct {
	Type        string          `json:"type"`
	Function    json.RawMessage `json:"function"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type functionSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// decodeTools validates tools, tool_choice and parallel_tool_calls. nested
// says which API's tool form is expected. A nil ToolSet means the request
// has no tools.
func decodeTools(tools, choice json.RawMessage, parallel *bool, nested bool) (*ToolSet, error) {
	if isNull(tools) || string(bytes.TrimSpace(tools)) == "[]" {
		if !isNull(choice) {
			var s string
			if json.Unmarshal(choice, &s) != nil || (s != ToolChoiceNone && s != ToolChoiceAuto) {
				return nil, BadRequest("tool_choice", "tool_choice is only allowed when tools are specified")
			}
		}
		return nil, nil
	}
	var specs []json.RawMessage
	if err := json.Unmarshal(tools, &specs); err != nil {
		return nil, BadRequest("tools", "tools must be an array of function tools")
	}
	ts := &ToolSet{Choice: ToolChoiceAuto, Parallel: parallel == nil || *parallel}
	var list [][]byte
	seen := map[string]bool{}
	for i, raw := range specs {
		param := fmt.Sprintf("tools[%d]", i)
		var sp toolSpec
		if err := json.Unmarshal(raw, &sp); err != nil {
			return nil, BadRequest(param, "%s must be a function tool object: %v", param, err)
		}
		if sp.Type != "function" {
			return nil, BadRequest(param+".type", "tool type %q is not supported; only \"function\"", sp.Type)
		}
		fn := functionSpec{Name: sp.Name, Description: sp.Description, Parameters: sp.Parameters, Strict: sp.Strict}
		fnRaw := raw
		fnParam := param
		if nested {
			fnParam = param + ".function"
			if isNull(sp.Function) {
				return nil, BadRequest(fnParam, "%s is missing", fnParam)
			}
			if err := json.Unmarshal(sp.Function, &fn); err != nil {
				return nil, BadRequest(fnParam, "%s must be an object: %v", fnParam, err)
			}
			fnRaw = sp.Function
		}
		if !functionName.MatchString(fn.Name) {
			return nil, BadRequest(fnParam+".name", "function name %q must be 1 to 64 letters, digits, underscores or dashes", fn.Name)
		}
		if seen[fn.Name] {
			return nil, BadRequest(fnParam+".name", "function %q is defined twice", fn.Name)
		}
		seen[fn.Name] = true
		if !isNull(fn.Parameters) {
			var obj map[string]json.RawMessage
			if json.Unmarshal(fn.Parameters, &obj) != nil {
				return nil, BadRequest(fnParam+".parameters", "parameters of %q must be a JSON schema object", fn.Name)
			}
		} else {
			fn.Parameters = nil
		}
		ts.Tools = append(ts.Tools, toolcall.Tool{Name: fn.Name, Description: fn.Description, Parameters: fn.Parameters})
		if !nested {
			// The function's fields in the client's order, for templates.
			fnRaw = functionObject(raw)
		}
		list = append(list, append(append([]byte(`{"type": "function", "function": `), fnRaw...), '}'))
	}
	ts.JSON = append(append([]byte("["), bytes.Join(list, []byte(", "))...), ']')
	if isNull(choice) {
		return ts, nil
	}
	var s string
	if json.Unmarshal(choice, &s) == nil {
		switch s {
		case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
			ts.Choice = s
			return ts, nil
		}
		return nil, BadRequest("tool_choice", "tool_choice %q is not supported; use \"auto\", \"none\", \"required\" or a function", s)
	}
	var named struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(choice, &named); err != nil || named.Type != "function" {
		return nil, BadRequest("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...} naming a function")
	}
	name, param := named.Name, "tool_choice.name"
	if nested {
		param = "tool_choice.function.name"
		if named.Function == nil {
			return nil, BadRequest("tool_choice.function", "tool_choice.function is missing")
		}
		name = named.Function.Name
	}
	if !seen[name] {
		return nil, BadRequest(param, "tool_choice names function %q, which is not among the tools", name)
	}
	ts.Choice, ts.Function = ToolChoiceFunction, name
	return ts, nil
}

// functionObject is a Responses function tool without its "type" (and
// "strict") keys: the chat form's "function" object, keys in order.
func functionObject(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var out bytes.Buffer
	out.WriteByte('{')
	if _, err := dec.Token(); err != nil {
		return raw
	}
	first := true
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return raw
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return raw
		}
		key, _ := k.(string) // object keys are strings
		if key == "type" || key == "strict" {
			continue
		}
		if !first {
			out.WriteString(", ")
		}
		first = false
		kb, _ := json.Marshal(key) // a string always marshals
		out.Write(kb)
		out.WriteString(": ")
		out.Write(v)
	}
	out.WriteByte('}')
	return out.Bytes()
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// decodeToolCalls validates an assistant message's tool_calls.
func decodeToolCalls(calls []ToolCall, param string) ([]MessageToolCall, error) {
	out := make([]MessageToolCall, len(calls))
	for j, tc := range calls {
		p := fmt.Sprintf("%s[%d]", param, j)
		switch {
		case tc.Type != "" && tc.Type != "function":
			return nil, BadRequest(p+".type", "tool call type %q is not supported; only \"function\"", tc.Type)
		case tc.ID == "":
			return nil, BadRequest(p+".id", "%s has no id", p)
		case tc.Function.Name == "":
			return nil, BadRequest(p+".function.name", "%s names no function", p)
		}
		out[j] = MessageToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
	}
	return out, nil
}

// MarshalJSON writes content as null when the message is only tool calls,
// as OpenAI does.
func (m AssistantMessage) MarshalJSON() ([]byte, error) {
	type plain AssistantMessage
	if len(m.ToolCalls) == 0 || m.Content != "" {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		plain
		Content *string `json:"content"`
	}{plain: plain(m)})
}

// chatMessage validates messages[i]. calls holds the ids of the calls of
// the messages before it: a tool message must answer one of them.
func chatMessage(i int, m ChatMessage, calls map[string]bool) (Message, error) {
	param := fmt.Sprintf("messages[%d]", i)
	msg := Message{Role: m.Role, Content: string(m.Content), Name: m.Name}
	switch m.Role {
	case "system", "user", "assistant":
	case "developer":
		msg.Role = "system"
	case "tool":
		if m.ToolCallID == "" {
			return msg, BadRequest(param+".tool_call_id", "%s has role \"tool\" but no tool_call_id", param)
		}
		if !calls[m.ToolCallID] {
			return msg, BadRequest(param+".tool_call_id", "%s answers tool call %q, which no earlier assistant message made", param, m.ToolCallID)
		}
		msg.ToolCallID = m.ToolCallID
	case "":
		return msg, BadRequest(param+".role", "%s has no role", param)
	default:
		return msg, BadRequest(param+".role", "role %q is not supported; use system, developer, user, assistant or tool", m.Role)
	}
	if len(m.ToolCalls) > 0 {
		if m.Role != "assistant" {
			return msg, BadRequest(param+".tool_calls", "only assistant messages have tool_calls")
		}
		tc, err := decodeToolCalls(m.ToolCalls, param+".tool_calls")
		if err != nil {
			return msg, err
		}
		msg.ToolCalls = tc
		for _, c := range tc {
			calls[c.ID] = true
		}
	}
	if m.ToolCallID != "" && m.Role != "tool" {
		return msg, BadRequest(param+".tool_call_id", "only tool messages have a tool_call_id")
	}
	return msg, nil
}

// functionItem adds a Responses function_call item (to the assistant turn
// before it, or a new one) or function_call_output item (a tool turn) to
// msgs.
func functionItem(msgs []Message, i int, it responseInput) ([]Message, error) {
	param := fmt.Sprintf("input[%d]", i)
	if it.CallID == "" {
		return nil, BadRequest(param+".call_id", "%s (%s) has no call_id", param, it.Type)
	}
	if it.Type == "function_call" {
		if it.Name == "" {
			return nil, BadRequest(param+".name", "%s (function_call) names no function", param)
		}
		call := MessageToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			return msgs, nil
		}
		return append(msgs, Message{Role: "assistant", ToolCalls: []MessageToolCall{call}}), nil
	}
	if !answers(msgs, it.CallID) {
		return nil, BadRequest(param+".call_id", "%s answers call %q, which no earlier function_call made", param, it.CallID)
	}
	var out string
	if json.Unmarshal(it.Output, &out) != nil {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(it.Output, &parts); err != nil {
			return nil, BadRequest(param+".output", "%s.output must be a string or an array of text parts", param)
		}
		for j, p := range parts {
			if p.Type != "input_text" && p.Type != "output_text" && p.Type != "text" {
				return nil, BadRequest(fmt.Sprintf("%s.output[%d].type", param, j), "output parts of type %q are not supported; only text", p.Type)
			}
			out += p.Text
		}
	}
	return append(msgs, Message{Role: "tool", Content: out, ToolCallID: it.CallID}), nil
}

// answers reports whether one of msgs made the call id.
func answers(msgs []Message, id string) bool {
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if c.ID == id {
				return true
			}
		}
	}
	return false
}
