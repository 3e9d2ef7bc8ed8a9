package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/internal/nvmehosttest"
	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/pci"
)

// fakeNVMeHost is a sysfs/procfs tree with two NVMe controllers: 04.0 on
// the kernel's nvme driver with nvme0n1 mounted on /data, and 06.0 idle on
// vfio-pci (IOMMU group 3).
func fakeNVMeHost(t *testing.T) nvmehost.Host {
	t.Helper()
	r := nvmehosttest.New(t)
	d0 := r.Controller("0000:00:04.0", "nvme", "1")
	r.Write(filepath.Join(d0, "nvme/nvme0/model"), "Samsung SSD 970 EVO Plus 1TB\n")
	r.Write(filepath.Join(d0, "nvme/nvme0/serial"), "S4EWNX0N123456\n")
	disk := r.Disk(filepath.Join(d0, "nvme/nvme0/nvme0n1"), "259:0", 1)
	r.Write(filepath.Join(disk, "size"), "1953525168\n")
	d6 := r.Controller("0000:00:06.0", "vfio-pci", "3")
	for _, d := range []string{d0, d6} { // Samsung 970 EVO Plus IDs, not QEMU's
		r.Write(filepath.Join(d, "vendor"), "0x144d\n")
		r.Write(filepath.Join(d, "device"), "0xa808\n")
	}
	r.Write(filepath.Join(r.Proc, "self/mountinfo"), "22 1 259:0 / /data rw,relatime - ext4 /dev/nvme0n1 rw\n")
	return r.Host()
}

// TestDevicesCLI drives `strata devices` against a daemon serving a fake
// device tree: listings in text and JSON, and the exit codes of refused
// and malformed commands. The caller's own group is the admin group, so
// the admin commands reach the device checks.
func TestDevicesCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	dir := t.TempDir()
	srv, err := daemon.New(daemon.Config{ModelDirs: []string{dir}, AdminGroup: strconv.Itoa(os.Getgid()),
		Log: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: os.Stderr})})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDeviceHost(fakeNVMeHost(t))
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, []net.Listener{l}, nil) }()
	defer func() { cancel(); <-done; srv.CloseDevices() }()

	_, statErr := os.Stat(pci.VFIOContainerPath)
	noVFIO := errors.Is(statErr, os.ErrNotExist)
	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout+stderr
	}{
		{"list", []string{"devices"}, 0, "mounted: /dev/nvme0n1 on /data"},
		{"list shows the model", []string{"devices", "list"}, 0, "Samsung SSD 970 EVO Plus 1TB"},
		{"bind a mounted drive", []string{"devices", "bind", "0000:00:04.0"}, 1, "device_in_use"},
		{"bind a missing controller", []string{"devices", "bind", "0000:00:09.0"}, 5, "device_not_found"},
		{"bind without BDF", []string{"devices", "bind"}, 2, "exactly one BDF"},
		{"bad BDF", []string{"devices", "bind", "zz"}, 1, "HTTP 400"},
		{"stats, nothing held", []string{"devices", "stats"}, 0, "holds no controller"},
		{"stats of an unbound controller", []string{"devices", "stats", "0000:00:06.0"}, 1, "device_not_bound"},
		{"volume of an unbound controller", []string{"devices", "volume", "show", "0000:00:06.0", "1"}, 1, "device_not_bound"},
		{"pool write, bad NSID", []string{"devices", "pool", "write", "0000:00:06.0", "x", "m.pool"}, 2, "NSID"},
		{"pool write, missing file", []string{"devices", "pool", "write", "0000:00:06.0", "1", "m.pool"}, 5, "pool_file_not_found"},
		{"unknown subcommand", []string{"devices", "frob"}, 2, "unknown subcommand"},
		{"unbind: no such controller", []string{"devices", "unbind", "0000:00:09.0"}, 5, "device_not_found"},
		{"reset of an unbound controller", []string{"devices", "reset", "0000:00:06.0"}, 1, "device_not_bound"},
		{"reset without BDF", []string{"devices", "reset"}, 2, "exactly one BDF"},
	}
	if noVFIO {
		tests = append(tests,
			struct {
				name string
				args []string
				code int
				want string
			}{"bind without VFIO", []string{"devices", "bind", "0000:00:06.0"}, 6, "vfio_unavailable"},
			struct {
				name string
				args []string
				code int
				want string
			}{"list says VFIO is missing", []string{"devices"}, 0, "VFIO: unavailable"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runStrata(t, bin, "", append(tc.args, "--socket", sock)...)
			t.Logf("strata %s:\n%s%s", strings.Join(tc.args, " "), out, stderr)
			if code != tc.code || !strings.Contains(out+stderr, tc.want) {
				t.Fatalf("exit %d (want %d); output %q %q (want %q)", code, tc.code, out, stderr, tc.want)
			}
		})
	}
	t.Run("list --json", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "devices", "--json", "--socket", sock)
		var l api.DeviceList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Controllers) != 2 ||
			l.Controllers[0].Serial != "S4EWNX0N123456" || l.Controllers[0].Namespaces[0].Bytes != 1953525168*512 {
			t.Fatalf("exit %d: %s %s", code, out, stderr)
		}
	})
	t.Run("stats --json", func(t *testing.T) {
		out, _, code := runStrata(t, bin, "", "devices", "stats", "--json", "--socket", sock)
		var st api.DeviceStats
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Controllers == nil || len(st.Controllers) != 0 {
			t.Fatalf("exit %d: %s", code, out)
		}
	})
	t.Run("no daemon", func(t *testing.T) {
		_, stderr, code := runStrata(t, bin, "", "devices", "--socket", filepath.Join(dir, "none.sock"))
		if code != exitUnreachable {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
}

// TestPrintRoute: the tier-C route line and each refused route with its
// reason, sorted; nothing for a model with no layer on tier C.
func TestPrintRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    *api.TierCRoute
		want string
	}{
		{"none", nil, ""},
		{"nvme", &api.TierCRoute{Route: "nvme-pinned", Via: "userspace NVMe driver", Refused: map[string]string{"nvme-bar": "no GPU", "file": "not a file"}},
			"  tier C route: nvme-pinned (userspace NVMe driver)\n    file refused: not a file\n    nvme-bar refused: no GPU\n"},
		{"file", &api.TierCRoute{Route: "file"}, "  tier C route: file\n"},
	} {
		var b strings.Builder
		printRoute(&b, tc.r)
		if b.String() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}

// TestPrintPlanDetailExperts: a MoE model's expert lines under `strata
// status`: the host tier's residency and uses, then, on a GPU, the
// experts in device memory with their whole layers and the picks' split;
// no device line when the GPU holds none and computed none.
func TestPrintPlanDetailExperts(t *testing.T) {
	t.Parallel()
	plan := &api.TierPlan{DeviceBytes: 1 << 30, DeviceBudgetBytes: 8 << 30}
	host := api.ExpertStatus{Experts: 6144, Resident: 6144, ResidentBytes: 16 << 30, UsesResident: 90, HitRate: 1}
	dev := host
	dev.OnDevice, dev.DeviceBytes, dev.DeviceWholeLayers, dev.UsesDevice, dev.UsesCPU, dev.DeviceHitRate = 2550, 7<<30, 19, 30, 60, 1.0/3
	moved := dev
	moved.DeviceMoves = 128
	streamed := dev
	streamed.StreamedPicks = 45
	mapped := dev
	mapped.MappedPicks = 12
	kept := mapped
	kept.MappedWay = "pulled by the GPU (kept by trial: 5ms a pass, 7ms through the host)"
	for _, tc := range []struct {
		name string
		x    api.ExpertStatus
		want string
	}{
		{"host only", host, ""},
		{"device", dev, "  experts in device memory: 2550 (7.0 GiB; 19 whole layers, which need no host); picks of them 30, of the others 60, device hit rate 0.33\n"},
		{"device, moved", moved, "device hit rate 0.33; 128 moved in while serving\n"},
		{"device, picks over PCIe", streamed, "device hit rate 0.33; 45 of the others sent over PCIe and computed on the GPU beside the CPU\n"},
		{"device, picks pulled", mapped, "device hit rate 0.33; 12 of the others pulled over PCIe by the GPU alone\n"},
		{"device, picks pulled by trial", kept, "12 of the others pulled over PCIe by the GPU alone; at one token the others go pulled by the GPU (kept by trial: 5ms a pass, 7ms through the host)\n"},
	} {
		var b strings.Builder
		x := tc.x
		printPlanDetail(&b, api.ModelStatus{Plan: plan, Experts: &x})
		out := b.String()
		if !strings.Contains(out, "  experts: 6144 of 6144 resident") {
			t.Errorf("%s: no host expert line in %q", tc.name, out)
		}
		if got := strings.Contains(out, "experts in device memory"); got != (tc.want != "") {
			t.Errorf("%s: device line shown %v in %q", tc.name, got, out)
		}
		if tc.want != "" && !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q lacks %q", tc.name, out, tc.want)
		}
	}
}

// TestWriteExpertsDevice: strata run --stats' device line names the picks
// of experts off the device that went over PCIe, sent beside the CPU or
// pulled by the GPU alone, and the way the trial kept, and says neither
// when there were none.
func TestWriteExpertsDevice(t *testing.T) {
	t.Parallel()
	base := engine.ExpertInfo{Experts: 6144, Resident: 6144, OnDevice: 2550, DeviceBytes: 7 << 30, DeviceUses: 30, CPUUses: 60}
	streamed, mapped := base, base
	streamed.StreamedPicks = 45
	mapped.MappedPicks = 12
	host := streamed
	host.MappedWay = "through the host (kept by trial: 7ms a pass, 9ms pulled by the GPU)"
	for _, tc := range []struct {
		name   string
		x      engine.ExpertInfo
		want   string
		absent string
	}{
		{"device", base, "experts in device memory: 2550 (7.00 GiB); picks of them 30, of the others 60, device hit rate 0.33\n", "over PCIe"},
		{"picks sent over PCIe", streamed, "device hit rate 0.33; 45 of the others sent over PCIe and computed on the GPU beside the CPU\n", "pulled"},
		{"picks pulled", mapped, "device hit rate 0.33; 12 of the others pulled over PCIe by the GPU alone\n", "sent over PCIe"},
		{"the host's way kept", host, "beside the CPU; at one token the others go through the host (kept by trial: 7ms a pass, 9ms pulled by the GPU)\n", "at one token the others go pulled"},
	} {
		var b strings.Builder
		writeExperts(&b, tc.x)
		out := b.String()
		if !strings.Contains(out, tc.want) || strings.Contains(out, tc.absent) {
			t.Errorf("%s: %q, want %q and no %q", tc.name, out, tc.want, tc.absent)
		}
	}
}
