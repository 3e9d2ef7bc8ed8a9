package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/internal/buildinfo"
)

// TestSpeculativeModel: a model loaded with a draft model (here the same
// network, whose guesses are all right) answers a temperature-0 request
// with the text the plain model gives, counts its guesses in the status
// and /metrics, and a request with "speculative": false drafts nothing.
// A draft outside the model directories is refused. A model loaded with
// skip_layers says which it leaves out; a layer it does not have fails
// the load.
func TestSpeculativeModel(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the admin API needs uid 0 or the admin group; run as root (CI does) to exercise it in-process")
	}
	h := start(t, opts{})
	ctx := context.Background()
	if _, err := h.c.Load(ctx, api.LoadRequest{Path: "tiny.gguf", Name: "spec", Draft: "tiny.gguf"}); err != nil {
		t.Fatal(err)
	}
	body := func(model string, spec string) string {
		return `{"model":"` + model + `","prompt":"guess and verify","max_tokens":24,"temperature":0` + spec + `}`
	}
	text := func(model, spec string) string {
		t.Helper()
		code, b := h.post(t, "/v1/completions", body(model, spec))
		if code != 200 {
			t.Fatalf("%s: %d %s", model, code, b)
		}
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %v %s", model, err, b)
		}
		return r.Choices[0].Text
	}
	counters := func() api.Counters {
		t.Helper()
		st, err := h.c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Models {
			if m.Name == "spec" {
				return m.Counters
			}
		}
		t.Fatal("model spec not in the status")
		return api.Counters{}
	}
	plain := text(tiny, "")
	if got := text("spec", ""); got != plain {
		t.Fatalf("speculative text %q, plain %q", got, plain)
	}
	c := counters()
	if c.Drafted == 0 || c.Accepted != c.Drafted || c.VerifyPasses == 0 {
		t.Fatalf("counters after a speculative request: %+v", c)
	}
	if got := text("spec", `,"speculative":false`); got != plain {
		t.Fatalf("plain request on the speculative model: %q, want %q", got, plain)
	}
	if c2 := counters(); c2.Drafted != c.Drafted {
		t.Fatalf("a request with speculative false drafted %d tokens", c2.Drafted-c.Drafted)
	}
	if code, b := h.get(t, "/metrics"); code != 200 || !strings.Contains(string(b), `strata_speculative_drafted_tokens{model="spec"}`) {
		t.Fatalf("metrics %d lack the speculation series:\n%s", code, b)
	}
	// Layer skip, per model: the status names the layers left out.
	st, err := h.c.Load(ctx, api.LoadRequest{Path: "tiny.gguf", Name: "skipping", SkipLayers: "1,"})
	if err != nil || len(st.Skipped) != 1 || st.Skipped[0] != 1 {
		t.Fatalf("load with skip_layers: %+v, %v", st.Skipped, err)
	}
	if code, b := h.post(t, "/v1/completions", body("skipping", "")); code != 200 {
		t.Fatalf("skipping model: %d %s", code, b)
	}
	for _, tc := range []struct {
		req    api.LoadRequest
		status int
	}{
		{api.LoadRequest{Path: "tiny.gguf", Name: "s1", SkipLayers: "9,"}, 422},
		{api.LoadRequest{Path: "tiny.gguf", Name: "d1", Draft: "/etc/passwd"}, 403},
		{api.LoadRequest{Path: "tiny.gguf", Name: "d2", Draft: "missing.gguf"}, 404},
	} {
		_, err := h.c.Load(ctx, tc.req)
		ae, ok := err.(*client.APIError)
		if !ok || ae.Status != tc.status {
			t.Fatalf("%+v: %v, want %d", tc.req, err, tc.status)
		}
	}
}

// TestSamplingFieldsHonoured: top_k 1 leaves one candidate, so every seed
// gives the same text at temperature 1; without it the seeds differ.
func TestSamplingFieldsHonoured(t *testing.T) {
	h := start(t, opts{})
	text := func(extra string, seed int) string {
		t.Helper()
		code, b := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"tiny","prompt":"sample me","max_tokens":16,"temperature":1,"seed":%d%s}`, seed, extra))
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%v %s", err, b)
		}
		return r.Choices[0].Text
	}
	seen, free := map[string]bool{}, map[string]bool{}
	for seed := 1; seed <= 3; seed++ {
		seen[text(`,"top_k":1`, seed)] = true
		free[text("", seed)] = true
	}
	if len(seen) != 1 {
		t.Errorf("top_k 1 gave %d texts for 3 seeds", len(seen))
	}
	if len(free) == 1 {
		t.Errorf("without top_k, 3 seeds gave one text: the check cannot tell")
	}
	if code, b := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x","mirostat":2}`); code != 400 || !strings.Contains(string(b), "mirostat") {
		t.Errorf("unknown field: %d %s", code, b)
	}
}

// TestBuildInfo: the build's one-line form names the version and Go, and
// /metrics carries strata_build_info.
func TestBuildInfo(t *testing.T) {
	b := buildinfo.Read()
	if s := b.String(); !strings.HasPrefix(s, buildinfo.Version+" (") || !strings.Contains(s, b.GoVersion) {
		t.Fatalf("build %q", s)
	}
	h := start(t, opts{})
	if code, m := h.get(t, "/metrics"); code != 200 || !strings.Contains(string(m), `strata_build_info{go_version="`+b.GoVersion+`"`) {
		t.Fatalf("metrics %d lack strata_build_info:\n%.2000s", code, m)
	}
}

// TestMetricsSeries: after a request, /metrics has the request-duration,
// inter-token, completion-token and KV-cache series and the Go and process
// collectors.
func TestMetricsSeries(t *testing.T) {
	h := start(t, opts{})
	if code, b := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"count the metrics","max_tokens":8,"temperature":0}`); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	code, m := h.get(t, "/metrics")
	if code != 200 {
		t.Fatal(code)
	}
	for _, want := range []string{
		`strata_request_duration_seconds_bucket{endpoint="/v1/completions"`,
		`strata_inter_token_seconds_count{model="tiny"}`,
		`strata_completion_tokens_sum{model="tiny"} 8`,
		`strata_kv_cache_bytes{model="tiny"}`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
