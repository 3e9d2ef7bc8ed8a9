package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Tool is a function the client offers the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object; empty means
	// any object.
	Parameters json.RawMessage
}

// callSchema is the schema of one Generic call of t.
func callSchema(t Tool) map[string]any {
	params := json.RawMessage(`{"type":"object"}`)
	if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
		params = t.Parameters
	}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":      map[string]any{"const": t.Name},
			"arguments": params,
		},
		"required":             []string{"name", "arguments"},
		"additionalProperties": false,
	}
}

// Schema is the JSON schema an answer must follow when the client
// requires a call: a Generic call (an object with "name" and "arguments")
// of the function named only, or of any of tools when only is "", and an
// array of one or more such calls when parallel. Constrained to it, even a
// model that never learned a tool syntax answers with a call Parse reads
// as Generic.
func Schema(tools []Tool, only string, parallel bool) ([]byte, error) {
	var alts []any
	for _, t := range tools {
		if only == "" || t.Name == only {
			alts = append(alts, callSchema(t))
		}
	}
	if len(alts) == 0 {
		if only != "" {
			return nil, fmt.Errorf("toolcall: no tool is named %q", only)
		}
		return nil, fmt.Errorf("toolcall: no tools to call")
	}
	var one any = alts[0]
	if len(alts) > 1 {
		one = map[string]any{"anyOf": alts}
	}
	if parallel && only == "" {
		one = map[string]any{"type": "array", "items": one, "minItems": 1}
	}
	b, err := json.Marshal(one)
	if err != nil {
		return nil, fmt.Errorf("toolcall: schema: %w", err)
	}
	return b, nil
}

// Instructions describes tools to a model whose chat template does not
// render them, and asks for the Generic syntax: the system message the
// server adds so that the tools do not silently vanish from the prompt.
func Instructions(tools []Tool, parallel bool) string {
	var b strings.Builder
	b.WriteString(`To call a function, answer only {"name": "<function>", "arguments": {<arguments>}}`)
	if parallel {
		b.WriteString(" (several: a JSON array of them)")
	}
	b.WriteString(". Functions:\n")
	for _, t := range tools {
		d := map[string]any{"name": t.Name}
		if t.Description != "" {
			d["description"] = t.Description
		}
		if len(t.Parameters) > 0 {
			d["parameters"] = t.Parameters
		}
		line, _ := json.Marshal(d) // a map of strings and valid raw JSON always marshals
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// Format writes calls in the Generic syntax (one object, or an array of
// them): how a conversation shows a model without tool syntax of its own
// the calls it made earlier. Arguments that are not JSON are written as
// an empty object.
func Format(calls []Call) string {
	type generic struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	list := make([]generic, len(calls))
	for i, c := range calls {
		args := json.RawMessage(c.Arguments)
		if !json.Valid(args) {
			args = json.RawMessage("{}")
		}
		list[i] = generic{c.Name, args}
	}
	var b []byte
	if len(list) == 1 {
		b, _ = json.Marshal(list[0]) // valid raw JSON always marshals
	} else {
		b, _ = json.Marshal(list)
	}
	return string(b)
}
