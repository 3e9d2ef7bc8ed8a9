package engine_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/tier"
)

// TestDefaultHostBudget: with no host budget given, a load plans with the
// memory it found when it began, before it copied the GGUF (a reading
// taken after the copy leaves the copy's bytes out: a GGUF larger than
// half of memory failed to load on the CPU, though its plan, as strata
// plan showed it, fit); and it refuses, before copying, a GGUF that does
// not fit, naming the pool that would stream it.
func TestDefaultHostBudget(t *testing.T) {
	t.Parallel()
	path := tinyGGUF(t, "q8_0")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const total = 10 << 30 // a tenth is under a GiB: the reserve is 1 GiB
	mem := func(avail int64) tier.MemInfo { return tier.MemInfo{Total: total, Available: avail} }
	reserve := tier.HostReserve(mem(0))
	for _, tc := range []struct {
		name  string
		avail int64 // at the first reading; every later one has the file's size less
		err   bool
	}{
		{"fits", reserve + st.Size() + 64<<20, false},
		{"one byte short", reserve + st.Size() - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var reads atomic.Int64
			o := engine.WithMemInfo(engine.Options{Backend: engine.BackendCPU, Context: 64, Links: defaultLinks()}, func() (tier.MemInfo, error) {
				if reads.Add(1) == 1 {
					return mem(tc.avail), nil
				}
				return mem(tc.avail - st.Size()), nil
			})
			e, err := engine.OpenWith(context.Background(), path, o)
			if tc.err {
				if err == nil {
					e.Close()
					t.Fatal("opened a GGUF larger than the memory available")
				}
				if !errors.Is(err, engine.ErrNeedsPool) || !strings.Contains(err.Error(), "strata model prefab") {
					t.Fatalf("error %v, want %v naming the prefab", err, engine.ErrNeedsPool)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got, want := e.Plan().Device.Budget, tier.DefaultHostBudget(mem(tc.avail)); got != want || reads.Load() != 1 {
				t.Fatalf("planned with %d bytes after %d readings, want %d (the first reading)", got, reads.Load(), want)
			}
		})
	}
}
