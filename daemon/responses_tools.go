package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/strata-llm/strata/daemon/openai"
)

// MarshalJSON writes a message item, or a function_call item in its own
// shape.
func (it responseItem) MarshalJSON() ([]byte, error) {
	if it.Type == "function_call" {
		return json.Marshal(struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Status    string `json:"status"`
		}{it.Type, it.ID, it.CallID, it.Name, it.Arguments, it.Status})
	}
	type message struct {
		Type    string         `json:"type"`
		ID      string         `json:"id"`
		Status  string         `json:"status"`
		Role    string         `json:"role"`
		Content []responsePart `json:"content"`
	}
	return json.Marshal(message{it.Type, it.ID, it.Status, it.Role, it.Content})
}

// echoTools is what a response says of the request's tools: the tools as
// sent, the tool choice, whether calls may be parallel.
func echoTools(req *openai.Responses) (tools []any, choice any, parallel bool) {
	tools = []any{}
	if len(req.ToolsRaw) > 0 {
		_ = json.Unmarshal(req.ToolsRaw, &tools) // DecodeResponses checked it is an array
	}
	choice = req.Tools.Choice
	if req.Tools.Choice == openai.ToolChoiceFunction {
		choice = map[string]string{"type": "function", "name": req.Tools.Function}
	}
	return tools, choice, req.Tools.Parallel
}

// finishResponse fills in a response's status and usage at the end.
func finishResponse(resp *Response, reason string, prompt, completion int) {
	resp.Status = "completed"
	if reason == "length" {
		resp.Status, resp.IncompleteDetails = "incomplete", &incompleteReason{Reason: "max_output_tokens"}
	}
	resp.Usage = &responseUsage{InputTokens: prompt, OutputTokens: completion, TotalTokens: prompt + completion,
		InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}}
}

func messageItem(text string) responseItem {
	return responseItem{Type: "message", ID: newID("msg_"), Status: "completed", Role: "assistant",
		Content: []responsePart{{Type: "output_text", Text: text, Annotations: []any{}}}}
}

// responsesWithTools answers a Responses request that offers function
// tools: the answer is read for calls, which become function_call output
// items (after a message item for any text), whole or streamed with the
// function_call_arguments events.
func (s *Server) responsesWithTools(w http.ResponseWriter, r *http.Request, resp *Response, plan *toolPlan, g *gen, cancel func(), stream bool) error {
	if !stream {
		var out strings.Builder
		for ev := range g.events {
			if ev.Err != nil {
				return resultError(r, ev.Err)
			}
			out.WriteString(plan.text(ev.Event))
			if ev.Finish == "" {
				continue
			}
			content, calls := plan.parser().Parse(out.String())
			calls = plan.calls(calls)
			if content != "" || len(calls) == 0 {
				resp.Output = append(resp.Output, messageItem(content))
			}
			for _, c := range calls {
				resp.Output = append(resp.Output, responseItem{Type: "function_call", ID: newID("fc_"), Status: "completed",
					CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			finishResponse(resp, ev.Finish, ev.PromptTokens, ev.CompletionTokens)
			return writeJSON(w, resp)
		}
		return openai.AsError(errors.New("generation ended without a result"))
	}

	st := newStreamer(w, cancel, false)
	seq := 0
	emit := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		st.sendNamed(typ, fields)
	}
	emit("response.created", map[string]any{"response": *resp})
	emit("response.in_progress", map[string]any{"response": *resp})
	parser := plan.parser()
	open := -1 // index in resp.Output of the item being streamed, or -1
	var text strings.Builder
	closeItem := func() {
		if open < 0 {
			return
		}
		it := &resp.Output[open]
		it.Status = "completed"
		if it.Type == "message" {
			part := responsePart{Type: "output_text", Text: text.String(), Annotations: []any{}}
			it.Content = []responsePart{part}
			emit("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": open, "content_index": 0, "text": part.Text, "logprobs": []any{}})
			emit("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": open, "content_index": 0, "part": part})
		} else {
			emit("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": open, "name": it.Name, "arguments": it.Arguments})
		}
		emit("response.output_item.done", map[string]any{"output_index": open, "item": *it})
		open = -1
	}
	for ev := range g.events {
		if ev.Err != nil {
			if r.Context().Err() == nil {
				e := s.logFailed(r, streamError(ev.Err))
				emit("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
			}
			return nil
		}
		ds := parser.Feed(plan.text(ev.Event))
		if ev.Finish != "" {
			ds = append(ds, parser.Close()...)
		}
		for _, d := range ds {
			switch {
			case !d.Call:
				if open < 0 || resp.Output[open].Type != "message" {
					closeItem()
					it := responseItem{Type: "message", ID: newID("msg_"), Status: "in_progress", Role: "assistant", Content: []responsePart{}}
					resp.Output = append(resp.Output, it)
					open = len(resp.Output) - 1
					text.Reset()
					emit("response.output_item.added", map[string]any{"output_index": open, "item": it})
					emit("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": open, "content_index": 0,
						"part": responsePart{Type: "output_text", Text: "", Annotations: []any{}}})
				}
				text.WriteString(d.Content)
				emit("response.output_text.delta", map[string]any{"item_id": resp.Output[open].ID, "output_index": open, "content_index": 0,
					"delta": d.Content, "logprobs": []any{}})
			case !plan.set.Parallel && d.Index > 0:
			case d.ID != "":
				closeItem()
				it := responseItem{Type: "function_call", ID: newID("fc_"), Status: "in_progress", CallID: d.ID, Name: d.Name}
				resp.Output = append(resp.Output, it)
				open = len(resp.Output) - 1
				emit("response.output_item.added", map[string]any{"output_index": open, "item": it})
			default:
				it := &resp.Output[open]
				it.Arguments += d.Arguments
				emit("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": open, "delta": d.Arguments})
			}
		}
		if ev.Finish == "" {
			continue
		}
		if len(resp.Output) == 0 { // nothing at all was said: still one (empty) message
			resp.Output = append(resp.Output, messageItem(""))
			it := resp.Output[0]
			emit("response.output_item.added", map[string]any{"output_index": 0, "item": it})
			emit("response.output_item.done", map[string]any{"output_index": 0, "item": it})
		}
		closeItem()
		finishResponse(resp, ev.Finish, ev.PromptTokens, ev.CompletionTokens)
		kind := "response.completed"
		if resp.Status == "incomplete" {
			kind = "response.incomplete"
		}
		emit(kind, map[string]any{"response": *resp})
		return nil
	}
	return nil
}
