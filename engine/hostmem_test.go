package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/safetensors"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/synth"
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

// TestServedModelOutlivesItsFiles: a model served from a GGUF or a Hugging
// Face directory keeps its weights when its files are cut to nothing
// meanwhile (a download or a copy over them): the same logits after as
// before, where weights used in place from a shared mapping would kill the
// process with SIGBUS. And a directory larger than the memory available is
// refused before it is copied, naming the pool that would stream it.
func TestServedModelOutlivesItsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, hfDir := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "hf")
	if err := synth.Write(path, synth.Options{Arch: "qwen3", Shape: "tiny", Type: "f32", Seed: 4, HFDir: hfDir}); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(hfDir, "*.safetensors"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no safetensors in %s (%v)", hfDir, err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		path  string
		files []string
	}{{"gguf", path, []string{path}}, {"hf", hfDir, files}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.OpenWith(ctx, tc.path, engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			prompt := e.Tok.Encode("Once upon a time", true, false)
			want, _ := greedyLogits(t, e.Model, prompt, 2)
			saved := map[string][]byte{}
			for _, f := range tc.files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				saved[f] = b
				if err := os.Truncate(f, 0); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				for f, b := range saved {
					os.WriteFile(f, b, 0o644)
				}
			})
			got, _ := greedyLogits(t, e.Model, prompt, 2)
			for s := range want {
				if !slices.Equal(got[s], want[s]) {
					t.Fatalf("step %d: logits changed once the files were cut", s)
				}
			}
		})
	}
	t.Run("hf too large", func(t *testing.T) {
		n, err := safetensors.DirSize(hfDir)
		if err != nil || n <= 0 {
			t.Fatalf("DirSize %d, %v", n, err)
		}
		const total = 10 << 30
		avail := tier.HostReserve(tier.MemInfo{Total: total}) + n - 1
		o := engine.WithMemInfo(engine.Options{Backend: engine.BackendCPU, Context: 64}, func() (tier.MemInfo, error) {
			return tier.MemInfo{Total: total, Available: avail}, nil
		})
		e, err := engine.OpenWith(ctx, hfDir, o)
		if err == nil {
			e.Close()
			t.Fatal("opened a directory larger than the memory available")
		}
		if !errors.Is(err, engine.ErrNeedsPool) || !strings.Contains(err.Error(), "strata model prefab") {
			t.Fatalf("error %v, want %v naming the prefab", err, engine.ErrNeedsPool)
		}
	})
}
