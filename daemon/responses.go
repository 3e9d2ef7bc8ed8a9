package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// PathResponses is OpenAI's Responses API endpoint.
const PathResponses = "/v1/responses"

// ResponsesRequest is the subset of POST /v1/responses strata serves:
// text in (a string, or messages whose content is a string or text parts),
// text out, whole or streamed. Tools, non-text formats and stored state
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
		Format *struct {
			Type string `json:"type"`
		} `json:"format,omitempty"`
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

// responseInput is one message of input's array form.
type responseInput struct {
	Type    string          `json:"type,omitempty"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responseMessages turns instructions and input into chat messages.
func responseMessages(req *ResponsesRequest) ([]tokenizer.Message, error) {
	var msgs []tokenizer.Message
	if req.Instructions != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: req.Instructions})
	}
	var text string
	if json.Unmarshal(req.Input, &text) == nil {
		return append(msgs, tokenizer.Message{Role: "user", Content: text}), nil
	}
	var items []responseInput
	if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
		return nil, openai.BadRequest("input", "input must be a string or a non-empty array of messages")
	}
	for i, it := range items {
		if it.Type != "" && it.Type != "message" {
			return nil, openai.BadRequest(fmt.Sprintf("input[%d].type", i), "input items of type %q are not supported; only messages", it.Type)
		}
		role := it.Role
		switch role {
		case "user", "assistant", "system":
		case "developer":
			role = "system"
		default:
			return nil, openai.BadRequest(fmt.Sprintf("input[%d].role", i), "role %q is not supported; use system, developer, user or assistant", it.Role)
		}
		var content string
		if json.Unmarshal(it.Content, &content) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(it.Content, &parts); err != nil {
				return nil, openai.BadRequest(fmt.Sprintf("input[%d].content", i), "content must be a string or an array of text parts")
			}
			var b strings.Builder
			for j, p := range parts {
				if p.Type != "input_text" && p.Type != "output_text" && p.Type != "text" {
					return nil, openai.BadRequest(fmt.Sprintf("input[%d].content[%d].type", i, j), "content parts of type %q are not supported; only text", p.Type)
				}
				b.WriteString(p.Text)
			}
			content = b.String()
		}
		msgs = append(msgs, tokenizer.Message{Role: role, Content: content})
	}
	return msgs, nil
}

// Response is the Responses API's response object, as strata fills it.
type Response struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	IncompleteDetails *incompleteReason `json:"incomplete_details"`
	Model             string            `json:"model"`
	Output            []responseItem    `json:"output"`
	Usage             *responseUsage    `json:"usage"`
	Error             any               `json:"error"`
	Instructions      *string           `json:"instructions"`
	MaxOutputTokens   *int64            `json:"max_output_tokens"`
	Temperature       float64           `json:"temperature"`
	TopP              float64           `json:"top_p"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	ToolChoice        string            `json:"tool_choice"`
	Tools             []any             `json:"tools"`
	Text              responseText      `json:"text"`
	Metadata          json.RawMessage   `json:"metadata"`
}

type incompleteReason struct {
	Reason string `json:"reason"`
}

type responseItem struct {
	Type    string         `json:"type"`
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Role    string         `json:"role"`
	Content []responsePart `json:"content"`
}

type responsePart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	OutputTokens        int            `json:"output_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
}

type responseText struct {
	Format struct {
		Type string `json:"type"`
	} `json:"format"`
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) error {
	var req ResponsesRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.Model == "":
		return openai.BadRequest("model", "you must provide a model parameter")
	case len(req.Input) == 0 || string(req.Input) == "null":
		return openai.BadRequest("input", "you must provide an input")
	case len(req.Tools) > 0 && string(req.Tools) != "null" && string(req.Tools) != "[]":
		return openai.BadRequest("tools", "tools are not supported by this server")
	case req.PreviousResponseID != "":
		return openai.BadRequest("previous_response_id", "this server keeps no responses: send the whole conversation as input")
	case req.Text != nil && req.Text.Format != nil && req.Text.Format.Type != "text":
		return openai.BadRequest("text.format", "text.format %q is not supported; only \"text\"", req.Text.Format.Type)
	case req.Truncation != "" && req.Truncation != "disabled":
		return openai.BadRequest("truncation", "truncation %q is not supported; only \"disabled\"", req.Truncation)
	}
	lm, err := s.lookup(req.Model)
	if err != nil {
		return err
	}
	msgs, err := responseMessages(&req)
	if err != nil {
		return err
	}
	p := openai.Params{Model: req.Model, Temperature: 1, TopP: 1, N: 1, RepeatPenalty: 1, RepeatLastN: 64}
	if req.MaxOutputTokens != nil {
		if *req.MaxOutputTokens < 1 || *req.MaxOutputTokens > 1<<30 {
			return openai.BadRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
		}
		p.MaxTokens = int(*req.MaxOutputTokens)
	}
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return openai.BadRequest("temperature", "temperature must be between 0 and 2, got %g", *t)
		}
		p.Temperature = *t
	}
	if tp := req.TopP; tp != nil {
		if *tp < 0 || *tp > 1 {
			return openai.BadRequest("top_p", "top_p must be between 0 and 1, got %g", *tp)
		}
		p.TopP = *tp
	}
	text, err := lm.eng.Tok.ApplyChatTemplate(msgs, true)
	if err != nil {
		return openai.BadRequest("input", "the model's chat template rejected the messages: %v", err)
	}
	g, cancel, err := s.start(r, lm, p, lm.eng.Tok.Encode(text, false, true), "input")
	if err != nil {
		return err
	}
	defer cancel()

	resp := Response{ID: newID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress", Model: lm.name,
		Output: []responseItem{}, MaxOutputTokens: req.MaxOutputTokens, Temperature: p.Temperature, TopP: p.TopP,
		ParallelToolCalls: true, ToolChoice: "auto", Tools: []any{}, Metadata: json.RawMessage("{}")}
	if req.Instructions != "" {
		resp.Instructions = &req.Instructions
	}
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		resp.Metadata = req.Metadata
	}
	resp.Text.Format.Type = "text"
	item := responseItem{Type: "message", ID: newID("msg_"), Status: "in_progress", Role: "assistant", Content: []responsePart{}}
	finish := func(reason string, prompt, completion int, out string) {
		item.Status = "completed"
		item.Content = []responsePart{{Type: "output_text", Text: out, Annotations: []any{}}}
		resp.Output = []responseItem{item}
		resp.Status = "completed"
		if reason == "length" {
			resp.Status, resp.IncompleteDetails = "incomplete", &incompleteReason{Reason: "max_output_tokens"}
		}
		resp.Usage = &responseUsage{InputTokens: prompt, OutputTokens: completion, TotalTokens: prompt + completion,
			InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}}
	}
	if !req.Stream {
		var out strings.Builder
		for ev := range g.events {
			if ev.Err != nil {
				return resultError(r, ev.Err)
			}
			out.WriteString(ev.Text)
			if ev.Finish != "" {
				finish(ev.Finish, ev.PromptTokens, ev.CompletionTokens, out.String())
				return writeJSON(w, resp)
			}
		}
		return openai.AsError(fmt.Errorf("generation ended without a result"))
	}

	st := newStreamer(w, cancel, false)
	seq := 0
	emit := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		st.sendNamed(typ, fields)
	}
	emit("response.created", map[string]any{"response": resp})
	emit("response.in_progress", map[string]any{"response": resp})
	emit("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	empty := responsePart{Type: "output_text", Text: "", Annotations: []any{}}
	emit("response.content_part.added", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "part": empty})
	var out strings.Builder
	for ev := range g.events {
		if ev.Err != nil {
			if r.Context().Err() == nil {
				e := streamError(ev.Err)
				emit("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
			}
			return nil
		}
		if ev.Text != "" {
			out.WriteString(ev.Text)
			emit("response.output_text.delta", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "delta": ev.Text, "logprobs": []any{}})
		}
		if ev.Finish == "" {
			continue
		}
		finish(ev.Finish, ev.PromptTokens, ev.CompletionTokens, out.String())
		part := resp.Output[0].Content[0]
		emit("response.output_text.done", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "text": part.Text, "logprobs": []any{}})
		emit("response.content_part.done", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "part": part})
		emit("response.output_item.done", map[string]any{"output_index": 0, "item": resp.Output[0]})
		kind := "response.completed"
		if resp.Status == "incomplete" {
			kind = "response.incomplete"
		}
		emit(kind, map[string]any{"response": resp})
		return nil
	}
	return nil
}
