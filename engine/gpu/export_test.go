package gpu

import (
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// What the external benchmarks of this package (package gpu_test, which
// time through bench/gputime: that package imports this one, so only an
// external test can use it) need from inside it, and the helpers the
// internal benchmarks share.

var (
	OpenBig = openBig
	LoadGPU = loadGPU
)

// FitLayers returns the trailing layers that do not fit a device budget
// once the embeddings, output, KV cache, slots and a 1 GiB activation
// reserve are placed (the planner's job in the engine; a fixed rule here).
func FitLayers(cpu *model.Model, budget int64, maxSeqs, maxCtx, slots int) []int {
	w, cfg := cpu.Weights, cpu.Config
	gemma := cfg.Arch == model.ArchGemma2
	used := alignUp(int64(len(w.Embed.Data))) + alignUp(int64(len(w.Output.Data))) + alignUp(int64(len(w.OutputNorm.Data)))
	used += 2 * int64(cfg.Layers) * int64(maxSeqs) * int64(maxCtx) * int64(cfg.KVDim()) * 4
	used += 1 << 30
	var biggest int64
	for i := range w.Layers {
		biggest = max(biggest, layerSize(&w.Layers[i], gemma))
	}
	used += int64(slots) * biggest
	n := 0
	for n < cfg.Layers && used+layerSize(&w.Layers[n], gemma) <= budget {
		used += layerSize(&w.Layers[n], gemma)
		n++
	}
	var s []int
	for l := n; l < cfg.Layers; l++ {
		s = append(s, l)
	}
	return s
}

// DecodeVariant is how Forward issues a decode step and waits for it: the
// copies inside the captured graph or around it (graphCopies), the wait by
// polling or by cuStreamSynchronize (waitPoll), the launches fused or not
// (fuseGEMV, fuseElementwise).
type DecodeVariant struct {
	Copies, Poll, FuseGEMV, FuseElementwise bool
}

// DefaultDecodeVariant is the variant Forward runs.
func DefaultDecodeVariant() DecodeVariant {
	return DecodeVariant{Copies: true, FuseGEMV: true, FuseElementwise: true}
}

// SetDecodeVariant switches every model of the process to v and drops
// m's captured graphs, so its next decode pass captures with v; it
// returns the variant it replaced.
func SetDecodeVariant(m *Model, v DecodeVariant) (DecodeVariant, error) {
	old := DecodeVariant{graphCopies, waitPoll, fuseGEMV, fuseElementwise}
	graphCopies, waitPoll, fuseGEMV, fuseElementwise = v.Copies, v.Poll, v.FuseGEMV, v.FuseElementwise
	m.mu.Lock()
	defer m.mu.Unlock()
	return old, m.dev.Do(func(c *cudadrv.Ctx) error { m.dropGraphs(c); return nil })
}

// ms prints a duration in milliseconds (the internal benchmarks' logs).
func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// h2dPeak is HostToDevicePeak with 256 MiB copies, failing b on error.
func h2dPeak(b *testing.B, g *Model) float64 {
	bw, err := HostToDevicePeak(g.dev, 256<<20, 8)
	if err != nil {
		b.Fatal(err)
	}
	return bw
}
