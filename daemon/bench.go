package daemon

// The bench API (api.PathBenchStorage …): stratad runs the storage sweep
// on an NVMe controller it holds (the userspace driver needs root and
// VFIO, which clients lack) or on a file in its model directories, the
// PCIe sweep on its GPU, and the end-to-end routes, for any peer that may
// run inference. Benches only read: they share a held controller with
// streaming like a volume read does (unbind waits for them), one bench
// runs at a time, and requests are bounded in points and time. A storage
// sweep runs as root with buffers of up to a GiB for up to ten minutes, so
// peers outside the admin group get a smaller bound (benchUserLimits: the
// default sweep fits), and every sweep's buffers must fit the host memory
// budget models are planned within (tier.DefaultHostBudget), so a bench
// cannot push the host or the loaded models into swap or the OOM killer.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/bench/hw"
	"github.com/strata-llm/strata/internal/bench/nvmebench"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/kernels/cudadrv"
	"github.com/strata-llm/strata/setup/hostcheck"
)

// benchRoutes registers the bench API. Benches read and measure; they
// change nothing the daemon holds, so they need only authz.Infer.
func (s *Server) benchRoutes(handle handleFunc) {
	handle(api.PathBenchStorage, http.MethodPost, authz.Infer, s.handleBenchStorage)
	handle(api.PathBenchPCIe, http.MethodPost, authz.Infer, s.handleBenchPCIe)
	handle(api.PathBenchE2E, http.MethodPost, authz.Infer, s.handleBenchE2E)
}

// benchHostRoot is where the e2e bench's setup check reads the host ("":
// this machine); tests point it at a fake tree.
var benchHostRoot = ""

// benchStart takes the Server's bench slot, or fails with 429 bench_busy.
func (s *Server) benchStart() (release func(), err error) {
	mu := &s.bench
	if !mu.TryLock() {
		return nil, openai.Errorf(http.StatusTooManyRequests, openai.TypeRateLimit, "", "bench_busy",
			"another benchmark is running in stratad; try again when it has finished")
	}
	// Released before the final event is written, so that a client that
	// starts its next bench as soon as it has a result finds the slot free;
	// the deferred call then does nothing.
	var once sync.Once
	return func() { once.Do(mu.Unlock) }, nil
}

// benchStream writes a bench response: nothing until the first event, so
// that an error before any progress is still an ordinary error response;
// then NDJSON lines, flushed one by one.
type benchStream struct {
	w       http.ResponseWriter
	started bool
}

func (b *benchStream) event(ev api.BenchEvent) {
	if !b.started {
		b.started = true
		b.w.Header().Set("Content-Type", "application/x-ndjson")
		b.w.Header().Set("Cache-Control", "no-store")
		b.w.WriteHeader(http.StatusOK)
	}
	_ = json.NewEncoder(b.w).Encode(ev)
	_ = http.NewResponseController(b.w).Flush()
}

func (b *benchStream) progress(p bench.Progress) { b.event(api.BenchEvent{Progress: &p}) }

// finish sends the final event, or returns err for routes() to send as an
// error response when nothing was written yet.
func (b *benchStream) finish(ev api.BenchEvent, err error) error {
	if err == nil {
		b.event(ev)
		return nil
	}
	e := benchError(err)
	if !b.started {
		return e
	}
	b.event(api.BenchEvent{Error: &api.BenchError{Status: e.Status, Type: e.Type, Code: e.Code, Message: e.Message}})
	return nil
}

// benchError maps bench failures to API errors.
func benchError(err error) *openai.Error {
	var oe *openai.Error
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.Is(err, bench.ErrBadOptions):
		return openai.BadRequest("", "%v", err)
	case errors.Is(err, cudadrv.ErrUnavailable):
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "cuda_unavailable", "%v", err)
	}
	return openai.AsError(deviceError(err))
}

// openBenchFile opens a client's file inside the model directories (the
// daemon runs as root, so clients name files only where models live) once:
// the bench reads it through the descriptor (authz.FDPath), never by name.
func (s *Server) openBenchFile(p string) (*os.File, error) {
	f, err := authz.OpenModel(s.cfg.ModelDirs, p)
	switch {
	case errors.Is(err, authz.ErrOutsideModelDirs):
		return nil, openai.Errorf(http.StatusForbidden, openai.TypePermission, "path", "path_not_allowed", "%v (model directories: %v)", err, s.cfg.ModelDirs)
	case errors.Is(err, fs.ErrNotExist):
		return nil, openai.Errorf(http.StatusNotFound, openai.TypeNotFound, "path", "file_not_found", "%v", err)
	case err != nil:
		return nil, openai.BadRequest("path", "%v", err)
	}
	return f, nil
}

// benchSource is what a storage or e2e request reads: a held controller's
// namespace (hc, read-locked until release) or a file.
type benchSource struct {
	hc    *heldCtrl
	nsid  uint32
	path  string // the open file's /proc/self/fd path
	name  string // the file's path in its model directory, for logs
	ctx   context.Context
	close func()
}

// openBenchSource resolves a request's bdf/nsid or path. With neither,
// optional decides: an error, or an empty source.
func (s *Server) openBenchSource(ctx context.Context, bdfIn string, nsidIn int, pathIn string, optional bool) (*benchSource, error) {
	src := &benchSource{ctx: ctx, close: func() {}}
	switch {
	case bdfIn != "" && pathIn != "":
		return nil, openai.BadRequest("path", "name a controller (bdf, nsid) or a file (path), not both")
	case pathIn != "":
		f, err := s.openBenchFile(pathIn)
		if err != nil {
			return nil, err
		}
		src.path, src.name = authz.FDPath(f), f.Name()
		src.close = func() { f.Close() }
	case bdfIn != "":
		bdf, nsid, err := parseNamespace(bdfIn, nsidIn)
		if err != nil {
			return nil, err
		}
		reg := s.devices
		hc, err := reg.get(bdf)
		if err != nil {
			return nil, deviceError(err)
		}
		if err := hc.readLock(); err != nil {
			return nil, deviceError(err)
		}
		if _, err := hc.h.ctrl.Namespace(nsid); err != nil {
			hc.io.RUnlock()
			return nil, namespaceNotFound(bdf, nsid, err)
		}
		opCtx, done := reg.opContext(ctx)
		src.hc, src.nsid, src.ctx = hc, nsid, opCtx
		src.close = func() { done(); hc.io.RUnlock() }
	case !optional:
		return nil, openai.BadRequest("bdf", "name a held controller's namespace (bdf and nsid) or a file in the model directories (path)")
	}
	return src, nil
}

// benchLimits bound a storage sweep: its estimated time and the buffers
// it holds (the largest block size times the deepest queue).
type benchLimits struct {
	seconds     float64
	bufferBytes int64
	// admin says whose limits these are, for the refusal's message.
	admin bool
}

var (
	benchAdminLimits = benchLimits{seconds: api.BenchMaxSeconds, bufferBytes: 1 << 30, admin: true}
	// benchUserLimits hold the default sweep (66 points of 0.5 s, 4 MiB
	// blocks at depth 32) and not much more.
	benchUserLimits = benchLimits{seconds: 60, bufferBytes: 128 << 20}
)

// benchUserE2EBytes is how much an end-to-end bench of a peer outside the
// admin group may read (the default is 1 GiB).
const benchUserE2EBytes = 4 << 30

// storageLimits are the bounds for the request's peer: the admin's for
// uid 0 and the admin group, the smaller ones for everyone else.
func (s *Server) storageLimits(r *http.Request) benchLimits {
	if ok, err := s.policy.IsAdmin(peerOf(r)); err == nil && ok {
		return benchAdminLimits
	}
	return benchUserLimits
}

// checkBenchMemory refuses a bench whose buffers do not fit the host
// memory budget (what a model loaded now would get by default).
func (s *Server) checkBenchMemory(param string, bufferBytes int64) error {
	read := s.benchMem
	if read == nil {
		read = tier.ReadMemInfo
	}
	mi, err := read()
	if err != nil {
		return fmt.Errorf("bench: reading the host's memory: %w", err)
	}
	if budget := tier.DefaultHostBudget(mi); bufferBytes > budget {
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, param, "bench_memory",
			"the bench's buffers (%s) exceed the host memory budget (%s: available memory less the reserve); narrow the sweep",
			tier.FormatBytes(bufferBytes), tier.FormatBytes(budget))
	}
	return nil
}

// storageOptions checks a request against the daemon's bounds and lim,
// the peer's.
func storageOptions(req api.BenchStorageRequest, lim benchLimits) (bench.StorageOptions, error) {
	o := bench.StorageOptions{BlockSizes: req.BlockSizes, QueueDepths: req.QueueDepths, Pattern: req.Pattern,
		Region: req.RegionBytes, Seed: req.Seed}
	if len(o.BlockSizes) == 0 {
		o.BlockSizes = bench.DefaultBlockSizes
	}
	if len(o.QueueDepths) == 0 {
		o.QueueDepths = bench.DefaultQueueDepths
	}
	secs := req.PointSeconds
	if secs == 0 {
		secs = 0.5
	}
	points := len(o.BlockSizes) * len(o.QueueDepths)
	switch {
	case secs < 0 || secs > api.BenchMaxPointSeconds:
		return o, openai.BadRequest("point_seconds", "point_seconds must be in (0, %g]", api.BenchMaxPointSeconds)
	case points > api.BenchMaxPoints:
		return o, openai.BadRequest("block_sizes", "%d points (at most %d)", points, api.BenchMaxPoints)
	case float64(points)*secs*1.1 > api.BenchMaxSeconds:
		return o, openai.BadRequest("point_seconds", "%d points of %gs would run longer than %gs: narrow the sweep", points, secs, api.BenchMaxSeconds)
	case req.RegionBytes < 0:
		return o, openai.BadRequest("region_bytes", "region_bytes must not be negative")
	}
	for _, bs := range o.BlockSizes {
		if bs <= 0 || bs > bench.MaxBlockSize {
			return o, openai.BadRequest("block_sizes", "block size %d (1 … %d)", bs, bench.MaxBlockSize)
		}
	}
	for _, qd := range o.QueueDepths {
		if qd < 1 || qd > bench.MaxQueueDepth {
			return o, openai.BadRequest("queue_depths", "queue depth %d (1 … %d)", qd, bench.MaxQueueDepth)
		}
	}
	buffers := int64(slices.Max(o.BlockSizes)) * int64(slices.Max(o.QueueDepths))
	if buffers > benchAdminLimits.bufferBytes {
		return o, openai.BadRequest("queue_depths", "largest block size × deepest queue exceeds the 1 GiB of buffers a bench may use")
	}
	if !lim.admin {
		// Within what an admin may run, beyond what anyone may: 403, with
		// the bound to narrow to.
		switch {
		case float64(points)*secs*1.1 > lim.seconds:
			return o, openai.Errorf(http.StatusForbidden, openai.TypePermission, "point_seconds", "bench_limit",
				"%d points of %gs would run longer than %gs, the bound for peers outside the admin group: narrow the sweep", points, secs, lim.seconds)
		case buffers > lim.bufferBytes:
			return o, openai.Errorf(http.StatusForbidden, openai.TypePermission, "queue_depths", "bench_limit",
				"largest block size × deepest queue (%s) exceeds the %s of buffers allowed to peers outside the admin group: narrow the sweep",
				tier.FormatBytes(buffers), tier.FormatBytes(lim.bufferBytes))
		}
	}
	o.Duration = time.Duration(secs * float64(time.Second))
	return o, nil
}

func (s *Server) handleBenchStorage(w http.ResponseWriter, r *http.Request) error {
	var req api.BenchStorageRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	o, err := storageOptions(req, s.storageLimits(r))
	if err != nil {
		return err
	}
	if err := s.checkBenchMemory("queue_depths", int64(slices.Max(o.BlockSizes))*int64(slices.Max(o.QueueDepths))); err != nil {
		return err
	}
	release, err := s.benchStart()
	if err != nil {
		return err
	}
	defer release()
	src, err := s.openBenchSource(r.Context(), req.BDF, req.NSID, req.Path, false)
	if err != nil {
		return err
	}
	defer src.close()

	var t bench.Target
	var before uint64
	if src.hc != nil {
		nt, err := nvmebench.NewTarget(src.hc.h.ctrl, src.hc.h.dma, src.nsid, src.hc.bdf)
		if err != nil {
			return deviceError(err)
		}
		t, before = nt, src.hc.h.ctrl.Stats().ReadBytes
	} else {
		ft, err := hw.OpenFile(src.path, slices.Max(o.BlockSizes), slices.Max(o.QueueDepths), s.log.Named("bench"))
		if err != nil {
			return openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "path", "file_unreadable", "%v", err)
		}
		defer ft.Close()
		t = ft
	}
	s.log.Info("storage bench", "peer", peerOf(r).String(), "target", t.Info().Name, "points", len(o.BlockSizes)*len(o.QueueDepths))
	out := &benchStream{w: w}
	o.Progress = out.progress
	res, err := bench.Storage(src.ctx, t, o)
	if res != nil {
		res.Via = "stratad"
		if src.hc == nil {
			res.Target.Name = src.name // not the descriptor's /proc path
		}
		if src.hc != nil {
			var counted uint64
			for _, p := range res.Points {
				counted += p.Bytes
			}
			res.Notes = append(res.Notes, fmt.Sprintf("the controller counted %s read during the sweep (%s inside the measured windows)",
				bench.FormatSize(int64(src.hc.h.ctrl.Stats().ReadBytes-before)), bench.FormatSize(int64(counted))),
				"reads of blocks never written may be served without touching flash: bench a namespace that holds data (a written pool)")
		}
	}
	if err != nil && !errors.Is(err, bench.ErrBadOptions) {
		s.log.Warn("storage bench failed", "target", t.Info().Name, "error", err)
	}
	release()
	return out.finish(api.BenchEvent{Storage: res}, err)
}

func (s *Server) handleBenchPCIe(w http.ResponseWriter, r *http.Request) error {
	var req api.BenchPCIeRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	o := bench.PCIeOptions{Sizes: req.Sizes, PointBytes: req.PointBytes}
	for _, d := range req.Directions {
		o.Directions = append(o.Directions, bench.Direction(d))
	}
	for _, m := range req.Memory {
		o.Memory = append(o.Memory, bench.HostMemory(m))
	}
	if len(o.Sizes) > api.BenchMaxPoints || req.PointBytes < 0 || req.PointBytes > 64<<30 || req.GPU < 0 {
		return openai.BadRequest("sizes", "at most %d sizes, point_bytes up to 64 GiB, gpu ≥ 0", api.BenchMaxPoints)
	}
	maxSize := int64(0)
	for _, n := range o.Sizes {
		if n <= 0 || n > api.BenchMaxCopyBytes {
			return openai.BadRequest("sizes", "copy size %d (1 … %d)", n, int64(api.BenchMaxCopyBytes))
		}
		maxSize = max(maxSize, n)
	}
	if maxSize == 0 {
		maxSize = slices.Max(bench.DefaultPCIeSizes)
	}
	// The copier's pinned host buffer is the largest size.
	if err := s.checkBenchMemory("sizes", maxSize); err != nil {
		return err
	}
	release, err := s.benchStart()
	if err != nil {
		return err
	}
	defer release()
	gpu, err := hw.OpenGPU(req.GPU)
	if err != nil {
		return benchError(err)
	}
	cp, err := gpu.NewCopier(maxSize)
	if err != nil {
		gpu.Close()
		return benchError(err)
	}
	s.log.Info("pcie bench", "peer", peerOf(r).String(), "gpu", gpu.Name())
	out := &benchStream{w: w}
	o.Progress = out.progress
	res, err := bench.PCIe(r.Context(), cp, o)
	if res != nil {
		res.Via = "stratad"
	}
	if cerr := errors.Join(cp.Close(), gpu.Close()); cerr != nil {
		s.log.Warn("pcie bench: releasing the GPU buffers", "error", cerr)
	}
	release()
	return out.finish(api.BenchEvent{PCIe: res}, err)
}

func (s *Server) handleBenchE2E(w http.ResponseWriter, r *http.Request) error {
	var req api.BenchE2ERequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	if req.Bytes < 0 || req.Bytes > api.BenchMaxE2EBytes || req.Chunk < 0 || req.Chunk > bench.MaxBlockSize ||
		req.Slots < 0 || req.Slots > 16 || req.GPU < 0 {
		return openai.BadRequest("bytes", "bytes up to %d, chunk up to %d, slots up to 16, gpu ≥ 0", int64(api.BenchMaxE2EBytes), bench.MaxBlockSize)
	}
	// The staging slots are the host buffers (RouteOptions' defaults: 4 MiB
	// chunks, 2 slots); a peer outside the admin group reads at most
	// benchUserE2EBytes with the user's buffer bound.
	buffers := int64(cmp.Or(req.Chunk, 4<<20)) * int64(cmp.Or(req.Slots, 2))
	if lim := s.storageLimits(r); !lim.admin && (buffers > lim.bufferBytes || req.Bytes > benchUserE2EBytes) {
		return openai.Errorf(http.StatusForbidden, openai.TypePermission, "bytes", "bench_limit",
			"peers outside the admin group may read at most %s with %s of buffers (chunk × slots): narrow the route",
			tier.FormatBytes(benchUserE2EBytes), tier.FormatBytes(lim.bufferBytes))
	}
	if err := s.checkBenchMemory("chunk", buffers); err != nil {
		return err
	}
	release, err := s.benchStart()
	if err != nil {
		return err
	}
	defer release()
	src, err := s.openBenchSource(r.Context(), req.BDF, req.NSID, req.Path, true)
	if err != nil {
		return err
	}
	defer src.close()
	rep := hostcheck.Check(hostcheck.Options{Root: benchHostRoot})
	v := bench.HostVerdict{Kind: rep.Route.Kind, NVMe: rep.Route.NVMe, GPU: rep.Route.GPU, Why: rep.Route.Why, NotChosen: rep.Route.NotChosen}
	o := hw.E2EOptions{File: src.path, GPU: req.GPU, Where: "stratad", Log: s.log.Named("bench"), Verdict: &v,
		Route: bench.RouteOptions{Bytes: req.Bytes, Chunk: req.Chunk, Slots: req.Slots}}
	if src.hc != nil {
		nt, err := nvmebench.NewTarget(src.hc.h.ctrl, src.hc.h.dma, src.nsid, src.hc.bdf)
		if err != nil {
			return deviceError(err)
		}
		o.NVMe = nt
	}
	s.log.Info("e2e bench", "peer", peerOf(r).String(), "bdf", req.BDF, "path", src.name)
	res, err := hw.E2E(src.ctx, o)
	if res != nil && src.path != "" {
		for i := range res.Routes {
			if res.Routes[i].Source == src.path {
				res.Routes[i].Source = src.name // not the descriptor's /proc path
			}
		}
	}
	release()
	return (&benchStream{w: w}).finish(api.BenchEvent{E2E: res}, err)
}
