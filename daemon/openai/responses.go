package openai

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// ResponsesRequest is the subset of POST /v1/responses strata serves: text
// in (a string, or messages whose content is a string or text parts, and
// function calls with their outputs), text and function calls out (text
// free, or constrained by text.format json_object or json_schema), whole
// or streamed. Tools other than functions and stored state
// (previous_response_id) are refused by name.
type ResponsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions,omitempty"`
	MaxOutputTokens *int64          `json:"max_output_tokens,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"top_p,omitempty"`
	Stream          bool            `json:"stream,omitempty"`
	Text            *struct {
		Format *ResponsesFormat `json:"format,omitempty"`
	} `json:"text,omitempty"`
	Tools              json.RawMessage `json:"tools,omitempty"`
	ToolChoice         json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls,omitempty"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	Store              *bool           `json:"store,omitempty"`
	Metadata           json.RawMessage `json:"metadata,omitempty"`
	User               string          `json:"user,omitempty"`
	Truncation         string          `json:"truncation,omitempty"`
}

// Responses is a decoded, validated Responses request: the generation
// parameters and the conversation, instructions first as a system message.
type Responses struct {
	Params
	Messages        []Message
	Instructions    string
	MaxOutputTokens *int64
	Metadata        json.RawMessage
	// Tools is nil when the request offers none; ToolsRaw and
	// ToolChoiceRaw are the request's, echoed in the response.
	Tools         *ToolSet
	ToolsRaw      json.RawMessage
	ToolChoiceRaw json.RawMessage
	// Format is text.format as sent (nil: plain text), for the response
	// to echo.
	Format *ResponsesFormat
}

var responsesFields = fieldsOf(reflect.TypeFor[ResponsesRequest]())

// DecodeResponses parses and validates the body of POST /v1/responses, as
// DecodeChat does a chat request (the same parameter checks).
func DecodeResponses(body []byte) (*Responses, error) {
	var r ResponsesRequest
	if err := unmarshal(body, &r); err != nil {
		return nil, err
	}
	if err := knownFields(body, responsesFields); err != nil {
		return nil, err
	}
	switch {
	case len(r.Input) == 0 || string(r.Input) == "null":
		return nil, BadRequest("input", "you must provide an input")
	case r.PreviousResponseID != "":
		return nil, BadRequest("previous_response_id", "this server keeps no responses: send the whole conversation as input")
	case r.Truncation != "" && r.Truncation != "disabled":
		return nil, BadRequest("truncation", "truncation %q is not supported; only \"disabled\"", r.Truncation)
	}
	p, err := common(r.Model, r.MaxOutputTokens, "max_output_tokens", r.Temperature, r.TopP, nil, nil, nil, r.Stream, nil, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := p.sampling(nil, nil, nil, nil); err != nil {
		return nil, err
	}
	if r.Text != nil && r.Text.Format != nil {
		if p.Constraint, err = constraint(r.Text.Format.Type, &r.Text.Format.JSONSchemaFormat, "text.format", nil, nil); err != nil {
			return nil, err
		}
	}
	tools, err := decodeTools(r.Tools, r.ToolChoice, r.ParallelToolCalls, false)
	if err != nil {
		return nil, err
	}
	msgs, err := responseMessages(&r)
	if err != nil {
		return nil, err
	}
	out := &Responses{Params: p, Messages: msgs, Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens, Metadata: r.Metadata,
		Tools: tools, ToolsRaw: r.Tools, ToolChoiceRaw: r.ToolChoice}
	if r.Text != nil {
		out.Format = r.Text.Format
	}
	return out, nil
}

// responseInput is one message of input's array form.
type responseInput struct {
	Type    string          `json:"type,omitempty"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// A function_call item's call, and a function_call_output item's
	// answer to the call CallID names.
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responseMessages turns instructions and input into chat messages.
func responseMessages(req *ResponsesRequest) ([]Message, error) {
	var msgs []Message
	if req.Instructions != "" {
		msgs = append(msgs, Message{Role: "system", Content: req.Instructions})
	}
	var text string
	if json.Unmarshal(req.Input, &text) == nil {
		return append(msgs, Message{Role: "user", Content: text}), nil
	}
	var items []responseInput
	if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
		return nil, BadRequest("input", "input must be a string or a non-empty array of messages")
	}
	for i, it := range items {
		switch it.Type {
		case "", "message":
		case "function_call", "function_call_output":
			var err error
			if msgs, err = functionItem(msgs, i, it); err != nil {
				return nil, err
			}
			continue
		default:
			return nil, BadRequest(fmt.Sprintf("input[%d].type", i), "input items of type %q are not supported; only messages, function_call and function_call_output", it.Type)
		}
		role := it.Role
		switch role {
		case "user", "assistant", "system":
		case "developer":
			role = "system"
		default:
			return nil, BadRequest(fmt.Sprintf("input[%d].role", i), "role %q is not supported; use system, developer, user or assistant", it.Role)
		}
		var content string
		if json.Unmarshal(it.Content, &content) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(it.Content, &parts); err != nil {
				return nil, BadRequest(fmt.Sprintf("input[%d].content", i), "content must be a string or an array of text parts")
			}
			var b strings.Builder
			for j, p := range parts {
				if p.Type != "input_text" && p.Type != "output_text" && p.Type != "text" {
					return nil, BadRequest(fmt.Sprintf("input[%d].content[%d].type", i, j), "content parts of type %q are not supported; only text", p.Type)
				}
				b.WriteString(p.Text)
			}
			content = b.String()
		}
		msgs = append(msgs, Message{Role: role, Content: content})
	}
	return msgs, nil
}
