package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
)

// freePort returns a loopback address no one listens on (for now).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// longChat is a chat stream the tiny model cannot end by itself (its
// special tokens banned) that runs to its token limit.
func longChat(extra string) string {
	var bias []string
	for id := 496; id < 512; id++ {
		bias = append(bias, fmt.Sprintf(`"%d":-100`, id))
	}
	return `{"model":"tiny","messages":[{"role":"user","content":"go on"}],"max_tokens":230,"temperature":0,"stream":true,` +
		extra + `"logit_bias":{` + strings.Join(bias, ",") + `}}`
}

// TestShutdownSignals: SIGTERM while 40 streams run over the socket and
// 40 over TCP, with a grace shorter than they are: each ends with [DONE]
// or an error event saying the server is shutting down, none torn, three
// runs; stratad exits 0. Then a second signal, while the graceful wait
// holds on a client that reads nothing, exits at once.
func TestShutdownSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds stratad")
	}
	dir := t.TempDir()
	stratad, _ := buildBoth(t, dir)
	model := tinyModel(t, dir)
	for run := range 3 {
		sock := filepath.Join(dir, fmt.Sprintf("s%d.sock", run))
		addr := freePort(t)
		dp := startStratad(t, stratad, sock, "--socket", sock, "--model", model, "--model-dir", dir, "--socket-group", "",
			"--listen", addr, "--api-key", "k", "--shutdown-timeout", "150ms", "--max-batch", "4", "--max-queue", "100", "--backend", "cpu", "--block-trace=false")
		unixHC := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		const n = 40
		var wg, started sync.WaitGroup
		var mu sync.Mutex
		var torn []string
		cut := 0
		for i := range 2 * n {
			wg.Add(1)
			started.Add(1)
			go func() {
				defer wg.Done()
				hc, url := unixHC, "http://stratad"
				if i >= n {
					hc, url = &http.Client{}, "http://"+addr
				}
				req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(longChat("")))
				req.Header.Set("Authorization", "Bearer k")
				resp, err := hc.Do(req)
				started.Done()
				fail := func(s string) {
					mu.Lock()
					torn = append(torn, fmt.Sprintf("stream %d: %s", i, s))
					mu.Unlock()
				}
				if err != nil {
					fail(err.Error())
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode != 200 {
					b, _ := io.ReadAll(resp.Body)
					fail(fmt.Sprintf("status %d %s", resp.StatusCode, b))
					return
				}
				er := openai.NewEventReader(resp.Body)
				var last []byte
				for {
					d, err := er.Next()
					switch {
					case err == io.EOF:
						return
					case errors.Is(err, openai.ErrNoDone):
						if !bytes.Contains(last, []byte(`"server_shutting_down"`)) {
							fail(fmt.Sprintf("ended without [DONE] after %s", last))
						}
						mu.Lock()
						cut++
						mu.Unlock()
						return
					case err != nil:
						fail(fmt.Sprintf("%v after %s", err, last))
						return
					}
					last = d
				}
			}()
		}
		started.Wait()
		dp.cmd.Process.Signal(syscall.SIGTERM)
		wg.Wait()
		for _, s := range torn {
			t.Errorf("run %d: %s", run, s)
		}
		if cut == 0 {
			t.Errorf("run %d: no stream was running when the grace ran out: the run proves nothing", run)
		}
		select {
		case err := <-dp.exited:
			if err != nil {
				t.Errorf("run %d: stratad exited with %v\n%s", run, err, dp.logs.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: stratad did not exit\n%s", run, dp.logs.String())
		}
		t.Logf("run %d: %d of %d streams cut by the shutdown, %d torn", run, cut, 2*n, len(torn))
	}

	// A client that reads nothing keeps its handler blocked in a write; the
	// graceful wait would last the write timeout.
	sock := filepath.Join(dir, "second.sock")
	dp := startStratad(t, stratad, sock, "--socket", sock, "--model", model, "--model-dir", dir, "--socket-group", "",
		"--shutdown-timeout", "60s", "--write-timeout", "60s", "--backend", "cpu", "--block-trace=false")
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := longChat(`"logprobs":true,"top_logprobs":20,`)
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	time.Sleep(300 * time.Millisecond) // the stream fills the socket's buffers
	dp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-dp.exited:
		t.Fatalf("stratad exited during the grace: %v\n%s", err, dp.logs.String())
	case <-time.After(500 * time.Millisecond):
	}
	t0 := time.Now()
	dp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-dp.exited:
		if exitCode(err) != exitError || !strings.Contains(dp.logs.String(), "second signal") {
			t.Errorf("after a second signal: %v\n%s", err, dp.logs.String())
		}
		t.Logf("exited %v after the second signal", time.Since(t0).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("a second signal did not end stratad\n%s", dp.logs.String())
	}
}
