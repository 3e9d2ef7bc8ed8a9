package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-llm/strata/internal/synth"
)

// buildBoth builds stratad and strata into dir.
func buildBoth(t *testing.T, dir string) (stratad, strata string) {
	t.Helper()
	gt := goTool(t)
	for _, pkg := range []string{"stratad", "strata"} {
		cmd := exec.Command(gt, "build", "-o", filepath.Join(dir, pkg), "github.com/strata-llm/strata/tools/"+pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	return filepath.Join(dir, "stratad"), filepath.Join(dir, "strata")
}

func tinyModel(t *testing.T, dir string) string {
	p := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(p, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSdNotify runs stratad with NOTIFY_SOCKET pointing at a datagram
// socket and checks it reports READY=1 once serving and STOPPING=1 on
// SIGTERM, as Type=notify units need.
func TestSdNotify(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	stratad, strata := buildBoth(t, dir)
	model := tinyModel(t, dir)
	ns := filepath.Join(dir, "notify.sock")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ns, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	sock := filepath.Join(dir, "s.sock")
	d := exec.Command(stratad, "--socket", sock, "--model", model, "--socket-group", "")
	d.Env = append(os.Environ(), "NOTIFY_SOCKET="+ns)
	var logs lockedBuffer
	d.Stderr = &logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Process.Kill()
	read := func() string {
		pc.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 512)
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, logs.String())
		}
		return string(buf[:n])
	}
	if msg := read(); !strings.Contains(msg, "READY=1") {
		t.Fatalf("first notification %q", msg)
	}
	// READY means serving: the socket answers at once.
	if out, err := exec.Command(strata, "models", "--socket", sock).CombinedOutput(); err != nil {
		t.Fatalf("not serving after READY: %v %s", err, out)
	}
	d.Process.Signal(syscall.SIGTERM)
	if msg := read(); !strings.Contains(msg, "STOPPING=1") {
		t.Fatalf("second notification %q", msg)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
}

// TestSocketActivation starts stratad through systemd-socket-activate,
// which passes a listening socket as LISTEN_FDS like stratad.socket does.
func TestSocketActivation(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds binaries")
	}
	sa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate not installed (package systemd)")
	}
	dir := t.TempDir()
	stratad, strata := buildBoth(t, dir)
	model := tinyModel(t, dir)
	sock := filepath.Join(dir, "activated.sock")
	// --socket points elsewhere: it must be ignored in favour of the fd.
	unused := filepath.Join(dir, "unused.sock")
	d := exec.Command(sa, "-l", sock, stratad, "--socket", unused, "--model", model, "--socket-group", "")
	var logs lockedBuffer
	d.Stderr = &logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("activation socket never appeared\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, err := exec.Command(strata, "chat", "--socket", sock, "-n", "3", "hello").CombinedOutput()
	if err != nil {
		t.Fatalf("chat through the activated socket: %v\n%s\n%s", err, out, logs.String())
	}
	if _, err := os.Stat(unused); err == nil {
		t.Fatal("stratad created --socket although systemd passed one")
	}
	if !strings.Contains(logs.String(), "using sockets from systemd") {
		t.Fatalf("logs do not mention activation:\n%s", logs.String())
	}
	d.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop")
	}
}
