package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// openaiNodeVersion is the official OpenAI Node library the test installs:
// the newest major that still runs on Debian's and this image's Node 20
// (7.x needs Node 22).
const openaiNodeVersion = "6.30.1"

// TestOfficialOpenAIClient points the official OpenAI Node library at
// stratad's TCP listener, unchanged but for base URL and key: models, chat
// (with logprobs), streamed chat with usage, legacy completions and an error.
// It needs node and npm and reaches the npm registry once per run; without
// them it skips, saying so.
// Sequential: it frees a 127.0.0.1:0 port and hands its number to stratad, which a parallel test could take meanwhile.
func TestOfficialOpenAIClient(t *testing.T) {
	if testing.Short() {
		t.Skip("installs an npm package and builds stratad")
	}
	node, npm := nodeTools(t, "the official OpenAI client")
	dir := t.TempDir()
	mods := filepath.Join(dir, "npm")
	install := exec.Command(npm, "install", "--no-audit", "--no-fund", "--prefix", mods, "openai@"+openaiNodeVersion)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm could not install openai@%s (registry unreachable?): %v\n%s", openaiNodeVersion, err, out)
	}

	addr, dp := serveStories(t, dir)
	logs := dp.logs

	script, err := filepath.Abs(filepath.Join("testdata", "openai_client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "STRATA_URL=http://"+addr+"/v1", "STRATA_KEY=k3y",
		"OPENAI_MODULE_DIR="+filepath.Join(mods, "node_modules"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("official client failed: %v\n%s\nstratad log:\n%s", err, stderr.String(), logs.String())
	}
	var got struct {
		Models []string `json:"models"`
		Chat   struct {
			Object, Finish, Text string
			Usage                struct{ Prompt_tokens, Completion_tokens, Total_tokens int }
			Logprobs             int
		} `json:"chat"`
		Stream struct {
			Chunks int
			Text   string
			Usage  *struct{ Completion_tokens int }
		} `json:"stream"`
		Completion struct{ Object, Text string } `json:"completion"`
		Embeddings struct {
			Count, Dims int
			Norm        float64
		} `json:"embeddings"`
		Response struct {
			Object, Status, Text string
			Usage                struct{ Input_tokens, Output_tokens int }
		} `json:"response"`
		ResponseStream struct{ Text, Status string } `json:"responseStream"`
		Tools          struct {
			First, Second, Streamed, Named toolAnswer
		} `json:"tools"`
		ResponseTools struct {
			Status string
			Types  []string
			Tools  int
		} `json:"responseTools"`
		Structured struct {
			Finish string
			Keys   []string
			OK     bool
		} `json:"structured"`
		ResponseStructured struct {
			Status, Format string
			Keys           []string
			OK             bool
		} `json:"responseStructured"`
		BadSchema struct {
			Status int
			Param  string
		} `json:"badSchema"`
		Error struct {
			Status int
			Type   string
			Code   string
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	t.Logf("official client saw: %s", stdout.String())
	if len(got.Models) != 1 || got.Models[0] != "stories" {
		t.Errorf("models %v", got.Models)
	}
	if got.Chat.Object != "chat.completion" || got.Chat.Usage.Completion_tokens == 0 || got.Chat.Usage.Total_tokens != got.Chat.Usage.Prompt_tokens+got.Chat.Usage.Completion_tokens {
		t.Errorf("chat %+v", got.Chat)
	}
	if got.Chat.Logprobs != got.Chat.Usage.Completion_tokens {
		t.Errorf("%d logprob entries for %d tokens", got.Chat.Logprobs, got.Chat.Usage.Completion_tokens)
	}
	if got.Stream.Text != got.Chat.Text || got.Stream.Usage == nil || got.Stream.Chunks < 2 {
		t.Errorf("stream %+v does not match the non-streamed chat %q", got.Stream, got.Chat.Text)
	}
	if got.Completion.Object != "text_completion" {
		t.Errorf("completion %+v", got.Completion)
	}
	if got.Embeddings.Count != 2 || got.Embeddings.Dims == 0 || got.Embeddings.Norm < 0.999 || got.Embeddings.Norm > 1.001 {
		t.Errorf("embeddings (the client asks for base64 and decodes it) %+v", got.Embeddings)
	}
	if got.Response.Object != "response" || got.Response.Text == "" || got.Response.Usage.Output_tokens == 0 ||
		(got.Response.Status != "completed" && got.Response.Status != "incomplete") {
		t.Errorf("responses.create %+v", got.Response)
	}
	if got.ResponseStream.Text != got.Response.Text || got.ResponseStream.Status != got.Response.Status {
		t.Errorf("streamed response %+v does not match the whole one %+v", got.ResponseStream, got.Response)
	}
	for name, a := range map[string]toolAnswer{"first": got.Tools.First, "after the tool result": got.Tools.Second, "streamed": got.Tools.Streamed} {
		a.check(t, name)
	}
	if w, st := got.Tools.Second, got.Tools.Streamed; w.Finish != st.Finish || w.text() != st.text() || w.callsText() != st.callsText() {
		t.Errorf("streamed tools answer %+v differs from the whole one %+v", got.Tools.Streamed, got.Tools.Second)
	}
	// A named function must be called: constrained decoding makes even
	// the tiny model's random weights call it.
	if n := got.Tools.Named; n.Status != 0 {
		t.Errorf("named tool_choice refused with %d naming %q", n.Status, n.Param)
	} else if n.check(t, "named tool_choice"); n.Finish != "tool_calls" || len(n.Calls) != 1 || n.Calls[0].Name != "wx" {
		t.Errorf("named tool_choice answered %+v, want one call of wx", n)
	}
	if rt := got.ResponseTools; rt.Tools != 1 || len(rt.Types) == 0 || (rt.Status != "completed" && rt.Status != "incomplete") {
		t.Errorf("responses.create with function tools %+v", rt)
	}
	// The tiny model's weights are random: only the constraint makes its
	// output an object with these keys, in this order, of these types.
	wantKeys := []string{"ok", "pick", "count"}
	if got.Structured.Finish != "stop" || !got.Structured.OK || !slices.Equal(got.Structured.Keys, wantKeys) {
		t.Errorf("structured output (response_format json_schema) %+v", got.Structured)
	}
	if got.ResponseStructured.Status != "completed" || got.ResponseStructured.Format != "json_schema" ||
		!got.ResponseStructured.OK || !slices.Equal(got.ResponseStructured.Keys, wantKeys) {
		t.Errorf("structured output (responses text.format) %+v", got.ResponseStructured)
	}
	if got.BadSchema.Status != 400 || got.BadSchema.Param != "response_format.json_schema.schema" {
		t.Errorf("an unsupported schema as the client sees it: %+v", got.BadSchema)
	}
	if got.Error.Status != 404 || got.Error.Code != "model_not_found" {
		t.Errorf("unknown model error as the client sees it: %+v", got.Error)
	}
}

// toolAnswer is a chat answer to a request with tools, as the client read
// it (or, for a refused request, its status and the parameter named).
type toolAnswer struct {
	Object, Finish string
	Content        *string
	Calls          []struct{ ID, Type, Name, Args string }
	Status         int
	Param          string
}

func (a toolAnswer) text() string {
	if a.Content == nil {
		return ""
	}
	return *a.Content
}

// callsText is the calls without their ids (fresh for every request).
func (a toolAnswer) callsText() string {
	var b strings.Builder
	for _, c := range a.Calls {
		b.WriteString(c.Name + "(" + c.Args + ")")
	}
	return b.String()
}

// check asserts a well-formed answer: a chat completion that either calls
// tools (finish_reason tool_calls, each call with an id, type function, a
// name and JSON arguments) or says something (content, finish stop or
// length).
func (a toolAnswer) check(t *testing.T, name string) {
	t.Helper()
	if a.Object != "chat.completion" {
		t.Errorf("%s: object %q", name, a.Object)
	}
	switch a.Finish {
	case "tool_calls":
		if len(a.Calls) == 0 {
			t.Errorf("%s: finish_reason tool_calls without calls", name)
		}
		for _, c := range a.Calls {
			if c.ID == "" || c.Type != "function" || c.Name != "wx" || !json.Valid([]byte(c.Args)) {
				t.Errorf("%s: malformed call %+v", name, c)
			}
		}
	case "stop", "length":
		if len(a.Calls) != 0 || a.Content == nil {
			t.Errorf("%s: finish_reason %s with calls %+v, content %v", name, a.Finish, a.Calls, a.Content)
		}
	default:
		t.Errorf("%s: finish_reason %q", name, a.Finish)
	}
}
