package tier

import (
	"fmt"
	"math"
	"time"
)

// The hybrid placement (tier B-cpu): a tier-B layer whose feed-forward
// block the CPU computes straight from its pinned host copy while the GPU
// computes its attention, for which only the attention part crosses PCIe.
// At batch 1 a pass then moves the off-GPU bytes over both links at once,
// host DRAM into the CPU and PCIe into the GPU's slots, instead of over
// PCIe alone. The CPU's rate falls as the batch grows (its GEMM turns
// compute-bound; a streamed layer costs PCIe the same at any batch), so
// the placement is chosen per batch size.

// HybridLayer is one streamed layer as the hybrid planner sees it.
type HybridLayer struct {
	// Index is the layer's index in the model.
	Index int `json:"index"`
	// Full is what streaming the whole layer moves; Attn what moves when
	// the CPU takes its FFN (the attention part, a prefix of the layer);
	// FFN the bytes the CPU then reads. FFN is 0 for a layer the CPU cannot
	// take (stored in a form only the GPU decodes).
	Full int64 `json:"full"`
	Attn int64 `json:"attn"`
	FFN  int64 `json:"ffn"`
	// Stored marks a layer read from storage every pass (tier C): the
	// pipeline carries no copy of it, or of a layer after it, into the
	// next pass (engine/stream's Device).
	Stored bool `json:"stored,omitempty"`
}

// minHybridGain is how much faster than streaming alone a placement with
// CPU layers must simulate to be taken.
const minHybridGain = 0.03

// DefaultHop is a layer's trip to the CPU when nothing else is known: a
// stream synchronisation and two copies of a few kilobytes.
const DefaultHop = 60 * time.Microsecond

// HybridRates are the speeds the hybrid planner balances.
type HybridRates struct {
	// HostToDevice is the pinned copy rate into a device slot (bytes/s).
	HostToDevice float64
	// CPU is the CPU's FFN rate (weight bytes/s) at this batch size.
	CPU float64
	// Hop is the fixed cost of taking one layer's FFN to the CPU: waiting
	// for the GPU to reach it and the two small copies of the hidden state.
	Hop time.Duration
	// Lead and Tail are the GPU's time in a pass before its first
	// streamed layer (the resident layers ahead of it) and after the last
	// (the layers after it, the output head): the copy engine runs
	// through them (a pass's first copies go at its start, or are carried
	// over from the pass before) while the CPU waits. Measured in passes
	// (engine/stream's Stats); zero until then.
	Lead, Tail time.Duration
}

// HybridPlan is the placement for one batch size.
type HybridPlan struct {
	// Batch is the batch size (tokens a pass) the plan was made for.
	Batch int `json:"batch"`
	// CPU lists, in order, the layers whose FFN the CPU computes.
	CPU []int `json:"cpu_ffn"`
	// Moved is the bytes over PCIe a pass; CPUBytes what the CPU reads.
	Moved    int64 `json:"moved"`
	CPUBytes int64 `json:"cpu_bytes"`
	// Pass is the expected time between the starts of two passes in a
	// run of them, Lead and Tail included; Streamed the same with every
	// layer streamed (the plan without the CPU).
	Pass     time.Duration `json:"pass_ns"`
	Streamed time.Duration `json:"streamed_ns"`
	// Lead and Tail are the GPU's time outside the streamed layers the
	// plan was made for (HybridRates).
	Lead time.Duration `json:"lead_ns,omitempty"`
	Tail time.Duration `json:"tail_ns,omitempty"`
}

// PlanHybrid chooses which of the streamed layers (in model order) take
// their FFN on the CPU at rates r, for a pipeline whose ring holds depth
// whole layers. It simulates a run of passes (copies in order, each into
// its place in the ring once compute has released the layers it
// overwrites, the next pass's first ones carried over as the pipeline
// does: a CPU layer copies only its attention, so more of them fit; it
// frees its place once its attention ran and then holds compute for its
// hop and FFN) for every count of CPU layers, spread evenly over the
// layers that allow it, and keeps the fastest; ties keep fewer CPU
// layers.
func PlanHybrid(layers []HybridLayer, depth int, r HybridRates, batch int) (HybridPlan, error) {
	if depth < 1 {
		return HybridPlan{}, fmt.Errorf("hybrid plan: depth %d", depth)
	}
	if !(r.HostToDevice > 0) || !(r.CPU >= 0) {
		return HybridPlan{}, fmt.Errorf("hybrid plan: rates h2d %g, cpu %g", r.HostToDevice, r.CPU)
	}
	var eligible []int // positions in layers
	for i, l := range layers {
		if l.Attn <= 0 || l.Attn > l.Full || l.FFN < 0 {
			return HybridPlan{}, fmt.Errorf("hybrid plan: layer %d: attention %d of %d bytes", l.Index, l.Attn, l.Full)
		}
		if l.FFN > 0 {
			eligible = append(eligible, i)
		}
	}
	onCPU := make([]bool, len(layers))
	streamed := simulateHybrid(layers, onCPU, depth, r)
	best := HybridPlan{Batch: batch, Pass: streamed, Streamed: streamed, Lead: r.Lead, Tail: r.Tail}
	if r.CPU > 0 {
		for x := 1; x <= len(eligible); x++ {
			clear(onCPU)
			for j := 0; j < x; j++ {
				// The j-th of x evenly spaced picks: the CPU's runs fall
				// between streamed layers, whose copies they hide.
				onCPU[eligible[(2*j+1)*len(eligible)/(2*x)]] = true
			}
			if t := simulateHybrid(layers, onCPU, depth, r); t < best.Pass {
				best.Pass = t
				best.CPU = best.CPU[:0]
				for i, c := range onCPU {
					if c {
						best.CPU = append(best.CPU, layers[i].Index)
					}
				}
			}
		}
	}
	best.CPU, best.Pass = refineHybrid(layers, eligible, best.CPU, best.Pass, depth, r)
	if best.Pass > time.Duration(float64(streamed)*(1-minHybridGain)) {
		// The simulation leaves out costs a CPU layer brings (the CPU's
		// work beside the host's launches, the rates' drift in a pass):
		// a plan that is not clearly faster than streaming is not taken.
		best.CPU, best.Pass = nil, streamed
	}
	cpu := map[int]bool{}
	for _, i := range best.CPU {
		cpu[i] = true
	}
	for _, l := range layers {
		if cpu[l.Index] {
			best.Moved += l.Attn
			best.CPUBytes += l.FFN
		} else {
			best.Moved += l.Full
		}
	}
	return best, nil
}

// refineHybrid improves a placement by local search: it tries moving
// each CPU layer to another eligible layer, adding one and dropping one,
// and keeps any change the simulation says is faster, until none is (or a
// bounded number of rounds): an even spread leaves the copy stream idle
// where the pass starts and ends.
func refineHybrid(layers []HybridLayer, eligible []int, cpuIdx []int, pass time.Duration, depth int, r HybridRates) ([]int, time.Duration) {
	if len(eligible) == 0 || r.CPU <= 0 {
		return cpuIdx, pass
	}
	pos := map[int]int{} // layer index -> position in layers
	for i, l := range layers {
		pos[l.Index] = i
	}
	on := make([]bool, len(layers))
	for _, l := range cpuIdx {
		on[pos[l]] = true
	}
	try := func() time.Duration { return simulateHybrid(layers, on, depth, r) }
	for round := 0; round < 4*len(layers); round++ {
		improved := false
		for _, a := range eligible {
			// Toggle a: add or drop one CPU layer.
			on[a] = !on[a]
			if t := try(); t < pass {
				pass, improved = t, true
				continue
			}
			on[a] = !on[a]
			if !on[a] {
				continue
			}
			// Move a's FFN to another eligible layer.
			for _, b := range eligible {
				if on[b] {
					continue
				}
				on[a], on[b] = false, true
				if t := try(); t < pass {
					pass, improved = t, true
					break
				}
				on[a], on[b] = true, false
			}
		}
		if !improved {
			break
		}
	}
	out := cpuIdx[:0:0]
	for i, c := range on {
		if c {
			out = append(out, layers[i].Index)
		}
	}
	return out, pass
}

// simulateHybrid is the time between the starts of two passes in a run
// of them with onCPU's FFNs on the CPU, the layers laid out in the ring
// as the pipeline lays them (LayRing) and the first ones carried into the
// next pass as it carries them: each once the pass before has released
// the last layer its place overlaps. Compute spends Lead before the
// streamed layers and Tail after them; the GPU's own compute on a
// streamed layer is taken as free (it reads a layer in a small fraction
// of the copy's time).
func simulateHybrid(layers []HybridLayer, onCPU []bool, depth int, r HybridRates) time.Duration {
	n := len(layers)
	full := make([]int64, n)
	moved := make([]int64, n)
	for i, l := range layers {
		full[i], moved[i] = l.Full, l.Full
		if onCPU[i] {
			moved[i] = l.Attn
		}
	}
	ring, err := LayRing(moved, RingCapacity(full, depth))
	if err != nil {
		// PlanHybrid's checks (0 < Attn <= Full) make this unreachable;
		// a placement the ring could not hold is never the fastest.
		return time.Duration(math.MaxInt64)
	}
	// wrap[i]: the last layer of a pass whose place layer i's overlaps,
	// for the first layers, which the pass before carries; -1 after.
	wrap := make([]int, n)
	stop := false
	for i := range layers {
		wrap[i] = -1
		if stop = stop || layers[i].Stored || ring.After[i] >= 0; stop {
			continue
		}
		for m := n - 1; m >= i; m-- {
			if ring.Off[m] < ring.Off[i]+ring.Size[i] && ring.Off[i] < ring.Off[m]+ring.Size[m] {
				wrap[i] = m
				break
			}
		}
	}
	// Three passes: the first starts with an empty ring, the second with
	// what the first carried, and the third repeats the second.
	const passes = 3
	released := make([]float64, n) // when compute freed each layer's place, this pass
	before := make([]float64, n)   // the same, the pass before
	var copied, now, lastStart float64
	for p := range passes {
		start := now
		if p == passes-1 {
			lastStart = start
		}
		now += r.Lead.Seconds()
		for i, l := range layers {
			at := max(copied, start)
			switch {
			case ring.After[i] >= 0:
				at = max(copied, released[ring.After[i]])
			case p > 0 && wrap[i] >= 0:
				// Carried: issued once the pass before had issued its own
				// copies and released the layer this one overwrites.
				at = max(copied, before[wrap[i]])
			}
			copied = at + float64(moved[i])/r.HostToDevice
			now = max(now, copied)
			released[i] = now
			if onCPU[i] {
				now += r.Hop.Seconds() + float64(l.FFN)/r.CPU
			}
		}
		now += r.Tail.Seconds()
		copy(before, released)
	}
	return time.Duration((now - lastStart) * float64(time.Second))
}
