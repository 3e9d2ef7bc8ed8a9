package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// templateTok is a tokenizer whose vocabulary carries the named template
// of testdata/templates, with bos and eos texts as given.
func templateTok(t *testing.T, file, bos, eos string) *Tokenizer {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join("testdata", "templates", file))
	if err != nil {
		t.Fatal(err)
	}
	v := &Vocab{Model: ModelLlama, Tokens: []string{"<unk>", bos, eos}, Types: []int32{2, 3, 3},
		BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddBOS: true, ChatTemplate: string(tmpl)}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const weatherTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", ` +
	`"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`

// toolConversation is a tools round trip: a question, the assistant's call,
// the tool's result.
func toolConversation(id string) []Message {
	return []Message{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: id, Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Role: "tool", ToolCallID: id, Name: "get_weather", Content: `{"temp": 21}`},
	}
}

// TestRenderChatTools renders a tools round trip with the published
// templates of the three tool-calling families and checks the text each
// model was trained on, key order of the tools list included.
func TestRenderChatTools(t *testing.T) {
	t.Parallel()
	today := time.Now().Format("02 Jan 2006")
	// The Llama templates write each tool with tojson(indent=4), which the
	// Jinja engine encodes with sorted keys (Python keeps the client's
	// order): the one place the prompt differs from the reference.
	llamaTools := "{\n    \"function\": {\n        \"description\": \"Get the weather\",\n        \"name\": \"get_weather\",\n" +
		"        \"parameters\": {\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n" +
		"                }\n            },\n            \"required\": [\n                \"city\"\n            ],\n            \"type\": \"object\"\n        }\n    },\n    \"type\": \"function\"\n}\n\n"
	llama := func(date string) string {
		return "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" +
			"You are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" +
			"Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" +
			"Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n" +
			llamaTools + "Weather in Paris?<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>" +
			"<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\"<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"
	}
	tests := []struct {
		name, file, bos, eos, id string
		want                     string
	}{
		{"qwen2.5", "qwen2.5-instruct.jinja", "<|endoftext|>", "<|im_end|>", "call_1",
			"<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + weatherTools[1:len(weatherTools)-1] + "\n</tools>\n\n" +
				"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
				"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n"},
		{"llama3.1", "llama3.1-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "call_1", llama("26 Jul 2024")},
		{"llama3.2", "llama3.2-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "call_1", llama(today)},
		{"mistral nemo", "mistral-nemo-instruct.jinja", "<s>", "</s>", "a1B2c3D4e",
			"<s>[AVAILABLE_TOOLS][" + weatherTools[1:len(weatherTools)-1] + "][/AVAILABLE_TOOLS]" +
				"[INST]Weather in Paris?[/INST]" +
				"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1B2c3D4e\"}]</s>" +
				"[TOOL_RESULTS]{\"content\": {\"temp\": 21}, \"call_id\": \"a1B2c3D4e\"}[/TOOL_RESULTS]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok := templateTok(t, tc.file, tc.bos, tc.eos)
			got, err := tok.RenderChat(toolConversation(tc.id), ChatOptions{AddGenerationPrompt: true, Tools: []byte(weatherTools)})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
			// Without tools, the same templates render a plain chat.
			plain, err := tok.RenderChat([]Message{{Role: "user", Content: "Hi"}}, ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(plain, "get_weather") || !strings.Contains(plain, "Hi") {
				t.Errorf("plain chat = %q", plain)
			}
		})
	}
}

func TestRenderChatErrors(t *testing.T) {
	t.Parallel()
	mistral := templateTok(t, "mistral-nemo-instruct.jinja", "<s>", "</s>")
	// Mistral's template refuses ids that are not nine characters.
	if _, err := mistral.RenderChat(toolConversation("call_123456"), ChatOptions{Tools: []byte(weatherTools)}); err == nil ||
		!strings.Contains(err.Error(), "length 9") {
		t.Errorf("err = %v, want the template's refusal of the id", err)
	}
	// Llama 3.1 shows only one call per turn.
	llama := templateTok(t, "llama3.1-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>")
	two := toolConversation("a")
	two[2].ToolCalls = append(two[2].ToolCalls, ToolCall{ID: "b", Name: "get_weather", Arguments: "{}"})
	if _, err := llama.RenderChat(two, ChatOptions{Tools: []byte(weatherTools)}); err == nil || !strings.Contains(err.Error(), "single tool-calls") {
		t.Errorf("err = %v, want the template's refusal of two calls", err)
	}
	if _, err := llama.RenderChat(two[:2], ChatOptions{Tools: []byte(`[{"type": "function"`)}); err == nil || !strings.Contains(err.Error(), "tools") {
		t.Errorf("err = %v, want invalid tools JSON named", err)
	}
	// A vocabulary without a template cannot show tools.
	plain := templateTok(t, "qwen2.5-instruct.jinja", "<s>", "</s>")
	plain.vocab.ChatTemplate = ""
	if _, err := plain.RenderChat(two[:2], ChatOptions{Tools: []byte(weatherTools)}); err == nil {
		t.Error("tools accepted without a template")
	}
	// The built-in formats write calls into the turn's text.
	got, err := plain.RenderChat(toolConversation("a"), ChatOptions{AddGenerationPrompt: true})
	want := "<s>system: You are helpful.\nuser: Weather in Paris?\nassistant: {\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\ntool: {\"temp\": 21}\nassistant:"
	if err != nil || got != want {
		t.Errorf("plain = %q, %v\nwant  %q", got, err, want)
	}
}

// TestRenderChatSystemFallback: a template that refuses the system role
// gets it merged into the first user turn.
func TestRenderChatSystemFallback(t *testing.T) {
	t.Parallel()
	tok := templateTok(t, "qwen2.5-instruct.jinja", "<bos>", "<eos>")
	tok.vocab.ChatTemplate = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" +
		"<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}"
	got, err := tok.RenderChat([]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}, ChatOptions{})
	if want := "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	// Templates that fail for another reason still fail.
	tok2 := templateTok(t, "qwen2.5-instruct.jinja", "<bos>", "<eos>")
	tok2.vocab.ChatTemplate = "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{% endfor %}"
	if _, err := tok2.RenderChat([]Message{{Role: "system", Content: "x"}, {Role: "tool", Content: "y"}}, ChatOptions{}); err == nil ||
		!strings.Contains(err.Error(), "no tools here") {
		t.Errorf("err = %v, want the template's own error", err)
	}
}
