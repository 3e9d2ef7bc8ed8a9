package synth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/internal/safefs"
)

// storiesSHA256 is the published stories260K.gguf's checksum
// (../shared/models/SHA256SUMS): the embedded default is that file unchanged.
const storiesSHA256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"

func TestDefaultIsStories260K(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256(DefaultGGUF())
	if got := hex.EncodeToString(sum[:]); got != storiesSHA256 {
		t.Errorf("embedded default model sha256 %s, want stories260K's %s", got, storiesSHA256)
	}
}

// TestDefaultPath: the default model is written to the cache once, found
// there after, and rewritten when the cached file differs (a truncated or
// altered copy never loads in its place).
func TestDefaultPath(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	p, created, err := DefaultPath()
	if err != nil {
		t.Fatal(err)
	}
	if !created || filepath.Base(p) != DefaultName {
		t.Fatalf("first call: %s, created %v", p, created)
	}
	check := func() {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, defaultGGUF) {
			t.Fatalf("%s differs from the embedded model", p)
		}
	}
	check()
	if p2, created, err := DefaultPath(); err != nil || created || p2 != p {
		t.Fatalf("second call: %s, created %v, %v", p2, created, err)
	}
	if err := os.WriteFile(p, defaultGGUF[:1000], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, created, err := DefaultPath(); err != nil || !created {
		t.Fatalf("after truncation: created %v, %v", created, err)
	}
	check()
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".default-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestDefaultPathCache: the default model's cache is a directory of ours
// that no one else can write, and what is found there is loaded only if it
// is a regular file of ours: a directory anyone could create first, or a
// temporary file opened with O_TRUNC through a symlink planted under its
// name, would let a local user choose what root serves or overwrites.
func TestDefaultPathCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the planted files must belong to another user: needs root to chown")
	}
	const nobody = 65534
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := DefaultName
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		fails bool
	}{
		{"fresh", func(t *testing.T, dir string) {}, false},
		{"someone else's directory", func(t *testing.T, dir string) {
			must(t, os.Mkdir(dir, 0o777))
			must(t, os.Chown(dir, nobody, nobody))
		}, true},
		{"a symlink under the old temporary name", func(t *testing.T, dir string) {
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.Symlink(victim, filepath.Join(dir, name+".tmp")))
		}, false},
		{"someone else's model", func(t *testing.T, dir string) {
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.WriteFile(filepath.Join(dir, name), []byte("GGUF planted"), 0o644))
			must(t, os.Chown(filepath.Join(dir, name), nobody, nobody))
		}, true},
		{"a symlink as the model", func(t *testing.T, dir string) {
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.Symlink(victim, filepath.Join(dir, name)))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "strata")
			tc.setup(t, dir)
			t.Setenv("CACHE_DIRECTORY", dir)
			p, _, err := DefaultPath()
			if b, _ := os.ReadFile(victim); string(b) != "root only" {
				t.Fatalf("the victim file was overwritten: %q", b)
			}
			if tc.fails {
				if !errors.Is(err, safefs.ErrUnsafe) {
					t.Fatalf("DefaultPath: %s, %v; want an error wrapping safefs.ErrUnsafe", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := safefs.CheckOwned(p); err != nil {
				t.Fatal(err)
			}
			// Cached: the second call finds it.
			if p2, created, err := DefaultPath(); err != nil || created || p2 != p {
				t.Fatalf("second call: %s %v %v", p2, created, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
