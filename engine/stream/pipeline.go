package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
)

// VerifyMode says when the pipeline checks tier-C bytes against the
// store's checksums.
type VerifyMode uint8

const (
	// VerifyFirst checks each extent the first time this pipeline reads
	// it from storage. A bad pool file (truncated, corrupted at rest or by
	// a faulty prefab) is caught on the first pass that touches it, and
	// later passes spend no CPU on hashing. It is the default because a
	// GPU-direct route (NVMe → device memory) cannot hash every pass
	// without a device kernel, and bytes at rest rarely change.
	VerifyFirst VerifyMode = iota
	// VerifyAlways checks every read, for storage that is not trusted to
	// return what it returned before. xxh3 hashes several times faster
	// than an NVMe drive reads, and it runs in stage 1, off the compute
	// path, so the cost is CPU time, not latency.
	VerifyAlways
)

// Options configure a Pipeline.
type Options struct {
	// Store holds the layers (an engine/prefab Pool).
	Store LayerStore
	// Tiers places each layer: len(Tiers) == Store.NumLayers().
	Tiers []tier.Tier
	// Depth is k: the number of staging buffers and device slots, so the
	// number of layers prefetched ahead of compute. At least 1.
	Depth int
	// Source reads tier-C extents. Required when any layer is on tier C.
	Source tier.Source
	// Device owns the slots; nil means CPUDevice.
	Device Device
	// Verify chooses when tier-C bytes are checksummed.
	Verify VerifyMode
}

// Pipeline streams a model's layers to the device, pass after pass: it is
// the model.LayerSource of a tiered model. Tier-A layers are copied to the
// device and decoded once, at New. For every pass, stage 1 reads tier-C
// extents into a ring of k staging buffers, stage 2 copies staging buffers
// and tier-B extents into a ring of k device slots, and stage 3 (the
// forward pass, calling Layer and Release) computes on a slot and hands it
// back. Each stage waits only on the channel carrying what it needs, so
// reads, copies and compute overlap and up to k layers are fetched ahead
// of compute. Every streamed layer moves exactly once per pass, however
// many sequences the pass advances.
//
// A pass runs between Begin and End; Forward wraps a model.Forward call in
// them. Called as a bare model.LayerSource, the pipeline begins a pass at
// Layer(0) and ends it at Release of the last layer. A failed or
// cancelled pass fails only itself: End (or the next pass's Layer(0))
// stops its stages and returns every buffer to the ring.
type Pipeline struct {
	store    LayerStore
	tiers    []tier.Tier
	ext      []tier.Extent
	depth    int
	src      tier.Source
	dev      Device
	verify   VerifyMode
	streamed []int // layers on tiers B and C, in order

	resident      []*model.Layer // tier-A layers, by layer index
	residentSlots []Slot
	residentBytes int64
	slots         []Slot
	staging       []*tier.Buffer
	verified      []atomic.Bool

	runMu  sync.Mutex // serialises Forward
	mu     sync.Mutex // guards pass, last, total, closed
	pass   *pass
	last   Stats
	total  Stats
	closed bool
}

// pass is one forward pass's pipeline state. Stage-1 counters are written
// only by stage 1, stage-2 counters only by stage 2 and compute counters
// only by the goroutine calling Layer/Release; End reads them after the
// stages have exited.
type pass struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	auto   bool
	start  time.Time

	next   int // the layer compute asks for next
	failed bool
	held   int // slot compute holds, -1 when none

	ready       []chan result // by layer; nil for tier A
	freeSlots   chan int
	freeStaging chan int
	wg          sync.WaitGroup

	read, copy    StageStats
	verify        time.Duration
	computeStall  time.Duration
	computeLayers int64
	computeBytes  int64
}

// job is a streamed layer on its way from stage 1 to stage 2.
type job struct {
	layer   int
	src     []byte
	staging int // staging buffer holding src, -1 for tier B
	err     error
}

// result is a layer ready for compute, or the error that stopped it.
type result struct {
	layer *model.Layer
	slot  int
	err   error
}

// New builds a pipeline: it validates the plan, allocates k staging
// buffers (from the Source, so they suit it) and k device slots sized for
// the largest streamed extent, and loads the tier-A layers. The Store,
// Source and Device stay owned by the caller and must outlive the
// pipeline.
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
	if opts.Device == nil {
		opts.Device = CPUDevice{}
	}
	p := &Pipeline{
		store: opts.Store, tiers: append([]tier.Tier(nil), opts.Tiers...), ext: make([]tier.Extent, n),
		depth: opts.Depth, src: opts.Source, dev: opts.Device, verify: opts.Verify,
		resident: make([]*model.Layer, n), verified: make([]atomic.Bool, n),
	}
	var maxStream, maxRead int64
	for i, t := range p.tiers {
		e := p.store.Extent(i)
		if e.Offset < 0 || e.Length <= 0 || e.Offset%tier.PageSize != 0 || e.Length%tier.PageSize != 0 {
			return nil, fmt.Errorf("stream: layer %d: extent %v is empty or not %d-byte aligned", i, e, tier.PageSize)
		}
		if int64(int(e.Length)) != e.Length {
			return nil, fmt.Errorf("stream: layer %d: extent %v too large", i, e)
		}
		p.ext[i] = e
		switch t {
		case tier.TierA:
		case tier.TierB:
			p.streamed = append(p.streamed, i)
			maxStream = max(maxStream, e.Length)
		case tier.TierC:
			if p.src == nil {
				return nil, fmt.Errorf("stream: layer %d is on tier C but no source was given", i)
			}
			if e.End() > p.src.Size() {
				return nil, fmt.Errorf("stream: layer %d: extent %v lies past the source's end %d", i, e, p.src.Size())
			}
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
	for range k {
		s, err := p.dev.AllocSlot(int(maxStream))
		if err != nil {
			return fail(fmt.Errorf("stream: %s slot of %d bytes: %w", p.dev.Name(), maxStream, err))
		}
		p.slots = append(p.slots, s)
	}
	if maxRead > 0 {
		for range k {
			b, err := p.src.Alloc(int(maxRead))
			if err != nil {
				return fail(fmt.Errorf("stream: staging buffer of %d bytes: %w", maxRead, err))
			}
			p.staging = append(p.staging, b)
		}
	}
	for i, t := range p.tiers {
		if t != tier.TierA {
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
	op, err := p.dev.CopyIn(s, b[:e.Length])
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

// free releases every buffer and slot.
func (p *Pipeline) free() {
	for _, s := range p.slots {
		s.Free()
	}
	for _, s := range p.residentSlots {
		s.Free()
	}
	for _, b := range p.staging {
		b.Free()
	}
	p.slots, p.residentSlots, p.staging = nil, nil, nil
	clear(p.resident)
}

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
		return err
	}
	m.SetLayerSource(p)
	err := m.Forward(ctx, batch)
	p.mu.Lock()
	p.endLocked(err != nil)
	p.mu.Unlock()
	return err
}

// Begin starts a pass under ctx: stages 1 and 2 start fetching the first
// k streamed layers at once, before compute asks for them. A pass still
// open is ended first (and counted as failed if it was incomplete).
func (p *Pipeline) Begin(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("stream: begin pass: %w", tier.ErrClosed)
	}
	if p.pass != nil {
		p.endLocked(false)
	}
	p.beginLocked(ctx, false)
	return nil
}

// End finishes the current pass: it stops its stages, waits for reads and
// copies in flight, returns every buffer to the ring and records the
// pass's Stats, which it returns. A pass that did not reach its last layer
// counts as failed. Without an open pass it returns zero Stats.
func (p *Pipeline) End() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endLocked(false)
}

func (p *Pipeline) beginLocked(parent context.Context, auto bool) {
	ctx, cancel := context.WithCancel(parent)
	ps := &pass{
		parent: parent, ctx: ctx, cancel: cancel, auto: auto, start: time.Now(), held: -1,
		ready:       make([]chan result, len(p.tiers)),
		freeSlots:   make(chan int, len(p.slots)),
		freeStaging: make(chan int, len(p.staging)),
	}
	for _, i := range p.streamed {
		ps.ready[i] = make(chan result, 1)
	}
	for s := range p.slots {
		ps.freeSlots <- s
	}
	for s := range p.staging {
		ps.freeStaging <- s
	}
	p.pass = ps
	if len(p.streamed) == 0 {
		return
	}
	jobs := make(chan job, p.depth)
	ps.wg.Add(2)
	go p.stage1(ps, jobs)
	go p.stage2(ps, jobs)
}

func (p *Pipeline) endLocked(failed bool) Stats {
	ps := p.pass
	if ps == nil {
		return Stats{}
	}
	p.pass = nil
	ps.cancel()
	ps.wg.Wait()
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
	}
	if failed || ps.failed || ps.next != len(p.tiers) {
		st.Failed = 1
	}
	st.finish()
	p.last = st
	p.total.add(st)
	return st
}

// Layer implements model.LayerSource: it returns layer i once it has
// landed in a device slot (tier A at once), waiting for stages 1 and 2 as
// needed.
func (p *Pipeline) Layer(i int) (*model.Layer, error) {
	if i < 0 || i >= len(p.tiers) {
		return nil, fmt.Errorf("stream: layer %d out of range [0, %d)", i, len(p.tiers))
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("stream: layer %d: %w", i, tier.ErrClosed)
	}
	ps := p.pass
	switch {
	case ps == nil:
		p.beginLocked(context.Background(), true)
	case i == 0 && (ps.failed || ps.next != 0):
		// The previous pass stopped early (an error, a cancellation)
		// without End: finish it and start afresh.
		parent, auto := ps.parent, ps.auto
		p.endLocked(true)
		p.beginLocked(parent, auto)
	case ps.failed:
		p.mu.Unlock()
		return nil, fmt.Errorf("stream: layer %d: the pass already failed", i)
	}
	ps = p.pass
	next := ps.next
	p.mu.Unlock()
	if i != next {
		return nil, fmt.Errorf("stream: layer %d requested, expected layer %d", i, next)
	}
	if p.tiers[i] == tier.TierA {
		return p.resident[i], nil
	}
	t0 := time.Now()
	select {
	case r := <-ps.ready[i]:
		ps.computeStall += time.Since(t0)
		if r.err != nil {
			ps.failed = true
			return nil, r.err
		}
		ps.held = r.slot
		return r.layer, nil
	case <-ps.ctx.Done():
		ps.computeStall += time.Since(t0)
		ps.failed = true
		return nil, fmt.Errorf("stream: waiting for layer %d: %w", i, ps.ctx.Err())
	}
}

// Release implements model.LayerSource: compute is done with layer i, so
// its slot goes back to the ring for the next streamed layer.
func (p *Pipeline) Release(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.pass
	if ps == nil || i != ps.next {
		return
	}
	if ps.held >= 0 {
		ps.freeSlots <- ps.held
		ps.held = -1
	}
	ps.computeLayers++
	ps.computeBytes += p.ext[i].Length
	ps.next = i + 1
	if ps.auto && ps.next == len(p.tiers) {
		p.endLocked(false)
	}
}

// stage1 reads the pass's tier-C extents into staging buffers, in layer
// order, and forwards every streamed layer to stage 2.
func (p *Pipeline) stage1(ps *pass, out chan<- job) {
	defer ps.wg.Done()
	defer close(out)
	for _, i := range p.streamed {
		e := p.ext[i]
		j := job{layer: i, staging: -1}
		if p.tiers[i] == tier.TierB {
			b, err := p.store.Mapped(i)
			if err == nil && int64(len(b)) < e.Length {
				err = fmt.Errorf("mapped view has %d bytes, want %d", len(b), e.Length)
			}
			if err != nil {
				j.err = fmt.Errorf("stream: layer %d (tier B, extent %v): %w", i, e, err)
			} else {
				j.src = b[:e.Length]
			}
			select {
			case out <- j:
			case <-ps.ctx.Done():
				return
			}
			if j.err != nil {
				return
			}
			continue
		}
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
		} else if p.verify == VerifyAlways || !p.verified[i].Load() {
			tv := time.Now()
			if err = p.store.Verify(i, buf); err == nil {
				p.verified[i].Store(true)
			} else {
				err = fmt.Errorf("verify: %w", err)
			}
			ps.verify += time.Since(tv)
		}
		t2 := time.Now()
		ps.read.Busy += t2.Sub(t1)
		if err != nil {
			ps.freeStaging <- s
			j.err = fmt.Errorf("stream: layer %d (tier C, extent %v): %w", i, e, err)
		} else {
			ps.read.Layers++
			ps.read.Bytes += e.Length
			j.src, j.staging = buf, s
		}
		select {
		case out <- j:
		case <-ps.ctx.Done():
			return
		}
		ps.read.Stall += time.Since(t2)
		if j.err != nil {
			return
		}
	}
}

// stage2 copies each streamed layer into a free device slot, recycles its
// staging buffer, decodes the slot and hands the layer to compute.
func (p *Pipeline) stage2(ps *pass, in <-chan job) {
	defer ps.wg.Done()
	for {
		t0 := time.Now()
		var j job
		var ok bool
		select {
		case j, ok = <-in:
		case <-ps.ctx.Done():
			return
		}
		if !ok {
			return
		}
		if j.err != nil {
			ps.ready[j.layer] <- result{err: j.err}
			return
		}
		var s int
		select {
		case s = <-ps.freeSlots:
		case <-ps.ctx.Done():
			return
		}
		t1 := time.Now()
		ps.copy.Stall += t1.Sub(t0)
		slot := p.slots[s]
		op, err := p.dev.CopyIn(slot, j.src)
		if err == nil {
			err = op.Wait()
		}
		ps.copy.Busy += time.Since(t1)
		if j.staging >= 0 {
			ps.freeStaging <- j.staging
		}
		var l *model.Layer
		if err != nil {
			err = fmt.Errorf("copy to %s slot: %w", p.dev.Name(), err)
		} else if host := slot.Host(); host == nil {
			err = fmt.Errorf("%s slots are not host-visible", p.dev.Name())
		} else if l, err = p.store.Decode(j.layer, host[:len(j.src)]); err != nil {
			err = fmt.Errorf("decode: %w", err)
		}
		if err != nil {
			ps.freeSlots <- s
			ps.ready[j.layer] <- result{err: fmt.Errorf("stream: layer %d (tier %v, extent %v): %w", j.layer, p.tiers[j.layer], p.ext[j.layer], err)}
			return
		}
		ps.copy.Layers++
		ps.copy.Bytes += int64(len(j.src))
		ps.ready[j.layer] <- result{layer: l, slot: s}
	}
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

// Close ends any open pass and frees the pipeline's slots and buffers.
// The Store, Source and Device are the caller's to close.
func (p *Pipeline) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.endLocked(false)
	p.closed = true
	p.free()
	return nil
}

var _ model.LayerSource = (*Pipeline)(nil)
