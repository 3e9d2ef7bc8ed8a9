package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
)

// PathResponses is OpenAI's Responses API endpoint.
const PathResponses = "/v1/responses"

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
	ToolChoice        any               `json:"tool_choice"`
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
	// A function_call item's call (see MarshalJSON).
	CallID, Name, Arguments string
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
	Format any `json:"format"`
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	req, err := openai.DecodeResponses(body)
	if err != nil {
		return err
	}
	lm, err := s.lookup(req.Model)
	if err != nil {
		return err
	}
	p := req.Params
	prompt, plan, err := toolPrompt(lm, req.Messages, req.Tools, "input")
	if err != nil {
		return err
	}
	if plan != nil {
		p.ToolSchema = plan.schema
	}
	g, cancel, err := s.start(r, lm, p, prompt, "input")
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
	resp.Text.Format = map[string]string{"type": "text"}
	if req.Format != nil {
		resp.Text.Format = req.Format
	}
	if req.Tools != nil {
		resp.Tools, resp.ToolChoice, resp.ParallelToolCalls = echoTools(req)
	}
	if plan != nil {
		return s.responsesWithTools(w, r, &resp, plan, g, cancel, p.Stream)
	}
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
	if !p.Stream {
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
				e := s.logFailed(r, streamError(ev.Err))
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
