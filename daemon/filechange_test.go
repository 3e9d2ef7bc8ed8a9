package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/synth"
)

// TestServedFileChanges changes a served model's file under the daemon in
// the ways a careless or hostile admin can: truncating it, copying a
// smaller file over it (same inode, O_TRUNC), rewriting its bytes in place
// and replacing it by rename. The daemon must not crash (weights used in
// place from a shared mapping die with SIGBUS past the new end of file),
// resident models keep answering from the snapshot they loaded, a streamed
// model's requests either answer or fail with a clear error, and the
// daemon keeps serving its other model.
func TestServedFileChanges(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	h := start(t, opts{cfg: Config{Links: pinnedLinks(), Log: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})}})
	changes := []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"truncate to 0", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncate to a page", func(t *testing.T, path string) {
			if err := os.Truncate(path, 4096); err != nil {
				t.Fatal(err)
			}
		}},
		{"cp smaller over it", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b[:len(b)/3], 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"rewrite in place", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, st.Size()/2)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range junk {
				junk[i] = byte(r.Uint32())
			}
			if _, err := f.WriteAt(junk, st.Size()-int64(len(junk))); err != nil {
				t.Fatal(err)
			}
		}},
		{"replace by rename", func(t *testing.T, path string) {
			tmp := path + ".new"
			if err := os.WriteFile(tmp, []byte("not a model"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	models := []struct {
		name     string
		write    func(t *testing.T, dir string) string
		tiers    string
		resident bool // answers from its load-time snapshot after any change
	}{
		{"gguf", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "m.gguf")
			if err := synth.Write(p, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
				t.Fatal(err)
			}
			return p
		}, "", true},
		{"pool", func(t *testing.T, dir string) string {
			p, _ := stackedPool(t, dir, 1)
			return p
		}, "", true},
		{"pool all-B", func(t *testing.T, dir string) string {
			p, _ := stackedPool(t, dir, 1)
			return p
		}, "all-B", true},
		{"pool all-C", func(t *testing.T, dir string) string {
			p, _ := stackedPool(t, dir, 1)
			return p
		}, "all-C", false},
	}
	const prompt, n = "The fastest way", 6
	want, _ := h.completion(t, tiny, prompt, n)
	k := 0
	for _, m := range models {
		for _, c := range changes {
			k++
			name := fmt.Sprintf("changed-%d", k)
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				path := m.write(t, t.TempDir())
				req := api.LoadRequest{Name: name, Tiers: m.tiers, MaxBatch: 2, Context: 256}
				if _, err := h.srv.LoadFile(context.Background(), path, req); err != nil {
					t.Fatal(err)
				}
				before, _ := h.completion(t, name, prompt, n)
				c.change(t, path)
				for range 2 {
					code, b := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":%d,"temperature":0}`, name, prompt, n))
					switch {
					case code == 200 && m.resident:
						var got struct{ Choices []struct{ Text string } }
						if err := json.Unmarshal(b, &got); err != nil || len(got.Choices) != 1 || got.Choices[0].Text != before {
							t.Fatalf("after the change: %s, want the text before it, %q", b, before)
						}
					case code == 200:
					case code >= 500 && strings.Contains(string(b), `"message"`):
						if m.resident {
							t.Fatalf("a resident model failed after its file changed: %d %s", code, b)
						}
						t.Logf("streamed model after the change: %d %s", code, b)
						if !strings.Contains(logs.String(), "request failed") {
							t.Fatalf("a failed request was not logged: %s", logs.String())
						}
					default:
						t.Fatalf("after the change: %d %s, want 200 or a 5xx error", code, b)
					}
				}
				if !m.resident && c.name != "replace by rename" {
					// Streamed: the failure ends the stream with an error
					// event, and is logged too.
					before := strings.Count(logs.String(), "request failed")
					code, b := h.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0,"stream":true}`, name, prompt, n))
					if code != 200 || !strings.Contains(string(b), `"error"`) {
						t.Fatalf("a stream after the change: %d %s; want an error event", code, b)
					}
					if strings.Count(logs.String(), "request failed") <= before {
						t.Fatalf("the stream's failure was not logged: %s", logs.String())
					}
				}
				if got, _ := h.completion(t, tiny, prompt, n); got != want {
					t.Fatalf("the other model after the change: %q, want %q", got, want)
				}
				if _, err := h.srv.Unload(name); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// syncBuffer is a log sink the handlers' goroutines may write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLoadsDuringTruncation loads a model over and over while another
// goroutine truncates and rewrites its file, then sends each loaded model
// a request. Loads that meet a truncation fail with an error; the ones
// that succeed answer from their copy. Over a shared mapping, most loads
// succeed over a file cut short and the first request dies with SIGBUS.
func TestLoadsDuringTruncation(t *testing.T) {
	t.Parallel()
	h := start(t, opts{cfg: Config{Links: pinnedLinks()}})
	dir := t.TempDir()
	full := filepath.Join(dir, "full.gguf")
	if err := synth.Write(full, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	const prompt, n = "The fastest way", 4
	want, _ := h.completion(t, tiny, prompt, n)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Truncate, then rewrite in place (same inode): a load sees
			// the whole file, a short one, or one being refilled.
			_ = os.Truncate(path, int64(len(b)/(2+i%3)))
			time.Sleep(time.Millisecond)
			if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
				_, _ = f.WriteAt(b, 0)
				f.Close()
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	loaded, failed := 0, 0
	for i := range 60 {
		name := fmt.Sprintf("trunc-%d", i)
		if _, err := h.srv.LoadFile(context.Background(), path, api.LoadRequest{Name: name, MaxBatch: 1, Context: 128}); err != nil {
			failed++
			continue
		}
		loaded++
		code, body := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":%d,"temperature":0}`, name, prompt, n))
		if code != 200 {
			t.Errorf("a loaded model failed a request: %d %s", code, body)
		}
		if _, err := h.srv.Unload(name); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
	t.Logf("60 loads during truncations: %d loaded and answered, %d refused", loaded, failed)
	if got, _ := h.completion(t, tiny, prompt, n); got != want {
		t.Fatalf("the other model afterwards: %q, want %q", got, want)
	}
}
