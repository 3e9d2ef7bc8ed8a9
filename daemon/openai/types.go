package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Object names used in responses.
const (
	ObjectChatCompletion = "chat.completion"
	ObjectChatChunk      = "chat.completion.chunk"
	ObjectTextCompletion = "text_completion"
	ObjectModel          = "model"
	ObjectList           = "list"
)

// Content is a message's content: a string, null, or an array of content
// parts of which only "text" parts are accepted (their texts are joined).
type Content string

// UnmarshalJSON accepts a string, null or an array of text parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*c = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content(s)
		return nil
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var s string
		for i, p := range parts {
			if p.Type != "text" {
				return fmt.Errorf("content part %d has type %q; only \"text\" parts are supported", i, p.Type)
			}
			if p.Text == nil {
				return fmt.Errorf("content part %d has no text", i)
			}
			s += *p.Text
		}
		*c = Content(s)
		return nil
	}
	return errors.New("content must be a string or an array of text parts")
}

// StringList is a string or an array of strings (the "stop" parameter).
type StringList []string

// UnmarshalJSON accepts null, a string or an array of strings.
func (l *StringList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*l = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = StringList{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return errors.New("must be a string or an array of strings")
	}
	*l = ss
	return nil
}

// Prompt is the "prompt" of a legacy completion: a string, an array of one
// string, an array of token ids, or an array holding one array of token
// ids. Several prompts in one request are refused (n=1 semantics).
type Prompt struct {
	Text   string
	Tokens []int32 // non-nil when the prompt was given as token ids
}

// UnmarshalJSON accepts the four prompt forms.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &p.Text)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return errors.New("must be a string, an array of one string, or an array of token ids")
	}
	if len(raw) == 0 {
		return errors.New("must not be an empty array")
	}
	first := bytes.TrimSpace(raw[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		if len(raw) != 1 {
			return fmt.Errorf("has %d prompts; only one prompt per request is supported", len(raw))
		}
		return json.Unmarshal(first, &p.Text)
	case len(first) > 0 && first[0] == '[':
		if len(raw) != 1 {
			return fmt.Errorf("has %d prompts; only one prompt per request is supported", len(raw))
		}
		var ids []int32
		if err := json.Unmarshal(first, &ids); err != nil {
			return errors.New("token ids must be integers")
		}
		p.Tokens = ids
		if p.Tokens == nil {
			p.Tokens = []int32{}
		}
		return nil
	}
	var ids []int32
	if err := json.Unmarshal(b, &ids); err != nil {
		return errors.New("token ids must be integers")
	}
	p.Tokens = ids
	return nil
}

// StreamOptions are the options of a streamed response.
type StreamOptions struct {
	// IncludeUsage adds a last chunk with empty choices and the usage,
	// and "usage": null on every other chunk.
	IncludeUsage bool `json:"include_usage"`
}

// ResponseFormat is response_format: "text", "json_object" (any JSON
// object) or "json_schema" (JSON valid under JSONSchema.Schema).
type ResponseFormat struct {
	Type       string            `json:"type"`
	JSONSchema *JSONSchemaFormat `json:"json_schema,omitempty"`
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
	Name    string  `json:"name,omitempty"`
	// ToolCalls are an assistant message's calls; ToolCallID says which
	// call a "tool" message answers.
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ChatRequest is the body of POST /v1/chat/completions. Pointer fields are
// optional; unknown fields are ignored, as OpenAI's server does.
type ChatRequest struct {
	Model               string             `json:"model"`
	Messages            []ChatMessage      `json:"messages"`
	MaxTokens           *int64             `json:"max_tokens"`
	MaxCompletionTokens *int64             `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	Stop                StringList         `json:"stop"`
	Seed                *int64             `json:"seed"`
	N                   *int64             `json:"n"`
	Stream              bool               `json:"stream"`
	StreamOptions       *StreamOptions     `json:"stream_options"`
	Logprobs            bool               `json:"logprobs"`
	TopLogprobs         *int64             `json:"top_logprobs"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	LogitBias           map[string]float64 `json:"logit_bias"`
	ResponseFormat      *ResponseFormat    `json:"response_format"`
	Tools               json.RawMessage    `json:"tools"`
	ToolChoice          json.RawMessage    `json:"tool_choice"`
	ParallelToolCalls   *bool              `json:"parallel_tool_calls"`
	User                string             `json:"user"`
	// TopK, MinP, RepeatPenalty and RepeatLastN are llama-server's
	// sampling fields, which strata's sampler implements.
	TopK          *int64   `json:"top_k"`
	MinP          *float64 `json:"min_p"`
	RepeatPenalty *float64 `json:"repeat_penalty"`
	RepeatLastN   *int64   `json:"repeat_last_n"`
	// Speculative is strata's extension: false keeps this request's
	// decoding plain where the model has a drafter (absent or true
	// lets the scheduler speculate; the output is the same either way).
	Speculative *bool `json:"speculative"`
	// Grammar is llama-server's GBNF constraint on the output; JSONSchema
	// its schema constraint (a schema, not response_format's wrapper).
	Grammar    *string         `json:"grammar"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model            string             `json:"model"`
	Prompt           *Prompt            `json:"prompt"`
	MaxTokens        *int64             `json:"max_tokens"`
	Temperature      *float64           `json:"temperature"`
	TopP             *float64           `json:"top_p"`
	Stop             StringList         `json:"stop"`
	Seed             *int64             `json:"seed"`
	N                *int64             `json:"n"`
	BestOf           *int64             `json:"best_of"`
	Stream           bool               `json:"stream"`
	StreamOptions    *StreamOptions     `json:"stream_options"`
	Logprobs         *int64             `json:"logprobs"`
	Echo             bool               `json:"echo"`
	Suffix           *string            `json:"suffix"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	LogitBias        map[string]float64 `json:"logit_bias"`
	User             string             `json:"user"`
	// TopK … RepeatLastN as on ChatRequest.
	TopK          *int64   `json:"top_k"`
	MinP          *float64 `json:"min_p"`
	RepeatPenalty *float64 `json:"repeat_penalty"`
	RepeatLastN   *int64   `json:"repeat_last_n"`
	// Speculative is strata's extension, as on ChatRequest.
	Speculative *bool `json:"speculative"`
	// ResponseFormat, Grammar and JSONSchema constrain the output as on
	// ChatRequest.
	ResponseFormat *ResponseFormat `json:"response_format"`
	Grammar        *string         `json:"grammar"`
	JSONSchema     json.RawMessage `json:"json_schema"`
}

// Usage counts the tokens of one request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// TopLogprob is one alternative token with its log probability.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// TokenLogprob is the log probability of one generated token and, when
// asked for, its most likely alternatives.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// ChatLogprobs is a chat choice's "logprobs" object.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// AssistantMessage is the message of a non-streamed chat choice.
type AssistantMessage struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"` // null when only ToolCalls (see MarshalJSON)
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index        int              `json:"index"`
	Message      AssistantMessage `json:"message"`
	Logprobs     *ChatLogprobs    `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
}

// ChatCompletion is the response of a non-streamed chat completion.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
}

// Delta is the incremental message of a streamed chat chunk. The first
// chunk carries the role; the last one is empty.
type Delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ChunkChoice is one choice of a streamed chat chunk.
type ChunkChoice struct {
	Index        int           `json:"index"`
	Delta        Delta         `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatChunk is one event of a streamed chat completion. Usage is
// json.RawMessage so that it can be "null" (include_usage, not the last
// chunk), an object (the last chunk) or absent.
type ChatChunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

// CompletionLogprobs is the legacy completions "logprobs" object.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// TextChoice is one choice of a legacy completion (streamed or not).
type TextChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// TextCompletion is the response (and each streamed chunk) of
// POST /v1/completions.
type TextCompletion struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint,omitempty"`
	Choices           []TextChoice    `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

// Model describes one served model in GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the response of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// MarshalJSON writes the prompt as a string, or as an array of token ids
// when Tokens is set.
func (p Prompt) MarshalJSON() ([]byte, error) {
	if p.Tokens != nil {
		return json.Marshal(p.Tokens)
	}
	return json.Marshal(p.Text)
}
