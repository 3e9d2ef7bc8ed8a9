package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/daemon/toolcall"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// applyToolSchema constrains j when its request requires a tool call,
// through Server.constrainSchema: the hook constrained decoding fills
// (grammar.FromJSONSchema, applied to the job's sampling). While it is
// nil such a request is refused rather than run unconstrained, since an
// unconstrained model need not answer with a call.
func (s *Server) applyToolSchema(j *job) error {
	if j.params.ToolSchema == nil {
		return nil
	}
	if s.constrainSchema == nil {
		return openai.BadRequest("tool_choice", "tool_choice \"required\" or a named function needs constrained decoding, which this build of the server lacks; use \"auto\"")
	}
	if err := s.constrainSchema(j, j.params.ToolSchema); err != nil {
		if e := (*openai.Error)(nil); errors.As(err, &e) {
			return e
		}
		return openai.BadRequest("tools", "the tools' parameters cannot constrain the answer: %v", err)
	}
	return nil
}

// toolPlan is how a request that offers tools is prompted and its answer
// read.
type toolPlan struct {
	set *openai.ToolSet
	// family is the syntax the answer is read in: the template's, or
	// Generic when the template shows no tools or a call is required (the
	// schema's syntax).
	family toolcall.Family
	// idFamily shapes call ids: the template's family, since the ids come
	// back in the history it renders.
	idFamily toolcall.Family
	// markers are the control tokens of family's syntax, which the
	// detokenizer does not render, with their text.
	markers map[int32]string
	// schema constrains the answer when a call is required.
	schema []byte
}

func (p *toolPlan) newID() string { return toolcall.NewID(p.idFamily) }

// parser reads one answer (nil without tools: the answer is all content).
func (p *toolPlan) parser() *toolcall.Parser {
	if p == nil {
		return nil
	}
	return toolcall.NewParser(p.family, p.newID).Types(p.set.Tools)
}

// text is what an event adds to the answer as the parser must see it.
func (p *toolPlan) text(ev sched.Event) string {
	if p == nil {
		return ev.Text
	}
	if m, ok := p.markers[ev.Token]; ok {
		return ev.Text + m
	}
	return ev.Text
}

// calls keeps the first call only when the client asked for one call at
// a time.
func (p *toolPlan) calls(calls []toolcall.Call) []toolcall.Call {
	if !p.set.Parallel && len(calls) > 1 {
		return calls[:1]
	}
	return calls
}

// toolPrompt renders msgs (with their tool calls and tool results) and,
// when set offers tools, the tools through the model's chat template, and
// encodes the result. Tool turns get the name of the function they answer
// (templates that show it need it; OpenAI's messages carry only the id),
// and call ids are fitted to what the template accepts.
//
// A template that does not show tools gets them described in a system
// message instead (toolcall.Instructions), the earlier calls written into
// the assistant turns in the Generic syntax the answer is then read in,
// and the results as user turns ("Result of NAME: CONTENT"). plan is nil
// when no tools are offered.
//
// The messages' contents are encoded as text (tokenizer.EncodeChat): a
// client cannot write a control token into the prompt, only the template
// does.
func toolPrompt(lm *loaded, msgs []openai.Message, set *openai.ToolSet, param string) ([]int32, *toolPlan, error) {
	tm, opt, plan, err := chatMessages(lm.eng.Tok, msgs, set, param)
	if err != nil {
		return nil, nil, err
	}
	ids, err := lm.eng.Tok.EncodeChat(tm, opt)
	if err != nil {
		return nil, nil, openai.BadRequest(param, "the model's chat template rejected the messages: %v", err)
	}
	return ids, plan, nil
}

// renderTools is toolPrompt's prompt as text.
func renderTools(tok *tokenizer.Tokenizer, msgs []openai.Message, set *openai.ToolSet, param string) (string, *toolPlan, error) {
	tm, opt, plan, err := chatMessages(tok, msgs, set, param)
	if err != nil {
		return "", nil, err
	}
	text, err := tok.RenderChat(tm, opt)
	if err != nil {
		return "", nil, openai.BadRequest(param, "the model's chat template rejected the messages: %v", err)
	}
	return text, plan, nil
}

// chatMessages turns the request's messages and tools into what the chat
// template renders (see toolPrompt).
func chatMessages(tok *tokenizer.Tokenizer, msgs []openai.Message, set *openai.ToolSet, param string) ([]tokenizer.Message, tokenizer.ChatOptions, *toolPlan, error) {
	tmpl := tok.Vocab().ChatTemplate
	family := toolcall.Detect(tmpl)
	knows := strings.TrimSpace(tmpl) != "" && toolcall.TemplateKnowsTools(tmpl)
	tm := make([]tokenizer.Message, 0, len(msgs)+1)
	var plan *toolPlan
	opt := tokenizer.ChatOptions{AddGenerationPrompt: true}
	if set.Active() {
		plan = &toolPlan{set: set, family: family, idFamily: family}
		if knows {
			opt.Tools = set.JSON
			opt.ToolChoice, _ = json.Marshal(set.Choice) // a string always marshals
			if set.Choice == openai.ToolChoiceFunction {
				opt.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": set.Function}})
			}
		} else {
			plan.family, plan.idFamily = toolcall.Generic, toolcall.Generic
			instr := toolcall.Instructions(set.Tools, set.Parallel)
			if len(msgs) > 0 && msgs[0].Role == "system" {
				instr += "\n" + msgs[0].Content
				msgs = msgs[1:]
			}
			tm = append(tm, tokenizer.Message{Role: "system", Content: instr})
		}
		if set.Choice == openai.ToolChoiceRequired || set.Choice == openai.ToolChoiceFunction {
			schema, err := toolcall.Schema(set.Tools, set.Function, set.Parallel && set.Choice == openai.ToolChoiceRequired)
			if err != nil {
				return nil, tokenizer.ChatOptions{}, nil, openai.BadRequest("tool_choice", "%v", err)
			}
			plan.schema, plan.family = schema, toolcall.Generic
		}
		plan.markers = map[int32]string{}
		for _, m := range toolcall.Markers(plan.family) {
			if ids := tok.Encode(m, false, true); len(ids) == 1 && tok.TokenType(ids[0]) == tokenizer.TypeControl {
				plan.markers[ids[0]] = m
			}
		}
	}
	names := map[string]string{} // the function each call id called, for the tool turns that answer it
	results := false             // the last turn is tool results written as a user turn
	for _, m := range msgs {
		t := tokenizer.Message{Role: m.Role, Content: m.Content, ToolCallID: toolcall.FitID(family, m.ToolCallID), Name: m.Name}
		if m.Role == "tool" && t.Name == "" {
			t.Name = names[m.ToolCallID]
		}
		var calls []toolcall.Call
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
			t.ToolCalls = append(t.ToolCalls, tokenizer.ToolCall{ID: toolcall.FitID(family, c.ID), Name: c.Name, Arguments: c.Arguments})
			calls = append(calls, toolcall.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		if len(calls) > 0 && !knows {
			if t.Content != "" {
				t.Content += "\n"
			}
			t.Content += toolcall.Format(calls)
			t.ToolCalls = nil
		}
		if t.Role == "tool" && !knows {
			// Templates without tools often allow only user and assistant
			// turns, alternating: the result is the user's next turn (the
			// results of several calls one turn).
			res := "Result of " + t.Name + ": " + t.Content
			if results {
				tm[len(tm)-1].Content += "\n" + res
				continue
			}
			t, results = tokenizer.Message{Role: "user", Content: res}, true
		} else {
			results = false
		}
		tm = append(tm, t)
	}
	return tm, opt, plan, nil
}

// openaiCalls converts parsed calls to the response form.
func openaiCalls(calls []toolcall.Call) []openai.ToolCall {
	out := make([]openai.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = openai.ToolCall{ID: c.ID, Type: "function", Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}}
	}
	return out
}

// chatAnswer answers a chat request, whole or streamed. When it offers
// tools (plan set) each choice's answer is read for tool calls, which
// become the message's tool_calls (finish_reason "tool_calls") or,
// streamed, tool_calls deltas.
func (s *Server) chatAnswer(w http.ResponseWriter, r *http.Request, c *openai.Chat, lm *loaded, plan *toolPlan, g *gen, cancel func()) error {
	id, created := newID("chatcmpl-"), time.Now().Unix()
	var tot total
	if !c.Stream {
		outs := make([]strings.Builder, g.n)
		lps := make([][]openai.TokenLogprob, g.n)
		choices := make([]openai.ChatChoice, g.n)
		for ev := range g.events {
			if ev.Err != nil {
				return resultError(r, ev.Err)
			}
			outs[ev.i].WriteString(plan.text(ev.Event))
			if ev.Logprob != nil {
				lps[ev.i] = append(lps[ev.i], s.tokenLogprob(lm, ev.Logprob))
			}
			if ev.Finish == "" {
				continue
			}
			msg := openai.AssistantMessage{Role: "assistant", Content: outs[ev.i].String()}
			fr := ev.Finish
			if p := plan.parser(); p != nil {
				var calls []toolcall.Call
				msg.Content, calls = p.Parse(msg.Content)
				if calls = plan.calls(calls); len(calls) > 0 {
					msg.ToolCalls, fr = openaiCalls(calls), "tool_calls"
				}
			}
			choices[ev.i] = openai.ChatChoice{Index: ev.i, Message: msg, FinishReason: fr}
			if c.Logprobs {
				choices[ev.i].Logprobs = &openai.ChatLogprobs{Content: orEmpty(lps[ev.i])}
			}
			if tot.add(ev.Event); tot.finished == g.n {
				return writeJSON(w, openai.ChatCompletion{ID: id, Object: openai.ObjectChatCompletion, Created: created, Model: lm.name,
					Choices: choices, Usage: tot.usage()})
			}
		}
		return openai.AsError(errors.New("generation ended without a result"))
	}

	st := newStreamer(w, cancel, c.IncludeUsage)
	chunk := func(choices []openai.ChunkChoice) openai.ChatChunk {
		return openai.ChatChunk{ID: id, Object: openai.ObjectChatChunk, Created: created, Model: lm.name, Choices: choices, Usage: st.nullUsage()}
	}
	parsers := make([]*toolcall.Parser, g.n)
	empty := ""
	for i := range g.n {
		parsers[i] = plan.parser()
		st.send(chunk([]openai.ChunkChoice{{Index: i, Delta: openai.Delta{Role: "assistant", Content: &empty}}}))
	}
	for ev := range g.events {
		if ev.Err != nil {
			if r.Context().Err() == nil {
				st.fail(s.logFailed(r, streamError(ev.Err)))
			}
			return nil
		}
		p := parsers[ev.i]
		var ds []toolcall.Delta
		switch {
		case p != nil:
			ds = p.Feed(plan.text(ev.Event))
			if ev.Finish != "" {
				ds = append(ds, p.Close()...)
			}
		case ev.Text != "":
			ds = []toolcall.Delta{{Content: ev.Text}}
		}
		var lp *openai.ChatLogprobs
		if ev.Logprob != nil {
			lp = &openai.ChatLogprobs{Content: []openai.TokenLogprob{s.tokenLogprob(lm, ev.Logprob)}}
		}
		for _, d := range ds {
			ch := openai.ChunkChoice{Index: ev.i, Logprobs: lp}
			switch {
			case !d.Call:
				text := d.Content
				ch.Delta.Content = &text
			case !plan.set.Parallel && d.Index > 0:
				continue
			case d.ID != "":
				ch.Delta.ToolCalls = []openai.ToolCallDelta{{Index: d.Index, ID: d.ID, Type: "function", Function: openai.FunctionDelta{Name: d.Name}}}
			default:
				ch.Delta.ToolCalls = []openai.ToolCallDelta{{Index: d.Index, Function: openai.FunctionDelta{Arguments: d.Arguments}}}
			}
			st.send(chunk([]openai.ChunkChoice{ch}))
			lp = nil
		}
		if lp != nil { // a token whose text the parser holds back still has its logprob
			st.send(chunk([]openai.ChunkChoice{{Index: ev.i, Logprobs: lp}}))
		}
		if ev.Finish == "" {
			continue
		}
		fr := ev.Finish
		if p != nil && len(p.Calls()) > 0 && fr != "length" {
			fr = "tool_calls"
		}
		st.send(chunk([]openai.ChunkChoice{{Index: ev.i, Delta: openai.Delta{}, FinishReason: &fr}}))
		if tot.add(ev.Event); tot.finished == g.n {
			if c.IncludeUsage {
				u, _ := json.Marshal(tot.usage())
				st.send(openai.ChatChunk{ID: id, Object: openai.ObjectChatChunk, Created: created, Model: lm.name, Choices: []openai.ChunkChoice{}, Usage: u})
			}
			st.done()
			return nil
		}
	}
	return nil
}
