package toolcall

import (
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"strings"
)

// Family is a model family's tool-call syntax.
type Family int

// The tool-call syntaxes strata reads.
const (
	// Generic: the whole answer is JSON, {"name": …, "arguments": {…}},
	// an array of such objects, or {"tool_calls": [...]} — what the server
	// asks for when the model's template has no tool syntax of its own,
	// and what a schema-constrained answer looks like (see Schema).
	Generic Family = iota
	// Llama3: {"name": …, "parameters": {…}} at the start of the answer
	// or after <|python_tag|>; several separated by ";" or whitespace.
	Llama3
	// Hermes: one or more <tool_call>{"name": …, "arguments": {…}}</tool_call>,
	// after optional text (Qwen 2.5 and the Hermes fine-tunes), or the
	// XML form in the same tags (Qwen 3.5, Qwen3-Coder):
	// <function=NAME><parameter=P>VALUE</parameter>…</function>.
	Hermes
	// Mistral: [TOOL_CALLS][{"name": …, "arguments": {…}}, …], or the
	// newer [TOOL_CALLS]name[ARGS]{…} form.
	Mistral
)

// String returns the family's name.
func (f Family) String() string {
	switch f {
	case Generic:
		return "generic"
	case Llama3:
		return "llama3"
	case Hermes:
		return "hermes"
	case Mistral:
		return "mistral"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// Marker texts of the families' tool-call syntax. Several are control
// tokens, which a detokenizer does not render: the caller feeds their text
// to a Parser when the model emits them (see Markers).
const (
	hermesOpen   = "<tool_call>"
	hermesClose  = "</tool_call>"
	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
	mistralID    = "[CALL_ID]"
	pythonTag    = "<|python_tag|>"
)

// Markers lists the texts of f's syntax that a vocabulary may hold as
// control tokens. A caller that decodes without rendering control tokens
// passes a generated token's text to Parser.Feed when it is one of these,
// so that the parser sees where a call begins.
func Markers(f Family) []string {
	switch f {
	case Llama3:
		return []string{pythonTag}
	case Hermes:
		return []string{hermesOpen, hermesClose}
	case Mistral:
		return []string{mistralCalls, mistralArgs, mistralID}
	}
	return nil
}

// Detect chooses the family from a chat template's text: the markers the
// template writes for an assistant's tool calls name the syntax the model
// was trained on. A template with none of them (or no template) gets
// Generic.
func Detect(template string) Family {
	switch {
	case strings.Contains(template, hermesOpen):
		return Hermes
	case strings.Contains(template, mistralCalls):
		return Mistral
	case strings.Contains(template, "<|start_header_id|>") && strings.Contains(template, "tool"):
		return Llama3
	}
	return Generic
}

// TemplateKnowsTools reports whether a chat template renders a tools list
// at all. Where it does not, the tools would silently vanish from the
// prompt, so the server describes them itself (see Instructions).
func TemplateKnowsTools(template string) bool {
	return strings.Contains(template, "tools")
}

// Call is one tool call the model made, as OpenAI reports it: Arguments is
// the JSON text of the arguments object.
type Call struct {
	ID        string
	Name      string
	Arguments string
}

const idChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// NewID returns a fresh tool-call id for f. Mistral's template refuses any
// id that is not nine alphanumeric characters (the id is echoed back with
// the tool's result and rendered into the next prompt), so its ids have
// that shape; the others get OpenAI's "call_" prefix.
func NewID(f Family) string {
	n, prefix := 24, "call_"
	if f == Mistral {
		n, prefix = 9, ""
	}
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics on an unusable source)
	for i := range b {
		b[i] = idChars[int(b[i])%len(idChars)]
	}
	return prefix + string(b)
}

// FitID returns a call id as f's template accepts it: id itself when it
// fits, else an id derived from it, the same for the same id, so that a
// call and the tool turn answering it still match. Only Mistral's
// template is particular (nine alphanumerics); a conversation begun with
// another server or model has ids of other shapes.
func FitID(f Family, id string) string {
	if f != Mistral || len(id) == 9 && strings.Trim(id, idChars) == "" {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(id)) // a hash.Hash never returns an error
	v := h.Sum64()
	b := make([]byte, 9)
	for i := range b {
		b[i] = idChars[v%uint64(len(idChars))]
		v /= uint64(len(idChars))
	}
	return string(b)
}
