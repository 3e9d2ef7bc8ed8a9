package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-llm/strata/internal/synth"
)

// TestBackendFlag drives the real binaries: stratad picks the backend
// itself (auto) and `strata status` says which and why; --backend cuda
// without a usable GPU refuses to start with "CUDA unavailable: …" (exit
// 1); a bad --backend is a usage error (exit 2); `strata load --backend
// cuda` fails with exit 6 while the daemon keeps serving; `strata run
// --backend cuda` exits 6 too.
// Sequential: its stratad opens GPU 0 where there is one.
func TestBackendFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	gt := goTool(t)
	for _, pkg := range []string{"stratad", "strata"} {
		cmd := exec.Command(gt, "build", "-o", filepath.Join(dir, pkg), "github.com/strata-llm/strata/tools/"+pkg)
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	models := filepath.Join(dir, "models")
	model := filepath.Join(models, "tiny.gguf")
	if err := os.Mkdir(models, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := synth.Write(model, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	stratad, strata := filepath.Join(dir, "stratad"), filepath.Join(dir, "strata")
	sock := filepath.Join(dir, "strata.sock")
	run := func(bin string, args ...string) (string, int) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), exitCode(err)
	}

	if out, code := run(stratad, "--socket", sock, "--model", model, "--backend", "gpu"); code != 2 || !strings.Contains(out, `unknown backend "gpu"`) {
		t.Fatalf("--backend gpu: exit %d: %s", code, out)
	}
	dp := startStratad(t, stratad, sock, "--socket", sock, "--model", model, "--model-dir", models, "--socket-group", "", "--log-format", "json")
	d, exited, logs := dp.cmd, dp.exited, dp.logs

	out, code := run(strata, "status", "--socket", sock)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, out)
	}
	// A second daemon on the live socket fails on the socket at once,
	// before it would load its model (which does not exist).
	if out, code := run(stratad, "--socket", sock, "--model", filepath.Join(dir, "missing.gguf"), "--socket-group", ""); code == 0 ||
		!strings.Contains(out, "in use") || strings.Contains(out, "missing.gguf") {
		t.Fatalf("a second stratad on the live socket: exit %d: %s", code, out)
	}
	gpu := strings.Contains(out, "  backend: cuda on ")
	if !gpu && !strings.Contains(out, "  backend: cpu (CUDA unavailable: ") && !strings.Contains(out, "  backend: cpu (CUDA backend failed: ") {
		t.Fatalf("status does not say which backend runs the model, or why not the GPU:\n%s", out)
	}
	if !gpu && !strings.Contains(logs.String(), `"reason":"CUDA unavailable: `) {
		t.Errorf("the daemon's log does not say why the CPU runs the model:\n%s", logs.String())
	}
	if gpu {
		t.Log("a GPU is usable here; the refusals without one are not exercised")
	} else {
		if out, code := run(strata, "load", "--socket", sock, "--name", "forced", "--backend", "cuda", "tiny.gguf"); code != 6 || !strings.Contains(out, "CUDA unavailable: ") {
			t.Fatalf("strata load --backend cuda: exit %d: %s", code, out)
		}
		if out, code := run(strata, "chat", "--socket", sock, "-n", "3", "hi"); code != 0 {
			t.Fatalf("chat after the refused load: exit %d: %s", code, out)
		}
		if out, code := run(strata, "run", "--model", model, "-n", "3", "--backend", "cuda"); code != 6 || !strings.Contains(out, "CUDA unavailable: ") {
			t.Fatalf("strata run --backend cuda: exit %d: %s", code, out)
		}
		if out, code := run(stratad, "--socket", filepath.Join(dir, "other.sock"), "--model", model, "--backend", "cuda"); code != 1 || !strings.Contains(out, "CUDA unavailable: ") {
			t.Fatalf("stratad --backend cuda: exit %d: %s", code, out)
		}
	}
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("stratad: %v\n%s", err, logs.String())
	}
}
