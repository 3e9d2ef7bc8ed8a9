package gpu

import (
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// What the external benchmarks of this package (package gpu_test, which
// time through internal/bench/gputime: that package imports this one, so only an
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
	lk := kindOf(&cfg)
	used := alignUp(int64(len(w.Embed.Data))) + alignUp(int64(len(w.Output.Data))) + alignUp(int64(len(w.OutputNorm.Data)))
	used += 2 * int64(cfg.Layers) * int64(maxSeqs) * int64(maxCtx) * int64(cfg.KVDim()) * 4
	used += 1 << 30
	var biggest int64
	for i := range w.Layers {
		biggest = max(biggest, layerSize(&w.Layers[i], lk))
	}
	used += int64(slots) * biggest
	n := 0
	for n < cfg.Layers && used+layerSize(&w.Layers[n], lk) <= budget {
		used += layerSize(&w.Layers[n], lk)
		n++
	}
	var s []int
	for l := n; l < cfg.Layers; l++ {
		s = append(s, l)
	}
	return s
}

// DecodeVariant is how Forward issues a decode step: the copies inside
// the captured graph or around it (passTuning.graphCopies), the launches
// fused or not (fuseGEMV, fuseElementwise), and the decode GEMVs on the
// integer path or the float one (the kernels' Tuning.IntegerGEMV and
// IntegerQ6K).
type DecodeVariant struct {
	Copies, FuseGEMV, FuseElementwise, IntegerGEMV, IntegerQ6K bool
}

// DecodeVariantOf is the variant m runs now.
func DecodeVariantOf(m *Model) DecodeVariant {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.k.Tuning()
	return DecodeVariant{m.pass.graphCopies, m.pass.fuseGEMV, m.pass.fuseElementwise, t.IntegerGEMV, t.IntegerQ6K}
}

// SetDecodeVariant switches m (and no other model) to v and drops its
// captured graphs, so its next decode pass captures with v; it returns the
// variant it replaced.
func SetDecodeVariant(m *Model, v DecodeVariant) (DecodeVariant, error) {
	old := DecodeVariantOf(m)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pass.graphCopies, m.pass.fuseGEMV, m.pass.fuseElementwise = v.Copies, v.FuseGEMV, v.FuseElementwise
	t := m.k.Tuning()
	t.IntegerGEMV, t.IntegerQ6K = v.IntegerGEMV, v.IntegerQ6K
	m.k = m.k.WithTuning(t)
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
