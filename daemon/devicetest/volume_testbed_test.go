package devicetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/gocodetest"
	"github.com/strata-llm/strata/setup/testbed"
)

// TestTestbedGocodeVolume serves the real gocode-29m from an emulated NVMe
// namespace through the userspace driver, as `stratad --model
// nvme://BDF/1/gocode.pool` does (the daemon binds the controller itself),
// on the CPU backend with a memory budget that leaves layers on tier C:
//
//   - the first request meets QEMU's injected media error on a tier-C
//     layer and fails with an error naming the layer, its extent and the
//     NVMe status, while the daemon keeps serving;
//   - the next requests give the golden greedy tokens of the model, and the
//     same text as the same pool served from its file;
//   - after the model is unloaded and the controller closed, nothing the
//     driver mapped is left (queues idle, controller unbound cleanly).
func TestTestbedGocodeVolume(t *testing.T) {
	g := testbed.Require(t)
	m := g.Models
	if m.NVMe == "" {
		t.Skip("the host put no model volume in the guest (no gocode-29m on the host)")
	}
	ctx := context.Background()
	srv, err := daemon.New(daemon.Config{ModelDirs: []string{filepath.Dir(m.Pool)}, Links: pinnedLinks(),
		Log: hclog.New(&hclog.LoggerOptions{Name: "stratad", Level: hclog.Info, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, []net.Listener{l}, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := srv.CloseDevices(); err != nil {
			t.Errorf("CloseDevices: %v", err)
		}
	}()
	c := client.New(sock, "")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}

	// The budget the plain-test version uses: 8 of the 16 layers on tier C.
	req := api.LoadRequest{MaxBatch: 1, Context: 256, Budgets: api.Budgets{RAMBytes: 88 << 20}}
	ref := fmt.Sprintf("%s%s/1/%s", daemon.VolumeScheme, m.NVMe, m.Extent)
	req.Name = "vol"
	t0 := time.Now()
	st, err := srv.LoadVolume(ctx, ref, req, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %s in %v: plan %d/%d/%d on A/B/C, route %+v", ref, time.Since(t0).Round(time.Millisecond),
		st.Plan.Tiers[0].Layers, st.Plan.Tiers[1].Layers, st.Plan.Tiers[2].Layers, st.TierCRoute)
	if st.TierCRoute == nil || st.TierCRoute.Route != "nvme-pinned" || st.Plan.Layers[m.FaultLayer] != "C" {
		t.Fatalf("route %+v, layer %d on %s: want it on tier C, read by the driver", st.TierCRoute, m.FaultLayer, st.Plan.Layers[m.FaultLayer])
	}
	req.Name = "file"
	if _, err := srv.LoadFile(ctx, m.Pool, req); err != nil {
		t.Fatal(err)
	}

	goldens := gocodetest.GoldensFile(t, m.Golden)
	gd := goldens[0]
	// Few tokens: a pass of this model takes seconds under TCG. The plain
	// go test version (daemon's TestVolumeGocode) checks every golden.
	const n = 4
	gd.Greedy = gd.Greedy[:n]
	complete := func(model string, max int) (int, string) {
		body, _ := json.Marshal(map[string]any{"model": model, "prompt": gd.Prompt, "max_tokens": max, "temperature": 0})
		resp, err := hc.Post("http://stratad/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The first read of the fault layer's extent fails (QEMU blkdebug, once).
	code, body := complete("vol", 1)
	want := []string{fmt.Sprintf("layer %d (tier C, extent", m.FaultLayer), "nvme: read nsid 1", "sct "}
	for _, s := range want {
		if code < 500 || !strings.Contains(body, s) {
			t.Fatalf("request over the media error: %d %s; want a 5xx error naming %q", code, body, s)
		}
	}
	t.Logf("request over the media error: %d %s", code, body)

	// The daemon keeps serving: the golden tokens, from the volume and
	// from the file.
	var vol []int32
	for _, name := range []string{"vol", "file"} {
		e, err := srv.Engine(name)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		got, err := gocodetest.Greedy(ctx, e.Model, gd.Prompt, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d greedy tokens in %v: %v", name, n, time.Since(t1).Round(time.Millisecond), got)
		gocodetest.Check(t, name, 0, gd, got)
		if name == "vol" {
			vol = got
		}
	}
	// And a request through the API gives the same text (its first two
	// tokens: each pass costs seconds here).
	e, _ := srv.Engine("vol")
	codeV, textV := complete("vol", 2)
	var cv struct{ Choices []struct{ Text string } }
	json.Unmarshal([]byte(textV), &cv)
	if codeV != 200 || len(cv.Choices) != 1 || cv.Choices[0].Text != e.Tok.Decode(vol[:2]) {
		t.Fatalf("completion after the fault: %d %s; want the text of %v (%q)", codeV, textV, vol[:2], e.Tok.Decode(vol[:2]))
	}
	ds, err := c.DeviceStats(ctx, m.NVMe)
	if err != nil {
		t.Fatal(err)
	}
	cs := ds.Controllers[0]
	t.Logf("controller: reads %d (%d B), errors %d, queues %+v", cs.Reads, cs.ReadBytes, cs.Errors, cs.Queues)
	if cs.Errors == 0 || cs.ReadBytes == 0 {
		t.Fatalf("controller stats %+v: want the reads and the media error counted", cs)
	}
	busy := 0
	for _, q := range cs.Queues {
		busy += q.Inflight
	}
	if busy != 0 {
		t.Fatalf("%d commands in flight with no request running", busy)
	}
	if _, err := c.Unbind(ctx, m.NVMe, ""); err == nil || !strings.Contains(err.Error(), ref) {
		t.Fatalf("unbind with the model loaded: %v; want a refusal naming %s", err, ref)
	}
	if _, err := c.Unload(ctx, "vol"); err != nil {
		t.Fatal(err)
	}
}

func pinnedLinks() *tier.Links {
	l := tier.DefaultLinks()
	return &l
}
