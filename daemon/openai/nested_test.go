package openai

import (
	"errors"
	"testing"
)

// TestNestedAndHarmlessFields: the options objects clients fill in are
// checked key by key like the top level (an option strata does not
// implement is refused by its dotted name, never dropped), and the
// identifiers and hints the client libraries forward from their settings
// are accepted on every endpoint.
func TestNestedAndHarmlessFields(t *testing.T) {
	t.Parallel()
	const msgs = `"model":"m","messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct {
		name, endpoint, body string
		param                string // "" = accepted
	}{
		{"chat safety_identifier and prompt_cache_key", "chat", `{` + msgs + `,"safety_identifier":"s","prompt_cache_key":"k"}`, ""},
		{"completion safety_identifier and prompt_cache_key", "completion", `{"model":"m","prompt":"x","safety_identifier":"s","prompt_cache_key":"k"}`, ""},
		{"responses safety_identifier and prompt_cache_key", "responses", `{"model":"m","input":"x","safety_identifier":"s","prompt_cache_key":"k"}`, ""},
		{"chat stream_options include_usage", "chat", `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"chat stream_options without obfuscation", "chat", `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}`, ""},
		{"chat stream_options asking for obfuscation", "chat", `{` + msgs + `,"stream":true,"stream_options":{"include_obfuscation":true}}`, "stream_options.include_obfuscation"},
		{"chat stream_options unknown key", "chat", `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"zeta":1,"beta":2}}`, "stream_options.beta"},
		{"completion stream_options unknown key", "completion", `{"model":"m","prompt":"x","stream":true,"stream_options":{"chunk":1}}`, "stream_options.chunk"},
		{"responses text.format text", "responses", `{"model":"m","input":"x","text":{"format":{"type":"text"}}}`, ""},
		{"responses text.verbosity", "responses", `{"model":"m","input":"x","text":{"verbosity":"low"}}`, "text.verbosity"},
		{"chat verbosity", "chat", `{` + msgs + `,"verbosity":"low"}`, "verbosity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			switch tc.endpoint {
			case "chat":
				_, err = DecodeChat([]byte(tc.body))
			case "completion":
				_, err = DecodeCompletion([]byte(tc.body))
			case "responses":
				_, err = DecodeResponses([]byte(tc.body))
			}
			if tc.param == "" {
				if err != nil {
					t.Errorf("%s: %v", tc.body, err)
				}
				return
			}
			var oe *Error
			if !errors.As(err, &oe) || oe.Param != tc.param || oe.Status != 400 {
				t.Errorf("%s: %v, want a 400 naming %q", tc.body, err, tc.param)
			}
		})
	}
}
