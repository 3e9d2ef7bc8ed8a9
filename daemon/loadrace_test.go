package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/internal/pathrace"
	"github.com/strata-llm/strata/internal/synth"
)

// TestLoadPathRace loads a model through the admin API while another
// goroutine swaps the directory holding it for a symlink to a root-only
// directory, and the file for a FIFO, as an admin-group member can. The
// root-only file is not a model and starts with "SECRET": a load that
// reached it (at its path check or at any later open) would fail with its
// bytes in the error or serve it. Not one may, and no load may hang.
// The tiny model loads in well under a millisecond, so all 5000 run in CI.
func TestLoadPathRace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the admin API needs uid 0 or the admin group; run as root (CI does) to exercise it in-process")
	}
	t.Parallel()
	dir := t.TempDir()
	models, secret := filepath.Join(dir, "models"), filepath.Join(dir, "secret")
	for _, d := range []string{filepath.Join(models, "sub"), secret} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	inside := filepath.Join(models, "sub", "m.gguf")
	if err := synth.Write(inside, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(inside)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models, "f.gguf"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The same size as the model, so that only its contents tell them apart.
	junk := []byte(strings.Repeat("SECRET", len(b)/6+1)[:len(b)])
	if err := os.WriteFile(filepath.Join(secret, "m.gguf"), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	h := start(t, opts{cfg: Config{ModelDirs: []string{models}, Links: pinnedLinks()}})

	stop := pathrace.Swap(models, secret, 50*time.Microsecond)
	n := 5000
	if testing.Short() {
		n = 500
	}
	var loaded, refused, escapes int
	for i := range n {
		p := "sub/m.gguf"
		if i%2 == 1 {
			p = "f.gguf"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := h.c.Load(ctx, api.LoadRequest{Path: p, Name: "raced", MaxBatch: 1, Context: 64})
		cancel()
		if err != nil {
			ae, ok := err.(*client.APIError)
			if !ok {
				_ = stop()
				t.Fatalf("load %d: %v (a hang or a dropped connection)", i, err)
			}
			if strings.Contains(ae.Message, "SECR") || ae.Status == 422 {
				escapes++
				t.Logf("load %d reached the outside file: %d %s", i, ae.Status, ae.Message)
			}
			refused++
			continue
		}
		loaded++
		if _, err := h.srv.Unload("raced"); err != nil {
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d loads: %d loaded, %d refused, %d escapes", n, loaded, refused, escapes)
	if escapes != 0 {
		t.Fatalf("%d of %d loads reached a file outside the model directory", escapes, n)
	}
	if loaded == 0 {
		t.Fatal("no load succeeded: the race tested nothing")
	}
}

// TestLoadErrorNamesTheFile: a load fails with the file's path in the
// model directory, not the /proc/self/fd path it was read through.
func TestLoadErrorNamesTheFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the admin API needs uid 0 or the admin group; run as root (CI does) to exercise it in-process")
	}
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "junk.gguf"), []byte("not a model at all, but long enough to be read"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, opts{cfg: Config{ModelDirs: []string{dir}, Links: pinnedLinks()}})
	_, err := h.c.Load(context.Background(), api.LoadRequest{Path: "junk.gguf", Name: "junk"})
	ae, ok := err.(*client.APIError)
	if !ok || ae.Status != 422 || !strings.Contains(ae.Message, filepath.Join(dir, "junk.gguf")) || strings.Contains(ae.Message, "/proc/self/fd") {
		t.Fatalf("load of a non-model: %v; want a 422 naming %s", err, filepath.Join(dir, "junk.gguf"))
	}
}

// TestLoadSplitModelParts: every part of a split model is opened once
// beneath the model directory, as the first is: the parts load through the
// admin API, and a later part that is a symlink out of the directory is
// refused like a first part would be.
func TestLoadSplitModelParts(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the admin API needs uid 0 or the admin group; run as root (CI does) to exercise it in-process")
	}
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	parts := splitStories(t, outside, dir)
	h := start(t, opts{cfg: Config{ModelDirs: []string{dir}, Links: pinnedLinks()}})
	st, err := h.c.Load(context.Background(), api.LoadRequest{Path: filepath.Base(parts[0]), Name: "split", Backend: "cpu"})
	if err != nil || st.Layers != 5 || st.Path != parts[0] {
		t.Fatalf("split load: %+v, %v", st, err)
	}
	// Part 2 moved out of the directory and linked back in.
	moved := filepath.Join(outside, filepath.Base(parts[1]))
	if err := os.Rename(parts[1], moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, parts[1]); err != nil {
		t.Fatal(err)
	}
	_, err = h.c.Load(context.Background(), api.LoadRequest{Path: filepath.Base(parts[0]), Name: "split2", Backend: "cpu"})
	ae, ok := err.(*client.APIError)
	if !ok || ae.Status != 403 || !strings.Contains(ae.Message, "part 2 of 2") || strings.Contains(ae.Message, "strata-load-") {
		t.Fatalf("a part linked from outside: %v; want 403 naming part 2", err)
	}
}
