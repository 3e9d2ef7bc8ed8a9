package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/strata-llm/strata/engine/grammar"
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

// constraint turns response_format (rf, reported as rfParam) and
// llama-server's grammar field into the grammar the output must follow:
// nil for free text. A schema or grammar that does not translate is a 400
// naming the field.
func constraint(rfType string, js *JSONSchemaFormat, rfParam string, gbnf *string) (*grammar.Grammar, error) {
	hasGrammar := gbnf != nil && *gbnf != ""
	switch rfType {
	case "", "text":
		if !hasGrammar {
			return nil, nil
		}
		g, err := grammar.Parse(*gbnf)
		if err != nil {
			return nil, BadRequest("grammar", "invalid grammar: %v", err)
		}
		return g, nil
	case "json_object", "json_schema":
	default:
		return nil, BadRequest(rfParam+".type", "%s type %q is not supported; use \"text\", \"json_object\" or \"json_schema\"", rfParam, rfType)
	}
	if hasGrammar {
		return nil, BadRequest("grammar", "grammar and %s %q both constrain the output; send one of them", rfParam, rfType)
	}
	if rfType == "json_object" {
		g, err := grammar.JSONObject()
		if err != nil {
			return nil, AsError(fmt.Errorf("the built-in JSON grammar: %w", err))
		}
		return g, nil
	}
	schemaParam := rfParam + ".json_schema.schema"
	if js == nil {
		return nil, BadRequest(rfParam+".json_schema", "%s type \"json_schema\" needs a json_schema object with a schema", rfParam)
	}
	if rfParam == "text.format" {
		schemaParam = "text.format.schema"
	}
	schema := bytes.TrimSpace(js.Schema)
	if len(schema) == 0 || string(schema) == "null" {
		return nil, BadRequest(schemaParam, "a json_schema format needs a schema")
	}
	g, err := grammar.FromJSONSchema(schema)
	if err != nil {
		var se *grammar.SchemaError
		if errors.As(err, &se) {
			return nil, BadRequest(schemaParam, "unsupported or invalid schema at %s: %s", se.Path, se.Msg)
		}
		return nil, BadRequest(schemaParam, "invalid schema: %v", err)
	}
	return g, nil
}

// formatGrammar is constraint for chat and legacy completions, with
// llama-server's json_schema field (a bare schema) as a third way.
func formatGrammar(rf *ResponseFormat, gbnf *string, schema json.RawMessage) (*grammar.Grammar, error) {
	if s := bytes.TrimSpace(schema); len(s) > 0 && string(s) != "null" {
		switch {
		case gbnf != nil && *gbnf != "":
			return nil, BadRequest("json_schema", "json_schema and grammar both constrain the output; send one of them")
		case rf != nil && rf.Type != "" && rf.Type != "text":
			return nil, BadRequest("json_schema", "json_schema and response_format %q both constrain the output; send one of them", rf.Type)
		}
		g, err := grammar.FromJSONSchema(s)
		if err != nil {
			var se *grammar.SchemaError
			if errors.As(err, &se) {
				return nil, BadRequest("json_schema", "unsupported or invalid schema at %s: %s", se.Path, se.Msg)
			}
			return nil, BadRequest("json_schema", "invalid schema: %v", err)
		}
		return g, nil
	}
	if rf == nil {
		return constraint("", nil, "response_format", gbnf)
	}
	return constraint(rf.Type, rf.JSONSchema, "response_format", gbnf)
}
