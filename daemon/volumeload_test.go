package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/gocodetest"
	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/devices"
	"github.com/strata-llm/strata/nvme/volume"
)

// volBDF is the fake host's controller already on vfio-pci.
const volBDF = "0000:00:06.0"

// volumeHarness is a daemon whose device registry opens a software NVMe
// controller (one 4 KiB-block namespace of blocks blocks, MDTS 16 KiB so
// that every layer read is split) for volBDF, with pool written onto a
// volume on namespace 1 as extent name.
type volumeHarness struct {
	*harness
	sc  *nvmetest.Controller
	ref string
}

func startVolume(t *testing.T, pool, name string, blocks uint64) *volumeHarness {
	t.Helper()
	if blocks == 0 {
		// Room for the pool, the volume's tables and some slack.
		st, err := os.Stat(pool)
		if err != nil {
			t.Fatal(err)
		}
		blocks = uint64(st.Size())/4096 + 1024
	}
	vh := &volumeHarness{}
	vh.harness = start(t, opts{cfg: Config{Links: pinnedLinks()}, setup: func(s *Server) {
		s.SetDeviceHost(fakeDeviceHost(t))
		s.devices.open = func(ctx context.Context, bdf string) (*handle, error) {
			sc := nvmetest.New(nvmetest.Options{MDTS: 2, TimeoutUnits: 1,
				Namespaces: []nvmetest.Namespace{{BlockSize: 4096, Blocks: blocks}}})
			c, err := nvme.Open(ctx, nvme.Config{MMIO: sc, DMA: sc, IOQueues: deviceIOQueues, QueueDepth: deviceQueueDepth})
			if err != nil {
				sc.Close()
				return nil, err
			}
			vh.sc = sc
			return &handle{ctrl: c, dma: sc, close: func(ctx context.Context) error {
				err := c.Close(ctx)
				sc.Close()
				return err
			}}, nil
		}
	}})
	t.Cleanup(func() { vh.srv.CloseDevices() })
	ctx := context.Background()
	hc, err := vh.srv.devices.bind(ctx, volBDF)
	if err != nil {
		t.Fatal(err)
	}
	hc.io.Lock()
	v, err := hc.format(ctx, 1, volume.FormatOptions{Label: "models"})
	hc.io.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devices.WritePool(ctx, v, name, pool); err != nil {
		t.Fatal(err)
	}
	vh.ref = fmt.Sprintf("%s%s/1/%s", VolumeScheme, volBDF, name)
	return vh
}

// TestVolumeModel: a pool on a strata volume, loaded as nvme://BDF/1/NAME
// with every layer on tier C, gives the same greedy text as the same pool
// loaded from its file with the same placement; its layers are read by the
// userspace driver over several I/O queues; the route shows in the status
// and /metrics; the controller cannot be unbound or its namespace
// formatted while the model is loaded; unloading it frees every staging
// buffer the model mapped.
func TestVolumeModel(t *testing.T) {
	t.Parallel()
	pool, _ := stackedPool(t, t.TempDir(), 1, 2, 3)
	vh := startVolume(t, pool, "pools/stack.pool", 4096)
	ctx := context.Background()
	idle := vh.sc.Mapped()
	lr := api.LoadRequest{Tiers: "all-C", MaxBatch: 2, Context: 256}
	lr.Name = "file"
	if _, err := vh.srv.LoadFile(ctx, pool, lr); err != nil {
		t.Fatal(err)
	}
	// Through the admin API, as `strata load nvme://…` does.
	body, _ := json.Marshal(api.LoadRequest{Path: vh.ref, Name: "vol", Tiers: "all-C", MaxBatch: 2, Context: 256})
	code, b := vh.post(t, api.PathLoad, string(body))
	if code != 200 {
		t.Fatalf("load %s: %d %s", vh.ref, code, b)
	}
	var st api.ModelStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Path != vh.ref || st.TierCRoute == nil || st.TierCRoute.Route != "nvme-pinned" ||
		st.TierCRoute.Refused["nvme-bar"] == "" || st.TierCRoute.Refused["file"] == "" || !strings.Contains(st.TierCRoute.Via, "4 I/O queues of depth 64") {
		t.Fatalf("status of the volume model: path %q route %+v", st.Path, st.TierCRoute)
	}
	reads := vh.sc.Count("read")
	const prompt, n = "The fastest way", 6
	want, _ := vh.completion(t, "file", prompt, n)
	got, _ := vh.completion(t, "vol", prompt, n)
	if got != want {
		t.Fatalf("from the volume: %q, from the file: %q", got, want)
	}
	if vh.sc.Count("read") == reads {
		t.Fatal("the volume model's passes read nothing from the controller")
	}
	for q := 1; q <= deviceIOQueues; q++ {
		if vh.sc.Count(fmt.Sprintf("read q%d", q)) == 0 {
			t.Errorf("no read on I/O queue %d: tier-C reads are not spread over the queues", q)
		}
	}
	_, m := vh.get(t, api.PathMetric)
	for _, line := range []string{`strata_tier_c_route{model="vol",reason="",route="nvme-pinned"} 1`, `strata_tier_c_route{model="file",reason="",route="file"} 1`} {
		if !strings.Contains(string(m), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	// In use: unbind and format refuse, naming the model's reference.
	if _, err := vh.srv.devices.unbind(ctx, volBDF, ""); err == nil || !strings.Contains(err.Error(), vh.ref) {
		t.Fatalf("unbind with a model loaded from the controller: %v", err)
	}
	fb, _ := json.Marshal(api.FormatRequest{BDF: volBDF, NSID: 1, Force: true})
	if code, b := vh.post(t, api.PathVolumeFormat, string(fb)); code != 409 || !strings.Contains(string(b), vh.ref) {
		t.Fatalf("format with a model loaded from the namespace: %d %s", code, b)
	}
	if _, err := vh.srv.Unload("vol"); err != nil {
		t.Fatal(err)
	}
	if got := vh.sc.Mapped(); got != idle {
		t.Errorf("%d DMA allocations after unloading, %d before loading: staging leaked", got, idle)
	}
	if _, err := vh.srv.devices.unbind(ctx, volBDF, ""); err != nil && strings.Contains(err.Error(), "loaded") {
		t.Fatalf("unbind after the unload: %v", err)
	}
}

// TestVolumeModelRefused: references that name nothing usable fail with
// a clear error and load nothing.
func TestVolumeModelRefused(t *testing.T) {
	t.Parallel()
	pool, _ := stackedPool(t, t.TempDir(), 1)
	vh := startVolume(t, pool, "stack.pool", 1024)
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, bytes.Repeat([]byte("not a pool "), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := devices.WritePool(context.Background(), vh.srv.devices.held[volBDF].cachedVolume(1), "junk", junk); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref, code, msg string
	}{
		{"nvme://" + volBDF + "/1/junk", "", "prefab pools only"},
		{"nvme://" + volBDF + "/1/missing.pool", "model_file_not_found", "no extent"},
		{"nvme://" + volBDF + "/7/stack.pool", "namespace_not_found", "namespace"},
		{"nvme://0000:00:05.0/1/stack.pool", "device_not_bound", "bind it first"},
		{"nvme://" + volBDF + "/x/stack.pool", "", "namespace"},
		{"nvme://" + volBDF + "/1/", "", "BDF/NSID/NAME"},
		{"nvme://nonsense/1/stack.pool", "", "nonsense"},
	} {
		body, _ := json.Marshal(api.LoadRequest{Path: tc.ref, Name: "x"})
		code, b := vh.post(t, api.PathLoad, string(body))
		if code < 400 || !strings.Contains(string(b), tc.code) || !strings.Contains(string(b), tc.msg) {
			t.Errorf("load %s: %d %s; want an error %q saying %q", tc.ref, code, b, tc.code, tc.msg)
		}
	}
	if _, err := vh.srv.lookup("x"); err == nil {
		t.Fatal("a refused load left a model")
	}
	if m := vh.srv.devices.held[volBDF].inUse(); m != "" {
		t.Fatalf("refused loads left users: %s", m)
	}
}

// TestVolumeModelFaults: the software controller fails the volume model's
// tier-C reads with a media error, a command that hangs (timed out and
// aborted by the driver, then tried again and timed out again), a
// transient internal error (tried again), a controller fatal status
// mid-stream (the driver resets it and resubmits what was in flight), a
// reset from elsewhere mid-stream (an FLR: the controller disabled and
// unreachable for a while) or a reset an operator asks for mid-stream
// (strata devices reset). A
// request that meets an unrecovered fault fails with an error naming the
// layer, its extent and the NVMe status; one that is recovered succeeds;
// either way the
// daemon keeps serving, the next request gives the file model's text, and
// no command is left in flight.
func TestVolumeModelFaults(t *testing.T) {
	t.Parallel()
	pool, extents := stackedPool(t, t.TempDir(), 1, 2)
	vh := startVolume(t, pool, "stack.pool", 2048)
	ctx := context.Background()
	for _, lr := range []api.LoadRequest{{Name: "file"}, {Name: "vol"}} {
		lr.Tiers, lr.MaxBatch, lr.Context = "all-C", 2, 256
		var err error
		if lr.Name == "file" {
			_, err = vh.srv.LoadFile(ctx, pool, lr)
		} else {
			_, err = vh.srv.LoadVolume(ctx, vh.ref, lr, false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const prompt, n = "The fastest way", 4
	want, _ := vh.completion(t, "file", prompt, n)
	hc := vh.srv.devices.held[volBDF]
	v := hc.cachedVolume(1)
	e, err := v.Lookup("stack.pool")
	if err != nil {
		t.Fatal(err)
	}
	lm, err := vh.srv.lookup("vol")
	if err != nil {
		t.Fatal(err)
	}
	last := len(extents) - 1
	ext := lm.eng.Pool().Extent(last) // the last layer's extent
	layer := fmt.Sprintf("layer %d", last)
	lba := uint64(e.Offset+ext.Offset)/4096 + 1
	var resetDone chan struct{} // midStream's goroutine, when one runs
	// midStream holds each read 20 ms and runs fn on its own goroutine
	// once the request streams (a read reached the controller);
	// resetDone closes when fn returns.
	midStream := func(fn func()) {
		vh.sc.SetDelay(20 * time.Millisecond)
		reads := vh.sc.Count("read")
		resetDone = make(chan struct{})
		go func() {
			defer close(resetDone)
			for vh.sc.Count("read") == reads {
				time.Sleep(time.Millisecond)
			}
			fn()
		}()
	}
	for _, tc := range []struct {
		name   string
		inject func()
		// fails: the request must fail, naming these; empty: it must succeed.
		fails []string
	}{
		{"media error", func() { vh.sc.InjectError(1, nvme.OpRead, lba, 1, nvme.StatusUnrecoveredRead) },
			[]string{layer, "tier C", fmt.Sprint(ext), "unrecovered read error (sct 2 sc 0x81)"}},
		{"timeout", func() { vh.sc.Hang(1, lba, 1) }, []string{layer, "tier C", fmt.Sprint(ext), "timed out", "abort"}},
		{"transient error, retried", func() { vh.sc.InjectErrorTimes(1, nvme.OpRead, lba, 1, nvme.StatusInternal, 1) }, nil},
		{"controller reset", func() {
			vh.sc.SetDelay(20 * time.Millisecond)
			time.AfterFunc(30*time.Millisecond, vh.sc.SetFatal)
		}, nil},
		{"reset behind the driver", func() {
			midStream(func() {
				vh.sc.ResetBehind(20 * time.Millisecond) // an FLR from elsewhere
			})
		}, nil},
		{"reset through the API", func() {
			midStream(func() {
				code, b := vh.post(t, api.PathDeviceReset, fmt.Sprintf(`{"bdf":%q}`, volBDF))
				var r api.ResetResponse
				if code != 200 || json.Unmarshal(b, &r) != nil || r.BDF != volBDF || r.Resubmitted == 0 {
					t.Errorf("reset mid-stream: %d %s; want it done with the reads in flight submitted again", code, b)
				}
			})
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.inject()
			code, b := vh.post(t, "/v1/completions", fmt.Sprintf(`{"model":"vol","prompt":%q,"max_tokens":%d,"temperature":0}`, prompt, n))
			if resetDone != nil {
				<-resetDone
				resetDone = nil
			}
			vh.sc.ClearFaults()
			vh.sc.SetDelay(0)
			if tc.fails == nil {
				if code != 200 {
					t.Fatalf("with the fault recovered by the driver: %d %s", code, b)
				}
			} else {
				var e struct{ Error struct{ Message string } }
				json.Unmarshal(b, &e)
				for _, s := range tc.fails {
					if code < 500 || !strings.Contains(e.Error.Message, s) {
						t.Fatalf("with the fault: %d %s; want a 5xx error naming %q", code, b, s)
					}
				}
				t.Logf("%d: %s", code, e.Error.Message)
			}
			if got, _ := vh.completion(t, "vol", prompt, n); got != want {
				t.Errorf("after the fault: %q, the file model %q", got, want)
			}
			for _, q := range hc.h.ctrl.Queues() {
				if q.Inflight() != 0 {
					t.Errorf("queue %d: %d commands still in flight", q.ID(), q.Inflight())
				}
			}
		})
	}
	st := hc.h.ctrl.Stats()
	if st.Timeouts == 0 || st.Resets == 0 {
		t.Errorf("driver counters %+v: want the timeout and the reset counted", st)
	}
	// /metrics carries the same counters.
	_, b := vh.get(t, "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`strata_nvme_events_total{bdf=%q,event="reset"} %d`, volBDF, st.Resets),
		fmt.Sprintf(`strata_nvme_events_total{bdf=%q,event="timeout"} %d`, volBDF, st.Timeouts),
		fmt.Sprintf(`strata_nvme_bytes_total{bdf=%q,op="read"} %s`, volBDF, strconv.FormatFloat(float64(st.ReadBytes), 'g', -1, 64)),
		fmt.Sprintf(`strata_nvme_inflight_commands{bdf=%q,queue="1"} 0`, volBDF),
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestVolumeModelPlannedLinks: with no pinned links, loading a volume
// model whose budget makes it stream measures the storage link through the
// userspace driver (the reads reach the software controller before any
// request) and the plan is made with that measurement, which the status
// reports as the storage link and its note.
func TestVolumeModelPlannedLinks(t *testing.T) {
	t.Parallel()
	pool, _ := stackedPool(t, t.TempDir(), 1, 2, 3)
	vh := startVolume(t, pool, "stack.pool", 4096)
	vh.srv.cfg.Links = nil
	reads := vh.sc.Count("read")
	st, err := vh.srv.LoadVolume(context.Background(), vh.ref, api.LoadRequest{Name: "vol", MaxBatch: 1, Context: 64,
		Budgets: api.Budgets{RAMBytes: 5 << 20}}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Plan
	if p == nil || p.Tiers[2].Layers == 0 {
		t.Fatalf("plan %+v: want layers on tier C", p)
	}
	if vh.sc.Count("read") == reads {
		t.Fatal("the load read nothing through the driver")
	}
	note := strings.Join(p.LinkNotes, "; ")
	if p.LinkBPS.Storage <= 0 || !strings.Contains(note, "userspace NVMe driver on "+volBDF+" namespace 1") || !strings.Contains(note, vh.ref) {
		t.Fatalf("storage link %g B/s, notes %q: want the link measured through the driver", p.LinkBPS.Storage, note)
	}
	t.Logf("plan: %d/%d/%d layers on A/B/C, storage %.3g GB/s (%s)", p.Tiers[0].Layers, p.Tiers[1].Layers, p.Tiers[2].Layers, p.LinkBPS.Storage/1e9, note)
}

func TestParseVolumeRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want volumeRef
		err  string
	}{
		{in: "nvme://0000:01:00.0/1/gocode.pool", want: volumeRef{"0000:01:00.0", 1, "gocode.pool"}},
		{in: "nvme://01:00.0/2/pools/a/b.pool", want: volumeRef{"0000:01:00.0", 2, "pools/a/b.pool"}},
		{in: "nvme://0000:01:00.0/0/x", err: "not a namespace ID"},
		{in: "nvme://0000:01:00.0/-1/x", err: "not a namespace ID"},
		{in: "nvme://0000:01:00.0/1", err: "BDF/NSID/NAME"},
		{in: "nvme://0000:01:00.0/1/", err: "BDF/NSID/NAME"},
		{in: "nvme://zz/1/x", err: "zz"},
		{in: "nvme://0000:01:00.0/1/" + strings.Repeat("n", 256), err: "longer than 255"},
		{in: "/models/x.pool", err: "does not start with nvme://"},
	} {
		got, err := parseVolumeRef(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want || got.String() != strings.Replace(tc.in, "//01:", "//0000:01:", 1) {
				t.Errorf("%s: %+v (%v), want %+v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error saying %q", tc.in, err, tc.err)
		}
	}
}

// TestVolumeGocode: the real gocode-29m, prefabbed and written onto a
// volume of the software controller, served as nvme://… on the CPU with a
// budget that leaves layers on tier C, gives its golden greedy tokens, as
// the same pool served from its file does; then a completion through the
// daemon gives the file model's text. It skips without the model.
func TestVolumeGocode(t *testing.T) {
	t.Parallel()
	src := gocodetest.Path(t)
	goldens := gocodetest.Goldens(t, src)
	pool := gocodetest.Pool(t, src, t.TempDir())
	vh := startVolume(t, pool, "gocode.pool", 0)
	ctx := context.Background()
	lr := api.LoadRequest{MaxBatch: 1, Context: 256, Budgets: api.Budgets{RAMBytes: 88 << 20}}
	lr.Name = "file"
	if _, err := vh.srv.LoadFile(ctx, pool, lr); err != nil {
		t.Fatal(err)
	}
	lr.Name = "vol"
	st, err := vh.srv.LoadVolume(ctx, vh.ref, lr, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Plan == nil || st.Plan.Tiers[2].Layers == 0 || st.TierCRoute == nil || st.TierCRoute.Route != "nvme-pinned" {
		t.Fatalf("plan %+v route %+v: want layers on tier C read by the NVMe driver", st.Plan, st.TierCRoute)
	}
	t.Logf("plan: %d/%d/%d layers on A/B/C", st.Plan.Tiers[0].Layers, st.Plan.Tiers[1].Layers, st.Plan.Tiers[2].Layers)
	reads := vh.sc.Count("read")
	for _, name := range []string{"vol", "file"} {
		lm, err := vh.srv.lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range goldens {
			got, err := gocodetest.Greedy(ctx, lm.eng.Model, g.Prompt, len(g.Greedy))
			if err != nil {
				t.Fatal(err)
			}
			gocodetest.Check(t, name, i, g, got)
		}
	}
	if vh.sc.Count("read") == reads {
		t.Fatal("the volume model read nothing from the controller")
	}
	const prompt = "func main() {"
	want, _ := vh.completion(t, "file", prompt, 16)
	if got, _ := vh.completion(t, "vol", prompt, 16); got != want {
		t.Fatalf("completion from the volume %q, from the file %q", got, want)
	}
}

// TestVolumeColdStart: the client's cold-start measurement over a volume
// model loaded through the API: it times load and first token, relates
// them to the storage rate the daemon measured through the driver, and
// leaves nothing loaded.
func TestVolumeColdStart(t *testing.T) {
	t.Parallel()
	pool, _ := stackedPool(t, t.TempDir(), 1, 2, 3)
	vh := startVolume(t, pool, "stack.pool", 4096)
	vh.srv.cfg.Links = nil
	r, err := vh.c.ColdStart(context.Background(), api.LoadRequest{Path: vh.ref, MaxBatch: 1, Context: 64,
		Budgets: api.Budgets{RAMBytes: 4 << 20}}, "Hello")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.String())
	if r.Route != "nvme-pinned" || r.PoolBytes == 0 || r.FirstTokenSeconds < r.LoadSeconds || r.LoadSeconds <= 0 ||
		r.StorageBps <= 0 || !strings.Contains(r.StorageNote, "userspace NVMe driver") || r.Ratio <= 0 {
		t.Fatalf("cold start %+v", r)
	}
	if _, err := vh.srv.lookup(r.Name); err == nil {
		t.Fatalf("%s still loaded after the measurement", r.Name)
	}
}
