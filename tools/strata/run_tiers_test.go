package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunStreamed drives `strata run` on a prefab pool: streamed through
// the pipeline (--tiers all-C) it prints the resident run's text exactly
// and --stats reports the plan and the pipeline's links; a GGUF cannot be
// streamed and a budget nothing fits are clear errors (exit 1); a bad
// mix or budget is a usage error (exit 2).
func TestRunStreamed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	model, pool := synthPool(t, bin, "gemma2")
	run := []string{"run", "--prompt", "Hello", "-n", "12", "--stats"}
	want, stderr, code := runStrata(t, bin, "", append(run, "--model", pool)...)
	if code != 0 {
		t.Fatalf("resident: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "pipeline: none") {
		t.Errorf("resident --stats: %q", stderr)
	}
	for _, mix := range []string{"all-C", "C,A,B,C", "all-B"} {
		got, stderr, code := runStrata(t, bin, "", append(run, "--model", pool, "--tiers", mix, "--depth", "2")...)
		if code != 0 {
			t.Fatalf("--tiers %s: exit %d: %s", mix, code, stderr)
		}
		if got != want {
			t.Errorf("--tiers %s printed %q, resident %q", mix, got, want)
		}
		for _, s := range []string{"depth 2", "pipeline:", "overlap", "GB/s", "storage→staging", "host→device slot"} {
			if !strings.Contains(stderr, s) {
				t.Errorf("--tiers %s --stats lacks %q:\n%s", mix, s, stderr)
			}
		}
		t.Logf("--tiers %s:\n%s", mix, stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--model", model, "--tiers", "all-C"}, 1, "strata model prefab"},
		{[]string{"--model", pool, "--ram", "1MiB"}, 1, "does not fit"},
		{[]string{"--model", pool, "--tiers", "A,Q"}, 2, "--tiers"},
		{[]string{"--model", pool, "--tiers", "A,C,C"}, 1, "tier mix"},
		{[]string{"--model", pool, "--ram", "much"}, 2, "--ram"},
		{[]string{"--model", pool, "--depth", "-2"}, 2, "--depth"},
	} {
		_, stderr, code := runStrata(t, bin, "", append([]string{"run", "-n", "2"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("strata run %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, stderr, c.code, c.msg)
		}
	}
}

// TestRunExperts drives `strata run` on a mixture-of-experts pool under a
// RAM budget that keeps experts on storage: the text is the resident
// run's, and --stats says where the experts are and how their uses were
// served.
func TestRunExperts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	_, pool := synthPool(t, bin, "qwen3moe")
	run := []string{"run", "--model", pool, "--prompt", "Hello", "-n", "12", "--stats", "--ctx", "64"}
	want, stderr, code := runStrata(t, bin, "", run...)
	if code != 0 || !strings.Contains(stderr, "experts: all 16 resident") && !strings.Contains(stderr, "experts: 16 of 16 resident") {
		t.Fatalf("resident: exit %d: %s", code, stderr)
	}
	got, stderr, code := runStrata(t, bin, "", append(run, "--ram", "4MiB")...)
	if code != 0 {
		t.Fatalf("--ram 4MiB: exit %d: %s", code, stderr)
	}
	if got != want {
		t.Errorf("experts on storage printed %q, resident %q", got, want)
	}
	for _, s := range []string{"of 16 resident", "read buffers", "expert uses:", "hit rate"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("--stats lacks %q:\n%s", s, stderr)
		}
	}
	t.Logf("%s", stderr)
}

// synthPool writes a tiny q8_0 synthetic model of arch with the strata
// binary bin and prefabs it, returning the GGUF and the pool.
func synthPool(t *testing.T, bin, arch string) (model, pool string) {
	t.Helper()
	dir := t.TempDir()
	model, pool = filepath.Join(dir, arch+".gguf"), filepath.Join(dir, arch+".pool")
	for _, args := range [][]string{
		{"model", "synth", "--arch", arch, "--shape", "tiny", "--type", "q8_0", "-o", model},
		{"model", "prefab", model, "-o", pool},
	} {
		if _, stderr, code := runStrata(t, bin, "", args...); code != 0 {
			t.Fatalf("strata %v: exit %d: %s", args, code, stderr)
		}
	}
	return model, pool
}
