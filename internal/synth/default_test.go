package synth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
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
