package hw

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

func tmpFile(t *testing.T, size int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data")
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i * 17)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFileSweep runs the storage sweep on a temporary file through the
// O_DIRECT file source.
func TestFileSweep(t *testing.T) {
	t.Parallel()
	p := tmpFile(t, 4<<20)
	ft, err := OpenFile(p, 64<<10, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Close()
	info := ft.Info()
	if info.Kind != "file" || info.Name != p || info.Size != 4<<20 {
		t.Fatalf("info %+v", info)
	}
	if !info.Direct {
		t.Logf("%s refuses O_DIRECT: the sweep reads the page cache", filepath.Dir(p))
	}
	res, err := bench.Storage(context.Background(), ft, bench.StorageOptions{BlockSizes: []int{4096, 64 << 10}, QueueDepths: []int{1, 4},
		Duration: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 4 || res.Best < 0 || res.Target.Direct != info.Direct || (len(res.Notes) > 0) == info.Direct {
		t.Fatalf("result %+v", res)
	}
	for _, pt := range res.Points {
		l := pt.LatencyUS
		if pt.IOs == 0 || pt.GBps <= 0 || !(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Fatalf("point %+v", pt)
		}
	}
	if info.Direct {
		if _, err := bench.Storage(context.Background(), ft, bench.StorageOptions{BlockSizes: []int{1000}}); !errors.Is(err, bench.ErrBadOptions) {
			t.Fatalf("unaligned O_DIRECT block: %v", err)
		}
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "missing"), 4096, 1, nil); err == nil {
		t.Fatal("missing file opened")
	}
}

// TestE2EWithoutGPU: on a host where CUDA cannot open a device (this
// machine, CI), every route is listed with the reason and none is
// measured; with a verdict, its reasons are the routes' reasons.
func TestE2EWithoutGPU(t *testing.T) {
	t.Parallel()
	if g, err := OpenGPU(0); err == nil {
		g.Close()
		t.Skip("a GPU is present: the no-GPU report is not what this host gives")
	} else if !errors.Is(err, cudadrv.ErrUnavailable) {
		t.Fatalf("OpenGPU: %v (want ErrUnavailable)", err)
	}
	p := tmpFile(t, 1<<20)
	v := &bench.HostVerdict{Kind: "host-pinned", NVMe: "0000:01:00.0", Why: "the NVMe DMAs into locked host memory",
		NotChosen: []string{"peer-bar to gpu 0000:02:00.0: no gdrdrv to map GPU memory", "dma-buf: kernel too old"}}
	res, err := E2E(context.Background(), E2EOptions{File: p, Verdict: v, Where: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if res.GPU != "" || len(res.Routes) != 3 || !strings.HasPrefix(res.HostRoute, "host-pinned: ") {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Routes {
		if r.Measured || r.Available || r.Reason == "" {
			t.Fatalf("route %+v", r)
		}
	}
	if r := res.Routes[0]; r.Kind != bench.RouteFilePinned || r.Source != p || !strings.Contains(r.Reason, "CUDA unavailable") {
		t.Fatalf("file route %+v", r)
	}
	if r := res.Routes[1]; r.Kind != bench.RouteNVMePinned || !strings.Contains(r.Reason, "stratad") || !strings.Contains(strings.Join(r.Facts, " "), "locked host memory") {
		t.Fatalf("nvme route %+v", r)
	}
	if r := res.Routes[2]; r.Kind != bench.RouteNVMeBAR || !strings.Contains(r.Reason, "no gdrdrv") || strings.Contains(r.Reason, "dma-buf") {
		t.Fatalf("BAR route %+v", r)
	}
	// No verdict: said so.
	res, err = E2E(context.Background(), E2EOptions{VerdictErr: errors.New("no setup"), Where: "stratad"})
	if err != nil || len(res.Routes) != 3 || !strings.Contains(strings.Join(res.Notes, " "), "no setup") ||
		!strings.Contains(res.Routes[0].Reason, "no file named") || !strings.Contains(res.Routes[1].Reason, "bind one") {
		t.Fatalf("%+v %v", res, err)
	}
}
