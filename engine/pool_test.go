package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/internal/daemon/sched"
	"github.com/strata-llm/strata/internal/synth"
)

// TestOpenPool prefabs a tiny model (keep) and requires engine.Open on the
// pool (detected by its magic) to generate exactly what the GGUF generates,
// and a damaged pool to be refused naming the extent.
func TestOpenPool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(src, synth.Options{Arch: "gemma2", Shape: "tiny", Type: "q8_0", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(dir, "tiny.pool")
	err = prefab.WritePool(m, pool, prefab.Options{Type: prefab.TypeKeep})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	gen := func(path string) string {
		e, err := engine.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if (e.Pool() != nil) != strings.HasSuffix(path, ".pool") {
			t.Fatalf("%s: opened as the wrong kind", path)
		}
		res, err := sched.Generate(context.Background(), e.Backend(), e.Tok, sched.Request{
			Prompt: e.Tok.Encode("The fastest way", true, false), MaxTokens: 12, Sample: sample.Greedy()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}
	if a, b := gen(src), gen(pool); a != b || a == "" {
		t.Fatalf("GGUF generated %q, pool %q", a, b)
	}

	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	e1 := p.Extent(1)
	p.Close()
	b, err := os.ReadFile(pool)
	if err != nil {
		t.Fatal(err)
	}
	b[e1.Offset+7] ^= 1
	bad := filepath.Join(dir, "bad.pool")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Open(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "extent layer 1") {
		t.Fatalf("damaged pool: %v", err)
	}
}
