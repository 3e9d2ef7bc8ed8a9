package tier

import (
	"fmt"
	"math"
	"time"
)

// The hybrid placement (tier B-cpu): a tier-B layer the CPU computes
// straight from its pinned host copy, whole (its attention over the KV
// cache the layer keeps in host memory, then its feed-forward block:
// nothing of it crosses PCIe) or only its feed-forward block while the
// GPU computes its attention (only the attention part crosses PCIe). At
// batch 1 a pass then moves the off-GPU bytes over both links at once,
// host DRAM into the CPU and PCIe into the GPU's slots, instead of over
// PCIe alone. A run of consecutive whole layers hands the hidden state
// over once, where a layer whose attention the GPU computes hands it over
// at every layer. The CPU's rate falls as the batch grows (its GEMM turns
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
	// Whole says the CPU can compute the whole layer (reading Full bytes).
	Whole bool `json:"whole,omitempty"`
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
	// CPU is the CPU's FFN rate (weight bytes/s) at this batch size;
	// CPUWhole its rate on whole layers (their weight bytes over their
	// time, the attention over the cache in it), 0 meaning CPU's.
	CPU      float64
	CPUWhole float64
	// Hop is the fixed cost of taking the hidden state to the CPU and
	// back: waiting for the GPU to reach the layer and the two small
	// copies. A layer whose FFN alone the CPU computes pays it; a run of
	// whole layers pays it once.
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
	// CPU lists, in order, the layers whose FFN alone the CPU computes;
	// Whole those it computes whole.
	CPU   []int `json:"cpu_ffn"`
	Whole []int `json:"cpu_layers,omitempty"`
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

// Place is where a streamed layer is computed.
type Place uint8

const (
	// OnGPU streams the whole layer to the GPU.
	OnGPU Place = iota
	// FFNOnCPU streams the attention; the CPU computes the FFN.
	FFNOnCPU
	// WholeOnCPU streams nothing: the CPU computes the whole layer.
	WholeOnCPU
)

// allows reports whether layer l may be placed at p.
func (l *HybridLayer) allows(p Place) bool {
	switch p {
	case FFNOnCPU:
		return l.FFN > 0
	case WholeOnCPU:
		return l.Whole
	}
	return true
}

// PlanHybrid chooses where each of the streamed layers (in model order)
// is computed at rates r, for a pipeline whose ring holds depth whole
// layers. It simulates a run of passes (copies in order, each into its
// place in the ring once compute has released the layers it overwrites,
// the next pass's first ones carried over as the pipeline does: a layer
// whose FFN the CPU takes copies only its attention, so more of them fit,
// and frees its place once its attention ran, then holds compute for its
// hop and FFN; a whole CPU layer takes no place at all) for every count
// of whole CPU layers and of FFNs on the CPU among the rest, each spread
// evenly over the layers that allow it, then improves the fastest by
// local search; ties keep fewer CPU layers.
func PlanHybrid(layers []HybridLayer, depth int, r HybridRates, batch int) (HybridPlan, error) {
	if depth < 1 {
		return HybridPlan{}, fmt.Errorf("hybrid plan: depth %d", depth)
	}
	if !(r.HostToDevice > 0) || !(r.CPU >= 0) {
		return HybridPlan{}, fmt.Errorf("hybrid plan: rates h2d %g, cpu %g", r.HostToDevice, r.CPU)
	}
	for _, l := range layers {
		if l.Attn <= 0 || l.Attn > l.Full || l.FFN < 0 {
			return HybridPlan{}, fmt.Errorf("hybrid plan: layer %d: attention %d of %d bytes", l.Index, l.Attn, l.Full)
		}
	}
	place := make([]Place, len(layers))
	streamed := simulateHybrid(layers, place, depth, r)
	best := HybridPlan{Batch: batch, Pass: streamed, Streamed: streamed, Lead: r.Lead, Tail: r.Tail}
	bestPlace := make([]Place, len(layers))
	if r.CPU > 0 {
		// Every count of whole layers, evenly spaced over the layers that
		// allow it, with every count of FFNs evenly spaced over the rest.
		var whole []int // positions in layers
		for i := range layers {
			if layers[i].allows(WholeOnCPU) {
				whole = append(whole, i)
			}
		}
		var ffn []int
		for xw := 0; xw <= len(whole); xw++ {
			clear(place)
			spread(place, whole, xw, WholeOnCPU)
			ffn = ffn[:0]
			for i := range layers {
				if place[i] == OnGPU && layers[i].allows(FFNOnCPU) {
					ffn = append(ffn, i)
				}
			}
			for xf := 0; xf <= len(ffn); xf++ {
				if xw+xf == 0 {
					continue
				}
				spread(place, ffn, len(ffn), OnGPU)
				spread(place, ffn, xf, FFNOnCPU)
				if t := simulateHybrid(layers, place, depth, r); t < best.Pass {
					best.Pass = t
					copy(bestPlace, place)
				}
			}
		}
		best.Pass = refineHybrid(layers, bestPlace, best.Pass, depth, r)
	}
	if best.Pass > time.Duration(float64(streamed)*(1-minHybridGain)) {
		// The simulation leaves out costs a CPU layer brings (the CPU's
		// work beside the host's launches, the rates' drift in a pass):
		// a plan that is not clearly faster than streaming is not taken.
		clear(bestPlace)
		best.Pass = streamed
	}
	for i, l := range layers {
		switch bestPlace[i] {
		case FFNOnCPU:
			best.CPU = append(best.CPU, l.Index)
			best.Moved += l.Attn
			best.CPUBytes += l.FFN
		case WholeOnCPU:
			best.Whole = append(best.Whole, l.Index)
			best.CPUBytes += l.Full
		default:
			best.Moved += l.Full
		}
	}
	return best, nil
}

// spread places x of the layers at positions eligible, evenly spaced: the
// j-th of x picks. Spread out, the CPU's runs fall between streamed
// layers, whose copies they hide.
func spread(place []Place, eligible []int, x int, p Place) {
	for j := 0; j < x; j++ {
		place[eligible[(2*j+1)*len(eligible)/(2*x)]] = p
	}
}

// refineHybrid improves a placement in place by local search: it tries
// each layer at every other place it allows, and each CPU layer's place
// moved to a streamed layer, and keeps any change the simulation says is
// faster, until none is (or a bounded number of rounds): an even spread
// leaves the copy stream idle where the pass starts and ends, and whole
// layers next to each other hand the hidden state over once. It returns
// the placement's time.
func refineHybrid(layers []HybridLayer, place []Place, pass time.Duration, depth int, r HybridRates) time.Duration {
	try := func() time.Duration { return simulateHybrid(layers, place, depth, r) }
	for round := 0; round < 4*len(layers); round++ {
		improved := false
		for a := range layers {
			was := place[a]
			for _, p := range []Place{OnGPU, FFNOnCPU, WholeOnCPU} {
				if p == was || !layers[a].allows(p) {
					continue
				}
				place[a] = p
				if t := try(); t < pass {
					pass, improved, was = t, true, p
					continue
				}
				place[a] = was
			}
			if place[a] == OnGPU {
				continue
			}
			// Move a's place to a streamed layer that allows it.
			for b := range layers {
				if place[b] != OnGPU || !layers[b].allows(place[a]) {
					continue
				}
				place[a], place[b] = OnGPU, place[a]
				if t := try(); t < pass {
					pass, improved = t, true
					break
				}
				place[a], place[b] = place[b], OnGPU
			}
		}
		if !improved {
			break
		}
	}
	return pass
}

// simulateHybrid is the time between the starts of two passes in a run
// of them with the layers placed as place says, the layers the GPU
// computes laid out in the ring as the pipeline lays them (LayRing; a
// whole CPU layer is left out of it) and the first ones carried into the
// next pass as it carries them: each once the pass before has released
// the last layer its place overlaps. Compute spends Lead before the
// streamed layers and Tail after them; the GPU's own compute on a
// streamed layer is taken as free (it reads a layer in a small fraction
// of the copy's time).
func simulateHybrid(layers []HybridLayer, place []Place, depth int, r HybridRates) time.Duration {
	n := len(layers)
	full := make([]int64, n)
	var moved []int64 // the ring's layers, in order
	at := make([]int, n)
	for i, l := range layers {
		full[i] = l.Full
		at[i] = -1
		switch place[i] {
		case OnGPU:
			at[i] = len(moved)
			moved = append(moved, l.Full)
		case FFNOnCPU:
			at[i] = len(moved)
			moved = append(moved, l.Attn)
		}
	}
	m := len(moved)
	ring, err := LayRing(moved, RingCapacity(full, depth))
	if err != nil {
		// PlanHybrid's checks (0 < Attn <= Full) make this unreachable;
		// a placement the ring could not hold is never the fastest.
		return time.Duration(math.MaxInt64)
	}
	// wrap[j]: the last layer of a pass whose place ring layer j's
	// overlaps, for the first layers, which the pass before carries; -1
	// after.
	wrap := make([]int, m)
	stop := false
	for i := range layers {
		j := at[i]
		if j < 0 {
			continue
		}
		wrap[j] = -1
		if stop = stop || layers[i].Stored || ring.After[j] >= 0; stop {
			continue
		}
		for k := m - 1; k >= j; k-- {
			if ring.Off[k] < ring.Off[j]+ring.Size[j] && ring.Off[j] < ring.Off[k]+ring.Size[k] {
				wrap[j] = k
				break
			}
		}
	}
	// Three passes: the first starts with an empty ring, the second with
	// what the first carried, and the third repeats the second.
	const passes = 3
	released := make([]float64, m) // when compute freed each layer's place, this pass
	before := make([]float64, m)   // the same, the pass before
	hop := r.Hop.Seconds()
	whole := r.CPUWhole
	if whole <= 0 {
		whole = r.CPU
	}
	var copied, now, lastStart float64
	for p := range passes {
		start := now
		if p == passes-1 {
			lastStart = start
		}
		now += r.Lead.Seconds()
		for i, l := range layers {
			if place[i] == WholeOnCPU {
				// The hidden state is on the host already when the
				// layer before is the model's previous one and the CPU
				// computed (the end of) it.
				if i == 0 || layers[i-1].Index != l.Index-1 || place[i-1] == OnGPU {
					now += hop
				}
				now += float64(l.Full) / whole
				continue
			}
			j := at[i]
			t := max(copied, start)
			switch {
			case ring.After[j] >= 0:
				t = max(copied, released[ring.After[j]])
			case p > 0 && wrap[j] >= 0:
				// Carried: issued once the pass before had issued its own
				// copies and released the layer this one overwrites.
				t = max(copied, before[wrap[j]])
			}
			copied = t + float64(moved[j])/r.HostToDevice
			now = max(now, copied)
			released[j] = now
			if place[i] == FFNOnCPU {
				now += hop + float64(l.FFN)/r.CPU
			}
		}
		now += r.Tail.Seconds()
		copy(before, released)
	}
	return time.Duration((now - lastStart) * float64(time.Second))
}
