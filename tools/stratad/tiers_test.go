package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/synth"
)

// TestTierFlags runs stratad's command in-process with a prefab pool and
// the tier flags, and checks they reach the loaded model: --tiers all-C
// streams every layer (status shows the plan and pipeline after a
// request), and bad or impossible budgets stop the daemon before it
// listens, with a usage error (exit 2) or a load error naming the cause.
func TestTierFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(src, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(dir, "tiny.pool")
	err = prefab.WritePool(g, pool, prefab.Options{})
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"stratad", "--socket-group", "", "--log-level", "error", "--model-dir", dir}

	for _, tc := range []struct {
		args  []string
		usage bool
		msg   string
	}{
		{[]string{"--model", pool, "--ram", "lots"}, true, "--ram"},
		{[]string{"--model", pool, "--vram", "0"}, true, "--vram"},
		{[]string{"--model", pool, "--depth", "-1"}, true, "--depth"},
		{[]string{"--model", pool, "--ram", "1MiB"}, false, "does not fit"},
		{[]string{"--model", src, "--tiers", "all-C"}, false, "strata model prefab"},
	} {
		args := append(append(append([]string{}, base...), "--socket", filepath.Join(dir, "bad.sock")), tc.args...)
		err := command().Run(context.Background(), args)
		var ue usageError
		if err == nil || errors.As(err, &ue) != tc.usage || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("stratad %v: %v; want usage error %v mentioning %q", tc.args, err, tc.usage, tc.msg)
		}
	}

	sock := filepath.Join(dir, "s.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- command().Run(ctx, append(append([]string{}, base...), "--socket", sock, "--model", "t="+pool, "--tiers", "all-C", "--depth", "2", "--ctx", "128"))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stratad: %v", err)
		}
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i == 200 {
			t.Fatal("stratad did not start listening")
		}
		select {
		case err := <-done:
			t.Fatalf("stratad exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://stratad/v1/completions", "application/json", strings.NewReader(`{"model":"t","prompt":"hi","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	c := client.New(sock, "")
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := st.Models[0]
	if m.Plan == nil || strings.Join(m.Plan.Layers, "") != "CC" || m.Plan.Depth != 2 || m.Pipeline == nil || m.Pipeline.Passes == 0 || m.Pipeline.Read.Bytes == 0 {
		t.Fatalf("status: plan %+v pipeline %+v", m.Plan, m.Pipeline)
	}
}
