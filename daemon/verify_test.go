package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/prefab"
)

// A streamed pool extent corrupted after the daemon has served from it is
// caught on the next read (the default verifies every read), the request
// fails with a 5xx that names the layer but no server path, the failure
// is logged with layer and extent, and once the bytes are repaired the
// model serves the same text again.
func TestCorruptStreamedExtent(t *testing.T) {
	t.Parallel()
	lb := &logBuf{}
	h := start(t, opts{cfg: Config{Links: pinnedLinks(), Log: bufLogger(lb)}})
	dir := t.TempDir()
	pool, _ := stackedPool(t, dir, 1, 2)
	if _, err := h.srv.LoadFile(context.Background(), pool, api.LoadRequest{Name: "allc", Tiers: "all-C", MaxBatch: 2, Context: 256}); err != nil {
		t.Fatal(err)
	}
	const prompt, n = "The fastest way", 4
	want, _ := h.completion(t, "allc", prompt, n)

	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	e := p.Extent(1)
	p.Close()
	f, err := os.OpenFile(pool, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	off := e.Offset + 100
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	flip := func() {
		b[0] ^= 0x5a
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	flip()
	code, body := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"allc","prompt":%q,"max_tokens":%d,"temperature":0}`, prompt, n))
	var resp struct{ Error struct{ Message string } }
	if code < 500 || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("a corrupt extent after a good pass was served: %d %s", code, body)
	}
	if msg := resp.Error.Message; !strings.Contains(msg, "layer 1") || !strings.Contains(msg, "checksum") ||
		strings.Contains(msg, dir) || strings.Contains(msg, "/proc") {
		t.Errorf("client sees %q: want the layer and the checksum named, no server path", msg)
	}
	logs := lb.String()
	for _, s := range []string{"streamed extent failed its checksum", "layer=1", fmt.Sprintf("offset=%d", e.Offset)} {
		if !strings.Contains(logs, s) {
			t.Errorf("log lacks %q:\n%s", s, logs)
		}
	}
	flip()
	if got, _ := h.completion(t, "allc", prompt, n); got != want {
		t.Errorf("after repair: %q, before %q", got, want)
	}
}
