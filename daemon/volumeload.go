package daemon

// Models on strata volumes: `stratad --model nvme://BDF/NSID/NAME` and a
// load request whose path is such a reference open the prefab pool stored
// as extent NAME of the volume on namespace NSID of the controller at BDF,
// which the daemon holds (devices.go). The header, manifest and resident
// extents are copied into memory through the volume; tier-C extents are
// read every pass by the userspace driver into DMA-mapped staging buffers.
// While a model is loaded from a controller, unbinding it and formatting
// the namespace are refused.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/nvme/volume"
	"github.com/strata-llm/strata/vfio"
)

// VolumeScheme prefixes a model reference to a pool on a strata volume.
const VolumeScheme = "nvme://"

// volumeRef is a parsed nvme://BDF/NSID/NAME.
type volumeRef struct {
	bdf  string
	nsid uint32
	name string
}

func (v volumeRef) String() string {
	return fmt.Sprintf("%s%s/%d/%s", VolumeScheme, v.bdf, v.nsid, v.name)
}

// IsVolumeRef reports whether a model path names a pool on a volume.
func IsVolumeRef(path string) bool { return strings.HasPrefix(path, VolumeScheme) }

// parseVolumeRef parses nvme://BDF/NSID/NAME; NAME is the extent's name
// and may hold slashes.
func parseVolumeRef(s string) (volumeRef, error) {
	rest, ok := strings.CutPrefix(s, VolumeScheme)
	if !ok {
		return volumeRef{}, fmt.Errorf("model reference %q does not start with %s", s, VolumeScheme)
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[2] == "" {
		return volumeRef{}, fmt.Errorf("model reference %q: want %sBDF/NSID/NAME (e.g. %s0000:01:00.0/1/gocode.pool)", s, VolumeScheme, VolumeScheme)
	}
	bdf, err := vfio.ParseBDF(parts[0])
	if err != nil {
		return volumeRef{}, fmt.Errorf("model reference %q: %w", s, err)
	}
	n, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil || n == 0 {
		return volumeRef{}, fmt.Errorf("model reference %q: namespace %q is not a namespace ID (1 or more)", s, parts[1])
	}
	if len(parts[2]) > maxExtentNameLength {
		return volumeRef{}, fmt.Errorf("model reference %q: extent name longer than %d bytes", s, maxExtentNameLength)
	}
	return volumeRef{bdf: bdf, nsid: uint32(n), name: parts[2]}, nil
}

// LoadVolume loads the pool that ref (nvme://BDF/NSID/NAME) names. With
// bind, a controller the daemon does not hold yet is bound first (the
// operator's --model flag); otherwise it must have been bound (`strata
// devices bind`). The draft model, when req names one, is a file.
func (s *Server) LoadVolume(ctx context.Context, ref string, req api.LoadRequest, bind bool) (api.ModelStatus, error) {
	var df *os.File
	if req.Draft != "" {
		var err error
		if df, err = authz.OpenRegular(req.Draft); err != nil {
			return api.ModelStatus{}, openai.BadRequest("draft", "draft model: %v", err)
		}
		defer df.Close()
	}
	return s.loadVolume(ctx, ref, df, req, bind)
}

func (s *Server) loadVolume(ctx context.Context, ref string, df *os.File, req api.LoadRequest, bind bool) (api.ModelStatus, error) {
	vr, err := parseVolumeRef(ref)
	if err != nil {
		return api.ModelStatus{}, openai.BadRequest("path", "%v", err)
	}
	reg := s.devices
	hc, err := reg.get(vr.bdf)
	if errors.Is(err, errNotHeld) && bind {
		hc, err = reg.bind(ctx, vr.bdf)
	}
	if err != nil {
		return api.ModelStatus{}, deviceError(err)
	}
	in, err := hc.useVolume(ctx, reg, vr, req.Name)
	if err != nil {
		return api.ModelStatus{}, err
	}
	s.log.Info("loading a model from a volume", "ref", vr.String(), "bytes", in.size, "via", in.storage.Via)
	return s.loadModel(ctx, in, df, req)
}

// useVolume opens the pool extent vr names on hc and records a model
// using hc (released by the returned input's release), so that unbind and
// format refuse while it is loaded.
func (hc *heldCtrl) useVolume(ctx context.Context, reg *deviceRegistry, vr volumeRef, model string) (modelInput, error) {
	if err := hc.readLock(); err != nil {
		return modelInput{}, deviceError(err)
	}
	defer hc.io.RUnlock()
	ctx, done := reg.opContext(ctx)
	defer done()
	if _, err := hc.h.ctrl.Namespace(vr.nsid); err != nil {
		return modelInput{}, namespaceNotFound(vr.bdf, vr.nsid, err)
	}
	v, err := hc.volume(ctx, vr.nsid)
	if err != nil {
		return modelInput{}, deviceError(err)
	}
	e, err := v.Lookup(vr.name)
	if errors.Is(err, volume.ErrNotFound) {
		return modelInput{}, openai.Errorf(http.StatusNotFound, openai.TypeInvalidRequest, "path", "model_file_not_found",
			"%s: no extent %q on the volume (write one with `strata devices pool write`)", vr, vr.name)
	}
	if err != nil {
		return modelInput{}, deviceError(err)
	}
	c := hc.h.ctrl
	qs := c.Queues()
	depth := 0
	if len(qs) > 0 {
		depth = qs[0].Depth()
	}
	via := fmt.Sprintf("userspace NVMe driver on %s namespace %d: %d I/O queues of depth %d, transfers split at %s (MDTS), into DMA staging mapped in the controller's IOMMU domain",
		vr.bdf, vr.nsid, len(qs), depth, tier.FormatBytes(int64(c.MaxTransfer())))
	key := vr.String()
	hc.volMu.Lock()
	if hc.users == nil {
		hc.users = map[string]int{}
	}
	hc.users[key]++
	hc.volMu.Unlock()
	release := func() {
		hc.volMu.Lock()
		if hc.users[key]--; hc.users[key] <= 0 {
			delete(hc.users, key)
		}
		hc.volMu.Unlock()
	}
	st := &engine.Storage{
		Reader: v.Reader(e), Size: e.Length, Device: fmt.Sprintf("%s%s/%d", VolumeScheme, vr.bdf, vr.nsid), Via: via,
		OpenSource: func() (tier.Source, error) { return v.Source(vr.name) },
	}
	return modelInput{path: key, open: key, size: e.Length, storage: st, release: release}, nil
}

// inUse names the models loaded from hc's volumes ("" when none). The
// caller holds hc.io.
func (hc *heldCtrl) inUse() string {
	hc.volMu.Lock()
	defer hc.volMu.Unlock()
	var refs []string
	for r := range hc.users {
		refs = append(refs, r)
	}
	return strings.Join(refs, ", ")
}

// Engine returns the engine serving the loaded model name, for in-process
// tools and tests that hold a serving path to token ids (a model's golden
// continuation) rather than to text. Passes it runs share the model with
// the scheduler's: use it while no request is running.
func (s *Server) Engine(name string) (*engine.Engine, error) {
	lm, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	return lm.eng, nil
}
