package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// TestStreamedReadFailure: a model streamed from tier C whose storage
// fails one read. Each non-streamed request that meets the fault (in its
// prompt pass or a decode pass) ends with a clear error naming the layer
// and the injected I/O error, not a hang or a truncated 200; the daemon
// keeps serving, and once the fault is gone the same request gives the
// resident model's text.
func TestStreamedReadFailure(t *testing.T) {
	t.Parallel()
	var faulty []*stream.FaultySource
	wrap := func(s tier.Source) tier.Source {
		f := stream.NewFaulty(s)
		faulty = append(faulty, f)
		return f
	}
	h := start(t, opts{cfg: Config{Links: pinnedLinks(), wrapSource: wrap}})
	pool, extents := stackedPool(t, modelDir, 1, 2, 3)
	for _, lr := range []api.LoadRequest{{Name: "resident"}, {Name: "allc", Tiers: "all-C"}} {
		lr.MaxBatch, lr.Context = 2, 256
		if _, err := h.srv.LoadFile(context.Background(), pool, lr); err != nil {
			t.Fatal(err)
		}
	}
	if len(faulty) != 1 {
		t.Fatalf("%d sources wrapped, want the all-C model's one", len(faulty))
	}
	f := faulty[0]
	const prompt, n = "The fastest way", 6
	want, toks := h.completion(t, "resident", prompt, n)
	if toks != n {
		t.Fatalf("resident: %d tokens for %q (%q), want %d: the decode case needs a decode pass", toks, prompt, want, n)
	}
	for _, tc := range []struct {
		name string
		nth  int64 // the failing read, counted from the request's first
	}{
		{"prompt pass", 2},
		{"decode pass", int64(len(extents)) + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.FailNth(tc.nth)
			defer f.Clear()
			for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
				body := fmt.Sprintf(`{"model":"allc","prompt":%q,"max_tokens":%d,"temperature":0}`, prompt, n)
				if strings.Contains(path, "chat") {
					body = fmt.Sprintf(`{"model":"allc","messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0}`, prompt, n)
				}
				code, b := h.post(t, path, body)
				if path == "/v1/chat/completions" {
					// The fault fired in the completion request; this
					// one must pass, on the same daemon.
					if code != 200 {
						t.Fatalf("%s after the fault: %d %s", path, code, b)
					}
					continue
				}
				var e struct {
					Error struct{ Message, Type string }
				}
				if code < 500 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, "layer") ||
					!strings.Contains(e.Error.Message, stream.ErrInjected.Error()) {
					t.Fatalf("%s with a failing read: %d %s; want a 5xx error naming the layer and the I/O error", path, code, b)
				}
				t.Logf("%s: %d %s", path, code, e.Error.Message)
			}
			if got, _ := h.completion(t, "allc", prompt, n); got != want {
				t.Errorf("after the fault: %q, resident %q", got, want)
			}
		})
	}
}
