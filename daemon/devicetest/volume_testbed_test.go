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
//   - a read parked at a blkdebug breakpoint (testbed.Monitor) times out,
//     the driver asks to abort it, and the request succeeds once QEMU lets
//     it complete; a controller reset (strata devices reset) while reads
//     are in flight leaves the request right too;
//   - the faults leave no command in flight and no DMA mapping behind, and
//     unloading the model unmaps its staging;
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
	// post may run on another goroutine: a transport error is its answer.
	post := func(model string, max int) (int, string) {
		body, _ := json.Marshal(map[string]any{"model": model, "prompt": gd.Prompt, "max_tokens": max, "temperature": 0})
		resp, err := hc.Post("http://stratad/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	complete := func(model string, max int) (int, string) {
		code, body := post(model, max)
		if code == 0 {
			t.Fatal(body)
		}
		return code, body
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
	// The requests through the API below (one token each: a pass costs
	// seconds here) must give the same text.
	e, _ := srv.Engine("vol")
	stats := func() api.ControllerStats {
		ds, err := c.DeviceStats(ctx, m.NVMe)
		if err != nil {
			t.Fatal(err)
		}
		return ds.Controllers[0]
	}
	idle := func(cs api.ControllerStats) {
		busy := 0
		for _, q := range cs.Queues {
			busy += q.Inflight
		}
		if busy != 0 {
			t.Fatalf("%d commands in flight with no request running", busy)
		}
	}
	cs := stats()
	t.Logf("controller: reads %d (%d B), errors %d, queues %+v, DMA %d mappings (%d B)", cs.Reads, cs.ReadBytes, cs.Errors,
		cs.Queues, cs.DMAMappings, cs.DMABytes)
	if cs.Errors == 0 || cs.ReadBytes == 0 || cs.DMAMappings == 0 {
		t.Fatalf("controller stats %+v: want the reads, the media error and the DMA mappings counted", cs)
	}
	idle(cs)
	before := cs
	oneToken := e.Tok.Decode(vol[:1]) // the golden's first token
	async := func() <-chan [2]string {
		res := make(chan [2]string, 1)
		go func() {
			code, body := post("vol", 1)
			res <- [2]string{fmt.Sprint(code), body}
		}()
		return res
	}
	wantText := func(what string, r [2]string) {
		var cv struct{ Choices []struct{ Text string } }
		json.Unmarshal([]byte(r[1]), &cv)
		if r[0] != "200" || len(cv.Choices) != 1 || cv.Choices[0].Text != oneToken {
			t.Fatalf("%s: %s %s; want the text %q", what, r[0], r[1], oneToken)
		}
	}

	// A command that times out. QEMU's controller never aborts one (its
	// Abort answers "not aborted"), so the read parked at a blkdebug
	// breakpoint times out, the driver asks to abort it, and once the
	// breakpoint lets it go it completes with its data: the request
	// succeeds. The driver would reset the controller one timeout after the
	// abort, but QEMU cannot delete a queue while a read of it is parked
	// (its main loop waits in blk_aio_cancel for good), so the test lets it
	// go first; the timeout that fails is the software controller's case
	// (daemon's TestVolumeModelFaults).
	const tag = "strata-timeout"
	if out, err := testbed.Monitor(fmt.Sprintf(`qemu-io %s "break read_aio %s"`, m.Drive, tag), 30*time.Second); err != nil || out != "" {
		t.Fatalf("parking the next read of %s: %q %v", m.Drive, out, err)
	}
	parked := true
	resume := func() {
		if out, err := testbed.Monitor(fmt.Sprintf(`qemu-io %s "resume %s"`, m.Drive, tag), 30*time.Second); err != nil || out != "" {
			t.Errorf("letting the parked read go: %q %v", out, err)
		}
		parked = false
	}
	defer func() {
		if parked {
			resume()
		}
	}()
	t1 := time.Now()
	res := async()
	for deadline := time.Now().Add(90 * time.Second); ; {
		cs = stats()
		if cs.Timeouts > before.Timeouts && cs.Aborts > before.Aborts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no timeout and abort counted 90 s after a read was parked: %+v", cs)
		}
		select {
		case r := <-res:
			t.Fatalf("the request over the parked read ended (%s %s) before a timeout was counted", r[0], r[1])
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("timeout: the parked read timed out and its abort was asked for after %v", time.Since(t1).Round(time.Millisecond))
	resume()
	wantText("request over the timed-out read", <-res)
	cs = stats()
	if cs.Timeouts != before.Timeouts+1 || cs.Resets != before.Resets || cs.Errors != before.Errors {
		t.Fatalf("after the timed-out read: %+v; want one timeout, no reset and no error more than %+v", cs, before)
	}
	idle(cs)

	// A controller reset in the middle of a stream: `strata devices reset`
	// once a completion's tier-C reads are in flight (the drive's reads are
	// throttled, so they stay in flight a while); the driver submits them
	// again on the recreated queues and the request succeeds. The reads
	// are in flight only part of a pass (the layers' compute is the rest,
	// and QEMU's throttle lets a burst through after an idle spell), so a
	// request whose reads all finish between two looks is checked and
	// another one is sent.
	var rr api.ResetResponse
	// resetInFlight sends a request and resets the controller once one of
	// its commands is in flight; it answers false (the request checked) if
	// the request ends first.
	resetInFlight := func(try int) bool {
		res = async()
		for {
			cs = stats()
			n := 0
			for _, q := range cs.Queues {
				n += q.Inflight
			}
			if n > 0 {
				var err error
				if rr, err = c.ResetDevice(ctx, m.NVMe); err != nil {
					t.Fatalf("reset with %d commands in flight: %v", n, err)
				}
				t.Logf("reset with %d commands in flight (request %d): %+v", n, try, rr)
				return true
			}
			select {
			case r := <-res:
				wantText(fmt.Sprintf("request %d, which ended before a command was seen in flight", try), r)
				t.Logf("request %d ended before a command was seen in flight; sending another", try)
				return false
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	const attempts = 8
	for try := 1; !resetInFlight(try); try++ {
		if try == attempts {
			t.Fatalf("%d requests ended before a command of theirs was seen in flight", try)
		}
	}
	wantText("request across the reset", <-res)
	cs = stats()
	if cs.Resets != before.Resets+1 || cs.Errors != before.Errors {
		t.Fatalf("after the reset: %+v; want one reset and no error more than %+v", cs, before)
	}
	idle(cs)
	// Nothing leaked: what is mapped for DMA (queues, bounce buffers, the
	// model's staging) is what it was before the faults.
	if cs.DMAMappings != before.DMAMappings || cs.DMABytes != before.DMABytes {
		t.Fatalf("DMA after the faults: %d mappings (%d B), before: %d (%d B)", cs.DMAMappings, cs.DMABytes, before.DMAMappings, before.DMABytes)
	}
	t.Logf("after the faults: timeouts %d, aborts %d, resets %d, resubmitted %d, DMA %d mappings (%d B)",
		cs.Timeouts, cs.Aborts, cs.Resets, cs.Resubmitted, cs.DMAMappings, cs.DMABytes)
	if _, err := c.Unbind(ctx, m.NVMe, ""); err == nil || !strings.Contains(err.Error(), ref) {
		t.Fatalf("unbind with the model loaded: %v; want a refusal naming %s", err, ref)
	}
	if _, err := c.Unload(ctx, "vol"); err != nil {
		t.Fatal(err)
	}
	// The model's staging is unmapped with it.
	if cs = stats(); cs.DMABytes >= before.DMABytes {
		t.Fatalf("DMA after the unload: %d mappings (%d B), with the model: %d (%d B)", cs.DMAMappings, cs.DMABytes, before.DMAMappings, before.DMABytes)
	}
	t.Logf("after the unload: DMA %d mappings (%d B)", cs.DMAMappings, cs.DMABytes)
}

func pinnedLinks() *tier.Links {
	l := tier.DefaultLinks()
	return &l
}
