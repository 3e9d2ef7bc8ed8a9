package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/internal/daemon/peer"
	"github.com/strata-llm/strata/internal/nvmehosttest"
	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/vfio"
)

// Peers of the device tests: root is an administrator (uid 0), user is
// not (no admin group is configured), a TCP peer with the API key never
// is, and a peer without identity may do nothing.
var (
	rootPeer = authz.Peer{Unix: true, Cred: peer.Cred{PID: 1, UID: 0, GID: 0}}
	userPeer = authz.Peer{Unix: true, Cred: peer.Cred{PID: 2, UID: 1000, GID: 1000}}
	keyPeer  = authz.Peer{APIKey: true}
	anonPeer = authz.Peer{}
)

// fakeDeviceHost builds sysfs and procfs trees with four NVMe controllers,
// the way nvme/devices' tests do:
//
//	0000:00:04.0  nvme, group 1: nvme0n1 (p1 mounted on /boot, p2 swap), model "Fake SSD", serial "S04"
//	0000:00:05.0  nvme, group 2: nvme1n1 held by dm-0 (LVM)
//	0000:00:06.0  vfio-pci, group 3: idle, the one tests bind
//	0000:00:07.0  nvme, no IOMMU group
func fakeDeviceHost(t testing.TB) nvmehost.Host {
	t.Helper()
	r := nvmehosttest.New(t)
	d0 := r.Controller("0000:00:04.0", "nvme", "1")
	r.Write(filepath.Join(d0, "nvme/nvme0/model"), "Fake SSD                                \n")
	r.Write(filepath.Join(d0, "nvme/nvme0/serial"), "S04     \n")
	r.Write(filepath.Join(d0, "nvme/nvme0/firmware_rev"), "1.0\n")
	disk := r.Disk(filepath.Join(d0, "nvme/nvme0/nvme0n1"), "259:0", 1)
	r.Write(filepath.Join(disk, "size"), "2048\n")
	r.Write(filepath.Join(disk, "queue/logical_block_size"), "512\n")
	r.Partition(disk, 1, "259:1")
	r.Partition(disk, 2, "259:2")
	d1 := r.Controller("0000:00:05.0", "nvme", "2")
	disk1 := r.Disk(filepath.Join(d1, "nvme/nvme1/nvme1n1"), "259:3", 1)
	r.Mkdir(filepath.Join(disk1, "holders/dm-0"))
	r.Controller("0000:00:06.0", "vfio-pci", "3")
	r.Controller("0000:00:07.0", "nvme", "")
	r.Write(filepath.Join(r.Proc, "self/mountinfo"), "22 1 259:1 / /boot rw,relatime - ext4 /dev/nvme0n1p1 rw\n23 1 0:21 / /proc rw - proc proc rw\n")
	r.Write(filepath.Join(r.Proc, "swaps"), "Filename\tType\tSize\tUsed\tPriority\n/dev/nvme0n1p2 partition 1000 0 -2\n")
	return r.Host()
}

// rebind moves a fake device's driver link, as the kernel would on a bind.
func rebind(t *testing.T, h nvmehost.Host, bdf, drv string) {
	t.Helper()
	dir := filepath.Join(h.Sysfs.Root, "bus/pci/devices", bdf)
	os.MkdirAll(filepath.Join(h.Sysfs.Root, "bus/pci/drivers", drv), 0o755)
	if err := os.Remove(filepath.Join(dir, "driver")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(h.Sysfs.Root, "bus/pci/drivers", drv), filepath.Join(dir, "driver")); err != nil {
		t.Fatal(err)
	}
}

// devServer is a Server over a fake device tree, driven through its
// handler with chosen peers.
type devServer struct {
	srv  *Server
	host nvmehost.Host
	reg  *deviceRegistry
}

func newDevServer(t testing.TB, modelDirs ...string) *devServer {
	t.Helper()
	log := hclog.NewNullLogger() // a fuzz target's *testing.F cannot log from its inputs
	if tt, ok := t.(*testing.T); ok {
		log = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{tt}})
	}
	srv, err := New(Config{ModelDirs: modelDirs, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	h := fakeDeviceHost(t)
	srv.SetDeviceHost(h)
	d := &devServer{srv: srv, host: h, reg: srv.devices}
	d.reg.probe = func() vfio.ProbeResult {
		return vfio.ProbeResult{Notes: []string{"/dev/vfio/vfio: no such file (test)"}}
	}
	t.Cleanup(func() { srv.CloseDevices() })
	return d
}

func (d *devServer) do(t *testing.T, pr authz.Peer, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, "http://stratad"+path, rd)
	req = req.WithContext(WithPeer(req.Context(), pr))
	rec := httptest.NewRecorder()
	d.srv.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// want checks a response's status (and error code when it is an error)
// and decodes a success into out.
func want(t *testing.T, code int, body []byte, wantCode int, errCode string, out any) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("status %d, want %d: %s", code, wantCode, body)
	}
	if code >= 300 {
		checkError(t, body, typeFor(code), errCode)
		return
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("decoding %s: %v", body, err)
		}
	}
}

func typeFor(code int) string {
	switch code {
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusServiceUnavailable:
		return "service_unavailable"
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusInsufficientStorage:
		return "server_error"
	}
	return "invalid_request_error"
}

func TestDevicesList(t *testing.T) {
	t.Parallel()
	d := newDevServer(t)
	for _, pr := range []authz.Peer{userPeer, keyPeer} {
		code, body := d.do(t, pr, "GET", api.PathDevices, nil)
		var l api.DeviceList
		want(t, code, body, 200, "", &l)
		if len(l.Controllers) != 4 || l.VFIO.Available || len(l.VFIO.Notes) == 0 {
			t.Fatalf("%+v", l)
		}
		byBDF := map[string]api.Controller{}
		for _, c := range l.Controllers {
			byBDF[c.BDF] = c
		}
		c0 := byBDF["0000:00:04.0"]
		if c0.Model != "Fake SSD" || c0.Serial != "S04" || c0.Firmware != "1.0" || c0.Driver != "nvme" || c0.IOMMUGroup != 1 ||
			c0.Vendor != "1b36" || c0.Held || len(c0.Namespaces) != 1 {
			t.Fatalf("04.0: %+v", c0)
		}
		ns := c0.Namespaces[0]
		if ns.NSID != 1 || ns.Disk != "nvme0n1" || ns.Bytes != 2048*512 || ns.BlockSize != 512 || len(ns.Partitions) != 2 ||
			len(ns.Mounts) != 1 || len(ns.Swap) != 1 {
			t.Fatalf("04.0 namespace: %+v", ns)
		}
		if strings.Join(c0.Users, "; ") != "mounted: /dev/nvme0n1p1 on /boot; swap: /dev/nvme0n1p2" || !strings.Contains(c0.Note, "in use") {
			t.Fatalf("04.0 users %q note %q", c0.Users, c0.Note)
		}
		if c := byBDF["0000:00:05.0"]; len(c.Users) != 1 || !strings.Contains(c.Users[0], "held by dm-0") {
			t.Fatalf("05.0: %+v", c)
		}
		if c := byBDF["0000:00:06.0"]; c.Driver != "vfio-pci" || len(c.Users) != 0 || !strings.Contains(c.Note, "VFIO is not available") {
			t.Fatalf("06.0: %+v", c)
		}
		if c := byBDF["0000:00:07.0"]; c.IOMMUGroup != -1 || !strings.Contains(c.Note, "no IOMMU group") {
			t.Fatalf("07.0: %+v", c)
		}
	}
	// Stats with nothing held.
	code, body := d.do(t, userPeer, "GET", api.PathDeviceStats, nil)
	var st api.DeviceStats
	want(t, code, body, 200, "", &st)
	if len(st.Controllers) != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestDevicesAuthz: changing what the daemon holds needs an administrator;
// reading needs a known peer. A refused request changes nothing.
func TestDevicesAuthz(t *testing.T) {
	t.Parallel()
	d := newDevServer(t)
	d.reg.open = softOpener(nil)
	poolReq := api.PoolWriteRequest{BDF: "0000:00:06.0", NSID: 1, Path: "x.pool"}
	tests := []struct {
		name   string
		pr     authz.Peer
		method string
		path   string
		body   any
		code   int
	}{
		{"user binds", userPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: "0000:00:06.0"}, 403},
		{"api key binds", keyPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: "0000:00:06.0"}, 403},
		{"user unbinds", userPeer, "POST", api.PathDeviceUnbind, api.UnbindRequest{BDF: "0000:00:06.0"}, 403},
		{"user formats", userPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: "0000:00:06.0", NSID: 1}, 403},
		{"user writes a pool", userPeer, "POST", api.PathPoolWrite, poolReq, 403},
		{"anonymous lists", anonPeer, "GET", api.PathDevices, nil, 403},
		{"anonymous stats", anonPeer, "GET", api.PathDeviceStats, nil, 403},
		{"user lists", userPeer, "GET", api.PathDevices, nil, 200},
		{"user stats", userPeer, "GET", api.PathDeviceStats, nil, 200},
		{"wrong method", rootPeer, "GET", api.PathDeviceBind, nil, 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.do(t, tc.pr, tc.method, tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, body)
			}
			if code == 403 {
				checkError(t, body, "permission_error", "permission_denied")
			}
		})
	}
	if _, err := d.reg.get("0000:00:06.0"); !errors.Is(err, errNotHeld) {
		t.Fatalf("a refused bind left the controller held: %v", err)
	}
	// The same bind by root goes through.
	code, body := d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: "0000:00:06.0"})
	want(t, code, body, 200, "", nil)
}

// TestDevicesBindRefused: controllers the host uses, without an IOMMU
// group, or on a host without VFIO are refused with errors that say why,
// and the daemon keeps serving.
func TestDevicesBindRefused(t *testing.T) {
	t.Parallel()
	d := newDevServer(t)
	_, vfioErr := os.Stat(vfio.ContainerPath)
	tests := []struct {
		name    string
		body    any
		code    int
		errCode string
		text    string
	}{
		{"mounted and swap", api.BindRequest{BDF: "0000:00:04.0"}, 409, "device_in_use", "mounted: /dev/nvme0n1p1 on /boot; swap: /dev/nvme0n1p2"},
		{"short form, LVM on top", api.BindRequest{BDF: "00:05.0"}, 409, "device_in_use", "nvme1n1 is held by dm-0"},
		{"no IOMMU group", api.BindRequest{BDF: "0000:00:07.0"}, 503, "vfio_unavailable", "intel_iommu=on"},
		{"no such controller", api.BindRequest{BDF: "0000:00:09.0"}, 404, "device_not_found", "0000:00:09.0"},
		{"bad address", api.BindRequest{BDF: "not-a-bdf"}, 400, "", "not-a-bdf"},
		{"empty address", api.BindRequest{}, 400, "", "bdf is required"},
		{"unknown field", `{"bdf":"0000:00:06.0","forse":true}`, 400, "", "unknown field"},
	}
	if errors.Is(vfioErr, os.ErrNotExist) {
		// This host has no VFIO (as here and in CI): the real VFIO opener
		// must fail cleanly.
		tests = append(tests, struct {
			name    string
			body    any
			code    int
			errCode string
			text    string
		}{"VFIO absent", api.BindRequest{BDF: "0000:00:06.0"}, 503, "vfio_unavailable", "/dev/vfio/vfio"})
	} else {
		t.Logf("this host has %s: the VFIO-absent case is not checked here", vfio.ContainerPath)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := d.do(t, rootPeer, "POST", api.PathDeviceBind, tc.body)
			want(t, code, body, tc.code, tc.errCode, nil)
			if !strings.Contains(string(body), tc.text) {
				t.Fatalf("error does not mention %q: %s", tc.text, body)
			}
			// Still serving, nothing held.
			code, body = d.do(t, userPeer, "GET", api.PathDevices, nil)
			var l api.DeviceList
			want(t, code, body, 200, "", &l)
			for _, c := range l.Controllers {
				if c.Held {
					t.Fatalf("%s held after a refused bind", c.BDF)
				}
			}
		})
	}
}

// softOpener opens a software NVMe controller (two namespaces: 512-byte
// and 4 KiB blocks, 16 MiB each) in place of VFIO, recording it in *got.
func softOpener(got **nvmetest.Controller) opener {
	return func(ctx context.Context, bdf string) (*handle, error) {
		sc := nvmetest.New(nvmetest.Options{Namespaces: []nvmetest.Namespace{{BlockSize: 512, Blocks: 32768}, {BlockSize: 4096, Blocks: 4096}}})
		c, err := nvme.Open(ctx, nvme.Config{MMIO: sc, DMA: sc, IOQueues: deviceIOQueues, QueueDepth: deviceQueueDepth})
		if err != nil {
			sc.Close()
			return nil, err
		}
		if got != nil {
			*got = sc
		}
		return &handle{ctrl: c, dma: sc, close: func(ctx context.Context) error {
			err := c.Close(ctx)
			sc.Close()
			return err
		}}, nil
	}
}

// writeTestPool writes a prefab pool of the tiny synthetic model into dir.
func writeTestPool(t *testing.T, dir string) string {
	t.Helper()
	m, err := gguf.Map(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := filepath.Join(dir, "tiny.pool")
	if err := prefab.WritePool(m, p, prefab.Options{Type: prefab.TypeKeep}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDevicesFlow drives bind → format → pool write → extents → stats →
// unbind against a software controller, checking the pool's bytes on the
// controller's own copy of the namespace.
// Sequential: it asserts an idle stats interval after sleeping three intervals.
func TestDevicesFlow(t *testing.T) {
	dir := t.TempDir()
	poolPath := writeTestPool(t, dir)
	os.WriteFile(filepath.Join(dir, "junk.pool"), bytes.Repeat([]byte("not a pool "), 1000), 0o644)
	d := newDevServer(t, dir)
	var sc *nvmetest.Controller
	d.reg.open = softOpener(&sc)
	d.reg.interval = 50 * time.Millisecond
	var released []string
	d.reg.release = func(bdf, driver string) error {
		released = append(released, bdf+"→"+driver)
		rebind(t, d.host, bdf, driver)
		return nil
	}
	const bdf = "0000:00:06.0"

	// Nothing works on a controller that is not bound.
	code, body := d.do(t, rootPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: bdf, NSID: 1})
	want(t, code, body, 409, "device_not_bound", nil)
	code, body = d.do(t, userPeer, "GET", api.PathDeviceStats+"?bdf="+bdf, nil)
	want(t, code, body, 409, "device_not_bound", nil)

	code, body = d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: bdf})
	var b api.BindResponse
	want(t, code, body, 200, "", &b)
	if !b.Controller.Held || b.Controller.Model != "nvmetest Ctrl" || b.PreviousDriver != "vfio-pci" || len(b.Controller.Namespaces) != 2 ||
		b.Controller.Namespaces[1].BlockSize != 4096 || b.Controller.Namespaces[1].Bytes != 16<<20 || b.Controller.Namespaces[0].Volume != nil {
		t.Fatalf("bind: %+v", b)
	}
	// Binding again is idempotent.
	code, body = d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: bdf})
	want(t, code, body, 200, "", nil)

	vq := api.PathVolume + "?bdf=" + bdf + "&nsid=1"
	code, body = d.do(t, userPeer, "GET", vq, nil)
	want(t, code, body, 409, "volume_not_formatted", nil)
	code, body = d.do(t, rootPeer, "POST", api.PathPoolWrite, api.PoolWriteRequest{BDF: bdf, NSID: 1, Path: "tiny.pool"})
	want(t, code, body, 409, "volume_not_formatted", nil)
	code, body = d.do(t, rootPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: bdf, NSID: 9})
	want(t, code, body, 404, "namespace_not_found", nil)
	code, body = d.do(t, rootPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: bdf, NSID: 1, Label: "models", TableBytes: 64 << 10})
	var vi api.VolumeInfo
	want(t, code, body, 200, "", &vi)
	if vi.Label != "models" || vi.BlockSize != 512 || vi.Bytes != 16<<20 || len(vi.Extents) != 0 {
		t.Fatalf("format: %+v", vi)
	}

	for _, tc := range []struct {
		name, path, errCode string
		code                int
	}{
		{"outside the model directories", "/etc/passwd", "path_not_allowed", 403},
		{"dot-dot", "../x.pool", "path_not_allowed", 403},
		{"missing", "nope.pool", "pool_file_not_found", 404},
		{"not a pool", "junk.pool", "not_a_pool", 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.do(t, rootPeer, "POST", api.PathPoolWrite, api.PoolWriteRequest{BDF: bdf, NSID: 1, Path: tc.path})
			want(t, code, body, tc.code, tc.errCode, nil)
		})
	}

	raw, err := os.ReadFile(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	code, body = d.do(t, rootPeer, "POST", api.PathPoolWrite, api.PoolWriteRequest{BDF: bdf, NSID: 1, Path: "tiny.pool", Name: "pools/tiny"})
	var pw api.PoolWriteResponse
	want(t, code, body, 200, "", &pw)
	e := pw.Extent
	if e.Name != "pools/tiny" || e.Length != int64(len(raw)) || e.XXH3 != fmt.Sprintf("%016x", xxh3.Hash(raw)) || e.Offset%4096 != 0 || pw.GBps <= 0 {
		t.Fatalf("pool write: %+v (file %d bytes)", pw, len(raw))
	}
	t.Logf("pool of %d bytes at byte %d, %.3f GB/s", e.Length, e.Offset, pw.GBps)
	// The controller's own copy of the namespace holds the pool.
	if got := sc.Data(1)[e.Offset : e.Offset+e.Length]; !bytes.Equal(got, raw) {
		t.Fatal("namespace bytes differ from the pool file")
	}
	code, body = d.do(t, rootPeer, "POST", api.PathPoolWrite, api.PoolWriteRequest{BDF: bdf, NSID: 1, Path: "tiny.pool", Name: "pools/tiny"})
	want(t, code, body, 409, "extent_exists", nil)

	code, body = d.do(t, userPeer, "GET", vq, nil)
	want(t, code, body, 200, "", &vi)
	if len(vi.Extents) != 1 || vi.Extents[0] != e {
		t.Fatalf("extents: %+v", vi.Extents)
	}
	code, body = d.do(t, rootPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: bdf, NSID: 1})
	want(t, code, body, 409, "volume_not_empty", nil)
	code, body = d.do(t, userPeer, "GET", api.PathDevices, nil)
	var l api.DeviceList
	want(t, code, body, 200, "", &l)
	for _, c := range l.Controllers {
		if c.BDF == bdf && (!c.Held || c.Namespaces[0].Volume == nil || c.Namespaces[0].Volume.Extents != 1 || c.Namespaces[1].Volume != nil) {
			t.Fatalf("listing after the write: %+v", c)
		}
	}

	// Counters: the write and its verification moved the pool's bytes;
	// once an idle interval has passed, its rates are zero while the
	// average is not.
	code, body = d.do(t, userPeer, "GET", api.PathDeviceStats+"?bdf="+bdf, nil)
	var st api.DeviceStats
	want(t, code, body, 200, "", &st)
	cs := st.Controllers[0]
	if cs.WriteBytes < uint64(len(raw)) || cs.ReadBytes < uint64(len(raw)) || cs.Writes == 0 || len(cs.Queues) != deviceIOQueues ||
		cs.Queues[0].Depth != deviceQueueDepth || cs.Average.WriteGBps <= 0 || cs.Errors != 0 {
		t.Fatalf("stats: %+v", cs)
	}
	time.Sleep(3 * d.reg.interval)
	code, body = d.do(t, userPeer, "GET", api.PathDeviceStats, nil)
	want(t, code, body, 200, "", &st)
	cs = st.Controllers[0]
	if cs.Interval.Seconds <= 0 || cs.Interval.Seconds > 1 || cs.Interval.WriteGBps != 0 || cs.Interval.ReadGBps != 0 || cs.Average.WriteGBps <= 0 {
		t.Fatalf("idle interval: %+v", cs)
	}

	// A controller busy with I/O is not pulled from under it.
	hc, _ := d.reg.get(bdf)
	hc.io.RLock()
	code, body = d.do(t, rootPeer, "POST", api.PathDeviceUnbind, api.UnbindRequest{BDF: bdf})
	hc.io.RUnlock()
	want(t, code, body, 409, "device_busy", nil)

	code, body = d.do(t, rootPeer, "POST", api.PathDeviceUnbind, api.UnbindRequest{BDF: bdf})
	var u api.UnbindResponse
	want(t, code, body, 200, "", &u)
	if !u.WasHeld || u.Driver != "nvme" || strings.Join(released, ",") != bdf+"→nvme" || sc.Count("shutdown") != 1 {
		t.Fatalf("unbind: %+v, released %v, shutdowns %d", u, released, sc.Count("shutdown"))
	}
	code, body = d.do(t, userPeer, "GET", vq, nil)
	want(t, code, body, 409, "device_not_bound", nil)
	code, body = d.do(t, userPeer, "GET", api.PathDeviceStats, nil)
	want(t, code, body, 200, "", &st)
	if len(st.Controllers) != 0 {
		t.Fatalf("stats after unbind: %+v", st)
	}
}

// TestDevicesShutdown: closing the server's devices cancels a pool write
// in flight, shuts the controller down and refuses new binds.
func TestDevicesShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTestPool(t, dir)
	d := newDevServer(t, dir)
	var sc *nvmetest.Controller
	d.reg.open = softOpener(&sc)
	const bdf = "0000:00:06.0"
	code, body := d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: bdf})
	want(t, code, body, 200, "", nil)
	code, body = d.do(t, rootPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: bdf, NSID: 2})
	want(t, code, body, 200, "", nil)

	base := sc.Count("write")
	sc.SetDelay(20 * time.Millisecond) // a slow device: the write is still running at shutdown
	var wg sync.WaitGroup
	wg.Add(1)
	var wcode int
	var wbody []byte
	go func() {
		defer wg.Done()
		wcode, wbody = d.do(t, rootPeer, "POST", api.PathPoolWrite, api.PoolWriteRequest{BDF: bdf, NSID: 2, Path: "tiny.pool"})
	}()
	for sc.Count("write") <= base {
		time.Sleep(time.Millisecond)
	}
	if err := d.srv.CloseDevices(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if wcode == 200 || !strings.Contains(string(wbody), "shutting down") || sc.Count("shutdown") != 1 {
		t.Fatalf("pool write during shutdown: %d %s; shutdowns %d", wcode, wbody, sc.Count("shutdown"))
	}
	t.Logf("write cut short: %d %s", wcode, wbody)
	code, body = d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: bdf})
	want(t, code, body, 503, "shutting_down", nil)
	code, body = d.do(t, userPeer, "GET", api.PathDevices, nil)
	want(t, code, body, 200, "", nil)
}

func TestRates(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	at := func(d time.Duration, rb, wb, r, w uint64) ctrSample {
		return ctrSample{t: t0.Add(d), st: nvme.Stats{ReadBytes: rb, WriteBytes: wb, Reads: r, Writes: w}}
	}
	tests := []struct {
		name string
		a, b ctrSample
		want api.Rates
	}{
		{"one second", at(0, 0, 0, 0, 0), at(time.Second, 2e9, 1e9, 100, 50), api.Rates{Seconds: 1, ReadGBps: 2, WriteGBps: 1, ReadIOPS: 100, WriteIOPS: 50}},
		{"half a second", at(0, 1e9, 0, 10, 0), at(time.Second/2, 2e9, 0, 20, 0), api.Rates{Seconds: 0.5, ReadGBps: 2, ReadIOPS: 20}},
		{"no time passed", at(0, 0, 0, 0, 0), at(0, 5, 5, 5, 5), api.Rates{}},
		{"counters went backwards", at(0, 9, 9, 9, 9), at(time.Second, 1, 1, 1, 1), api.Rates{Seconds: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := rates(tc.a, tc.b); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDevicesConcurrent lists and reads counters while a controller is
// bound and unbound repeatedly (run with -race).
func TestDevicesConcurrent(t *testing.T) {
	t.Parallel()
	d := newDevServer(t)
	d.reg.open = softOpener(nil)
	d.reg.interval = 5 * time.Millisecond
	d.reg.release = func(bdf, driver string) error { return nil } // stays on vfio-pci in the fake tree
	const bdf = "0000:00:06.0"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, path := range []string{api.PathDevices, api.PathDeviceStats, api.PathDeviceStats + "?bdf=" + bdf, api.PathVolume + "?bdf=" + bdf + "&nsid=1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body := d.do(t, userPeer, "GET", path, nil)
				if code != 200 && code != 409 {
					t.Errorf("GET %s: %d %s", path, code, body)
					return
				}
			}
		}()
	}
	for i := 0; i < 5; i++ {
		code, body := d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: bdf})
		want(t, code, body, 200, "", nil)
		code, body = d.do(t, rootPeer, "POST", api.PathVolumeFormat, api.FormatRequest{BDF: bdf, NSID: 1})
		if code != 200 && code != 409 { // 409: a concurrent volume read held the controller
			t.Fatalf("format: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
		for {
			code, body = d.do(t, rootPeer, "POST", api.PathDeviceUnbind, api.UnbindRequest{BDF: bdf})
			if code == 200 {
				break
			}
			want(t, code, body, 409, "device_busy", nil)
		}
	}
	close(stop)
	wg.Wait()
}

// TestDevicesUnbindRefused: unbind checks what bind checks. A controller
// whose namespaces the host has mounted, swaps on or stacks devices on is
// refused with the same report as a bind (409 device_in_use, the users),
// whatever driver it is asked to go to, and stays with its kernel driver:
// an unbind detaches the controller, the disk holding / and swap with it.
func TestDevicesUnbindRefused(t *testing.T) {
	t.Parallel()
	d := newDevServer(t)
	for _, tc := range []struct {
		name string
		req  api.UnbindRequest
		text string
	}{
		{"mounted and swap", api.UnbindRequest{BDF: "0000:00:04.0"}, "mounted: /dev/nvme0n1p1 on /boot; swap: /dev/nvme0n1p2"},
		{"mounted, to another driver", api.UnbindRequest{BDF: "0000:00:04.0", Driver: "uio_pci_generic"}, "mounted: /dev/nvme0n1p1 on /boot"},
		{"LVM on top", api.UnbindRequest{BDF: "00:05.0"}, "nvme1n1 is held by dm-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.do(t, rootPeer, "POST", api.PathDeviceBind, api.BindRequest{BDF: tc.req.BDF})
			want(t, code, body, 409, "device_in_use", nil)
			bindBody := string(body)
			code, body = d.do(t, rootPeer, "POST", api.PathDeviceUnbind, tc.req)
			want(t, code, body, 409, "device_in_use", nil)
			if !strings.Contains(string(body), tc.text) {
				t.Fatalf("unbind error does not mention %q: %s", tc.text, body)
			}
			if tc.req.Driver == "" && string(body) != bindBody {
				t.Fatalf("unbind's report differs from bind's:\n%s\n%s", body, bindBody)
			}
			drv, err := d.srv.devices.host.Sysfs.Driver(tc.req.BDF)
			if err != nil || drv != "nvme" {
				t.Fatalf("driver after a refused unbind: %q, %v; want nvme", drv, err)
			}
		})
	}
}
