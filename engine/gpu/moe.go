package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// gpuMoE runs a mixture-of-experts model's FFN blocks beside the GPU's
// attention. The router runs on the device (its matrix in a resident f32
// table of its own, kernels.MoELogits and MoETopK), and only each token's
// picks, T·k ids and weights, cross to the host. The experts the caller
// placed in device memory (Options.ResidentExperts) are computed there by
// the ordinary GEMV/GEMM launches on per-expert matrices; the picked
// experts held elsewhere (host memory, or served by an ExpertSource) are
// computed by the CPU (engine/model's FFNDevice, FFNRouted) at the same
// time, from the hidden state copied down with the routing, and their sum
// comes back up to be added with the GPU's. A layer whose experts are all
// resident copies no hidden state; any layer still waits for its routing
// on the host, which picks the products to launch. Every hand-over is a
// kernel on mapped pinned memory (kernels.Copy, and MoECombine reading
// the CPU's rows in place), as the hybrid placement's: a copy on the copy
// engine could wait behind streamed layers' bulk copies.
type gpuMoE struct {
	dev    *model.FFNDevice
	layers []*model.Layer     // host weights per layer (the caller's)
	src    model.ExpertSource // the experts the layers lack; nil when they hold them
	// routers are each layer's router as E rows of Dim float32 (its own
	// allocation, in device bytes); skew, when not 0, the router skew
	// table, E floats a layer.
	routers     cudadrv.DevPtr
	skew        cudadrv.DevPtr
	experts     cudadrv.DevPtr    // resident experts' weights
	expertBytes int64             // routers' and resident experts' device bytes
	resident    []map[int]expertW // per layer, by expert
	// Per-pass buffers, grown on demand: routing (capT tokens) and the
	// resident experts' activations (capP picks).
	capT, capP int
	route      cudadrv.DevPtr   // logits, ids and weights, where map and gathered token ids
	acts       cudadrv.DevPtr   // gathered x, gate, up, out
	host       *cudadrv.HostMem // ids and weights, where map and gathered token ids, hidden-state rows; mapped
	hostDev    cudadrv.DevPtr   // host's device address
	counts     [][]uint64       // routes per layer and expert (ExpertCounts)
	stats      MoEStats
	// Scratch of the host side of a layer.
	pairs []moePair
	keep  func(e int) bool
	curL  int
	// hrows is runOnCPU's rows of the host's hidden state.
	hrows [][]float32
	// beside is runOnCPU's host work of the layer, which timedBeside (made
	// once, so a layer allocates no closure) runs and adds to stats.Beside.
	beside, timedBeside func()
	// choice decides per batch size whether the GPU computes the resident
	// experts' picks (moechoice.go); cpuOnly is this pass's way: every
	// pick on the CPU.
	choice  expertChoice
	cpuOnly bool
	downs   []kernels.GEMVOut // moeResident's downs at one token
	// At one token the resident picks are found on the device: tables
	// holds, per layer, three pointers an expert (gate, up, down; 0 for
	// one not resident), which picked[l] describes for the kernels
	// (kernels.MoEPicked), full[l] says every expert of layer l is
	// resident. Such a layer runs without the host: its ids go to ring
	// (mapped, k a layer) and pending lists the layers whose ids there
	// are not yet counted. routed marks a pass's routing and hidden state
	// on the host, so the CPU starts while the GPU computes its picks.
	tables  cudadrv.DevPtr
	picked  []kernels.MoEPicked
	full    []bool
	ring    *cudadrv.HostMem
	ringDev cudadrv.DevPtr
	ringK   int // ids a layer in ring: the config's ExpertsUsed
	pending []int
	routed  cudadrv.Event
	// tallyErr is a bad routing tally found outside a pass (ExpertCounts),
	// which the next layer returns.
	tallyErr error
	// hop is MoEHop's figure, once hopDone.
	hop     int64
	hopDone bool
	// ps, when not nil, sends a share of a CPU layer's picks at one token
	// over PCIe to the GPU (moestream.go); pstats counts them, cpuPicks
	// is the host side's scratch.
	ps       *pickStream
	pstats   PickStats
	cpuPicks []int
	// pin is the host experts' pages pinned and mapped, while the pick
	// stream or mapped experts use them; mapped, when not nil, is every
	// expert's host copy's device addresses (per layer and expert: gate,
	// up, down), which the tables give the experts the device does not
	// hold (SetMappedExperts, moemapped.go).
	pin *hostExperts
	// mapWay is SetMappedExperts's; mapAddrs, while it is not
	// MappedOff, the host experts' device addresses; mapped, when not
	// nil (mapAddrs), the tables give them to the experts the device does
	// not hold: the passes at one token pull them.
	mapWay   MappedWay
	mapAddrs [][][3]uint64
	mapped   [][][3]uint64
	// stage is where a token's mapped picks are copied before the picked
	// kernels run them; not nil while mapped is.
	stage *mappedStaging
}

// expertW is one resident expert's matrices in device memory, laid out
// from gate.Ptr in a place of size bytes (at least theirs: a swap puts an
// expert in a larger one's place).
type expertW struct {
	gate, up, down kernels.Matrix
	size           int64
}

// moePair is one token's pick of a resident expert.
type moePair struct{ t, j, e int }

// MoEStats counts the work of a mixture-of-experts model's FFN blocks on
// the GPU and the CPU.
type MoEStats struct {
	// Layers is the FFN blocks the CPU had work in; Busy its time in them;
	// Hop the time spent handing over (waiting for the GPU to reach the
	// layer's routing, and the hidden state's copies where the CPU has
	// work).
	Layers int64         `json:"layers"`
	Busy   time.Duration `json:"busy_ns"`
	Hop    time.Duration `json:"hop_ns"`
	// Beside is the part of Busy the host's thread spent issuing the
	// GPU's share of those layers (its launches, the pick stream's
	// copies) while the CPU's threads computed theirs: where it nears
	// Busy, the host's launches, not the CPU's reads, set the pass.
	Beside time.Duration `json:"beside_ns"`
	// GPULayers is the FFN blocks computed on the GPU alone: their picked
	// experts all resident, or the others all copied to it
	// (SetStreamPicks).
	GPULayers int64 `json:"gpu_layers"`
	// GPUExperts and CPUExperts count the (token, expert) picks computed
	// on each side.
	GPUExperts int64 `json:"gpu_experts"`
	CPUExperts int64 `json:"cpu_experts"`
	// CPUBytes is the expert weight bytes the CPU read for its picks:
	// each expert once a block, however many tokens picked it
	// (model.FFNDevice.ExpertBytes).
	CPUBytes int64 `json:"cpu_bytes"`
	// DeviceFound is the FFN blocks at one token whose resident picks the
	// device found itself (kernels.MoEPicked: no launch per pick, no host
	// for a layer whose experts are all resident); HostFree those of them
	// that ran without the host.
	DeviceFound int64 `json:"device_found"`
	HostFree    int64 `json:"host_free"`
	// BatchPicked is the FFN blocks of passes of more than one token whose
	// GPU share the picked kernels computed (moeBatchPicked), where the
	// grouped products would have launched a few an expert.
	BatchPicked int64 `json:"batch_picked"`
	// ResidentExperts is the experts held in device memory, ResidentBytes
	// their bytes (the routers' excluded).
	ResidentExperts int   `json:"resident_experts"`
	ResidentBytes   int64 `json:"resident_bytes"`
	// Choices are the batch sizes whose way is decided: the GPU computing
	// the resident experts' picks, or the CPU computing every pick
	// (moechoice.go).
	Choices []ExpertChoice `json:"choices,omitempty"`
	// Streamed is the CPU layers' picks copied to the GPU and computed
	// there (SetStreamPicks); they count among GPUExperts.
	Streamed PickStats `json:"streamed"`
	// Mapped is the picks the GPU pulled from host memory
	// (SetMappedExperts); they count among GPUExperts.
	Mapped MappedPicks `json:"mapped"`
}

// residentSet validates Options.ResidentExperts against cfg and returns
// it as one sorted, duplicate-free list per layer.
func residentSet(cfg *model.Config, rs [][]int) ([][]int, error) {
	if len(rs) == 0 {
		return make([][]int, cfg.Layers), nil
	}
	if !cfg.MoE() {
		return nil, errors.New("resident experts for a model without experts")
	}
	if len(rs) > cfg.Layers {
		return nil, fmt.Errorf("resident experts for %d layers, the model has %d", len(rs), cfg.Layers)
	}
	out := make([][]int, cfg.Layers)
	any := false
	for l, es := range rs {
		s := slices.Clone(es)
		slices.Sort(s)
		for i, e := range s {
			if e < 0 || e >= cfg.Experts {
				return nil, fmt.Errorf("layer %d: resident expert %d outside [0, %d)", l, e, cfg.Experts)
			}
			if i > 0 && s[i-1] == e {
				return nil, fmt.Errorf("layer %d: resident expert %d listed twice", l, e)
			}
		}
		out[l] = s
		any = any || len(s) > 0
	}
	if any && cfg.ExpertFFN%WidthGranule != 0 {
		return nil, fmt.Errorf("expert FFN width %d is not a multiple of %d, which the kernels need for resident experts", cfg.ExpertFFN, WidthGranule)
	}
	return out, nil
}

// expertSize is the device bytes of one expert's three matrices.
func expertSize(x *model.Expert) int64 {
	return alignUp(int64(len(x.Gate.Data))) + alignUp(int64(len(x.Up.Data))) + alignUp(int64(len(x.Down.Data)))
}

// routerBytes is the device bytes of every layer's router as f32.
func routerBytes(cfg *model.Config) int64 {
	return alignUp(int64(cfg.Layers) * int64(cfg.Experts) * int64(cfg.Dim) * 4)
}

// layerExpert returns layer l's expert e: the layer's own (L), or src's.
func layerExpert(ctx context.Context, L *model.Layer, src model.ExpertSource, l, e int) (*model.Expert, error) {
	if len(L.Experts) > e {
		return &L.Experts[e], nil
	}
	if src == nil {
		return nil, fmt.Errorf("layer %d holds no experts and there is no expert source", l)
	}
	dst := []*model.Expert{nil}
	if err := src.Experts(ctx, l, []int{e}, dst); err != nil {
		return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
	}
	if dst[0] == nil {
		return nil, fmt.Errorf("layer %d: the expert source returned no expert %d", l, e)
	}
	return dst[0], nil
}

// moeDeviceBytes is what setupMoE will allocate in device memory for the
// resident set rs: the routers and the resident experts (Load's budget
// check counts them with the weights). A layer's experts all have one
// size (slabs of the same merged tensors), so one expert a layer is asked
// for: an expert source may read it from storage.
func moeDeviceBytes(ctx context.Context, cfg *model.Config, w *model.Weights, src model.ExpertSource, rs [][]int) (int64, error) {
	n := routerBytes(cfg)
	for l, es := range rs {
		if len(es) == 0 {
			continue
		}
		x, err := layerExpert(ctx, &w.Layers[l], src, l, es[0])
		if err != nil {
			return 0, err
		}
		n += int64(len(es)) * expertSize(x)
	}
	return n, nil
}

// pairWeights is layer l's expert e on the device for the grouped
// launches: in a staging slot where the pick stream staged it for this
// layer (stageBatch), else resident.
func (x *gpuMoE) pairWeights(l, e int) expertW {
	if x.ps != nil && x.ps.staged[e] {
		return x.ps.w[e]
	}
	return x.resident[l][e]
}

// offDevice sets cpuPicks to the distinct experts of ids that res does
// not hold, in the order of their first pick (a token's picks are
// distinct, so at one token they are its off-device picks in order).
func (x *gpuMoE) offDevice(ids []int32, res map[int]expertW) {
	x.cpuPicks = x.cpuPicks[:0]
	for _, e := range ids {
		if _, ok := res[int(e)]; !ok && !slices.Contains(x.cpuPicks, int(e)) {
			x.cpuPicks = append(x.cpuPicks, int(e))
		}
	}
}

// onCPU says whether the CPU computes layer l's expert e's picks: it is
// not resident on the GPU, or the CPU takes every pick (cpuOnly).
func (x *gpuMoE) onCPU(l, e int) bool {
	if x.cpuOnly {
		return true
	}
	_, ok := x.resident[l][e]
	return !ok
}

// setupMoE uploads the routers and the resident experts rs (bytes in
// all, moeDeviceBytes) and prepares the CPU's FFN device for the others
// (w's layers hold the routers and, unless src serves them, the experts).
func (m *Model) setupMoE(ctx context.Context, c *cudadrv.Ctx, w *model.Weights, src model.ExpertSource, rs [][]int, bytes int64) error {
	cfg := &m.Config
	dev, err := model.NewFFNDevice(*cfg, gemv.Detect())
	if err != nil {
		return fmt.Errorf("mixture of experts on the CPU: %w", err)
	}
	if src != nil {
		dev.SetExpertSource(src)
	}
	x := &gpuMoE{dev: dev, src: src, resident: make([]map[int]expertW, cfg.Layers), counts: make([][]uint64, cfg.Layers)}
	m.moe = x
	if src != nil {
		// A store that reads experts from storage reads the next layer's
		// predicted ones ahead (model.ExpertPrefetcher), those the CPU
		// will compute.
		dev.ReadAhead(x.onCPU)
	}
	for i := range w.Layers {
		x.counts[i] = make([]uint64, cfg.Experts)
	}
	for i := range w.Layers {
		x.layers = append(x.layers, &w.Layers[i])
	}
	// Routers, as f32 whatever their type: routing is discrete, and the
	// table is small (E·Dim floats a layer).
	rb := routerBytes(cfg)
	if x.routers, err = c.Alloc(rb); err != nil {
		return fmt.Errorf("routers (%d bytes): %w", rb, err)
	}
	row := make([]float32, cfg.Experts*cfg.Dim)
	for l := range w.Layers {
		r := &w.Layers[l].Router
		if err := quant.DequantizeRows(r.Type, r.Data, cfg.Dim, row); err != nil {
			return fmt.Errorf("layer %d router: %w", l, err)
		}
		if err := cudadrv.Upload(c, x.routers.Add(int64(l)*int64(len(row))*4), row, m.stream); err != nil {
			return fmt.Errorf("uploading layer %d's router: %w", l, err)
		}
	}
	x.expertBytes = rb
	x.ringK = cfg.ExpertsUsed
	if x.ring, err = c.HostAlloc(cfg.Layers*cfg.ExpertsUsed*4, cudadrv.HostAllocDeviceMap); err != nil {
		return fmt.Errorf("routing ring: %w", err)
	}
	if x.ringDev, err = c.HostDevicePointer(x.ring); err != nil {
		return fmt.Errorf("routing ring: %w", err)
	}
	if x.routed, err = c.NewEvent(cudadrv.EventDisableTiming); err != nil {
		return fmt.Errorf("routing event: %w", err)
	}
	return x.uploadExperts(ctx, c, m.stream, rs, bytes-rb)
}

// uploadExperts makes rs (per layer, sorted) the resident experts, total
// bytes in all, replacing any earlier set.
func (x *gpuMoE) uploadExperts(ctx context.Context, c *cudadrv.Ctx, s cudadrv.Stream, rs [][]int, total int64) error {
	if err := c.StreamSync(s); err != nil {
		return err
	}
	if err := x.tally(); err != nil {
		return err
	}
	err := errors.Join(c.Free(x.experts), c.Free(x.tables))
	if x.tables != 0 {
		x.expertBytes -= tableBytes(len(x.resident), len(x.counts[0]))
	}
	x.expertBytes -= x.stats.ResidentBytes
	x.experts, x.tables, x.stats.ResidentBytes, x.stats.ResidentExperts = 0, 0, 0, 0
	for l := range x.resident {
		x.resident[l] = nil
	}
	x.picked, x.full = nil, nil
	x.choice.reset()
	if err != nil {
		return err
	}
	if total == 0 {
		// The tables still give every layer's shapes, for the staged
		// picks (SetStreamPicks).
		return x.uploadTables(c, s)
	}
	if x.experts, err = c.Alloc(total); err != nil {
		return fmt.Errorf("resident experts (%d bytes): %w", total, err)
	}
	x.expertBytes += total
	x.stats.ResidentBytes = total
	off := int64(0)
	for l, es := range rs {
		x.resident[l] = map[int]expertW{}
		for _, e := range es {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("uploading layer %d's experts: %w", l, err)
			}
			ex, err := layerExpert(ctx, x.layers[l], x.src, l, e)
			if err != nil {
				return err
			}
			if off+expertSize(ex) > total {
				return fmt.Errorf("layer %d expert %d: %d bytes, larger than the layer's first", l, e, expertSize(ex))
			}
			d, err := putExpert(c, s, x.experts.Add(off), expertSize(ex), ex)
			if err != nil {
				return err
			}
			off += d.size
			// An expert source's weights stay valid only until its next
			// call: each expert's copies finish before the next is asked.
			if err := c.StreamSync(s); err != nil {
				return err
			}
			x.resident[l][e] = d
			x.stats.ResidentExperts++
		}
	}
	return x.uploadTables(c, s)
}

// putExpert enqueues on s the copies of ex's matrices into device memory
// from at, one after another, each aligned (expertSize), in a place of
// size bytes, and returns them.
func putExpert(c *cudadrv.Ctx, s cudadrv.Stream, at cudadrv.DevPtr, size int64, ex *model.Expert) (expertW, error) {
	d := expertW{size: size}
	off := int64(0)
	for _, m := range []struct {
		dst *kernels.Matrix
		t   *model.Tensor
	}{{&d.gate, &ex.Gate}, {&d.up, &ex.Up}, {&d.down, &ex.Down}} {
		p := at.Add(off)
		off += alignUp(int64(len(m.t.Data)))
		if err := c.CopyHtoD(p, m.t.Data, s); err != nil {
			return expertW{}, fmt.Errorf("uploading %s: %w", m.t.Name, err)
		}
		*m.dst = matrix(m.t, p)
	}
	return d, nil
}

// uploadTables allocates the picked expert kernels' tables
// (kernels.MoEPicked) and writes them (writeTables).
func (x *gpuMoE) uploadTables(c *cudadrv.Ctx, s cudadrv.Stream) error {
	L, E := len(x.resident), len(x.counts[0])
	var err error
	if x.tables, err = c.Alloc(tableBytes(L, E)); err != nil {
		return fmt.Errorf("resident expert tables: %w", err)
	}
	x.expertBytes += tableBytes(L, E)
	return x.writeTables(c, s)
}

// writeTables writes each layer's table for the picked expert kernels:
// three device pointers an expert (entry), and says which layers run
// without the host (full).
func (x *gpuMoE) writeTables(c *cudadrv.Ctx, s cudadrv.Stream) error {
	L, E := len(x.resident), len(x.counts[0])
	x.picked, x.full = make([]kernels.MoEPicked, L), make([]bool, L)
	flat := make([]uint64, L*E*3)
	for l, res := range x.resident {
		p := &x.picked[l]
		p.Table, p.Experts = x.tables.Add(int64(l*E*3)*8), E
		for e := range E {
			ent := x.entry(l, e)
			copy(flat[(l*E+e)*3:], ent[:])
		}
		for _, w := range res {
			p.Gate, p.Up, p.Down = w.gate, w.up, w.down
		}
		if len(res) == 0 && len(x.layers[l].Experts) == E {
			// The shapes alone, for the staged picks (SetStreamPicks)
			// and the mapped ones: a layer's experts share them.
			sp := stagedPicked(x.layers[l], 0, E)
			p.Gate, p.Up, p.Down = sp.Gate, sp.Up, sp.Down
		}
		x.full[l] = x.layerFull(l)
	}
	if err := cudadrv.Upload(c, x.tables, flat, s); err != nil {
		return fmt.Errorf("resident expert tables: %w", err)
	}
	return c.StreamSync(s)
}

// entry is layer l's expert e's entry of the tables: its resident
// matrices, its host copy's mapped addresses (SetMappedExperts: staged
// before the kernels read them), or zeros (the kernels leave the pick to
// others).
func (x *gpuMoE) entry(l, e int) [3]uint64 {
	if w, ok := x.resident[l][e]; ok {
		return [3]uint64{uint64(w.gate.Ptr), uint64(w.up.Ptr), uint64(w.down.Ptr)}
	}
	if x.mapped != nil {
		return x.mapped[l][e]
	}
	return [3]uint64{}
}

// layerFull says whether the kernels find every expert of layer l, so
// that it runs without the host at one token: all resident, or the rest
// mapped.
func (x *gpuMoE) layerFull(l int) bool {
	return x.mapped != nil || len(x.resident[l]) == len(x.counts[l])
}

// MoEHop is what a layer costs the CPU beyond its picks' bytes, in the
// bytes the CPU reads in that time (tier.DeviceCost's Hop): measured once
// on the CPU's FFN device, as a routed call of one pick against one of
// every pick (each call another layer's experts, so that the caches hold
// none: a layer of 8 experts, Mixtral's, fits the host's L3 in part), and
// the hand-over time a CPU layer took so far added. 0 for a model whose
// layers do not hold their experts (an expert source's reads would be
// timed), or where the measurement finds no fixed cost.
func (m *Model) MoEHop(ctx context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.moe
	if x == nil {
		return 0, errors.New("moe hop: not a mixture-of-experts model")
	}
	if x.hopDone {
		return x.hop, nil
	}
	cfg := &m.Config
	K, E := cfg.ExpertsUsed, cfg.Experts
	w := x.layers[0]
	if x.src != nil || len(w.Experts) != E || K < 2 {
		x.hopDone = true
		return 0, nil
	}
	row := make([]float32, cfg.Dim)
	for i := range row {
		row[i] = 1
	}
	// Reps of each way, alternating, the fastest kept: an idle machine's
	// figure, as the placement's other figures are.
	const reps = 6
	var one, all time.Duration
	var oneBytes, allBytes int64
	next := 0
	pick := func(n int) model.Routing {
		r := model.Routing{IDs: make([]int32, K), Weights: make([]float32, K)}
		for j := range K {
			r.IDs[j], r.Weights[j] = int32((next+j)%E), 1/float32(K)
		}
		next += n
		return r
	}
	for i := range 2 * reps {
		n := K
		if i%2 == 0 {
			n = 1
		}
		l := i % len(x.layers)
		w := x.layers[l]
		if len(w.Experts) != E {
			return 0, fmt.Errorf("moe hop: layer %d holds %d of %d experts", l, len(w.Experts), E)
		}
		r := pick(n)
		var keep func(int) bool
		if n == 1 {
			first := int(r.IDs[0])
			keep = func(e int) bool { return e == first }
		}
		var bytes int64
		for _, e := range r.IDs[:n] {
			bytes += expertSize(&w.Experts[e])
		}
		t0 := time.Now()
		if err := x.dev.RunRouted(ctx, l, w, [][]float32{slices.Clone(row)}, r, keep); err != nil {
			return 0, fmt.Errorf("moe hop: %w", err)
		}
		d := time.Since(t0)
		if n == 1 && (one == 0 || d < one) {
			one, oneBytes = d, bytes
		}
		if n == K && (all == 0 || d < all) {
			all, allBytes = d, bytes
		}
	}
	x.hopDone = true
	if all <= one || allBytes <= oneBytes {
		return 0, nil
	}
	rate := float64(allBytes-oneBytes) / (all - one).Seconds()
	fixed := one.Seconds() - float64(oneBytes)/rate
	if x.stats.Layers > 0 {
		fixed += (x.stats.Hop / time.Duration(x.stats.Layers)).Seconds()
	}
	if fixed > 0 {
		x.hop = int64(fixed * rate)
	}
	return x.hop, nil
}

// tableBytes is the device bytes of the resident expert tables of L
// layers of E experts: three pointers an expert.
func tableBytes(L, E int) int64 { return int64(L) * int64(E) * 3 * 8 }

// tally counts the routes of the layers that ran without the host
// (pending), whose ids the device left in ring: the caller has made sure
// those passes are done.
func (x *gpuMoE) tally() error {
	if len(x.pending) == 0 {
		return nil
	}
	k := x.ringK
	ids, err := cudadrv.Values[int32](x.ring.Bytes()[:len(x.counts)*k*4])
	if err != nil {
		return err
	}
	for _, l := range x.pending {
		for j, e := range ids[l*k : (l+1)*k] {
			if e < 0 || int(e) >= len(x.counts[l]) {
				x.pending = x.pending[:0]
				return fmt.Errorf("the device routing gave layer %d's pick %d expert %d of %d", l, j, e, len(x.counts[l]))
			}
			x.counts[l][e]++
			if x.mapped == nil {
				continue
			}
			if _, ok := x.resident[l][int(e)]; !ok {
				// The tables are the pass's: callers that change them
				// tally first.
				x.stats.Mapped.Picks++
				x.stats.Mapped.Bytes += expertSize(&x.layers[l].Experts[e])
			}
		}
	}
	x.pending = x.pending[:0]
	return nil
}

// SetResidentExperts replaces the experts held in device memory by rs
// (per layer, as Options.ResidentExperts), between passes: the engine
// places them by the routing it measured once the model is loaded. The
// budget is the caller's; device memory that runs out fails the call and
// leaves no expert resident (the CPU computes them all).
func (m *Model) SetResidentExperts(ctx context.Context, rs [][]int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return errors.New("resident experts: not a mixture-of-experts model")
	}
	set, err := residentSet(&m.Config, rs)
	if err != nil {
		return err
	}
	x := m.moe
	var total int64
	for l, es := range set {
		if len(es) == 0 {
			continue
		}
		ex, err := layerExpert(ctx, x.layers[l], x.src, l, es[0])
		if err != nil {
			return err
		}
		total += int64(len(es)) * expertSize(ex)
	}
	err = m.dev.Do(func(c *cudadrv.Ctx) error { return x.uploadExperts(ctx, c, m.stream, set, total) })
	if err != nil {
		return fmt.Errorf("resident experts: %w", err)
	}
	return nil
}

// alloc grows a pass's buffers: routing for T tokens, activations for P
// resident picks.
func (x *gpuMoE) alloc(c *cudadrv.Ctx, cfg *model.Config, T, P int) error {
	k, d, f := int64(cfg.ExpertsUsed), int64(cfg.Dim), int64(cfg.ExpertFFN)
	if T <= x.capT && P <= x.capP {
		return nil
	}
	// Earlier passes' kernels may still read the buffers being replaced.
	if err := c.Synchronize(); err != nil {
		return err
	}
	if T > x.capT {
		n := max(T, 2*x.capT)
		t := int64(n)
		dev, err := c.Alloc(routeBytes(cfg, n))
		if err != nil {
			return fmt.Errorf("routing buffers for %d tokens: %w", n, err)
		}
		host, err := c.HostAlloc(int(alignUp(2*t*k*4)+alignUp(2*t*k*4)+t*d*4), cudadrv.HostAllocDeviceMap)
		if err != nil {
			return fmt.Errorf("routing buffers for %d tokens: %w", n, errors.Join(err, c.Free(dev)))
		}
		hostDev, err := c.HostDevicePointer(host)
		if err != nil {
			return fmt.Errorf("routing buffers for %d tokens: %w", n, errors.Join(err, c.Free(dev), c.FreeHost(host)))
		}
		if err := errors.Join(c.Free(x.route), c.FreeHost(x.host)); err != nil {
			return err
		}
		x.route, x.host, x.hostDev, x.capT = dev, host, hostDev, n
	}
	if P > x.capP {
		n := max(P, 2*x.capP)
		p := int64(n)
		dev, err := c.Alloc(alignUp(p*d*4)*2 + alignUp(p*f*4)*2)
		if err != nil {
			return fmt.Errorf("expert activations for %d picks: %w", n, err)
		}
		if err := c.Free(x.acts); err != nil {
			return err
		}
		x.acts, x.capP = dev, n
	}
	return nil
}

// Buffer views for the current capacities: device routing buffers...
func (x *gpuMoE) logits(cfg *model.Config) cudadrv.DevPtr { return x.route }
func (x *gpuMoE) ids(cfg *model.Config) cudadrv.DevPtr {
	return x.route.Add(alignUp(int64(x.capT) * int64(cfg.Experts) * 4))
}

// weights are right after the T·k ids of a pass of T tokens.
func (x *gpuMoE) weights(cfg *model.Config, T int) cudadrv.DevPtr {
	return x.ids(cfg).Add(int64(T) * int64(cfg.ExpertsUsed) * 4)
}

// plan is the where map (T·k) followed by the gathered token ids.
func (x *gpuMoE) plan(cfg *model.Config) cudadrv.DevPtr {
	return x.ids(cfg).Add(alignUp(2 * int64(x.capT) * int64(cfg.ExpertsUsed) * 4))
}

// xq is where the picked kernels quantize a batch pass's inputs
// (kernels.MoEPickedScratch), after the plan.
func (x *gpuMoE) xq(cfg *model.Config) cudadrv.DevPtr {
	return x.plan(cfg).Add(alignUp(2 * int64(x.capT) * int64(cfg.ExpertsUsed) * 4))
}

// routeBytes is the device routing buffers of a pass of T tokens: the
// router's scores, the ids and weights, the plan, and the picked
// kernels' scratch, for the passes they take (no more picks than
// experts: moeBatchPicked).
func routeBytes(cfg *model.Config, T int) int64 {
	t, k, E := int64(T), int64(cfg.ExpertsUsed), int64(cfg.Experts)
	picked := min(T, pickedTokens(cfg))
	return alignUp(t*E*4) + 2*alignUp(2*t*k*4) + alignUp(kernels.MoEPickedScratch(cfg.Dim, cfg.ExpertFFN, picked, cfg.ExpertsUsed))
}

// ...the pinned host buffers: routing (ids then weights), plan, rows...
func (x *gpuMoE) hostRoute(cfg *model.Config, T int) []byte {
	return x.host.Bytes()[:2*T*cfg.ExpertsUsed*4]
}
func (x *gpuMoE) hostPlan(cfg *model.Config) []byte {
	o := int(alignUp(2 * int64(x.capT) * int64(cfg.ExpertsUsed) * 4))
	return x.host.Bytes()[o : o+2*x.capT*cfg.ExpertsUsed*4]
}
func (x *gpuMoE) hostRows(cfg *model.Config, T int) []byte {
	o := 2 * int(alignUp(2*int64(x.capT)*int64(cfg.ExpertsUsed)*4))
	return x.host.Bytes()[o : o+T*cfg.Dim*4]
}

// ...and the same three at their device addresses.
func (x *gpuMoE) hostRouteDev() cudadrv.DevPtr { return x.hostDev }
func (x *gpuMoE) hostPlanDev(cfg *model.Config) cudadrv.DevPtr {
	return x.hostDev.Add(alignUp(2 * int64(x.capT) * int64(cfg.ExpertsUsed) * 4))
}
func (x *gpuMoE) hostRowsDev(cfg *model.Config) cudadrv.DevPtr {
	return x.hostDev.Add(2 * alignUp(2*int64(x.capT)*int64(cfg.ExpertsUsed)*4))
}

// ...and the resident picks' activations.
func (x *gpuMoE) actPtrs(cfg *model.Config) (xg, g, u, out cudadrv.DevPtr) {
	d, f := alignUp(int64(x.capP)*int64(cfg.Dim)*4), alignUp(int64(x.capP)*int64(cfg.ExpertFFN)*4)
	return x.acts, x.acts.Add(d), x.acts.Add(d + f), x.acts.Add(d + 2*f)
}

// hostWork reports whether this pass may run work on the host's threads
// (engine/model's CPU pool, every core): the CPU's share of tier B, or
// experts the device does not hold (or none of them, a pass the expert
// trial gave the CPU alone). Its caller then waits for the pass asleep
// (cudadrv's DoSleeping): polling, it would hold a core and a Go
// processor those threads need, and with every core in the pool one of
// them would start each step late, when another yielded.
func (m *Model) hostWork() bool {
	if m.hy != nil {
		return true
	}
	x := m.moe
	if x == nil {
		return false
	}
	if x.cpuOnly {
		return true
	}
	for _, r := range x.resident {
		if len(r) < m.Config.Experts {
			return true
		}
	}
	return false
}

// moeFFN runs layer l's FFN for the pass's T rows, whose normalised hidden
// state (the layer's FFN norm of a.h) is in a.xn: routing on the device,
// the resident picked experts on the GPU and the others on the CPU at the
// same time, both added into a.h.
func (m *Model) moeFFN(ctx context.Context, c *cudadrv.Ctx, l, T int) error {
	x, cfg, k, s, a := m.moe, &m.Config, m.k, m.stream, &m.act
	if ctx == nil {
		ctx = context.Background()
	}
	K, E, D := cfg.ExpertsUsed, cfg.Experts, cfg.Dim
	if err := x.alloc(c, cfg, T, 0); err != nil {
		return err
	}
	router, bias := x.router(cfg, l)
	if err := k.MoELogits(c, s, a.xn, router, bias, x.logits(cfg), T, E, D); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	if err := k.MoETopK(c, s, x.logits(cfg), T, E, K, x.ids(cfg), x.weights(cfg, T)); err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	if T == 1 && !x.cpuOnly && (len(x.resident[l]) > 0 || x.ps != nil || x.mapped != nil) && k.CanMoEPicked(s, x.picked[l], K) {
		return m.moePicked(ctx, c, l)
	}
	t0 := time.Now()
	// The ids and weights are 32-bit words that copy_f32 moves unchanged.
	if err := k.Copy(c, s, x.hostRouteDev(), x.ids(cfg), int64(2*T*K)); err != nil {
		return err
	}
	res := x.resident[l]
	if x.cpuOnly {
		res = nil
	}
	if len(res) < E {
		// The hidden state comes down with the routing whenever the CPU
		// may have work, sparing a second round trip when it has.
		if err := k.Copy(c, s, x.hostRowsDev(cfg), a.h, int64(T*D)); err != nil {
			return err
		}
	}
	batchPicked := x.picked != nil && x.mapped == nil && !x.cpuOnly && T <= pickedTokens(cfg) && k.CanMoEPicked(s, x.picked[l], K)
	ahead := m.aheadFor(l, T, batchPicked)
	if ahead != nil {
		// The next layer's guess goes behind the routing; the host waits
		// for the routing alone.
		n := l + 1
		router, bias := x.router(cfg, n)
		if err := ahead.guess(c, k, s, cfg, a.h, m.layers[n].ffnNorm, router, bias, x.logits(cfg), T); err != nil {
			return err
		}
		if err := c.EventSync(ahead.routed); err != nil {
			return err
		}
	} else if err := c.StreamSync(s); err != nil {
		return err
	}
	// Every earlier pass is done: layers that ran without the host are
	// counted now.
	if err := x.tally(); err != nil {
		return err
	}
	hop := time.Since(t0)
	rt, err := x.hostRouting(cfg, l, T)
	if err != nil {
		return err
	}
	// Where the pick stream is on and the GPU takes its share of picks
	// (not the CPU-only way), some of the CPU's experts go over PCIe into
	// its slots as at one token, each once for all of its tokens, and the
	// GPU computes them with the resident ones.
	var staged []int
	var cpuBytes int64
	if x.ps != nil && !x.cpuOnly {
		x.offDevice(rt.IDs, res)
		if a := x.ps.ahead; a != nil && batchPicked {
			// Experts staged ahead for this layer that its CPU would
			// compute are the GPU's already.
			x.cpuPicks = a.take(l, x.cpuPicks, x.ps.staged)
			defer a.clear(x.ps.staged)
		}
		if len(x.cpuPicks) > 0 {
			expertBytes := expertSize(&x.layers[l].Experts[x.cpuPicks[0]])
			staged = x.ps.batchShare(x.cpuPicks, rt.IDs, expertBytes, streamSlots(cfg))
			cpuBytes = int64(len(x.cpuPicks)-len(staged)) * expertBytes
		}
		for _, e := range staged {
			x.ps.staged[e] = true
		}
		// The marks hold for this layer only, whatever fails in it.
		defer func() {
			for _, e := range staged {
				x.ps.staged[e] = false
			}
		}()
	}
	// The tables hold the resident experts alone unless mapped experts
	// are on (they give the others' host copies, which the CPU computes
	// at more than one token).
	if batchPicked {
		return m.moeBatchPicked(ctx, c, l, T, rt, res, staged, cpuBytes, hop, ahead)
	}
	x.pairs = residentPicks(x.pairs, rt.IDs, K, func(e int) bool {
		_, ok := res[e]
		return ok || x.ps != nil && x.ps.staged[e]
	})
	P := len(x.pairs)
	cpuWork := P < T*K
	x.stats.GPUExperts += int64(P)
	x.stats.CPUExperts += int64(T*K - P)
	// gpuShare copies the staged experts and launches the grouped
	// products over them and the resident ones.
	var stagedBytes int64
	gpuShare := func() error {
		if len(staged) > 0 {
			ti := time.Now()
			bytes, err := x.ps.stageBatch(c, s, x.layers[l], staged)
			if err != nil {
				return err
			}
			stagedBytes = bytes
			issue, picks := time.Since(ti), int64(0)
			for _, pr := range x.pairs {
				if x.ps.staged[pr.e] {
					picks++
				}
			}
			x.pstats.staged(picks, bytes, issue)
		}
		if err := m.moeResident(c, l, T); err != nil {
			return err
		}
		if len(staged) > 0 {
			if err := c.Record(x.ps.done, s); err != nil {
				return err
			}
			return x.ps.endSide(c, s, stagedBytes)
		}
		return nil
	}
	// Where the CPU has picks too, the GPU's launches (a few an expert,
	// tens a layer at eight tokens) and copies are issued by this thread
	// beside the CPU's work rather than before its start, as at one
	// token; their buffers are grown first, the device synchronised for
	// it, before the CPU's threads write the host rows.
	var share func() error
	if P > 0 {
		if err := x.alloc(c, cfg, T, P); err != nil {
			return err
		}
		if !cpuWork {
			if err := gpuShare(); err != nil {
				return err
			}
		} else {
			share = gpuShare
		}
	}
	if !cpuWork {
		x.stats.GPULayers++
		x.stats.Hop += hop
		_, _, _, out := x.actPtrs(cfg)
		if err := k.MoECombine(c, s, a.h, 0, out, x.weights(cfg, T), x.plan(cfg), T, K, D); err != nil {
			return fmt.Errorf("adding the experts: %w", err)
		}
		return nil
	}
	t2, err := x.runBatchOnCPU(ctx, c, s, cfg, l, T, rt, share, cpuBytes, len(staged) > 0)
	if err != nil {
		return err
	}
	if P == 0 {
		err = k.Copy(c, s, a.h, x.hostRowsDev(cfg), int64(T*D))
	} else {
		// The combine reads the CPU's rows once each, in place.
		_, _, _, out := x.actPtrs(cfg)
		err = k.MoECombine(c, s, a.h, x.hostRowsDev(cfg), out, x.weights(cfg, T), x.plan(cfg), T, K, D)
	}
	if err != nil {
		return fmt.Errorf("adding the experts: %w", err)
	}
	x.stats.Hop += hop + time.Since(t2)
	return nil
}

// moeBatchPicked runs layer l's experts for a pass of T tokens whose
// picks are no more than the layer's experts, once the host has the
// routing rt: the GPU's share (the resident picks, res, and the experts
// staged over PCIe) by the picked kernels as at one token, two launches
// over the resident table and two over the staged one whatever the
// routing, where the grouped products launch a few an expert (tens a
// layer at eight tokens, each one host time the CPU's share waits
// behind). Each pick reads its expert on its own, which at that many
// picks reads about what the grouped products would; with more, the
// grouped products' reading an expert once for its tokens wins (a
// prompt). The CPU computes the rest of the picks meanwhile; both add
// into a.h. cpuBytes is what the CPU reads, hop the routing's wait.
func (m *Model) moeBatchPicked(ctx context.Context, c *cudadrv.Ctx, l, T int, rt model.Routing, res map[int]expertW, staged []int, cpuBytes int64, hop time.Duration, ahead *aheadStage) error {
	x, cfg, k, s, a := m.moe, &m.Config, m.k, m.stream, &m.act
	K := cfg.ExpertsUsed
	var nres, nst int
	for _, e := range rt.IDs {
		if _, ok := res[int(e)]; ok {
			nres++
		} else if x.ps != nil && x.ps.staged[e] {
			nst++
		}
	}
	P := nres + nst
	cpuWork := P < T*K
	x.stats.BatchPicked++
	x.stats.GPUExperts += int64(P)
	x.stats.CPUExperts += int64(T*K - P)
	// Buffers grow before the CPU's threads write the host rows (growing
	// synchronises the device).
	if err := x.alloc(c, cfg, T, T*K); err != nil {
		return err
	}
	if nst > 0 {
		if err := x.ps.growActs(c, cfg, T*K); err != nil {
			return err
		}
	}
	picks := kernels.MoEPicks{IDs: x.ids(cfg), T: T, TopK: K, XQ: x.xq(cfg)}
	_, g, _, out := x.actPtrs(cfg)
	where := x.plan(cfg)
	gpuShare := func() error {
		if nres > 0 {
			if err := launchPicked(c, k, s, x.picked[l], picks, a.xn, g, out, where, "resident experts"); err != nil {
				return err
			}
		}
		if nst > 0 {
			ti := time.Now()
			bytes, err := x.ps.stage(c, k, s, cfg, x.layers[l], picks, a.xn, staged, model.ExpertSplit{})
			if err != nil {
				return err
			}
			x.pstats.staged(int64(nst), bytes, time.Since(ti))
			if err := x.ps.endSide(c, s, bytes); err != nil {
				return err
			}
		}
		if ahead != nil {
			// The next layer's guessed experts, behind this layer's
			// copies on the copy stream.
			n := l + 1
			if err := ahead.choose(c, cfg, n, T, func(e int) bool { _, ok := x.resident[n][e]; return ok }); err != nil {
				return err
			}
			if err := ahead.copyNext(c, x.ps.copy, n, x.layers[n], x.ps.slotBytes); err != nil {
				return err
			}
		}
		return nil
	}
	base := cudadrv.DevPtr(0)
	var t2 time.Time
	if cpuWork {
		var err error
		if t2, err = x.runBatchOnCPU(ctx, c, s, cfg, l, T, rt, gpuShare, cpuBytes, nst > 0); err != nil {
			return err
		}
		base = x.hostRowsDev(cfg)
	} else {
		if err := gpuShare(); err != nil {
			return err
		}
		x.stats.GPULayers++
		t2 = time.Now()
	}
	// The CPU's rows (or h) plus the resident picks and the staged ones.
	var shares [2]moeShare
	n := 0
	if nres > 0 {
		shares[n], n = moeShare{out, where, "the experts"}, n+1
	}
	if nst > 0 {
		_, out2, where2 := x.ps.actPtrs(cfg)
		shares[n], n = moeShare{out2, where2, "the staged experts"}, n+1
	}
	if err := m.addShares(c, base, T, x.weights(cfg, T), shares[:n]); err != nil {
		return err
	}
	x.stats.Hop += hop + time.Since(t2)
	return nil
}

// moeShare is one launch's rows of a layer's picks: its outputs and their
// map (MoECombine's); what names them in errors.
type moeShare struct {
	out, where cudadrv.DevPtr
	what       string
}

// addShares adds into a.h, for T tokens of weights wts, base (the CPU's
// rows in mapped host memory; 0 for h itself) and each share's rows by its
// map, or copies base into h where no share has any.
func (m *Model) addShares(c *cudadrv.Ctx, base cudadrv.DevPtr, T int, wts cudadrv.DevPtr, shares []moeShare) error {
	k, s, a, K, D := m.k, m.stream, &m.act, m.Config.ExpertsUsed, m.Config.Dim
	if len(shares) == 0 {
		if err := k.Copy(c, s, a.h, base, int64(T*D)); err != nil {
			return fmt.Errorf("adding the experts: %w", err)
		}
		return nil
	}
	for _, sh := range shares {
		if err := k.MoECombine(c, s, a.h, base, sh.out, wts, sh.where, T, K, D); err != nil {
			return fmt.Errorf("adding %s: %w", sh.what, err)
		}
		base = 0
	}
	return nil
}

// router is layer l's router on the device (E rows of Dim float32) and
// its logits' bias, layer l's row of the skew table (0 without one).
func (x *gpuMoE) router(cfg *model.Config, l int) (router, bias cudadrv.DevPtr) {
	E := int64(cfg.Experts)
	if x.skew != 0 {
		bias = x.skew.Add(int64(l) * E * 4)
	}
	return x.routers.Add(int64(l) * E * int64(cfg.Dim) * 4), bias
}

// hostRouting reads layer l's routing of T tokens from the host buffer
// the device copied it to, checks every id and counts it.
func (x *gpuMoE) hostRouting(cfg *model.Config, l, T int) (model.Routing, error) {
	K, E := cfg.ExpertsUsed, cfg.Experts
	hr := x.hostRoute(cfg, T)
	ids, err := cudadrv.Values[int32](hr[:T*K*4])
	if err != nil {
		return model.Routing{}, err
	}
	wts, err := cudadrv.Values[float32](hr[T*K*4:])
	if err != nil {
		return model.Routing{}, err
	}
	for i, e := range ids {
		if e < 0 || int(e) >= E {
			return model.Routing{}, fmt.Errorf("the device routing gave token %d's pick %d expert %d of %d", i/K, i%K, e, E)
		}
		x.counts[l][e]++
	}
	return model.Routing{IDs: ids, Weights: wts}, nil
}

// runBatchOnCPU is runOnCPU for a layer of a batch pass: share, when not
// nil, issues the GPU's share beside the CPU's work; the CPU's time goes
// into its fit at batches against cpuBytes, and where timed (the pick
// stream staged some of the share) the GPU's side is timed against it
// (beginSide before the CPU starts, the share's endSide, sideCPU).
func (x *gpuMoE) runBatchOnCPU(ctx context.Context, c *cudadrv.Ctx, s cudadrv.Stream, cfg *model.Config, l, T int, rt model.Routing, share func() error, cpuBytes int64, timed bool) (time.Time, error) {
	if timed {
		if err := x.ps.beginSide(c, s); err != nil {
			return time.Time{}, err
		}
	}
	var beside func()
	var shareErr error
	if share != nil {
		beside = func() { shareErr = share() }
	}
	busy := x.stats.Busy
	t2, err := x.runOnCPU(ctx, cfg, l, T, rt, beside)
	if err = cmp.Or(err, shareErr); err != nil {
		return time.Time{}, err
	}
	if cpuBytes > 0 {
		x.ps.cpuBatch.add(cpuBytes, x.stats.Busy-busy)
	}
	if timed {
		x.ps.sideCPU = x.stats.Busy - busy
	}
	return t2, nil
}

// runOnCPU has the CPU compute layer l's picks of rt that the GPU does
// not hold, on the T rows of hidden state copied to the host, in place
// there, and returns when it finished. beside, when not nil, is the
// host's own work for the layer (issuing the GPU's share): it runs on
// this thread once the CPU's threads have started (FFNRoutedBeside).
func (x *gpuMoE) runOnCPU(ctx context.Context, cfg *model.Config, l, T int, rt model.Routing, beside func()) (time.Time, error) {
	D := cfg.Dim
	hv, err := cudadrv.Values[float32](x.hostRows(cfg, T))
	if err != nil {
		return time.Time{}, err
	}
	hrows := slices.Grow(x.hrows[:0], T)[:T]
	x.hrows = hrows
	for t := range hrows {
		hrows[t] = hv[t*D : (t+1)*D : (t+1)*D]
	}
	if x.keep == nil {
		x.keep = func(e int) bool { return x.onCPU(x.curL, e) && (x.ps == nil || !x.ps.staged[e]) }
	}
	x.curL = l
	if beside != nil {
		if x.timedBeside == nil {
			x.timedBeside = func() {
				t := time.Now()
				x.beside()
				x.stats.Beside += time.Since(t)
			}
		}
		x.beside = beside
		defer func() { x.beside = nil }()
		beside = x.timedBeside
	}
	t1 := time.Now()
	if err := x.dev.RunRoutedBeside(ctx, l, x.layers[l], hrows, rt, x.keep, beside); err != nil {
		return time.Time{}, err
	}
	t2 := time.Now()
	x.stats.Layers++
	x.stats.Busy += t2.Sub(t1)
	return t2, nil
}

// moePicked runs layer l's experts for one token once the device has its
// routing: the resident picks by the picked expert kernels, which find
// them on the device (kernels.MoEPicked), so the host launches the same
// few kernels whatever the routing. A layer whose experts are all
// resident needs nothing more of the host: its ids go to the ring, to be
// counted later. Otherwise the routing and the hidden state come down
// first, the GPU's picks are launched behind them, and the CPU computes
// the others while the GPU computes its own.
func (m *Model) moePicked(ctx context.Context, c *cudadrv.Ctx, l int) error {
	x, cfg, k, s, a := m.moe, &m.Config, m.k, m.stream, &m.act
	K, D := cfg.ExpertsUsed, cfg.Dim
	if err := x.tallyErr; err != nil {
		x.tallyErr = nil
		return err
	}
	if slices.Contains(x.pending, l) {
		// The ring's slot holds an earlier pass's ids of this layer.
		if err := c.StreamSync(s); err != nil {
			return err
		}
		if err := x.tally(); err != nil {
			return err
		}
	}
	if err := x.alloc(c, cfg, 1, K); err != nil {
		return err
	}
	_, g, _, out := x.actPtrs(cfg)
	p, ids, where, wts := x.picked[l], x.ids(cfg), x.plan(cfg), x.weights(cfg, 1)
	x.stats.DeviceFound++
	one := kernels.MoEPicks{IDs: ids, T: 1, TopK: K}
	gpu := func() error { return launchPicked(c, k, s, p, one, a.xn, g, out, where, "resident experts") }
	if x.full[l] {
		if x.mapped != nil && len(x.resident[l]) < len(x.counts[l]) {
			st := x.stage.st
			st.Lo, st.Hi = x.experts, x.experts.Add(x.stats.ResidentBytes)
			var err error
			if p, err = k.MoEStage(c, s, p, st, ids, K); err != nil {
				return fmt.Errorf("staging the mapped picks: %w", err)
			}
		}
		if err := gpu(); err != nil {
			return err
		}
		if err := k.Copy(c, s, x.ringDev.Add(int64(l*K)*4), ids, int64(K)); err != nil {
			return err
		}
		x.pending = append(x.pending, l)
		x.stats.HostFree++
		x.stats.GPULayers++
		x.stats.GPUExperts += int64(K)
		if err := k.MoECombine(c, s, a.h, 0, out, wts, where, 1, K, D); err != nil {
			return fmt.Errorf("adding the experts: %w", err)
		}
		return nil
	}
	t0 := time.Now()
	if err := k.Copy(c, s, x.hostRouteDev(), ids, int64(2*K)); err != nil {
		return err
	}
	if err := k.Copy(c, s, x.hostRowsDev(cfg), a.h, int64(D)); err != nil {
		return err
	}
	if err := c.Record(x.routed, s); err != nil {
		return err
	}
	res := len(x.resident[l]) > 0
	if res {
		if err := gpu(); err != nil {
			return err
		}
	}
	if err := c.EventSync(x.routed); err != nil {
		return err
	}
	hop := time.Since(t0)
	rt, err := x.hostRouting(cfg, l, 1)
	if err != nil {
		return err
	}
	x.offDevice(rt.IDs, x.resident[l])
	// The last n of the CPU's picks go over PCIe, the rest stay; where
	// the GPU also takes the last gpuCols columns of the pick before
	// them, the CPU computes that pick's first columns only (rt.Split).
	// A layer's experts are one size, b.
	n, gpuCols, b := 0, 0, int64(0)
	F := cfg.ExpertFFN
	if x.ps != nil && len(x.cpuPicks) > 0 {
		b = expertSize(&x.layers[l].Experts[x.cpuPicks[0]])
		n, gpuCols = x.ps.split(len(x.cpuPicks), b, F)
	}
	staged := x.cpuPicks[len(x.cpuPicks)-n:]
	cpuBytes := int64(len(x.cpuPicks)-n) * b
	if gpuCols > 0 {
		rt.Split = model.ExpertSplit{Expert: x.cpuPicks[len(x.cpuPicks)-n-1], Cols: F - gpuCols}
		cpuBytes -= b * int64(gpuCols) / int64(F)
	}
	// The GPU's share is issued by this thread beside the CPU's (the
	// copies and launches take tens of microseconds a layer, which would
	// otherwise delay the CPU's start), or alone when the CPU has none.
	var stage func()
	var stageErr error
	if n > 0 || gpuCols > 0 {
		for _, e := range staged {
			x.ps.staged[e] = true
		}
		// The marks hold for this layer only, whatever fails in it: a
		// mark left set would keep the CPU off that expert in later
		// layers.
		defer func() {
			for _, e := range staged {
				x.ps.staged[e] = false
			}
		}()
		stage = func() {
			ti := time.Now()
			bytes, err := x.ps.stage(c, k, s, cfg, x.layers[l], one, a.xn, staged, rt.Split)
			if err != nil {
				stageErr = err
				return
			}
			x.pstats.staged(int64(n), bytes, time.Since(ti))
			if gpuCols > 0 {
				x.pstats.Split++
			}
		}
	}
	// A split pick counts as the CPU's.
	onCPU := len(x.cpuPicks) - n
	x.stats.GPUExperts += int64(K - onCPU)
	x.stats.CPUExperts += int64(onCPU)
	base := cudadrv.DevPtr(0)
	t2 := time.Now()
	if onCPU > 0 {
		busy := x.stats.Busy
		t2, err = x.runOnCPU(ctx, cfg, l, 1, rt, stage)
		if err = cmp.Or(err, stageErr); err != nil {
			return err
		}
		base = x.hostRowsDev(cfg)
		if x.ps != nil {
			x.ps.cpu.add(cpuBytes, x.stats.Busy-busy)
		}
	} else {
		if stage != nil {
			if stage(); stageErr != nil {
				return stageErr
			}
		}
		x.stats.GPULayers++
	}
	// The CPU's rows (or h) plus the resident picks, the staged ones and
	// the GPU's part of a split one.
	var shares [3]moeShare
	ns := 0
	if res {
		shares[ns], ns = moeShare{out, where, "the experts"}, ns+1
	}
	if n > 0 {
		_, out2, where2 := x.ps.actPtrs(cfg)
		shares[ns], ns = moeShare{out2, where2, "the staged experts"}, ns+1
	}
	if gpuCols > 0 {
		_, out3, where3 := x.ps.partPtrs(cfg)
		shares[ns], ns = moeShare{out3, where3, "the split expert's last columns"}, ns+1
	}
	if err := m.addShares(c, base, 1, wts, shares[:ns]); err != nil {
		return err
	}
	x.stats.Hop += hop + time.Since(t2)
	return nil
}

// residentPicks lists into dst the picks of ids (k a token, in token
// order) of experts resident says are held on the GPU, grouped by expert
// (increasing; a group's tokens in order): each group is one product
// over its tokens.
func residentPicks(dst []moePair, ids []int32, k int, resident func(e int) bool) []moePair {
	dst = dst[:0]
	for i, e := range ids {
		if resident(int(e)) {
			dst = append(dst, moePair{t: i / k, j: i % k, e: int(e)})
		}
	}
	slices.SortStableFunc(dst, func(p, q moePair) int { return cmp.Compare(p.e, q.e) })
	return dst
}

// pickPlan writes the device's plan of the grouped resident picks pairs:
// gtok[p], the token of the p-th (the row MoEGather takes), and where[t*k+j],
// the row of token t's j-th pick, -1 for a pick the CPU computes
// (MoECombine's map).
func pickPlan(pairs []moePair, k int, where, gtok []int32) {
	for i := range where {
		where[i] = -1
	}
	for p, pr := range pairs {
		where[pr.t*k+pr.j] = int32(p)
		gtok[p] = int32(pr.t)
	}
}

// moeResident enqueues layer l's resident picks (x.pairs): their tokens
// gathered by expert (at one token every pick reads the token's normed
// state in place), each expert's gate and up over its tokens with the
// activation (one fused launch where the kernels take the pair), each
// expert's down (at one token, the downs' inputs quantized in one launch:
// GEMVEach), into the activations' out rows, with the where map
// MoECombine reads uploaded. Launches are the cost at one token: each is
// host time before the CPU starts on its share of the layer.
func (m *Model) moeResident(c *cudadrv.Ctx, l, T int) error {
	x, cfg, k, s, a := m.moe, &m.Config, m.k, m.stream, &m.act
	K, D, F := cfg.ExpertsUsed, cfg.Dim, cfg.ExpertFFN
	P := len(x.pairs)
	if err := x.alloc(c, cfg, T, P); err != nil {
		return err
	}
	plan, err := cudadrv.Values[int32](x.hostPlan(cfg))
	if err != nil {
		return err
	}
	pickPlan(x.pairs, K, plan[:T*K], plan[T*K:T*K+P])
	if err := k.Copy(c, s, x.plan(cfg), x.hostPlanDev(cfg), int64(T*K+P)); err != nil {
		return err
	}
	xg, g, u, out := x.actPtrs(cfg)
	d4, f4 := int64(D)*4, int64(F)*4
	in := func(lo int) cudadrv.DevPtr { return xg.Add(int64(lo) * d4) }
	if T == 1 {
		// Quantized once for every expert's gate and up.
		in = func(int) cudadrv.DevPtr { return a.xn }
		if err := k.QuantizeHeld(c, s, a.xn, 1, D); err != nil {
			return fmt.Errorf("the experts' input: %w", err)
		}
	} else if err := k.MoEGather(c, s, a.xn, x.plan(cfg).Add(int64(T*K)*4), xg, P, D); err != nil {
		return fmt.Errorf("gathering the resident experts' tokens: %w", err)
	}
	runs := func(fn func(w expertW, lo, n int) error) error {
		for lo := 0; lo < P; {
			hi := lo + 1
			for hi < P && x.pairs[hi].e == x.pairs[lo].e {
				hi++
			}
			if err := fn(x.pairWeights(l, x.pairs[lo].e), lo, hi-lo); err != nil {
				return fmt.Errorf("expert %d: %w", x.pairs[lo].e, err)
			}
			lo = hi
		}
		return nil
	}
	// Rows of g the activation is still to be applied to: runs whose
	// gate and up were not fused.
	var split [][2]int
	fused := false
	err = runs(func(w expertW, lo, n int) error {
		gr := g.Add(int64(lo) * f4)
		if m.pass.fuseGEMV && w.gate.Type == w.up.Type && w.gate.Rows == w.up.Rows && k.CanFuseGEMV(n, w.gate, w.up) {
			if err := k.GEMVGLU(c, s, w.gate, w.up, in(lo), gr, n, kernels.SwiGLU); err != nil {
				return fmt.Errorf("gate and up: %w", err)
			}
			fused = true
			return nil
		}
		if err := k.MatMul(c, s, w.gate, in(lo), gr, n); err != nil {
			return fmt.Errorf("gate: %w", err)
		}
		if err := k.MatMul(c, s, w.up, in(lo), u.Add(int64(lo)*f4), n); err != nil {
			return fmt.Errorf("up: %w", err)
		}
		split = append(split, [2]int{lo, n})
		return nil
	})
	if err != nil {
		return err
	}
	if !fused {
		split = [][2]int{{0, P}} // every run: one launch
	}
	for _, r := range split {
		lo, n := int64(r[0]), int64(r[1])
		if err := k.SwiGLU(c, s, g.Add(lo*f4), u.Add(lo*f4), g.Add(lo*f4), n*int64(F)); err != nil {
			return fmt.Errorf("experts' activation: %w", err)
		}
	}
	if T == 1 {
		// One pick an expert: every down on its own row of g, the rows
		// quantized in one launch.
		x.downs = x.downs[:0]
		for p, pr := range x.pairs {
			x.downs = append(x.downs, kernels.GEMVOut{W: x.pairWeights(l, pr.e).down, Y: out.Add(int64(p) * d4)})
		}
		if err := k.GEMVEach(c, s, g, x.downs); err != nil {
			return fmt.Errorf("downs: %w", err)
		}
		return nil
	}
	return runs(func(w expertW, lo, n int) error {
		if err := k.MatMul(c, s, w.down, g.Add(int64(lo)*f4), out.Add(int64(lo)*d4), n); err != nil {
			return fmt.Errorf("down: %w", err)
		}
		return nil
	})
}

// settleRoutes counts the routes of the layers that ran without the host
// (their ids wait in the device's ring until a later pass or this), so
// that the counts and the stats read after a pass include its last
// layers. Called with m.mu held.
func (m *Model) settleRoutes() {
	if len(m.moe.pending) == 0 {
		return
	}
	if err := m.dev.Do(func(c *cudadrv.Ctx) error {
		if err := c.StreamSync(m.stream); err != nil {
			return err
		}
		return m.moe.tally()
	}); err != nil && m.moe.tallyErr == nil {
		// The next pass fails with it, as a pass that waited for its
		// routing would have.
		m.moe.tallyErr = err
	}
}

// MoEStats returns the FFN work so far of a mixture-of-experts model;
// ok is false for any other model.
func (m *Model) MoEStats() (MoEStats, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return MoEStats{}, false
	}
	m.settleRoutes()
	x := m.moe
	st := x.stats
	st.Choices = x.choice.decisions()
	st.Mapped.Way = x.mapWay
	if d, ok := x.choice.mappedDecision(); ok {
		st.Mapped.Decided, st.Mapped.Kept, st.Mapped.MappedPass, st.Mapped.HostPass = true, !d.First, d.SecondTime, d.FirstTime
	}
	st.Streamed = x.pstats
	if x.ps != nil {
		x.ps.stats(&st.Streamed)
	}
	st.CPUBytes = x.dev.ExpertBytes()
	return st, true
}

// ExpertCounts is, per layer and expert, how many tokens the device's
// router sent to the expert: the expected use the engine places experts
// by. Nil for a model without experts.
func (m *Model) ExpertCounts() [][]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return nil
	}
	m.settleRoutes()
	out := make([][]uint64, len(m.moe.counts))
	for l := range out {
		out[l] = slices.Clone(m.moe.counts[l])
	}
	return out
}

// SetRouterSkew skews later passes' routing by a Zipf law of exponent s
// over each layer's experts, for benchmarks (random weights route almost
// uniformly): engine/model's table (model.RouterSkewBias), uploaded and
// added to the device router's scores as the CPU adds it to its own. A
// model without experts refuses.
func (m *Model) SetRouterSkew(s float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return errors.New("router skew: not a mixture-of-experts model")
	}
	x := m.moe
	// The FFN device checks the exponent as a model does.
	if err := x.dev.SetRouterSkew(s); err != nil {
		return err
	}
	return m.dev.Do(func(c *cudadrv.Ctx) error {
		if s == 0 {
			err := c.Free(x.skew)
			x.skew = 0
			return err
		}
		var flat []float32
		for _, row := range model.RouterSkewBias(&m.Config, s) {
			flat = append(flat, row...)
		}
		if x.skew == 0 {
			p, err := c.Alloc(int64(len(flat)) * 4)
			if err != nil {
				return fmt.Errorf("router skew: %w", err)
			}
			x.skew = p
		}
		if err := cudadrv.Upload(c, x.skew, flat, m.stream); err != nil {
			return fmt.Errorf("router skew: %w", err)
		}
		return nil
	})
}

// release frees the routers, resident experts and pass buffers.
func (x *gpuMoE) release(c *cudadrv.Ctx) error {
	if x == nil {
		return nil
	}
	// The pick stream's staging, then the pages it and mapped experts
	// share, whoever uses them.
	err := errors.Join(x.ps.release(c), c.Free(x.routers), c.Free(x.skew), c.Free(x.experts), c.Free(x.tables), c.Free(x.route), c.Free(x.acts), c.FreeHost(x.host), c.FreeHost(x.ring))
	x.ps = nil
	err = errors.Join(err, x.freeStaging(c))
	if x.pin != nil {
		err = errors.Join(err, x.pin.unpin(c))
		x.pin, x.mapped, x.mapAddrs, x.mapWay = nil, nil, nil, MappedOff
	}
	if x.routed != 0 {
		err = errors.Join(err, c.DestroyEvent(x.routed))
	}
	x.routers, x.skew, x.experts, x.tables, x.route, x.acts, x.host, x.hostDev = 0, 0, 0, 0, 0, 0, nil, 0
	x.hrows = nil // views of the host buffer just freed
	x.ring, x.ringDev, x.routed, x.picked, x.full, x.pending = nil, 0, 0, nil, nil, nil
	x.capT, x.capP = 0, 0
	return err
}

// MoEDeviceOverhead is the device memory a mixture-of-experts model takes
// beyond its planned layers whatever experts are resident: the routers as
// f32, the resident expert tables, and the routing and expert activations
// of a pass of tokens tokens with every pick resident. A caller placing
// experts in device memory (the engine) leaves it out of their budget;
// longer passes grow the buffers as they come.
func MoEDeviceOverhead(cfg *model.Config, tokens int) int64 {
	if !cfg.MoE() {
		return 0
	}
	t, k, d, f := int64(tokens), int64(cfg.ExpertsUsed), int64(cfg.Dim), int64(cfg.ExpertFFN)
	route := routeBytes(cfg, tokens)
	acts := 2*alignUp(t*k*d*4) + 2*alignUp(t*k*f*4)
	return routerBytes(cfg) + route + acts + tableBytes(cfg.Layers, cfg.Experts)
}
