package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunHFDirectory drives `strata run` and `strata model prefab` on a
// Hugging Face directory (synth's twin): the same text as the GGUF, the
// pool prefabbed from the directory streams it from storage unchanged,
// and streaming the directory itself names the prefab command.
func TestRunHFDirectory(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	dir := t.TempDir()
	model, hfDir, pool := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "hf"), filepath.Join(dir, "hf.pool")
	for _, args := range [][]string{
		{"model", "synth", "--arch", "mixtral", "--shape", "tiny", "--type", "f32", "-o", model, "--hf", hfDir},
		{"model", "prefab", hfDir, "-o", pool, "-q"},
	} {
		if _, stderr, code := runStrata(t, bin, "", args...); code != 0 {
			t.Fatalf("strata %v: exit %d: %s", args, code, stderr)
		}
	}
	run := []string{"run", "--prompt", "Once upon a time", "-n", "12", "--backend", "cpu"}
	want, stderr, code := runStrata(t, bin, "", append(run, "--model", model)...)
	if code != 0 {
		t.Fatalf("GGUF: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{{"--model", hfDir}, {"--model", pool}, {"--model", pool, "--tiers", "all-C", "--depth", "2"}} {
		got, stderr, code := runStrata(t, bin, "", append(run, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if got != want {
			t.Errorf("%v printed %q, the GGUF %q", args, got, want)
		}
	}
	_, stderr, code = runStrata(t, bin, "", append(run, "--model", hfDir, "--tiers", "all-C")...)
	if code != 1 || !strings.Contains(stderr, "strata model prefab "+hfDir) {
		t.Errorf("streaming the directory: exit %d, stderr %q; want 1 naming the prefab command", code, stderr)
	}
}
