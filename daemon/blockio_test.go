package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/blocktrace"
	"github.com/strata-llm/strata/internal/hostmem"
)

// TestBlockIOStatus starts the daemon's block tracer and reads 32 MiB with
// O_DIRECT from a file on a real disk: status must show that disk's reads
// and /metrics the tracer's counters. Where BPF cannot load (no root, no
// BTF), status must say why and the daemon must keep serving.
func TestBlockIOStatus(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	h.srv.StartBlockTrace()
	defer h.srv.stopBlockTrace()

	status := func() api.Status {
		code, b := h.get(t, api.PathStatus)
		if code != 200 {
			t.Fatalf("status: %d %s", code, b)
		}
		var st api.Status
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := status()
	if st.Block == nil {
		t.Fatal("status has no block_io section after StartBlockTrace")
	}
	if !st.Block.Enabled {
		if st.Block.Note == "" {
			t.Fatal("block tracing is off and status does not say why")
		}
		t.Skipf("block tracing unavailable here, and status says so: %s", st.Block.Note)
	}

	dir := os.Getenv("STRATA_BLOCKTRACE_DIR")
	if dir == "" {
		dir = "/var/tmp"
	}
	_, disk, err := blocktrace.DiskOf("", dir)
	if err != nil {
		t.Skipf("%s is not on a block device (set STRATA_BLOCKTRACE_DIR): %v", dir, err)
	}
	// The counter of bytes read from disk: status's rates cover the
	// sampler's last interval, which need not span all of the reads on a
	// loaded machine; the counter counts every byte.
	readBytes := func() float64 {
		code, b := h.get(t, "/metrics")
		if code != 200 {
			t.Fatalf("metrics: %d", code)
		}
		var sum float64
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "strata_block_bytes_total{") || !strings.Contains(line, `device="`+filepath.Base(disk)+`"`) || !strings.Contains(line, `op="read"`) {
				continue
			}
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
		return sum
	}
	f, err := os.CreateTemp(dir, "strata-blockio-*")
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	defer os.Remove(path)
	const size = 32 << 20
	if _, err := f.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	df, err := hostmem.OpenDirect(path)
	if err != nil {
		t.Skipf("O_DIRECT not supported on %s: %v", dir, err)
	}
	defer df.Close()
	mem, err := hostmem.Alloc(1<<20, hostmem.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Free()
	buf := mem.Bytes()

	// The kernel's block_rq_complete tracepoint now and then does not fire
	// for one request of many under concurrent I/O (see blocktrace's
	// TestCountsDirectReads), so a short count spoils an attempt; three
	// short attempts in a row fail.
	counted := false
	for attempt := 1; attempt <= 3; attempt++ {
		before := readBytes()
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := df.ReadAt(buf, off); err != nil {
				t.Fatal(err)
			}
		}
		if attempt == 1 {
			st = status()
			var got *api.BlockDevice
			for i := range st.Block.Devices {
				if st.Block.Devices[i].Device == disk {
					got = &st.Block.Devices[i]
				}
			}
			if got == nil || got.ReadMBps <= 0 || got.ReadIOPS <= 0 || got.ReadP50Nanos <= 0 {
				t.Fatalf("status shows no reads on %s after 32 MiB of O_DIRECT reads: %+v", disk, st.Block.Devices)
			}
		}
		// The last completions may reach the tracer's maps a moment after
		// the reads return.
		read := readBytes() - before
		for deadline := time.Now().Add(3 * time.Second); read < size && time.Now().Before(deadline); read = readBytes() - before {
			time.Sleep(50 * time.Millisecond)
		}
		if read >= size {
			counted = true
			break
		}
		t.Logf("attempt %d: %s: the read counter grew by %.0f bytes over the %d read", attempt, disk, read, size)
	}
	if !counted {
		t.Errorf("%s: the read counter fell short of the %d bytes read in all 3 attempts", disk, size)
	}
	code, b := h.get(t, "/metrics")
	if code != 200 || !strings.Contains(string(b), `strata_block_bytes_total{`) || !strings.Contains(string(b), filepath.Base(disk)) {
		t.Errorf("/metrics lacks the block tracer's counters for %s", disk)
	}
}
