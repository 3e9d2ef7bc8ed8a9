package openai

import (
	"bytes"
	"encoding/json"
)

// JSONSchemaFormat is response_format's json_schema member.
type JSONSchemaFormat struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	// Strict is accepted either way: the output always follows the
	// schema exactly (what strict asks for), since a grammar cannot
	// follow it approximately.
	Strict *bool `json:"strict,omitempty"`
}

// ResponsesFormat is the Responses API's text.format: the same formats
// as response_format, with json_schema's members inline.
type ResponsesFormat struct {
	Type string `json:"type"`
	JSONSchemaFormat
}

// Constraint kinds.
const (
	ConstraintGrammar    = "grammar"     // Text is GBNF
	ConstraintJSONObject = "json_object" // any JSON object
	ConstraintJSONSchema = "json_schema" // Schema is a JSON Schema
)

// Constraint is what a request asks its output to follow, as sent: the
// server translates it into a grammar (engine/grammar, which this wire
// package does not link) and reports a translation failure against
// Param.
type Constraint struct {
	Kind   string
	Text   string          // ConstraintGrammar
	Schema json.RawMessage // ConstraintJSONSchema
	// Param is the request field it came from, e.g.
	// "response_format.json_schema.schema", "text.format.schema",
	// "grammar", "json_schema".
	Param string
}

// constraint checks the shape of response_format or text.format (rfType,
// js, reported as rfParam) and llama-server's grammar and json_schema
// fields, and returns what the output must follow: nil for free text.
func constraint(rfType string, js *JSONSchemaFormat, rfParam string, gbnf *string, bareSchema json.RawMessage) (*Constraint, error) {
	var found []*Constraint
	if gbnf != nil && *gbnf != "" {
		found = append(found, &Constraint{Kind: ConstraintGrammar, Text: *gbnf, Param: "grammar"})
	}
	if s := bytes.TrimSpace(bareSchema); len(s) > 0 && string(s) != "null" {
		found = append(found, &Constraint{Kind: ConstraintJSONSchema, Schema: s, Param: "json_schema"})
	}
	switch rfType {
	case "", "text":
	case ConstraintJSONObject:
		found = append(found, &Constraint{Kind: ConstraintJSONObject, Param: rfParam})
	case ConstraintJSONSchema:
		param := rfParam + ".json_schema.schema"
		if rfParam == "text.format" {
			param = "text.format.schema"
		} else if js == nil {
			return nil, BadRequest(rfParam+".json_schema", "%s type \"json_schema\" needs a json_schema object with a schema", rfParam)
		}
		schema := bytes.TrimSpace(js.Schema)
		if len(schema) == 0 || string(schema) == "null" {
			return nil, BadRequest(param, "a json_schema format needs a schema")
		}
		found = append(found, &Constraint{Kind: ConstraintJSONSchema, Schema: schema, Param: param})
	default:
		return nil, BadRequest(rfParam+".type", "%s type %q is not supported; use \"text\", \"json_object\" or \"json_schema\"", rfParam, rfType)
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	return nil, BadRequest(found[0].Param, "%s and %s both constrain the output; send one of them", found[0].Param, found[1].Param)
}

// formatConstraint is constraint for chat and legacy completions.
func formatConstraint(rf *ResponseFormat, gbnf *string, schema json.RawMessage) (*Constraint, error) {
	if rf == nil {
		return constraint("", nil, "response_format", gbnf, schema)
	}
	return constraint(rf.Type, rf.JSONSchema, "response_format", gbnf, schema)
}
