package devicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/daemon"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/setup/testbed"
	"github.com/strata-llm/strata/vfio"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// serve starts a daemon on a socket in dir and returns its client and a
// function that stops it the way stratad does (Serve returns, then
// CloseDevices).
func serve(t *testing.T, dir, name string) (*client.Client, func()) {
	t.Helper()
	srv, err := daemon.New(daemon.Config{ModelDirs: []string{dir},
		Log: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, name+".sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, []net.Listener{l}, nil) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := srv.CloseDevices(); err != nil {
			t.Errorf("CloseDevices: %v", err)
		}
	}
	t.Cleanup(stop)
	return client.New(sock, ""), stop
}

func find(t *testing.T, c *client.Client, bdf string) (api.Controller, api.DeviceList) {
	t.Helper()
	l, err := c.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range l.Controllers {
		if d.BDF == bdf {
			return d, l
		}
	}
	t.Fatalf("%s not listed: %+v", bdf, l)
	return api.Controller{}, l
}

// waitDisk waits until the kernel's nvme driver has published bdf's
// namespace as a disk.
func waitDisk(t *testing.T, c *client.Client, bdf string) api.Controller {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, _ := find(t, c, bdf)
		if len(d.Namespaces) > 0 && d.Namespaces[0].Disk != "" && d.Namespaces[0].Bytes > 0 {
			if _, err := os.Stat("/dev/" + d.Namespaces[0].Disk); err == nil {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no disk for %s on the nvme driver: %+v", bdf, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func apiStatus(err error) (int, string) {
	var ae *client.APIError
	if errors.As(err, &ae) {
		code := ""
		if ae.Code != nil {
			code = *ae.Code
		}
		return ae.Status, code
	}
	return 0, ""
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestTestbedDeviceAPI drives the spare controller (NVMe1) through the
// daemon's device API only: list, unbind to the kernel, a bind refused
// while the disk is in use as swap, bind, format, pool write (checked on
// the host in the backing file, and read back through the kernel's nvme
// driver after unbind), extents, counters, a bind that reopens the volume,
// and a daemon shutdown after which a new daemon can bind it again.
func TestTestbedDeviceAPI(t *testing.T) {
	g := testbed.Require(t)
	ctx := context.Background()
	dir := t.TempDir()
	defer func() {
		// Leave NVMe1 on vfio-pci, as init.sh left it.
		if _, err := (vfio.Sysfs{}).BindVFIO(g.NVMe1); err != nil {
			t.Errorf("rebinding %s to vfio-pci: %v", g.NVMe1, err)
		}
	}()

	// A small prefab pool in the model directory.
	model := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(model, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 6}); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Map(model)
	if err != nil {
		t.Fatal(err)
	}
	poolPath := filepath.Join(dir, "tiny.pool")
	if err := prefab.WritePool(m, poolPath, prefab.Options{Type: prefab.TypeKeep}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	raw, err := os.ReadFile(poolPath)
	if err != nil {
		t.Fatal(err)
	}

	c, stop := serve(t, dir, "stratad")
	d, l := find(t, c, g.NVMe1)
	if !l.VFIO.Available || len(l.Controllers) != g.Controllers() || d.Driver != "vfio-pci" || d.Held || d.IOMMUGroup < 0 {
		t.Fatalf("listing at start: %+v", l)
	}
	t.Logf("VFIO %+v; %s: %s", l.VFIO, d.BDF, d.Note)

	// To the kernel and back through the API.
	u, err := c.Unbind(ctx, g.NVMe1, "")
	if err != nil || u.Driver != "nvme" || u.WasHeld {
		t.Fatalf("unbind to nvme: %+v %v", u, err)
	}
	d = waitDisk(t, c, g.NVMe1)
	ns := d.Namespaces[0]
	t.Logf("on the kernel driver: model %q serial %q, %s %d bytes, %d-byte blocks", d.Model, d.Serial, ns.Disk, ns.Bytes, ns.BlockSize)
	if d.Model == "" || d.Serial == "" || ns.NSID != 1 || ns.Bytes != g.NSBytes || ns.BlockSize != 512 {
		t.Fatalf("kernel view: %+v", d)
	}

	// In use as swap: refused, with the reason.
	disk := "/dev/" + ns.Disk
	run(t, "mkswap", disk)
	run(t, "swapon", disk)
	_, err = c.Bind(ctx, g.NVMe1)
	if st, code := apiStatus(err); st != http.StatusConflict || code != "device_in_use" || !strings.Contains(err.Error(), "swap: "+disk) {
		exec.Command("swapoff", disk).Run()
		t.Fatalf("bind of a swap disk: %v", err)
	}
	t.Logf("refused as it should be: %v", err)
	run(t, "swapoff", disk)

	b, err := c.Bind(ctx, g.NVMe1)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Controller.Held || b.PreviousDriver != "nvme" || b.Controller.Driver != "vfio-pci" || len(b.Controller.Namespaces) != 1 ||
		b.Controller.Namespaces[0].Bytes != g.NSBytes || b.Controller.Model != d.Model {
		t.Fatalf("bind: %+v", b)
	}
	t.Logf("bound: %+v", b.Controller)

	v, err := c.FormatVolume(ctx, api.FormatRequest{BDF: g.NVMe1, NSID: 1, Label: "devicetest"})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := c.WritePool(ctx, api.PoolWriteRequest{BDF: g.NVMe1, NSID: 1, Path: "tiny.pool", Name: "pools/tiny"})
	if err != nil {
		t.Fatal(err)
	}
	e := pw.Extent
	if e.Length != int64(len(raw)) || e.XXH3 != fmt.Sprintf("%016x", xxh3.Hash(raw)) || e.Offset < v.DataOffset || e.Offset+e.Length > 8<<20 {
		t.Fatalf("pool write: %+v (volume %+v)", pw, v)
	}
	t.Logf("pool %s: %d bytes at byte %d in %.3fs (%.4f GB/s, write + verify)", e.Name, e.Length, e.Offset, pw.Seconds, pw.GBps)
	testbed.Expect(t, "nvme1n1", e.Offset, raw)

	vi, err := c.Volume(ctx, g.NVMe1, 1)
	if err != nil || len(vi.Extents) != 1 || vi.Extents[0].XXH3 != e.XXH3 || vi.Label != "devicetest" {
		t.Fatalf("volume: %+v %v", vi, err)
	}
	st, err := c.DeviceStats(ctx, g.NVMe1)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.Controllers[0]
	t.Logf("stats: reads %d (%d B) writes %d (%d B) errors %d; interval %+v; average %+v; queues %+v",
		cs.Reads, cs.ReadBytes, cs.Writes, cs.WriteBytes, cs.Errors, cs.Interval, cs.Average, cs.Queues)
	if cs.WriteBytes < uint64(len(raw)) || cs.ReadBytes < uint64(len(raw)) || cs.Errors != 0 || len(cs.Queues) == 0 || cs.Average.WriteGBps <= 0 {
		t.Fatalf("stats: %+v", cs)
	}

	// Back to the kernel: its driver reads the pool our driver wrote.
	if u, err = c.Unbind(ctx, g.NVMe1, ""); err != nil || !u.WasHeld || u.Driver != "nvme" {
		t.Fatalf("unbind: %+v %v", u, err)
	}
	d = waitDisk(t, c, g.NVMe1)
	f, err := os.Open("/dev/" + d.Namespaces[0].Disk)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(raw))
	_, err = f.ReadAt(got, e.Offset)
	f.Close()
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("kernel read of the extent: %v, equal %v", err, bytes.Equal(got, raw))
	}

	// Bound again, the daemon finds the volume on the device.
	if b, err = c.Bind(ctx, g.NVMe1); err != nil || b.Controller.Namespaces[0].Volume == nil || b.Controller.Namespaces[0].Volume.Extents != 1 {
		t.Fatalf("rebind: %+v %v", b, err)
	}
	// Shutdown closes it (it stays on vfio-pci); a new daemon can open it.
	stop()
	if drv, _ := (vfio.Sysfs{}).Driver(g.NVMe1); drv != "vfio-pci" {
		t.Fatalf("after shutdown %s is on %q", g.NVMe1, drv)
	}
	c2, _ := serve(t, dir, "stratad2")
	if b, err = c2.Bind(ctx, g.NVMe1); err != nil || b.PreviousDriver != "vfio-pci" || b.Controller.Namespaces[0].Volume == nil {
		t.Fatalf("bind by a second daemon: %+v %v", b, err)
	}
	if u, err = c2.Unbind(ctx, g.NVMe1, ""); err != nil || !u.WasHeld {
		t.Fatalf("final unbind: %+v %v", u, err)
	}
}
