package gpu

import "testing"

// TestCPUHold: with the CPU's threads held polling through each pass, a
// mixture-of-experts model with experts on both sides gives the CPU
// reference's logits and greedy tokens; a model on which the CPU computes
// nothing refuses the hold.
func TestCPUHold(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	cfg := cpu.Config
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, NoExpertTrial: true, ResidentExperts: residentSets(cfg, "some")})
	if err := g.SetCPUHold(true); err != nil {
		t.Fatal(err)
	}
	worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 3), 6)
	st, _ := g.MoEStats()
	if st.Layers == 0 {
		t.Errorf("the CPU computed no layer: %+v", st)
	}
	t.Logf("worst NMSE %.3g", worst[0])
	if err := g.SetCPUHold(false); err != nil {
		t.Fatal(err)
	}
	dense := loadGPU(t, tinyModel(t, "llama", "q4_k_m"), Options{MaxSeqs: 1})
	if err := dense.SetCPUHold(true); err == nil {
		t.Error("a model with nothing on the CPU took the hold")
	}
}
