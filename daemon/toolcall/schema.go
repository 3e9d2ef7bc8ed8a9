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

// callSchema is the schema of one Generic call of t. Its keys are in a
// fixed order, "name" before "arguments": a constrained decoder emits an
// object's properties in the order the schema lists them, and the name
// first lets the model choose the function before its arguments (and a
// stream announce the call early).
func callSchema(t Tool) any {
	params := json.RawMessage(`{"type":"object"}`)
	if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
		params = t.Parameters
	}
	type properties struct {
		Name      map[string]string `json:"name"`
		Arguments json.RawMessage   `json:"arguments"`
	}
	return struct {
		Type                 string     `json:"type"`
		Properties           properties `json:"properties"`
		Required             []string   `json:"required"`
		AdditionalProperties bool       `json:"additionalProperties"`
	}{"object", properties{map[string]string{"const": t.Name}, params}, []string{"name", "arguments"}, false}
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
		one = struct {
			Type     string `json:"type"`
			Items    any    `json:"items"`
			MinItems int    `json:"minItems"`
		}{"array", one, 1}
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
