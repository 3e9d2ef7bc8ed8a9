package gpu

import (
	"testing"
	"time"
)

// TestCPUTeam: with the CPU on a team of its own (three threads polling
// 2 ms), a mixture-of-experts model with experts on both sides gives the
// CPU reference's logits and greedy tokens, and again once a second team
// replaced the first and once it is back on the shared pool; a model on
// which the CPU computes nothing refuses a team, and a negative count is
// refused.
func TestCPUTeam(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	cfg := cpu.Config
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, NoExpertTrial: true, ResidentExperts: residentSets(cfg, "some")})
	for _, threads := range []int{3, 2, 0} {
		if err := g.SetCPUTeam(threads, 2*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		before, _ := g.MoEStats()
		worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 3), 6)
		if st, _ := g.MoEStats(); st.Layers == before.Layers {
			t.Errorf("%d threads: the CPU computed no layer: %+v", threads, st)
		}
		t.Logf("%d threads: worst NMSE %.3g", threads, worst[0])
	}
	if err := g.SetCPUTeam(-1, 0); err == nil {
		t.Error("a team of -1 threads taken")
	}
	dense := loadGPU(t, tinyModel(t, "llama", "q4_k_m"), Options{MaxSeqs: 1})
	if err := dense.SetCPUTeam(3, 2*time.Millisecond); err == nil {
		t.Error("a model with nothing on the CPU took a team")
	}
	if err := dense.SetCPUTeam(0, 0); err != nil {
		t.Errorf("the shared pool refused for a model with nothing on the CPU: %v", err)
	}
}
