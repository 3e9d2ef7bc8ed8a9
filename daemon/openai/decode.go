package openai

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of the request decoder that do not depend on the model or the
// daemon's configuration (those are checked by the server).
const (
	MaxStop            = 4   // stop sequences per request (OpenAI's limit)
	MaxN               = 8   // choices per request (n)
	MaxTopLogprobs     = 20  // chat top_logprobs (OpenAI's limit)
	MaxLegacyLogprobs  = 5   // completions logprobs (OpenAI's limit)
	MaxLogitBiasTokens = 300 // entries of logit_bias (OpenAI's limit)
)

// Params are the generation parameters shared by chat and legacy
// completions, after validation.
type Params struct {
	Model string
	// MaxTokens is the completion limit the client asked for; 0 means it
	// asked for none and the server's default applies.
	MaxTokens    int
	Temperature  float64 // [0, 2], default 1
	TopP         float64 // [0, 1], default 1
	Seed         uint64
	SeedSet      bool
	Stop         []string // non-empty strings, at most MaxStop
	Logprobs     bool
	TopLogprobs  int // alternatives per token, 0..MaxTopLogprobs
	Presence     float64
	Frequency    float64
	LogitBias    map[int32]float64
	Stream       bool
	IncludeUsage bool
	// NoSpeculation is set by "speculative": false.
	NoSpeculation bool
	// N is the choices asked for (n, 1..MaxN): as many sequences run side
	// by side from the same prompt, in the same passes.
	N int
	// Constraint, when set, is what the output must follow
	// (response_format json_object or json_schema, text.format,
	// llama-server's grammar or json_schema), for the server to translate.
	Constraint *Constraint
	// TopK (0: off), MinP (0: off), RepeatPenalty (1: off) and
	// RepeatLastN (-1: the whole history) are llama-server's sampling
	// fields.
	TopK          int
	MinP          float64
	RepeatPenalty float64
	RepeatLastN   int
	// ToolSchema is set by the server, not the client: the JSON schema the
	// answer is constrained to when the request requires a tool call.
	ToolSchema []byte
}

// sampling validates llama-server's sampling fields into p.
func (p *Params) sampling(topK *int64, minP, repeat *float64, lastN *int64) error {
	p.RepeatPenalty, p.RepeatLastN = 1, 64
	if topK != nil {
		if *topK < 0 || *topK > math.MaxInt32 {
			return BadRequest("top_k", "top_k must be 0 (off) or a positive count, got %d", *topK)
		}
		p.TopK = int(*topK)
	}
	if minP != nil {
		if !(*minP >= 0 && *minP <= 1) {
			return BadRequest("min_p", "min_p must be between 0 and 1, got %g", *minP)
		}
		p.MinP = *minP
	}
	if repeat != nil {
		if !(*repeat > 0 && *repeat <= 10) {
			return BadRequest("repeat_penalty", "repeat_penalty must be in (0, 10], got %g", *repeat)
		}
		p.RepeatPenalty = *repeat
	}
	if lastN != nil {
		if *lastN < -1 || *lastN > math.MaxInt32 {
			return BadRequest("repeat_last_n", "repeat_last_n must be -1 (the whole history), 0 (off) or a count, got %d", *lastN)
		}
		p.RepeatLastN = int(*lastN)
	}
	return nil
}

// Message is a validated chat message: role "system", "user",
// "assistant" or "tool" ("developer" is mapped to "system").
type Message struct {
	Role    string
	Content string
	// ToolCalls are an assistant message's calls; ToolCallID (and Name)
	// say which call a tool message answers.
	ToolCalls  []MessageToolCall
	ToolCallID string
	Name       string
}

// Chat is a decoded, validated chat completion request.
type Chat struct {
	Params
	Messages []Message
	// Tools is nil when the request offers none.
	Tools *ToolSet
}

// Completion is a decoded, validated legacy completion request.
type Completion struct {
	Params
	Prompt Prompt
}

// DecodeChat parses and validates the body of POST /v1/chat/completions.
// Every failure is an *Error with status 400 naming the offending
// parameter.
func DecodeChat(body []byte) (*Chat, error) {
	var r ChatRequest
	if err := unmarshal(body, &r); err != nil {
		return nil, err
	}
	c := &Chat{}
	maxTok := r.MaxTokens
	maxParam := "max_tokens"
	if r.MaxCompletionTokens != nil {
		maxTok, maxParam = r.MaxCompletionTokens, "max_completion_tokens"
	}
	p, err := common(r.Model, maxTok, maxParam, r.Temperature, r.TopP, r.Stop, r.Seed, r.N,
		r.Stream, r.StreamOptions, r.PresencePenalty, r.FrequencyPenalty, r.LogitBias)
	if err != nil {
		return nil, err
	}
	c.Params = p
	if err := c.sampling(r.TopK, r.MinP, r.RepeatPenalty, r.RepeatLastN); err != nil {
		return nil, err
	}
	if err := knownFields(body, chatFields); err != nil {
		return nil, err
	}
	c.NoSpeculation = r.Speculative != nil && !*r.Speculative
	if r.TopLogprobs != nil {
		if !r.Logprobs {
			return nil, BadRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		if *r.TopLogprobs < 0 || *r.TopLogprobs > MaxTopLogprobs {
			return nil, BadRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", MaxTopLogprobs, *r.TopLogprobs)
		}
		c.TopLogprobs = int(*r.TopLogprobs)
	}
	c.Logprobs = r.Logprobs
	if c.Constraint, err = formatConstraint(r.ResponseFormat, r.Grammar, r.JSONSchema); err != nil {
		return nil, err
	}
	if c.Tools, err = decodeTools(r.Tools, r.ToolChoice, r.ParallelToolCalls, true); err != nil {
		return nil, err
	}
	if len(r.Messages) == 0 {
		return nil, BadRequest("messages", "messages must be a non-empty array")
	}
	calls := map[string]bool{}
	for i, m := range r.Messages {
		msg, err := chatMessage(i, m, calls)
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, msg)
	}
	return c, nil
}

// DecodeCompletion parses and validates the body of POST /v1/completions.
func DecodeCompletion(body []byte) (*Completion, error) {
	var r CompletionRequest
	if err := unmarshal(body, &r); err != nil {
		return nil, err
	}
	p, err := common(r.Model, r.MaxTokens, "max_tokens", r.Temperature, r.TopP, r.Stop, r.Seed, r.N,
		r.Stream, r.StreamOptions, r.PresencePenalty, r.FrequencyPenalty, r.LogitBias)
	if err != nil {
		return nil, err
	}
	c := &Completion{Params: p}
	if err := c.sampling(r.TopK, r.MinP, r.RepeatPenalty, r.RepeatLastN); err != nil {
		return nil, err
	}
	if err := knownFields(body, completionFields); err != nil {
		return nil, err
	}
	c.NoSpeculation = r.Speculative != nil && !*r.Speculative
	if r.Prompt == nil {
		return nil, BadRequest("prompt", "you must provide a prompt")
	}
	if r.Prompt.Tokens != nil && len(r.Prompt.Tokens) == 0 {
		return nil, BadRequest("prompt", "prompt token array is empty")
	}
	c.Prompt = *r.Prompt
	if r.BestOf != nil && *r.BestOf != 1 {
		return nil, BadRequest("best_of", "best_of must be 1 (got %d): this server returns one completion per request", *r.BestOf)
	}
	if r.Echo {
		return nil, BadRequest("echo", "echo is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, BadRequest("suffix", "suffix is not supported")
	}
	if c.Constraint, err = formatConstraint(r.ResponseFormat, r.Grammar, r.JSONSchema); err != nil {
		return nil, err
	}
	if r.Logprobs != nil {
		if *r.Logprobs < 0 || *r.Logprobs > MaxLegacyLogprobs {
			return nil, BadRequest("logprobs", "logprobs must be between 0 and %d, got %d", MaxLegacyLogprobs, *r.Logprobs)
		}
		c.Logprobs = true
		c.TopLogprobs = int(*r.Logprobs)
	}
	return c, nil
}

// unmarshal checks UTF-8 and decodes body into v, turning decoder errors
// into 400s that name the field.
func unmarshal(body []byte, v any) error {
	if len(body) == 0 {
		return BadRequest("", "request body is empty; expected a JSON object")
	}
	if !utf8.Valid(body) {
		return BadRequest("", "request body is not valid UTF-8")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return BadRequest("", "request body is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return BadRequest("", "request body must be a JSON object, not %s", te.Value)
		}
		return BadRequest(te.Field, "invalid type for '%s': expected %s, got %s", te.Field, te.Type, te.Value)
	}
	return BadRequest("", "invalid request: %v", err)
}

func common(model string, maxTok *int64, maxParam string, temp, topP *float64, stop StringList,
	seed, n *int64, stream bool, so *StreamOptions, presence, frequency *float64, bias map[string]float64) (Params, error) {
	p := Params{Model: model, Temperature: 1, TopP: 1, Stream: stream}
	if model == "" {
		return p, BadRequest("model", "you must provide a model parameter")
	}
	if maxTok != nil {
		if *maxTok < 1 {
			return p, BadRequest(maxParam, "%s must be at least 1, got %d", maxParam, *maxTok)
		}
		if *maxTok > math.MaxInt32 {
			return p, BadRequest(maxParam, "%s %d is absurdly large", maxParam, *maxTok)
		}
		p.MaxTokens = int(*maxTok)
	}
	if temp != nil {
		if *temp < 0 || *temp > 2 {
			return p, BadRequest("temperature", "temperature must be between 0 and 2, got %g", *temp)
		}
		p.Temperature = *temp
	}
	if topP != nil {
		if *topP < 0 || *topP > 1 {
			return p, BadRequest("top_p", "top_p must be between 0 and 1, got %g", *topP)
		}
		if *topP > 0 && float32(*topP) == 0 {
			// Sampling works in float32: this would become 0, which
			// sampling refuses after the request was accepted.
			return p, BadRequest("top_p", "top_p %g is too small to use (the smallest is %g); use 0 to keep only the top token", *topP, math.SmallestNonzeroFloat32)
		}
		p.TopP = *topP
	}
	p.N = 1
	if n != nil {
		if *n < 1 || *n > MaxN {
			return p, BadRequest("n", "n must be between 1 and %d, got %d", MaxN, *n)
		}
		p.N = int(*n)
	}
	if len(stop) > MaxStop {
		return p, BadRequest("stop", "at most %d stop sequences are allowed, got %d", MaxStop, len(stop))
	}
	for _, s := range stop {
		if s != "" {
			p.Stop = append(p.Stop, s)
		}
	}
	if seed != nil {
		p.Seed, p.SeedSet = uint64(*seed), true
	}
	if so != nil {
		if !stream {
			return p, BadRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		if so.IncludeObfuscation != nil && *so.IncludeObfuscation {
			return p, BadRequest("stream_options.include_obfuscation", "stream_options.include_obfuscation is not supported: this server pads no events; send false or leave it out")
		}
		p.IncludeUsage = so.IncludeUsage
	}
	for _, pen := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"presence_penalty", presence, &p.Presence}, {"frequency_penalty", frequency, &p.Frequency}} {
		if pen.v == nil {
			continue
		}
		if *pen.v < -2 || *pen.v > 2 {
			return p, BadRequest(pen.name, "%s must be between -2 and 2, got %g", pen.name, *pen.v)
		}
		*pen.dst = *pen.v
	}
	if len(bias) > MaxLogitBiasTokens {
		return p, BadRequest("logit_bias", "logit_bias may hold at most %d tokens, got %d", MaxLogitBiasTokens, len(bias))
	}
	for k, v := range bias {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return p, BadRequest("logit_bias", "logit_bias key %q is not a token id", k)
		}
		if v < -100 || v > 100 {
			return p, BadRequest("logit_bias", "logit_bias value for token %d must be between -100 and 100, got %g", id, v)
		}
		if p.LogitBias == nil {
			p.LogitBias = map[int32]float64{}
		}
		p.LogitBias[int32(id)] = v
	}
	return p, nil
}

// Harmless are fields clients send that change nothing strata computes
// (OpenAI's bookkeeping and routing hints): accepted and ignored. Any other
// field a request type does not have is refused by name, so that nothing a
// client asks for is silently dropped. safety_identifier is the end-user
// id that succeeds user (the AI SDK and the OpenAI library forward it from
// their settings); prompt_cache_key routes requests to OpenAI's prompt
// cache, where strata's prefix cache needs no hint.
var Harmless = []string{"user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key"}

// nestedFields are the options objects whose keys are checked like the top
// level's, with the keys strata reads: decoding into a struct drops an
// unknown key without a word, and text.verbosity or a new stream option
// would otherwise be accepted and ignored. (Messages and tools are not
// here: clients echo response fields such as refusal and annotations back
// in them.)
var nestedFields = map[string]map[string]bool{
	"stream_options": {"include_usage": true, "include_obfuscation": true},
	"text":           {"format": true},
}

var (
	chatFields       = fieldsOf(reflect.TypeFor[ChatRequest]())
	completionFields = fieldsOf(reflect.TypeFor[CompletionRequest]())
)

// fieldsOf lists the JSON names of t's fields, and Harmless.
func fieldsOf(t reflect.Type) map[string]bool {
	m := map[string]bool{}
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = true
		}
	}
	for _, h := range Harmless {
		m[h] = true
	}
	return m
}

// knownFields refuses the first top-level field of body (a JSON object,
// already decoded once) that known lacks.
func knownFields(body []byte, known map[string]bool) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return BadRequest("", "invalid request: %v", err)
	}
	var unknown []string
	for k, v := range fields {
		if !known[k] {
			unknown = append(unknown, k)
			continue
		}
		sub, ok := nestedFields[k]
		if !ok {
			continue
		}
		// The typed decoding has already refused a value that is not an
		// object; null has no keys.
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(v, &keys); err != nil {
			return BadRequest(k, "invalid type for '%s': expected an object", k)
		}
		for sk := range keys {
			if !sub[sk] {
				unknown = append(unknown, k+"."+sk)
			}
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return BadRequest(unknown[0], "unrecognized request argument supplied: %s (this server does not implement it)", strings.Join(unknown, ", "))
}
