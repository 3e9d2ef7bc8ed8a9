package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/internal/daemon/peer"
)

// ConnLimits bound what clients' connections may hold: without them a
// client that dribbles a request, or idles after its answer, keeps a
// descriptor and a goroutine for ever, and a few dozen such clients starve
// everyone of descriptors, root included.
type ConnLimits struct {
	// ReadHeaderTimeout is how long a request's line and headers may take.
	ReadHeaderTimeout time.Duration
	// ReadTimeout is how long a request's body may take, counted from the
	// end of its headers (also bounding the drain of a body the daemon
	// refused without reading).
	ReadTimeout time.Duration
	// WriteTimeout is how long one write to a client may block: a client
	// that stops reading its stream for longer loses it. Streams
	// themselves may last as long as generation does.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	IdleTimeout time.Duration
	// MaxConns caps open connections in total; one more is answered 503.
	// Root's Unix connections are exempt, so that root can always reach
	// its daemon.
	MaxConns int
	// MaxConnsPerPeer caps one peer's open connections (a Unix peer is its
	// uid, a TCP peer its address); one more is answered 429.
	MaxConnsPerPeer int
	// MaxRequestsPerPeer caps the sequences one peer may have queued or
	// running on one model, so that one peer cannot take the whole queue;
	// one more is answered 429. 0 means three quarters of the model's
	// batch and queue.
	MaxRequestsPerPeer int
}

// DefaultConnLimits are the connection limits stratad starts with. The
// total cap is lowered at start to fit the descriptors the process may
// open.
func DefaultConnLimits() ConnLimits {
	return ConnLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxConns:          1024,
		MaxConnsPerPeer:   128,
	}
}

// fill gives zero fields their defaults and fits MaxConns to the
// descriptor limit (half of it: models, pools, devices and logs need the
// rest).
func (c *ConnLimits) fill() {
	d := DefaultConnLimits()
	for _, f := range []struct{ v, d *time.Duration }{
		{&c.ReadHeaderTimeout, &d.ReadHeaderTimeout}, {&c.ReadTimeout, &d.ReadTimeout},
		{&c.WriteTimeout, &d.WriteTimeout}, {&c.IdleTimeout, &d.IdleTimeout},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if c.MaxConns <= 0 {
		c.MaxConns = d.MaxConns
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/2 < uint64(c.MaxConns) {
			c.MaxConns = max(int(rl.Cur/2), 8)
		}
	}
	if c.MaxConnsPerPeer <= 0 {
		c.MaxConnsPerPeer = d.MaxConnsPerPeer
	}
	c.MaxConnsPerPeer = min(c.MaxConnsPerPeer, c.MaxConns)
}

// connTable counts open connections in total and per peer.
type connTable struct {
	mu      sync.Mutex
	total   int
	perPeer map[string]int
	// requests counts queued or running sequences per model and peer.
	requests map[string]int
}

// peerID names a peer for the per-peer caps: a Unix peer by its uid (one
// user's processes share its allowance), a TCP peer by its address.
func peerID(p authz.Peer) string {
	switch {
	case p.Unix:
		return "uid:" + strconv.FormatUint(uint64(p.Cred.UID), 10)
	case p.Addr != "":
		if host, _, err := net.SplitHostPort(p.Addr); err == nil {
			return "ip:" + host
		}
		return "ip:" + p.Addr
	}
	return "unknown"
}

// limitListener admits connections within the ConnLimits, knows each
// one's peer from the moment it is accepted, and bounds every write.
type limitListener struct {
	net.Listener
	s    *Server
	unix bool
	// lastLog rate-limits the logs of refusals and accept failures, which a
	// flood would otherwise multiply (unix nanoseconds).
	lastLog atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// http.Server retries; the operator must hear of it, loudly.
				if l.logNow() {
					l.s.log.Error("out of file descriptors: connections are not being accepted",
						"addr", l.Addr().String(), "open_connections", l.s.conns.open(), "error", err)
				}
			}
			return nil, err
		}
		pr := authz.Peer{Addr: c.RemoteAddr().String()}
		if l.unix {
			cred, err := peer.FromConn(c)
			if err != nil {
				l.s.log.Warn("no peer credentials; treating as anonymous", "error", err)
				pr = authz.Peer{}
			} else {
				pr = authz.Peer{Unix: true, Cred: cred}
			}
		}
		key := peerID(pr)
		if pr.Unix && pr.Cred.UID == 0 {
			// Root is not counted: its connections neither meet the caps
			// nor take places from others.
			return &limitConn{Conn: c, peer: pr, wt: l.s.cfg.Conn.WriteTimeout}, nil
		}
		if status, msg := l.s.conns.admit(key, l.s.cfg.Conn); status != 0 {
			if l.logNow() {
				l.s.log.Warn("connection refused", "peer", pr.String(), "status", status, "reason", msg)
			}
			l.s.metrics.requests.WithLabelValues("connection", strconv.Itoa(status)).Inc()
			go refuseConn(c, status, msg)
			continue
		}
		return &limitConn{Conn: c, s: l.s, key: key, peer: pr, wt: l.s.cfg.Conn.WriteTimeout}, nil
	}
}

func (l *limitListener) logNow() bool {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	return now-last > int64(time.Second) && l.lastLog.CompareAndSwap(last, now)
}

// admit counts a new connection of peer key, or says why it is refused
// (status 429 or 503).
func (t *connTable) admit(key string, lim ConnLimits) (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.perPeer == nil {
		t.perPeer = map[string]int{}
	}
	switch {
	case t.perPeer[key] >= lim.MaxConnsPerPeer:
		return http.StatusTooManyRequests, fmt.Sprintf("this peer has %d connections open, the most one peer may have", t.perPeer[key])
	case t.total >= lim.MaxConns:
		return http.StatusServiceUnavailable, fmt.Sprintf("the server has %d connections open, the most it accepts", t.total)
	}
	t.total++
	t.perPeer[key]++
	return 0, ""
}

func (t *connTable) release(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total--
	if t.perPeer[key]--; t.perPeer[key] <= 0 {
		delete(t.perPeer, key)
	}
}

func (t *connTable) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// admitRequest counts n sequences of peer key on model; release undoes it.
// limit <= 0 means no limit.
func (t *connTable) admitRequest(model, key string, n, limit int) (release func(), held int, ok bool) {
	k := model + "\x00" + key
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.requests == nil {
		t.requests = map[string]int{}
	}
	if limit > 0 && t.requests[k]+n > limit {
		return nil, t.requests[k], false
	}
	t.requests[k] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.requests[k] -= n; t.requests[k] <= 0 {
				delete(t.requests, k)
			}
		})
	}, 0, true
}

// refuseConn answers a connection the caps refused with an OpenAI-shaped
// error and Retry-After, without reading its request, and closes it; the
// whole exchange is bounded in time.
func refuseConn(c net.Conn, status int, msg string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	code := "too_many_connections"
	typ := openai.TypeRateLimit
	if status == http.StatusServiceUnavailable {
		code, typ = "server_busy", openai.TypeUnavailable
	}
	rec := &bufResponse{h: http.Header{}}
	openai.WriteError(rec, openai.Errorf(status, typ, "", code, "%s; retry later", msg))
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	rec.h.Set("Connection", "close")
	rec.h.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	_ = rec.h.Write(&b)
	b.WriteString("\r\n")
	b.Write(rec.body.Bytes())
	if _, err := c.Write(b.Bytes()); err != nil {
		return
	}
	// Closing with the request unread would reset the connection and could
	// lose the answer: half-close, then read what the client sent.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// bufResponse is an http.ResponseWriter into memory, for refuseConn.
type bufResponse struct {
	h    http.Header
	body bytes.Buffer
}

func (r *bufResponse) Header() http.Header         { return r.h }
func (r *bufResponse) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *bufResponse) WriteHeader(int)             {}

// limitConn is an admitted connection: it knows its peer, bounds each
// write, and gives its place back when closed.
type limitConn struct {
	net.Conn
	s     *Server // nil: not counted (root)
	key   string
	peer  authz.Peer
	wt    time.Duration
	close sync.Once
}

func (c *limitConn) Write(p []byte) (int, error) {
	if c.wt > 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.wt))
	}
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection, as http.Server does before
// closing one whose request it did not read to the end (so the answer is
// not lost to a reset); net.Conn does not carry the method, so the
// wrapper must.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.s != nil {
		c.close.Do(func() { c.s.conns.release(c.key) })
	}
	return err
}

// bodyDeadline bounds the reading of a request's body (ReadTimeout): the
// deadline is set when the handler starts and lifted by readBody once the
// body is in, so that it never cuts a long stream (a read deadline that
// passes while a handler runs cancels its request).
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.Conn.ReadTimeout))
		}
		next.ServeHTTP(w, r)
	})
}
