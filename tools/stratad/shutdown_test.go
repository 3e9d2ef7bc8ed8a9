package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
)

// TestShutdownGraceEndsStreams: SIGTERM with a stream in flight and a
// grace period shorter than the stream: the client reads an error event
// (or the stream's end) before the connection closes, never a torn one,
// and stratad exits. It needs a model whose stream outlasts the grace:
// the real gocode-29m (STRATA_GOCODE_GGUF; the test skips without it).
func TestShutdownGraceEndsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("builds stratad")
	}
	model := os.Getenv("STRATA_GOCODE_GGUF")
	if model == "" {
		t.Skip("STRATA_GOCODE_GGUF is not set")
	}
	dir := t.TempDir()
	stratad := filepath.Join(dir, "stratad")
	if out, err := exec.Command(goTool(t), "build", "-o", stratad, "github.com/strata-llm/strata/tools/stratad").CombinedOutput(); err != nil {
		t.Fatalf("building stratad: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "s.sock")
	dp := startStratad(t, stratad, sock, "--socket", sock, "--model", model, "--model-dir", filepath.Dir(model), "--socket-group", "",
		"--shutdown-timeout", "300ms", "--backend", "cpu")
	d, exited, logs := dp.cmd, dp.exited, dp.logs

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	name := strings.TrimSuffix(filepath.Base(model), filepath.Ext(model))
	resp, err := hc.Post("http://stratad/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+name+`","prompt":"package main\n","max_tokens":1500,"temperature":0,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	er := openai.NewEventReader(resp.Body)
	if _, err := er.Next(); err != nil {
		t.Fatalf("first event: %v\n%s", err, logs.String())
	}
	d.Process.Signal(syscall.SIGTERM)
	var last []byte
	for {
		ev, err := er.Next()
		if err == io.EOF {
			break // the stream finished within the grace
		}
		if errors.Is(err, openai.ErrNoDone) {
			if !bytes.Contains(last, []byte(`"error"`)) {
				t.Fatalf("the stream was cut without an error event; last event %s", last)
			}
			break
		}
		if err != nil {
			t.Fatalf("reading the stream: %v (last event %s)", err, last)
		}
		last = ev
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("stratad did not exit\n%s", logs.String())
	}
}
