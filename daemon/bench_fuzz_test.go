package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/internal/nvmetest"
)

// benchRoutes' paths, in the order FuzzBenchRequests picks them.
var benchPaths = []string{api.PathBenchStorage, api.PathBenchPCIe, api.PathBenchE2E}

// FuzzBenchRequests sends arbitrary bodies to the bench routes, as an
// administrator and as an ordinary peer, against a held software
// controller and a file in the model directory. Each request's client has
// already gone (its context is cancelled), so a request the bounds accept
// ends at once instead of running its sweep: the target fuzzes the
// decoding and the bounds (points, seconds, buffers, the memory budget,
// the peer's limits), where the numbers are the client's. Nothing answers
// 500, every error is an OpenAI-shaped JSON body, and a cancelled bench
// returns within seconds.
func FuzzBenchRequests(f *testing.F) {
	for i, body := range []string{
		`{"bdf":"0000:00:06.0","nsid":2,"block_sizes":[4096],"queue_depths":[1],"point_seconds":0.01}`,
		`{"sizes":[65536],"point_bytes":65536,"directions":["H2D"],"memory":["pinned"]}`,
		`{"path":"disk.bin","bytes":65536,"chunk":4096,"slots":1}`,
		`{"path":"disk.bin","block_sizes":[1073741824],"queue_depths":[1024],"pattern":"rand"}`,
		`{"sizes":[-1,1e18],"gpu":-1}`,
		`{"bdf":"0000:00:06.0","nsid":1,"bytes":-1,"chunk":0,"slots":17}`,
		`{"point_seconds":1e308,"block_sizes":[4096,8192],"queue_depths":[0]}`,
		``,
	} {
		f.Add(uint8(i), i%2 == 0, []byte(body))
	}
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "disk.bin"), make([]byte, 64<<10), 0o600); err != nil {
		f.Fatal(err)
	}
	d := newDevServer(f, dir)
	var sc *nvmetest.Controller
	d.reg.open = softOpener(&sc)
	// 2 GiB of budget, whatever the fuzzing host has.
	d.srv.benchMem = func() (tier.MemInfo, error) { return tier.MemInfo{Total: 8 << 30, Available: 3 << 30}, nil }
	serve := func(pr authz.Peer, path string, body []byte, cancelled bool) (int, []byte) {
		ctx, cancel := context.WithCancel(WithPeer(context.Background(), pr))
		if cancelled {
			cancel()
		}
		defer cancel()
		req := httptest.NewRequest(http.MethodPost, "http://stratad"+path, bytes.NewReader(body)).WithContext(ctx)
		rec := httptest.NewRecorder()
		d.srv.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes()
	}
	if code, b := serve(rootPeer, api.PathDeviceBind, []byte(`{"bdf":"0000:00:06.0"}`), false); code != http.StatusOK {
		f.Fatalf("bind: %d %s", code, b)
	}
	f.Fuzz(func(t *testing.T, route uint8, admin bool, body []byte) {
		path := benchPaths[int(route)%len(benchPaths)]
		pr := userPeer
		if admin {
			pr = rootPeer
		}
		start := time.Now()
		code, b := serve(pr, path, body, true)
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("%s %q: a cancelled bench took %v", path, body, took)
		}
		if code == http.StatusInternalServerError {
			t.Fatalf("%s %q: 500 %s", path, body, b)
		}
		if code >= 400 {
			var e struct {
				Error *struct{ Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Message == "" {
				t.Fatalf("%s %q: %d without an OpenAI-shaped error: %s", path, body, code, b)
			}
		}
	})
}
