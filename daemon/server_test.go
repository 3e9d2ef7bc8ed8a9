package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/internal/synth"
)

// modelDir holds the tiny synthetic model every test serves.
var modelDir, tinyPath string

const tiny = "tiny"

func TestMain(m *testing.M) {
	if os.Getenv("STRATA_TEST_HELPER") != "" {
		os.Exit(helperMain())
	}
	dir, err := os.MkdirTemp("", "daemon-test")
	if err != nil {
		panic(err)
	}
	// World-readable so the second-uid test's client can use it.
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	modelDir = filepath.Join(dir, "models")
	if err := os.Mkdir(modelDir, 0o755); err != nil {
		panic(err)
	}
	tinyPath = filepath.Join(modelDir, "tiny.gguf")
	if err := synth.Write(tinyPath, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness is a Server serving the tiny model on a temporary socket.
type harness struct {
	srv    *Server
	sock   string
	c      *client.Client
	hc     *http.Client
	tcp    string // base URL of the TCP listener, if any
	cancel context.CancelFunc
	done   chan error
}

type opts struct {
	cfg      Config
	tcp      bool
	sockMode os.FileMode
	dir      string
	// setup, when set, adjusts the server before it serves.
	setup func(*Server)
}

func start(t *testing.T, o opts) *harness {
	t.Helper()
	cfg := o.cfg
	if cfg.ModelDirs == nil {
		cfg.ModelDirs = []string{modelDir}
	}
	if cfg.Log == nil {
		cfg.Log = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
	}
	if o.tcp && cfg.APIKey == "" {
		cfg.APIKey = "test-key"
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.LoadFile(context.Background(), tinyPath, api.LoadRequest{Name: tiny}); err != nil {
		t.Fatal(err)
	}
	dir := o.dir
	if dir == "" {
		dir = t.TempDir()
	}
	sock := filepath.Join(dir, "strata.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if o.sockMode != 0 {
		if err := os.Chmod(sock, o.sockMode); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{srv: srv, sock: sock, c: client.New(sock, ""), done: make(chan error, 1)}
	var tcpLs []net.Listener
	if o.tcp {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcpLs = append(tcpLs, tl)
		h.tcp = "http://" + tl.Addr().String()
	}
	h.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if o.setup != nil {
		o.setup(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- srv.Serve(ctx, []net.Listener{ul}, tcpLs) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
	h.done <- nil // idempotent
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// post sends a raw body and returns status and body.
func (h *harness) post(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	resp, err := h.hc.Post("http://stratad"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (h *harness) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := h.hc.Get("http://stratad" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// checkError asserts an OpenAI-shaped error body: exactly the keys
// message, type, param, code, with the expected type and code.
func checkError(t *testing.T, b []byte, typ, code string) {
	t.Helper()
	var raw map[string]map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	e, ok := raw["error"]
	if !ok || len(raw) != 1 || len(e) != 4 {
		t.Fatalf("error body has the wrong shape: %s", b)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("error body lacks %q: %s", k, b)
		}
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("empty message: %s", b)
	}
	if e["type"] != typ {
		t.Fatalf("type %v, want %s: %s", e["type"], typ, b)
	}
	if code != "" && e["code"] != code {
		t.Fatalf("code %v, want %s: %s", e["code"], code, b)
	}
}

const hello = `{"model":"tiny","messages":[{"role":"system","content":"be terse"},{"role":"user","content":"hello"}],"max_tokens":6,"temperature":0}`

func TestEndpoints(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	// The subtests share one server and run in order: status and metrics
	// read the counters the earlier ones moved.
	t.Run("health", func(t *testing.T) {
		code, b := h.get(t, "/health")
		if code != 200 || !bytes.Contains(b, []byte(`"status":"ok"`)) {
			t.Fatalf("%d %s", code, b)
		}
	})
	t.Run("models", func(t *testing.T) {
		code, b := h.get(t, "/v1/models")
		var l openai.ModelList
		if code != 200 || json.Unmarshal(b, &l) != nil || l.Object != "list" || len(l.Data) != 1 ||
			l.Data[0].ID != tiny || l.Data[0].Object != "model" || l.Data[0].OwnedBy == "" || l.Data[0].Created == 0 {
			t.Fatalf("%d %s", code, b)
		}
		code, b = h.get(t, "/v1/models/tiny")
		if code != 200 || !bytes.Contains(b, []byte(`"id":"tiny"`)) {
			t.Fatalf("%d %s", code, b)
		}
		code, b = h.get(t, "/v1/models/nope")
		if code != 404 {
			t.Fatalf("%d %s", code, b)
		}
		checkError(t, b, openai.TypeInvalidRequest, "model_not_found")
	})
	t.Run("chat", func(t *testing.T) {
		code, b := h.post(t, "/v1/chat/completions", hello)
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		var raw map[string]any
		json.Unmarshal(b, &raw)
		for _, k := range []string{"id", "object", "created", "model", "choices", "usage"} {
			if _, ok := raw[k]; !ok {
				t.Fatalf("missing %s: %s", k, b)
			}
		}
		var cc openai.ChatCompletion
		if err := json.Unmarshal(b, &cc); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(cc.ID, "chatcmpl-") || cc.Object != "chat.completion" || cc.Model != tiny || len(cc.Choices) != 1 {
			t.Fatalf("%s", b)
		}
		ch := cc.Choices[0]
		if ch.Message.Role != "assistant" || (ch.FinishReason != "length" && ch.FinishReason != "stop") || ch.Logprobs != nil {
			t.Fatalf("%s", b)
		}
		if cc.Usage.CompletionTokens > 6 || cc.Usage.PromptTokens == 0 || cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens {
			t.Fatalf("usage %+v", cc.Usage)
		}
		// The same greedy request streamed gives the same text.
		var streamed strings.Builder
		chunks := h.stream(t, "/v1/chat/completions", strings.Replace(hello, `"temperature":0`, `"temperature":0,"stream":true`, 1), false)
		for _, c := range chunks {
			var ck openai.ChatChunk
			json.Unmarshal(c, &ck)
			for _, x := range ck.Choices {
				if x.Delta.Content != nil {
					streamed.WriteString(*x.Delta.Content)
				}
			}
		}
		if streamed.String() != ch.Message.Content {
			t.Fatalf("streamed %q, non-streamed %q", streamed.String(), ch.Message.Content)
		}
	})
	t.Run("chat logprobs", func(t *testing.T) {
		body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4,"logprobs":true,"top_logprobs":3,"seed":7}`
		code, b := h.post(t, "/v1/chat/completions", body)
		var cc openai.ChatCompletion
		if code != 200 || json.Unmarshal(b, &cc) != nil {
			t.Fatalf("%d %s", code, b)
		}
		lp := cc.Choices[0].Logprobs
		if lp == nil || len(lp.Content) == 0 || len(lp.Content) > 5 {
			t.Fatalf("logprobs %s", b)
		}
		for _, c := range lp.Content {
			if c.Logprob > 0 || len(c.TopLogprobs) != 3 || c.TopLogprobs[0].Logprob < c.TopLogprobs[2].Logprob || c.Bytes == nil {
				t.Fatalf("bad entry %+v", c)
			}
		}
		// Same seed, same answer.
		_, b2 := h.post(t, "/v1/chat/completions", body)
		var cc2 openai.ChatCompletion
		json.Unmarshal(b2, &cc2)
		if cc2.Choices[0].Message.Content != cc.Choices[0].Message.Content {
			t.Fatalf("seed not reproducible: %q vs %q", cc.Choices[0].Message.Content, cc2.Choices[0].Message.Content)
		}
	})
	t.Run("chat stream usage", func(t *testing.T) {
		body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"logprobs":true}`
		h.stream(t, "/v1/chat/completions", body, true)
	})
	t.Run("completions", func(t *testing.T) {
		code, b := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"Once upon","max_tokens":5,"temperature":0,"logprobs":2}`)
		var tc openai.TextCompletion
		if code != 200 || json.Unmarshal(b, &tc) != nil {
			t.Fatalf("%d %s", code, b)
		}
		if !strings.HasPrefix(tc.ID, "cmpl-") || tc.Object != "text_completion" || len(tc.Choices) != 1 || tc.Choices[0].FinishReason == nil {
			t.Fatalf("%s", b)
		}
		lp := tc.Choices[0].Logprobs
		if lp == nil || len(lp.Tokens) != len(lp.TokenLogprobs) || len(lp.Tokens) != len(lp.TextOffset) || len(lp.TopLogprobs) != len(lp.Tokens) {
			t.Fatalf("logprobs %s", b)
		}
		var u openai.Usage
		if json.Unmarshal(tc.Usage, &u) != nil || u.CompletionTokens != len(lp.Tokens) {
			t.Fatalf("usage %s vs %d tokens", tc.Usage, len(lp.Tokens))
		}
		chunks := h.stream(t, "/v1/completions", `{"model":"tiny","prompt":[1,2,3],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, true)
		for _, c := range chunks {
			var ck openai.TextCompletion
			if err := json.Unmarshal(c, &ck); err != nil || ck.Object != "text_completion" || !strings.HasPrefix(ck.ID, "cmpl-") {
				t.Fatalf("chunk %s", c)
			}
		}
	})
	t.Run("status", func(t *testing.T) {
		st, err := h.c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Models) != 1 || st.Models[0].Name != tiny || st.Models[0].Plan == nil || st.Models[0].PlanNote == "" ||
			st.Models[0].Counters.Finished == 0 || st.Models[0].Memory.WeightBytes == 0 || st.Peer == "" {
			t.Fatalf("%+v", st)
		}
		// The tiny model fits the hardware's default budget: all resident.
		if p := st.Models[0].Plan; len(p.Layers) != st.Models[0].Layers || p.Depth != 0 || len(p.Tiers) != 3 ||
			p.Tiers[0].Layers != st.Models[0].Layers || p.DeviceBytes == 0 || p.DeviceBytes > p.DeviceBudgetBytes {
			t.Fatalf("plan %+v", p)
		}
		if os.Getuid() == 0 && !st.Admin {
			t.Fatal("root is not admin")
		}
		// The raw JSON carries "pipeline": null explicitly: nothing streams.
		_, b := h.get(t, api.PathStatus)
		if !bytes.Contains(b, []byte(`"pipeline":null`)) {
			t.Fatalf("pipeline not null: %s", b)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		code, b := h.get(t, "/metrics")
		if code != 200 {
			t.Fatalf("%d", code)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("metrics are not valid Prometheus text: %v", err)
		}
		for _, name := range []string{"strata_requests_total", "strata_prompt_tokens_total", "strata_completion_tokens_total",
			"strata_tokens_per_second", "strata_time_to_first_token_seconds", "strata_tier_bytes_moved_total", "strata_queue_depth",
			"strata_active_sequences", "strata_forward_passes_total"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("missing %s", name)
			}
		}
		if f := fams["strata_time_to_first_token_seconds"]; f != nil && f.Metric[0].GetHistogram().GetSampleCount() == 0 {
			t.Error("no TTFT samples")
		}
		if f := fams["strata_tier_bytes_moved_total"]; f != nil && len(f.Metric) != 3 {
			t.Errorf("tier series: %d", len(f.Metric))
		}
	})
	t.Run("unknown path and method", func(t *testing.T) {
		code, b := h.get(t, "/v2/nothing")
		if code != 404 {
			t.Fatalf("%d", code)
		}
		checkError(t, b, openai.TypeInvalidRequest, "unknown_url")
		code, b = h.get(t, "/v1/chat/completions")
		if code != 405 {
			t.Fatalf("%d", code)
		}
		checkError(t, b, openai.TypeInvalidRequest, "method_not_allowed")
	})
}

// stream posts body and parses the SSE response strictly, checking the
// framing and OpenAI's chunk rules; it returns the data of every chunk
// (without [DONE]).
func (h *harness) stream(t *testing.T, path, body string, usage bool) [][]byte {
	t.Helper()
	resp, err := h.hc.Post("http://stratad"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return checkStream(t, resp.Body, strings.Contains(path, "chat"), usage)
}

func checkStream(t *testing.T, r io.Reader, chat, usage bool) [][]byte {
	t.Helper()
	er := openai.NewEventReader(r)
	var out [][]byte
	var id string
	finished, sawUsage := false, false
	for i := 0; ; i++ {
		data, err := er.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if string(data) == openai.Done {
			if !finished {
				t.Fatal("[DONE] before a finish_reason")
			}
			if usage && !sawUsage {
				t.Fatal("include_usage but no usage chunk")
			}
			continue
		}
		if sawUsage {
			t.Fatal("chunk after the usage chunk")
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatalf("event %d not JSON: %s", i, data)
		}
		if _, isErr := raw["error"]; isErr {
			t.Fatalf("error event: %s", data)
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			Model   string `json:"model"`
			Choices []struct {
				Index        int             `json:"index"`
				Delta        json.RawMessage `json:"delta"`
				Text         *string         `json:"text"`
				FinishReason *string         `json:"finish_reason"`
			} `json:"choices"`
		}
		json.Unmarshal(data, &c)
		wantObj := "text_completion"
		if chat {
			wantObj = "chat.completion.chunk"
		}
		if c.Object != wantObj || c.Created == 0 || c.Model != tiny {
			t.Fatalf("event %d: %s", i, data)
		}
		if id == "" {
			id = c.ID
		} else if c.ID != id {
			t.Fatalf("id changed: %s vs %s", c.ID, id)
		}
		u, hasUsage := raw["usage"]
		if usage != hasUsage {
			t.Fatalf("event %d: usage present=%v, include_usage=%v: %s", i, hasUsage, usage, data)
		}
		if hasUsage && string(u) != "null" {
			if len(c.Choices) != 0 {
				t.Fatalf("usage chunk with choices: %s", data)
			}
			var us openai.Usage
			if err := json.Unmarshal(u, &us); err != nil || us.TotalTokens != us.PromptTokens+us.CompletionTokens || us.PromptTokens == 0 {
				t.Fatalf("usage %s", u)
			}
			sawUsage = true
			continue
		}
		if len(c.Choices) != 1 || c.Choices[0].Index != 0 {
			t.Fatalf("event %d: %s", i, data)
		}
		if finished {
			t.Fatalf("chunk after finish_reason: %s", data)
		}
		ch := c.Choices[0]
		if chat {
			if ch.Delta == nil {
				t.Fatalf("no delta: %s", data)
			}
			if i == 0 && !bytes.Contains(ch.Delta, []byte(`"role":"assistant"`)) {
				t.Fatalf("first chunk has no role: %s", data)
			}
		} else if ch.Text == nil {
			t.Fatalf("no text: %s", data)
		}
		if ch.FinishReason != nil {
			if *ch.FinishReason != "stop" && *ch.FinishReason != "length" {
				t.Fatalf("finish_reason %q", *ch.FinishReason)
			}
			finished = true
		}
		out = append(out, data)
	}
	if !finished {
		t.Fatal("stream ended without finish_reason")
	}
	return out
}

func TestBadRequestsKeepServing(t *testing.T) {
	t.Parallel()
	h := start(t, opts{cfg: Config{Limits: Limits{MaxBodyBytes: 4096, MaxTokens: 64, MaxPromptTokens: 100}}})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	long := strings.Repeat("word ", 150)
	tests := []struct {
		name, path, body string
		status           int
		typ, code        string
	}{
		{"malformed json", "/v1/chat/completions", `{"model":"tiny",`, 400, openai.TypeInvalidRequest, ""},
		{"not an object", "/v1/chat/completions", `"hi"`, 400, openai.TypeInvalidRequest, ""},
		{"empty body", "/v1/completions", ``, 400, openai.TypeInvalidRequest, ""},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9",` + msgs + `}`, 404, openai.TypeInvalidRequest, "model_not_found"},
		{"invalid utf8", "/v1/chat/completions", "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}", 400, openai.TypeInvalidRequest, ""},
		{"oversized body", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`, 413, openai.TypeInvalidRequest, "request_too_large"},
		{"oversized prompt", "/v1/completions", `{"model":"tiny","prompt":"` + long + `"}`, 400, openai.TypeInvalidRequest, "context_length_exceeded"},
		{"negative max_tokens", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"max_tokens":-5}`, 400, openai.TypeInvalidRequest, ""},
		{"max_tokens over limit", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"max_tokens":65}`, 400, openai.TypeInvalidRequest, ""},
		{"absurd max_tokens", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"max_tokens":1e300}`, 400, openai.TypeInvalidRequest, ""},
		{"absurd temperature", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"temperature":1e9}`, 400, openai.TypeInvalidRequest, ""},
		{"negative top_p", "/v1/completions", `{"model":"tiny","prompt":"x","top_p":-0.1}`, 400, openai.TypeInvalidRequest, ""},
		{"top_p below float32", "/v1/completions", `{"model":"tiny","prompt":"x","top_p":1e-46,"temperature":1}`, 400, openai.TypeInvalidRequest, ""},
		{"n=9", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"n":9}`, 400, openai.TypeInvalidRequest, ""},
		{"token out of vocab", "/v1/completions", `{"model":"tiny","prompt":[1,99999]}`, 400, openai.TypeInvalidRequest, ""},
		{"negative token", "/v1/completions", `{"model":"tiny","prompt":[-1]}`, 400, openai.TypeInvalidRequest, ""},
		{"bias out of vocab", "/v1/completions", `{"model":"tiny","prompt":"x","logit_bias":{"99999":1}}`, 400, openai.TypeInvalidRequest, ""},
		{"load as json array", api.PathLoad, `[]`, 400, openai.TypeInvalidRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, b := h.post(t, tc.path, tc.body)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, b)
			}
			checkError(t, b, tc.typ, tc.code)
			// The daemon still serves.
			if code, b := h.post(t, "/v1/chat/completions", hello); code != 200 {
				t.Fatalf("after %s: %d %s", tc.name, code, b)
			}
		})
	}
}

// TestConcurrentClients runs 16 streamed clients at once and checks each
// gets exactly what it gets alone (greedy decoding is batch-independent).
func TestConcurrentClients(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	const n = 16
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":"client %d asks %s"}],"max_tokens":%d,"temperature":0,"stream":true}`,
			i, strings.Repeat("why ", i%5), 8+i)
	}
	text := func(chunks [][]byte) string {
		var s strings.Builder
		for _, c := range chunks {
			var ck openai.ChatChunk
			json.Unmarshal(c, &ck)
			for _, x := range ck.Choices {
				if x.Delta.Content != nil {
					s.WriteString(*x.Delta.Content)
				}
			}
		}
		return s.String()
	}
	want := make([]string, n)
	for i := range want {
		want[i] = text(h.stream(t, "/v1/chat/completions", body(i), false))
	}
	before, _ := h.c.Status(context.Background())
	got := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i] = text(h.stream(t, "/v1/chat/completions", body(i), false))
		}()
	}
	close(start)
	wg.Wait()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("client %d: concurrent %q, alone %q", i, got[i], want[i])
		}
	}
	after, _ := h.c.Status(context.Background())
	passes := after.Models[0].Counters.Passes - before.Models[0].Counters.Passes
	var toks uint64
	for i := 0; i < n; i++ {
		toks += uint64(8 + i)
	}
	// Alone, every token costs a pass; batched, passes are shared.
	if passes >= toks {
		t.Errorf("%d passes for %d tokens: requests were not batched", passes, toks)
	}
	t.Logf("16 concurrent clients: %d passes for up to %d completion tokens", passes, toks)
}

// TestDisconnectCancels drops a streaming client mid-stream and checks
// the sequence leaves the batch within one token.
// Sequential: it asserts a cancel lag of at most one token, which CPU contention stretches.
func TestDisconnectCancels(t *testing.T) {
	h := start(t, opts{})
	conn, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	// Ban the tiny vocabulary's special tokens (ids 496..511) so the random
	// model cannot end the stream by itself before the client hangs up.
	bias := []string{}
	for id := 496; id < 512; id++ {
		bias = append(bias, fmt.Sprintf(`"%d":-100`, id))
	}
	body := `{"model":"tiny","messages":[{"role":"user","content":"go on"}],"max_tokens":200,"temperature":0,"stream":true,"logit_bias":{` + strings.Join(bias, ",") + `}}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	events := 0
	for events < 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := h.c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		m := st.Models[0]
		if m.Counters.Cancelled == 1 && m.Queue.Active == 0 {
			if m.Counters.CompletionTokens >= 200 {
				t.Fatalf("the sequence ran to completion (%d tokens) instead of being cancelled", m.Counters.CompletionTokens)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sequence not dropped: %+v", m)
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, b := h.get(t, "/metrics")
	if code != 200 {
		t.Fatal(code)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	hist := fams["strata_cancel_lag_tokens"].Metric[0].GetHistogram()
	if hist.GetSampleCount() != 1 {
		t.Fatalf("cancel lag samples: %d", hist.GetSampleCount())
	}
	for _, bk := range hist.Bucket {
		if bk.GetUpperBound() == 1 && bk.GetCumulativeCount() != 1 {
			t.Fatalf("cancelled sequence produced more than one token after the disconnect: %v", hist)
		}
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	h := start(t, opts{cfg: Config{Limits: Limits{MaxBatch: 1, MaxQueue: 1}, Conn: ConnLimits{MaxRequestsPerPeer: 1000}}})
	const n = 24
	codes := make([]int, n)
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], bodies[i] = h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x","max_tokens":200,"temperature":0}`)
		}()
	}
	wg.Wait()
	busy := 0
	for i, c := range codes {
		switch c {
		case 200:
		case 429:
			checkError(t, bodies[i], openai.TypeRateLimit, "queue_full")
			busy++
		default:
			t.Fatalf("status %d: %s", c, bodies[i])
		}
	}
	if busy == 0 {
		t.Fatal("24 simultaneous 200-token requests with one batch slot and one queue slot: none was refused")
	}
	if code, _ := h.post(t, "/v1/chat/completions", hello); code != 200 {
		t.Fatal("not serving after overload")
	}
}

func TestTCPNeedsKey(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true})
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"test-key", 401}, {"Bearer test-key", 200}, {"bearer test-key", 200}, {"BEARER  test-key", 200}, {"Basic test-key", 401}} {
		req, _ := http.NewRequest("GET", h.tcp+"/v1/models", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("auth %q: %d %s", tc.auth, resp.StatusCode, b)
		}
		if tc.want == 401 {
			checkError(t, b, openai.TypeInvalidRequest, "invalid_api_key")
		}
	}
	// A key grants inference, never administration.
	c := client.New(h.tcp, "test-key")
	if _, err := c.Chat(context.Background(), openai.ChatRequest{Model: tiny, Messages: []openai.ChatMessage{{Role: "user", Content: "x"}}}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Load(context.Background(), api.LoadRequest{Path: "tiny.gguf", Name: "again"})
	if ae, ok := err.(*client.APIError); !ok || ae.Status != 403 {
		t.Fatalf("load over TCP: %v", err)
	}
}

// Sequential: it adds a symlink to the model directory every test serves from.
func TestLoadUnload(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the admin API needs uid 0 or the admin group; run as root (CI does) to exercise it in-process")
	}
	h := start(t, opts{})
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "x.gguf"), filepath.Join(modelDir, "escape.gguf")); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(modelDir, "escape.gguf"))
	os.WriteFile(filepath.Join(outside, "x.gguf"), []byte("x"), 0o644)
	for _, tc := range []struct {
		req    api.LoadRequest
		status int
	}{
		{api.LoadRequest{Path: "../x.gguf"}, 403},
		{api.LoadRequest{Path: "/etc/passwd"}, 403},
		{api.LoadRequest{Path: "escape.gguf"}, 403},
		{api.LoadRequest{Path: "missing.gguf"}, 404},
		{api.LoadRequest{Path: "tiny.gguf"}, 409},                                                      // name "tiny" is taken
		{api.LoadRequest{Path: "tiny.gguf", Name: "small", Budgets: api.Budgets{RAMBytes: 1000}}, 422}, // model_does_not_fit
		{api.LoadRequest{Path: "tiny.gguf", Name: "small", Tiers: "all-C"}, 422},                       // prefab_pool_required
		{api.LoadRequest{Path: "tiny.gguf", Name: "small", Budgets: api.Budgets{RAMBytes: -1}}, 400},
		{api.LoadRequest{Path: "tiny.gguf", Name: "bad name!"}, 400},
	} {
		_, err := h.c.Load(ctx, tc.req)
		ae, ok := err.(*client.APIError)
		if !ok || ae.Status != tc.status {
			t.Fatalf("%+v: %v, want %d", tc.req, err, tc.status)
		}
	}
	st, err := h.c.Load(ctx, api.LoadRequest{Path: "tiny.gguf", Name: "second", Budgets: api.Budgets{RAMBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "second" || st.Budgets.RAMBytes != 1<<30 {
		t.Fatalf("%+v", st)
	}
	if code, b := h.post(t, "/v1/chat/completions", strings.Replace(hello, `"tiny"`, `"second"`, 1)); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	// Unload while a stream runs on it: the stream ends with an error
	// event, not a silent truncation.
	resp, err := h.hc.Post("http://stratad/v1/completions", "application/json",
		strings.NewReader(`{"model":"second","prompt":"x","max_tokens":250,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	er := openai.NewEventReader(resp.Body)
	if _, err := er.Next(); err != nil {
		t.Fatal(err)
	}
	u, err := h.c.Unload(ctx, "second")
	if err != nil || !u.Unloaded {
		t.Fatalf("%+v %v", u, err)
	}
	var last []byte
	for {
		d, err := er.Next()
		if err != nil {
			if err != openai.ErrNoDone && u.Cancelled > 0 {
				t.Fatalf("stream: %v", err)
			}
			break
		}
		last = d
	}
	resp.Body.Close()
	if u.Cancelled > 0 && !bytes.Contains(last, []byte(`"model_unavailable"`)) {
		t.Fatalf("stream cut by unload ended with %s", last)
	}
	if code, _ := h.post(t, "/v1/chat/completions", strings.Replace(hello, `"tiny"`, `"second"`, 1)); code != 404 {
		t.Fatalf("unloaded model still served: %d", code)
	}
	if _, err := h.c.Unload(ctx, "second"); err == nil {
		t.Fatal("double unload succeeded")
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	h := start(t, opts{cfg: Config{ShutdownTimeout: 50 * time.Millisecond}})
	resp, err := h.hc.Post("http://stratad/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":230,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	er := openai.NewEventReader(resp.Body)
	if _, err := er.Next(); err != nil {
		t.Fatal(err)
	}
	h.cancel()
	// Either the stream completes ([DONE]) or it ends with an error event;
	// never a silent cut.
	var last []byte
	for {
		d, err := er.Next()
		if err == io.EOF {
			break
		}
		if err == openai.ErrNoDone {
			if !bytes.Contains(last, []byte(`"error"`)) {
				t.Fatalf("stream cut without an error event; last %s", last)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = d
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	h.done <- nil
	if _, err := os.Stat(h.sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// TestLoadCancelled: a load whose context is cancelled fails with
// context.Canceled and registers nothing, and the daemon loads the same
// model under the same name afterwards.
func TestLoadCancelled(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{Log: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := srv.LoadFile(ctx, tinyPath, api.LoadRequest{Name: "cancelled"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled load: %v, want context.Canceled", err)
	}
	if _, err := srv.LoadFile(context.Background(), tinyPath, api.LoadRequest{Name: "cancelled"}); err != nil {
		t.Fatalf("load after a cancelled one: %v", err)
	}
}
