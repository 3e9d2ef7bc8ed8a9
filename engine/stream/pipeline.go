package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
)

// VerifyMode says when the pipeline checks tier-C bytes against the
// store's checksums.
type VerifyMode uint8

const (
	// VerifyAlways checks every read. It is the default: storage is not
	// trusted to return what it returned before (a file rewritten under
	// the daemon, a drive that corrupts data in flight or at rest between
	// passes), and corrupt weights would otherwise be served with 200 OK.
	// xxh3 hashes several times faster than an NVMe drive reads (go test
	// -bench XXH3 ./engine/stream compares it with the link), and it runs
	// in stage 1, off the compute path, so the cost is CPU time, not
	// latency.
	VerifyAlways VerifyMode = iota
	// VerifyFirst checks each extent the first time this pipeline reads
	// it from storage: a bad pool file (truncated, corrupted at rest or by
	// a faulty prefab) is caught on the first pass that touches it, and
	// later passes spend no CPU on hashing; a change after that first read
	// is not caught.
	VerifyFirst
	// VerifyNever trusts the storage entirely (benchmarks of the raw read
	// path). Resident and tier-B layers are still verified when loaded.
	VerifyNever
)

// String returns the mode's flag spelling.
func (m VerifyMode) String() string {
	switch m {
	case VerifyAlways:
		return "always"
	case VerifyFirst:
		return "first"
	case VerifyNever:
		return "never"
	}
	return fmt.Sprintf("VerifyMode(%d)", uint8(m))
}

// ParseVerifyMode reads a --verify flag: always (or ""), first or never.
func ParseVerifyMode(s string) (VerifyMode, error) {
	switch s {
	case "", "always":
		return VerifyAlways, nil
	case "first":
		return VerifyFirst, nil
	case "never":
		return VerifyNever, nil
	}
	return VerifyAlways, fmt.Errorf("verify mode %q: want always, first or never", s)
}

// Options configure a Pipeline.
type Options struct {
	// Store holds the layers (an engine/tier Pool).
	Store LayerStore
	// Tiers places each layer: len(Tiers) == Store.NumLayers().
	Tiers []tier.Tier
	// Depth is k: the number of staging buffers, and the device ring's
	// size in layers of the largest streamed extent, so the
	// number of layers prefetched ahead of compute. At least 1.
	Depth int
	// Source reads tier-C extents. Required when any layer is on tier C.
	Source tier.Source
	// Device owns the slots; nil means CPUDevice.
	Device Device
	// Verify chooses when tier-C bytes are checksummed.
	Verify VerifyMode
	// Logger receives every checksum failure, at error level, with the
	// layer and extent (nil: none).
	Logger hclog.Logger
	// SlotsOnly is for a caller that computes on the slots themselves
	// (Acquire and Done) and keeps its tier-A layers on its own: the CUDA
	// backend, whose resident layers live in its weight arena and whose
	// kernels read a streamed layer where it landed. New then loads no
	// tier-A layer and nothing is decoded (Layer is refused); Store's
	// Extent gives each layer's size (tier A's only for Stats), Mapped
	// tier B's bytes and Verify tier C's checksums. Extents need only be
	// non-empty, tier C's aligned as Source requires.
	SlotsOnly bool
}

// Pipeline streams a model's layers to the device, pass after pass: it is
// the model.LayerSource of a tiered model. Tier-A layers are copied to the
// device and decoded once, at New. For every pass, stage 1 reads tier-C
// extents into a ring of k staging buffers, stage 2 copies staging buffers
// and tier-B extents into a ring of device memory that holds k of the
// largest streamed layers (tier.Ring: shorter layers keep more in
// flight), and stage 3 (the
// forward pass, calling Layer and Release) computes on a slot and hands it
// back. Each stage waits only for what it needs, so reads, copies and
// compute overlap and up to k layers are fetched ahead of compute. Every
// streamed layer moves exactly once per pass, however many sequences the
// pass advances.
//
// Stage 2 runs on a goroutine of its own, or, for a device whose copies
// must be issued from the compute goroutine (Device.IssueOnCompute),
// inside Acquire and Done: each call issues every copy the ring allows
// without waiting for any, and the device orders copies and compute
// (see Device).
//
// A pass runs between Begin and End (or Finish); Forward wraps a
// model.Forward call in them. Called as a bare model.LayerSource, the
// pipeline begins a pass at Layer(0) and ends it at Release of the last
// layer. A failed or cancelled pass fails only itself: End (or the next
// pass's Layer(0)) stops its stages and returns every buffer to the ring.
type Pipeline struct {
	store     LayerStore
	tiers     []tier.Tier
	ext       []tier.Extent
	full      []int64 // per layer: the extent's length as the store gave it
	depth     int
	src       tier.Source
	dev       Device
	clock     Clock // dev's, when it times itself
	onCompute bool  // dev.IssueOnCompute()
	slotsOnly bool
	verify    VerifyMode
	log       hclog.Logger
	streamed  []int  // layers on tiers B and C that passes move, in order
	idx       []int  // per layer: index in streamed, -1 on tier A or skipped
	skip      []bool // per layer: left out of passes (SetSkip); nil for none

	resident      []*model.Layer // tier-A layers, by layer index
	residentSlots []Slot
	residentBytes int64
	ring          Slot      // the device memory streamed layers land in (nil when none streams)
	layout        tier.Ring // where each streamed layer lands, by its index in streamed
	regions       []Slot    // per streamed layer: its region of ring
	relay         bool      // streamed or their lengths changed: lay the ring out again
	staging       []*tier.Buffer
	unpin         []func() error // per staging buffer, nil when not pinned
	verified      []atomic.Bool

	// The stages' channels, made once and drained at the start of each
	// pass (the previous pass's stages have exited by then), so a pass
	// allocates nothing per layer.
	fetched     []chan staged // by layer, tier C: stage 1 → stage 2
	freeStaging chan int
	ready       []chan result // by layer, streamed: stage 2 on its goroutine → compute
	freeSlots   chan int

	// Stage 2 issued from compute: per streamed layer, what stage 1
	// delivered and its copy; reused by every pass.
	got  []staged
	ops  []Op
	pend []pend // the ring of staging buffers being copied out

	// Carrying copies into the next pass (a device driven from compute;
	// see Device). wrap[n] is the last streamed layer of a pass whose
	// region the n-th streamed layer's overlaps, for the first layers of a
	// pass that may be carried (tier B, and no earlier layer of their
	// pass overwrites them), else -1. The next pass's first carried
	// copies are issued, numbered from nextBase, into carryOps; the
	// pass that begins with them takes them over. parity alternates the
	// numbering of passes' copies (Device.CopyIn).
	wrap       []int
	parity     int
	carried    int
	carryOps   []Op
	carryBytes int64

	runMu  sync.Mutex // serialises Forward
	mu     sync.Mutex // guards pass, last, total, closed
	pass   *pass
	last   Stats
	total  Stats
	closed bool
}

// pass is one forward pass's pipeline state. Stage-1 counters are written
// only by stage 1, stage-2 counters only by stage 2 and compute counters
// only by the goroutine calling Layer/Acquire and Release/Done; End reads
// them after the stages have exited.
type pass struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	auto   bool
	start  time.Time

	next   int // the layer compute asks for next
	failed bool
	held   int // slot compute holds, -1 when none

	fetched     []chan staged // the Pipeline's channels
	freeStaging chan int
	ready       []chan result // nil when stage 2 is issued from compute
	freeSlots   chan int
	wg          sync.WaitGroup

	// Stage 2 issued from compute: copies issued (the n-th streamed layer
	// into its region of the ring), regions released, layers acquired, and the
	// staging buffers whose copies are in flight (a ring, oldest first).
	issued, released, acquired int
	carried                    int // of issued, by the pass before
	pend                       []pend
	pendHead, pendLen          int

	read, copy    StageStats
	verify        time.Duration
	computeStall  time.Duration
	computeLayers int64
	computeBytes  int64
	// Host clocks of compute's first wait for a streamed layer and its
	// release of the last (zero until then), for Stats' Lead and Tail on a
	// device without a Clock.
	firstWait, lastDone time.Time
}

// staged is a tier-C layer read into staging buffer s, or the error that
// stopped the read; ok marks an entry of Pipeline.got as delivered.
type staged struct {
	s   int
	err error
	ok  bool
}

// pend is staging buffer s, whose copy (of the n-th streamed layer) is in
// flight.
type pend struct{ s, n int }

// result is a layer ready for compute, or the error that stopped it.
type result struct {
	layer *model.Layer
	slot  int
	err   error
}

// New builds a pipeline: it validates the plan, allocates k staging
// buffers (from the Source, so they suit it, pinned by the Device) and k
// device slots sized for the largest streamed extent, and loads the
// tier-A layers. The Store, Source and Device stay owned by the caller
// and must outlive the pipeline.
func New(opts Options) (*Pipeline, error) {
	if opts.Store == nil {
		return nil, errors.New("stream: no layer store")
	}
	n := opts.Store.NumLayers()
	if len(opts.Tiers) != n {
		return nil, fmt.Errorf("stream: plan has %d tiers for %d layers", len(opts.Tiers), n)
	}
	if opts.Depth < 1 {
		return nil, fmt.Errorf("stream: depth %d: need at least 1", opts.Depth)
	}
	if opts.Verify > VerifyNever {
		return nil, fmt.Errorf("stream: %v", opts.Verify)
	}
	if opts.Device == nil {
		opts.Device = CPUDevice{}
	}
	p := &Pipeline{
		store: opts.Store, tiers: append([]tier.Tier(nil), opts.Tiers...), ext: make([]tier.Extent, n), idx: make([]int, n),
		depth: opts.Depth, src: opts.Source, dev: opts.Device, verify: opts.Verify, log: opts.Logger, slotsOnly: opts.SlotsOnly,
		onCompute: opts.Device.IssueOnCompute(), resident: make([]*model.Layer, n), verified: make([]atomic.Bool, n),
	}
	p.clock, _ = opts.Device.(Clock)
	var maxStream, maxRead int64
	for i, t := range p.tiers {
		p.idx[i] = -1
		e := p.store.Extent(i)
		align := int64(tier.PageSize)
		switch {
		case !p.slotsOnly:
		case t == tier.TierC && p.src != nil:
			align = int64(max(p.src.Align(), 1))
		default:
			align = 1
		}
		if e.Offset < 0 || e.Length <= 0 || e.Offset%align != 0 || e.Length%align != 0 {
			return nil, fmt.Errorf("stream: layer %d: extent %v is empty or not %d-byte aligned", i, e, align)
		}
		if int64(int(e.Length)) != e.Length {
			return nil, fmt.Errorf("stream: layer %d: extent %v too large", i, e)
		}
		p.ext[i] = e
		p.full = append(p.full, e.Length)
		switch t {
		case tier.TierA:
			if p.slotsOnly {
				p.residentBytes += e.Length
			}
		case tier.TierB:
			p.idx[i] = len(p.streamed)
			p.streamed = append(p.streamed, i)
			maxStream = max(maxStream, e.Length)
		case tier.TierC:
			if p.src == nil {
				return nil, fmt.Errorf("stream: layer %d is on tier C but no source was given", i)
			}
			if e.End() > p.src.Size() {
				return nil, fmt.Errorf("stream: layer %d: extent %v lies past the source's end %d", i, e, p.src.Size())
			}
			p.idx[i] = len(p.streamed)
			p.streamed = append(p.streamed, i)
			maxStream = max(maxStream, e.Length)
			maxRead = max(maxRead, e.Length)
		default:
			return nil, fmt.Errorf("stream: layer %d: unknown tier %v", i, t)
		}
	}
	fail := func(err error) (*Pipeline, error) {
		p.free()
		return nil, err
	}
	k := min(p.depth, len(p.streamed))
	if k > 0 {
		n := tier.RingCapacity(p.streamedLengths(), k)
		s, err := p.dev.AllocSlot(int(n))
		if err != nil {
			return fail(fmt.Errorf("stream: %s ring of %d bytes (%d layers of %d): %w", p.dev.Name(), n, k, maxStream, err))
		}
		p.ring = s
		if err := p.layOut(); err != nil {
			return fail(err)
		}
	}
	if maxRead > 0 {
		for j := range k {
			b, err := p.src.Alloc(int(maxRead))
			if err != nil {
				return fail(fmt.Errorf("stream: staging buffer of %d bytes: %w", maxRead, err))
			}
			p.staging = append(p.staging, b)
			unpin, err := p.dev.Pin(b.Bytes())
			if err != nil {
				return fail(fmt.Errorf("stream: pinning staging buffer %d (%d bytes from the source) for %s: %w", j, b.Len(), p.dev.Name(), err))
			}
			p.unpin = append(p.unpin, unpin)
		}
	}
	p.fetched = make([]chan staged, n)
	p.freeStaging = make(chan int, len(p.staging))
	for _, i := range p.streamed {
		if p.tiers[i] == tier.TierC {
			p.fetched[i] = make(chan staged, 1)
		}
	}
	if p.onCompute {
		p.got = make([]staged, len(p.streamed))
		p.ops = make([]Op, len(p.streamed))
		p.carryOps = make([]Op, len(p.streamed))
		p.pend = make([]pend, len(p.staging))
	} else {
		p.ready = make([]chan result, n)
		p.freeSlots = make(chan int, len(p.streamed))
		for _, i := range p.streamed {
			p.ready[i] = make(chan result, 1)
		}
	}
	for i, t := range p.tiers {
		if t != tier.TierA || p.slotsOnly {
			continue
		}
		if err := p.loadResident(i); err != nil {
			return fail(err)
		}
	}
	return p, nil
}

// loadResident copies tier-A layer i into its own slot and decodes it.
func (p *Pipeline) loadResident(i int) error {
	e := p.ext[i]
	b, err := p.store.Mapped(i)
	if err == nil && int64(len(b)) < e.Length {
		err = fmt.Errorf("mapped view has %d bytes, want %d", len(b), e.Length)
	}
	if err != nil {
		return fmt.Errorf("stream: layer %d (tier A, extent %v): %w", i, e, err)
	}
	s, err := p.dev.AllocSlot(int(e.Length))
	if err != nil {
		return fmt.Errorf("stream: layer %d (tier A): %s slot: %w", i, p.dev.Name(), err)
	}
	p.residentSlots = append(p.residentSlots, s)
	op, err := p.dev.CopyIn(-1, s, nil, b[:e.Length])
	if err == nil {
		err = op.Wait()
	}
	if err != nil {
		return fmt.Errorf("stream: layer %d (tier A): copy to %s: %w", i, p.dev.Name(), err)
	}
	host := s.Host()
	if host == nil {
		return fmt.Errorf("stream: layer %d (tier A): %s slots are not host-visible", i, p.dev.Name())
	}
	l, err := p.store.Decode(i, host[:e.Length])
	if err != nil {
		return fmt.Errorf("stream: layer %d (tier A): decode: %w", i, err)
	}
	p.resident[i] = l
	p.residentBytes += e.Length
	return nil
}

// free releases every buffer and slot, and returns the first error.
func (p *Pipeline) free() error {
	var errs []error
	for _, s := range p.regions {
		if s != nil {
			errs = append(errs, s.Free())
		}
	}
	if p.ring != nil {
		errs = append(errs, p.ring.Free())
	}
	for _, s := range p.residentSlots {
		errs = append(errs, s.Free())
	}
	for j, b := range p.staging {
		if j < len(p.unpin) && p.unpin[j] != nil {
			errs = append(errs, p.unpin[j]())
		}
		errs = append(errs, b.Free())
	}
	p.ring, p.regions, p.residentSlots, p.staging, p.unpin = nil, nil, nil, nil, nil
	clear(p.resident)
	return errors.Join(errs...)
}

// streamedLengths is what a pass moves of each streamed layer, in order.
func (p *Pipeline) streamedLengths() []int64 {
	lengths := make([]int64, len(p.streamed))
	for n, i := range p.streamed {
		lengths[n] = p.ext[i].Length
	}
	return lengths
}

// layOut places the streamed layers, at their current lengths, in the
// ring and cuts each its region (kept where nothing moved).
func (p *Pipeline) layOut() error {
	p.relay = false
	if p.ring == nil {
		return nil
	}
	lengths := p.streamedLengths()
	r, err := tier.LayRing(lengths, int64(p.ring.Len()))
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	var errs []error
	for n, g := range p.regions {
		if g == nil {
			continue
		}
		if n < len(lengths) && r.Off[n] == p.layout.Off[n] && r.Size[n] == p.layout.Size[n] {
			continue
		}
		errs = append(errs, g.Free())
		p.regions[n] = nil
	}
	p.regions = p.regions[:min(len(p.regions), len(lengths))]
	for n := range lengths {
		if n < len(p.regions) && p.regions[n] != nil {
			continue
		}
		g, err := p.dev.Region(p.ring, int(r.Off[n]), int(r.Size[n]))
		if err != nil {
			errs = append(errs, fmt.Errorf("stream: %s ring region of %d bytes at %d: %w", p.dev.Name(), r.Size[n], r.Off[n], err))
			break
		}
		if n < len(p.regions) {
			p.regions[n] = g
		} else {
			p.regions = append(p.regions, g)
		}
	}
	p.layout = r
	p.layWrap()
	if err := errors.Join(errs...); err != nil {
		// Regions that could not be made are missing: lay out again
		// before the next pass.
		p.relay = true
		return err
	}
	return nil
}

// layWrap finds, for the first streamed layers of a pass, the layer of
// the pass before whose release their carried copies wait (Pipeline.wrap):
// the last one whose region overlaps theirs (their own, at the latest).
// It stops at the first layer that an earlier layer of its own pass
// overlaps, or that is read from storage (its read needs a staging
// buffer the pass before still uses).
func (p *Pipeline) layWrap() {
	p.wrap = p.wrap[:0]
	stop := false
	for n, i := range p.streamed {
		w := -1
		if !stop && p.onCompute && p.tiers[i] == tier.TierB && p.layout.After[n] < 0 {
			for m := len(p.streamed) - 1; m >= n; m-- {
				if p.layout.Off[m] < p.layout.Off[n]+p.layout.Size[n] && p.layout.Off[n] < p.layout.Off[m]+p.layout.Size[m] {
					w = m
					break
				}
			}
		}
		stop = w < 0
		p.wrap = append(p.wrap, w)
	}
}

// base is the number the current pass's copies start from; nextBase the
// next pass's (Device.CopyIn).
func (p *Pipeline) base() int     { return p.parity * len(p.streamed) }
func (p *Pipeline) nextBase() int { return (1 - p.parity) * len(p.streamed) }

// SetLength makes later passes move only the first n bytes of tier-B
// layer i's extent (n up to the extent's full length, which restores it):
// a device that computes part of the layer elsewhere needs only the rest
// (engine/gpu's hybrid placement copies a layer's attention and leaves its
// feed-forward block to the CPU). The ring keeps its size and later passes
// lay it out afresh, so that shorter layers keep more of them in flight.
// It is refused during a pass.
func (p *Pipeline) SetLength(i int, n int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("stream: set length of layer %d: %w", i, tier.ErrClosed)
	case p.pass != nil:
		return fmt.Errorf("stream: set length of layer %d: a pass is open", i)
	case i < 0 || i >= len(p.tiers):
		return fmt.Errorf("stream: set length of layer %d: outside [0, %d)", i, len(p.tiers))
	case p.tiers[i] != tier.TierB:
		return fmt.Errorf("stream: set length of layer %d: on tier %v, not B", i, p.tiers[i])
	case n <= 0 || n > p.full[i]:
		return fmt.Errorf("stream: set length of layer %d: %d bytes outside (0, %d]", i, n, p.full[i])
	}
	if p.ext[i].Length != n {
		p.ext[i].Length = n
		p.relay = true
	}
	return nil
}

// Length is what later passes move of layer i: its extent's length, or
// less after SetLength.
func (p *Pipeline) Length(i int) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.ext) {
		return 0
	}
	return p.ext[i].Length
}

// SetSkip leaves layers out of later passes (layer skip): a skipped
// layer on tier B or C is neither read nor copied, which saves its bytes
// on the links every pass, and Layer and Acquire return nil for it at
// once; compute still asks for every layer in order and passes a skipped
// one by (engine/model's layer skip takes it and gives it back unread).
// nil restores every layer. It is refused during a pass.
func (p *Pipeline) SetSkip(layers []int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("stream: skip layers: %w", tier.ErrClosed)
	case p.pass != nil:
		return fmt.Errorf("stream: skip layers: a pass is open")
	}
	var skip []bool
	for _, l := range layers {
		if l < 0 || l >= len(p.tiers) {
			return fmt.Errorf("stream: skip layer %d: outside [0, %d)", l, len(p.tiers))
		}
		if skip == nil {
			skip = make([]bool, len(p.tiers))
		}
		skip[l] = true
	}
	p.skip = skip
	p.streamed = p.streamed[:0]
	for i, t := range p.tiers {
		p.idx[i] = -1
		if t != tier.TierA && !p.skipped(i) {
			p.idx[i] = len(p.streamed)
			p.streamed = append(p.streamed, i)
		}
	}
	p.relay = true
	return nil
}

// skipped reports whether passes leave layer i out.
func (p *Pipeline) skipped(i int) bool { return p.skip != nil && p.skip[i] }

// Tiers returns the plan the pipeline runs (a copy).
func (p *Pipeline) Tiers() []tier.Tier { return append([]tier.Tier(nil), p.tiers...) }

// Depth is k, the ring size.
func (p *Pipeline) Depth() int { return p.depth }

// Forward runs one forward pass of m over batch with layers from the
// pipeline: Begin, m.Forward, End. It installs p as m's layer source. m
// must have the store's layer count. A failed pass returns its error; the
// pipeline is ready for the next pass either way.
func (p *Pipeline) Forward(ctx context.Context, m *model.Model, batch []model.Step) error {
	if m.Config.Layers != len(p.tiers) {
		return fmt.Errorf("stream: model has %d layers, pipeline %d", m.Config.Layers, len(p.tiers))
	}
	p.runMu.Lock()
	defer p.runMu.Unlock()
	if err := p.Begin(ctx); err != nil {
		p.Finish(true)
		return err
	}
	m.SetLayerSource(p)
	err := m.Forward(ctx, batch)
	p.mu.Lock()
	_, eerr := p.endLocked(err != nil)
	p.mu.Unlock()
	if err == nil {
		err = eerr
	}
	return err
}

// Begin starts a pass under ctx: stages 1 and 2 start fetching the first
// k streamed layers at once, before compute asks for them. A pass still
// open is ended first (and counted as failed if it was incomplete). For a
// device that issues copies from compute, Begin must be called from the
// compute goroutine.
func (p *Pipeline) Begin(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("stream: begin pass: %w", tier.ErrClosed)
	}
	if p.pass != nil {
		p.endLocked(false)
	}
	return p.beginLocked(ctx, false)
}

// End finishes the current pass: it stops its stages, waits for reads and
// copies in flight, returns every buffer to the ring and records the
// pass's Stats, which it returns. A pass that did not reach its last layer
// counts as failed. Without an open pass it returns zero Stats.
func (p *Pipeline) End() Stats {
	st, _ := p.Finish(false)
	return st
}

// Finish is End for a caller that knows whether its pass failed (a pass
// that computed every layer can still fail afterwards), and that wants
// the device's error from waiting for the copies in flight.
func (p *Pipeline) Finish(failed bool) (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endLocked(failed)
}

func (p *Pipeline) beginLocked(parent context.Context, auto bool) error {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	ps := &pass{
		parent: parent, ctx: ctx, cancel: cancel, auto: auto, start: time.Now(), held: -1,
		fetched: p.fetched, freeStaging: p.freeStaging, ready: p.ready, freeSlots: p.freeSlots,
	}
	for _, i := range p.streamed {
		if ps.fetched[i] != nil {
			drain(ps.fetched[i])
		}
		if ps.ready != nil {
			drain(ps.ready[i])
		}
	}
	drain(ps.freeStaging)
	for s := range p.staging {
		ps.freeStaging <- s
	}
	p.pass = ps
	if p.relay {
		// Copies carried into this pass went where the old layout put
		// them: unused.
		if err := p.dropCarried(); err != nil {
			ps.failed = true
			return err
		}
		if err := p.layOut(); err != nil {
			ps.failed = true
			return err
		}
	}
	if p.onCompute {
		p.parity = 1 - p.parity
		clear(p.got)
		clear(p.ops)
		copy(p.ops, p.carryOps[:p.carried])
		clear(p.carryOps)
		ps.issued, ps.carried = p.carried, p.carried
		ps.copy.Layers, ps.copy.Bytes = int64(p.carried), p.carryBytes
		p.carried, p.carryBytes = 0, 0
		ps.pend = p.pend
		if p.clock != nil {
			if err := p.clock.Start(); err != nil {
				ps.failed = true
				return fmt.Errorf("stream: starting a pass on %s: %w", p.dev.Name(), err)
			}
		}
	} else {
		drain(ps.freeSlots)
	}
	if len(p.streamed) == 0 {
		return nil
	}
	if len(p.staging) > 0 {
		ps.wg.Add(1)
		go p.stage1(ps)
	}
	if !p.onCompute {
		ps.wg.Add(1)
		go p.stage2(ps)
		return nil
	}
	if err := p.pump(ps, -1); err != nil {
		ps.failed = true
		return err
	}
	return nil
}

// drain empties ch of what a finished pass left in it.
func drain[T any](ch chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func (p *Pipeline) endLocked(failed bool) (Stats, error) {
	ps := p.pass
	if ps == nil {
		return Stats{}, nil
	}
	p.pass = nil
	ps.cancel()
	ps.wg.Wait()
	err := p.waitCopies(ps)
	if err != nil {
		err = fmt.Errorf("stream: waiting for the copies to %s: %w", p.dev.Name(), err)
	}
	wall := time.Since(ps.start)
	st := Stats{
		Passes: 1, Wall: wall,
		Read: ps.read, Verify: ps.verify, Copy: ps.copy,
		Compute: StageStats{
			Layers: ps.computeLayers, Bytes: ps.computeBytes,
			Busy: max(0, wall-ps.computeStall), Stall: ps.computeStall,
		},
		ResidentBytes: p.residentBytes,
		StreamedBytes: ps.copy.Bytes,
		Carried:       int64(ps.carried),
	}
	if !ps.firstWait.IsZero() {
		st.Lead = ps.firstWait.Sub(ps.start)
	}
	if !ps.lastDone.IsZero() {
		st.Tail = time.Since(ps.lastDone)
	}
	if failed || err != nil || ps.failed || ps.next != len(p.tiers) {
		st.Failed = 1
		// What was carried into the next pass stays unused.
		if derr := p.dropCarried(); err == nil && derr != nil {
			err = fmt.Errorf("stream: %w", derr)
		}
	}
	if p.clock != nil && err == nil && len(p.streamed) > 0 {
		// The device's figures are instrumentation: a pass that computed
		// stays good if they cannot be read.
		if ct, terr := p.clock.Times(p.base(), ps.issued, ps.acquired); terr == nil {
			st.Copy.Busy, st.Copy.Stall = ct.CopyBusy, ct.CopyStall
			st.Compute.Stall, st.Compute.Busy = ct.ComputeStall, max(0, wall-ct.ComputeStall)
			st.Lead = ct.Lead
			if ct.Span > 0 {
				st.Tail = max(0, wall-ct.Lead-ct.Span)
			}
		}
	}
	st.finish()
	p.last = st
	p.total.add(st)
	return st, err
}

// waitCopies waits for the pass's copies: on a device driven from
// compute, for each of its own (the ones carried into the next pass keep
// running), else for every copy issued (Device.Sync).
func (p *Pipeline) waitCopies(ps *pass) error {
	if !p.onCompute {
		return p.dev.Sync()
	}
	for n := range ps.issued {
		if op := p.ops[n]; op != nil {
			if err := op.Wait(); err != nil {
				return fmt.Errorf("layer %d: %w", p.streamed[n], err)
			}
		}
	}
	return nil
}

// dropCarried forgets the copies carried into the next pass, once they
// have landed: a device need not run copies in the order issued, so a
// later copy into the same region must not overtake one.
func (p *Pipeline) dropCarried() error {
	var errs []error
	for n, op := range p.carryOps[:p.carried] {
		if err := op.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("layer %d, copied ahead: %w", p.streamed[n], err))
		}
	}
	clear(p.carryOps)
	p.carried, p.carryBytes = 0, 0
	return errors.Join(errs...)
}

// Layer implements model.LayerSource: it returns layer i once it has
// landed in a device slot (tier A at once), waiting for stages 1 and 2 as
// needed.
func (p *Pipeline) Layer(i int) (*model.Layer, error) {
	if p.slotsOnly {
		return nil, fmt.Errorf("stream: layer %d: the pipeline's layers are computed on their slots (Acquire)", i)
	}
	r, err := p.take(i)
	switch {
	case err != nil:
		return nil, err
	case p.skipped(i):
		return nil, nil
	case p.tiers[i] == tier.TierA:
		return p.resident[i], nil
	case r.layer != nil:
		return r.layer, nil
	}
	// Stage 2 ran on this goroutine and did not decode.
	host := p.regions[r.slot].Host()
	if host == nil {
		return nil, p.failTake(fmt.Errorf("stream: layer %d: %s slots are not host-visible", i, p.dev.Name()))
	}
	l, err := p.store.Decode(i, host[:p.ext[i].Length])
	if err != nil {
		return nil, p.failTake(p.layerErr(i, fmt.Errorf("decode: %w", err)))
	}
	return l, nil
}

// Acquire returns the slot layer i has landed in (nil for a tier-A
// layer), the way Layer returns it decoded: compute asks for every layer
// in order, Acquire then Done, and may work on the slot until Done. On a
// device that issues copies from compute, Acquire may return before the
// copy has completed: the device orders compute's later work after it
// (Device.Await).
func (p *Pipeline) Acquire(i int) (Slot, error) {
	r, err := p.take(i)
	if err != nil || p.tiers[i] == tier.TierA || p.skipped(i) {
		return nil, err
	}
	return p.regions[r.slot], nil
}

// failTake fails the current pass with err (compute could not use the
// layer it was given).
func (p *Pipeline) failTake(err error) error {
	p.mu.Lock()
	if p.pass != nil {
		p.pass.failed = true
	}
	p.mu.Unlock()
	return err
}

// take waits for layer i on behalf of Layer and Acquire.
func (p *Pipeline) take(i int) (result, error) {
	if i < 0 || i >= len(p.tiers) {
		return result{}, fmt.Errorf("stream: layer %d out of range [0, %d)", i, len(p.tiers))
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return result{}, fmt.Errorf("stream: layer %d: %w", i, tier.ErrClosed)
	}
	ps := p.pass
	var err error
	switch {
	case ps == nil:
		err = p.beginLocked(context.Background(), true)
	case i == 0 && (ps.failed || ps.next != 0):
		// The previous pass stopped early (an error, a cancellation)
		// without End: finish it and start afresh.
		parent, auto := ps.parent, ps.auto
		p.endLocked(true)
		err = p.beginLocked(parent, auto)
	case ps.failed:
		p.mu.Unlock()
		return result{}, fmt.Errorf("stream: layer %d: the pass already failed", i)
	}
	ps = p.pass
	next := ps.next
	p.mu.Unlock()
	if err != nil {
		return result{}, err
	}
	if i != next {
		return result{}, fmt.Errorf("stream: layer %d requested, expected layer %d", i, next)
	}
	if p.tiers[i] == tier.TierA || p.skipped(i) {
		return result{}, nil
	}
	if p.onCompute {
		j, err := p.acquire(ps, i)
		if err != nil {
			ps.failed = true
			return result{}, err
		}
		ps.held = j
		return result{slot: j}, nil
	}
	t0 := time.Now()
	if ps.firstWait.IsZero() {
		ps.firstWait = t0
	}
	select {
	case r := <-ps.ready[i]:
		ps.computeStall += time.Since(t0)
		if r.err != nil {
			ps.failed = true
			return result{}, r.err
		}
		ps.held = r.slot
		return r, nil
	case <-ps.ctx.Done():
		ps.computeStall += time.Since(t0)
		ps.failed = true
		return result{}, fmt.Errorf("stream: waiting for layer %d: %w", i, ps.ctx.Err())
	}
}

// acquire is take for a device that issues copies from compute: it
// issues layer i's copy if it has not gone yet (waiting for its read if
// need be) and makes compute wait for it on the device. It returns the
// layer's slot.
func (p *Pipeline) acquire(ps *pass, i int) (int, error) {
	n := p.idx[i]
	var t0 time.Time
	if p.clock != nil {
		if err := p.clock.Waiting(p.base() + n); err != nil {
			return -1, fmt.Errorf("stream: layer %d: %w", i, err)
		}
	} else {
		t0 = time.Now()
		if ps.firstWait.IsZero() {
			ps.firstWait = t0
		}
	}
	if ps.issued <= n {
		if err := p.pump(ps, n); err != nil {
			return -1, err
		}
	}
	if err := p.dev.Await(p.base()+n, p.regions[n], p.ops[n]); err != nil {
		return -1, fmt.Errorf("stream: layer %d: waiting for its copy: %w", i, err)
	}
	if p.clock == nil {
		ps.computeStall += time.Since(t0)
	}
	ps.acquired++
	return n, nil
}

// Release implements model.LayerSource: compute is done with layer i, so
// its slot goes back to the ring for the next streamed layer. An error
// (only a device that issues copies from compute has any) fails the pass;
// Done returns it.
func (p *Pipeline) Release(i int) { _ = p.Done(i) }

// Done is Release with the device's error: compute is done with layer i
// (on an asynchronous device: its work on the slot is enqueued). It
// releases the slot (Device.Release) and, on a device that issues copies
// from compute, issues the copies that may go now. Without a pass, or for
// a layer other than the one expected, it does nothing.
func (p *Pipeline) Done(i int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.pass
	if ps == nil || i != ps.next {
		return nil
	}
	held := ps.held
	ps.held = -1
	if !p.skipped(i) {
		ps.computeLayers++
		ps.computeBytes += p.ext[i].Length
	}
	ps.next = i + 1
	var err error
	if held >= 0 {
		last := held == len(p.streamed)-1
		if last {
			ps.lastDone = time.Now()
		}
		err = p.dev.Release(p.regions[held])
		if err == nil && last && p.clock != nil {
			err = p.clock.Released()
		}
		switch {
		case err != nil:
			err = fmt.Errorf("stream: layer %d: releasing its %s slot: %w", i, p.dev.Name(), err)
		case p.onCompute:
			ps.released++
			err = p.pump(ps, -1)
		default:
			ps.freeSlots <- held
		}
	}
	if err != nil {
		ps.failed = true
	}
	if ps.auto && ps.next == len(p.tiers) {
		p.endLocked(false)
	}
	return err
}

// stage1 reads the pass's tier-C extents into staging buffers, in layer
// order, and hands each to stage 2. It stops at the first error
// (delivered on that layer's channel) or when the pass is cancelled.
func (p *Pipeline) stage1(ps *pass) {
	defer ps.wg.Done()
	for _, i := range p.streamed {
		if p.tiers[i] != tier.TierC {
			continue
		}
		e := p.ext[i]
		t0 := time.Now()
		var s int
		select {
		case s = <-ps.freeStaging:
		case <-ps.ctx.Done():
			return
		}
		t1 := time.Now()
		ps.read.Stall += t1.Sub(t0)
		buf := p.staging[s].Bytes()[:e.Length]
		err := p.src.ReadAt(ps.ctx, buf, e.Offset)
		if err != nil {
			err = fmt.Errorf("read: %w", err)
		} else if p.verify == VerifyAlways || p.verify == VerifyFirst && !p.verified[i].Load() {
			tv := time.Now()
			if err = p.store.Verify(i, buf); err == nil {
				p.verified[i].Store(true)
			} else {
				if p.log != nil {
					p.log.Error("streamed extent failed its checksum; the pass fails", "layer", i,
						"offset", e.Offset, "length", e.Length, "verify", p.verify.String(), "error", err)
				}
				err = fmt.Errorf("verify: %w", err)
			}
			ps.verify += time.Since(tv)
		}
		ps.read.Busy += time.Since(t1)
		if err != nil {
			ps.freeStaging <- s
			ps.fetched[i] <- staged{s: -1, err: fmt.Errorf("stream: layer %d (tier C, extent %v): %w", i, e, err)}
			return
		}
		ps.read.Layers++
		ps.read.Bytes += e.Length
		ps.fetched[i] <- staged{s: s}
	}
}

// mapped returns tier-B layer i's bytes.
func (p *Pipeline) mapped(i int) ([]byte, error) {
	e := p.ext[i]
	b, err := p.store.Mapped(i)
	if err == nil && int64(len(b)) < e.Length {
		err = fmt.Errorf("mapped view has %d bytes, want %d", len(b), e.Length)
	}
	if err != nil {
		return nil, fmt.Errorf("stream: layer %d (tier B, extent %v): %w", i, e, err)
	}
	return b[:e.Length], nil
}

// stage2 is stage 2 on its own goroutine: it copies each streamed layer
// into a free device slot, waits for the copy, recycles its staging
// buffer, decodes the slot and hands the layer to compute.
func (p *Pipeline) stage2(ps *pass) {
	defer ps.wg.Done()
	released := 0 // streamed layers compute has released
	for n, i := range p.streamed {
		t0 := time.Now()
		var src []byte
		stg := -1
		if p.tiers[i] == tier.TierB {
			b, err := p.mapped(i)
			if err != nil {
				ps.ready[i] <- result{err: err}
				return
			}
			src = b
		} else {
			var g staged
			select {
			case g = <-ps.fetched[i]:
			case <-ps.ctx.Done():
				return
			}
			if g.err != nil {
				ps.ready[i] <- result{err: g.err}
				return
			}
			src, stg = p.staging[g.s].Bytes()[:p.ext[i].Length], g.s
		}
		var after Slot
		if a := p.layout.After[n]; a >= 0 {
			for released <= a {
				select {
				case <-ps.freeSlots:
					released++
				case <-ps.ctx.Done():
					return
				}
			}
			after = p.regions[a]
		}
		t1 := time.Now()
		ps.copy.Stall += t1.Sub(t0)
		slot := p.regions[n]
		op, err := p.dev.CopyIn(n, slot, after, src)
		if err == nil {
			err = op.Wait()
		}
		ps.copy.Busy += time.Since(t1)
		if stg >= 0 {
			ps.freeStaging <- stg
		}
		var l *model.Layer
		switch host := slot.Host(); {
		case err != nil:
			err = fmt.Errorf("copy to %s slot: %w", p.dev.Name(), err)
		case p.slotsOnly: // compute works on the slot itself
		case host == nil:
			err = fmt.Errorf("%s slots are not host-visible", p.dev.Name())
		default:
			if l, err = p.store.Decode(i, host[:len(src)]); err != nil {
				err = fmt.Errorf("decode: %w", err)
			}
		}
		if err != nil {
			ps.ready[i] <- result{err: p.layerErr(i, err)}
			return
		}
		ps.copy.Layers++
		ps.copy.Bytes += int64(len(src))
		ps.ready[i] <- result{layer: l, slot: n}
	}
}

// pump is stage 2 issued from compute: it issues every copy that may go
// now, in order, without waiting for any; the n-th streamed layer's once
// compute has released every earlier layer its region of the ring
// overwrites and, on tier C, stage 1 has read it. need >= 0 is the
// streamed layer compute waits for: its read is waited for and its error
// returned.
func (p *Pipeline) pump(ps *pass, need int) error {
	for ps.issued < len(p.streamed) && p.layout.After[ps.issued] < ps.released {
		n := ps.issued
		i := p.streamed[n]
		var src []byte
		stg := -1
		if p.tiers[i] == tier.TierC {
			g, err := p.fetch(ps, n, n == need)
			if err != nil {
				return err
			}
			if g == nil {
				break // still reading
			}
			if g.err != nil {
				if n == need {
					return g.err
				}
				break // reported when compute gets there
			}
			stg = g.s
			src = p.staging[stg].Bytes()[:p.ext[i].Length]
		} else {
			b, err := p.mapped(i)
			if err != nil {
				if n == need {
					return err
				}
				break
			}
			src = b
		}
		var after Slot
		if a := p.layout.After[n]; a >= 0 {
			after = p.regions[a]
		}
		op, err := p.dev.CopyIn(p.base()+n, p.regions[n], after, src)
		if err != nil {
			return p.layerErr(i, fmt.Errorf("copy to %s slot: %w", p.dev.Name(), err))
		}
		p.ops[n] = op
		if stg >= 0 {
			ps.pend[(ps.pendHead+ps.pendLen)%len(ps.pend)] = pend{s: stg, n: n}
			ps.pendLen++
		}
		ps.issued++
		ps.copy.Layers++
		ps.copy.Bytes += int64(len(src))
	}
	if need >= 0 && ps.issued <= need {
		return fmt.Errorf("stream: layer %d: its copy cannot be issued (%d of %d issued, %d released)", p.streamed[need], ps.issued, len(p.streamed), ps.released)
	}
	if ps.issued == len(p.streamed) && !ps.failed {
		return p.carry(ps)
	}
	return nil
}

// carry issues the next pass's first copies that may go now: each once
// this pass has released the last layer its region overlaps (wrap). A
// layer whose bytes cannot be had is left to the next pass, which
// reports it.
func (p *Pipeline) carry(ps *pass) error {
	for p.carried < len(p.wrap) {
		n := p.carried
		w := p.wrap[n]
		if w < 0 || w >= ps.released {
			return nil
		}
		i := p.streamed[n]
		src, err := p.mapped(i)
		if err != nil {
			return nil
		}
		op, err := p.dev.CopyIn(p.nextBase()+n, p.regions[n], p.regions[w], src)
		if err != nil {
			return p.layerErr(i, fmt.Errorf("copy to %s slot, ahead of the next pass: %w", p.dev.Name(), err))
		}
		p.carryOps[n] = op
		p.carried++
		p.carryBytes += int64(len(src))
	}
	return nil
}

// fetch returns what stage 1 delivered for the n-th streamed layer: nil
// when it is still being read and block is false. Blocking, it keeps
// handing staging buffers back as their copies complete (stage 1 may be
// waiting for one) until the layer arrives.
func (p *Pipeline) fetch(ps *pass, n int, block bool) (*staged, error) {
	if g := &p.got[n]; g.ok {
		return g, nil
	}
	i := p.streamed[n]
	ch := ps.fetched[i]
	for {
		if err := p.recycle(ps, false); err != nil {
			return nil, err
		}
		select {
		case g := <-ch:
			g.ok = true
			p.got[n] = g
			return &p.got[n], nil
		default:
		}
		if !block {
			return nil, nil
		}
		if ps.pendLen > 0 {
			// The oldest copy waits only for compute already enqueued.
			if err := p.recycle(ps, true); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case g := <-ch:
			g.ok = true
			p.got[n] = g
			return &p.got[n], nil
		case <-ps.ctx.Done():
			return nil, fmt.Errorf("stream: layer %d: waiting for its read: %w", i, ps.ctx.Err())
		}
	}
}

// recycle hands the staging buffers whose copies have completed back to
// stage 1; with wait set it first waits for the oldest copy.
func (p *Pipeline) recycle(ps *pass, wait bool) error {
	if wait && ps.pendLen > 0 {
		pd := ps.pend[ps.pendHead]
		if err := p.ops[pd.n].Wait(); err != nil {
			return fmt.Errorf("stream: layer %d: waiting for its copy out of staging: %w", p.streamed[pd.n], err)
		}
	}
	for ps.pendLen > 0 {
		pd := ps.pend[ps.pendHead]
		done, err := p.ops[pd.n].Done()
		if err != nil {
			return fmt.Errorf("stream: layer %d: polling its copy out of staging: %w", p.streamed[pd.n], err)
		}
		if !done {
			break
		}
		ps.freeStaging <- pd.s
		ps.pendHead = (ps.pendHead + 1) % len(ps.pend)
		ps.pendLen--
	}
	return nil
}

// layerErr names streamed layer i, its tier and its extent in err, the
// way every error of a failed read, copy or decode reaches the caller.
func (p *Pipeline) layerErr(i int, err error) error {
	return fmt.Errorf("stream: layer %d (tier %v, extent %v): %w", i, p.tiers[i], p.ext[i], err)
}

// LastPass returns the Stats of the most recent finished pass.
func (p *Pipeline) LastPass() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Stats returns the Stats summed over every pass since New or ResetStats.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// ResetStats zeroes the cumulative Stats.
func (p *Pipeline) ResetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = Stats{}
}

// Close ends any open pass and frees the pipeline's slots and buffers (on
// a device that issues copies from compute, call it from the compute
// goroutine).
// The Store, Source and Device are the caller's to close.
func (p *Pipeline) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	_, err := p.endLocked(false)
	p.closed = true
	// Copies carried into a pass that will not come must land before
	// their slots go.
	if derr := p.dropCarried(); derr != nil {
		err = errors.Join(err, fmt.Errorf("stream: waiting for the copies to %s: %w", p.dev.Name(), derr))
	}
	if ferr := p.free(); ferr != nil {
		err = errors.Join(err, fmt.Errorf("stream: freeing the pipeline's buffers: %w", ferr))
	}
	return err
}

var _ model.LayerSource = (*Pipeline)(nil)
