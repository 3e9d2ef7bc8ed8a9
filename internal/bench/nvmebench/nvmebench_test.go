package nvmebench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/nvme"
)

// softController opens the software controller with a 4 KiB namespace of
// 8 MiB filled with a pattern.
func softController(t *testing.T) (*nvmetest.Controller, *nvme.Controller) {
	t.Helper()
	sc := nvmetest.New(nvmetest.Options{Namespaces: []nvmetest.Namespace{{BlockSize: 4096, Blocks: 2048}}})
	c, err := nvme.Open(context.Background(), nvme.Config{MMIO: sc, DMA: sc, IOQueues: 4, QueueDepth: 64})
	if err != nil {
		sc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close(context.Background())
		sc.Close()
	})
	data := sc.Data(1)
	for i := range data {
		data[i] = byte(i*31 + i>>12)
	}
	return sc, c
}

func TestSweepOnSoftController(t *testing.T) {
	t.Parallel()
	sc, c := softController(t)
	tg, err := NewTarget(c, sc, 1, "0000:00:06.0")
	if err != nil {
		t.Fatal(err)
	}
	info := tg.Info()
	if info.Kind != "nvme" || info.Name != "0000:00:06.0/nsid 1" || info.Size != 8<<20 || info.Align != 4096 || !info.Direct || info.Model != "nvmetest Ctrl" {
		t.Fatalf("info %+v", info)
	}
	before := c.Stats()
	res, err := bench.Storage(context.Background(), tg, bench.StorageOptions{BlockSizes: []int{4096, 256 << 10}, QueueDepths: []int{1, 8},
		Duration: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var counted uint64
	for _, p := range res.Points {
		l := p.LatencyUS
		if p.IOs == 0 || p.GBps <= 0 || !(l.Min <= l.P50 && l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Fatalf("point %+v", p)
		}
		counted += p.Bytes
	}
	after := c.Stats()
	// The driver saw at least the reads the sweep counted (more: warm-up
	// and reads after each window), and no errors.
	if after.ReadBytes-before.ReadBytes < counted || after.Errors != before.Errors {
		t.Fatalf("controller read %d bytes (%d errors), sweep counted %d", after.ReadBytes-before.ReadBytes, after.Errors, counted)
	}
	if _, err := bench.Storage(context.Background(), tg, bench.StorageOptions{BlockSizes: []int{512}}); !errors.Is(err, bench.ErrBadOptions) {
		t.Fatalf("512-byte blocks on a 4 KiB namespace: %v", err)
	}
	if _, err := NewTarget(c, sc, 9, "x"); err == nil {
		t.Fatal("namespace 9 accepted")
	}
}

func TestSweepReadError(t *testing.T) {
	t.Parallel()
	sc, c := softController(t)
	sc.InjectError(1, nvme.OpRead, 100, 1, nvme.StatusUnrecoveredRead)
	tg, _ := NewTarget(c, sc, 1, "bad")
	_, err := bench.Storage(context.Background(), tg, bench.StorageOptions{BlockSizes: []int{4096}, QueueDepths: []int{4}, Duration: 2 * time.Second})
	if !errors.Is(err, nvme.ErrMedia) || !strings.Contains(err.Error(), "bad/nsid 1") {
		t.Fatalf("err %v", err)
	}
}

func TestStager(t *testing.T) {
	t.Parallel()
	sc, c := softController(t)
	tg, _ := NewTarget(c, sc, 1, "s")
	const chunk = 64 << 10
	st, mem, release, err := tg.Stager(2, chunk)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if len(mem) < 2*chunk || st.Size() != 8<<20 || st.Align() != 4096 {
		t.Fatalf("staging %d bytes, size %d align %d", len(mem), st.Size(), st.Align())
	}
	for slot, off := range []int64{0, 1 << 20} {
		if err := st.Read(context.Background(), slot, off, chunk); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mem[slot*chunk:(slot+1)*chunk], sc.Data(1)[off:off+chunk]) {
			t.Fatalf("slot %d does not hold the namespace's bytes at %d", slot, off)
		}
	}
}
