package tier

import (
	"fmt"
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
	// GateUp is the bytes of the FFN's gate and up products, Rows their
	// rows (the FFN's width): a layer the CPU can share row by row rather
	// than take whole (HybridSplit). 0 where it cannot.
	GateUp int64 `json:"gate_up,omitempty"`
	Rows   int   `json:"rows,omitempty"`
}

// HybridSplit is a layer the CPU and the GPU compute together in a pass
// of one token: the GPU copies and computes the attention, the down
// product and the first rows of gate and up; the CPU computes the last
// CPURows rows of gate and up (Bytes of weights) from the layer's pinned
// copy at the same time, and hands the GPU their activations. Both links
// then work on the same layer at once, where a whole FFN on the CPU
// leaves the copy engine idle once the slots ahead are full.
type HybridSplit struct {
	Layer   int   `json:"layer"`
	CPURows int   `json:"cpu_rows"`
	Bytes   int64 `json:"bytes"`
}

// SplitRowStep is the granularity of a split's rows: the GPU's products
// take any row count, and multiples of a warp keep their blocks full.
const SplitRowStep = 32

// splitSteps is how many fractions of the rows the planner tries.
const splitSteps = 32

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
}

// HybridPlan is the placement for one batch size.
type HybridPlan struct {
	// Batch is the batch size (tokens a pass) the plan was made for.
	Batch int `json:"batch"`
	// CPU lists, in order, the layers whose FFN the CPU computes.
	CPU []int `json:"cpu_ffn"`
	// Split lists, in order, the layers the CPU shares (batch 1 only).
	Split []HybridSplit `json:"split,omitempty"`
	// Moved is the bytes over PCIe a pass; CPUBytes what the CPU reads.
	Moved    int64 `json:"moved"`
	CPUBytes int64 `json:"cpu_bytes"`
	// Pass is the streamed part's expected time; Streamed the same with
	// every layer streamed (the plan without the CPU).
	Pass     time.Duration `json:"pass_ns"`
	Streamed time.Duration `json:"streamed_ns"`
}

// SplitRows is the least and the most gate and up rows the plan has the
// CPU compute of a shared layer (0, 0 without shared layers).
func (p HybridPlan) SplitRows() (lo, hi int) {
	for i, s := range p.Split {
		if i == 0 {
			lo, hi = s.CPURows, s.CPURows
		}
		lo, hi = min(lo, s.CPURows), max(hi, s.CPURows)
	}
	return lo, hi
}

// PlanHybrid chooses which of the streamed layers (in model order) take
// their FFN on the CPU at rates r, for a pipeline of depth slots. It
// simulates the pass (copies in order, each into the slot the layer depth
// places earlier freed; a CPU layer frees its slot once its attention ran
// and then holds compute for its hop and FFN) for every count of CPU
// layers, spread evenly over the layers that allow it, and keeps the
// fastest; ties keep fewer CPU layers. At batch 1 it also tries sharing
// every layer that allows it (HybridSplit) at each fraction of its rows,
// and keeps a split where it simulates faster than any whole placement.
func PlanHybrid(layers []HybridLayer, depth int, r HybridRates, batch int) (HybridPlan, error) {
	if depth < 1 {
		return HybridPlan{}, fmt.Errorf("hybrid plan: depth %d", depth)
	}
	if !(r.HostToDevice > 0) || !(r.CPU >= 0) {
		return HybridPlan{}, fmt.Errorf("hybrid plan: rates h2d %g, cpu %g", r.HostToDevice, r.CPU)
	}
	var eligible, splittable []int // positions in layers
	for i, l := range layers {
		if l.Attn <= 0 || l.Attn > l.Full || l.FFN < 0 {
			return HybridPlan{}, fmt.Errorf("hybrid plan: layer %d: attention %d of %d bytes", l.Index, l.Attn, l.Full)
		}
		if l.GateUp < 0 || l.GateUp > l.FFN || l.Rows < 0 || (l.GateUp > 0) != (l.Rows > 0) {
			return HybridPlan{}, fmt.Errorf("hybrid plan: layer %d: gate and up %d bytes in %d rows of an FFN of %d", l.Index, l.GateUp, l.Rows, l.FFN)
		}
		if l.FFN > 0 {
			eligible = append(eligible, i)
		}
		if l.GateUp > 0 && l.Rows >= 2*SplitRowStep {
			splittable = append(splittable, i)
		}
	}
	onCPU := make([]bool, len(layers))
	split := make([]int, len(layers)) // CPU rows per position
	streamed := simulateHybrid(layers, onCPU, split, depth, r)
	best := HybridPlan{Batch: batch, Pass: streamed, Streamed: streamed}
	if r.CPU > 0 {
		for x := 1; x <= len(eligible); x++ {
			clear(onCPU)
			for j := 0; j < x; j++ {
				// The j-th of x evenly spaced picks: the CPU's runs fall
				// between streamed layers, whose copies they hide.
				onCPU[eligible[(2*j+1)*len(eligible)/(2*x)]] = true
			}
			if t := simulateHybrid(layers, onCPU, split, depth, r); t < best.Pass {
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
	if r.CPU > 0 && batch == 1 && len(splittable) > 0 {
		// Whole FFNs on x of the eligible layers (spread evenly), and the
		// splittable rest shared at one fraction of their rows: a CPU
		// faster than PCIe takes more than gate and up can give it.
		bestOn, bestRows := make([]bool, len(layers)), make([]int, len(layers))
		mixed := time.Duration(-1)
		for x := 0; x <= len(eligible); x++ {
			clear(onCPU)
			for j := 0; j < x; j++ {
				onCPU[eligible[(2*j+1)*len(eligible)/(2*x)]] = true
			}
			for f := 1; f <= splitSteps; f++ {
				any := false
				for _, i := range splittable {
					split[i] = 0
					if !onCPU[i] {
						split[i], any = splitRows(layers[i].Rows, f), true
					}
				}
				if !any {
					break
				}
				if t := simulateHybrid(layers, onCPU, split, depth, r); mixed < 0 || t < mixed {
					mixed = t
					copy(bestOn, onCPU)
					copy(bestRows, split)
				}
			}
		}
		// Refined, the best mixed placement replaces the whole-FFN one
		// where it simulates faster.
		if mixed >= 0 {
			mixed = refineSplit(layers, splittable, bestOn, bestRows, depth, r)
		}
		if mixed >= 0 && mixed < best.Pass {
			best.Pass = mixed
			best.CPU = nil
			for i, n := range bestRows {
				if bestOn[i] {
					best.CPU = append(best.CPU, layers[i].Index)
				} else if n > 0 {
					best.Split = append(best.Split, HybridSplit{Layer: layers[i].Index, CPURows: n, Bytes: splitBytes(layers[i], n)})
				}
			}
		}
	}
	cpu := map[int]bool{}
	for _, i := range best.CPU {
		cpu[i] = true
	}
	shared := map[int]int64{}
	for _, s := range best.Split {
		shared[s.Layer] = s.Bytes
	}
	for _, l := range layers {
		switch {
		case cpu[l.Index]:
			best.Moved += l.Attn
			best.CPUBytes += l.FFN
		case shared[l.Index] > 0:
			best.Moved += l.Full - shared[l.Index]
			best.CPUBytes += shared[l.Index]
		default:
			best.Moved += l.Full
		}
	}
	return best, nil
}

// refineSplit improves shared rows layer by layer (in place): each
// shared layer's share moves a step up or down while the simulation says
// the pass gets faster, for a bounded number of rounds. A uniform share
// leaves the pass's ends unbalanced: nothing overlaps the first layer's
// copy, and the last layer's CPU rows overlap no copy, so a layer may
// also stop being shared. Layers whose FFN is on the CPU whole (onCPU)
// stay so. It returns the pass's time.
func refineSplit(layers []HybridLayer, splittable []int, onCPU []bool, rows []int, depth int, r HybridRates) time.Duration {
	pass := simulateHybrid(layers, onCPU, rows, depth, r)
	for round := 0; round < 4*len(splittable); round++ {
		improved := false
		for _, i := range splittable {
			if rows[i] == 0 {
				continue
			}
			step := max(layers[i].Rows/splitSteps/SplitRowStep*SplitRowStep, SplitRowStep)
			was := rows[i]
			for _, d := range []int{step, -step, SplitRowStep, -SplitRowStep, -was} {
				n := min(max(was+d, SplitRowStep), layers[i].Rows-SplitRowStep)
				if d == -was {
					n = 0 // not shared at all: no hop
				}
				if n == rows[i] {
					continue
				}
				rows[i] = n
				if t := simulateHybrid(layers, onCPU, rows, depth, r); t < pass {
					pass, improved = t, true
					break
				}
				rows[i] = was
			}
		}
		if !improved {
			break
		}
	}
	return pass
}

// splitRows is the CPU's share of rows at fraction f/splitSteps, in
// SplitRowStep multiples, leaving the GPU at least one step.
func splitRows(rows, f int) int {
	n := rows * f / splitSteps / SplitRowStep * SplitRowStep
	return min(max(n, SplitRowStep), rows-SplitRowStep)
}

// splitBytes is the weight bytes of cpuRows rows of l's gate and up.
func splitBytes(l HybridLayer, cpuRows int) int64 {
	return l.GateUp * int64(cpuRows) / int64(l.Rows)
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
	none := make([]int, len(layers))
	try := func() time.Duration { return simulateHybrid(layers, on, none, depth, r) }
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

// simulateHybrid is the pass time of the streamed layers with onCPU's
// FFNs on the CPU and split's rows (per position) shared with it. The
// GPU's own compute is taken as free: it reads a slot in a small fraction
// of the copy's time. A shared layer holds its slot until the CPU's rows
// are back, since the down product that follows reads the slot.
func simulateHybrid(layers []HybridLayer, onCPU []bool, split []int, depth int, r HybridRates) time.Duration {
	released := make([]float64, len(layers)) // when compute freed the layer's slot
	var copied, now float64                  // copy stream's end, compute's clock (seconds)
	for i, l := range layers {
		bytes := l.Full
		var shared int64
		switch {
		case onCPU[i]:
			bytes = l.Attn
		case split[i] > 0:
			shared = splitBytes(l, split[i])
			bytes -= shared
		}
		start := copied
		if i >= depth {
			start = max(start, released[i-depth])
		}
		copied = start + float64(bytes)/r.HostToDevice
		now = max(now, copied)
		if shared > 0 {
			now += r.Hop.Seconds() + float64(shared)/r.CPU
		}
		released[i] = now
		if onCPU[i] {
			now += r.Hop.Seconds() + float64(l.FFN)/r.CPU
		}
	}
	return time.Duration(now * float64(time.Second))
}
