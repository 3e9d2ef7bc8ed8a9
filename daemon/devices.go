package daemon

// The device API (api.PathDevices …): stratad owns the NVMe controllers it
// streams from. An administrator binds a controller (devices.Claim hands
// it to vfio-pci, refusing one the host still uses) and the daemon opens it
// with the userspace driver and keeps it in a registry; volumes are
// formatted and pools written through the daemon; any peer reads the
// listing and the counters. Clients never open /dev/vfio.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/daemon/authz"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/devices"
	"github.com/strata-llm/strata/nvme/vfiobus"
	"github.com/strata-llm/strata/nvme/volume"
	"github.com/strata-llm/strata/nvmehost"
	"github.com/strata-llm/strata/vfio"
)

// Defaults for controllers the daemon opens.
const (
	deviceIOQueues      = 4
	deviceQueueDepth    = 64
	deviceSampleEvery   = time.Second
	deviceCloseTimeout  = 30 * time.Second
	maxExtentNameLength = 255 // nvme/volume's limit
)

// handleFunc is the signature of routes()'s handle helper: it checks the
// method and the peer's authorisation before calling h.
type handleFunc func(path, method string, act authz.Action, h func(w http.ResponseWriter, r *http.Request) error)

// deviceRoutes registers the device API. Reading (list, stats, a volume's
// extents) is authz.ReadState; binding and unbinding are authz.BindDevice;
// formatting a volume and writing a pool are authz.WritePool.
func (s *Server) deviceRoutes(handle handleFunc) {
	handle(api.PathDevices, http.MethodGet, authz.ReadState, s.handleDevices)
	handle(api.PathDeviceStats, http.MethodGet, authz.ReadState, s.handleDeviceStats)
	handle(api.PathVolume, http.MethodGet, authz.ReadState, s.handleVolume)
	handle(api.PathDeviceBind, http.MethodPost, authz.BindDevice, s.handleBind)
	handle(api.PathDeviceUnbind, http.MethodPost, authz.BindDevice, s.handleUnbind)
	handle(api.PathDeviceReset, http.MethodPost, authz.BindDevice, s.handleReset)
	handle(api.PathVolumeFormat, http.MethodPost, authz.WritePool, s.handleFormat)
	handle(api.PathPoolWrite, http.MethodPost, authz.WritePool, s.handlePoolWrite)
}

// SetDeviceHost points device discovery and binding at another sysfs and
// procfs (tests use fake trees). Call it before serving.
func (s *Server) SetDeviceHost(h nvmehost.Host) { s.devices.host = h }

// CloseDevices shuts down every controller the daemon holds (in-flight
// pool writes are cancelled first) and refuses further binds. The
// controllers stay on vfio-pci: binding is the administrator's decision,
// undone only by unbind. stratad calls it after Serve returns; errors are
// logged as well as returned.
func (s *Server) CloseDevices() error {
	err := s.devices.close()
	if err != nil {
		s.log.Warn("closing NVMe controllers", "error", err)
	}
	return err
}

// handle is an open NVMe controller and the DMA allocator it uses.
type handle struct {
	ctrl  *nvme.Controller
	dma   nvme.DMA
	close func(ctx context.Context) error
	// dmaStats reports the controller's IOMMU domain (nil: the opener
	// has none to report, as with the software controller).
	dmaStats func() vfio.DMAStats
}

// opener opens the controller at bdf (already on vfio-pci).
type opener func(ctx context.Context, bdf string) (*handle, error)

// deviceRegistry is the set of controllers the daemon holds.
type deviceRegistry struct {
	log      hclog.Logger
	host     nvmehost.Host
	open     opener
	release  func(bdf, driver string) error
	probe    func() vfio.ProbeResult
	interval time.Duration

	ctx    context.Context // cancelled by close: ends device work in flight
	cancel context.CancelFunc

	opMu   sync.Mutex   // serialises bind, unbind and close
	mu     sync.RWMutex // guards held and closed
	held   map[string]*heldCtrl
	closed bool
}

func newDeviceRegistry(log hclog.Logger, host nvmehost.Host) *deviceRegistry {
	ctx, cancel := context.WithCancel(context.Background())
	r := &deviceRegistry{log: log, host: host, probe: vfio.Probe, interval: deviceSampleEvery,
		ctx: ctx, cancel: cancel, held: map[string]*heldCtrl{}}
	r.open = r.openVFIO
	r.release = func(bdf, driver string) error { return r.host.Release(bdf, driver) }
	return r
}

// openVFIO opens bdf in a fresh type1 DMA domain and brings the
// controller up with the userspace driver (polled completions: no CPU is
// spent while the controller is idle).
func (r *deviceRegistry) openVFIO(ctx context.Context, bdf string) (*handle, error) {
	dom, err := vfio.NewDomain(vfio.DomainOptions{Backend: vfio.BackendType1, Sysfs: r.host.Sysfs})
	if err != nil {
		return nil, err
	}
	bus, err := vfiobus.Open(dom, bdf)
	if err != nil {
		dom.Close()
		return nil, err
	}
	c, err := nvme.Open(ctx, nvme.Config{MMIO: bus, DMA: bus, Logger: r.log.Named(bdf),
		IOQueues: deviceIOQueues, QueueDepth: deviceQueueDepth})
	if err != nil {
		bus.Close()
		dom.Close()
		return nil, err
	}
	return &handle{ctrl: c, dma: bus, dmaStats: dom.Stats, close: func(ctx context.Context) error {
		return errors.Join(c.Close(ctx), bus.Close(), dom.Close())
	}}, nil
}

// heldCtrl is one controller the daemon holds.
type heldCtrl struct {
	bdf        string
	h          *handle
	since      time.Time
	prevDriver string

	// io is read-locked by volume I/O (pool writes, volume reads) and
	// write-locked by format and close; gone is set under the write lock
	// when the controller leaves the registry.
	io   sync.RWMutex
	gone bool

	volMu sync.Mutex
	vols  map[uint32]*heldVolume
	users map[string]int // models loaded from the volumes, by nvme:// reference (volumeload.go)

	rateMu   sync.Mutex
	first    ctrSample
	last     ctrSample
	interval api.Rates
	ticked   bool
	stop     chan struct{}
	done     chan struct{}
}

type heldVolume struct {
	dev *volume.NVMe
	vol *volume.Volume
}

type ctrSample struct {
	t  time.Time
	st nvme.Stats
}

// errNotHeld, errGone and errClosing become 409/503 responses.
var (
	errNotHeld = errors.New("controller not held by stratad")
	errGone    = errors.New("controller was unbound")
	errClosing = errors.New("stratad is shutting down")
	errBusy    = errors.New("controller busy")
)

// opContext is ctx, also cancelled when the registry closes.
func (r *deviceRegistry) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (r *deviceRegistry) get(bdf string) (*heldCtrl, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, errClosing
	}
	hc, ok := r.held[bdf]
	if !ok {
		return nil, fmt.Errorf("%s: %w", bdf, errNotHeld)
	}
	return hc, nil
}

// readLock takes hc for I/O; it fails once hc has been unbound.
func (hc *heldCtrl) readLock() error {
	hc.io.RLock()
	if hc.gone {
		hc.io.RUnlock()
		return fmt.Errorf("%s: %w", hc.bdf, errGone)
	}
	return nil
}

// bind claims bdf for vfio-pci and opens it. Binding a held controller
// returns it as it is.
func (r *deviceRegistry) bind(ctx context.Context, bdf string) (*heldCtrl, error) {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	if hc, err := r.get(bdf); err == nil || errors.Is(err, errClosing) {
		return hc, err
	}
	prev, err := r.host.Claim(bdf)
	if err != nil {
		return nil, err
	}
	ctx, done := r.opContext(ctx)
	defer done()
	h, err := r.open(ctx, bdf)
	if err != nil {
		// Give the host its drive back rather than strand it on vfio-pci.
		if prev != "" && prev != "vfio-pci" {
			if rerr := r.release(bdf, prev); rerr != nil {
				r.log.Error("bind failed and the controller could not be given back", "bdf", bdf, "driver", prev, "error", rerr)
				err = fmt.Errorf("%w (and returning it to %s failed: %v)", err, prev, rerr)
			}
		}
		return nil, fmt.Errorf("opening %s with the userspace driver: %w", bdf, err)
	}
	now := time.Now()
	first := ctrSample{t: now, st: h.ctrl.Stats()}
	hc := &heldCtrl{bdf: bdf, h: h, since: now, prevDriver: prev, vols: map[uint32]*heldVolume{},
		first: first, last: first, stop: make(chan struct{}), done: make(chan struct{})}
	// Open the volumes already on the namespaces, so listings show them.
	for _, nsid := range sortedNSIDs(h.ctrl) {
		if _, err := hc.volume(ctx, nsid); err != nil && !errors.Is(err, volume.ErrNotFormatted) {
			r.log.Warn("namespace holds no readable strata volume", "bdf", bdf, "nsid", nsid, "error", err)
		}
	}
	go hc.sampleLoop(r.interval)
	r.mu.Lock()
	r.held[bdf] = hc
	r.mu.Unlock()
	info := h.ctrl.Info()
	r.log.Info("controller bound", "bdf", bdf, "previous_driver", prev, "model", info.Model, "serial", info.Serial,
		"namespaces", len(h.ctrl.Namespaces()), "queues", len(h.ctrl.Queues()))
	return hc, nil
}

// unbind closes bdf if the daemon holds it and binds it to driver.
func (r *deviceRegistry) unbind(ctx context.Context, bdf, driver string) (wasHeld bool, err error) {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	hc, err := r.get(bdf)
	if errors.Is(err, errClosing) {
		return false, err
	}
	if hc != nil {
		if !hc.io.TryLock() {
			return false, fmt.Errorf("%s: %w: a volume format or pool write is running", bdf, errBusy)
		}
		if m := hc.inUse(); m != "" {
			hc.io.Unlock()
			return false, fmt.Errorf("%s: %w: models are loaded from it (%s); unload them first", bdf, errBusy, m)
		}
		hc.gone = true
		r.mu.Lock()
		delete(r.held, bdf)
		r.mu.Unlock()
		cerr := hc.shutdown(ctx)
		hc.io.Unlock()
		if cerr != nil {
			r.log.Warn("controller did not shut down cleanly", "bdf", bdf, "error", cerr)
		}
		r.log.Info("controller closed", "bdf", bdf)
	} else {
		c, err := r.host.Controller(bdf)
		if err != nil {
			return false, err
		}
		if c.Driver == "vfio-pci" && groupBusy(c.IOMMUGroup) {
			// Unbinding would block in the kernel until that process lets go.
			return false, fmt.Errorf("%s: %w: its IOMMU group %d is open in another process", bdf, errBusy, c.IOMMUGroup)
		}
	}
	if driver == "" {
		driver = "nvme"
	}
	if err := r.release(bdf, driver); err != nil {
		if errors.Is(err, nvmehost.ErrInUse) {
			return hc != nil, err // the same report as a refused bind
		}
		return hc != nil, fmt.Errorf("giving %s to %s: %w", bdf, driver, err)
	}
	r.log.Info("controller unbound", "bdf", bdf, "driver", driver)
	return hc != nil, nil
}

// groupBusy reports whether another process has VFIO group n open (the
// type1 group node admits one opener at a time).
func groupBusy(n int) bool {
	if n < 0 {
		return false
	}
	g, err := vfio.OpenGroup(n)
	if err != nil {
		return errors.Is(err, syscall.EBUSY)
	}
	g.Close()
	return false
}

// shutdown closes hc's volumes, stops its sampler and shuts the
// controller down. The caller holds hc.io's write lock.
func (hc *heldCtrl) shutdown(ctx context.Context) error {
	close(hc.stop)
	<-hc.done
	var errs []error
	hc.volMu.Lock()
	for nsid, hv := range hc.vols {
		errs = append(errs, hv.dev.Close())
		delete(hc.vols, nsid)
	}
	hc.volMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deviceCloseTimeout)
	defer cancel()
	errs = append(errs, hc.h.close(ctx))
	return errors.Join(errs...)
}

// close shuts down every held controller; in-flight device work is
// cancelled and waited for.
func (r *deviceRegistry) close() error {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	held := r.held
	r.held = map[string]*heldCtrl{}
	r.mu.Unlock()
	r.cancel()
	var errs []error
	for _, bdf := range slices.Sorted(mapKeys(held)) {
		hc := held[bdf]
		hc.io.Lock()
		hc.gone = true
		if err := hc.shutdown(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", bdf, err))
		}
		hc.io.Unlock()
		r.log.Info("controller closed at shutdown (stays on vfio-pci)", "bdf", bdf)
	}
	return errors.Join(errs...)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// volume returns namespace nsid's open volume, opening it from the device
// if needed. The caller holds hc.io (read or write).
func (hc *heldCtrl) volume(ctx context.Context, nsid uint32) (*volume.Volume, error) {
	hc.volMu.Lock()
	defer hc.volMu.Unlock()
	if hv, ok := hc.vols[nsid]; ok {
		return hv.vol, nil
	}
	dev, err := volume.NewNVMe(hc.h.ctrl, hc.h.dma, nsid)
	if err != nil {
		return nil, err
	}
	v, err := volume.Open(ctx, dev)
	if err != nil {
		dev.Close()
		return nil, err
	}
	hc.vols[nsid] = &heldVolume{dev: dev, vol: v}
	return v, nil
}

// format writes a new volume on nsid. The caller holds hc.io's write lock.
func (hc *heldCtrl) format(ctx context.Context, nsid uint32, o volume.FormatOptions) (*volume.Volume, error) {
	hc.volMu.Lock()
	if hv, ok := hc.vols[nsid]; ok {
		hv.dev.Close()
		delete(hc.vols, nsid)
	}
	hc.volMu.Unlock()
	dev, err := volume.NewNVMe(hc.h.ctrl, hc.h.dma, nsid)
	if err != nil {
		return nil, err
	}
	v, err := volume.Format(ctx, dev, o)
	if err != nil {
		dev.Close()
		return nil, err
	}
	hc.volMu.Lock()
	hc.vols[nsid] = &heldVolume{dev: dev, vol: v}
	hc.volMu.Unlock()
	return v, nil
}

// cachedVolume returns nsid's volume if it is open, without I/O.
func (hc *heldCtrl) cachedVolume(nsid uint32) *volume.Volume {
	hc.volMu.Lock()
	defer hc.volMu.Unlock()
	if hv, ok := hc.vols[nsid]; ok {
		return hv.vol
	}
	return nil
}

// sampleLoop records the controller's counters every interval, so that
// stats can report the rates of the last complete interval.
func (hc *heldCtrl) sampleLoop(every time.Duration) {
	defer close(hc.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-hc.stop:
			return
		case now := <-t.C:
			cur := ctrSample{t: now, st: hc.h.ctrl.Stats()}
			hc.rateMu.Lock()
			hc.interval = rates(hc.last, cur)
			hc.last = cur
			hc.ticked = true
			hc.rateMu.Unlock()
		}
	}
}

// rates is the throughput between two samples.
func rates(a, b ctrSample) api.Rates {
	secs := b.t.Sub(a.t).Seconds()
	if secs <= 0 {
		return api.Rates{}
	}
	per := func(x, y uint64) float64 {
		if y < x {
			return 0
		}
		return float64(y-x) / secs
	}
	return api.Rates{Seconds: secs,
		ReadGBps: per(a.st.ReadBytes, b.st.ReadBytes) / 1e9, WriteGBps: per(a.st.WriteBytes, b.st.WriteBytes) / 1e9,
		ReadIOPS: per(a.st.Reads, b.st.Reads), WriteIOPS: per(a.st.Writes, b.st.Writes)}
}

func (hc *heldCtrl) stats() api.ControllerStats {
	now := ctrSample{t: time.Now(), st: hc.h.ctrl.Stats()}
	hc.rateMu.Lock()
	interval, ticked, first := hc.interval, hc.ticked, hc.first
	hc.rateMu.Unlock()
	if !ticked {
		// Less than one interval held: the rates so far.
		interval = rates(first, now)
	}
	st := now.st
	out := api.ControllerStats{BDF: hc.bdf, Model: hc.h.ctrl.Info().Model, HeldSince: hc.since,
		Reads: st.Reads, Writes: st.Writes, ReadBytes: st.ReadBytes, WriteBytes: st.WriteBytes,
		Errors: st.Errors, Timeouts: st.Timeouts, Aborts: st.Aborts, Resets: st.Resets, Resubmitted: st.Resubmitted,
		Queues: []api.QueueStats{}, Interval: interval, Average: rates(first, now)}
	if hc.h.dmaStats != nil {
		d := hc.h.dmaStats()
		out.DMAMappings, out.DMABytes = d.Mappings, d.Bytes
	}
	for i, q := range hc.h.ctrl.Queues() {
		qs := api.QueueStats{ID: int(q.ID()), Depth: q.Depth()}
		if i < len(st.Inflight) {
			qs.Inflight = st.Inflight[i]
		}
		out.Queues = append(out.Queues, qs)
	}
	return out
}

func sortedNSIDs(c *nvme.Controller) []uint32 {
	var ids []uint32
	for id := range c.Namespaces() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// deviceError turns device, VFIO and volume errors into API errors with a
// status a client can act on.
func deviceError(err error) error {
	var oe *openai.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &oe):
		return oe
	case errors.Is(err, errClosing):
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "shutting_down", "%v", err)
	case errors.Is(err, errNotHeld), errors.Is(err, errGone):
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "bdf", "device_not_bound",
			"%v: bind it first (strata devices bind BDF)", err)
	case errors.Is(err, errBusy), errors.Is(err, syscall.EBUSY):
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "bdf", "device_busy", "%v", err)
	case errors.Is(err, nvmehost.ErrInUse):
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "bdf", "device_in_use",
			"%v (unmount it, swapoff or remove the stacked devices first)", err)
	case errors.Is(err, vfio.ErrNoDevice):
		return openai.Errorf(http.StatusNotFound, openai.TypeNotFound, "bdf", "device_not_found", "%v", err)
	case errors.Is(err, vfio.ErrNoIOMMU):
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "vfio_unavailable",
			"%v (VFIO needs the IOMMU on, e.g. intel_iommu=on or amd_iommu=on, and the vfio-pci and vfio_iommu_type1 modules; strata never uses no-IOMMU mode)", err)
	case errors.Is(err, vfio.ErrNotSupported):
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "vfio_unsupported", "%v", err)
	case errors.Is(err, volume.ErrNotFormatted):
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "nsid", "volume_not_formatted",
			"%v: format the namespace first (strata devices volume format BDF NSID)", err)
	case errors.Is(err, volume.ErrExists):
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "name", "extent_exists", "%v", err)
	case errors.Is(err, volume.ErrNoSpace):
		return openai.Errorf(http.StatusInsufficientStorage, openai.TypeServer, "", "no_space", "%v", err)
	case errors.Is(err, volume.ErrCorrupt), errors.Is(err, volume.ErrChecksum):
		return openai.Errorf(http.StatusInternalServerError, openai.TypeServer, "", "volume_corrupt", "%v", err)
	case errors.Is(err, nvme.ErrMedia), errors.Is(err, nvme.ErrTimeout), errors.Is(err, nvme.ErrControllerFatal),
		errors.Is(err, nvme.ErrClosed), errors.Is(err, nvme.ErrAbortRequested), errors.Is(err, nvme.ErrPath):
		return openai.Errorf(http.StatusBadGateway, openai.TypeServer, "", "device_io_error", "%v", err)
	case errors.Is(err, context.Canceled):
		return openai.Errorf(http.StatusServiceUnavailable, openai.TypeUnavailable, "", "cancelled", "%v", err)
	}
	return openai.Errorf(http.StatusInternalServerError, openai.TypeServer, "", "device_error", "%v", err)
}

// parseBDF validates a client-supplied PCI address.
func parseBDF(s string) (string, error) {
	if s == "" {
		return "", openai.BadRequest("bdf", "bdf is required (a PCI address such as 0000:01:00.0)")
	}
	canon, err := vfio.ParseBDF(s)
	if err != nil {
		return "", openai.BadRequest("bdf", "%v", err)
	}
	return canon, nil
}

func checkNSID(n int) (uint32, error) {
	if n <= 0 || n > 0xfffffffe {
		return 0, openai.BadRequest("nsid", "nsid must be a namespace ID from 1, got %d", n)
	}
	return uint32(n), nil
}

// readDeviceRequest decodes a device API request body strictly into req
// and validates the PCI address in it. bdf points at req's BDF field; it
// is read once req is decoded.
func (s *Server) readDeviceRequest(w http.ResponseWriter, r *http.Request, req any, bdf *string) (string, error) {
	if err := s.readStrict(w, r, req); err != nil {
		return "", err
	}
	return parseBDF(*bdf)
}

// readNamespaceRequest is readDeviceRequest for a request that also names
// a namespace: nsid points at req's NSID field.
func (s *Server) readNamespaceRequest(w http.ResponseWriter, r *http.Request, req any, bdf *string, nsid *int) (string, uint32, error) {
	if err := s.readStrict(w, r, req); err != nil {
		return "", 0, err
	}
	return parseNamespace(*bdf, *nsid)
}

// parseNamespace validates a client-supplied namespace address: a PCI
// address and a namespace ID, checked in that order.
func parseNamespace(bdf string, nsid int) (string, uint32, error) {
	canon, err := parseBDF(bdf)
	if err != nil {
		return "", 0, err
	}
	n, err := checkNSID(nsid)
	if err != nil {
		return "", 0, err
	}
	return canon, n, nil
}

func (s *Server) handleDevices(w http.ResponseWriter, r *http.Request) error {
	reg := s.devices
	p := reg.probe()
	list := api.DeviceList{Controllers: []api.Controller{},
		VFIO: api.VFIOStatus{Available: p.Type1 || p.IOMMUFD, Type1: p.Type1, IOMMUFD: p.IOMMUFD, Notes: p.Notes}}
	all, err := reg.host.List()
	if err != nil {
		return openai.Errorf(http.StatusInternalServerError, openai.TypeServer, "", "device_list_failed", "listing NVMe controllers: %v", err)
	}
	for _, c := range all {
		list.Controllers = append(list.Controllers, reg.describe(c, list.VFIO.Available))
	}
	return writeJSON(w, list)
}

// describe merges what sysfs says about c with what the daemon knows of it.
func (r *deviceRegistry) describe(c nvmehost.Controller, vfioOK bool) api.Controller {
	out := api.Controller{BDF: c.BDF, Vendor: fmt.Sprintf("%04x", c.Vendor), Device: fmt.Sprintf("%04x", c.Device),
		Driver: c.Driver, IOMMUGroup: c.IOMMUGroup, Namespaces: []api.Namespace{}, Users: c.Users()}
	if id, ok := r.host.KernelIdentity(c.BDF); ok {
		out.Model, out.Serial, out.Firmware = id.Model, id.Serial, id.Firmware
	}
	for _, d := range c.Disks {
		ns := api.Namespace{NSID: d.NSID, Disk: d.Name, Partitions: d.Partitions, Mounts: d.Mounts, Swap: d.Swap, Holders: d.Holders}
		ns.Bytes, ns.BlockSize = r.host.DiskGeometry(d.Name)
		out.Namespaces = append(out.Namespaces, ns)
	}
	hc, _ := r.get(c.BDF)
	switch {
	case hc != nil:
		since := hc.since
		out.Held, out.HeldSince = true, &since
		info := hc.h.ctrl.Info()
		out.Model, out.Serial, out.Firmware = info.Model, info.Serial, info.Firmware
		out.Namespaces = out.Namespaces[:0]
		for _, nsid := range sortedNSIDs(hc.h.ctrl) {
			ni, _ := hc.h.ctrl.Namespace(nsid)
			ns := api.Namespace{NSID: int(nsid), Bytes: int64(ni.Size) * int64(ni.BlockSize), BlockSize: ni.BlockSize}
			if v := hc.cachedVolume(nsid); v != nil {
				ns.Volume = summarize(v)
			}
			out.Namespaces = append(out.Namespaces, ns)
		}
		out.Note = "held by stratad (userspace driver); unbind gives it back to the kernel"
	case len(out.Users) > 0:
		out.Note = "in use by the host: bind is refused"
	case c.IOMMUGroup < 0:
		out.Note = "no IOMMU group: cannot be bound (enable the IOMMU)"
	case !vfioOK:
		out.Note = "VFIO is not available on this host: cannot be bound"
	case c.Driver == "vfio-pci":
		out.Note = "on vfio-pci, not held: bind opens it"
	default:
		out.Note = "idle: bind takes it from the host"
	}
	return out
}

func summarize(v *volume.Volume) *api.VolumeSummary {
	sb := v.Superblock()
	vs := &api.VolumeSummary{Label: sb.Label, FreeBytes: v.Free(), Generation: sb.Generation}
	for _, e := range v.Extents() {
		vs.Extents++
		vs.UsedBytes += e.Reserved
	}
	return vs
}

func volumeInfo(bdf string, nsid uint32, v *volume.Volume) api.VolumeInfo {
	sb := v.Superblock()
	vi := api.VolumeInfo{BDF: bdf, NSID: int(nsid), Label: sb.Label, Version: sb.Version, BlockSize: int(sb.BlockSize),
		Bytes: sb.Size, DataOffset: sb.DataOffset, FreeBytes: v.Free(), Generation: sb.Generation, Extents: []api.Extent{}}
	for _, e := range v.Extents() {
		vi.Extents = append(vi.Extents, extentOf(e))
	}
	return vi
}

func extentOf(e volume.Extent) api.Extent {
	return api.Extent{Name: e.Name, Offset: e.Offset, Length: e.Length, Reserved: e.Reserved,
		XXH3: fmt.Sprintf("%016x", e.Checksum), Created: e.Created}
}

func (s *Server) handleDeviceStats(w http.ResponseWriter, r *http.Request) error {
	reg := s.devices
	out := api.DeviceStats{Controllers: []api.ControllerStats{}}
	if q := r.URL.Query().Get("bdf"); q != "" {
		bdf, err := parseBDF(q)
		if err != nil {
			return err
		}
		hc, err := reg.get(bdf)
		if err != nil {
			return deviceError(err)
		}
		out.Controllers = append(out.Controllers, hc.stats())
		return writeJSON(w, out)
	}
	reg.mu.RLock()
	held := make([]*heldCtrl, 0, len(reg.held))
	for _, bdf := range slices.Sorted(mapKeys(reg.held)) {
		held = append(held, reg.held[bdf])
	}
	reg.mu.RUnlock()
	for _, hc := range held {
		out.Controllers = append(out.Controllers, hc.stats())
	}
	return writeJSON(w, out)
}

func (s *Server) handleVolume(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	bdf, err := parseBDF(q.Get("bdf"))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(q.Get("nsid"))
	if err != nil {
		return openai.BadRequest("nsid", "nsid must be a number, got %q", q.Get("nsid"))
	}
	nsid, err := checkNSID(n)
	if err != nil {
		return err
	}
	_, v, release, err := s.openVolume(r, bdf, nsid)
	if err != nil {
		return err
	}
	defer release()
	return writeJSON(w, volumeInfo(bdf, nsid, v))
}

// openVolume finds the held controller bdf, takes its I/O read lock (so an
// unbind waits for the operation), checks that namespace nsid exists and
// opens its strata volume, with a context that daemon shutdown cancels.
// release undoes all of it; on error nothing is held and the error is the
// API error to return.
func (s *Server) openVolume(r *http.Request, bdf string, nsid uint32) (context.Context, *volume.Volume, func(), error) {
	reg := s.devices
	hc, err := reg.get(bdf)
	if err != nil {
		return nil, nil, nil, deviceError(err)
	}
	if err := hc.readLock(); err != nil {
		return nil, nil, nil, deviceError(err)
	}
	if _, err := hc.h.ctrl.Namespace(nsid); err != nil {
		hc.io.RUnlock()
		return nil, nil, nil, namespaceNotFound(bdf, nsid, err)
	}
	ctx, done := reg.opContext(r.Context())
	release := func() { done(); hc.io.RUnlock() }
	v, err := hc.volume(ctx, nsid)
	if err != nil {
		release()
		return nil, nil, nil, deviceError(err)
	}
	return ctx, v, release, nil
}

func namespaceNotFound(bdf string, nsid uint32, err error) error {
	return openai.Errorf(http.StatusNotFound, openai.TypeNotFound, "nsid", "namespace_not_found", "%s has no namespace %d: %v", bdf, nsid, err)
}

func (s *Server) handleBind(w http.ResponseWriter, r *http.Request) error {
	var req api.BindRequest
	bdf, err := s.readDeviceRequest(w, r, &req, &req.BDF)
	if err != nil {
		return err
	}
	s.log.Info("device bind requested", "peer", peerOf(r).String(), "bdf", bdf)
	reg := s.devices
	hc, err := reg.bind(r.Context(), bdf)
	if err != nil {
		s.log.Warn("device bind refused", "bdf", bdf, "error", err)
		return deviceError(err)
	}
	c, err := reg.host.Controller(bdf)
	if err != nil {
		return deviceError(err)
	}
	p := reg.probe()
	return writeJSON(w, api.BindResponse{Controller: reg.describe(c, p.Type1 || p.IOMMUFD), PreviousDriver: hc.prevDriver})
}

func (s *Server) handleUnbind(w http.ResponseWriter, r *http.Request) error {
	var req api.UnbindRequest
	bdf, err := s.readDeviceRequest(w, r, &req, &req.BDF)
	if err != nil {
		return err
	}
	if req.Driver == "vfio-pci" || strings.ContainsAny(req.Driver, "/\x00\n") || len(req.Driver) > 64 {
		return openai.BadRequest("driver", "driver %q: name a kernel driver other than vfio-pci (default nvme)", req.Driver)
	}
	s.log.Info("device unbind requested", "peer", peerOf(r).String(), "bdf", bdf, "driver", req.Driver)
	reg := s.devices
	wasHeld, err := reg.unbind(r.Context(), bdf, req.Driver)
	if err != nil {
		s.log.Warn("device unbind failed", "bdf", bdf, "error", err)
		return deviceError(err)
	}
	drv, err := reg.host.Sysfs.Driver(bdf)
	if err != nil {
		return deviceError(err)
	}
	return writeJSON(w, api.UnbindResponse{BDF: bdf, Driver: drv, WasHeld: wasHeld})
}

// handleReset resets a held controller through the driver, which submits
// the commands in flight again once the controller is back; models
// streaming from it keep going.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) error {
	var req api.ResetRequest
	bdf, err := s.readDeviceRequest(w, r, &req, &req.BDF)
	if err != nil {
		return err
	}
	hc, err := s.devices.get(bdf)
	if err != nil {
		return deviceError(err)
	}
	if err := hc.readLock(); err != nil {
		return deviceError(err)
	}
	defer hc.io.RUnlock()
	peer := peerOf(r).String()
	s.log.Warn("device reset requested", "peer", peer, "bdf", bdf)
	before := hc.h.ctrl.Stats().Resubmitted
	t0 := time.Now()
	// A client that goes away must not cut the reset short: a reset whose
	// admin commands are cancelled leaves the controller dead.
	ctx, cancel := s.devices.opContext(context.WithoutCancel(r.Context()))
	defer cancel()
	if err := hc.h.ctrl.Reset(ctx, "requested by "+peer); err != nil {
		s.log.Error("device reset failed", "bdf", bdf, "error", err)
		return deviceError(fmt.Errorf("resetting %s: %w", bdf, err))
	}
	return writeJSON(w, api.ResetResponse{BDF: bdf, Seconds: time.Since(t0).Seconds(),
		Resubmitted: hc.h.ctrl.Stats().Resubmitted - before})
}

func (s *Server) handleFormat(w http.ResponseWriter, r *http.Request) error {
	var req api.FormatRequest
	bdf, nsid, err := s.readNamespaceRequest(w, r, &req, &req.BDF, &req.NSID)
	if err != nil {
		return err
	}
	if len(req.Label) > 128 {
		return openai.BadRequest("label", "label of %d bytes (at most 128)", len(req.Label))
	}
	if req.TableBytes < 0 || req.TableBytes%volume.Unit != 0 {
		return openai.BadRequest("table_bytes", "table_bytes must be a positive multiple of %d (0: default)", volume.Unit)
	}
	reg := s.devices
	hc, err := reg.get(bdf)
	if err != nil {
		return deviceError(err)
	}
	if !hc.io.TryLock() {
		return deviceError(fmt.Errorf("%s: %w: a pool write or volume read is running", bdf, errBusy))
	}
	defer hc.io.Unlock()
	if hc.gone {
		return deviceError(fmt.Errorf("%s: %w", bdf, errGone))
	}
	if m := hc.inUse(); m != "" {
		return deviceError(fmt.Errorf("%s: %w: models are loaded from it (%s); unload them first", bdf, errBusy, m))
	}
	if _, err := hc.h.ctrl.Namespace(nsid); err != nil {
		return namespaceNotFound(bdf, nsid, err)
	}
	ctx, done := reg.opContext(r.Context())
	defer done()
	if v, err := hc.volume(ctx, nsid); err == nil && len(v.Extents()) > 0 && !req.Force {
		return openai.Errorf(http.StatusConflict, openai.TypeInvalidRequest, "force", "volume_not_empty",
			"%s namespace %d holds a strata volume with %d extents; formatting loses them (set force to do it anyway)", bdf, nsid, len(v.Extents()))
	}
	s.log.Info("volume format requested", "peer", peerOf(r).String(), "bdf", bdf, "nsid", nsid, "label", req.Label)
	v, err := hc.format(ctx, nsid, volume.FormatOptions{TableBytes: req.TableBytes, Label: req.Label})
	if err != nil {
		return deviceError(err)
	}
	s.log.Info("volume formatted", "bdf", bdf, "nsid", nsid, "bytes", v.Superblock().Size)
	return writeJSON(w, volumeInfo(bdf, nsid, v))
}

func (s *Server) handlePoolWrite(w http.ResponseWriter, r *http.Request) error {
	var req api.PoolWriteRequest
	bdf, nsid, err := s.readNamespaceRequest(w, r, &req, &req.BDF, &req.NSID)
	if err != nil {
		return err
	}
	f, err := s.openPool(req.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	path := f.Name()
	name := req.Name
	if name == "" {
		name = filepath.Base(path)
	}
	if len(name) > maxExtentNameLength || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\n") {
		return openai.BadRequest("name", "extent name must be 1-%d bytes of printable UTF-8", maxExtentNameLength)
	}
	ctx, v, release, err := s.openVolume(r, bdf, nsid)
	if err != nil {
		return err
	}
	defer release()
	s.log.Info("pool write requested", "peer", peerOf(r).String(), "bdf", bdf, "nsid", nsid, "path", path, "name", name)
	t0 := time.Now()
	e, err := devices.WritePool(ctx, v, name, authz.FDPath(f))
	if err != nil {
		s.log.Warn("pool write failed", "bdf", bdf, "nsid", nsid, "name", name, "error", err)
		if s.devices.ctx.Err() != nil {
			err = fmt.Errorf("%w: pool write cut short: %v", errClosing, err)
		}
		return deviceError(err)
	}
	secs := time.Since(t0).Seconds()
	resp := api.PoolWriteResponse{Extent: extentOf(e), Path: path, Seconds: secs}
	if secs > 0 {
		resp.GBps = float64(e.Length) / secs / 1e9
	}
	s.log.Info("pool written", "bdf", bdf, "nsid", nsid, "name", name, "bytes", e.Length, "offset", e.Offset,
		"took", time.Since(t0).Round(time.Millisecond).String())
	return writeJSON(w, resp)
}

// openPool opens a client's pool path inside the model directories once
// (the daemon runs as root: clients name files only where models live; the
// write reads the pool through the descriptor, never by name) and checks
// that it is a prefab pool whose header and manifest are intact.
func (s *Server) openPool(p string) (*os.File, error) {
	f, err := authz.OpenModel(s.cfg.ModelDirs, p)
	switch {
	case errors.Is(err, authz.ErrOutsideModelDirs):
		return nil, openai.Errorf(http.StatusForbidden, openai.TypePermission, "path", "path_not_allowed", "%v (model directories: %v)", err, s.cfg.ModelDirs)
	case errors.Is(err, fs.ErrNotExist):
		return nil, openai.Errorf(http.StatusNotFound, openai.TypeNotFound, "path", "pool_file_not_found", "%v", err)
	case err != nil:
		return nil, openai.BadRequest("path", "%v", err)
	}
	pool, err := prefab.OpenPool(authz.FDPath(f))
	if err != nil {
		f.Close()
		return nil, openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "path", "not_a_pool",
			"%s is not a valid prefab pool (make one with strata model prefab): %v", f.Name(), err)
	}
	pool.Close()
	return f, nil
}
