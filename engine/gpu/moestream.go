package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// A CPU layer's picks over both links. At one token the CPU computes the
// picks of experts the device does not hold at the rate it reads host
// memory, while PCIe carries nothing: a mixture-of-experts model's
// attention is resident. pickStream copies a share of those picks from
// the experts' page-locked host memory into staging slots on a copy
// stream as soon as the routing reaches the host, and the GPU computes
// them with the picked expert kernels while the CPU computes the rest.
// The staged experts have a table of their own, so the launch over them
// leaves the resident launch's map alone, and a second MoECombine adds
// them. The share balances the two links by their rates measured in
// passes: they read the same DRAM, so neither runs at its rate alone.
type pickStream struct {
	copy      cudadrv.Stream
	slots     cudadrv.DevPtr // streamSlots slots of slotBytes, an expert each (putExpert's layout)
	slotBytes int64
	table     cudadrv.DevPtr   // E entries of three pointers: the staged experts', 0 elsewhere
	tableHost *cudadrv.HostMem // its pinned source
	acts      cudadrv.DevPtr   // g (rows of ExpertFFN), out (rows of Dim), where (rows int32)
	rows      int              // picks acts holds: K, or a batch pass's T·K (growActs)
	// The GPU's part of a pick split by its FFN width (SetSplitPicks):
	// its own table (the split expert's entry at its part's first row
	// and column, in a slot), pinned source, and activations
	// (acts' layout).
	partTable     cudadrv.DevPtr
	partTableHost *cudadrv.HostMem
	partActs      cudadrv.DevPtr
	partSet       int // the expert whose entry partTableHost holds; -1 none
	// loaded follows a layer's copies on the copy stream; done follows
	// the staged launch on the compute stream (the slots free again);
	// start and end time the copies.
	loaded, done, start, end cudadrv.Event
	timedBytes               int64 // bytes between start and end not yet read (0: none)
	staged                   []bool
	// w is a staged expert's weights in its slot, where staged at more
	// than one token (stageBatch): the grouped launches read them there.
	w   []expertW
	set []int // experts whose entries tableHost holds
	// widthSplit lets split share a pick by its FFN width (SetSplitPicks).
	widthSplit bool
	// copies and cpu are each link's time for a layer's share against
	// its bytes, measured in passes: the copies' by events, the CPU's by
	// its busy time.
	copies, cpu linkFit
	splits      int // layers split so far
	// cpuBatch is the CPU's fit at more than one token, where a layer's
	// share is distinct experts, each read once for all of its tokens:
	// the CPU's time for a byte differs from one token's; batchSplits
	// counts those layers, capped those whose share for PCIe the slots
	// cut short.
	cpuBatch    linkFit
	batchSplits int
	capped      int
	tokens      []int // per expert, a batch layer's CPU picks (scratch)
	// The GPU's side of a batch layer the stream split, timed on the
	// compute stream from the CPU's start (sideStart, recorded as the CPU
	// starts on an idle stream) to the end of the GPU's share (sideEnd):
	// the copies' late start behind the host's issue, the copies, and the
	// launches over them, which the copies' own timing leaves out.
	// sideBytes is the staged bytes of the layer timed and not yet read
	// (0: none), sideCPU its CPU's busy time; sideLayers counts the
	// layers read, sideLate those whose GPU side ended after the CPU,
	// sideTail by how much in all: the part of the hand-over that is
	// PCIe's share running past the CPU's.
	sideStart, sideEnd cudadrv.Event
	sideOn             bool // sideStart recorded, sideEnd not yet
	sideBytes          int64
	sideCPU            time.Duration
	sideLayers         int
	sideLate           int
	sideTail           time.Duration
	// side is the GPU side's fit against the staged bytes: what a batch
	// layer's split balances with the CPU's (batchShare).
	side linkFit
	// ahead stages the next batch layer's guessed experts during the
	// hand-over (moeahead.go); nil for a model of few large experts.
	ahead *aheadStage
}

// linkFit fits a link's time for a layer's share as fixed + bytes/rate,
// by least squares over its recent layers (older ones weigh less: the
// rates move with what else reads the host's memory). The fixed part
// matters: a CPU given one pick of a layer spends more on the call than
// on the bytes, so a rate alone would read it as a slow link and send it
// ever fewer picks.
type linkFit struct {
	n, w, x, y, xx, xy float64
}

// fitDecay is the weight a layer's measurement loses with each later
// one; minFit the layers a fit needs.
const (
	fitDecay = 0.98
	minFit   = 12
)

func (f *linkFit) add(bytes int64, d time.Duration) {
	if bytes <= 0 || d <= 0 {
		return
	}
	x, y := float64(bytes), d.Seconds()
	f.n++
	f.w, f.x, f.y = fitDecay*f.w+1, fitDecay*f.x+x, fitDecay*f.y+y
	f.xx, f.xy = fitDecay*f.xx+x*x, fitDecay*f.xy+x*y
}

// line returns the fit's fixed seconds and seconds a byte; ok is false
// until there are enough layers of more than one size to tell them
// apart.
func (f *linkFit) line() (fixed, perByte float64, ok bool) {
	if f.n < minFit || f.x <= 0 {
		return 0, 0, false
	}
	den := f.w*f.xx - f.x*f.x
	if den <= 1e-9*f.w*f.xx {
		return 0, 0, false
	}
	perByte = (f.w*f.xy - f.x*f.y) / den
	fixed = (f.y - perByte*f.x) / f.w
	if perByte <= 0 {
		return 0, 0, false
	}
	if fixed < 0 {
		fixed, perByte = 0, f.y/f.x
	}
	return fixed, perByte, true
}

// rate is bytes a second by the fit (0 until it has one).
func (f *linkFit) rate() float64 {
	if _, pb, ok := f.line(); ok {
		return 1 / pb
	}
	return 0
}

// PickStats counts the picks pickStream sent over PCIe.
type PickStats struct {
	// Picks is the (token, expert) picks copied to the GPU and computed
	// there, Bytes their experts' bytes as laid out in a slot (the unit
	// the split and both fits count in), Layers the layers that had some.
	Picks  int64 `json:"picks"`
	Bytes  int64 `json:"bytes"`
	Layers int64 `json:"layers"`
	// Split is the picks split by their FFN width, the GPU computing
	// their last columns and the CPU the rest (SetSplitPicks, with few
	// CPU picks a layer); their GPU part counts in Bytes, not in Picks.
	Split int64 `json:"split"`
	// Issue is the host's time issuing the copies and the launch over
	// them: time before the CPU starts on its share of the layer.
	Issue time.Duration `json:"issue_ns"`
	// BatchLayers is the layers of passes of several tokens whose CPU
	// experts were shared between the links, Capped those of them whose
	// share for PCIe the staging slots cut short: how often the slots,
	// not the links' balance, set a batch layer's split.
	BatchLayers int64 `json:"batch_layers"`
	Capped      int64 `json:"capped"`
	// AheadStaged is the experts a batch layer copied ahead for the
	// next (its guessed picks), AheadUsed those the next layer's CPU
	// would have computed, which the GPU did instead, AheadBytes the
	// copies' bytes (not in Bytes).
	AheadStaged int64 `json:"ahead_staged"`
	AheadUsed   int64 `json:"ahead_used"`
	AheadBytes  int64 `json:"ahead_bytes"`
	// SideLayers is the batch layers whose GPU side (from the CPU's
	// start to the end of the GPU's share) was timed, SideLate those of
	// them where it ended after the CPU's share, SideTail by how much in
	// all: the hand-over's part that waits for PCIe's share.
	SideLayers int64         `json:"side_layers"`
	SideLate   int64         `json:"side_late"`
	SideTail   time.Duration `json:"side_tail_ns"`
	// CopyRate and CPURate are the links' rates by their fits, bytes a
	// second measured in passes, CopyFixed and CPUFixed what a layer's
	// share costs each beyond its bytes: what the split weighs.
	CopyRate  float64       `json:"copy_rate"`
	CPURate   float64       `json:"cpu_rate"`
	CopyFixed time.Duration `json:"copy_fixed_ns"`
	CPUFixed  time.Duration `json:"cpu_fixed_ns"`
}

// staged adds a layer whose picks the stream staged: picks of them, its
// experts' bytes, and the host's time issuing them.
func (st *PickStats) staged(picks, bytes int64, issue time.Duration) {
	st.Issue += issue
	st.Picks += picks
	st.Bytes += bytes
	st.Layers++
}

// stats fills st's rates and fixed costs from the fits, and its batch
// layers' counts.
func (ps *pickStream) stats(st *PickStats) {
	st.CopyRate, st.CPURate = ps.copies.rate(), ps.cpu.rate()
	st.BatchLayers, st.Capped = int64(ps.batchSplits), int64(ps.capped)
	st.SideLayers, st.SideLate, st.SideTail = int64(ps.sideLayers), int64(ps.sideLate), ps.sideTail
	if a := ps.ahead; a != nil {
		st.AheadStaged, st.AheadUsed, st.AheadBytes = a.staged, a.hits, a.bytes
	}
	if f, _, ok := ps.copies.line(); ok {
		st.CopyFixed = time.Duration(f * 1e9)
	}
	if f, _, ok := ps.cpu.line(); ok {
		st.CPUFixed = time.Duration(f * 1e9)
	}
}

// SetStreamPicks turns on (or off) the copying of a share of each CPU
// layer's picks at one token to the GPU (pickStream). It pins the host
// experts in place and allocates K staging slots beyond the model's
// budget. It fails for a model whose experts are not in host memory
// (an ExpertSource serves them) or whose shapes the picked kernels do
// not take.
func (m *Model) SetStreamPicks(on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.moe
	if x == nil {
		return errors.New("stream picks: not a mixture-of-experts model")
	}
	return m.dev.Do(func(c *cudadrv.Ctx) error {
		if err := c.StreamSync(m.stream); err != nil {
			return err
		}
		if !on {
			if x.ps == nil {
				return nil
			}
			err := x.ps.release(c)
			x.ps = nil
			return errors.Join(err, x.unpinHost(c))
		}
		if x.ps != nil {
			return nil
		}
		ps, err := newPickStream(c, m.k, m.stream, &m.Config, x)
		if err != nil {
			return fmt.Errorf("stream picks: %w", err)
		}
		x.ps = ps
		return nil
	})
}

// PickStreamBytes is the device memory SetStreamPicks takes for cfg
// beyond MoEDeviceOverhead, when the largest expert (its three matrices)
// holds largest bytes: a staging slot a pick, the staged table and
// activations (for a batch pass's picks, stagedRows). 0 for a dense model.
func PickStreamBytes(cfg *model.Config, largest int64) int64 {
	if !cfg.MoE() || largest <= 0 {
		return 0
	}
	// The part's table and activations too, and the ahead stage.
	return int64(streamSlots(cfg))*slotFor(largest) + 2*tableBytes(1, cfg.Experts) + actsBytes(cfg, stagedRows(cfg)) + actsBytes(cfg, cfg.ExpertsUsed) +
		aheadBytes(cfg, slotFor(largest))
}

// stagedRows is the most picks the staged launches take: a batch pass's
// when the picked kernels run it (moeBatchPicked), at least one token's.
func stagedRows(cfg *model.Config) int { return cfg.ExpertsUsed * pickedTokens(cfg) }

// pickedTokens is the most tokens a pass the picked kernels run has
// (moeBatchPicked: no more picks than the layer's experts), at least one.
func pickedTokens(cfg *model.Config) int { return max(1, cfg.Experts/cfg.ExpertsUsed) }

// slotFor is a staging slot's bytes for an expert of largest bytes at
// most: each of its matrices aligned, as expertSize lays them out.
func slotFor(largest int64) int64 { return largest + 3*alignUp(1) }

// streamSlots is the pick stream's staging slots: twice a token's picks,
// so that a batch layer, whose CPU experts are several tokens' picks, can
// send more than one token's worth over PCIe (a token's picks use the
// first ExpertsUsed).
func streamSlots(cfg *model.Config) int { return 2 * cfg.ExpertsUsed }

// slotsBytes is ExpertsUsed staging slots of slot bytes and the table of
// cfg's experts that points into them.
func slotsBytes(cfg *model.Config, slot int64) int64 {
	return int64(cfg.ExpertsUsed)*slot + tableBytes(1, cfg.Experts)
}

// newPickStream pins x's host experts (a user of x.pinHost) and
// allocates the staging.
func newPickStream(c *cudadrv.Ctx, k *kernels.Kernels, s cudadrv.Stream, cfg *model.Config, x *gpuMoE) (ps *pickStream, err error) {
	K, E := cfg.ExpertsUsed, cfg.Experts
	if _, err := x.pinHost(c, E); err != nil {
		return nil, err
	}
	var slot int64
	for _, L := range x.layers {
		slot = max(slot, expertSize(&L.Experts[0]))
	}
	ps = &pickStream{staged: make([]bool, E), w: make([]expertW, E), tokens: make([]int, E), slotBytes: slot}
	defer func() {
		if err != nil {
			err = errors.Join(err, ps.release(c), x.unpinHost(c))
		}
	}()
	if ps.copy, err = c.NewStream(cudadrv.StreamNonBlocking); err != nil {
		return nil, err
	}
	if ps.slots, err = c.Alloc(int64(streamSlots(cfg)) * ps.slotBytes); err != nil {
		return nil, fmt.Errorf("%d staging slots of %d bytes: %w", streamSlots(cfg), ps.slotBytes, err)
	}
	if ps.table, err = c.Alloc(tableBytes(1, E)); err != nil {
		return nil, err
	}
	if ps.tableHost, err = c.HostAlloc(int(tableBytes(1, E)), 0); err != nil {
		return nil, err
	}
	for l, L := range x.layers {
		if p := stagedPicked(L, ps.table, E); !k.CanMoEPicked(s, p, K) {
			return nil, fmt.Errorf("layer %d: the picked expert kernels do not take %v %dx%d gates and %v downs", l, p.Gate.Type, p.Gate.Rows, p.Gate.Cols, p.Down.Type)
		}
	}
	clear(ps.tableHost.Bytes())
	if err := c.CopyHtoD(ps.table, ps.tableHost.Bytes(), s); err != nil {
		return nil, err
	}
	acts := actsBytes(cfg, K)
	if ps.acts, err = c.Alloc(acts); err != nil {
		return nil, err
	}
	ps.rows = K
	if ps.partActs, err = c.Alloc(acts); err != nil {
		return nil, err
	}
	if ps.partTable, err = c.Alloc(tableBytes(1, E)); err != nil {
		return nil, err
	}
	if ps.partTableHost, err = c.HostAlloc(int(tableBytes(1, E)), 0); err != nil {
		return nil, err
	}
	clear(ps.partTableHost.Bytes())
	ps.partSet = -1
	if aheadSlots(cfg) > 0 {
		if ps.ahead, err = newAheadStage(c, cfg, ps.slotBytes); err != nil {
			return nil, err
		}
	}
	for _, e := range []*cudadrv.Event{&ps.loaded, &ps.done} {
		if *e, err = c.NewEvent(cudadrv.EventDisableTiming); err != nil {
			return nil, err
		}
	}
	for _, e := range []*cudadrv.Event{&ps.start, &ps.end, &ps.sideStart, &ps.sideEnd} {
		if *e, err = c.NewEvent(cudadrv.EventDefault); err != nil {
			return nil, err
		}
	}
	return ps, c.StreamSync(s)
}

// stagedPicked describes layer L's experts for the picked kernels at
// table (E entries): every expert of a layer shares its type and shape.
func stagedPicked(L *model.Layer, table cudadrv.DevPtr, E int) kernels.MoEPicked {
	ex := &L.Experts[0]
	return kernels.MoEPicked{Table: table, Experts: E, Gate: matrix(&ex.Gate, 0), Up: matrix(&ex.Up, 0), Down: matrix(&ex.Down, 0)}
}

// actPtrs are the staged picks' gate activations, outputs and map.
func (ps *pickStream) actPtrs(cfg *model.Config) (g, out, where cudadrv.DevPtr) {
	return actLayout(cfg, ps.acts, ps.rows)
}

// partPtrs are the same for the GPU's part of a split pick (one token's).
func (ps *pickStream) partPtrs(cfg *model.Config) (g, out, where cudadrv.DevPtr) {
	return actLayout(cfg, ps.partActs, cfg.ExpertsUsed)
}

// growActs makes the staged picks' activations hold rows picks (a batch
// pass's T·K), the device synchronised first: earlier launches may still
// read the ones replaced.
func (ps *pickStream) growActs(c *cudadrv.Ctx, cfg *model.Config, rows int) error {
	if rows <= ps.rows {
		return nil
	}
	if err := c.Synchronize(); err != nil {
		return err
	}
	rows = max(rows, min(2*ps.rows, stagedRows(cfg)))
	at, err := c.Alloc(actsBytes(cfg, rows))
	if err != nil {
		return fmt.Errorf("staged activations for %d picks: %w", rows, err)
	}
	if err := c.Free(ps.acts); err != nil {
		return errors.Join(err, c.Free(at))
	}
	ps.acts, ps.rows = at, rows
	return nil
}

// actsBytes is the size of a staged launch's activations of rows picks.
func actsBytes(cfg *model.Config, rows int) int64 {
	r := int64(rows)
	return alignUp(r*int64(cfg.ExpertFFN)*4) + alignUp(r*int64(cfg.Dim)*4) + alignUp(r*4)
}

// actLayout cuts a staged launch's activations of rows picks at at: g
// (rows of ExpertFFN), out (rows of Dim), where (rows int32).
func actLayout(cfg *model.Config, at cudadrv.DevPtr, rows int) (g, out, where cudadrv.DevPtr) {
	r := int64(rows)
	f, d := alignUp(r*int64(cfg.ExpertFFN)*4), alignUp(r*int64(cfg.Dim)*4)
	return at, at.Add(f), at.Add(f + d)
}

// split is how much of kc picks of b bytes each of one layer, f FFN
// columns wide, goes to the GPU: the last n picks whole, and of the pick
// before them (when part > 0) its last part columns, the rest of it the
// CPU's (model.Routing.Split). The share is the one whose later link
// finishes first by the two fits. Until both links have a fit, and one
// layer in exploreEvery after, half: a fit that sent every pick one way
// would never learn the other link again (a few slow CPU calls at the
// start, measured once, would keep the CPU idle for good), and layers of
// several sizes tell a fixed cost from a rate. A pick is split by width
// only with widthSplit on and where the layer's CPU picks are fewer than
// widthSplitPicks: one whole pick is then too coarse a step to balance
// two links by.
func (ps *pickStream) split(kc int, b int64, f int) (n, part int) {
	ps.splits++
	S := 1 // units a pick
	if ps.widthSplit && kc < widthSplitPicks && f%splitCols == 0 {
		S = f / splitCols
	}
	U := kc * S
	var u int
	cf, cb, cok := ps.cpu.line()
	gf, gb, gok := ps.copies.line()
	if !cok || !gok || ps.splits%exploreEvery == 0 {
		u = U / 2
	} else {
		u = streamSplit(U, float64(b)/float64(S), link{gf, gb}, link{cf, cb})
	}
	return u / S, u % S * splitCols
}

// splitCols is the step a pick is split at by width: a K-quant block,
// which keeps a Q4_K view's rows 16-byte aligned as the kernels' loads
// need; widthSplitPicks is the fewest CPU picks a layer that are split
// only as whole picks.
const (
	splitCols       = 256
	widthSplitPicks = 4
)

// exploreEvery is how often split measures both links whatever the fits
// say.
const exploreEvery = 8

// link is a link's time for a share: fixed seconds, and seconds a byte.
type link struct{ fixed, perByte float64 }

// time is the link's seconds for n picks of b bytes; none costs nothing.
func (l link) time(n int, b float64) float64 {
	if n == 0 {
		return 0
	}
	return l.fixed + float64(n)*b*l.perByte
}

// streamSplit is the n of kc picks of b bytes that minimises the later
// of the copies (n picks) and the CPU (kc-n), the fewer on a tie.
func streamSplit(kc int, b float64, copies, cpu link) int {
	best, bt := 0, cpu.time(kc, b)
	for n := 1; n <= kc; n++ {
		if t := max(copies.time(n, b), cpu.time(kc-n, b)); t < bt {
			best, bt = n, t
		}
	}
	return best
}

// batchShare chooses which of a batch layer's CPU experts go over PCIe:
// es are the layer's distinct experts the CPU would compute, ids the
// batch's picks (each expert's tokens are counted from them), b an
// expert's bytes, slots how many the staging holds. It returns the
// chosen ones, those with the most tokens first (the CPU reads an
// expert once for all of its tokens, but its products grow with them;
// the GPU's barely), reordering es. How many is as split decides it, by
// the GPU side's fit (side: the copies with their late start and the
// launches over them, which the copies' fit alone leaves out; the
// copies' until the side has one) and the CPU's at batches (cpuBatch),
// half until both have a fit and every exploreEvery layers.
func (ps *pickStream) batchShare(es []int, ids []int32, b int64, slots int) []int {
	if len(es) == 0 || slots <= 0 {
		return nil
	}
	ps.batchSplits++
	var n int
	cf, cb, cok := ps.cpuBatch.line()
	gf, gb, gok := ps.side.line()
	if !gok {
		gf, gb, gok = ps.copies.line()
	}
	if !cok || !gok || ps.batchSplits%exploreEvery == 0 {
		n = len(es) / 2
	} else {
		n = streamSplit(len(es), float64(b), link{gf, gb}, link{cf, cb})
	}
	if n > slots {
		n = slots
		ps.capped++
	}
	if n == 0 {
		return nil
	}
	for _, e := range es {
		ps.tokens[e] = 0
	}
	for _, e := range ids {
		ps.tokens[e]++ // es's entries count; the others are not read
	}
	slices.SortStableFunc(es, func(p, q int) int { return cmp.Compare(ps.tokens[q], ps.tokens[p]) })
	return es[:n]
}

// stageBatch enqueues on the copy stream the copies of layer L's experts
// es into the slots (after the last staged launch has read them), keeps
// their weights there in w for the grouped launches over them, and has s
// wait for the copies; it returns the bytes copied. The caller records
// done on s after its launches over them.
func (ps *pickStream) stageBatch(c *cudadrv.Ctx, s cudadrv.Stream, L *model.Layer, es []int) (int64, error) {
	if err := ps.startCopies(c); err != nil {
		return 0, err
	}
	bytes, err := ps.putExperts(c, L, es, 0, func(e int, w expertW) { ps.w[e] = w })
	if err != nil {
		return 0, err
	}
	if err := c.Record(ps.end, ps.copy); err != nil {
		return 0, err
	}
	ps.timedBytes = bytes
	if err := c.Record(ps.loaded, ps.copy); err != nil {
		return 0, err
	}
	return bytes, c.WaitEvent(s, ps.loaded)
}

// putExperts enqueues on the copy stream the copies of layer L's experts
// es into the slots from first on, one each, calls put with each one's
// weights there, and returns the bytes copied.
func (ps *pickStream) putExperts(c *cudadrv.Ctx, L *model.Layer, es []int, first int, put func(e int, w expertW)) (int64, error) {
	var bytes int64
	for i, e := range es {
		w, err := putExpert(c, ps.copy, ps.slots.Add(int64(first+i)*ps.slotBytes), ps.slotBytes, &L.Experts[e])
		if err != nil {
			return 0, fmt.Errorf("staging expert %d: %w", e, err)
		}
		put(e, w)
		bytes += expertSize(&L.Experts[e])
	}
	return bytes, nil
}

// startCopies begins a layer's copies on the copy stream: the last
// layer's timing folded into the fit where it has ended, the copy stream
// behind the last staged launch (the slots free), and the timing's start.
func (ps *pickStream) startCopies(c *cudadrv.Ctx) error {
	if err := ps.readCopyTime(c); err != nil {
		return err
	}
	if err := c.WaitEvent(ps.copy, ps.done); err != nil {
		return err
	}
	return c.Record(ps.start, ps.copy)
}

// readCopyTime folds the last timed copies into their fit once their end
// event has passed (it has by the next layer's routing).
func (ps *pickStream) readCopyTime(c *cudadrv.Ctx) error {
	if ps.timedBytes == 0 {
		return nil
	}
	d, done, err := elapsedOnce(c, ps.start, ps.end)
	if err != nil || !done {
		return err
	}
	ps.copies.add(ps.timedBytes, d)
	ps.timedBytes = 0
	return nil
}

// elapsedOnce is the time from a to b once b has passed (done false,
// and no error, before).
func elapsedOnce(c *cudadrv.Ctx, a, b cudadrv.Event) (d time.Duration, done bool, err error) {
	if done, err = c.EventDone(b); err != nil || !done {
		return 0, false, err
	}
	ms, err := c.Elapsed(a, b)
	if err != nil {
		return 0, false, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), true, nil
}

// beginSide starts timing a batch layer's GPU side: on s, idle since the
// routing came down, as the CPU starts on its share. The last layer's
// timing is read first (its events have passed: s was synchronised).
func (ps *pickStream) beginSide(c *cudadrv.Ctx, s cudadrv.Stream) error {
	if err := ps.readSide(c); err != nil {
		return err
	}
	ps.sideBytes = 0
	if err := c.Record(ps.sideStart, s); err != nil {
		return err
	}
	ps.sideOn = true
	return nil
}

// endSide ends it on s behind the GPU's share, whose staged bytes were
// bytes; sideCPU is set once the CPU's share returns. Without a
// beginSide before it (a layer the GPU ran alone) it does nothing.
func (ps *pickStream) endSide(c *cudadrv.Ctx, s cudadrv.Stream, bytes int64) error {
	if !ps.sideOn {
		return nil
	}
	ps.sideOn = false
	if err := c.Record(ps.sideEnd, s); err != nil {
		return err
	}
	ps.sideBytes, ps.sideCPU = bytes, 0
	return nil
}

// readSide folds the last timed GPU side into the counts once its end
// has passed and its CPU time is known.
func (ps *pickStream) readSide(c *cudadrv.Ctx) error {
	if ps.sideBytes == 0 || ps.sideCPU == 0 {
		return nil
	}
	side, done, err := elapsedOnce(c, ps.sideStart, ps.sideEnd)
	if err != nil || !done {
		return err
	}
	ps.side.add(ps.sideBytes, side)
	ps.sideLayers++
	if tail := side - ps.sideCPU; tail > 0 {
		ps.sideLate++
		ps.sideTail += tail
	}
	ps.sideBytes = 0
	return nil
}

// stage enqueues the copies of the layer L's experts es into the slots on the
// copy stream (after the last staged launch has read them), and of a
// pick split by width its part (part, partTableFor) into the slot after
// theirs, their tables after them, and on s the picked launches over
// them behind the copies, writing the staged picks' rows and maps
// (actPtrs, partPtrs). It returns the bytes copied.
func (ps *pickStream) stage(c *cudadrv.Ctx, k *kernels.Kernels, s cudadrv.Stream, cfg *model.Config, L *model.Layer, n kernels.MoEPicks, xn cudadrv.DevPtr, es []int, part model.ExpertSplit) (int64, error) {
	if err := ps.startCopies(c); err != nil {
		return 0, err
	}
	tab, err := ps.clearTable()
	if err != nil {
		return 0, err
	}
	bytes, err := ps.putExperts(c, L, es, 0, func(e int, w expertW) {
		tab[e*3], tab[e*3+1], tab[e*3+2] = uint64(w.gate.Ptr), uint64(w.up.Ptr), uint64(w.down.Ptr)
		ps.set = append(ps.set, e)
	})
	if err != nil {
		return 0, err
	}
	// The experts staged ahead for this layer that it picked are in their
	// set's slots, copied already.
	whole := len(es) > 0
	if a := ps.ahead; a != nil && a.usedSet >= 0 {
		for _, e := range a.used {
			w := a.weights(e)
			tab[e*3], tab[e*3+1], tab[e*3+2] = uint64(w.gate.Ptr), uint64(w.up.Ptr), uint64(w.down.Ptr)
			ps.set = append(ps.set, e)
		}
		whole = true
	}
	// A split pick's part goes to the slot after the whole picks' (a
	// layer's CPU picks, whole or split, are at most K).
	var view kernels.MoEPicked
	if part.Cols != 0 {
		var pb int64
		if view, pb, err = ps.partTableFor(c, cfg, L, part, ps.slots.Add(int64(len(es))*ps.slotBytes)); err != nil {
			return 0, err
		}
		bytes += pb
	}
	if err := c.Record(ps.end, ps.copy); err != nil {
		return 0, err
	}
	ps.timedBytes = bytes
	if whole {
		if err := c.CopyHtoD(ps.table, ps.tableHost.Bytes(), ps.copy); err != nil {
			return 0, err
		}
	}
	if part.Cols != 0 {
		if err := c.CopyHtoD(ps.partTable, ps.partTableHost.Bytes(), ps.copy); err != nil {
			return 0, err
		}
	}
	if err := c.Record(ps.loaded, ps.copy); err != nil {
		return 0, err
	}
	if err := c.WaitEvent(s, ps.loaded); err != nil {
		return 0, err
	}
	if err := ps.launchShare(c, k, s, cfg, L, n, xn, whole, part, view, "staged"); err != nil {
		return 0, err
	}
	if a := ps.ahead; a != nil && a.usedSet >= 0 {
		if err := c.Record(a.read[a.usedSet], s); err != nil {
			return 0, err
		}
	}
	return bytes, c.Record(ps.done, s)
}

// launchShare enqueues on s the picked launches over the GPU's share of
// a layer's picks, as stage laid it out: over the staged
// table where whole picks are in it, over a split pick's part (view, its
// own table) where there is one; how names the share's way in errors.
func (ps *pickStream) launchShare(c *cudadrv.Ctx, k *kernels.Kernels, s cudadrv.Stream, cfg *model.Config, L *model.Layer, n kernels.MoEPicks, xn cudadrv.DevPtr, whole bool, part model.ExpertSplit, view kernels.MoEPicked, how string) error {
	if whole {
		g, out, where := ps.actPtrs(cfg)
		if err := launchPicked(c, k, s, stagedPicked(L, ps.table, cfg.Experts), n, xn, g, out, where, "experts "+how); err != nil {
			return err
		}
	}
	if part.Cols != 0 {
		g, out, where := ps.partPtrs(cfg)
		return launchPicked(c, k, s, view, n, xn, g, out, where, fmt.Sprintf("expert %d's last columns %s", part.Expert, how))
	}
	return nil
}

// clearTable clears the staged table's entries of the last layer in its
// pinned source and returns the source's entries.
func (ps *pickStream) clearTable() ([]uint64, error) {
	tab, err := cudadrv.Values[uint64](ps.tableHost.Bytes())
	if err != nil {
		return nil, err
	}
	for _, e := range ps.set {
		tab[e*3], tab[e*3+1], tab[e*3+2] = 0, 0, 0
	}
	ps.set = ps.set[:0]
	return tab, nil
}

// launchPicked enqueues on s the picked kernels over p (gate and up with
// the activation into g, then the downs into out; where the map of the
// picks p holds) for the picks n of the tokens' normed states xn; what
// names them in errors.
func launchPicked(c *cudadrv.Ctx, k *kernels.Kernels, s cudadrv.Stream, p kernels.MoEPicked, n kernels.MoEPicks, xn, g, out, where cudadrv.DevPtr, what string) error {
	if err := k.MoEPickedGLU(c, s, p, n, xn, g, where, kernels.SwiGLU); err != nil {
		return fmt.Errorf("%s, gate and up: %w", what, err)
	}
	if err := k.MoEPickedDown(c, s, p, n, g, out); err != nil {
		return fmt.Errorf("%s, downs: %w", what, err)
	}
	return nil
}

// partTableFor writes into partTableHost the layer L's expert part.Expert's
// entry at the GPU's part of it, the columns from part.Cols on (gate and
// up's rows from there, the down's columns from there), clearing the last
// call's, and returns the picked kernels' shape of that part and its
// bytes. The part is copied on the copy stream into slot, packed (the
// down's columns by one 2D copy), and the entry is the slot's.
func (ps *pickStream) partTableFor(c *cudadrv.Ctx, cfg *model.Config, L *model.Layer, part model.ExpertSplit, slot cudadrv.DevPtr) (kernels.MoEPicked, int64, error) {
	tab, err := cudadrv.Values[uint64](ps.partTableHost.Bytes())
	if err != nil {
		return kernels.MoEPicked{}, 0, err
	}
	if ps.partSet >= 0 {
		tab[ps.partSet*3], tab[ps.partSet*3+1], tab[ps.partSet*3+2] = 0, 0, 0
		ps.partSet = -1
	}
	e, from := part.Expert, part.Cols
	p := stagedPicked(L, ps.partTable, cfg.Experts)
	F := p.Gate.Rows
	if from <= 0 || from >= F || from%splitCols != 0 {
		return kernels.MoEPicked{}, 0, fmt.Errorf("expert %d split at column %d of %d", e, from, F)
	}
	gRB, uRB, dRB := p.Gate.RowBytes(), p.Up.RowBytes(), p.Down.RowBytes()
	skip, err := p.Down.Type.RowBytes(int64(from))
	if err != nil {
		return kernels.MoEPicked{}, 0, fmt.Errorf("expert %d split at column %d: %w", e, from, err)
	}
	n, D := F-from, p.Down.Rows
	p.Gate.Rows, p.Up.Rows, p.Down.Cols = n, n, n
	vb := p.Down.RowBytes() // the part's bytes of a down row
	x := &L.Experts[e]
	gp := slot
	up := gp.Add(alignUp(int64(n) * gRB))
	dp := up.Add(alignUp(int64(n) * uRB))
	if err := c.CopyHtoD(gp, x.Gate.Data[int64(from)*gRB:], ps.copy); err != nil {
		return kernels.MoEPicked{}, 0, fmt.Errorf("staging expert %d's last rows: %w", e, err)
	}
	if err := c.CopyHtoD(up, x.Up.Data[int64(from)*uRB:], ps.copy); err != nil {
		return kernels.MoEPicked{}, 0, fmt.Errorf("staging expert %d's last rows: %w", e, err)
	}
	view := x.Down.Data[skip : int64(D-1)*dRB+skip+vb]
	if err := c.CopyHtoD2D(dp, vb, view, dRB, vb, int64(D), ps.copy); err != nil {
		return kernels.MoEPicked{}, 0, fmt.Errorf("staging expert %d's last columns: %w", e, err)
	}
	tab[e*3], tab[e*3+1], tab[e*3+2] = uint64(gp), uint64(up), uint64(dp)
	ps.partSet = e
	return p, int64(n)*(gRB+uRB) + int64(D)*vb, nil
}

// release frees the staging (the pages it copies from are x.pinHost's).
func (ps *pickStream) release(c *cudadrv.Ctx) error {
	if ps == nil {
		return nil
	}
	var err error
	if ps.copy != 0 {
		err = errors.Join(err, c.StreamSync(ps.copy))
	}
	err = errors.Join(err, ps.ahead.release(c), c.Free(ps.slots), c.Free(ps.table), c.Free(ps.acts), c.FreeHost(ps.tableHost),
		c.Free(ps.partTable), c.Free(ps.partActs), c.FreeHost(ps.partTableHost))
	for _, e := range []cudadrv.Event{ps.loaded, ps.done, ps.start, ps.end, ps.sideStart, ps.sideEnd} {
		if e != 0 {
			err = errors.Join(err, c.DestroyEvent(e))
		}
	}
	if ps.copy != 0 {
		err = errors.Join(err, c.DestroyStream(ps.copy))
	}
	*ps = pickStream{}
	return err
}
