package gpu

import (
	"fmt"
	"strings"
	"testing"
)

// TestHybridFidelity: with the FFN of some tier-B layers on the CPU (given
// plans for 1 and 2 tokens; the 16-token prompt streams every layer whole,
// so the pipeline's copy lengths switch between passes) the logits and 64
// greedy tokens match the CPU reference, and the CPU computed an FFN per
// planned layer of every decode step.
func TestHybridFidelity(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch, typ string
		streamed  []int
		cpu       []int
		slots     int
	}{
		{"llama", "q4_k_m", []int{0, 1}, []int{1}, 1},
		{"llama", "f32", []int{0, 1}, []int{0, 1}, 2},
		{"gemma2", "q4_k_m", []int{0, 1, 2, 3}, []int{1, 2}, 2},
		{"gemma2", "f32", []int{1, 2, 3}, []int{3}, 3},
	} {
		t.Run(fmt.Sprintf("%s/%s/cpu%v", tc.arch, tc.typ, tc.cpu), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			g := loadGPU(t, cpu, Options{StreamLayers: tc.streamed, Slots: tc.slots, Hybrid: &Hybrid{Plans: [][]int{tc.cpu, tc.cpu}}})
			const steps = 64
			worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cpu.Config.Vocab, 16, 1), steps)
			st := g.HybridStats()
			t.Logf("worst NMSE %.3g; CPU: %+v", worst[0], st)
			if st.Passes != steps || st.Layers != int64(steps*len(tc.cpu)) || st.Busy <= 0 {
				t.Errorf("CPU share %+v, want %d passes of %d FFNs", st, steps, len(tc.cpu))
			}
		})
	}
}

// TestHybridPlanned: without given plans, Load measures the CPU's FFN
// rate and plans every batch size; the model then runs as the reference
// does whatever the plans chose.
func TestHybridPlanned(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, StreamLayers: []int{0, 1}, Slots: 1, Hybrid: &Hybrid{HostToDevice: 20e9}})
	plans, rates, ok := g.HybridPlans()
	if !ok || len(plans) != 2 || len(rates) != 2 {
		t.Fatalf("plans %+v, rates %v, ok %v", plans, rates, ok)
	}
	for i, r := range rates {
		if !(r > 0) {
			t.Fatalf("CPU rate at %d tokens: %g", i+1, r)
		}
	}
	t.Logf("plans %+v; CPU FFN rates %v B/s", plans, rates)
	greedyCompare(t, cpu, []*Model{g}, promptTokens(cpu.Config.Vocab, 8, 2), 16)
}

// TestHybridRejects: a plan naming a layer the CPU cannot read from tier
// B fails the load.
func TestHybridRejects(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "f32")
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"resident layer", Options{StreamLayers: []int{1}, Hybrid: &Hybrid{Plans: [][]int{{0}}}}, "not a tier-B layer"},
		{"nothing streamed", Options{Hybrid: &Hybrid{Plans: [][]int{{0}}}}, "no tier-B layers"},
	} {
		tc.opts.Kernels = gpuK
		m, err := Load(gpuDev, cpu.Config, cpu.Weights, tc.opts)
		if err == nil {
			m.Close()
			t.Errorf("%s: loaded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}
