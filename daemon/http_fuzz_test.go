package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/internal/daemon/peer"
)

// FuzzHTTP sends arbitrary HTTP requests through the whole handler (routing,
// authorisation, decoding, generation with the tiny model, the admin,
// bench and device routes) as a socket user without privileges and as a
// TCP key holder: no request panics, none gets a 500, and every error is
// an OpenAI-shaped JSON body. The daemon is never an administrator here:
// device binds and loads must not touch the fuzzing host.
func FuzzHTTP(f *testing.F) {
	srv, err := New(Config{ModelDirs: []string{modelDir}, Log: hclog.NewNullLogger(), Limits: Limits{MaxTokens: 4}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	if _, err := srv.LoadFile(context.Background(), tinyPath, api.LoadRequest{Name: tiny, MaxBatch: 2, Context: 64}); err != nil {
		f.Fatal(err)
	}
	post := func(path, body string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
			itoa(len(body)) + "\r\n\r\n" + body
	}
	for _, s := range []string{
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/models/tiny HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET " + api.PathStatus + " HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
		post("/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`),
		post("/v1/completions", `{"model":"tiny","prompt":"x","max_tokens":2,"logprobs":2,"n":2}`),
		post("/v1/responses", `{"model":"tiny","input":"Hi","max_output_tokens":2}`),
		post(PathTokenize, `{"content":"Hello"}`),
		post(PathDetokenize, `{"tokens":[1,2,3]}`),
		post(PathEmbeddings, `{"model":"tiny","input":["a","b"]}`),
		post(api.PathLoad, `{"path":"tiny.gguf","name":"x"}`),
		post(api.PathUnload, `{"name":"tiny"}`),
		post(api.PathBenchStorage, `{"path":"tiny.gguf","bs":[4096],"qd":[1],"bytes":65536}`),
		post(api.PathBenchPCIe, `{}`),
		post("/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required","max_tokens":3}`),
		post("/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"max_tokens":3}`),
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, key bool) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		pr := authz.Peer{Unix: true, Cred: peer.Cred{UID: 65534, GID: 65534, PID: 1}}
		if key {
			pr = authz.Peer{APIKey: true, Addr: "127.0.0.1:1"}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req.WithContext(WithPeer(ctx, pr)))
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("500 for %q: %s", raw, rec.Body.Bytes())
		}
		if rec.Code >= 400 && req.Method != http.MethodHead {
			var e struct {
				Error *struct{ Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Message == "" {
				t.Fatalf("%d without an OpenAI-shaped error for %q: %s", rec.Code, raw, rec.Body.Bytes())
			}
		}
		if rec.Code == http.StatusOK && strings.Contains(req.URL.Path, "devices") {
			t.Fatalf("a device route answered 200 to a non-administrator: %q", raw)
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
