package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-llm/strata/internal/buildinfo"
	"github.com/strata-llm/strata/internal/synth"
)

// goTool finds the go command that is running the tests.
func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no go command to build the binaries with")
	}
	return p
}

// TestBinaries builds stratad and strata and drives them the way scripts
// and users do: the `stratad --socket --model [--listen --api-key]`
// contract, the client's commands and exit codes, refusal to clobber a
// live socket, JSON logs, and a clean SIGTERM.
// Sequential: it frees a 127.0.0.1:0 port and hands its number to stratad, which a parallel test could take meanwhile.
func TestBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	gt := goTool(t)
	for _, pkg := range []string{"stratad", "strata"} {
		cmd := exec.Command(gt, "build", "-o", filepath.Join(dir, pkg), "github.com/strata-llm/strata/tools/"+pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	model := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(model, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", "strata.sock")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	stratad := filepath.Join(dir, "stratad")
	strata := filepath.Join(dir, "strata")
	// Both binaries say which build they are.
	for _, bin := range []string{stratad, strata} {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), filepath.Base(bin)+" version "+buildinfo.Version+" (") {
			t.Fatalf("%s --version: %v %q", filepath.Base(bin), err, out)
		}
	}
	// Without a key, TCP is refused at the command line.
	if code := exitCode(exec.Command(stratad, "--socket", sock, "--model", model, "--listen", addr).Run()); code != 2 {
		t.Fatalf("--listen without --api-key exited %d, want 2", code)
	}

	dp := startStratad(t, stratad, sock, "--socket", sock, "--model", model, "--listen", addr, "--api-key", "sekret", "--socket-group", "")
	d, exited, logs := dp.cmd, dp.exited, dp.logs

	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", st.Mode(), err)
	}

	run := func(stdin string, env []string, args ...string) (string, int) {
		cmd := exec.Command(strata, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := exitCode(cmd.Run())
		return out.String() + errb.String(), code
	}
	tests := []struct {
		name  string
		stdin string
		env   []string
		args  []string
		code  int
		want  string
	}{
		{"models json", "", nil, []string{"models", "--json", "--socket", sock}, 0, `"id": "tiny"`},
		{"models via env", "", []string{"STRATA_SOCKET=" + sock}, []string{"models"}, 0, "tiny"},
		{"status", "", []string{"STRATA_SOCKET=" + sock}, []string{"status"}, 0, "layers: 0-1 A"},
		{"status json", "", nil, []string{"status", "--json", "--socket", sock}, 0, `"pipeline": null`},
		{"chat from stdin", "hello\nand again\n", nil, []string{"chat", "--socket", sock, "-n", "4", "--seed", "1"}, 0, ""},
		{"chat json", "", nil, []string{"chat", "--socket", sock, "-n", "3", "--json", "hi"}, 0, `"object": "chat.completion"`},
		{"complete", "", nil, []string{"complete", "--socket", sock, "-n", "3", "--json", "--logprobs", "2", "Once"}, 0, `"text_completion"`},
		{"unknown model", "", nil, []string{"chat", "--socket", sock, "--model", "nope", "hi"}, 5, "model_not_found"},
		{"no daemon", "", nil, []string{"models", "--socket", filepath.Join(dir, "nothing.sock")}, 3, "cannot reach"},
		{"path outside model dirs", "", nil, []string{"load", "--socket", sock, "/etc/passwd"}, 4, "path_not_allowed"},
		{"bad flag", "", nil, []string{"models", "--nope"}, 2, ""},
		{"tcp url", "", []string{"STRATA_API_KEY=sekret"}, []string{"models", "--socket", "http://" + addr}, 0, "tiny"},
		{"tcp wrong key", "", []string{"STRATA_API_KEY=wrong"}, []string{"models", "--socket", "http://" + addr}, 4, "invalid_api_key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(tc.stdin, tc.env, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (want %d), output %q (want %q)", code, tc.code, out, tc.want)
			}
		})
	}

	// A second daemon must not take over the live socket.
	second := exec.Command(stratad, "--socket", sock, "--model", model, "--socket-group", "")
	out, err := second.CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "in use") {
		t.Fatalf("second daemon: exit %d, %s", exitCode(err), out)
	}
	if _, code := run("", nil, "models", "--socket", sock); code != 0 {
		t.Fatal("first daemon disturbed by the second")
	}

	// TCP with the key, with the OpenAI wire format.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	req.Header.Set("Authorization", "Bearer sekret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var cc map[string]any
	json.NewDecoder(resp.Body).Decode(&cc)
	resp.Body.Close()
	if resp.StatusCode != 200 || cc["object"] != "chat.completion" {
		t.Fatalf("tcp chat: %d %v", resp.StatusCode, cc)
	}

	// Graceful stop.
	d.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("stratad exited with %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("stratad did not stop on SIGTERM")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	// Logs are JSON when stderr is not a terminal.
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	lines := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m["@message"] == nil {
			t.Fatalf("log line is not hclog JSON: %s", sc.Text())
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("no logs")
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// daemonProc is a stratad a test started: its process, its stderr and
// the result of its exit.
type daemonProc struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan error
}

// startStratad starts bin with args (bin's socket at sock), kills it when
// the test ends, and returns once sock accepts connections.
func startStratad(t *testing.T, bin, sock string, args ...string) *daemonProc {
	t.Helper()
	p := &daemonProc{cmd: exec.Command(bin, args...), logs: &lockedBuffer{}, exited: make(chan error, 1)}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	waitSocket(t, sock, p.exited, p.logs)
	return p
}

func waitSocket(t *testing.T, sock string, exited chan error, logs *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("stratad exited early: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("socket never appeared\n%s", logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
