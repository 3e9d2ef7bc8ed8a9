package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ardanlabs/jinja"
)

// Message is one chat turn. Role is "system", "user" or "assistant" (other
// roles are passed through by the Llama 3 and Jinja formats).
type Message struct {
	Role    string
	Content string
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

// jinjaCache compiles the vocabulary's template once, on first use.
type jinjaCache struct {
	once sync.Once
	tmpl *jinja.Template
	err  error
}

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
	for i, m := range msgs {
		if strings.TrimSpace(m.Role) == "" {
			return "", fmt.Errorf("tokenizer: chat message %d has an empty role", i)
		}
	}
	switch t.ChatFormat() {
	case ChatLlama3:
		return t.chatLlama3(msgs, addGenerationPrompt), nil
	case ChatGemma:
		return t.chatGemma(msgs, addGenerationPrompt), nil
	case ChatJinja:
		return t.chatJinja(msgs, addGenerationPrompt)
	}
	return t.chatPlain(msgs, addGenerationPrompt), nil
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

func (t *Tokenizer) chatJinja(msgs []Message, gen bool) (string, error) {
	cache := &t.jinja
	cache.once.Do(func() {
		cache.tmpl, cache.err = jinja.Compile(t.vocab.ChatTemplate)
	})
	if cache.err != nil {
		return "", fmt.Errorf("tokenizer: compile chat template: %w", cache.err)
	}
	if cache.tmpl == nil {
		return "", errors.New("tokenizer: compile chat template: no template")
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	out, err := cache.tmpl.Render(map[string]any{
		"messages":              list,
		"add_generation_prompt": gen,
		"bos_token":             t.tokenText(t.vocab.BOS, ""),
		"eos_token":             t.tokenText(t.vocab.EOS, ""),
	})
	if err != nil {
		return "", fmt.Errorf("tokenizer: render chat template: %w", err)
	}
	return out, nil
}
