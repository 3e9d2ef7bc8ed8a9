package tier

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// ExpertPlan places a mixture-of-experts model's experts one by one: an
// expert is either resident (held in memory and used in place) or stays
// on storage and is read into a buffer when a pass routes a token to it. A
// token touches only the experts its router picks, so the experts worth
// memory are the ones used most per byte they take.
type ExpertPlan struct {
	// Resident says, per layer and expert, whether the expert is held in
	// memory.
	Resident [][]bool `json:"resident"`
	// ResidentBytes and StorageBytes sum the two sides.
	ResidentBytes int64 `json:"resident_bytes"`
	StorageBytes  int64 `json:"storage_bytes"`
	// Buffers is how many read buffers of BufferBytes each the storage
	// experts need: enough for every storage expert of the layer that has
	// the most, since one pass may route to all of them.
	Buffers     int   `json:"buffers"`
	BufferBytes int64 `json:"buffer_bytes"`
	// Hit is the share of the routing counts the plan was made from that
	// resident experts serve: the expected share of expert uses that read
	// nothing (with no counts, the share of experts resident).
	Hit float64 `json:"hit"`
	// Device says, on a GPU, which experts are also held in device memory
	// and computed there (PlaceOnDevice; nil when none); DeviceBytes sums
	// them, and DeviceHit is the share of the counts they serve (with no
	// counts, the share of experts on the device). The other picked
	// experts are computed on the CPU, from Resident's or read buffers.
	Device      [][]bool `json:"device,omitempty"`
	DeviceBytes int64    `json:"device_bytes,omitempty"`
	DeviceHit   float64  `json:"device_hit,omitempty"`
}

// DeviceCost is what PlaceOnDevice weighs besides the experts' bytes.
// Used is the picks a token makes in a layer. Hop is the CPU's cost of a
// layer it has any pick of beyond the picks' bytes (waking its threads,
// the hidden state's round trip), in the bytes it reads in that time: a
// layer whose every expert is in device memory needs no host, so holding
// the last experts of a layer saves a token Hop besides their bytes. With
// Hop 0 (or Used 0) experts go by use per byte alone.
//
// Holdout, when set, is routing counts of other tokens than the counts
// placed by (a held-out half of a calibration): the counts of a few
// hundred tokens can show a skew the next tokens do not share, and a
// placement that trusts it puts a little of every layer on the device
// where whole layers would have saved the CPU more. With Holdout,
// PlaceOnDevice makes each of its placements from counts (the envelope
// above, and whole layers first), keeps the one whose CPU cost a token is
// lowest on Holdout's shares, and makes that one again from both counts.
type DeviceCost struct {
	Used    int
	Hop     int64
	Holdout [][]uint64
}

// PlaceOnDevice chooses the experts a GPU holds in device memory, set in
// p.Device with DeviceBytes and DeviceHit, within budget bytes: it weighs,
// per layer, the CPU's expected cost a token (the bytes of the picks the
// device lacks, and cost.Hop whenever a token picks any of them, from
// each expert's share of counts, nil when none were measured) against
// the bytes of the layer's experts held, most used per byte first (each
// layer's best steps first: a near-uniform routing is worth whole layers,
// a skewed one each layer's hot experts), then fills what is left by use
// per byte (RankExperts). It replaces an earlier choice; a budget of 0 or
// less places none.
func (p *ExpertPlan) PlaceOnDevice(sizes [][]int64, counts [][]uint64, budget int64, cost DeviceCost) {
	p.Device, p.DeviceBytes, p.DeviceHit = nil, 0, 0
	if budget <= 0 {
		return
	}
	place := placement(sizes, budget, cost)
	if h := cost.Holdout; holdsOut(sizes, counts, cost) {
		place = choosePlacement(sizes, counts, budget, cost)
		counts = AddCounts(counts, h)
	}
	var left int64
	p.Device, left = place(counts)
	p.DeviceBytes = budget - left
	p.setDeviceHit(counts)
}

// setDeviceHit sets DeviceHit from Device and counts (nil, or not of
// Device's shape: the share of experts), and makes an empty Device nil.
func (p *ExpertPlan) setDeviceHit(counts [][]uint64) {
	if len(counts) != len(p.Device) {
		counts = nil
	}
	for l := range counts {
		if len(counts[l]) != len(p.Device[l]) {
			counts = nil
			break
		}
	}
	var hit, all uint64
	n, experts := 0, 0
	for l := range p.Device {
		for e, on := range p.Device[l] {
			experts++
			if counts != nil {
				all += counts[l][e]
				if on {
					hit += counts[l][e]
				}
			}
			if on {
				n++
			}
		}
	}
	p.DeviceHit = 0
	switch {
	case n == 0:
		p.Device = nil
	case all > 0:
		p.DeviceHit = float64(hit) / float64(all)
	default:
		p.DeviceHit = float64(n) / float64(experts)
	}
}

// A placer makes a device placement from routing counts: the mask and the
// budget's bytes it leaves.
type placer func(counts [][]uint64) ([][]bool, int64)

// placement is PlaceOnDevice's envelope way within budget: placeLayers
// when cost has a Hop to weigh, then use per byte.
func placement(sizes [][]int64, budget int64, cost DeviceCost) placer {
	return func(counts [][]uint64) ([][]bool, int64) {
		dev := newMask(sizes)
		left := budget
		if cost.Hop > 0 && cost.Used > 0 {
			left = placeLayers(sizes, counts, cost, dev, left)
		}
		return dev, FillExperts(RankExperts(sizes, counts), sizes, dev, left)
	}
}

// holdsOut reports whether cost's Holdout can choose a placement for
// counts of sizes' shape.
func holdsOut(sizes [][]int64, counts [][]uint64, cost DeviceCost) bool {
	return cost.Holdout != nil && cost.Used > 0 && sameShape(cost.Holdout, sizes) && (counts == nil || sameShape(counts, sizes))
}

// choosePlacement is the way, the envelope or WholeLayersFirst, whose
// placement made from counts costs the CPU least on cost.Holdout.
func choosePlacement(sizes [][]int64, counts [][]uint64, budget int64, cost DeviceCost) placer {
	place := placement(sizes, budget, cost)
	dev, _ := place(counts)
	if lay, _ := WholeLayersFirst(sizes, counts, budget); CPUCost(sizes, cost.Holdout, lay, cost) < CPUCost(sizes, cost.Holdout, dev, cost) {
		return func(counts [][]uint64) ([][]bool, int64) { return WholeLayersFirst(sizes, counts, budget) }
	}
	return place
}

// DeviceSwap puts layer Layer's expert In in device memory in the place
// of layer OutLayer's expert Out, which is at least as large: while a
// model serves, device memory is re-used expert by expert.
type DeviceSwap struct {
	Layer, In     int
	OutLayer, Out int
}

// deviceSwapGain is the share of the CPU's expected cost a token by which
// a placement made from recent routing must beat the current one on
// other tokens' routing before DeviceSwaps moves an expert: a window of
// a few hundred tokens reads some noise as skew, and a move that gains
// less than the noise only churns.
const deviceSwapGain = 0.05

// DeviceSwaps chooses up to max swaps that move p.Device toward the
// placement PlaceOnDevice would make now, for a model that serves:
// counts is a window of routing and cost.Holdout (required) the window
// after it. The way (PlaceOnDevice's two) is chosen on Holdout, and the
// placement it makes from counts alone must cost the CPU less than
// p.Device on Holdout by deviceSwapGain, or nothing moves: the current
// placement was made from other tokens too, so the two compete on tokens
// neither saw. Then the target is made from both windows within the bytes
// held now; the experts it adds (the layers nearest to whole first, then
// by use per byte) each take the place of the least used per byte of the
// experts it drops that is at least as large. Apply what was done with
// ApplyDeviceSwaps.
func (p *ExpertPlan) DeviceSwaps(sizes [][]int64, counts [][]uint64, cost DeviceCost, max int) []DeviceSwap {
	if p.Device == nil || max <= 0 || counts == nil || !holdsOut(sizes, counts, cost) || !sameShape(counts, sizes) {
		return nil
	}
	budget := p.DeviceBytes
	place := choosePlacement(sizes, counts, budget, cost)
	cand, _ := place(counts)
	if now := CPUCost(sizes, cost.Holdout, p.Device, cost); CPUCost(sizes, cost.Holdout, cand, cost) >= (1-deviceSwapGain)*now {
		return nil
	}
	both := AddCounts(counts, cost.Holdout)
	target, _ := place(both)
	missing := make([]int, len(sizes))
	var ins, outs []ExpertRank
	for l := range sizes {
		for e := range sizes[l] {
			switch on := l < len(p.Device) && e < len(p.Device[l]) && p.Device[l][e]; {
			case target[l][e] && !on:
				ins = append(ins, ExpertRank{l, e})
				missing[l]++
			case on && !target[l][e]:
				outs = append(outs, ExpertRank{l, e})
			}
		}
	}
	perByte := byUsePerByte(sizes, both)
	slices.SortStableFunc(ins, func(a, b ExpertRank) int {
		if c := cmp.Compare(missing[a.Layer], missing[b.Layer]); c != 0 {
			return c
		}
		return perByte(b, a)
	})
	slices.SortStableFunc(outs, perByte)
	var swaps []DeviceSwap
	for _, in := range ins {
		if len(swaps) == max {
			break
		}
		k := slices.IndexFunc(outs, func(o ExpertRank) bool { return sizes[o.Layer][o.Expert] >= sizes[in.Layer][in.Expert] })
		if k < 0 {
			continue
		}
		swaps = append(swaps, DeviceSwap{Layer: in.Layer, In: in.Expert, OutLayer: outs[k].Layer, Out: outs[k].Expert})
		outs = slices.Delete(outs, k, k+1)
	}
	return swaps
}

// ApplyDeviceSwaps records swaps done in p.Device and DeviceBytes, and
// DeviceHit by counts (nil: the share of experts on the device).
func (p *ExpertPlan) ApplyDeviceSwaps(sizes [][]int64, swaps []DeviceSwap, counts [][]uint64) {
	if p.Device == nil {
		return
	}
	for _, s := range swaps {
		p.Device[s.OutLayer][s.Out] = false
		p.Device[s.Layer][s.In] = true
		p.DeviceBytes += sizes[s.Layer][s.In] - sizes[s.OutLayer][s.Out]
	}
	p.setDeviceHit(counts)
}

// WholeLayersFirst holds whole layers of experts within budget bytes, the
// layers with the most routing counts first (nil counts: in order), then
// fills what is left by use per byte (RankExperts), and returns the mask
// and the bytes left: llama.cpp's --n-cpu-moe shape, where every pick of
// a held layer is the GPU's and the layer needs no host at all.
func WholeLayersFirst(sizes [][]int64, counts [][]uint64, budget int64) ([][]bool, int64) {
	dev := newMask(sizes)
	type layer struct {
		l     int
		bytes int64
		use   uint64
	}
	ls := make([]layer, len(sizes))
	for l := range sizes {
		ls[l].l = l
		for e, b := range sizes[l] {
			ls[l].bytes += b
			if l < len(counts) && e < len(counts[l]) {
				ls[l].use += counts[l][e]
			}
		}
	}
	slices.SortStableFunc(ls, func(a, b layer) int { return cmp.Compare(b.use, a.use) })
	left := budget
	for _, x := range ls {
		if x.bytes <= left {
			left -= x.bytes
			for e := range dev[x.l] {
				dev[x.l][e] = true
			}
		}
	}
	return dev, FillExperts(RankExperts(sizes, counts), sizes, dev, left)
}

// CPUCost is the CPU's expected cost a token, in bytes read, of the
// experts dev leaves it, by each layer's shares of counts (layerShares):
// the picks' bytes off the device, and cost.Hop for each layer a token
// picks any expert of there.
func CPUCost(sizes [][]int64, counts [][]uint64, dev [][]bool, cost DeviceCost) float64 {
	k := float64(cost.Used)
	var total float64
	for l, sz := range sizes {
		share := layerShares(counts, l, len(sz))
		var off, held float64
		for e, b := range sz {
			if l < len(dev) && e < len(dev[l]) && dev[l][e] {
				held += share[e]
				continue
			}
			off += k * share[e] * float64(b)
		}
		if off > 0 {
			total += off + float64(cost.Hop)*(1-math.Pow(min(1, held), k))
		}
	}
	return total
}

// newMask is an all-false mask of sizes' shape.
func newMask(sizes [][]int64) [][]bool {
	m := make([][]bool, len(sizes))
	for l := range sizes {
		m[l] = make([]bool, len(sizes[l]))
	}
	return m
}

// sameShape reports whether counts has one entry per expert of sizes.
func sameShape(counts [][]uint64, sizes [][]int64) bool {
	if len(counts) != len(sizes) {
		return false
	}
	for l := range sizes {
		if len(counts[l]) != len(sizes[l]) {
			return false
		}
	}
	return true
}

// AddCounts is a + b, per layer and expert (a nil: b), in new slices.
func AddCounts(a, b [][]uint64) [][]uint64 {
	out := make([][]uint64, len(b))
	for l := range b {
		out[l] = slices.Clone(b[l])
		if l < len(a) {
			for e := range out[l] {
				if e < len(a[l]) {
					out[l][e] += a[l][e]
				}
			}
		}
	}
	return out
}

// CountsSince is after - before, per layer and expert: the routing counts
// of the passes between two readings (an entry before lacks counts from
// 0).
func CountsSince(before, after [][]uint64) [][]uint64 {
	out := make([][]uint64, len(after))
	for l := range after {
		out[l] = slices.Clone(after[l])
		if l < len(before) {
			for e := range out[l] {
				if e < len(before[l]) {
					out[l][e] -= before[l][e]
				}
			}
		}
	}
	return out
}

// OffDevice is v (routing counts, or sizes) with the entries of the
// experts device holds (by layer and expert; nil: none) at 0, in a copy:
// the picks left to the CPU, which never computes an expert the device
// holds (what host residency goes by), or the bytes it reads.
func OffDevice[T uint64 | int64](v [][]T, device [][]bool) [][]T {
	out := make([][]T, len(v))
	for l := range v {
		out[l] = slices.Clone(v[l])
		for x := range out[l] {
			if l < len(device) && x < len(device[l]) && device[l][x] {
				out[l][x] = 0
			}
		}
	}
	return out
}

// placeLayers makes resident, in resident, the steps of each layer's
// experts (most used per byte first) that save the CPU the most per byte
// held, while they fit in left bytes, and returns what is left. A layer's
// saving after its first m experts is the expected bytes of the picks
// they take off the CPU plus cost.Hop times the chance that a token then
// picks none of the rest; its steps are the upper concave envelope of
// that saving against the bytes held, so a step that pays only together
// with the next ones (the last experts of a near-uniform layer) is taken
// with them. Steps of all layers go by saving per byte; a step that does
// not fit ends its layer's.
func placeLayers(sizes [][]int64, counts [][]uint64, cost DeviceCost, resident [][]bool, left int64) int64 {
	type step struct {
		layer, from, to int     // experts [from, to) of the layer's order
		bytes           int64   // their bytes
		gain            float64 // the saving they add, in bytes a token
	}
	var steps []step
	orders := make([][]int, len(sizes))
	for l, sz := range sizes {
		E := len(sz)
		if E == 0 {
			continue
		}
		share := layerShares(counts, l, E)
		ord := make([]int, E)
		for e := range ord {
			ord[e] = e
		}
		slices.SortStableFunc(ord, func(a, b int) int {
			return cmp.Compare(share[b]*float64(sz[a]), share[a]*float64(sz[b]))
		})
		orders[l] = ord
		// saving(m): the picks' bytes of ord[:m], and Hop times the chance
		// a token's picks all fall in ord[:m] (each of the Used picks a
		// draw by share: an estimate that needs only the shares).
		k := float64(cost.Used)
		held, out := make([]int64, E+1), make([]float64, E+1)
		var rest float64 = 1 // share of the experts not yet held
		var picked float64   // the picks' bytes a token of ord[:m]
		for m := 0; m <= E; m++ {
			if m > 0 {
				e := ord[m-1]
				held[m] = held[m-1] + sz[e]
				rest -= share[e]
				picked += k * share[e] * float64(sz[e])
			}
			none := math.Pow(max(0, 1-rest), k)
			if m == E {
				none = 1
			}
			out[m] = picked + float64(cost.Hop)*none
		}
		// The upper concave envelope from m = 0: from each point, the
		// farthest point of the steepest chord.
		for m := 0; m < E; {
			best, bestSlope := -1, math.Inf(-1)
			for j := m + 1; j <= E; j++ {
				db := float64(held[j] - held[m])
				if db <= 0 {
					continue
				}
				if sl := (out[j] - out[m]) / db; sl >= bestSlope {
					best, bestSlope = j, sl
				}
			}
			if best < 0 {
				break
			}
			steps = append(steps, step{l, m, best, held[best] - held[m], out[best] - out[m]})
			m = best
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int {
		return cmp.Compare(b.gain*float64(a.bytes), a.gain*float64(b.bytes))
	})
	ended := make([]bool, len(sizes))
	next := make([]int, len(sizes))
	for _, st := range steps {
		// A layer's steps sort in its own order (the envelope's slopes
		// fall), so a step comes after the one before it in its layer.
		if ended[st.layer] || next[st.layer] != st.from {
			continue
		}
		if st.bytes > left {
			ended[st.layer] = true
			continue
		}
		for _, e := range orders[st.layer][st.from:st.to] {
			resident[st.layer][e] = true
		}
		left -= st.bytes
		next[st.layer] = st.to
	}
	return left
}

// layerShares estimates each of layer l's E experts' share of its picks
// from counts (nil: equal shares): the measured shares shrunk toward equal
// ones by the data-driven intensity of Hausser and Strimmer's shrinkage
// estimator, so that a few passes of a near-uniform routing, whose
// measured shares are mostly noise, read as uniform, while a skewed one
// keeps its skew. Ranking the raw counts would take the noise's hot
// experts for hot ones.
func layerShares(counts [][]uint64, l, E int) []float64 {
	share := make([]float64, E)
	var n float64
	if counts != nil {
		for _, c := range counts[l] {
			n += float64(c)
		}
	}
	t := 1 / float64(E)
	if n <= 1 {
		for e := range share {
			share[e] = t
		}
		return share
	}
	var sq, dev float64
	for e, c := range counts[l] {
		p := float64(c) / n
		share[e] = p
		sq += p * p
		dev += (t - p) * (t - p)
	}
	lambda := 1.0
	if dev > 0 {
		lambda = min(1, max(0, (1-sq)/((n-1)*dev)))
	}
	for e := range share {
		share[e] = lambda*t + (1-lambda)*share[e]
	}
	return share
}

// DeviceCount is how many experts are held in device memory.
func (p *ExpertPlan) DeviceCount() int { return countSet(p.Device) }

// DeviceWholeLayers counts the layers whose every expert is in device
// memory: those need no host at all.
func (p *ExpertPlan) DeviceWholeLayers() int { return WholeLayers(p.Device) }

// WholeLayers counts the layers of a per-layer, per-expert mask whose
// every expert is set.
func WholeLayers(m [][]bool) int {
	n := 0
	for _, l := range m {
		if len(l) > 0 && !slices.Contains(l, false) {
			n++
		}
	}
	return n
}

// countSet counts the true entries of a per-layer, per-expert mask.
func countSet(m [][]bool) int {
	n := 0
	for _, l := range m {
		for _, v := range l {
			if v {
				n++
			}
		}
	}
	return n
}

// DeviceLists is p.Device as the expert indexes per layer
// (engine/gpu's Options.ResidentExperts).
func (p *ExpertPlan) DeviceLists() [][]int {
	if p.Device == nil {
		return nil
	}
	out := make([][]int, len(p.Device))
	for l, d := range p.Device {
		for e, on := range d {
			if on {
				out[l] = append(out[l], e)
			}
		}
	}
	return out
}

// SetDeviceLists makes p.Device the experts lists names per layer (as
// DeviceLists gives them; out of range ones are left out), DeviceBytes
// their sizes' sum and DeviceHit their share of counts (nil: of the
// experts): the plan read back from what a device holds.
func (p *ExpertPlan) SetDeviceLists(sizes [][]int64, lists [][]int, counts [][]uint64) {
	p.Device, p.DeviceBytes = newMask(sizes), 0
	for l := range sizes {
		if l >= len(lists) {
			continue
		}
		for _, e := range lists[l] {
			if e >= 0 && e < len(sizes[l]) && !p.Device[l][e] {
				p.Device[l][e] = true
				p.DeviceBytes += sizes[l][e]
			}
		}
	}
	p.setDeviceHit(counts)
}

// ExpertBudget is the memory p leaves for a mixture-of-experts model's
// experts (the resident ones and the read buffers), which are computed on
// the CPU and so live in host memory whatever runs the layers: with one
// shared memory (the CPU backend) what the layers, KV cache, scratch and
// staging leave of it; with a device beside the host (a GPU) the host
// budget less tier B's pinned layers and tier C's staging.
func (p *Plan) ExpertBudget() int64 {
	if p.Shared {
		return p.Device.Budget - p.Device.Total - p.Host.Total
	}
	return p.Host.Budget - p.Host.Total
}

// AllResident reports whether every expert is held in memory.
func (p *ExpertPlan) AllResident() bool { return p.StorageBytes == 0 }

// ResidentCount is how many experts are resident.
func (p *ExpertPlan) ResidentCount() int { return countSet(p.Resident) }

// PlanExperts places experts of the given sizes (per layer, per expert)
// within budget bytes: every expert resident if they all fit, else the
// read buffers first and then experts in order of use per byte — counts
// (routing counts per layer and expert; nil or all zero when none were
// measured) plus one, so an unmeasured expert still ranks by its size —
// ties to the lower layer and expert. It fails with ErrNoFit when not even
// the buffers fit.
func PlanExperts(sizes [][]int64, counts [][]uint64, budget int64) (ExpertPlan, error) {
	var p ExpertPlan
	var total int64
	for l, s := range sizes {
		for e, n := range s {
			if n <= 0 {
				return p, fmt.Errorf("expert plan: layer %d expert %d has size %d", l, e, n)
			}
			total += n
			p.BufferBytes = max(p.BufferBytes, n)
		}
		if counts != nil && (len(counts) != len(sizes) || len(counts[l]) != len(s)) {
			return p, fmt.Errorf("expert plan: counts for %d layers (layer %d: %d experts), sizes for %d (%d experts)",
				len(counts), l, len(counts[min(l, len(counts)-1)]), len(sizes), len(s))
		}
	}
	p.Resident = make([][]bool, len(sizes))
	for l := range sizes {
		p.Resident[l] = make([]bool, len(sizes[l]))
	}
	if total <= budget {
		for l := range p.Resident {
			for e := range p.Resident[l] {
				p.Resident[l][e] = true
			}
		}
		p.ResidentBytes, p.BufferBytes, p.Hit = total, 0, 1
		return p, nil
	}
	// Buffers for the worst layer as if nothing were resident; refined
	// below once the resident set is known.
	worst := 0
	for _, s := range sizes {
		worst = max(worst, len(s))
	}
	if int64(worst)*p.BufferBytes > budget {
		return p, fmt.Errorf("%w: the experts' read buffers (%d x %s) exceed the %s left for experts",
			ErrNoFit, worst, FormatBytes(p.BufferBytes), FormatBytes(budget))
	}
	order := RankExperts(sizes, counts)
	left := FillExperts(order, sizes, p.Resident, budget-int64(worst)*p.BufferBytes)
	// Fewer storage experts per layer need fewer buffers: the bytes freed
	// take more experts, as long as the buffers still cover every layer.
	for {
		p.Buffers = 0
		for l := range sizes {
			n := 0
			for e := range sizes[l] {
				if !p.Resident[l][e] {
					n++
				}
			}
			p.Buffers = max(p.Buffers, n)
		}
		freed := int64(worst-p.Buffers) * p.BufferBytes
		worst = p.Buffers
		if freed == 0 {
			break
		}
		left = FillExperts(order, sizes, p.Resident, left+freed)
	}
	var hit, all uint64
	for _, x := range order {
		var c uint64
		if counts != nil {
			c = counts[x.Layer][x.Expert]
		}
		if p.Resident[x.Layer][x.Expert] {
			p.ResidentBytes += sizes[x.Layer][x.Expert]
			hit += c
		} else {
			p.StorageBytes += sizes[x.Layer][x.Expert]
		}
		all += c
	}
	if all > 0 {
		p.Hit = float64(hit) / float64(all)
	} else {
		p.Hit = float64(p.ResidentCount()) / float64(len(order))
	}
	return p, nil
}

// ExpertRank names one expert: its layer and its index there.
type ExpertRank struct{ Layer, Expert int }

// RankExperts lists every expert of sizes (per layer, per expert) most
// used per byte first: its count (counts per layer and expert; nil when
// none were measured) plus one, so an unmeasured expert still ranks by its
// size, over its size; ties go to the lower layer and expert. It is the
// order memory is filled with experts in.
func RankExperts(sizes [][]int64, counts [][]uint64) []ExpertRank {
	var order []ExpertRank
	for l, s := range sizes {
		for e := range s {
			order = append(order, ExpertRank{l, e})
		}
	}
	perByte := byUsePerByte(sizes, counts)
	slices.SortStableFunc(order, func(a, b ExpertRank) int { return perByte(b, a) })
	return order
}

// byUsePerByte compares two experts by use per byte, the less used first:
// the count (nil counts: none) plus one, so an unmeasured expert still
// ranks by its size, over the size, compared without division
// ((a+1)/na against (b+1)/nb).
func byUsePerByte(sizes [][]int64, counts [][]uint64) func(a, b ExpertRank) int {
	use := func(x ExpertRank) float64 {
		if counts == nil {
			return 1
		}
		return float64(counts[x.Layer][x.Expert] + 1)
	}
	return func(a, b ExpertRank) int {
		return cmp.Compare(use(a)*float64(sizes[b.Layer][b.Expert]), use(b)*float64(sizes[a.Layer][a.Expert]))
	}
}

// FillExperts makes resident, in order, every expert not yet resident
// whose size fits in what is left of left bytes, and returns what is left.
func FillExperts(order []ExpertRank, sizes [][]int64, resident [][]bool, left int64) int64 {
	for _, x := range order {
		if n := sizes[x.Layer][x.Expert]; !resident[x.Layer][x.Expert] && n <= left {
			resident[x.Layer][x.Expert] = true
			left -= n
		}
	}
	return left
}
