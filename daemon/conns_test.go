package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
)

// closedWithin reports whether the server ends c (EOF or reset, after
// whatever it answers) within d.
func closedWithin(c net.Conn, d time.Duration) (bool, string) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, string(b)
	}
	return true, string(b)
}

// Clients that dribble their headers or body, or idle, are cut off within
// the timeouts; a keyless TCP client is answered 401 before its body is
// read and its connection closed.
func TestSlowClientsCut(t *testing.T) {
	t.Parallel()
	lim := ConnLimits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	h := start(t, opts{tcp: true, cfg: Config{Conn: lim}})
	addr := strings.TrimPrefix(h.tcp, "http://")
	for _, tc := range []struct {
		name, network, send, want string
	}{
		{"headers dribbled", "tcp", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", ""},
		{"body dribbled", "tcp", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key\r\nContent-Length: 1000\r\n\r\n{\"model\":", ""},
		{"body dribbled, socket", "unix", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":", ""},
		{"keyless body", "tcp", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"model\":", "401 Unauthorized"},
		{"idle after an answer", "tcp", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "200 OK"},
		{"idle after a 401", "tcp", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "401 Unauthorized"},
		{"idle, socket", "unix", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "200 OK"},
		{"silent", "tcp", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := addr
			if tc.network == "unix" {
				a = h.sock
			}
			c, err := net.Dial(tc.network, a)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			closed, got := closedWithin(c, 3*time.Second)
			if !closed {
				t.Fatalf("connection still open after %v (read %q)", time.Since(t0), got)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
		})
	}
	if code, b := h.post(t, "/v1/chat/completions", hello); code != 200 {
		t.Fatalf("after the slow clients: %d %s", code, b)
	}
}

// dialFrom connects to addr from the loopback address local, so that one
// test can be several TCP peers.
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// request sends one keep-alive request on c and returns the response.
func request(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key\r\n\r\n", path)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// One peer's connections are capped (429), all of them too (503), both
// with Retry-After and an OpenAI-shaped error; root's socket connections
// pass the total cap, and closed connections free their places.
func TestConnectionCaps(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true, cfg: Config{Conn: ConnLimits{MaxConns: 3, MaxConnsPerPeer: 2}}})
	addr := strings.TrimPrefix(h.tcp, "http://")
	held := func(local string) net.Conn {
		c := dialFrom(t, local, addr)
		if resp := request(t, c, bufio.NewReader(c), "/v1/models"); resp.StatusCode != 200 {
			t.Fatalf("connection from %s: %d", local, resp.StatusCode)
		}
		return c
	}
	refused := func(local string, status int, code string) {
		t.Helper()
		c := dialFrom(t, local, addr)
		resp := request(t, c, bufio.NewReader(c), "/v1/models")
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != status || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("from %s: %d (Retry-After %q) %s, want %d", local, resp.StatusCode, resp.Header.Get("Retry-After"), b, status)
		}
		typ := openai.TypeRateLimit
		if status == 503 {
			typ = openai.TypeUnavailable
		}
		checkError(t, b, typ, code)
	}
	a1 := held("127.0.0.1")
	held("127.0.0.1")
	refused("127.0.0.1", 429, "too_many_connections")
	held("127.0.0.2")
	refused("127.0.0.3", 503, "server_busy")
	if os.Getuid() == 0 {
		if code, _ := h.get(t, "/health"); code != 200 {
			t.Fatalf("root over the socket at the cap: %d", code)
		}
	}
	a1.Close()
	deadline := time.Now().Add(3 * time.Second)
	for h.srv.conns.open() > 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	held("127.0.0.3")
}

// A write to a client that reads nothing fails after WriteTimeout instead
// of blocking its handler for ever.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer b.Close()
	s := &Server{}
	s.conns.admit("k", ConnLimits{MaxConns: 1, MaxConnsPerPeer: 1})
	c := &limitConn{Conn: a, s: s, key: "k", wt: 100 * time.Millisecond}
	defer c.Close()
	t0 := time.Now()
	_, err := c.Write([]byte("data: unread\n\n"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("write to a client that reads nothing: %v", err)
	}
	if took := time.Since(t0); took > 2*time.Second {
		t.Fatalf("write blocked %v", took)
	}
	c.Close()
	if n := s.conns.open(); n != 0 {
		t.Fatalf("%d connections counted after close", n)
	}
}

// One peer holding its share of a model's queue is refused more (429
// peer_queue_share, Retry-After) while another peer is served.
func TestPeerQueueShare(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true, cfg: Config{Limits: Limits{MaxBatch: 1, MaxQueue: 8}, Conn: ConnLimits{MaxRequestsPerPeer: 2}}})
	bias := []string{}
	for id := 496; id < 512; id++ {
		bias = append(bias, fmt.Sprintf(`"%d":-100`, id))
	}
	// A stream of 230 tokens with 20 alternatives each is larger than the
	// socket's buffers: unread, it holds its place until cancelled.
	long := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":230,"temperature":0,"stream":true,` +
		`"logprobs":true,"top_logprobs":20,"logit_bias":{` + strings.Join(bias, ",") + `}}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://stratad/v1/chat/completions", strings.NewReader(long))
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("long request: %d %s", resp.StatusCode, b)
		}
	}
	resp, err := h.hc.Post("http://stratad/v1/chat/completions", "application/json", strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request of one peer: %d %s", resp.StatusCode, b)
	}
	checkError(t, b, openai.TypeRateLimit, "peer_queue_share")
	req, _ := http.NewRequest("POST", h.tcp+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"x","max_tokens":2}`))
	req.Header.Set("Authorization", "Bearer test-key")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("another peer: %d %s", resp.StatusCode, b)
	}
}
