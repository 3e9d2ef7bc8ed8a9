package daemon

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
)

// TestTokenizeDetokenize: llama-server's /tokenize and /detokenize over
// the loaded model's tokenizer, the model named or the only one; ids
// outside the vocabulary and unknown models are refused.
func TestTokenizeDetokenize(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	lm, err := h.srv.lookup(tiny)
	if err != nil {
		t.Fatal(err)
	}
	const text = "tokens, then text again"
	want := lm.eng.Tok.Encode(text, false, false)
	code, b := h.post(t, PathTokenize, `{"content":"`+text+`"}`)
	var tr struct {
		Tokens []int32 `json:"tokens"`
	}
	if code != 200 || json.Unmarshal(b, &tr) != nil || !slices.Equal(tr.Tokens, want) {
		t.Fatalf("tokenize: %d %s, want %v", code, b, want)
	}
	code, b = h.post(t, PathTokenize, `{"model":"tiny","content":"`+text+`","add_special":true,"with_pieces":true}`)
	var pr struct {
		Tokens []TokenPiece `json:"tokens"`
	}
	if code != 200 || json.Unmarshal(b, &pr) != nil || len(pr.Tokens) != len(want)+1 || pr.Tokens[1].ID != want[0] {
		t.Fatalf("tokenize with BOS and pieces: %d %s", code, b)
	}
	ids, _ := json.Marshal(want)
	code, b = h.post(t, PathDetokenize, `{"tokens":`+string(ids)+`}`)
	var dr DetokenizeResponse
	if code != 200 || json.Unmarshal(b, &dr) != nil || dr.Content != text {
		t.Fatalf("detokenize: %d %s", code, b)
	}
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{PathDetokenize, `{"tokens":[-1]}`, 400},
		{PathDetokenize, `{"tokens":[99999999]}`, 400},
		{PathTokenize, `{"model":"nope","content":"x"}`, 404},
		{PathTokenize, `{"content":"x","extra":1}`, 400},
	} {
		if code, b := h.post(t, tc.path, tc.body); code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.path, tc.body, code, b, tc.want)
		}
	}
}

// TestHealth: public on TCP (no key), 200 with a model ready, 503 with
// none.
func TestHealth(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true})
	get := func() (int, api.Health) {
		t.Helper()
		resp, err := http.Get(h.tcp + api.PathHealth)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var hl api.Health
		if err := json.Unmarshal(b, &hl); err != nil {
			t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, hl
	}
	if code, hl := get(); code != 200 || hl.Status != "ok" || hl.Models != 1 {
		t.Fatalf("with a model: %d %+v", code, hl)
	}
	if _, err := h.srv.Unload(tiny); err != nil {
		t.Fatal(err)
	}
	if code, hl := get(); code != 503 || hl.Models != 0 || hl.Status != "no model loaded" {
		t.Fatalf("with none: %d %+v", code, hl)
	}
	req, _ := http.NewRequest(http.MethodGet, h.tcp+"/v1/models", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("the rest still needs the key: %v", err)
	}
}

// TestCORS: with an allowed origin, a browser's preflight is answered
// without the key and a keyed request carries the origin back; another
// origin gets no CORS headers; without --cors-origin there are none.
func TestCORS(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true, cfg: Config{CORSOrigins: []string{"https://app.example"}}})
	do := func(method, origin string, key bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, h.tcp+"/v1/models", nil)
		req.Header.Set("Origin", origin)
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		if key {
			req.Header.Set("Authorization", "Bearer test-key")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do(http.MethodOptions, "https://app.example", false); r.StatusCode != 204 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", r.StatusCode, r.Header)
	}
	if r := do(http.MethodGet, "https://app.example", true); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("keyed request: %d %v", r.StatusCode, r.Header)
	}
	if r := do(http.MethodGet, "https://evil.example", true); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("another origin got %v", r.Header)
	}
	if r := do(http.MethodGet, "https://app.example", false); r.StatusCode != 401 {
		t.Fatalf("no key: %d", r.StatusCode)
	}
	plain := start(t, opts{tcp: true})
	req, _ := http.NewRequest(http.MethodOptions, plain.tcp+"/v1/models", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS without --cors-origin: %v", resp.Header)
	}
}

// TestNChoices: n choices from one request, chat and legacy, whole and
// streamed: at temperature 0 every choice is the one-choice answer, with a
// seed they are the seeds seed, seed+1, …'s own answers; indices 0..n-1,
// usage counts the prompt once and every completion.
func TestNChoices(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	type choice struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	type resp struct {
		Choices []choice `json:"choices"`
		Usage   struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	get := func(path, body string) resp {
		t.Helper()
		code, b := h.post(t, path, body)
		var r resp
		if code != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("%s %s: %d %s", path, body, code, b)
		}
		return r
	}
	text := func(c choice) string { return c.Text + c.Message.Content }
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		req := func(extra string) string {
			if path == "/v1/completions" {
				return `{"model":"tiny","prompt":"n of them","max_tokens":12` + extra + `}`
			}
			return `{"model":"tiny","messages":[{"role":"user","content":"n of them"}],"max_tokens":12` + extra + `}`
		}
		one := get(path, req(`,"temperature":0`))
		three := get(path, req(`,"temperature":0,"n":3`))
		if len(three.Choices) != 3 || three.Usage.Prompt != one.Usage.Prompt || three.Usage.Completion != 3*one.Usage.Completion {
			t.Fatalf("%s n=3: %+v (one: %+v)", path, three, one)
		}
		for i, c := range three.Choices {
			if c.Index != i || text(c) != text(one.Choices[0]) {
				t.Fatalf("%s choice %d: %+v, want index %d and %q", path, i, c, i, text(one.Choices[0]))
			}
		}
		seeded := get(path, req(`,"temperature":1,"seed":40,"n":2`))
		for i, c := range seeded.Choices {
			alone := get(path, req(fmt.Sprintf(`,"temperature":1,"seed":%d`, 40+i)))
			if text(c) != text(alone.Choices[0]) {
				t.Fatalf("%s seeded choice %d: %q, seed %d alone %q", path, i, text(c), 40+i, text(alone.Choices[0]))
			}
		}
	}
	// Streamed: every choice's text arrives, each finishes, then usage.
	resp2, err := h.hc.Post("http://stratad/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"tiny","messages":[{"role":"user","content":"n of them"}],"max_tokens":12,"temperature":0,"n":2,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	er := openai.NewEventReader(resp2.Body)
	texts, finished := make([]string, 2), 0
	var usage *openai.Usage
	for {
		d, err := er.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(d) == "[DONE]" {
			continue
		}
		var ch openai.ChatChunk
		if err := json.Unmarshal(d, &ch); err != nil {
			t.Fatalf("%v: %s", err, d)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				texts[c.Index] += *c.Delta.Content
			}
			if c.FinishReason != nil {
				finished++
			}
		}
		if len(ch.Usage) > 0 && string(ch.Usage) != "null" {
			usage = new(openai.Usage)
			json.Unmarshal(ch.Usage, usage)
		}
	}
	if finished != 2 || texts[0] == "" || texts[0] != texts[1] || usage == nil || usage.CompletionTokens == 0 {
		t.Fatalf("stream: finished %d, texts %q, usage %+v", finished, texts, usage)
	}
}

// TestEmbeddings: /v1/embeddings takes every input form, gives unit
// vectors of the model's width (base64 the same floats), the ids form the
// same vector as their text, and refuses bad requests by parameter.
func TestEmbeddings(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	lm, err := h.srv.lookup(tiny)
	if err != nil {
		t.Fatal(err)
	}
	dim := lm.eng.Model.Config.Dim
	post := func(body string) EmbeddingResponse {
		t.Helper()
		code, b := h.post(t, PathEmbeddings, body)
		var r EmbeddingResponse
		if code != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("%s: %d %s", body, code, b)
		}
		return r
	}
	vec := func(e Embedding) []float64 {
		t.Helper()
		switch v := e.Embedding.(type) {
		case []any:
			out := make([]float64, len(v))
			for i, x := range v {
				out[i] = x.(float64)
			}
			return out
		case string:
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]float64, len(b)/4)
			for i := range out {
				out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
			}
			return out
		}
		t.Fatalf("embedding of type %T", e.Embedding)
		return nil
	}
	one := post(`{"model":"tiny","input":"embed this sentence"}`)
	v := vec(one.Data[0])
	var n float64
	for _, x := range v {
		n += x * x
	}
	if len(v) != dim || math.Abs(n-1) > 1e-4 || one.Usage.PromptTokens == 0 || one.Object != "list" {
		t.Fatalf("one input: %d dims (want %d), |v|² %g, %+v", len(v), dim, n, one.Usage)
	}
	ids, _ := json.Marshal(lm.eng.Tok.Encode("embed this sentence", false, false))
	many := post(`{"model":"tiny","input":["embed this sentence","something else"],"encoding_format":"base64"}`)
	fromIDs := post(`{"model":"tiny","input":` + string(ids) + `}`)
	if len(many.Data) != 2 || many.Data[1].Index != 1 {
		t.Fatalf("two inputs: %+v", many)
	}
	for i, x := range vec(many.Data[0]) {
		if math.Abs(x-v[i]) > 1e-6 || math.Abs(vec(fromIDs.Data[0])[i]-v[i]) > 1e-6 {
			t.Fatalf("element %d: base64 %g, ids %g, text %g", i, x, vec(fromIDs.Data[0])[i], v[i])
		}
	}
	if slices.Equal(vec(many.Data[1]), v) {
		t.Fatal("two different texts embed the same")
	}
	for _, tc := range []struct {
		body  string
		code  int
		param string
	}{
		{`{"model":"tiny"}`, 400, "input"},
		{`{"model":"tiny","input":[]}`, 400, "input"},
		{`{"model":"tiny","input":{"x":1}}`, 400, "input"},
		{`{"model":"tiny","input":"x","dimensions":3}`, 400, "dimensions"},
		{`{"model":"tiny","input":"x","encoding_format":"int8"}`, 400, "encoding_format"},
		{`{"model":"tiny","input":[99999999]}`, 400, "input"},
		{`{"model":"nope","input":"x"}`, 404, "model"},
	} {
		code, b := h.post(t, PathEmbeddings, tc.body)
		if code != tc.code || !strings.Contains(string(b), `"param":"`+tc.param+`"`) {
			t.Errorf("%s: %d %s, want %d naming %s", tc.body, code, b, tc.code, tc.param)
		}
	}
}

// TestResponsesRefusals: what /v1/responses does not serve is refused by
// parameter; a message array with text parts is served.
func TestResponsesRefusals(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	if code, b := h.post(t, PathResponses, `{"model":"tiny","input":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":4}`); code != 200 ||
		!strings.Contains(string(b), `"object":"response"`) || !strings.Contains(string(b), `"output_text"`) {
		t.Fatalf("messages with parts: %d %s", code, b)
	}
	for _, tc := range []struct{ body, param string }{
		{`{"model":"tiny"}`, "input"},
		{`{"model":"tiny","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type"},
		{`{"model":"tiny","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id"},
		{`{"model":"tiny","input":"x","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"model":"tiny","input":"x","text":{"format":{"type":"csv"}}}`, "text.format.type"},
		{`{"model":"tiny","input":"x","text":{"format":{"type":"json_schema","name":"r","schema":{"type":"string","pattern":"(?!x)"}}}}`, "text.format.schema"},
		{`{"model":"tiny","input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{`{"model":"tiny","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content"},
		{`{"model":"tiny","input":"x","max_output_tokens":0}`, "max_output_tokens"},
		{`{"model":"tiny","input":"x","reasoning":{"effort":"low"}}`, ""},
	} {
		code, b := h.post(t, PathResponses, tc.body)
		if code != 400 || !strings.Contains(string(b), tc.param) {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.body, code, b, tc.param)
		}
	}
}
