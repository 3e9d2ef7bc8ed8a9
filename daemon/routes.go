package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/internal/buildinfo"
	"github.com/strata-llm/strata/internal/daemon/authz"
)

// routes builds the daemon's HTTP handler. Methods are checked by the
// handlers themselves so that a wrong method gets an OpenAI-shaped 405,
// and unknown paths an OpenAI-shaped 404.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(path, method string, act authz.Action, h func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
				w.Header().Set("Allow", method)
				openai.WriteError(w, openai.Errorf(http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "", "method_not_allowed",
					"%s is not allowed on %s; use %s", r.Method, r.URL.Path, method))
				return
			}
			if err := s.policy.Allow(peerOf(r), act); err != nil {
				s.log.Warn("request refused", "path", r.URL.Path, "peer", peerOf(r).String(), "error", err)
				openai.WriteError(w, openai.Errorf(http.StatusForbidden, openai.TypePermission, "", "permission_denied", "%v", err))
				return
			}
			if err := h(w, r); err != nil {
				openai.WriteError(w, s.logFailed(r, openai.AsError(err)))
			}
		})
	}
	handle("/v1/models", http.MethodGet, authz.ReadState, s.handleModels)
	handle("/v1/models/{id...}", http.MethodGet, authz.ReadState, s.handleModel)
	handle("/v1/chat/completions", http.MethodPost, authz.Infer, s.handleChat)
	handle("/v1/completions", http.MethodPost, authz.Infer, s.handleCompletion)
	handle(PathEmbeddings, http.MethodPost, authz.Infer, s.handleEmbeddings)
	handle(PathResponses, http.MethodPost, authz.Infer, s.handleResponses)
	handle(PathTokenize, http.MethodPost, authz.Infer, s.handleTokenize)
	handle(PathDetokenize, http.MethodPost, authz.Infer, s.handleDetokenize)
	// Health needs no authorisation on any listener (requireKey lets it
	// through on TCP too).
	mux.HandleFunc(api.PathHealth, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", http.MethodGet)
			openai.WriteError(w, openai.Errorf(http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "", "method_not_allowed",
				"%s is not allowed on %s; use GET", r.Method, r.URL.Path))
			return
		}
		if err := s.handleHealth(w, r); err != nil {
			openai.WriteError(w, s.logFailed(r, openai.AsError(err)))
		}
	})
	handle(api.PathStatus, http.MethodGet, authz.ReadState, s.handleStatus)
	handle(api.PathLoad, http.MethodPost, authz.Load, s.handleLoad)
	handle(api.PathUnload, http.MethodPost, authz.Unload, s.handleUnload)
	s.deviceRoutes(handle) // NVMe controllers, volumes, pools: devices.go
	s.benchRoutes(handle)  // storage, PCIe and end-to-end benchmarks: bench.go
	prom := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	handle(api.PathMetric, http.MethodGet, authz.ReadState, func(w http.ResponseWriter, r *http.Request) error {
		s.refreshGauges()
		prom.ServeHTTP(w, r)
		return nil
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, openai.Errorf(http.StatusNotFound, openai.TypeInvalidRequest, "", "unknown_url",
			"Unknown request URL: %s %s.", r.Method, r.URL.Path))
	})
	return s.logRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RequestURI == "*" {
			// ServeMux answers "METHOD *" with a bare 400; clients get the
			// API's error shape everywhere.
			w.Header().Set("Connection", "close")
			openai.WriteError(w, openai.BadRequest("", "the request target * is not a path"))
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// statusWriter records the status code for logs and metrics and keeps
// streaming working (Flush, and Unwrap for http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// endpointOf names a request's endpoint for metrics without letting
// clients create unbounded label values.
func endpointOf(r *http.Request) string {
	switch p := r.URL.Path; p {
	case "/v1/models", "/v1/chat/completions", "/v1/completions", api.PathHealth, api.PathStatus, api.PathLoad, api.PathUnload, api.PathMetric,
		PathTokenize, PathDetokenize, PathEmbeddings, PathResponses:
		return p
	default:
		if len(p) > len("/v1/models/") && p[:len("/v1/models/")] == "/v1/models/" {
			return "/v1/models/{id}"
		}
		return "other"
	}
}

func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			// net/http would recover a panic itself, but log it at info and
			// answer nothing: a bug is an error, logged with its stack, and
			// the client gets a 500 in the API's shape when nothing was
			// written yet.
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("request handler panicked", "path", r.URL.Path, "peer", peerOf(r).String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			s.metrics.requests.WithLabelValues(endpointOf(r), "500").Inc()
			if sw.code == 0 {
				openai.WriteError(sw, openai.Errorf(http.StatusInternalServerError, openai.TypeServer, "", "internal_error",
					"The server failed while processing the request; the daemon's log has the details."))
			}
		}()
		next.ServeHTTP(sw, r)
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(endpointOf(r), strconv.Itoa(sw.code)).Inc()
		s.metrics.duration.WithLabelValues(endpointOf(r)).Observe(time.Since(t0).Seconds())
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "peer", peerOf(r).String(),
			"status", sw.code, "took", time.Since(t0).Round(time.Microsecond).String())
	})
}

// readBody reads a request body within the size limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.Limits.MaxBodyBytes))
	if err == nil {
		// The body is in: lift bodyDeadline's read deadline before a long
		// answer starts.
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, openai.Errorf(http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "", "request_too_large",
			"request body exceeds the limit of %d bytes", mbe.Limit)
	}
	if err != nil {
		return nil, openai.BadRequest("", "reading request body: %v", err)
	}
	return body, nil
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) error {
	list := openai.ModelList{Object: openai.ObjectList, Data: []openai.Model{}}
	for _, n := range s.modelNames() {
		if lm, err := s.lookup(n); err == nil {
			list.Data = append(list.Data, modelObject(lm))
		}
	}
	return writeJSON(w, list)
}

func modelObject(lm *loaded) openai.Model {
	return openai.Model{ID: lm.name, Object: openai.ObjectModel, Created: lm.loadedAt.Unix(), OwnedBy: "strata"}
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) error {
	lm, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, modelObject(lm))
}

// handleHealth answers 200 when a model is ready to serve, 503 while the
// first is loading or when none is loaded.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	h := api.Health{Status: "ok", Models: len(s.modelNames()), Loading: int(s.loading.Load())}
	if h.Models == 0 {
		h.Status = "no model loaded"
		if h.Loading > 0 {
			h.Status = "loading"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return json.NewEncoder(w).Encode(h)
	}
	return writeJSON(w, h)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) error {
	pr := peerOf(r)
	admin, _ := s.policy.IsAdmin(pr)
	l := s.cfg.Limits
	st := api.Status{
		Version: buildinfo.Version, PID: os.Getpid(), StartedAt: s.started, Uptime: time.Since(s.started).Seconds(),
		Models: []api.ModelStatus{}, Peer: pr.String(), Admin: admin,
		Limits: api.Limits{MaxBodyBytes: l.MaxBodyBytes, MaxPromptTokens: l.MaxPromptTokens, MaxTokens: l.MaxTokens, MaxQueue: l.MaxQueue, MaxBatch: l.MaxBatch},
	}
	for _, n := range s.modelNames() {
		if lm, err := s.lookup(n); err == nil {
			ms := s.modelStatus(lm)
			if !admin {
				ms.Path = "" // where the operator keeps models is not every user's business
			}
			st.Models = append(st.Models, ms)
		}
	}
	if !admin {
		st.PID = 0
	}
	st.Block = s.blockStatus()
	return writeJSON(w, st)
}

func (s *Server) modelStatus(lm *loaded) api.ModelStatus {
	c := lm.eng.Model.Config
	st := lm.sched.Stats()
	plan, ps := lm.eng.Plan(), lm.eng.PipelineStats()
	bi := lm.eng.BackendInfo()
	loc := "host-mmap"
	if ps != nil {
		loc = "host-mmap, streamed"
	}
	kv := int64(st.KVPositions) * int64(c.Layers) * int64(c.KVDim()) * 2 * 4
	movedB, movedC := uint64(0), uint64(0)
	if ps != nil {
		movedB, movedC = tierMoved(ps)
	}
	if bi.Name == engine.BackendCUDA {
		loc = "device"
		if bi.StreamedBytes > 0 {
			loc = "device, tier B in pinned host memory copied every pass"
		}
		kv = bi.KVBytes // allocated up front, one slot per sequence
		movedB = st.Passes * uint64(bi.StreamedBytes)
	}
	return api.ModelStatus{
		Name: lm.name, Path: lm.path, Arch: c.Arch, Layers: c.Layers, Skipped: lm.eng.Skipped(), Context: lm.eng.MaxContext(), Vocab: c.Vocab,
		Backend: bi.Name, BackendInfo: backendStatus(bi), LoadedAt: lm.loadedAt, Budgets: lm.budgets,
		Plan: planStatus(plan, movedB, movedC), PlanNote: planNoteFor(plan),
		Memory: api.Memory{
			WeightBytes: lm.fileBytes,
			KVBytes:     kv,
			Location:    loc,
		},
		Pipeline:   pipelineStatus(ps),
		Experts:    expertStatus(lm.eng),
		TierCRoute: routeStatus(lm.eng.TierCRoute()),
		Queue:      api.Queue{Waiting: st.Waiting, Active: st.Active, MaxBatch: st.MaxBatch, MaxQueue: st.MaxQueue},
		Counters: api.Counters{Passes: st.Passes, PromptTokens: st.PromptTokens, CompletionTokens: st.Generated,
			Finished: st.Finished, Cancelled: st.Cancelled, Failed: st.Failed,
			Drafted: st.Drafted, Accepted: st.Accepted, VerifyPasses: st.VerifyPasses},
	}
}

// expertStatus reports a mixture-of-experts engine's experts (nil for a
// dense model).
func expertStatus(e *engine.Engine) *api.ExpertStatus {
	x, ok := e.Experts()
	if !ok {
		return nil
	}
	st := x.Stats
	return &api.ExpertStatus{
		Experts: x.Experts, Resident: x.Resident, ResidentBytes: x.ResidentBytes, StorageBytes: x.StorageBytes, ReadBuffers: x.Buffers,
		UsesResident: st.Resident, UsesBuffered: st.Buffered, UsesPrefetched: st.Prefetched, UsesRead: st.Read, HitRate: st.Hit(),
		ReadBytes: st.ReadBytes, ReadsAhead: st.PrefetchReads, PromoteReads: st.PromoteReads,
		ReadsFailed: st.Failed, Promoted: st.Promoted, Demoted: st.Demoted,
		OnDevice: x.OnDevice, DeviceBytes: x.DeviceBytes, DeviceWholeLayers: x.DeviceWholeLayers, UsesDevice: x.DeviceUses, UsesCPU: x.CPUUses, DeviceHitRate: x.DeviceHit(), DeviceMoves: x.DeviceMoves, StreamedPicks: x.StreamedPicks, MappedPicks: x.MappedPicks, MappedWay: x.MappedWay,
	}
}

// routeStatus is r as the API shows it; nil when nothing is on tier C.
func routeStatus(r engine.Route) *api.TierCRoute {
	if r.Name == "" {
		return nil
	}
	return &api.TierCRoute{Route: r.Name, Via: r.Via, Refused: r.Refused}
}

func (s *Server) refreshGauges() {
	for _, n := range s.modelNames() {
		if lm, err := s.lookup(n); err == nil {
			st := lm.sched.Stats()
			s.metrics.queueDepth.WithLabelValues(n).Set(float64(st.Waiting))
			s.metrics.activeSeqs.WithLabelValues(n).Set(float64(st.Active))
			c := lm.eng.Model.Config
			s.metrics.kvBytes.WithLabelValues(n).Set(float64(st.KVPositions) * float64(2*c.Layers*c.KVDim()*4))
			s.metrics.drafted.WithLabelValues(n).Set(float64(st.Drafted))
			s.metrics.accepted.WithLabelValues(n).Set(float64(st.Accepted))
			if x, ok := lm.eng.Experts(); ok {
				s.metrics.expertsResident.WithLabelValues(n).Set(float64(x.Resident))
				for served, v := range map[string]uint64{"resident": x.Stats.Resident, "buffered": x.Stats.Buffered, "prefetched": x.Stats.Prefetched, "read": x.Stats.Read} {
					s.metrics.expertUses.WithLabelValues(n, served).Set(float64(v))
				}
				if x.OnDevice > 0 || x.DeviceUses+x.CPUUses > 0 {
					s.metrics.expertsOnDevice.WithLabelValues(n).Set(float64(x.OnDevice))
					s.metrics.expertPicks.WithLabelValues(n, "gpu").Set(float64(x.DeviceUses))
					s.metrics.expertPicks.WithLabelValues(n, "cpu").Set(float64(x.CPUUses - x.StreamedPicks - x.MappedPicks))
					s.metrics.expertPicks.WithLabelValues(n, "pcie").Set(float64(x.StreamedPicks))
					s.metrics.expertPicks.WithLabelValues(n, "mapped").Set(float64(x.MappedPicks))
					s.metrics.expertsMoved.WithLabelValues(n).Set(float64(x.DeviceMoves))
				}
			}
		}
	}
}

func (s *Server) handleLoad(w http.ResponseWriter, r *http.Request) error {
	var req api.LoadRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	if IsVolumeRef(req.Path) {
		return s.handleLoadVolume(w, r, req)
	}
	f, err := authz.OpenModel(s.cfg.ModelDirs, req.Path)
	if err != nil {
		return modelPathError("path", "", err, s.cfg.ModelDirs)
	}
	defer f.Close()
	var df *os.File
	if req.Draft != "" {
		if df, err = authz.OpenModel(s.cfg.ModelDirs, req.Draft); err != nil {
			return modelPathError("draft", "draft model: ", err, s.cfg.ModelDirs)
		}
		defer df.Close()
	}
	s.log.Info("load requested", "peer", peerOf(r).String(), "path", f.Name(), "name", req.Name, "draft", req.Draft, "lookup", req.Lookup)
	partDir := filepath.Dir(req.Path)
	st, err := s.load(r.Context(), f, df, req, func(name string) (*os.File, error) {
		return authz.OpenModel(s.cfg.ModelDirs, filepath.Join(partDir, name))
	})
	return s.loadResult(w, st, err)
}

// handleLoadVolume loads a pool on a strata volume (nvme://BDF/NSID/NAME)
// from a controller the daemon holds; the draft, if any, is a file under
// the model directories.
func (s *Server) handleLoadVolume(w http.ResponseWriter, r *http.Request, req api.LoadRequest) error {
	var df *os.File
	if req.Draft != "" {
		var err error
		if df, err = authz.OpenModel(s.cfg.ModelDirs, req.Draft); err != nil {
			return modelPathError("draft", "draft model: ", err, s.cfg.ModelDirs)
		}
		defer df.Close()
	}
	s.log.Info("load requested", "peer", peerOf(r).String(), "path", req.Path, "name", req.Name, "draft", req.Draft)
	st, err := s.loadVolume(r.Context(), req.Path, df, req, false)
	return s.loadResult(w, st, err)
}

// loadResult writes a load's status, or its error as the API reports it.
func (s *Server) loadResult(w http.ResponseWriter, st api.ModelStatus, err error) error {
	if errors.Is(err, ErrModelExists) {
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "name", "model_exists", "%v", err)
	}
	if err != nil {
		var oe *openai.Error
		if errors.As(err, &oe) {
			return oe
		}
		return openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "path", "model_load_failed", "%v", err)
	}
	return writeJSON(w, st)
}

// logFailed logs e, an error a request ends with (as a response or as a
// stream's last event), when it is the server's own failure (5xx: a model
// file changed or unreadable under it, a device fault), so that it reaches
// the admin's log and not only the client. It returns e.
func (s *Server) logFailed(r *http.Request, e *openai.Error) *openai.Error {
	if e.Status >= http.StatusInternalServerError {
		s.log.Error("request failed", "path", r.URL.Path, "peer", peerOf(r).String(), "status", e.Status, "error", e.Message)
		// The log has the whole message; the client gets it without the
		// server's file paths (each shown by its last element).
		c := *e
		c.Message = hidePaths(e.Message)
		return &c
	}
	return e
}

// absPath matches an absolute file path in an error message.
var absPath = regexp.MustCompile(`/(?:[^/\s:;,'"()\[\]{}]+/)+[^/\s:;,'"()\[\]{}]*`)

// hidePaths replaces every absolute path in msg with its last element,
// except device nodes and sysfs files: those are the host's public layout,
// and naming them is what makes a device error actionable.
func hidePaths(msg string) string {
	return absPath.ReplaceAllStringFunc(msg, func(p string) string {
		if strings.HasPrefix(p, "/dev/") || strings.HasPrefix(p, "/sys/") {
			return p
		}
		if base := filepath.Base(p); base != "/" && base != "." {
			return base
		}
		return "…"
	})
}

// modelPathError maps authz.OpenModel's failures on a client's model path
// (request field param) to API errors.
func modelPathError(param, prefix string, err error, dirs []string) error {
	switch {
	case errors.Is(err, authz.ErrOutsideModelDirs):
		return openai.Errorf(http.StatusForbidden, openai.TypePermission, param, "path_not_allowed", "%s%v (model directories: %v)", prefix, err, dirs)
	case errors.Is(err, fs.ErrNotExist):
		return openai.Errorf(http.StatusNotFound, openai.TypeInvalidRequest, param, "model_file_not_found", "%s%v", prefix, err)
	}
	return openai.BadRequest(param, "%s%v", prefix, err)
}

func (s *Server) handleUnload(w http.ResponseWriter, r *http.Request) error {
	var req api.UnloadRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return openai.BadRequest("name", "name is required")
	}
	s.log.Info("unload requested", "peer", peerOf(r).String(), "name", req.Name)
	n, err := s.Unload(req.Name)
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe
	}
	if err != nil {
		s.log.Warn("unload: releasing model", "name", req.Name, "error", err)
	}
	return writeJSON(w, api.UnloadResponse{Name: req.Name, Unloaded: true, Cancelled: n})
}

// decodeStrict decodes an admin request, refusing unknown fields (admin
// typos should fail loudly, unlike OpenAI requests).
// readStrict reads an admin request's body within the size limit and
// decodes it strictly into v: the shared start of every admin handler.
func (s *Server) readStrict(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeStrict(body, v)
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return openai.BadRequest("", "invalid request body: %v", err)
	}
	if dec.More() {
		return openai.BadRequest("", "invalid request body: trailing data")
	}
	return nil
}
