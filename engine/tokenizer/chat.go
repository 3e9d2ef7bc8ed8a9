package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Message is one chat turn. Role is "system", "user", "assistant" or
// "tool" (other roles are passed through by the Llama 3 and Jinja formats).
type Message struct {
	Role    string
	Content string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID and Name say which call a "tool" turn answers.
	ToolCallID string
	Name       string
}

// ToolCall is one function call of an assistant turn; Arguments is the
// JSON text of its arguments object.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// ChatOptions are what a conversation is rendered with besides its
// messages.
type ChatOptions struct {
	// AddGenerationPrompt opens the assistant's turn at the end.
	AddGenerationPrompt bool
	// Tools is the request's tools list, a JSON array of
	// {"type": "function", "function": {...}} (nil: no tools). Templates
	// get it as "tools", its objects' keys in the client's order.
	Tools json.RawMessage
	// ToolChoice, when set, is passed to templates as "tool_choice"
	// (a JSON string or object).
	ToolChoice json.RawMessage
}

// ChatFormat identifies how ApplyChatTemplate renders a conversation.
type ChatFormat int

// The chat formats ApplyChatTemplate knows.
const (
	ChatPlain  ChatFormat = iota // no template in the vocabulary: "role: content" lines
	ChatLlama3                   // Llama 3 header/eot markers
	ChatGemma                    // Gemma <start_of_turn>/<end_of_turn> markers
	ChatJinja                    // any other template, rendered by a Jinja engine
)

// String returns the format's name.
func (f ChatFormat) String() string {
	switch f {
	case ChatPlain:
		return "plain"
	case ChatLlama3:
		return "llama3"
	case ChatGemma:
		return "gemma"
	case ChatJinja:
		return "jinja"
	}
	return fmt.Sprintf("ChatFormat(%d)", int(f))
}

// DetectChatFormat classifies a tokenizer.chat_template: the Llama 3 family
// by its <|start_header_id|> marker, the Gemma family by <start_of_turn>,
// ChatPlain for an empty template and ChatJinja for anything else.
func DetectChatFormat(template string) ChatFormat {
	switch {
	case strings.TrimSpace(template) == "":
		return ChatPlain
	case strings.Contains(template, "<|start_header_id|>"):
		return ChatLlama3
	case strings.Contains(template, "<start_of_turn>"):
		return ChatGemma
	}
	return ChatJinja
}

// ChatFormat returns the format ApplyChatTemplate uses for this vocabulary.
func (t *Tokenizer) ChatFormat() ChatFormat { return DetectChatFormat(t.vocab.ChatTemplate) }

// ApplyChatTemplate renders a conversation into the prompt text the model
// was trained on, chosen from the vocabulary's tokenizer.chat_template:
//
//   - Llama 3 family: "<|begin_of_text|>", then for every message
//     "<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>", then
//     "<|start_header_id|>assistant<|end_header_id|>\n\n" when
//     addGenerationPrompt.
//   - Gemma family: "<bos>", then "<start_of_turn>ROLE\nCONTENT<end_of_turn>\n"
//     per message with role "assistant" written as "model", then
//     "<start_of_turn>model\n" when addGenerationPrompt. Gemma has no system
//     role (Gemma 2's own template raises an error); system messages are
//     instead prepended, followed by a blank line, to the next user message
//     (llama.cpp's choice). A system message with no later user message is
//     emitted as a user turn so that no content is lost.
//   - Any other template is rendered by a Jinja engine with the variables
//     messages, add_generation_prompt, bos_token and eos_token; template
//     errors (including raise_exception) are returned.
//   - Without a template: "ROLE: CONTENT\n" per message and "assistant:" when
//     addGenerationPrompt, preceded by the BOS token text when the
//     vocabulary adds BOS.
//
// Message contents are trimmed of surrounding whitespace in the built-in
// Llama 3 and Gemma formats, as their official templates do.
//
// The result already contains the BOS marker where the model expects one, so
// it must be encoded with Encode(prompt, false, true): addSpecial=false to
// avoid a second BOS and parseSpecial=true so that the markers become their
// control tokens instead of being tokenized as text.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderChat(msgs, ChatOptions{AddGenerationPrompt: addGenerationPrompt})
}

// RenderChat renders a conversation, with tools, into the prompt text the
// model was trained on. A vocabulary with a tokenizer.chat_template is
// rendered by the Jinja engine with the variables real templates read:
// messages (assistant turns with tool_calls, each {id, type, function:
// {name, arguments}} with the arguments as an object; tool turns with
// tool_call_id and name), tools, tool_choice, add_generation_prompt,
// bos_token and eos_token. The built-in formats of ApplyChatTemplate serve
// only a vocabulary without a template, or, for the Llama 3 and Gemma
// families, one the engine cannot render (a conversation without tools):
// they write a turn's tool calls into its text as JSON and cannot show
// tools.
//
// A template that refuses a system message (as Gemma's do) is rendered
// again with the system text moved to the front of the first user turn,
// as the model's authors recommend; any other template error is returned.
func (t *Tokenizer) RenderChat(msgs []Message, opt ChatOptions) (string, error) {
	for i, m := range msgs {
		if strings.TrimSpace(m.Role) == "" {
			return "", fmt.Errorf("tokenizer: chat message %d has an empty role", i)
		}
	}
	hasTools := len(opt.Tools) > 0 && string(opt.Tools) != "null"
	format := t.ChatFormat()
	if format != ChatPlain {
		out, err := t.chatJinja(msgs, opt)
		var le *LimitError
		if errors.As(err, &le) {
			return "", err // a template over its limits is not rendered again
		}
		if err != nil && !errors.Is(err, errCompile) && hasSystem(msgs) {
			if again, err2 := t.chatJinja(mergeSystem(msgs), opt); err2 == nil {
				return again, nil
			}
		}
		if err == nil || format == ChatJinja || hasTools {
			return out, err
		}
	}
	if hasTools {
		return "", errors.New("tokenizer: the vocabulary has no chat template that can show tools")
	}
	msgs = flattenTools(msgs)
	gen := opt.AddGenerationPrompt
	switch format {
	case ChatLlama3:
		return t.chatLlama3(msgs, gen), nil
	case ChatGemma:
		return t.chatGemma(msgs, gen), nil
	}
	return t.chatPlain(msgs, gen), nil
}

// errCompile marks a template the engine cannot compile.
var errCompile = errors.New("tokenizer: compile chat template")

func hasSystem(msgs []Message) bool {
	for _, m := range msgs {
		if m.Role == "system" {
			return true
		}
	}
	return false
}

// mergeSystem moves system messages to the front of the next user
// message (or makes them one where none follows).
func mergeSystem(msgs []Message) []Message {
	var out []Message
	var system []string
	for _, m := range msgs {
		if m.Role == "system" {
			system = append(system, m.Content)
			continue
		}
		if m.Role == "user" && len(system) > 0 {
			m.Content = strings.Join(system, "\n\n") + "\n\n" + m.Content
			system = nil
		}
		out = append(out, m)
	}
	if len(system) > 0 {
		out = append(out, Message{Role: "user", Content: strings.Join(system, "\n\n")})
	}
	return out
}

// flattenTools writes each assistant turn's tool calls into its text, as
// the JSON the Generic tool-call syntax reads, for the built-in formats,
// which have no place for them.
func flattenTools(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		for _, c := range m.ToolCalls {
			args := c.Arguments
			if !json.Valid([]byte(args)) {
				args = "{}"
			}
			call, _ := json.Marshal(struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}{c.Name, json.RawMessage(args)}) // valid raw JSON always marshals
			if m.Content != "" {
				m.Content += "\n"
			}
			m.Content += string(call)
		}
		m.ToolCalls = nil
		out[i] = m
	}
	return out
}

// tokenText returns the text of id, or fallback when the vocabulary lacks it.
func (t *Tokenizer) tokenText(id int32, fallback string) string {
	if t.valid(id) && t.vocab.Tokens[id] != "" {
		return t.vocab.Tokens[id]
	}
	return fallback
}

func (t *Tokenizer) chatLlama3(msgs []Message, gen bool) string {
	var b strings.Builder
	b.WriteString(t.tokenText(t.vocab.BOS, "<|begin_of_text|>"))
	for _, m := range msgs {
		b.WriteString("<|start_header_id|>")
		b.WriteString(m.Role)
		b.WriteString("<|end_header_id|>\n\n")
		b.WriteString(strings.TrimSpace(m.Content))
		b.WriteString("<|eot_id|>")
	}
	if gen {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String()
}

func (t *Tokenizer) chatGemma(msgs []Message, gen bool) string {
	var b strings.Builder
	b.WriteString(t.tokenText(t.vocab.BOS, "<bos>"))
	turn := func(role, content string) {
		b.WriteString("<start_of_turn>")
		b.WriteString(role)
		b.WriteString("\n")
		b.WriteString(content)
		b.WriteString("<end_of_turn>\n")
	}
	var system []string
	for _, m := range msgs {
		content := strings.TrimSpace(m.Content)
		switch m.Role {
		case "system":
			system = append(system, content)
			continue
		case "assistant", "model":
			turn("model", content)
			continue
		}
		if len(system) > 0 {
			content = strings.Join(system, "\n\n") + "\n\n" + content
			system = nil
		}
		turn(m.Role, content)
	}
	if len(system) > 0 {
		turn("user", strings.Join(system, "\n\n"))
	}
	if gen {
		b.WriteString("<start_of_turn>model\n")
	}
	return b.String()
}

func (t *Tokenizer) chatPlain(msgs []Message, gen bool) string {
	var b strings.Builder
	if t.vocab.AddBOS && t.valid(t.vocab.BOS) {
		b.WriteString(t.vocab.Tokens[t.vocab.BOS])
	}
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	if gen {
		b.WriteString("assistant:")
	}
	return b.String()
}

func (t *Tokenizer) chatJinja(msgs []Message, opt ChatOptions) (string, error) {
	if t.vocab.ChatTemplate == "" {
		return "", fmt.Errorf("%w: no template", errCompile)
	}
	for name, raw := range map[string]json.RawMessage{"tools": opt.Tools, "tool_choice": opt.ToolChoice} {
		if len(raw) > 0 && !json.Valid(raw) {
			return "", fmt.Errorf("tokenizer: %s: invalid JSON", name)
		}
	}
	lim := DefaultChatLimits
	if t.chatLimits != nil {
		lim = *t.chatLimits
	}
	return renderSandboxed(&renderRequest{
		Template:   t.vocab.ChatTemplate,
		Messages:   msgs,
		Generation: opt.AddGenerationPrompt,
		Tools:      opt.Tools,
		ToolChoice: opt.ToolChoice,
		BOS:        t.tokenText(t.vocab.BOS, ""),
		EOS:        t.tokenText(t.vocab.EOS, ""),
	}, lim)
}

// messageValue is a message as templates read it. Keys a turn does not
// have are left out rather than set empty: templates test them with
// "'tool_calls' in message" and "is defined". Arguments are given as the
// object they encode, since templates write them with tojson.
func messageValue(m Message) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Set("role", jinja.NewString(m.Role))
	d.Set("content", jinja.NewString(m.Content))
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			args := jinja.NewString(c.Arguments)
			if a, err := jsonValue([]byte(c.Arguments)); err == nil && a.IsDict() {
				args = a
			}
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(c.Name))
			fn.AsDict().Set("arguments", args)
			call := jinja.NewDict()
			call.AsDict().Set("id", jinja.NewString(c.ID))
			call.AsDict().Set("type", jinja.NewString("function"))
			call.AsDict().Set("function", fn)
			calls[i] = call
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		d.Set("name", jinja.NewString(m.Name))
	}
	return v, nil
}

// jsonValue converts JSON to a template value, keeping the order of every
// object's keys (tools are shown to the model as the client wrote them,
// as Python's json module does).
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			v := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
				}
				key, _ := k.(string) // object keys are always strings
				e, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				v.AsDict().Set(key, e)
			}
			_, err := dec.Token()
			return v, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				e, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, e)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		return jinja.Undefined(), fmt.Errorf("invalid JSON: unexpected %v", x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := x.Float64()
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("invalid JSON number %s", x)
		}
		return jinja.NewFloat(f), nil
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("invalid JSON token %v", tok)
}

// EncodeChat renders msgs as RenderChat does and encodes the prompt so
// that control tokens come only from the template: each message's content
// is text, never read for special tokens, so a user who writes the text of
// an end-of-turn token gets those characters, not the end of the turn (and
// cannot forge a turn of another role). Around the contents the prompt
// encodes as Encode(prompt, false, true) would.
//
// The contents' places are found by rendering with a unique mark in
// place of each; a template that transforms a content (trims it, splits
// it) leaves its mark other than once, and then the prompt is rendered
// from contents with the text of every control token taken out.
func (t *Tokenizer) EncodeChat(msgs []Message, opt ChatOptions) ([]int32, error) {
	marked := slices.Clone(msgs)
	marks := make([]string, len(msgs))
	cores := make([]string, len(msgs))
	for i := range marked {
		c := marked[i].Content
		if cores[i] = strings.TrimSpace(c); cores[i] == "" {
			continue
		}
		// The content's own leading and trailing white space stays around
		// the mark, for the template to keep or trim as it would the
		// content's.
		lead := c[:strings.Index(c, cores[i])]
		marks[i] = fmt.Sprintf("\uE000%d\uE001", i)
		marked[i].Content = lead + marks[i] + c[len(lead)+len(cores[i]):]
	}
	text, err := t.RenderChat(marked, opt)
	if err == nil {
		if text, literal, ok := fillMarks(text, marks, cores); ok {
			return t.encode(text, false, true, literal), nil
		}
	}
	var le *LimitError
	if errors.As(err, &le) {
		return nil, err
	}
	clean := slices.Clone(msgs)
	for i := range clean {
		clean[i].Content = t.stripSpecials(clean[i].Content)
	}
	if text, err = t.RenderChat(clean, opt); err != nil {
		return nil, err
	}
	return t.Encode(text, false, true), nil
}

// fillMarks puts each content (without its surrounding white space, which
// the template kept or trimmed around the mark) where its mark stands in
// text and returns the contents' spans; ok is false unless every mark
// stands exactly once.
func fillMarks(text string, marks, cores []string) (string, []span, bool) {
	type at struct{ pos, msg int }
	var found []at
	for i, m := range marks {
		if m == "" {
			continue
		}
		if strings.Count(text, m) != 1 {
			return "", nil, false
		}
		found = append(found, at{strings.Index(text, m), i})
	}
	slices.SortFunc(found, func(a, b at) int { return a.pos - b.pos })
	var b strings.Builder
	var spans []span
	prev := 0
	for _, f := range found {
		b.WriteString(text[prev:f.pos])
		start := b.Len()
		b.WriteString(cores[f.msg])
		spans = append(spans, span{start, b.Len()})
		prev = f.pos + len(marks[f.msg])
	}
	b.WriteString(text[prev:])
	return b.String(), spans, true
}

// stripSpecials removes the text of every control token from s.
func (t *Tokenizer) stripSpecials(s string) string {
	for {
		frags := t.partition(s, true, nil)
		var b strings.Builder
		cut := false
		for _, f := range frags {
			if f.id >= 0 && t.TokenType(f.id) == TypeControl {
				cut = true
				continue
			}
			b.WriteString(s[f.start:f.end])
		}
		if !cut {
			return s
		}
		s = b.String() // removing one may join the halves of another
	}
}
