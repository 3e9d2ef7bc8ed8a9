package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/synth"
)

// TestClientLibraries points the Vercel AI SDK (its OpenAI-compatible
// provider and its OpenAI provider's default, Responses API model) and
// LangChain JS's OpenAI integration at stratad's TCP listener, unchanged
// but for base URL and key: text, streams, tools with a tool result, a
// named tool, structured output and embeddings. The libraries' versions
// are pinned by testdata/clients/package-lock.json, so every run installs
// the same code. It needs node and npm and reaches the npm registry once
// per run; without them it skips, saying so.
// Sequential: it frees a 127.0.0.1:0 port and hands its number to stratad, which a parallel test could take meanwhile.
func TestClientLibraries(t *testing.T) {
	if testing.Short() {
		t.Skip("installs npm packages and builds stratad")
	}
	node, npm := nodeTools(t, "the client libraries")
	dir := t.TempDir()
	mods := filepath.Join(dir, "npm")
	if err := os.MkdirAll(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "clients", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mods, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	install.Dir = mods
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm could not install the client libraries (registry unreachable?): %v\n%s", err, out)
	}

	addr, dp := serveStories(t, dir)
	env := append(os.Environ(), "STRATA_URL=http://"+addr+"/v1", "STRATA_KEY=k3y", "STRATA_MODEL=stories",
		"CLIENT_MODULE_DIR="+filepath.Join(mods, "node_modules"))
	run := func(script string, v any) {
		t.Helper()
		cmd := exec.Command(node, filepath.Join("testdata", script))
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s failed: %v\n%s\nstratad log:\n%s", script, err, stderr.String(), dp.logs.String())
		}
		t.Logf("%s saw: %s", script, stdout.String())
		if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
			t.Fatalf("%s output %q: %v", script, stdout.String(), err)
		}
	}

	// Constrained decoding either works or is refused, naming the field,
	// and the same way for every library: a server that constrains one
	// request's output constrains them all. (The judge accepts both so
	// that a refusal fails with the reason; this build must constrain.)
	var schemaOutcomes, namedOutcomes outcomes
	expect := func(problem string) {
		t.Helper()
		if problem != "" {
			t.Error(problem)
		}
	}

	var ai struct {
		Compat, Responses aiSDKRun
		Embed             struct {
			Dims, Tokens, Many, ManyDims int
			Norm, ManyNorm               float64
			Same                         bool
		}
	}
	run("aisdk_client.mjs", &ai)
	for name, r := range map[string]struct {
		run       aiSDKRun
		formatArg string
	}{
		"AI SDK openai-compatible":  {ai.Compat, "response_format"},
		"AI SDK openai (Responses)": {ai.Responses, "text.format"},
	} {
		r.run.check(t, name)
		expect(namedOutcomes.add(name+" toolChoice", r.run.Named.Refusal, "tool_choice", r.run.Named.calledOnce))
		sn := r.run.StreamNamed
		expect(namedOutcomes.add(name+" streamText toolChoice", sn.Refusal, "tool_choice", func() string {
			if msg := sn.calledOnce(); msg != "" {
				return msg
			}
			if sn.Deltas == 0 {
				return "the call came without input deltas"
			}
			return ""
		}))
		for what, o := range map[string]objectAnswer{"Output.object": r.run.Object, "generateObject": r.run.GenerateObject} {
			expect(schemaOutcomes.add(name+" "+what, o.Refusal, r.formatArg, o.okObject))
		}
	}
	if e := ai.Embed; e.Dims == 0 || !unit(e.Norm) || e.Tokens == 0 || e.Many != 2 || e.ManyDims != e.Dims || !unit(e.ManyNorm) || !e.Same {
		t.Errorf("AI SDK embed/embedMany: %+v, want two unit vectors of one size, the first the same as embed's", e)
	}

	var lc struct {
		Invoke struct {
			Text, Finish string
			Usage        lcUsage
		}
		Stream struct {
			Text   string
			Chunks int
			Usage  *lcUsage
		}
		Tools struct {
			First, Second lcToolAnswer
			Named         struct {
				Refusal
				lcToolAnswer
			}
			StreamNamed lcStreamed
		}
		Structured struct{ JSONSchema, FunctionCalling objectAnswer } `json:"structured"`
		Responses  struct {
			Text       string
			Usage      lcUsage
			ToolResult struct {
				Text  *string
				Calls int
				Usage lcUsage
			}
			Structured  objectAnswer
			StreamNamed lcStreamed
		}
		Embeddings struct {
			Count, Dims, QueryDims int
			Norm                   float64
			Same                   bool
		}
	}
	run("langchain_client.mjs", &lc)
	if i := lc.Invoke; (i.Finish != "stop" && i.Finish != "length") || !i.Usage.consistent() {
		t.Errorf("LangChain invoke: %+v", i)
	}
	if s := lc.Stream; s.Text != lc.Invoke.Text || s.Usage == nil || *s.Usage != lc.Invoke.Usage || s.Chunks < 2 {
		t.Errorf("LangChain stream %+v does not match invoke %+v", s, lc.Invoke)
	}
	lc.Tools.First.check(t, "LangChain bindTools")
	lc.Tools.Second.check(t, "LangChain bindTools after the tool result")
	expect(namedOutcomes.add("LangChain bindTools tool_choice", lc.Tools.Named.Refusal, "tool_choice", func() string {
		n := lc.Tools.Named.lcToolAnswer
		if n.Finish != "tool_calls" || len(n.Calls) != 1 || n.Calls[0].Name != "wx" || n.Calls[0].ID == "" || string(n.Calls[0].Args) != "{}" {
			return fmt.Sprintf("answered %+v, want one call of wx with {}", n)
		}
		return ""
	}))
	// Streamed, the chunks add up to the call; the Responses API has no
	// finish reason for LangChain to report.
	expect(namedOutcomes.add("LangChain stream tool_choice", lc.Tools.StreamNamed.Refusal, "tool_choice", lc.Tools.StreamNamed.calledOnce("tool_calls")))
	expect(namedOutcomes.add("LangChain useResponsesApi stream tool_choice", lc.Responses.StreamNamed.Refusal, "tool_choice", lc.Responses.StreamNamed.calledOnce("")))
	expect(schemaOutcomes.add("LangChain withStructuredOutput jsonSchema", lc.Structured.JSONSchema.Refusal, "response_format", lc.Structured.JSONSchema.okObject))
	expect(namedOutcomes.add("LangChain withStructuredOutput functionCalling", lc.Structured.FunctionCalling.Refusal, "tool_choice", lc.Structured.FunctionCalling.okObject))
	// The Responses API renders the same conversation: the same greedy text.
	if r := lc.Responses; r.Text != lc.Invoke.Text || r.Usage != lc.Invoke.Usage {
		t.Errorf("LangChain useResponsesApi invoke %+v differs from the chat completion %+v", r, lc.Invoke)
	}
	if tr := lc.Responses.ToolResult; tr.Text == nil || !tr.Usage.consistent() {
		t.Errorf("LangChain useResponsesApi after a tool result: %+v", tr)
	}
	expect(schemaOutcomes.add("LangChain useResponsesApi withStructuredOutput", lc.Responses.Structured.Refusal, "text.format", lc.Responses.Structured.okObject))
	if e := lc.Embeddings; e.Count != 2 || e.Dims == 0 || !unit(e.Norm) || e.QueryDims != e.Dims || !e.Same {
		t.Errorf("LangChain OpenAIEmbeddings: %+v, want two unit vectors of one size, embedQuery's the same as the first document's", e)
	}
	expect(schemaOutcomes.agree("structured output (response_format)"))
	expect(namedOutcomes.agree("a named tool (tool_choice)"))
	// This build constrains decoding (engine/grammar): a refusal, however
	// well formed, is a regression.
	for what, o := range map[string]outcomes{"structured output": schemaOutcomes, "a named tool": namedOutcomes} {
		if len(o.refused) > 0 {
			t.Errorf("%s refused for %s, although stratad constrains decoding", what, strings.Join(o.refused, ", "))
		}
	}
}

// Refusal is a request the server refused, as a client library reported
// it: the HTTP status and the parameter the OpenAI-shaped error named.
type Refusal struct {
	Status int
	Param  string
}

// outcomes collects, per case, whether constrained decoding was refused,
// so that the test can demand one behaviour of the server.
type outcomes struct{ refused, done []string }

// add records one case: refused (a 400 naming param) or answered (ok
// returns "" for a well-formed constrained answer, else what is wrong).
// It returns what is wrong with the case, or "".
func (o *outcomes) add(name string, r Refusal, param string, ok func() string) string {
	if r.Status != 0 {
		o.refused = append(o.refused, name)
		if r.Status != 400 || r.Param != param {
			return fmt.Sprintf("%s: refused with %d naming %q; the server must either constrain the output or answer 400 naming %s", name, r.Status, r.Param, param)
		}
		return ""
	}
	o.done = append(o.done, name)
	if msg := ok(); msg != "" {
		return fmt.Sprintf("%s: constrained decoding accepted the request but %s", name, msg)
	}
	return ""
}

// agree returns what is wrong when some cases were refused and others
// constrained, or "".
func (o *outcomes) agree(what string) string {
	if len(o.refused) > 0 && len(o.done) > 0 {
		return fmt.Sprintf("%s: constrained for %s but refused for %s", what, strings.Join(o.done, ", "), strings.Join(o.refused, ", "))
	}
	return ""
}

func unit(norm float64) bool { return math.Abs(norm-1) < 1e-3 }

// objectAnswer is structured output as a library parsed it, or the
// refusal.
type objectAnswer struct {
	Refusal
	Value json.RawMessage
}

// okObject checks the value against the schema both scripts ask for:
// {ok: boolean}, nothing else.
func (o objectAnswer) okObject() string {
	var v map[string]any
	if err := json.Unmarshal(o.Value, &v); err != nil {
		return fmt.Sprintf("the value %s is not an object: %v", o.Value, err)
	}
	if _, ok := v["ok"].(bool); !ok || len(v) != 1 {
		return fmt.Sprintf("the value %s does not fit {ok: boolean}", o.Value)
	}
	return ""
}

// aiSDKRun is what the AI SDK script saw through one provider.
type aiSDKRun struct {
	Generate, Stream struct {
		Text, Finish string
		Parts        int
		Usage        struct{ InputTokens, OutputTokens, TotalTokens int }
	}
	Tools struct {
		aiToolAnswer
		Steps int
	}
	ToolResult struct {
		Finish        string
		Calls         int
		Input, Output int
	}
	Named       aiNamed
	StreamNamed struct {
		aiNamed
		Deltas int
	}
	Object, GenerateObject objectAnswer
}

type aiCall struct {
	ID, Name string
	Input    json.RawMessage
}

type aiToolAnswer struct {
	Finish            string
	Calls             []aiCall
	Results, Executed int
}

type aiNamed struct {
	Refusal
	aiToolAnswer
}

// calledOnce checks a toolChoice naming wx: one call of it, executed.
func (n aiNamed) calledOnce() string {
	if n.Finish != "tool-calls" || len(n.Calls) != 1 || n.Calls[0].Name != "wx" || n.Calls[0].ID == "" || string(n.Calls[0].Input) != "{}" || n.Results != 1 || n.Executed != 1 {
		return fmt.Sprintf("answered %+v, want one executed call of wx with {}", n.aiToolAnswer)
	}
	return ""
}

func (r aiSDKRun) check(t *testing.T, name string) {
	t.Helper()
	g, s := r.Generate, r.Stream
	if (g.Finish != "stop" && g.Finish != "length") || g.Usage.OutputTokens == 0 || g.Usage.TotalTokens != g.Usage.InputTokens+g.Usage.OutputTokens {
		t.Errorf("%s generateText: %+v", name, g)
	}
	if s.Text != g.Text || s.Finish != g.Finish || s.Usage != g.Usage || s.Parts == 0 {
		t.Errorf("%s streamText %+v does not match generateText %+v", name, s, g)
	}
	// One step: generateText stops after the first unless told otherwise.
	tl := r.Tools
	switch {
	case tl.Steps != 1:
		t.Errorf("%s tools: %d steps, want 1", name, tl.Steps)
	case tl.Finish == "tool-calls":
		for _, c := range tl.Calls {
			if c.ID == "" || c.Name != "wx" || !json.Valid(c.Input) {
				t.Errorf("%s tools: malformed call %+v", name, c)
			}
		}
		if len(tl.Calls) == 0 || tl.Results != len(tl.Calls) || tl.Executed != len(tl.Calls) {
			t.Errorf("%s tools: %+v, want every call executed and its result kept", name, tl)
		}
	case tl.Finish == "stop" || tl.Finish == "length":
		if len(tl.Calls) != 0 || tl.Results != 0 || tl.Executed != 0 {
			t.Errorf("%s tools: finish %s with calls %+v", name, tl.Finish, tl)
		}
	default:
		t.Errorf("%s tools: finish reason %q", name, tl.Finish)
	}
	if tr := r.ToolResult; (tr.Finish != "stop" && tr.Finish != "length" && tr.Finish != "tool-calls") || tr.Input == 0 || tr.Output == 0 ||
		(tr.Finish == "tool-calls") != (tr.Calls > 0) {
		t.Errorf("%s: the answer after a tool result %+v", name, tr)
	}
}

type lcUsage struct {
	Input_tokens, Output_tokens, Total_tokens int
}

func (u lcUsage) consistent() bool {
	return u.Output_tokens > 0 && u.Total_tokens == u.Input_tokens+u.Output_tokens
}

// lcToolAnswer is a LangChain AIMessage answering a request with tools.
type lcToolAnswer struct {
	Finish  string
	Content *string
	Calls   []struct {
		ID, Name string
		Args     json.RawMessage
	}
}

func (a lcToolAnswer) check(t *testing.T, name string) {
	t.Helper()
	switch a.Finish {
	case "tool_calls":
		if len(a.Calls) == 0 {
			t.Errorf("%s: finish_reason tool_calls without calls", name)
		}
		for _, c := range a.Calls {
			if c.ID == "" || c.Name != "wx" || !json.Valid(c.Args) {
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

// TestOutcomes checks the judge of the constrained cases: a refusal must
// be a 400 naming the field, an answer must be well formed, and a server
// may not constrain some requests and refuse others.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	good := func() string { return "" }
	bad := func() string { return "the value is wrong" }
	for _, c := range []struct {
		name     string
		cases    []Refusal
		ok       func() string
		problems int
		disagree bool
	}{
		{"all refused naming the field", []Refusal{{400, "response_format"}, {400, "response_format"}}, bad, 0, false},
		{"all constrained and well formed", []Refusal{{}, {}}, good, 0, false},
		{"constrained but malformed", []Refusal{{}}, bad, 1, false},
		{"refused naming another field", []Refusal{{400, "messages"}}, good, 1, false},
		{"refused with another status", []Refusal{{500, "response_format"}}, good, 1, false},
		{"some refused, some constrained", []Refusal{{400, "response_format"}, {}}, good, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var o outcomes
			problems := 0
			for i, r := range c.cases {
				if o.add(fmt.Sprint("case ", i), r, "response_format", c.ok) != "" {
					problems++
				}
			}
			if problems != c.problems {
				t.Errorf("%d problems, want %d", problems, c.problems)
			}
			if got := o.agree("x") != ""; got != c.disagree {
				t.Errorf("disagreement %v, want %v", got, c.disagree)
			}
		})
	}
}

// TestOKObject checks the judge of structured output: exactly
// {ok: boolean}.
func TestOKObject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value string
		ok    bool
	}{
		{`{"ok":true}`, true},
		{`{"ok":false}`, true},
		{`{"ok":"yes"}`, false},
		{`{"ok":true,"more":1}`, false},
		{`{}`, false},
		{`null`, false},
		{`[true]`, false},
		{``, false},
	} {
		if got := (objectAnswer{Value: json.RawMessage(c.value)}).okObject() == ""; got != c.ok {
			t.Errorf("%q: accepted %v, want %v", c.value, got, c.ok)
		}
	}
}

// lcStreamed is a LangChain stream of a named tool's call, its chunks
// concatenated (or the refusal).
type lcStreamed struct {
	Refusal
	Finish string
	Calls  []struct {
		ID, Name string
		Args     json.RawMessage
	}
}

// calledOnce returns a check of one call of wx with {} and finish.
func (a lcStreamed) calledOnce(finish string) func() string {
	return func() string {
		if a.Finish != finish || len(a.Calls) != 1 || a.Calls[0].ID == "" || a.Calls[0].Name != "wx" || string(a.Calls[0].Args) != "{}" {
			return fmt.Sprintf("streamed %+v, want one call of wx with {} and finish %q", a, finish)
		}
		return ""
	}
}

// serveStories builds stratad into dir and starts it serving stories260K
// (a real trained model, the embedded default) on a socket there and on
// a loopback TCP port with the key "k3y", for the client-library tests;
// it returns the TCP address and the daemon.
func serveStories(t *testing.T, dir string) (string, *daemonProc) {
	t.Helper()
	bin := filepath.Join(dir, "stratad")
	if out, err := exec.Command(goTool(t), "build", "-o", bin, "github.com/strata-llm/strata/tools/stratad").CombinedOutput(); err != nil {
		t.Fatalf("building stratad: %v\n%s", err, out)
	}
	model := filepath.Join(dir, "stories.gguf")
	if err := os.WriteFile(model, synth.DefaultGGUF(), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	sock := filepath.Join(dir, "strata.sock")
	return addr, startStratad(t, bin, sock, "--socket", sock, "--model", model, "--listen", addr, "--api-key", "k3y", "--socket-group", "")
}

// nodeTools finds node and npm, skipping the test (naming what it would
// run) where either is missing.
func nodeTools(t *testing.T, what string) (node, npm string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: cannot run " + what)
	}
	npm, err = exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: cannot install " + what)
	}
	return node, npm
}
