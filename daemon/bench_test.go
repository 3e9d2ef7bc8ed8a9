package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/kernels/cudadrv"
	"github.com/strata-llm/strata/nvme"
)

// benchEvents splits an NDJSON bench response into its events.
func benchEvents(t *testing.T, body []byte) []api.BenchEvent {
	t.Helper()
	var evs []api.BenchEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev api.BenchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bench line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		t.Fatalf("no bench events in %q", body)
	}
	return evs
}

// benchServer is a device server holding the software controller at
// 0000:00:06.0 (namespace 1: 512-byte blocks, namespace 2: 4 KiB, 16 MiB
// each), with dir as its model directory.
func benchServer(t *testing.T, dir string) (*devServer, *nvmetest.Controller) {
	t.Helper()
	d := newDevServer(t, dir)
	var sc *nvmetest.Controller
	d.reg.open = softOpener(&sc)
	code, body := d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: "0000:00:06.0"})
	want(t, code, body, 200, "", nil)
	return d, sc
}

// TestBenchStorageNVMe runs the storage sweep on a held (software)
// controller for an unprivileged peer, through the endpoint.
func TestBenchStorageNVMe(t *testing.T) {
	t.Parallel()
	d, sc := benchServer(t, t.TempDir())
	before := sc.Count("read")
	req := api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 2, BlockSizes: []int{4096, 65536}, QueueDepths: []int{1, 4}, PointSeconds: 0.03}
	code, body := d.do(t, userPeer, "POST", api.PathBenchStorage, req)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	evs := benchEvents(t, body)
	if len(evs) != 5 {
		t.Fatalf("%d events, want 4 progress and a result: %s", len(evs), body)
	}
	for i, ev := range evs[:4] {
		if ev.Progress == nil || ev.Progress.Done != i+1 || ev.Progress.Total != 4 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	res := evs[4].Storage
	if res == nil || res.Via != "stratad" || res.Target.Kind != "nvme" || res.Target.Name != "0000:00:06.0/nsid 2" ||
		res.Target.Align != 4096 || len(res.Points) != 4 || len(res.Notes) != 2 || !strings.Contains(res.Notes[0], "controller counted") {
		t.Fatalf("result %+v", evs[4])
	}
	for _, p := range res.Points {
		l := p.LatencyUS
		if p.IOs == 0 || p.GBps <= 0 || !(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Fatalf("point %+v", p)
		}
	}
	if sc.Count("read") <= before {
		t.Fatal("the software controller saw no reads")
	}
}

func TestBenchStorageRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "data"), make([]byte, 1<<20), 0o644)
	d, _ := benchServer(t, dir)
	tests := []struct {
		name    string
		pr      authz.Peer
		body    any
		code    int
		errCode string
		text    string
	}{
		{"anonymous", anonPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1}, 403, "permission_denied", "permission denied"},
		{"not held", userPeer, api.BenchStorageRequest{BDF: "0000:00:04.0", NSID: 1}, 409, "device_not_bound", "bind it first"},
		{"no namespace", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 7}, 404, "namespace_not_found", "no namespace 7"},
		{"nothing named", userPeer, api.BenchStorageRequest{}, 400, "", "bdf and nsid"},
		{"both named", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1, Path: "data"}, 400, "", "not both"},
		{"block not a multiple of the LBA size", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 2, BlockSizes: []int{512}}, 400, "", "alignment"},
		{"too long", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1, PointSeconds: 10}, 400, "", "narrow the sweep"},
		{"too deep", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1, QueueDepths: []int{4096}}, 400, "", "queue depth 4096"},
		{"too much memory", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1, BlockSizes: []int{64 << 20}, QueueDepths: []int{32}}, 400, "", "1 GiB"},
		{"outside the model directories", userPeer, api.BenchStorageRequest{Path: "/etc/passwd"}, 403, "path_not_allowed", "model directories"},
		{"missing file", userPeer, api.BenchStorageRequest{Path: "nope"}, 404, "file_not_found", "nope"},
		{"unknown field", userPeer, `{"bdf":"0000:00:06.0","nsid":1,"blocks":[4096]}`, 400, "", "unknown field"},
		// A peer outside the admin group gets a smaller bound than the
		// admin's 1 GiB and 600 s: a storage sweep runs as root.
		{"user: too long for a user", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1, PointSeconds: 1}, 403, "bench_limit", "admin group"},
		{"user: too many buffers for a user", userPeer, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 1, BlockSizes: []int{8 << 20}, QueueDepths: []int{32}}, 403, "bench_limit", "128 MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.do(t, tc.pr, "POST", api.PathBenchStorage, tc.body)
			want(t, code, body, tc.code, tc.errCode, nil)
			if !strings.Contains(string(body), tc.text) {
				t.Fatalf("error does not mention %q: %s", tc.text, body)
			}
		})
	}
	// One bench at a time.
	release, err := d.srv.benchStart()
	if err != nil {
		t.Fatal(err)
	}
	code, body := d.do(t, userPeer, "POST", api.PathBenchStorage, api.BenchStorageRequest{Path: "data"})
	if code != http.StatusTooManyRequests {
		t.Fatalf("status %d: %s", code, body)
	}
	checkError(t, body, "rate_limit_error", "bench_busy")
	release()
	// A file in the model directory, read by the daemon.
	code, body = d.do(t, userPeer, "POST", api.PathBenchStorage, api.BenchStorageRequest{Path: "data", BlockSizes: []int{4096}, QueueDepths: []int{2}, PointSeconds: 0.02})
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	evs := benchEvents(t, body)
	res := evs[len(evs)-1].Storage
	if res == nil || res.Target.Kind != "file" || res.Target.Name != filepath.Join(dir, "data") || len(res.Points) != 1 || res.Points[0].IOs == 0 {
		t.Fatalf("file bench %s", body)
	}
}

// TestBenchStorageLimits: the admin's bounds and a user's, and the host
// memory budget every sweep's buffers must fit (the budget models get by
// default: MemAvailable less the reserve).
func TestBenchStorageLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  api.BenchStorageRequest
		lim  benchLimits
		code int // 0: accepted
	}{
		{"default sweep, user", api.BenchStorageRequest{}, benchUserLimits, 0},
		{"default sweep, admin", api.BenchStorageRequest{}, benchAdminLimits, 0},
		{"long sweep, user", api.BenchStorageRequest{PointSeconds: 5}, benchUserLimits, 403},
		{"long sweep, admin", api.BenchStorageRequest{PointSeconds: 5}, benchAdminLimits, 0},
		{"512 MiB of buffers, user", api.BenchStorageRequest{BlockSizes: []int{16 << 20}, QueueDepths: []int{32}}, benchUserLimits, 403},
		{"512 MiB of buffers, admin", api.BenchStorageRequest{BlockSizes: []int{16 << 20}, QueueDepths: []int{32}}, benchAdminLimits, 0},
		{"2 GiB of buffers, admin", api.BenchStorageRequest{BlockSizes: []int{64 << 20}, QueueDepths: []int{32}}, benchAdminLimits, 400},
	} {
		_, err := storageOptions(tc.req, tc.lim)
		code := 0
		if err != nil {
			code = openai.AsError(err).Status
		}
		if code != tc.code {
			t.Errorf("%s: %v, want status %d", tc.name, err, tc.code)
		}
	}

	d, _ := benchServer(t, t.TempDir())
	d.srv.benchMem = func() (tier.MemInfo, error) {
		// 100 MiB of budget: 1.1 GiB available less the 1 GiB reserve.
		return tier.MemInfo{Total: 4 << 30, Available: 1<<30 + 100<<20}, nil
	}
	for _, pr := range []authz.Peer{userPeer, rootPeer} {
		code, body := d.do(t, pr, "POST", api.PathBenchStorage, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 2, BlockSizes: []int{4 << 20}, QueueDepths: []int{32}, PointSeconds: 0.02})
		want(t, code, body, 503, "bench_memory", nil)
		if !strings.Contains(string(body), "host memory budget") {
			t.Fatalf("%s: %s", pr, body)
		}
		code, body = d.do(t, pr, "POST", api.PathBenchStorage, api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 2, BlockSizes: []int{4096}, QueueDepths: []int{2}, PointSeconds: 0.02})
		if code != 200 {
			t.Fatalf("%s: a small sweep within the budget: %d %s", pr, code, body)
		}
	}
}

// TestBenchStorageClient drives the endpoint through the client over a
// real connection: progress arrives while the sweep runs, and a device
// error after the response started reaches the client as an API error
// with the status it would have had.
func TestBenchStorageClient(t *testing.T) {
	t.Parallel()
	d, sc := benchServer(t, t.TempDir())
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.srv.Handler().ServeHTTP(w, r.WithContext(WithPeer(r.Context(), userPeer)))
	}))
	defer hs.Close()
	c := client.New(hs.URL, "")
	var seen []bench.Progress
	req := api.BenchStorageRequest{BDF: "0000:00:06.0", NSID: 2, BlockSizes: []int{4096, 8192}, QueueDepths: []int{2}, PointSeconds: 0.02}
	res, err := c.BenchStorage(context.Background(), req, func(p bench.Progress) { seen = append(seen, p) })
	if err != nil || len(seen) != 2 || len(res.Points) != 2 {
		t.Fatalf("progress %+v, result %+v, err %v", seen, res, err)
	}
	// After the first point, every read of namespace 2 fails. The points
	// last long enough that the injection, made as the first point's
	// progress arrives, lands during the second even on a loaded machine.
	seen = nil
	req.PointSeconds = 1
	_, err = c.BenchStorage(context.Background(), req, func(p bench.Progress) {
		seen = append(seen, p)
		sc.InjectError(2, nvme.OpRead, 0, 4096, nvme.StatusUnrecoveredRead)
	})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || ae.Code == nil || *ae.Code != "device_io_error" || len(seen) != 1 {
		t.Fatalf("err %v (%+v), progress %+v", err, ae, seen)
	}
}

// TestBenchNoGPU: without CUDA the PCIe bench is refused with 503
// cuda_unavailable and the e2e bench lists the routes unmeasured.
func TestBenchNoGPU(t *testing.T) {
	t.Parallel()
	if err := cudadrv.Load(); err == nil {
		if n, _ := cudadrv.DeviceCount(); n > 0 {
			t.Skip("a GPU is present")
		}
	}
	dir := t.TempDir()
	d, _ := benchServer(t, dir)
	code, body := d.do(t, userPeer, "POST", api.PathBenchPCIe, api.BenchPCIeRequest{Sizes: []int64{1 << 20}})
	want(t, code, body, 503, "cuda_unavailable", nil)
	if !strings.Contains(string(body), "CUDA unavailable") {
		t.Fatalf("%s", body)
	}
	code, body = d.do(t, userPeer, "POST", api.PathBenchPCIe, api.BenchPCIeRequest{Sizes: []int64{-1}})
	want(t, code, body, 400, "", nil)

	code, body = d.do(t, userPeer, "POST", api.PathBenchE2E, api.BenchE2ERequest{BDF: "0000:00:06.0", NSID: 1})
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	evs := benchEvents(t, body)
	res := evs[len(evs)-1].E2E
	if res == nil || res.Via != "stratad" || res.HostRoute == "" || len(res.Routes) != 3 {
		t.Fatalf("%s", body)
	}
	nv := res.Routes[1]
	if nv.Kind != bench.RouteNVMePinned || nv.Source != "0000:00:06.0/nsid 1" || nv.Measured || !strings.Contains(nv.Reason, "CUDA unavailable") {
		t.Fatalf("nvme route %+v", nv)
	}
	for _, r := range res.Routes {
		if r.Measured {
			t.Fatalf("measured without a GPU: %+v", r)
		}
	}
	// The file route names the file, not the descriptor the bench read it
	// through.
	if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body = d.do(t, userPeer, "POST", api.PathBenchE2E, api.BenchE2ERequest{Path: "data"})
	if code != 200 || strings.Contains(string(body), "/proc/self/fd") {
		t.Fatalf("status %d: %s", code, body)
	}
	evs = benchEvents(t, body)
	if res = evs[len(evs)-1].E2E; res == nil || len(res.Routes) == 0 || res.Routes[0].Source != filepath.Join(dir, "data") {
		t.Fatalf("file route %s", body)
	}

	// A user's route is bounded (4 GiB, 128 MiB of staging), an admin's is
	// not, and every route's staging fits the host memory budget.
	for _, tc := range []struct {
		pr      authz.Peer
		req     api.BenchE2ERequest
		code    int
		errCode string
	}{
		{userPeer, api.BenchE2ERequest{BDF: "0000:00:06.0", NSID: 1, Bytes: 8 << 30}, 403, "bench_limit"},
		{userPeer, api.BenchE2ERequest{BDF: "0000:00:06.0", NSID: 1, Chunk: 64 << 20, Slots: 4}, 403, "bench_limit"},
		{rootPeer, api.BenchE2ERequest{BDF: "0000:00:06.0", NSID: 1, Chunk: 64 << 20, Slots: 4}, 200, ""},
	} {
		code, body := d.do(t, tc.pr, "POST", api.PathBenchE2E, tc.req)
		want(t, code, body, tc.code, tc.errCode, nil)
	}
	d.srv.benchMem = func() (tier.MemInfo, error) {
		return tier.MemInfo{Total: 4 << 30, Available: 1<<30 + 100<<20}, nil
	}
	code, body = d.do(t, rootPeer, "POST", api.PathBenchE2E, api.BenchE2ERequest{BDF: "0000:00:06.0", NSID: 1, Chunk: 64 << 20, Slots: 4})
	want(t, code, body, 503, "bench_memory", nil)
	code, body = d.do(t, rootPeer, "POST", api.PathBenchPCIe, api.BenchPCIeRequest{Sizes: []int64{1 << 30}})
	want(t, code, body, 503, "bench_memory", nil)
}
