package blocktrace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	var h Histogram
	h[0] = 1  // < 2 µs
	h[3] = 8  // [8, 16) µs
	h[10] = 1 // [1024, 2048) µs
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 2 * time.Microsecond},
		{0.05, 2 * time.Microsecond},
		{0.1, 2 * time.Microsecond},
		{0.11, 16 * time.Microsecond},
		{0.9, 16 * time.Microsecond},
		{0.95, 2048 * time.Microsecond},
		{1, 2048 * time.Microsecond},
		{7, 2048 * time.Microsecond},
	} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (Histogram{}).Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile = %v", got)
	}
	if h.Count() != 10 {
		t.Errorf("Count = %d", h.Count())
	}
}

func TestDeviceSubAndRates(t *testing.T) {
	t.Parallel()
	d := Dev{259, 0}
	a := Device{Dev: d}
	a.Ops[Read] = OpStats{IOs: 10, Bytes: 10 << 20}
	a.Ops[Read].Latency[4] = 10
	b := a
	b.Ops[Read] = OpStats{IOs: 30, Bytes: 30 << 20}
	b.Ops[Read].Latency[4] = 25
	b.Ops[Read].Latency[5] = 5
	b.Errors = 1
	delta := b.Sub(a)
	if delta.Op(Read).IOs != 20 || delta.Op(Read).Bytes != 20<<20 || delta.Op(Read).Latency.Count() != 20 || delta.Errors != 1 {
		t.Fatalf("Sub = %+v", delta)
	}
	// A counter that went backwards (tracer restarted) clamps at zero.
	if back := a.Sub(b); back.Op(Read).IOs != 0 || back.Op(Read).Bytes != 0 {
		t.Fatalf("backwards Sub = %+v", back)
	}
	t0 := time.Unix(100, 0)
	s0 := Snapshot{Taken: t0, Devices: []Device{a}}
	s1 := Snapshot{Taken: t0.Add(2 * time.Second), Devices: []Device{b}}
	r := s1.Rates(s0, d)[Read]
	if r.IOPS != 10 || r.BytesPerSec != 10<<20 {
		t.Fatalf("Rates = %+v", r)
	}
	if z := s1.Rates(s1, d)[Read]; z.IOPS != 0 {
		t.Fatalf("zero interval rate = %+v", z)
	}
	if got := s1.Device(Dev{8, 0}); got.Dev != (Dev{8, 0}) || got.Op(Read).IOs != 0 {
		t.Fatalf("missing device = %+v", got)
	}
}

func TestKernelDev(t *testing.T) {
	t.Parallel()
	if got := kernelDev(259<<20 | 3); got != (Dev{259, 3}) {
		t.Fatalf("kernelDev = %v", got)
	}
}

// TestDiskOfPartition resolves a partition to its disk through a fake
// /sys/dev/block, using the real device of a temp dir as the starting point.
func TestDiskOfPartition(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := statDev(dir)
	if err != nil {
		t.Skip(err)
	}
	sys := t.TempDir()
	disk := filepath.Join(sys, "devices", "virtual", "block", "fakedisk")
	part := filepath.Join(disk, "fakedisk1")
	if err := os.MkdirAll(part, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(disk, "dev"), []byte("259:0\n"), 0o644)
	os.WriteFile(filepath.Join(part, "partition"), []byte("1\n"), 0o644)
	os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755)
	if err := os.Symlink(part, filepath.Join(sys, "dev", "block", d.String())); err != nil {
		t.Fatal(err)
	}
	got, name, err := DiskOf(sys, dir)
	if err != nil || got != (Dev{259, 0}) || name != "fakedisk" {
		t.Fatalf("DiskOf = %v %q %v, want 259:0 fakedisk", got, name, err)
	}
	if _, _, err := DiskOf(t.TempDir(), dir); err == nil {
		t.Fatal("DiskOf with no sysfs entry succeeded")
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	d := Dev{259, 0}
	a := Device{Dev: d, Name: "nvme0n1"}
	b := a
	b.Ops[Read] = OpStats{IOs: 100, Bytes: 100e6}
	b.Ops[Read].Latency[6] = 100 // [64,128) µs
	idle := Device{Dev: Dev{8, 0}, Name: "sda"}
	t0 := time.Unix(0, 0)
	got := Snapshot{Taken: t0.Add(2 * time.Second), Devices: []Device{b, idle}}.Summarize(Snapshot{Taken: t0, Devices: []Device{a, idle}})
	if len(got) != 1 {
		t.Fatalf("Summarize = %+v, want only the busy device", got)
	}
	s := got[0]
	if s.Device != "nvme0n1" || s.ReadMBps != 50 || s.ReadIOPS != 50 || s.ReadP50 != 128*time.Microsecond || s.ReadP99 != 128*time.Microsecond {
		t.Fatalf("summary = %+v", s)
	}
}
