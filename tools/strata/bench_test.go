package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// wellFormedSVG decodes every token of an SVG file and counts its
// elements by name.
func wellFormedSVG(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("%s is not well-formed: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

func noGPU() bool {
	if cudadrv.Load() != nil {
		return true
	}
	n, err := cudadrv.DeviceCount()
	return err != nil || n == 0
}

// TestBenchCLI drives `strata bench storage|pcie|e2e` as a user would:
// locally on a file, through a daemon, and the exit codes of what fails.
func TestBenchCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data.bin")
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(i * 29)
	}
	if err := os.WriteFile(data, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "sweep.svg")

	t.Run("storage --json --plot", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "bench", "storage", data, "--bs", "4k,64k", "--qd", "1,8", "--time", "50ms", "--json", "--plot", svg)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var res bench.StorageResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if res.Via != "local" || res.Target.Name != data || res.Target.Size != 8<<20 || len(res.Points) != 4 || res.Best < 0 {
			t.Fatalf("%+v", res)
		}
		for i, want := range [][2]int{{4096, 1}, {4096, 8}, {65536, 1}, {65536, 8}} {
			p := res.Points[i]
			l := p.LatencyUS
			if p.BlockSize != want[0] || p.QueueDepth != want[1] || p.IOs == 0 || p.GBps <= 0 || p.IOPS <= 0 || p.CPUSecondsPerGB <= 0 ||
				!(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
				t.Fatalf("point %d: %+v", i, p)
			}
		}
		els := wellFormedSVG(t, svg)
		if els["svg"] != 1 || els["path"] != 3 || els["circle"] != 4 {
			t.Fatalf("chart elements %v: want two lines (qd 1, qd 8) and four points", els)
		}
	})
	t.Run("storage table", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "bench", "storage", data, "--bs", "4k..16k", "--qd", "2", "--time", "20ms", "--pattern", "rand")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{"rand reads", "p99.9 µs", "CPU s/GB", "  4 KiB   2", "  8 KiB   2", " 16 KiB   2", "best: ", "this process's CPU time"} {
			if !strings.Contains(out, want) {
				t.Fatalf("no %q in\n%s", want, out)
			}
		}
	})

	// A daemon serving dir as its model directory.
	srv, err := daemon.New(daemon.Config{ModelDirs: []string{dir}, Log: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: os.Stderr})})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, []net.Listener{l}, nil) }()
	defer func() { cancel(); <-done; srv.CloseDevices() }()

	t.Run("storage through the daemon", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "bench", "storage", "--daemon", "--socket", sock, "data.bin", "--bs", "4k", "--qd", "1,4", "--time", "20ms", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var res bench.StorageResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if res.Via != "stratad" || res.Target.Name != data || len(res.Points) != 2 || res.Points[1].IOs == 0 {
			t.Fatalf("%+v", res)
		}
	})

	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout+stderr
	}{
		{"no target", []string{"bench", "storage"}, 2, "exactly one FILE"},
		{"bad size", []string{"bench", "storage", data, "--bs", "4q"}, 2, "--bs"},
		{"bad range", []string{"bench", "storage", data, "--qd", "8..2"}, 2, "--qd"},
		{"bad pattern", []string{"bench", "storage", data, "--pattern", "zigzag"}, 2, "--pattern"},
		{"png plot", []string{"bench", "storage", data, "--plot", "x.png"}, 2, "SVG"},
		{"bad nvme target", []string{"bench", "storage", "nvme:0000:01:00.0"}, 2, "nvme:BDF/NSID"},
		{"block larger than the file", []string{"bench", "storage", data, "--bs", "16m", "--qd", "1"}, 2, "larger than"},
		{"missing file", []string{"bench", "storage", filepath.Join(dir, "nope"), "--bs", "4k", "--qd", "1"}, exitNotFound, "no such file"},
		{"unreachable daemon", []string{"bench", "storage", "nvme:0000:01:00.0/1", "--socket", filepath.Join(dir, "none.sock")}, 3, "cannot reach stratad"},
		{"controller not held", []string{"bench", "storage", "nvme:0000:01:00.0/1", "--socket", sock, "--bs", "4k", "--qd", "1"}, 1, "device_not_bound"},
		{"file outside the model directories", []string{"bench", "storage", "--daemon", "--socket", sock, "/etc/passwd"}, 4, "path_not_allowed"},
		{"e2e lists the routes", []string{"bench", "e2e", data, "--bytes", "8m"}, 0, "nvme→GPU BAR"},
		{"e2e through the daemon", []string{"bench", "e2e", "--daemon", "--socket", sock, "--json"}, 0, `"via": "stratad"`},
	}
	if noGPU() {
		tests = append(tests,
			struct {
				name string
				args []string
				code int
				want string
			}{"pcie without a GPU", []string{"bench", "pcie", "--sizes", "64k..1m"}, 6, "strata: CUDA unavailable: "},
			struct {
				name string
				args []string
				code int
				want string
			}{"pcie through a daemon without a GPU", []string{"bench", "pcie", "--daemon", "--socket", sock}, 6, "CUDA unavailable: "},
			struct {
				name string
				args []string
				code int
				want string
			}{"e2e measures nothing without a GPU", []string{"bench", "e2e", data}, 0, "not measured: CUDA unavailable"})
	} else {
		t.Log("a GPU is present: the CUDA-unavailable exits are not checked here")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runStrata(t, bin, "", tc.args...)
			if code != tc.code || !strings.Contains(out+stderr, tc.want) {
				t.Fatalf("exit %d (want %d), output lacks %q:\n%s%s", code, tc.code, tc.want, out, stderr)
			}
		})
	}
}

func TestBenchArgs(t *testing.T) {
	t.Parallel()
	sizes := []struct {
		in   string
		want []int64
		err  bool
	}{
		{"4k,64k", []int64{4096, 65536}, false},
		{"4k..64k", []int64{4096, 8192, 16384, 32768, 65536}, false},
		{"3k..5k", []int64{4096}, false},
		{"1..9223372036854775807k", nil, true},
		{"64k..4k", nil, true},
		{"5k..7k", nil, true},
		{"0", nil, true},
		{"4q", nil, true},
		{"", nil, true},
	}
	for _, tc := range sizes {
		got, err := parseSizeList(tc.in)
		if (err != nil) != tc.err || (!tc.err && !slices.Equal(got, tc.want)) {
			t.Errorf("parseSizeList(%q) = %v, %v", tc.in, got, err)
		}
	}
	ints := []struct {
		in   string
		want []int
		err  bool
	}{
		{"1,8", []int{1, 8}, false},
		{"1..32", []int{1, 2, 4, 8, 16, 32}, false},
		{"3..3", nil, true},
		{"3..4", []int{4}, false},
		{"0,1", nil, true},
		{"8..2", nil, true},
		{"x", nil, true},
	}
	for _, tc := range ints {
		got, err := parseIntList(tc.in)
		if (err != nil) != tc.err || (!tc.err && !slices.Equal(got, tc.want)) {
			t.Errorf("parseIntList(%q) = %v, %v", tc.in, got, err)
		}
	}
	if got, err := parseIntList("1..9223372036854775807"); err != nil || len(got) != 63 {
		t.Errorf("huge range: %d values, %v", len(got), err)
	}
	targets := []struct {
		in   string
		bdf  string
		nsid int
		nvme bool
		err  bool
	}{
		{"/data/model.pool", "", 0, false, false},
		{"nvme:0000:01:00.0/1", "0000:01:00.0", 1, true, false},
		{"nvme:01:00.0/2", "01:00.0", 2, true, false},
		{"nvme:0000:01:00.0", "", 0, true, true},
		{"nvme:0000:01:00.0/0", "", 0, true, true},
		{"nvme:/1", "", 0, true, true},
	}
	for _, tc := range targets {
		bdf, nsid, isNVMe, err := parseNVMeTarget(tc.in)
		if bdf != tc.bdf || nsid != tc.nsid || isNVMe != tc.nvme || (err != nil) != tc.err {
			t.Errorf("parseNVMeTarget(%q) = %q %d %v %v", tc.in, bdf, nsid, isNVMe, err)
		}
	}
}
