package gpu

import (
	"fmt"
	"testing"
)

// TestMoEOnCPU: a mixture-of-experts model on the GPU, its attention
// there (resident, and with a layer streamed from tier B) and every FFN
// block — router and experts — on the CPU, gives the CPU reference's
// logits and 32 greedy tokens; the CPU computed every layer's FFN of
// every pass, the prompt's included.
func TestMoEOnCPU(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch, typ string
		streamed  []int
	}{
		{"mixtral", "q4_k_m", nil},
		{"mixtral", "f32", []int{1}},
		{"qwen3moe", "q4_k_m", nil},
		{"qwen3moe", "q4_k_m", []int{0, 1}},
	} {
		t.Run(fmt.Sprintf("%s/%s/streamed%v", tc.arch, tc.typ, tc.streamed), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			opts := Options{MaxSeqs: 2, StreamLayers: tc.streamed}
			if len(tc.streamed) > 0 {
				opts.Slots = 1
			}
			g := loadGPU(t, cpu, opts)
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
