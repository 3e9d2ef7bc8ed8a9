package daemon

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
)

// adminRoutes are the privileged requests FuzzAdminRequests sends with
// arbitrary bodies. The benches are left out: an administrator may ask for
// a long one, which is the point of them, not a bug.
var adminRoutes = []struct{ method, path string }{
	{http.MethodPost, api.PathLoad},
	{http.MethodPost, api.PathUnload},
	{http.MethodPost, api.PathDeviceBind},
	{http.MethodPost, api.PathDeviceUnbind},
	{http.MethodPost, api.PathVolumeFormat},
	{http.MethodPost, api.PathPoolWrite},
	{http.MethodGet, api.PathVolume},
	{http.MethodGet, api.PathDevices},
}

// FuzzAdminRequests sends arbitrary bodies to the admin and device routes
// as root, against a fake sysfs and procfs (four NVMe controllers, no
// VFIO) and an empty model directory: nothing panics, nothing answers
// 500, every error is an OpenAI-shaped JSON body, and nothing reaches the
// fuzzing host's devices.
func FuzzAdminRequests(f *testing.F) {
	for i, body := range []string{
		`{"path":"tiny.gguf","name":"x","budgets":{"ram_bytes":1000}}`,
		`{"name":"tiny"}`,
		`{"bdf":"0000:00:06.0"}`,
		`{"bdf":"0000:00:04.0","force":true}`,
		`{"bdf":"0000:00:06.0","nsid":1}`,
		`{"bdf":"0000:00:06.0","nsid":1,"path":"x.pool"}`,
		``,
		``,
	} {
		f.Add(uint8(i), []byte(body))
	}
	// One server for the run: a server per input would be most of the
	// cost. What a request changes (a binding in the fake tree) stays, as
	// it would on a host.
	d := newDevServer(f, f.TempDir())
	// The kernel's part of giving a controller back to a driver
	// (driver_override, unbind, drivers_probe) has no fake: the fake tree
	// lacks those files, so every unbind of an idle controller answered 500
	// there. A controller the host uses still goes through the real
	// release, whose refusal comes before any sysfs write; the others stay
	// on their driver, as in TestDevicesConcurrent.
	release := d.reg.release
	d.reg.release = func(bdf, driver string) error {
		c, err := d.host.Controller(bdf)
		if err != nil {
			return err
		}
		if len(c.Users()) > 0 {
			return release(bdf, driver)
		}
		return nil
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := adminRoutes[int(route)%len(adminRoutes)]
		code, b := d.do(t, rootPeer, r.method, r.path, string(body))
		if code == http.StatusInternalServerError {
			t.Fatalf("%s %s %q: 500 %s", r.method, r.path, body, b)
		}
		if code >= 400 {
			var e struct {
				Error *struct{ Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Message == "" {
				t.Fatalf("%s %s %q: %d without an OpenAI-shaped error: %s", r.method, r.path, body, code, b)
			}
		}
	})
}
