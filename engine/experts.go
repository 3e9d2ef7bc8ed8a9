package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/waytrial"
)

// ExpertStats counts how a mixture-of-experts model's expert uses were
// served: from resident experts, from a read buffer that still held the
// expert, from a read started ahead of the layer (Prefetched: the
// prediction was right), or by a read from storage when the layer asked;
// and how residency changed.
type ExpertStats struct {
	Resident, Buffered, Prefetched, Read uint64
	// ReadBytes is every byte read from storage: on demand, ahead (a read
	// ahead counts from its start) and to promote experts;
	// ReadTime is the on-demand reads' wall time (reads of one layer run
	// concurrently).
	ReadBytes int64
	ReadTime  time.Duration
	// PrefetchReads counts the reads started ahead, used or not, and
	// PrefetchWait the time layers waited for them to finish.
	PrefetchReads uint64
	PrefetchWait  time.Duration
	// AheadChoices are the batch sizes whose trial decided whether to
	// read ahead (ReadAheadAuto).
	AheadChoices []AheadChoice
	// Failed counts reads that failed or did not match the checksum.
	Failed uint64
	// Promoted and Demoted count experts that became resident, or
	// stopped being, while serving. PromoteReads counts the reads made to
	// promote, each as it ends: a round's reads finish before its
	// experts are installed, at the next call, and a read that failed or
	// whose expert became resident another way meanwhile is never
	// installed, so it can exceed Promoted.
	Promoted, Demoted, PromoteReads uint64
}

// Uses is every expert use counted.
func (s ExpertStats) Uses() uint64 { return s.Resident + s.Buffered + s.Prefetched + s.Read }

// Hit is the share of uses that read nothing (a use served by a read
// started ahead did read).
func (s ExpertStats) Hit() float64 {
	if s.Uses() == 0 {
		return 0
	}
	return float64(s.Resident+s.Buffered) / float64(s.Uses())
}

// Re-placement while serving: every replanEvery passes the store ranks the
// experts by their recent use (each pass's distinct experts, counts halved
// every decayEvery passes so that the ranking follows a shifting workload)
// and swaps at most maxSwaps experts in one round: a storage expert used
// more than swapMargin times as often as the resident expert it replaces.
// A generation's routing drifts from the calibration text's within a few
// hundred tokens: a round every 16 passes of up to 32 swaps, the counts
// halved every 64, follows it where 4 swaps every 32 passes (halved every
// 256) could not — a synthetic Qwen3-30B-A3B on the CPU with 4.2 GiB of
// its experts resident decoded 256 tokens at a hit of 0.64 throughout
// with those, rising to 0.90 with these (1.86 -> 2.84 tok/s, the bytes
// read 149 -> 84 GiB; the lab's moe/routing replays such choices). A
// round's reads (32 experts of a few MiB) run in the background.
const (
	replanEvery = 16
	decayEvery  = 64
	maxSwaps    = 32
	swapMargin  = 1.5
)

// expertStore is a MoE pool's experts as the CPU model's
// model.ExpertSource. Resident experts (tier.PlanExperts' choice, then
// whatever re-placement makes of it) live in buffers of their own; the
// others stay in the pool file and are read, when a pass routes a token
// to them, into read buffers that keep the latest ones (least recently
// used goes first). Re-placement reads promoted experts in the background
// and swaps them in at the start of a later call, when no pass holds the
// demoted ones; the resident bytes may exceed the plan's by the promoted
// experts of one round until the swap.
type expertStore struct {
	pool   *prefab.Pool
	src    tier.Source
	verify stream.VerifyMode
	log    hclog.Logger
	budget int64 // bytes resident experts may take
	// gates are each layer's FFN norm and router, held for predicting a
	// layer's picks before its weights arrive (loadGates); nil: no
	// prediction.
	gates []gate
	// readAhead says when to read ahead; trial decides it per batch size
	// under ReadAheadAuto from the passes' storage waits (pass*: the pass
	// in progress, its way fixed by the pass's first Gate call).
	readAhead ReadAhead
	trial     waytrial.Trial
	passSet   bool
	passOn    bool
	passRows  int
	passWait  time.Duration

	mu       sync.Mutex
	res      [][]*heldExpert // nil where on storage
	resBytes int64
	verified [][]atomic.Bool // checked at least once; read concurrently
	uses     [][]float64
	bufs     []expertBuf
	clock    uint64
	passes   uint64
	ready    []swap // promotions read, waiting for their swap
	busy     bool   // a round of promotions is being read
	stats    ExpertStats
	closed   bool
	bg       sync.WaitGroup
}

// heldExpert is an expert in a buffer of the store's: resident, or in a
// read buffer.
type heldExpert struct {
	b    *tier.Buffer
	x    model.Expert
	size int64
}

// expertBuf is one read buffer and the expert it holds (layer -1: none).
type expertBuf struct {
	held          heldExpert
	layer, expert int
	used          uint64 // the clock of its last use
	// pending is the read started ahead into the buffer while it runs;
	// ahead marks the expert as read ahead and not yet used.
	pending *aheadRead
	ahead   bool
}

// aheadRead is a read of n bytes started by Prefetch: err is set before
// done closes.
type aheadRead struct {
	done chan struct{}
	err  error
	n    int64
}

// gate is a layer's FFN norm and router, copied out of its extent.
type gate struct{ norm, router model.Tensor }

// swap makes layer's expert in resident (its bytes read into held) in
// place of outLayer's expert out (-1: none; the bytes were free).
type swap struct {
	layer, in     int
	outLayer, out int
	held          heldExpert
}

// newExpertStore reads plan's resident experts from src (verifying each)
// and allocates its read buffers.
func newExpertStore(ctx context.Context, pool *prefab.Pool, src tier.Source, plan tier.ExpertPlan, verify stream.VerifyMode, log hclog.Logger) (*expertStore, error) {
	// The clock starts past every buffer's last use (0), so that buffers
	// no call has used are free for Prefetch before the first call.
	s := &expertStore{pool: pool, src: src, verify: verify, log: log, budget: plan.ResidentBytes, trial: waytrial.Trial{MaxBatch: aheadMaxBatch}, clock: 1}
	s.res = make([][]*heldExpert, len(plan.Resident))
	s.verified = make([][]atomic.Bool, len(plan.Resident))
	s.uses = make([][]float64, len(plan.Resident))
	for l, rs := range plan.Resident {
		s.res[l] = make([]*heldExpert, len(rs))
		s.verified[l] = make([]atomic.Bool, len(rs))
		s.uses[l] = make([]float64, len(rs))
		for e, r := range rs {
			if !r {
				continue
			}
			if err := ctx.Err(); err != nil {
				s.close()
				return nil, fmt.Errorf("loading experts at layer %d: %w", l, err)
			}
			h, err := s.load(ctx, l, e)
			if err != nil {
				s.close()
				return nil, err
			}
			s.res[l][e] = &h
			s.resBytes += h.size
		}
	}
	for range plan.Buffers {
		b, err := src.Alloc(int(plan.BufferBytes))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("expert read buffer: %w", err)
		}
		s.bufs = append(s.bufs, expertBuf{held: heldExpert{b: b}, layer: -1})
	}
	return s, nil
}

// load reads layer l's expert e into a new buffer of its own.
func (s *expertStore) load(ctx context.Context, l, e int) (heldExpert, error) {
	ext, err := s.pool.ExpertExtent(l, e)
	if err != nil {
		return heldExpert{}, err
	}
	b, err := s.src.Alloc(int(ext.Length))
	if err != nil {
		return heldExpert{}, fmt.Errorf("layer %d expert %d: %w", l, e, err)
	}
	h := heldExpert{b: b}
	if err := s.readInto(ctx, l, e, &h, true); err != nil {
		b.Free()
		return heldExpert{}, err
	}
	return h, nil
}

// readInto reads layer l's expert e into h's buffer, verifies it (when
// check is set, and as the mode says: every read, the first, or never) and
// decodes it. It touches no state behind s.mu, so reads run concurrently.
func (s *expertStore) readInto(ctx context.Context, l, e int, h *heldExpert, check bool) error {
	ext, err := s.pool.ExpertExtent(l, e)
	if err != nil {
		return err
	}
	data := h.b.Bytes()[:ext.Length]
	if err := s.src.ReadAt(ctx, data, ext.Offset); err != nil {
		return fmt.Errorf("reading layer %d expert %d (bytes [%d, %d)): %w", l, e, ext.Offset, ext.Offset+ext.Length, err)
	}
	need := check
	switch s.verify {
	case stream.VerifyAlways:
		need = true
	case stream.VerifyFirst:
		need = need || !s.verified[l][e].Load()
	}
	if need {
		if err := s.pool.VerifyExpert(l, e, data); err != nil {
			s.log.Error("expert read from storage does not match its checksum", "layer", l, "expert", e,
				"offset", ext.Offset, "length", ext.Length, "error", err)
			return err
		}
		s.verified[l][e].Store(true)
	}
	x, err := s.pool.DecodeExpert(l, e, data)
	if err != nil {
		return err
	}
	h.x, h.size = x, ext.Length
	return nil
}

// Experts implements model.ExpertSource. Experts read ahead for this
// layer are waited for while the misses are read, so a wrong prediction
// delays nothing but its own buffer; reads ahead for other experts go on
// in the background.
func (s *expertStore) Experts(ctx context.Context, l int, es []int, dst []*model.Expert) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l < 0 || l >= len(s.res) {
		return fmt.Errorf("layer %d out of range [0, %d)", l, len(s.res))
	}
	if l == 0 && s.passSet {
		// A pass begins: the one before is timed for the trial.
		s.trial.Record(s.passRows, s.passOn, s.passWait)
		s.passSet, s.passWait = false, 0
	}
	entered := time.Now()
	defer func() { s.passWait += time.Since(entered) }()
	s.reap()
	// The previous call's experts are no longer in use: swap in what a
	// round of re-placement has read.
	s.applySwaps()
	if l == 0 {
		s.pass()
	}
	s.clock++
	var miss, wait []int // indexes into es
	for j, e := range es {
		if e < 0 || e >= len(s.res[l]) {
			return fmt.Errorf("expert %d out of range [0, %d)", e, len(s.res[l]))
		}
		s.uses[l][e]++
		if h := s.res[l][e]; h != nil {
			dst[j] = &h.x
			s.stats.Resident++
			continue
		}
		if k := s.holding(l, e); k >= 0 {
			b := &s.bufs[k]
			b.used = s.clock
			if b.pending != nil {
				wait = append(wait, j)
				continue
			}
			dst[j] = &b.held.x
			if b.ahead {
				b.ahead = false
				s.stats.Prefetched++
			} else {
				s.stats.Buffered++
			}
			continue
		}
		miss = append(miss, j)
	}
	if len(miss) == 0 && len(wait) == 0 {
		return nil
	}
	// The least recently used buffers neither serving this call nor
	// being read into take the misses; the plan has a buffer for every
	// storage expert of a layer, so where reads ahead hold the rest,
	// they are waited for.
	victims := make([]int, 0, len(miss))
	for range miss {
		k := s.victim()
		if k < 0 {
			s.settle()
			k = s.victim()
		}
		if k < 0 {
			return fmt.Errorf("layer %d: %d experts to read and no free read buffer (%d in all)", l, len(miss), len(s.bufs))
		}
		s.bufs[k].used, s.bufs[k].layer, s.bufs[k].ahead = s.clock, -1, false
		victims = append(victims, k)
	}
	t0 := time.Now()
	errs := make([]error, len(miss))
	var wg sync.WaitGroup
	for i, j := range miss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.readInto(ctx, l, es[j], &s.bufs[victims[i]].held, false)
		}()
	}
	// Meanwhile the experts read ahead for this layer; one whose read
	// failed is read again, into the buffer it had.
	var again []int
	for _, j := range wait {
		k := s.holding(l, es[j])
		if k >= 0 && s.bufs[k].pending != nil {
			s.finish(k)
		}
		if k < 0 || s.bufs[k].layer != l {
			again = append(again, j)
			continue
		}
		b := &s.bufs[k]
		b.used, b.ahead = s.clock, false
		dst[j] = &b.held.x
		s.stats.Prefetched++
	}
	wg.Wait()
	for _, j := range again {
		k := s.victim()
		if k < 0 {
			return fmt.Errorf("layer %d: expert %d to read again and no free read buffer (%d in all)", l, es[j], len(s.bufs))
		}
		miss = append(miss, j)
		victims = append(victims, k)
		s.bufs[k].used, s.bufs[k].layer, s.bufs[k].ahead = s.clock, -1, false
		errs = append(errs, s.readInto(ctx, l, es[j], &s.bufs[k].held, false))
	}
	s.stats.ReadTime += time.Since(t0)
	var failed []error
	for i, j := range miss {
		b := &s.bufs[victims[i]]
		if errs[i] != nil {
			b.used = 0
			s.stats.Failed++
			failed = append(failed, errs[i])
			continue
		}
		b.layer, b.expert = l, es[j]
		dst[j] = &b.held.x
		s.stats.Read++
		s.stats.ReadBytes += b.held.size
	}
	return errors.Join(failed...)
}

// victim returns the least recently used read buffer that serves neither
// the current call nor a read in flight, or -1.
func (s *expertStore) victim() int {
	k := -1
	for i := range s.bufs {
		b := &s.bufs[i]
		if b.used != s.clock && b.pending == nil && (k < 0 || b.used < s.bufs[k].used) {
			k = i
		}
	}
	return k
}

// Prefetch implements model.ExpertPrefetcher: it starts reading those of
// layer l's experts es that are neither resident nor buffered into read
// buffers the latest call does not use, least recently used first, and
// returns at once. The reads run off the lock; the next Experts call
// waits for them (settle). With fewer free buffers than experts to read,
// the first ones are read.
func (s *expertStore) Prefetch(ctx context.Context, l int, es []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || l < 0 || l >= len(s.res) {
		return
	}
	for _, e := range es {
		if e < 0 || e >= len(s.res[l]) || s.res[l][e] != nil || s.holding(l, e) >= 0 {
			continue
		}
		k := s.victim() // neither the latest call's buffers nor this round's
		if k < 0 {
			return
		}
		ext, err := s.pool.ExpertExtent(l, e)
		if err != nil {
			continue
		}
		b := &s.bufs[k]
		r := &aheadRead{done: make(chan struct{}), n: ext.Length}
		// Marked used now, so the next expert of this round takes
		// another buffer; the next call's clock makes it free again.
		b.layer, b.expert, b.used, b.pending, b.ahead = l, e, s.clock, r, true
		s.stats.PrefetchReads++
		s.stats.ReadBytes += r.n // counted when started, taken back if it fails
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			r.err = s.readInto(ctx, l, e, &b.held, false)
			close(r.done)
		}()
	}
}

// settle waits for every read Prefetch started (finish).
func (s *expertStore) settle() {
	for i := range s.bufs {
		if s.bufs[i].pending != nil {
			s.finish(i)
		}
	}
}

// reap finishes the reads ahead that are done, without waiting.
func (s *expertStore) reap() {
	for i := range s.bufs {
		if r := s.bufs[i].pending; r != nil {
			select {
			case <-r.done:
				s.finish(i)
			default:
			}
		}
	}
}

// finish waits for the read ahead into buffer k (the time counts as
// PrefetchWait) and ends it; where it failed, the buffer is free again
// (a call that needs the expert reads it anew) and its bytes, counted
// when the read started, are taken back.
// It runs with s.mu held; the reads do not take it.
func (s *expertStore) finish(k int) {
	b := &s.bufs[k]
	r := b.pending
	select {
	case <-r.done:
	default:
		t := time.Now()
		<-r.done
		s.stats.PrefetchWait += time.Since(t)
	}
	b.pending = nil
	if r.err != nil {
		s.log.Debug("an expert read ahead failed; a layer that needs it reads it again", "layer", b.layer, "expert", b.expert, "error", r.err)
		b.layer, b.used, b.ahead = -1, 0, false
		s.stats.ReadBytes -= r.n
	}
}

// Gate implements model.ExpertPrefetcher: layer l's FFN norm and router,
// when loadGates held them, some expert of the layer is on storage, and
// this pass of T rows reads ahead (the first call of a pass decides).
func (s *expertStore) Gate(l, T int) (norm, router *model.Tensor, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gates == nil {
		return nil, nil, false
	}
	if !s.passSet {
		s.passSet, s.passRows = true, T
		switch s.readAhead {
		case ReadAheadOn:
			s.passOn = true
		case ReadAheadOff:
			s.passOn = false
		default:
			s.passOn = s.trial.First(T)
		}
	}
	if !s.passOn || l < 0 || l >= len(s.gates) || !slices.Contains(s.res[l], nil) {
		return nil, nil, false
	}
	g := &s.gates[l]
	return &g.norm, &g.router, true
}

// enableReadAhead makes the store read ahead as mode says (nothing for
// ReadAheadOff, or where every expert is resident and no read buffer
// exists), loading the gates for it; model names the model in the log.
func (s *expertStore) enableReadAhead(ctx context.Context, mode ReadAhead, model string) error {
	if mode == ReadAheadOff || len(s.bufs) == 0 {
		return nil
	}
	kept, err := s.loadGates(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.readAhead = mode
	s.mu.Unlock()
	s.log.Debug("storage experts read ahead: every layer's router and FFN norm held", "model", model, "bytes", tier.FormatBytes(kept))
	return nil
}

// loadGates reads every layer's extent once, checks it against the
// pool's checksum, and keeps copies of its FFN norm and router, so that a
// pass can predict a layer's experts (model.ExpertPrefetcher) before the
// layer's weights arrive. It returns the bytes kept. It is for a load,
// before any pass, and only where some expert lives on storage.
func (s *expertStore) loadGates(ctx context.Context) (int64, error) {
	n := s.pool.NumLayers()
	var longest int64
	for l := range n {
		longest = max(longest, s.pool.Extent(l).Length)
	}
	buf, err := s.src.Alloc(int(longest))
	if err != nil {
		return 0, fmt.Errorf("expert gates: %w", err)
	}
	defer buf.Free()
	gates := make([]gate, n)
	var kept int64
	for l := range n {
		ext := s.pool.Extent(l)
		b := buf.Bytes()[:ext.Length]
		if err := s.src.ReadAt(ctx, b, ext.Offset); err != nil {
			return 0, fmt.Errorf("expert gates: reading layer %d (bytes [%d, %d)): %w", l, ext.Offset, ext.Offset+ext.Length, err)
		}
		if err := s.pool.Verify(l, b); err != nil {
			return 0, fmt.Errorf("expert gates: %w", err)
		}
		w, err := s.pool.Decode(l, b)
		if err != nil {
			return 0, fmt.Errorf("expert gates: %w", err)
		}
		g := gate{norm: w.FFNNorm, router: w.Router}
		g.norm.Data = slices.Clone(g.norm.Data)
		g.router.Data = slices.Clone(g.router.Data)
		kept += int64(len(g.norm.Data) + len(g.router.Data))
		gates[l] = g
	}
	s.mu.Lock()
	s.gates = gates
	s.mu.Unlock()
	return kept, nil
}

// holding returns the read buffer holding layer l's expert e, or -1.
func (s *expertStore) holding(l, e int) int {
	for i := range s.bufs {
		if s.bufs[i].layer == l && s.bufs[i].expert == e {
			return i
		}
	}
	return -1
}

// pass counts a pass (a call for layer 0): it decays the use counts and,
// every replanEvery passes, starts a round of re-placement.
func (s *expertStore) pass() {
	s.passes++
	if s.passes%decayEvery == 0 {
		for _, u := range s.uses {
			for e := range u {
				u[e] /= 2
			}
		}
	}
	if s.passes%replanEvery != 0 || s.busy || len(s.ready) > 0 || s.closed {
		return
	}
	plan := s.swaps()
	if len(plan) == 0 {
		return
	}
	s.busy = true
	s.bg.Add(1)
	go s.promote(plan)
}

// swaps chooses this round's swaps: the storage experts used most
// (ties: lower layer, lower expert) each against the least used resident
// expert large enough to make room, while the first is used swapMargin
// times as often; a promotion that fits the budget without a demotion
// takes none.
func (s *expertStore) swaps() []swap {
	type ranked struct {
		l, e int
		u    float64
	}
	var in, out []ranked
	for l := range s.res {
		for e, h := range s.res[l] {
			if h != nil {
				out = append(out, ranked{l, e, s.uses[l][e]})
			} else if s.uses[l][e] > 0 {
				in = append(in, ranked{l, e, s.uses[l][e]})
			}
		}
	}
	slices.SortStableFunc(in, func(a, b ranked) int { return cmp.Compare(b.u, a.u) })
	slices.SortStableFunc(out, func(a, b ranked) int { return cmp.Compare(a.u, b.u) })
	var plan []swap
	free := s.budget - s.resBytes
	for _, c := range in {
		if len(plan) == maxSwaps {
			break
		}
		ext, err := s.pool.ExpertExtent(c.l, c.e)
		if err != nil {
			continue
		}
		if ext.Length <= free {
			free -= ext.Length
			plan = append(plan, swap{layer: c.l, in: c.e, out: -1})
			continue
		}
		// The least used resident expert whose bytes make room.
		k := slices.IndexFunc(out, func(o ranked) bool {
			x, err := s.pool.ExpertExtent(o.l, o.e)
			return err == nil && x.Length+free >= ext.Length
		})
		if k < 0 || c.u < swapMargin*out[k].u {
			break
		}
		x, _ := s.pool.ExpertExtent(out[k].l, out[k].e)
		free += x.Length - ext.Length
		plan = append(plan, swap{layer: c.l, in: c.e, outLayer: out[k].l, out: out[k].e})
		out = slices.Delete(out, k, k+1)
	}
	return plan
}

// promote reads the promoted experts of plan into buffers of their own,
// off the lock, and queues them for applySwaps.
func (s *expertStore) promote(plan []swap) {
	defer s.bg.Done()
	var done []swap
	var bytes int64
	for _, sw := range plan {
		h, err := s.load(context.Background(), sw.layer, sw.in)
		if err != nil {
			s.log.Warn("promoting an expert", "layer", sw.layer, "expert", sw.in, "error", err)
			continue
		}
		sw.held = h
		bytes += h.size
		done = append(done, sw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	s.stats.PromoteReads += uint64(len(plan))
	s.stats.ReadBytes += bytes
	if s.closed {
		for _, sw := range done {
			sw.held.b.Free()
		}
		return
	}
	s.ready = append(s.ready, done...)
}

// applySwaps installs promotions that were read, freeing the experts they
// replace; it runs with s.mu held between calls, when no pass uses them.
func (s *expertStore) applySwaps() {
	for _, sw := range s.ready {
		if s.res[sw.layer][sw.in] != nil {
			sw.held.b.Free() // promoted meanwhile another way
			continue
		}
		if sw.out >= 0 {
			if h := s.res[sw.outLayer][sw.out]; h != nil {
				s.resBytes -= h.size
				h.b.Free()
				s.res[sw.outLayer][sw.out] = nil
				s.stats.Demoted++
			}
		}
		h := sw.held
		s.res[sw.layer][sw.in] = &h
		s.resBytes += h.size
		s.stats.Promoted++
		// A read buffer may still hold a copy (or be reading one); it is
		// no longer needed.
		if k := s.holding(sw.layer, sw.in); k >= 0 {
			if s.bufs[k].pending != nil {
				s.finish(k)
			}
			s.bufs[k].layer, s.bufs[k].used, s.bufs[k].ahead = -1, 0, false
		}
	}
	s.ready = s.ready[:0]
}

// rebalance makes the experts used most per byte by counts (per layer and
// expert, in tier.RankExperts' order) resident within the budget,
// the others not, and starts the use counts from counts. The demotions
// come first, so memory never exceeds the budget; the promotions read
// synchronously. It is for a load (no pass runs), not for serving.
func (s *expertStore) rebalance(ctx context.Context, counts [][]uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	sizes := s.pool.Sizes().Experts
	want := make([][]bool, len(s.res))
	for l := range s.res {
		want[l] = make([]bool, len(s.res[l]))
		for e := range s.res[l] {
			s.uses[l][e] = float64(counts[l][e])
		}
	}
	order := tier.RankExperts(sizes, counts)
	tier.FillExperts(order, sizes, want, s.budget)
	for l := range s.res {
		for e, h := range s.res[l] {
			if h != nil && !want[l][e] {
				s.resBytes -= h.size
				if err := h.b.Free(); err != nil {
					return err
				}
				s.res[l][e] = nil
				s.stats.Demoted++
			}
		}
	}
	for _, x := range order {
		if !want[x.Layer][x.Expert] || s.res[x.Layer][x.Expert] != nil {
			continue
		}
		h, err := s.load(ctx, x.Layer, x.Expert)
		s.stats.PromoteReads++
		if err != nil {
			return err
		}
		s.res[x.Layer][x.Expert] = &h
		s.resBytes += h.size
		s.stats.ReadBytes += h.size
		s.stats.Promoted++
	}
	return nil
}

// Stats returns the counts so far.
func (s *expertStore) Stats() ExpertStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.AheadChoices = aheadChoices(&s.trial)
	return st
}

// Residency returns, per layer and expert, whether the expert is resident
// now, and the resident bytes.
func (s *expertStore) Residency() ([][]bool, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]bool, len(s.res))
	for l := range s.res {
		out[l] = make([]bool, len(s.res[l]))
		for e, h := range s.res[l] {
			out[l][e] = h != nil
		}
	}
	return out, s.resBytes
}

// close waits for a round of promotions and frees every buffer.
func (s *expertStore) close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.bg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i := range s.bufs {
		errs = append(errs, s.bufs[i].held.b.Free())
	}
	s.bufs = nil
	for _, l := range s.res {
		for e, h := range l {
			if h != nil {
				errs = append(errs, h.b.Free())
				l[e] = nil
			}
		}
	}
	for _, sw := range s.ready {
		errs = append(errs, sw.held.b.Free())
	}
	s.ready = nil
	return errors.Join(errs...)
}
