package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
)

// logBuf collects a server's log for a test to read while it runs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bufLogger(lb *logBuf) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: lb})
}

// A failed authentication is logged with the TCP peer's address.
func TestFailedAuthLoggedWithAddress(t *testing.T) {
	t.Parallel()
	lb := &logBuf{}
	h := start(t, opts{tcp: true, cfg: Config{Log: bufLogger(lb)}})
	for _, auth := range []string{"", "Bearer wrong"} {
		req, _ := http.NewRequest("GET", h.tcp+"/v1/models", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%q: %d", auth, resp.StatusCode)
		}
	}
	logs := lb.String()
	if strings.Count(logs, "authentication failed") != 2 || !strings.Contains(logs, "peer=\"tcp(127.0.0.1:") {
		t.Fatalf("401s not logged with the peer's address:\n%s", logs)
	}
}

// Status shows the daemon's pid and the models' paths to administrators
// only.
func TestStatusHidesPathsFromUsers(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true})
	req, _ := http.NewRequest("GET", h.tcp+api.PathStatus, nil)
	req.Header.Set("Authorization", "Bearer test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	var st api.Status
	if err := json.Unmarshal(raw.Bytes(), &st); err != nil || len(st.Models) == 0 {
		t.Fatalf("status %s: %v", raw.Bytes(), err)
	}
	if st.Admin || st.PID != 0 || st.Models[0].Path != "" || strings.Contains(raw.String(), modelDir) {
		t.Fatalf("a key holder's status shows the pid or paths: %s", raw.Bytes())
	}
	if os.Getuid() == 0 {
		adm, err := h.c.Status(context.Background())
		if err != nil || !adm.Admin || adm.PID != os.Getpid() || adm.Models[0].Path == "" {
			t.Fatalf("root's status lacks the pid or paths: %+v %v", adm, err)
		}
	}
}

// A 5xx is logged in full and reaches the client without server paths.
func TestServerErrorsHidePaths(t *testing.T) {
	t.Parallel()
	lb := &logBuf{}
	s := &Server{log: bufLogger(lb)}
	const msg = "layer 3: read /var/lib/strata/models/big.pool (/proc/self/fd/7): input/output error"
	r := httptest.NewRequest("POST", "/v1/completions", nil)
	e := s.logFailed(r, openai.AsError(errors.New(msg)))
	if e.Status != 500 || strings.Contains(e.Message, "/var") || strings.Contains(e.Message, "/proc") ||
		!strings.Contains(e.Message, "big.pool") || !strings.Contains(e.Message, "layer 3") {
		t.Fatalf("client sees %q", e.Message)
	}
	if logs := lb.String(); !strings.Contains(logs, "[ERROR]") || !strings.Contains(logs, "/var/lib/strata/models/big.pool") {
		t.Fatalf("500 not logged in full:\n%s", logs)
	}
	dev := s.logFailed(r, openai.AsError(errors.New("opening /dev/vfio/vfio: no such file")))
	if !strings.Contains(dev.Message, "/dev/vfio/vfio") {
		t.Fatalf("a device node was hidden: %q", dev.Message)
	}
	// 4xx messages are the client's own business and pass unchanged.
	bad := openai.BadRequest("x", "file /a/b missing")
	if s.logFailed(r, bad).Message != bad.Message {
		t.Fatal("a 4xx message was changed")
	}
}

// emfileListener fails every Accept as a process out of descriptors does.
type emfileListener struct{ net.Listener }

func (emfileListener) Accept() (net.Conn, error) {
	return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// Running out of descriptors is logged as an error, not at info.
func TestFDExhaustionLogged(t *testing.T) {
	t.Parallel()
	lb := &logBuf{}
	s := &Server{log: bufLogger(lb)}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	l := &limitListener{Listener: emfileListener{real}, s: s}
	for range 3 {
		if _, err := l.Accept(); !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("accept: %v", err)
		}
	}
	logs := lb.String()
	if strings.Count(logs, "[ERROR] out of file descriptors") != 1 {
		t.Fatalf("want one error (rate-limited) for EMFILE:\n%s", logs)
	}
}

// A handler that panics is logged as an error with its stack and answered
// with a 500 in the API's shape, not dropped with an info line.
func TestHandlerPanicLogged(t *testing.T) {
	t.Parallel()
	lb := &logBuf{}
	s := &Server{log: bufLogger(lb), metrics: newMetrics()}
	h := s.logRequests(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/models", nil))
	if rec.Code != 500 {
		t.Fatalf("status %d", rec.Code)
	}
	checkError(t, rec.Body.Bytes(), openai.TypeServer, "internal_error")
	if logs := lb.String(); !strings.Contains(logs, "[ERROR] request handler panicked") || !strings.Contains(logs, "boom") {
		t.Fatalf("panic not logged as an error:\n%s", logs)
	}
}
