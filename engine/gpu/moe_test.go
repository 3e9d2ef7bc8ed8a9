package gpu

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/model"
)

// TestMoEOnCPU: a mixture-of-experts model on the GPU, its attention
// there (resident, and with layers streamed from tier B) and every FFN
// block — router and experts — on the CPU, gives the CPU reference's
// logits and 32 greedy tokens, also with the experts served by
// Options.Experts (as the engine's expert store serves a pool's); the CPU computed every layer's FFN of
// every pass, the prompt's included. In f32: routing is discrete, and
// where the GPU's quantized products differ from the CPU's by their usual
// margin a router near a tie picks another expert and the logits part (a
// Q4_K_M Mixtral did at step 13, NMSE 0.13), which says nothing of the
// hand-over this test is about.
func TestMoEOnCPU(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch, typ string
		streamed  []int
		source    bool // the layers without experts, served by Options.Experts
	}{
		{"mixtral", "f32", nil, false},
		{"mixtral", "f32", []int{1}, false},
		{"mixtral", "f32", []int{1}, true},
		{"qwen3moe", "f32", nil, false},
		{"qwen3moe", "f32", []int{0, 1}, false},
		{"qwen3moe", "f32", nil, true},
	} {
		t.Run(fmt.Sprintf("%s/%s/streamed%v/source=%v", tc.arch, tc.typ, tc.streamed, tc.source), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			opts := Options{MaxSeqs: 2, StreamLayers: tc.streamed}
			if len(tc.streamed) > 0 {
				opts.Slots = 1
			}
			load := cpu
			if tc.source {
				// The engine's expert store stands here: the layers lack
				// their experts, and the source serves the CPU model's.
				w := *cpu.Weights
				w.Layers = slices.Clone(w.Layers)
				for i := range w.Layers {
					w.Layers[i].Experts = nil
				}
				load = &model.Model{Config: cpu.Config, Weights: &w}
				opts.Experts = layerExperts{cpu.Weights}
			}
			g := loadGPU(t, load, opts)
			const steps = 32
			worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cpu.Config.Vocab, 12, 1), steps)
			st, ok := g.MoEStats()
			t.Logf("worst NMSE %.3g; CPU: %+v", worst[0], st)
			// The prompt's pass and steps decode passes.
			if want := int64((steps + 1) * cpu.Config.Layers); !ok || st.Layers != want || st.Busy <= 0 {
				t.Errorf("CPU FFNs %+v (ok %v), want %d", st, ok, want)
			}
		})
	}
}

// layerExperts serves the experts of full weights as a
// model.ExpertSource.
type layerExperts struct{ w *model.Weights }

func (s layerExperts) Experts(_ context.Context, l int, es []int, dst []*model.Expert) error {
	for j, e := range es {
		dst[j] = &s.w.Layers[l].Experts[e]
	}
	return nil
}
