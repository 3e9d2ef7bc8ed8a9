package tier

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/strata-llm/strata/engine/quant"
)

// Link names one stage of the streaming pipeline: the thing that can bound
// a pass.
type Link uint8

const (
	// LinkStorage is stage 1: storage (tier C) into host staging.
	LinkStorage Link = iota
	// LinkHostToDevice is stage 2: host (tier B or staging) into a device
	// slot.
	LinkHostToDevice
	// LinkCompute is stage 3: the device consuming the weights.
	LinkCompute
)

// String returns "storage", "h2d" or "compute".
func (l Link) String() string {
	switch l {
	case LinkStorage:
		return "storage"
	case LinkHostToDevice:
		return "h2d"
	case LinkCompute:
		return "compute"
	}
	return fmt.Sprintf("Link(%d)", uint8(l))
}

// MarshalText writes the link's name.
func (l Link) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (l *Link) UnmarshalText(b []byte) error {
	for _, c := range []Link{LinkStorage, LinkHostToDevice, LinkCompute} {
		if c.String() == string(b) {
			*l = c
			return nil
		}
	}
	return fmt.Errorf("link %q: want storage, h2d or compute", b)
}

// ErrNoFit is wrapped when the budgets cannot hold what every plan needs
// (globals, KV cache, scratch and the minimum of two slots).
var ErrNoFit = errors.New("model does not fit the memory budgets")

// Request is the planner's input. Byte sizes are what the pool stores
// (Sizes); budgets and links usually come from DefaultBudgets and
// MeasureLinks, overridden by flags.
type Request struct {
	// Sizes are the model's per-layer, globals and output bytes.
	Sizes Sizes
	// DeviceBudget is the device memory the model may use (free VRAM, or
	// host memory for the CPU backend).
	DeviceBudget int64
	// HostBudget is the host RAM tier B and tier-C staging may use. Ignored
	// when Shared.
	HostBudget int64
	// Shared says device memory is host memory (the CPU backend): tier B
	// then buys nothing over tier A, so layers go to A or C, and tier C
	// needs no host-to-device copy. Its reads still land in Depth staging
	// buffers of the largest tier-C layer before the pipeline copies them
	// into the slots, and those buffers come out of DeviceBudget too: the
	// planner counts them there, so a deeper pipeline pays for its
	// staging when depths are compared.
	Shared bool
	// KVBytes is the KV cache for the configured context and batch
	// (KVCacheBytes); it lives in device memory.
	KVBytes int64
	// ScratchBytes is the activation scratch of one pass (ScratchBytes).
	ScratchBytes int64
	// Depth fixes the pipeline depth k (slots); 0 lets the planner choose.
	Depth int
	// MaxDepth caps the chosen depth; 0 means DefaultMaxDepth.
	MaxDepth int
	// Batch is the number of sequences advanced per pass (for tokens/s);
	// 0 means 1.
	Batch int
	// Links are the measured (or default) link speeds.
	Links Links
}

// DefaultMaxDepth is the deepest pipeline the planner picks on its own:
// beyond eight slots latency is covered on any link we know of, and each
// slot costs a whole layer of device memory.
const DefaultMaxDepth = 8

// minDepth is the shallowest pipeline that overlaps anything: one slot
// computing while the next fills.
const minDepth = 2

// LinkTimes holds one duration per link.
type LinkTimes struct {
	Storage      time.Duration `json:"storage_ns"`
	HostToDevice time.Duration `json:"h2d_ns"`
	Compute      time.Duration `json:"compute_ns"`
}

// Max returns the largest of the three and its link.
func (t LinkTimes) Max() (time.Duration, Link) {
	d, l := t.Compute, LinkCompute
	if t.HostToDevice > d {
		d, l = t.HostToDevice, LinkHostToDevice
	}
	if t.Storage > d {
		d, l = t.Storage, LinkStorage
	}
	return d, l
}

// LinkBytes holds bytes moved per pass over each transfer link.
type LinkBytes struct {
	Storage      int64 `json:"storage"`
	HostToDevice int64 `json:"h2d"`
}

// LayerPlan is one layer's placement and its expected cost per pass.
type LayerPlan struct {
	Index int   `json:"index"`
	Tier  Tier  `json:"tier"`
	Bytes int64 `json:"bytes"`
	// Moved is what streaming this layer moves per pass on each link.
	Moved LinkBytes `json:"moved"`
	// Time is this layer's busy time per pass on each link.
	Time LinkTimes `json:"time"`
	// Bound is the link with the largest time for this layer.
	Bound Link `json:"bound"`
}

// TierTotal sums the layers of one tier.
type TierTotal struct {
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
}

// DeviceUse breaks down the device memory a plan uses.
type DeviceUse struct {
	Globals int64 `json:"globals"`
	KV      int64 `json:"kv"`
	Scratch int64 `json:"scratch"`
	Slots   int64 `json:"slots"`    // Depth × SlotBytes
	Layers  int64 `json:"layers_a"` // tier-A layers
	Total   int64 `json:"total"`
	Budget  int64 `json:"budget"`
}

// HostUse breaks down the host memory a plan uses beside the device's.
// When Shared only Staging is set, and it is counted against the device
// budget (Device.Total + Host.Total ≤ Device.Budget).
type HostUse struct {
	Layers  int64 `json:"layers_b"` // tier-B layers
	Staging int64 `json:"staging"`  // Depth × StagingBytes for tier C
	Total   int64 `json:"total"`
	Budget  int64 `json:"budget"`
}

// Plan is the planner's output: a tier per layer, the pipeline depth and
// the expected cost of one pass (one token for every sequence of the batch).
type Plan struct {
	Layers []LayerPlan `json:"layers"`
	// Depth is the number of device slots k the pipeline cycles through
	// (and of host staging slots when tier C is used); 0 when every layer
	// is resident.
	Depth int `json:"depth"`
	// SlotBytes is one device slot: the largest streamed layer.
	SlotBytes int64 `json:"slot_bytes"`
	// StagingBytes is one host staging slot: the largest tier-C layer.
	StagingBytes int64        `json:"staging_bytes"`
	Shared       bool         `json:"shared"`
	Tiers        [3]TierTotal `json:"tiers"` // indexed by Tier
	Device       DeviceUse    `json:"device"`
	Host         HostUse      `json:"host"`
	// Moved is the bytes per pass over each transfer link.
	Moved LinkBytes `json:"moved"`
	// Time is each link's busy time per pass, including the output
	// projection's compute.
	Time LinkTimes `json:"time"`
	// Stall is the expected per-pass wait for latency the depth does not
	// cover (zero when it does).
	Stall time.Duration `json:"stall_ns"`
	// PassTime is the expected time of one pass: the slowest link (the
	// stages overlap) plus Stall.
	PassTime time.Duration `json:"pass_ns"`
	// Bound is the link that bounds a pass.
	Bound Link `json:"bound"`
	// TokensPerSecond is Batch tokens per PassTime.
	TokensPerSecond float64 `json:"tokens_per_second"`
	Batch           int     `json:"batch"`
	Links           Links   `json:"links"`
}

// Sizes are the byte sizes the planner works from.
type Sizes struct {
	// Layers is each layer's size as one pool extent (what streaming it
	// moves).
	Layers []int64 `json:"layers"`
	// Globals is the non-layer tensors (embedding, output norm, output).
	Globals int64 `json:"globals"`
	// Output is the part of Globals every pass reads in full (output norm
	// and projection); only looked-up rows of the embedding are read.
	Output int64 `json:"output"`
	// Type is the matrix format holding most of a layer's bytes: the one
	// whose kernel speed MeasureCompute should measure.
	Type quant.Type `json:"-"`
	// Streamed, when set (one entry per layer), is each layer's size when
	// it is streamed from tier B, if the engine stores tier-B layers in a
	// smaller form than Layers (engine/gpu's lossless packed bf16): what
	// it takes in host memory, in a device slot and over host-to-device
	// per pass. Resident and tier-C layers keep their Layers size. Nil
	// means Layers.
	Streamed []int64 `json:"streamed,omitempty"`
	// Experts, for a mixture-of-experts model, is each layer's experts'
	// extents. Layers then holds only a layer's own tensors (attention,
	// norms, router): experts are placed one by one (PlanExperts), not
	// with their layer.
	Experts [][]int64 `json:"experts,omitempty"`
}

// streamedSize is layer i's size on tier B (Streamed, else Layers).
func (s *Sizes) streamedSize(i int) int64 {
	if s.Streamed != nil {
		return s.Streamed[i]
	}
	return s.Layers[i]
}

// NewPlan places every layer on a tier and picks the pipeline depth.
//
// The cost model. A pass moves every tier-B layer over the host-to-device
// link, and every tier-C layer over storage and (unless Shared) the
// host-to-device link; the device consumes every layer's weights and the
// output projection. The three stages overlap, so a pass takes as long as
// the busiest link (bytes/bandwidth plus a fixed per-layer overhead for each
// transfer), unless the pipeline depth fails to hide the links' latency or
// the links cannot run ahead for lack of slots: the pass time is found by
// simulating the pipeline (simulate), and Stall is what it adds to the
// busiest link's time.
//
// The rule. Keeping a layer on a faster tier saves, per byte of that tier's
// budget, 1/bandwidth plus overhead/size of the slower link's time: the same
// for every layer of a size, more for small layers when per-transfer
// overhead matters. Streamed layers also cost slot memory: k device slots
// (and k host staging slots for tier C) as large as the largest streamed
// layer, so keeping the largest layers resident shrinks every slot. The
// planner therefore searches, for every depth k from the largest useful
// down to 2, and every candidate slot size s (each distinct layer size, or
// nothing streamed): layers larger than s must be resident; the device
// budget left after globals, KV cache, scratch and k×s is filled with the
// set of layers that saves the most link time (fillBest: an exact search
// over how many layers of each size to keep; ties go to more bytes kept,
// then lower indices); then host RAM is filled with tier B the same way (candidate staging sizes likewise);
// the rest is tier C. Among all feasible candidates it keeps the one with
// the smallest pass time, then the fewest bytes moved, then the least device
// memory, so the depth is the shallowest that hides the latency. This is not "the first N layers": with unequal layers (Q6_K
// layers of a Q4_K_M model) the big ones are kept when that frees slot
// memory, and whichever layers fit the leftover budget best fill it.
//
// Globals (embedding, output norm, output projection) are always resident
// on the device: the output projection is read every pass, and the
// embedding is needed before the first layer.
func NewPlan(r Request) (*Plan, error) {
	n := len(r.Sizes.Layers)
	if n == 0 {
		return nil, errors.New("plan: model has no layers")
	}
	for i, b := range r.Sizes.Layers {
		if b <= 0 {
			return nil, fmt.Errorf("plan: layer %d has %d bytes", i, b)
		}
	}
	if st := r.Sizes.Streamed; st != nil {
		if len(st) != n {
			return nil, fmt.Errorf("plan: %d streamed sizes for %d layers", len(st), n)
		}
		for i, b := range st {
			if b <= 0 {
				return nil, fmt.Errorf("plan: layer %d has %d bytes streamed", i, b)
			}
		}
	}
	if r.DeviceBudget < 0 || r.HostBudget < 0 || r.KVBytes < 0 || r.ScratchBytes < 0 || r.Sizes.Globals < 0 {
		return nil, errors.New("plan: negative budget or size")
	}
	if err := r.Links.validate(); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	maxDepth := r.MaxDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if r.Depth < 0 || r.Depth > 1024 {
		return nil, fmt.Errorf("plan: depth %d", r.Depth)
	}
	if r.Batch <= 0 {
		r.Batch = 1
	}
	fixed := r.Sizes.Globals + r.KVBytes + r.ScratchBytes
	if fixed > r.DeviceBudget {
		return nil, fmt.Errorf("plan: %w: globals %s + KV cache %s + scratch %s = %s exceed the device budget %s",
			ErrNoFit, FormatBytes(r.Sizes.Globals), FormatBytes(r.KVBytes), FormatBytes(r.ScratchBytes),
			FormatBytes(fixed), FormatBytes(r.DeviceBudget))
	}

	depths := []int{r.Depth}
	if r.Depth == 0 {
		depths = nil
		for k := maxDepth; k >= minDepth; k-- {
			depths = append(depths, k)
		}
	}
	sizes := distinctDesc(r.Sizes.Layers)
	slotSizes := sizes // candidate slot sizes: the tier-B sizes
	if r.Sizes.Streamed != nil {
		slotSizes = distinctDesc(append(slices.Clone(r.Sizes.Streamed), r.Sizes.Layers...))
	}
	var best *Plan
	consider := func(p *Plan) {
		if p != nil && (best == nil || better(p, best)) {
			best = p
		}
	}
	// Everything resident: no slots at all.
	all := make([]Tier, n)
	consider(r.evaluate(all, 0))
	for _, k := range depths {
		for _, s := range slotSizes {
			tiers, ok := r.placeDevice(k, s)
			if !ok {
				continue
			}
			if r.Shared {
				consider(r.evaluate(tiers, k))
				continue
			}
			for _, st := range append([]int64{0}, sizes...) {
				t2, ok := r.placeHost(tiers, k, st)
				if ok {
					consider(r.evaluate(t2, k))
				}
			}
		}
	}
	if best == nil {
		smallest := slotSizes[len(slotSizes)-1]
		k := max(r.Depth, minDepth)
		if r.Shared {
			return nil, fmt.Errorf("plan: %w: even streaming every layer needs %s of memory (globals, KV cache, scratch, %d slots of %s and as many tier-C staging buffers) and the budget is %s",
				ErrNoFit, FormatBytes(fixed+2*int64(k)*smallest), k, FormatBytes(smallest), FormatBytes(r.DeviceBudget))
		}
		return nil, fmt.Errorf("plan: %w: even streaming every layer needs %s of device memory (globals, KV cache, scratch and %d slots of %s) and the budget is %s, or host staging exceeds %s",
			ErrNoFit, FormatBytes(fixed+int64(k)*smallest), k, FormatBytes(smallest), FormatBytes(r.DeviceBudget), FormatBytes(r.HostBudget))
	}
	return best, nil
}

// distinctDesc returns the distinct values of xs, largest first.
func distinctDesc(xs []int64) []int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	s = slices.Compact(s)
	slices.Reverse(s)
	return s
}

// fillBest chooses which layers of idx to keep on a faster tier with
// left bytes: the set that saves the most link time, each layer of b bytes
// saving b/bw + overhead. Layers of equal size are interchangeable, so it
// searches over how many of each distinct size to keep (exactly, when there
// are few size classes, as in real models; greedily by time saved per byte
// otherwise). Ties go to more bytes kept, then to lower layer indices.
func fillBest(idx []int, sizes []int64, left int64, bw float64, overhead time.Duration) []int {
	type class struct {
		size  int64
		layer []int // ascending index
	}
	var cls []class
	for _, s := range distinctDesc(pick(sizes, idx)) {
		c := class{size: s}
		for _, i := range idx {
			if sizes[i] == s {
				c.layer = append(c.layer, i)
			}
		}
		sort.Ints(c.layer)
		cls = append(cls, c)
	}
	value := func(s int64) float64 { return float64(s)/bw + overhead.Seconds() }
	combos := 1.0
	for _, c := range cls {
		combos *= float64(len(c.layer) + 1)
	}
	counts := make([]int, len(cls))
	if combos <= 1<<16 {
		best := make([]int, len(cls))
		bestV, bestB := -1.0, int64(-1)
		var dfs func(j int, left int64, v float64, b int64)
		dfs = func(j int, left int64, v float64, b int64) {
			if j == len(cls) {
				if v > bestV*(1+1e-12) || (v >= bestV*(1-1e-12) && b > bestB) {
					bestV, bestB = v, b
					copy(best, counts)
				}
				return
			}
			c := cls[j]
			for n := min(len(c.layer), int(left/c.size)); n >= 0; n-- {
				counts[j] = n
				dfs(j+1, left-int64(n)*c.size, v+float64(n)*value(c.size), b+int64(n)*c.size)
			}
			counts[j] = 0
		}
		dfs(0, left, 0, 0)
		counts = best
	} else {
		order := make([]int, len(cls))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool {
			ca, cb := cls[order[a]], cls[order[b]]
			return value(ca.size)/float64(ca.size) > value(cb.size)/float64(cb.size)
		})
		for _, j := range order {
			n := min(len(cls[j].layer), int(left/cls[j].size))
			counts[j] = n
			left -= int64(n) * cls[j].size
		}
	}
	var out []int
	for j, c := range cls {
		out = append(out, c.layer[:counts[j]]...)
	}
	return out
}

// pick returns sizes[i] for every i of idx.
func pick(sizes []int64, idx []int) []int64 {
	out := make([]int64, len(idx))
	for j, i := range idx {
		out[j] = sizes[i]
	}
	return out
}

// placeDevice makes layers larger than slot resident, reserves k slots of
// slot bytes (and, when Shared, as many staging buffers, which hold no
// more than a slot) and fills the rest of the device budget. Layers not
// placed on A are marked C (placeHost may promote them to B).
func (r *Request) placeDevice(k int, slot int64) ([]Tier, bool) {
	n := len(r.Sizes.Layers)
	tiers := make([]Tier, n)
	reserve := int64(k) * slot
	if r.Shared {
		reserve *= 2
	}
	left := r.DeviceBudget - r.Sizes.Globals - r.KVBytes - r.ScratchBytes - reserve
	if left < 0 {
		return nil, false
	}
	var rest []int
	for i, b := range r.Sizes.Layers {
		if r.Sizes.streamedSize(i) > slot {
			left -= b
			tiers[i] = TierA
		} else {
			tiers[i] = TierC
			rest = append(rest, i)
		}
	}
	if left < 0 || len(rest) == 0 {
		return nil, false // forced layers do not fit, or nothing streams (covered elsewhere)
	}
	// Keeping a layer on A saves the link it would otherwise cross first:
	// h2d for a separate device (tier B is the alternative), storage when
	// device memory is host memory (tier C is).
	bw, ov := r.Links.HostToDevice, r.Links.HostToDeviceOverhead
	if r.Shared {
		bw, ov = r.Links.StorageToHost, r.Links.StorageOverhead
	}
	keep := fillBest(rest, r.Sizes.Layers, left, bw, ov)
	if len(keep) == len(rest) {
		return nil, false
	}
	for _, i := range keep {
		tiers[i] = TierA
	}
	return tiers, true
}

// placeHost puts streamed layers larger than staging on B (they must not
// need staging), reserves k staging slots of staging bytes when any layer
// stays on C, and fills the rest of the host budget with more B layers.
func (r *Request) placeHost(in []Tier, k int, staging int64) ([]Tier, bool) {
	tiers := slices.Clone(in)
	left := r.HostBudget
	var rest []int
	for i, t := range tiers {
		if t != TierC {
			continue
		}
		if b := r.Sizes.Layers[i]; b > staging {
			tiers[i] = TierB
			left -= r.Sizes.streamedSize(i)
		} else {
			rest = append(rest, i)
		}
	}
	if left < 0 {
		return nil, false
	}
	if len(rest) == 0 {
		return tiers, staging == 0
	}
	left -= int64(k) * staging
	if left < 0 {
		return nil, false
	}
	for _, i := range fillBest(rest, r.Sizes.Layers, left, r.Links.StorageToHost, r.Links.StorageOverhead) {
		tiers[i] = TierB
	}
	return tiers, true
}

// evaluate computes the plan for a tier assignment and depth k, or nil if
// it breaks a budget.
func (r *Request) evaluate(tiers []Tier, k int) *Plan {
	l := r.Links
	p := &Plan{Layers: make([]LayerPlan, len(tiers)), Shared: r.Shared, Batch: r.Batch, Links: l}
	p.Device = DeviceUse{Globals: r.Sizes.Globals, KV: r.KVBytes, Scratch: r.ScratchBytes, Budget: r.DeviceBudget}
	p.Host = HostUse{Budget: r.HostBudget}
	if r.Shared {
		p.Host.Budget = 0
	}
	streamed := 0
	for i, t := range tiers {
		b := r.Sizes.Layers[i]
		lp := LayerPlan{Index: i, Tier: t, Bytes: b}
		lp.Time.Compute = seconds(float64(b) / l.Compute)
		switch t {
		case TierA:
			p.Device.Layers += b
		case TierB:
			b = r.Sizes.streamedSize(i) // what tier B holds, slots and moves
			lp.Bytes = b
			p.Host.Layers += b
			lp.Moved.HostToDevice = b
			lp.Time.HostToDevice = seconds(float64(b)/l.HostToDevice) + l.HostToDeviceOverhead
		case TierC:
			lp.Moved.Storage = b
			lp.Time.Storage = seconds(float64(b)/l.StorageToHost) + l.StorageOverhead
			p.StagingBytes = max(p.StagingBytes, b)
			if !r.Shared {
				lp.Moved.HostToDevice = b
				lp.Time.HostToDevice = seconds(float64(b)/l.HostToDevice) + l.HostToDeviceOverhead
			}
		}
		if t != TierA {
			streamed++
			p.SlotBytes = max(p.SlotBytes, b)
		}
		_, lp.Bound = lp.Time.Max()
		p.Tiers[t].Layers++
		p.Tiers[t].Bytes += b
		p.Moved.Storage += lp.Moved.Storage
		p.Moved.HostToDevice += lp.Moved.HostToDevice
		p.Time.Storage += lp.Time.Storage
		p.Time.HostToDevice += lp.Time.HostToDevice
		p.Time.Compute += lp.Time.Compute
		p.Layers[i] = lp
	}
	p.Time.Compute += seconds(float64(r.Sizes.Output) / l.Compute)
	if streamed > 0 {
		p.Depth = k
	} else {
		p.SlotBytes, p.StagingBytes = 0, 0
	}
	p.Device.Slots = int64(p.Depth) * p.SlotBytes
	p.Device.Total = p.Device.Globals + p.Device.KV + p.Device.Scratch + p.Device.Slots + p.Device.Layers
	p.Host.Staging = int64(p.Depth) * p.StagingBytes
	p.Host.Total = p.Host.Layers + p.Host.Staging
	if r.Shared && p.Device.Total+p.Host.Total > r.DeviceBudget ||
		!r.Shared && (p.Device.Total > r.DeviceBudget || p.Host.Total > r.HostBudget) {
		return nil
	}
	busy, bound := p.Time.Max()
	p.PassTime = busy
	if streamed > 0 {
		p.PassTime = max(busy, r.simulate(p.Layers, k))
	}
	p.Stall = p.PassTime - busy
	p.Bound = bound
	if p.PassTime > 0 {
		p.TokensPerSecond = float64(r.Batch) / p.PassTime.Seconds()
	}
	return p
}

// simulatedPasses is how many passes simulate runs; the last one is
// measured, the earlier ones fill the pipeline as in steady decoding.
const simulatedPasses = 3

// simulate plays the pipeline for a few passes and returns the duration of
// the last one. Each link (storage, h2d, compute) serves one transfer at a
// time, in layer order, for the transfer's busy time; data arrives one link
// latency after its transfer ends (latency overlaps other transfers, as
// with several commands in flight). A streamed layer needs a free device
// slot (freed when the compute of the streamed layer k before it ends) and,
// when it comes from storage on a separate device, a free host staging slot
// (freed when its h2d copy of the tier-C layer k before it ends). Compute of
// a layer starts when the previous compute ended and its data arrived.
func (r *Request) simulate(layers []LayerPlan, k int) time.Duration {
	l := r.Links
	var storFree, h2dFree, compFree time.Duration
	var slotFree, stageFree []time.Duration // release times, in stream order
	var passEnd [simulatedPasses]time.Duration
	for pass := range simulatedPasses {
		for _, lp := range layers {
			ready := compFree
			if lp.Tier != TierA {
				slot := time.Duration(0)
				if m := len(slotFree) - k; m >= 0 {
					slot = slotFree[m]
				}
				var arrive time.Duration
				switch {
				case lp.Tier == TierC && r.Shared:
					start := max(storFree, slot)
					storFree = start + lp.Time.Storage
					arrive = storFree + l.StorageLatency
				case lp.Tier == TierC:
					stage := time.Duration(0)
					if m := len(stageFree) - k; m >= 0 {
						stage = stageFree[m]
					}
					start := max(storFree, stage)
					storFree = start + lp.Time.Storage
					staged := storFree + l.StorageLatency
					start = max(h2dFree, staged, slot)
					h2dFree = start + lp.Time.HostToDevice
					stageFree = append(stageFree, h2dFree)
					arrive = h2dFree + l.HostToDeviceLatency
				default: // TierB
					start := max(h2dFree, slot)
					h2dFree = start + lp.Time.HostToDevice
					arrive = h2dFree + l.HostToDeviceLatency
				}
				ready = max(ready, arrive)
			}
			compFree = ready + lp.Time.Compute
			if lp.Tier != TierA {
				slotFree = append(slotFree, compFree)
			}
		}
		compFree += seconds(float64(r.Sizes.Output) / l.Compute)
		passEnd[pass] = compFree
	}
	return passEnd[simulatedPasses-1] - passEnd[simulatedPasses-2]
}

// better orders candidate plans: faster pass, then fewer bytes moved, then
// less device memory (the shallowest pipeline that hides the latency).
func better(a, b *Plan) bool {
	const tol = 1e-9
	ta, tb := float64(a.PassTime), float64(b.PassTime)
	if math.Abs(ta-tb) > tol*math.Max(ta, tb) {
		return ta < tb
	}
	ma, mb := a.Moved.Storage+a.Moved.HostToDevice, b.Moved.Storage+b.Moved.HostToDevice
	if ma != mb {
		return ma < mb
	}
	if a.Device.Total != b.Device.Total {
		return a.Device.Total < b.Device.Total
	}
	return a.Depth < b.Depth
}

func seconds(s float64) time.Duration {
	if math.IsInf(s, 0) || math.IsNaN(s) || s > math.MaxInt64/1e9 {
		return math.MaxInt64
	}
	return time.Duration(s * 1e9)
}
