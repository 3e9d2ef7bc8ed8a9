package daemon

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/internal/daemon/sched"
	"github.com/strata-llm/strata/nvmehost"
)

// Limits bound what one request may ask of the daemon.
type Limits struct {
	// MaxBodyBytes caps a request body (413 beyond it).
	MaxBodyBytes int64
	// MaxPromptTokens caps an encoded prompt (400 beyond it); 0 means the
	// model's context.
	MaxPromptTokens int
	// MaxTokens caps max_tokens and is the default completion length
	// (clamped to what the context leaves).
	MaxTokens int
	// MaxQueue and MaxBatch are each model's scheduler defaults.
	MaxQueue int
	MaxBatch int
	// PrefillChunk is how many prompt tokens a sequence feeds per pass.
	PrefillChunk int
}

// DefaultLimits are the limits stratad starts with.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 1 << 20, MaxTokens: 4096, MaxQueue: 64, MaxBatch: 16, PrefillChunk: 128}
}

// Config configures a Server.
type Config struct {
	// ModelDirs are the directories the admin API may load models from.
	ModelDirs []string
	// AdminGroup names the group (or gid) whose members may load and
	// unload models; "" means root only.
	AdminGroup string
	// APIKey is required as "Authorization: Bearer KEY" on TCP listeners.
	APIKey string
	// CORSOrigins are the web origins whose browser pages may call the
	// API ("*" for any); none means no cross-origin access. A page still
	// needs the API key on TCP.
	CORSOrigins []string
	// Limits bound requests; zero fields take DefaultLimits' values.
	Limits Limits
	// Conn bounds clients' connections; zero fields take
	// DefaultConnLimits' values.
	Conn ConnLimits
	// ShutdownTimeout is how long in-flight requests may run after a
	// shutdown starts before they are cancelled with an error.
	ShutdownTimeout time.Duration
	// Links pins the link speeds the tier planner uses; nil lets the
	// engine measure them (quickly) the first time a model must stream,
	// once for the daemon's life (the Server's engine.LinkCache).
	Links *tier.Links
	// Verify is when streamed (tier-C) extents are checked against the
	// pool's checksums (default: every read).
	Verify stream.VerifyMode
	// Backend is the backend of loads that name none: "auto" (or ""),
	// "cpu" or "cuda" (see engine.Options.Backend).
	Backend string
	// Log receives the daemon's structured logs.
	Log hclog.Logger
	// wrapSource, when set, wraps the storage source of every model the
	// server loads (engine.Options.WrapSource): the tests' fault injection
	// (stream.FaultySource), to prove a failed read fails its requests
	// with a clear error and the daemon serves the next ones.
	wrapSource func(tier.Source) tier.Source
}

// Server is stratad's HTTP server and model registry.
type Server struct {
	cfg     Config
	log     hclog.Logger
	policy  authz.Policy
	metrics *metrics
	started time.Time
	handler http.Handler

	// devices holds the NVMe controllers the daemon has bound (devices.go).
	// It is set once in New and never replaced, so reading the pointer
	// needs no lock; the registry guards its own state.
	devices *deviceRegistry
	// bench admits one benchmark at a time (bench.go: a second gets 429
	// bench_busy rather than skewing both measurements).
	bench sync.Mutex
	// benchMem reads the host's memory for the benches' budget check
	// (nil: tier.ReadMemInfo; tests pin it).
	benchMem func() (tier.MemInfo, error)
	// links are the link speeds measured for the daemon's loads: made at
	// start, each link measured when a load first needs it and kept.
	links *engine.LinkCache
	// blockIO is the block-layer tracer's state once StartBlockTrace ran
	// (blockio.go); nil before, and after stopBlockTrace.
	blockIO atomic.Pointer[blockIO]
	// loading counts the loads in progress (for /health).
	loading atomic.Int32
	// inflight counts the HTTP handlers running, so a shutdown whose grace
	// ran out waits for them to write their error before closing.
	inflight sync.WaitGroup

	// constrainSchema constrains a job's output to a JSON schema, for
	// requests that require a tool call (tools.go); nil while the build
	// has no constrained decoding.
	constrainSchema func(j *job, schema []byte) error

	// conns counts connections and requests per peer (conns.go).
	conns connTable

	mu     sync.RWMutex
	models map[string]*loaded
	order  []string // load order, for listings
}

// loaded is one model in the registry.
type loaded struct {
	name, path string
	eng        *engine.Engine
	feed       *tierFeed
	sched      *sched.Scheduler
	stop       context.CancelFunc
	loadedAt   time.Time
	budgets    api.Budgets
	fileBytes  int64
	draft      *engine.Engine // the draft model (LoadRequest.Draft); nil without
	capacity   int            // sequences the scheduler runs or queues (batch + queue)
	release    func()         // runs after the engines close (a volume's use count); nil: nothing
	grammars   grammars       // constrained output's vocabulary and matchers
}

// New builds a Server. It loads no model; call LoadFile or use the admin
// API.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	d := DefaultLimits()
	l := &cfg.Limits
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = d.MaxTokens
	}
	if l.MaxQueue <= 0 {
		l.MaxQueue = d.MaxQueue
	}
	if l.MaxBatch <= 0 {
		l.MaxBatch = d.MaxBatch
	}
	if l.PrefillChunk <= 0 {
		l.PrefillChunk = d.PrefillChunk
	}
	if l.MaxPromptTokens < 0 {
		return nil, fmt.Errorf("max prompt tokens must not be negative, got %d", l.MaxPromptTokens)
	}
	if cfg.Conn.MaxRequestsPerPeer < 0 {
		return nil, fmt.Errorf("max requests per peer must not be negative, got %d", cfg.Conn.MaxRequestsPerPeer)
	}
	cfg.Conn.fill()
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	b, err := engine.ParseBackend(cfg.Backend)
	if err != nil {
		return nil, err
	}
	cfg.Backend = b
	pol, warn := authz.NewPolicy(cfg.AdminGroup)
	if warn != "" {
		cfg.Log.Warn(warn)
	}
	s := &Server{cfg: cfg, log: cfg.Log, policy: pol, metrics: newMetrics(), started: time.Now(), models: map[string]*loaded{},
		links:   engine.NewLinkCache(),
		devices: newDeviceRegistry(cfg.Log.Named("devices"), nvmehost.Host{})}
	s.metrics.reg.MustRegister(pipelineCollector{s}, deviceCollector{s.devices})
	s.constrainSchema = func(j *job, schema []byte) error {
		if j.req.Grammar != nil {
			return openai.BadRequest("tool_choice", "a required tool call cannot be combined with response_format, json_schema or grammar")
		}
		return s.constrainJobSchema(j, schema)
	}
	s.handler = s.routes()
	return s, nil
}

// SetProcRoot points the peer-group lookup at another /proc (tests).
func (s *Server) SetProcRoot(root string) { s.policy.ProcRoot = root }

// Handler is the daemon's HTTP handler. Requests must carry a peer in
// their context (see Serve); those without one are refused.
func (s *Server) Handler() http.Handler { return s.handler }

// ErrModelExists is returned when a model name is already loaded.
var ErrModelExists = errors.New("a model with this name is already loaded")

// ErrUnloaded ends requests still running on a model being unloaded.
var ErrUnloaded = errors.New("model unloaded")

// ErrShuttingDown ends the requests still running when a shutdown's grace
// runs out.
var ErrShuttingDown = errors.New("the server is shutting down")

// LoadFile loads the model file at path without the model-directory check:
// it is for the operator's own --model flag, not for clients. The tier
// planner places the model's layers within req's budgets (engine.OpenWith):
// a prefab pool that does not fit streams the rest every pass; a GGUF that
// does not fit is refused with the prefab command to run. Cancelling ctx
// (the admin client went away, the daemon is stopping) stops the load
// between reads with an error wrapping ctx's.
//
// The file (and the draft's) is opened once, here, and the load reads it
// only through that descriptor (authz.FDPath), as loads of clients' paths
// do after authz.OpenModel.
func (s *Server) LoadFile(ctx context.Context, path string, req api.LoadRequest) (api.ModelStatus, error) {
	f, err := authz.OpenRegular(path)
	if err != nil {
		return api.ModelStatus{}, fmt.Errorf("model %s: %w", path, err)
	}
	defer f.Close()
	var df *os.File
	if req.Draft != "" {
		if df, err = authz.OpenRegular(req.Draft); err != nil {
			return api.ModelStatus{}, openai.BadRequest("draft", "draft model: %v", err)
		}
		defer df.Close()
	}
	dir := filepath.Dir(path)
	return s.load(ctx, f, df, req, func(name string) (*os.File, error) { return authz.OpenRegular(filepath.Join(dir, name)) })
}

// load loads the model open as f (its Name is the path shown in status and
// logs) with the draft model df (nil: none; req.Draft is ignored). Every
// read of the files goes through the descriptors, never their names;
// openPart opens another part of a split model, named by its base name in
// f's directory.
func (s *Server) load(ctx context.Context, f, df *os.File, req api.LoadRequest, openPart func(name string) (*os.File, error)) (api.ModelStatus, error) {
	view, err := engineView(f, openPart)
	if err != nil {
		return api.ModelStatus{}, modelPathError("path", "", err, s.cfg.ModelDirs)
	}
	defer view.close()
	st, err := f.Stat()
	if err != nil {
		return api.ModelStatus{}, fmt.Errorf("model %s: %w", f.Name(), err)
	}
	return s.loadModel(ctx, modelInput{path: f.Name(), open: view.path, size: st.Size(),
		rename: func(err error) error { return fdNamed(err, view.from, view.to) }}, df, req)
}

// modelInput is what loadModel loads: a model file opened through its
// descriptor, or a pool on a strata volume.
type modelInput struct {
	path    string            // shown in status and logs
	open    string            // what the engine opens (a descriptor path, or path itself)
	size    int64             // the model's bytes
	storage *engine.Storage   // set for a pool on a volume (engine.Options.Storage)
	rename  func(error) error // shows the engine's errors with path's name (nil: as they are)
	release func()            // runs once the model's engines are closed (nil: nothing)
}

// loadModel loads in with the draft model df (nil: none; req.Draft is
// ignored). in.release runs when the load fails, or later when the model
// is unloaded.
func (s *Server) loadModel(ctx context.Context, in modelInput, df *os.File, req api.LoadRequest) (_ api.ModelStatus, err error) {
	if in.release != nil {
		defer func() {
			if err != nil {
				in.release()
			}
		}()
	}
	if in.rename == nil {
		in.rename = func(err error) error { return err }
	}
	path, open := in.path, in.open
	if req.Budgets.RAMBytes < 0 || req.Budgets.VRAMBytes < 0 {
		return api.ModelStatus{}, openai.BadRequest("budgets", "budgets must not be negative")
	}
	if req.Context < 0 || req.Depth < 0 || req.MaxBatch < 0 || req.MaxQueue < 0 {
		return api.ModelStatus{}, openai.BadRequest("", "context, depth, max_batch and max_queue must not be negative")
	}
	backend := s.cfg.Backend
	if req.Backend != "" {
		b, err := engine.ParseBackend(req.Backend)
		if err != nil {
			return api.ModelStatus{}, openai.BadRequest("backend", "%v", err)
		}
		backend = b
	}
	name := req.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if p, ok := gguf.SplitPrefix(filepath.Base(path)); ok {
			name = p // a split model is named as its single file would be
		}
	}
	if !validName(name) {
		return api.ModelStatus{}, openai.BadRequest("name", "model name %q must be 1-128 characters of letters, digits and -_.:", name)
	}
	s.mu.RLock()
	_, dup := s.models[name]
	s.mu.RUnlock()
	if dup {
		return api.ModelStatus{}, fmt.Errorf("%q: %w", name, ErrModelExists)
	}
	maxBatch, maxQueue := s.cfg.Limits.MaxBatch, s.cfg.Limits.MaxQueue
	if req.MaxBatch > 0 {
		maxBatch = req.MaxBatch
	}
	if req.MaxQueue > 0 {
		maxQueue = req.MaxQueue
	}
	t0 := time.Now()
	s.loading.Add(1)
	defer s.loading.Add(-1)
	eng, err := engine.OpenWith(ctx, open, engine.Options{
		DeviceBudget: req.Budgets.VRAMBytes, HostBudget: req.Budgets.RAMBytes,
		Context: req.Context, Batch: maxBatch, Depth: req.Depth, Tiers: req.Tiers,
		Links: s.cfg.Links, LinkCache: s.links, Logger: s.log.Named("engine"), Backend: backend, WrapSource: s.cfg.wrapSource,
		Skip: req.SkipLayers, Verify: s.cfg.Verify, Storage: in.storage,
	})
	err = in.rename(err)
	switch {
	case errors.Is(err, engine.ErrCUDAUnavailable):
		return api.ModelStatus{}, openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "backend", "backend_unavailable",
			"%v; load it with backend \"auto\" or \"cpu\" to run it on the CPU", err)
	case errors.Is(err, tier.ErrNoFit):
		return api.ModelStatus{}, openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "budgets", "model_does_not_fit", "%v", err)
	case errors.Is(err, engine.ErrNeedsPool):
		return api.ModelStatus{}, openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "path", "prefab_pool_required", "%v", err)
	case err != nil:
		return api.ModelStatus{}, err
	}
	// A chat template that breaks its limits is refused now, with the
	// limit named, rather than on a user's first chat request.
	if err := eng.Tok.ProbeChatTemplate(); err != nil {
		eng.Close()
		s.log.Warn("model refused", "path", path, "error", err)
		return api.ModelStatus{}, openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "path", "chat_template_refused", "%v", err)
	}
	var drafter sched.Drafter
	var draft *engine.Engine
	switch {
	case df != nil:
		draft, err = engine.OpenDraft(ctx, authz.FDPath(df), eng, engine.Options{Context: req.Context, LinkCache: s.links, Logger: s.log.Named("draft")})
		if err != nil {
			err = fdNamed(err, authz.FDPath(df), df.Name())
			eng.Close()
			return api.ModelStatus{}, openai.BadRequest("draft", "%v", err)
		}
		drafter = sched.ModelDrafter{B: draft.Backend()}
	case req.Lookup:
		drafter = sched.Lookup{MinN: 1, MaxN: 4}
	case req.SelfDraft != 0:
		draft, err = engine.OpenSelfDraft(ctx, open, eng, req.SelfDraft, engine.Options{Context: req.Context, LinkCache: s.links, Logger: s.log.Named("self-draft"), Storage: in.storage})
		if err != nil {
			err = in.rename(err)
			eng.Close()
			return api.ModelStatus{}, openai.BadRequest("self_draft", "%v", err)
		}
		drafter = sched.ModelDrafter{B: draft.Backend(), Label: "self"}
	}
	feed := &tierFeed{m: s.metrics, eng: eng}
	sc := sched.New(eng.Backend(), eng.Tok, sched.Config{
		MaxBatch: maxBatch, MaxQueue: maxQueue, PrefillChunk: s.cfg.Limits.PrefillChunk,
		Observer: &observer{m: s.metrics, model: name, feed: feed}, Drafter: drafter,
	})
	ctx, stop := context.WithCancel(context.Background())
	lm := &loaded{name: name, path: path, eng: eng, feed: feed, sched: sc, stop: stop, loadedAt: time.Now(), budgets: req.Budgets, fileBytes: in.size, draft: draft,
		capacity: maxBatch + maxQueue, release: in.release}
	s.mu.Lock()
	if _, dup := s.models[name]; dup {
		s.mu.Unlock()
		stop()
		eng.Close()
		if draft != nil {
			draft.Close()
		}
		return api.ModelStatus{}, fmt.Errorf("%q: %w", name, ErrModelExists)
	}
	s.models[name] = lm
	s.order = append(s.order, name)
	s.metrics.modelsLoaded.Set(float64(len(s.models)))
	s.mu.Unlock()
	go sc.Run(ctx)
	args := []any{"name", name, "path", path, "arch", eng.Model.Config.Arch, "layers", eng.Model.Config.Layers,
		"bytes", in.size, "took", time.Since(t0).Round(time.Millisecond).String(), "backend", eng.BackendInfo().String()}
	if p := eng.Plan(); p != nil {
		args = append(args, "tier_a", p.Tiers[tier.TierA].Layers, "tier_b", p.Tiers[tier.TierB].Layers,
			"tier_c", p.Tiers[tier.TierC].Layers, "depth", p.Depth)
		if p.Depth > 0 { // a resident plan's rate comes from no measured link
			args = append(args, "bound", p.Bound.String(), "expected_tokens_per_second", fmt.Sprintf("%.3g", p.TokensPerSecond))
		}
	}
	s.log.Info("model loaded", args...)
	return s.modelStatus(lm), nil
}

// loadView is what the engine opens for a model file: its descriptor's
// /proc/self/fd path, or for the first part of a split GGUF a private
// directory holding the parts' names, each a symlink to an open descriptor
// of that part, so that the engine finds the other parts by name while
// every open still lands on a file opened once (beneath the model
// directory, for a client's path). Errors name from; to is what to show
// instead.
type loadView struct {
	path     string
	from, to string
	close    func()
}

// engineView builds f's loadView, opening the other parts of a split model
// with openPart.
func engineView(f *os.File, openPart func(name string) (*os.File, error)) (loadView, error) {
	v := loadView{path: authz.FDPath(f), from: authz.FDPath(f), to: f.Name(), close: func() {}}
	base := filepath.Base(f.Name())
	prefix, no, n, ok := gguf.SplitParts(base)
	if !ok || no != 1 || n <= 1 {
		return v, nil // the engine says what is wrong with a later part
	}
	dir, err := os.MkdirTemp("", "strata-load-")
	if err != nil {
		return v, fmt.Errorf("split model %s: %w", f.Name(), err)
	}
	var parts []*os.File
	v.close = func() {
		for _, p := range parts {
			p.Close()
		}
		os.RemoveAll(dir)
	}
	if err := os.Symlink(authz.FDPath(f), filepath.Join(dir, base)); err != nil {
		v.close()
		return v, fmt.Errorf("split model %s: %w", f.Name(), err)
	}
	for i := 1; i < n; i++ {
		name := gguf.SplitPath(prefix, i, n)
		p, err := openPart(name)
		if err != nil {
			v.close()
			return v, fmt.Errorf("split model %s, part %d of %d: %w", f.Name(), i+1, n, err)
		}
		parts = append(parts, p)
		if err := os.Symlink(authz.FDPath(p), filepath.Join(dir, name)); err != nil {
			v.close()
			return v, fmt.Errorf("split model %s: %w", f.Name(), err)
		}
	}
	v.path, v.from, v.to = filepath.Join(dir, base), dir, filepath.Dir(f.Name())
	return v, nil
}

// fdNamed shows err (from a load through the descriptor path fdPath) with
// the file's name in place of the descriptor's /proc path, which means
// nothing to the admin who reads it; errors.Is and As see err unchanged.
func fdNamed(err error, fdPath, name string) error {
	if err == nil {
		return nil
	}
	return &renamedError{err: err, re: regexp.MustCompile(regexp.QuoteMeta(fdPath) + `\b`), name: name}
}

type renamedError struct {
	err  error
	re   *regexp.Regexp
	name string
}

func (e *renamedError) Error() string { return e.re.ReplaceAllLiteralString(e.err.Error(), e.name) }
func (e *renamedError) Unwrap() error { return e.err }

func validName(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r)) {
			return false
		}
	}
	return true
}

// Unload removes a model: new requests for it get 404, requests in flight
// or queued end with ErrUnloaded, and its memory is released once its
// scheduler has stopped. It returns how many requests were cut short.
func (s *Server) Unload(name string) (int, error) { return s.unload(name, ErrUnloaded) }

// unload unloads a model, ending its requests with reason.
func (s *Server) unload(name string, reason error) (int, error) {
	s.mu.Lock()
	lm, ok := s.models[name]
	if ok {
		delete(s.models, name)
		s.order = slices.DeleteFunc(s.order, func(n string) bool { return n == name })
		s.metrics.modelsLoaded.Set(float64(len(s.models)))
	}
	s.mu.Unlock()
	if !ok {
		return 0, modelNotFound(name)
	}
	cut := lm.sched.Close(reason)
	lm.stop()
	lm.feed.flush() // bytes of a last, failed pass
	err := lm.eng.Close()
	if lm.draft != nil {
		err = errors.Join(err, lm.draft.Close())
	}
	if lm.release != nil {
		lm.release()
	}
	s.metrics.forget(name)
	s.log.Info("model unloaded", "name", name, "cut_short", cut)
	return cut, err
}

// Close unloads every model.
func (s *Server) Close() error { return s.closeWith(ErrUnloaded) }

// closeWith unloads every model, ending their requests with reason.
func (s *Server) closeWith(reason error) error {
	s.stopBlockTrace()
	var errs []error
	for _, n := range s.modelNames() {
		if _, err := s.unload(n, reason); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Server) modelNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.order)
}

func (s *Server) lookup(name string) (*loaded, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	lm, ok := s.models[name]
	if !ok {
		return nil, modelNotFound(name)
	}
	return lm, nil
}

func modelNotFound(name string) *openai.Error {
	return openai.Errorf(http.StatusNotFound, openai.TypeInvalidRequest, "model", "model_not_found",
		"The model `%s` does not exist or is not loaded.", name)
}

// peerKey carries the authz.Peer of a connection in request contexts.
type peerKey struct{}

// WithPeer returns ctx carrying pr; Serve does this for every connection.
func WithPeer(ctx context.Context, pr authz.Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, pr)
}

func peerOf(r *http.Request) authz.Peer {
	pr, _ := r.Context().Value(peerKey{}).(authz.Peer)
	return pr
}

// Serve serves HTTP on the Unix listeners (peers identified by
// SO_PEERCRED) and TCP listeners (API key required) until ctx is done,
// then shuts down gracefully: listeners close at once, in-flight requests
// get ShutdownTimeout to finish, after which they are ended with an error
// (streams receive an error event). Serve unloads every model before it
// returns. It returns the first listener error, or nil after a clean
// shutdown.
func (s *Server) Serve(ctx context.Context, unixLs, tcpLs []net.Listener) error {
	if len(tcpLs) > 0 && s.cfg.APIKey == "" {
		return errors.New("a TCP listener needs an API key")
	}
	var servers []*http.Server
	errc := make(chan error, len(unixLs)+len(tcpLs))
	errLog := s.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	cl := s.cfg.Conn
	mk := func(h http.Handler) *http.Server {
		srv := &http.Server{Handler: s.bodyDeadline(h), ErrorLog: errLog,
			ReadHeaderTimeout: cl.ReadHeaderTimeout, IdleTimeout: cl.IdleTimeout,
			// The peer was read when the connection was accepted; a TCP
			// peer becomes APIKey once its key checks out.
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if lc, ok := c.(*limitConn); ok {
					return WithPeer(ctx, lc.peer)
				}
				return WithPeer(ctx, authz.Peer{})
			}}
		servers = append(servers, srv)
		return srv
	}
	for _, l := range unixLs {
		srv := mk(s.handler)
		s.log.Info("listening", "network", "unix", "addr", l.Addr().String())
		go func() { errc <- srv.Serve(&limitListener{Listener: l, s: s, unix: true}) }()
	}
	for _, l := range tcpLs {
		srv := mk(s.cors(s.requireKey(s.handler)))
		s.log.Info("listening", "network", "tcp", "addr", l.Addr().String())
		go func() { errc <- srv.Serve(&limitListener{Listener: l, s: s}) }()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		s.log.Error("listener failed", "error", serveErr)
	}
	s.log.Info("shutting down", "grace", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var late atomic.Bool // some server still had requests when the grace ran out
	for _, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(sctx); err != nil {
				late.Store(true)
				s.log.Warn("in-flight requests did not finish in time; ending them with an error", "error", err)
			}
		}()
	}
	wg.Wait() // every server idle, or the grace over (Shutdown then returns, leaving connections open)
	if late.Load() {
		// Ending the schedulers sends every in-flight request its error
		// event, saying the server is shutting down; the handlers write
		// it and return, and each server then shuts down again, which
		// closes a connection only once its response is complete (the
		// stream's last chunk written), so a streaming client reads why
		// its stream ended instead of a torn connection. Only a client
		// that reads nothing is cut without it.
		s.closeWith(ErrShuttingDown)
		fin, cancelFin := context.WithTimeout(context.Background(), 5*time.Second)
		idle := make(chan struct{})
		go func() { s.inflight.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-fin.Done():
			s.log.Warn("handlers still running 5s after their requests were ended; closing their connections")
		}
		for _, srv := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := srv.Shutdown(fin); err != nil {
					srv.Close()
				}
			}()
		}
		wg.Wait()
		cancelFin()
	}
	s.Close()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// cors answers browsers' cross-origin checks for the configured origins:
// a preflight (OPTIONS with Access-Control-Request-Method) is answered
// here, before the API key is asked for (browsers send none with it), and
// other requests from an allowed origin get the headers that let the page
// read the answer. Requests from other origins pass through unchanged:
// the browser itself withholds the answer.
func (s *Server) cors(next http.Handler) http.Handler {
	if len(s.cfg.CORSOrigins) == 0 {
		return next
	}
	allowed := func(origin string) bool {
		for _, o := range s.cfg.CORSOrigins {
			if o == "*" || strings.EqualFold(o, origin) {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !allowed(origin) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireKey admits TCP requests that carry the configured API key.
func (s *Server) requireKey(next http.Handler) http.Handler {
	want := []byte(s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.PathHealth {
			// Health is public, as load balancers and orchestrators expect:
			// it says whether a model is ready and nothing else.
			next.ServeHTTP(w, r)
			return
		}
		// The scheme is case-insensitive (RFC 9110 section 11.1): "bearer KEY"
		// is as good as "Bearer KEY".
		got := r.Header.Get("Authorization")
		scheme, key, _ := strings.Cut(strings.TrimSpace(got), " ")
		key = strings.TrimSpace(key)
		if s.cfg.APIKey == "" || !strings.EqualFold(scheme, "bearer") || subtle.ConstantTimeCompare([]byte(key), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stratad"`)
			// The body, if any, is never read: the connection closes after
			// the answer rather than waiting on the rest of it.
			w.Header().Set("Connection", "close")
			s.metrics.requests.WithLabelValues(endpointOf(r), "401").Inc()
			msg := "Incorrect API key provided."
			if got == "" {
				msg = "You didn't provide an API key. Pass it as an Authorization: Bearer header."
			}
			s.log.Warn("authentication failed", "peer", peerOf(r).String(), "path", r.URL.Path, "reason", msg)
			openai.WriteError(w, openai.Errorf(http.StatusUnauthorized, openai.TypeInvalidRequest, "", "invalid_api_key", "%s", msg))
			return
		}
		pr := peerOf(r)
		pr.APIKey = true
		r = r.WithContext(WithPeer(r.Context(), pr))
		next.ServeHTTP(w, r)
	})
}

// newID returns an OpenAI-style object id with the given prefix.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// randomSeed draws a seed for requests that give none.
func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}
