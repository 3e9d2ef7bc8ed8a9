package gpu

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tier"
)

// TestSwapResidentExperts: experts swapped into other experts' places
// (in one layer, and across layers until a layer is whole and another
// empty) compute what a model given the same set by SetResidentExperts
// computes: the same logits at every step of a greedy decode, the same
// picks on each side, and a whole layer run without the host. Swaps that
// do not match the device's set fail and change nothing.
func TestSwapResidentExperts(t *testing.T) {
	gpu(t)
	ctx := context.Background()
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	cfg := cpu.Config
	start := [][]int{{0, 1, 2, 3, 4}, {0, 1, 2}}
	opts := Options{MaxSeqs: 1, NoExpertTrial: true, ResidentExperts: start}
	g := loadGPU(t, cpu, opts)
	want := loadGPU(t, cpu, opts)
	prompt := promptTokens(cfg.Vocab, 6, 4)
	for _, round := range []struct {
		name  string
		swaps []tier.DeviceSwap
		set   [][]int
	}{
		{"in one layer", []tier.DeviceSwap{{Layer: 1, In: 6, OutLayer: 1, Out: 0}}, [][]int{{0, 1, 2, 3, 4}, {1, 2, 6}}},
		{"layer 0 whole", []tier.DeviceSwap{{Layer: 0, In: 5, OutLayer: 1, Out: 1}, {Layer: 0, In: 6, OutLayer: 1, Out: 2}, {Layer: 0, In: 7, OutLayer: 1, Out: 6}},
			[][]int{{0, 1, 2, 3, 4, 5, 6, 7}, nil}},
	} {
		done, err := g.SwapResidentExperts(ctx, round.swaps)
		if err != nil || !slices.Equal(done, round.swaps) {
			t.Fatalf("%s: done %v, %v; want every swap", round.name, done, err)
		}
		if got := g.ResidentExperts(); !slices.EqualFunc(got, round.set, slices.Equal) {
			t.Fatalf("%s: resident %v, want %v", round.name, got, round.set)
		}
		if err := want.SetResidentExperts(ctx, round.set); err != nil {
			t.Fatal(err)
		}
		before, _ := g.MoEStats()
		wantBefore, _ := want.MoEStats()
		sameDecode(t, round.name, g, want, prompt, 8)
		st, _ := g.MoEStats()
		wst, _ := want.MoEStats()
		if st.GPUExperts-before.GPUExperts != wst.GPUExperts-wantBefore.GPUExperts || st.CPUExperts-before.CPUExperts != wst.CPUExperts-wantBefore.CPUExperts ||
			st.ResidentExperts != wst.ResidentExperts || st.ResidentExperts != 8 {
			t.Fatalf("%s: swapped %+v, set %+v (before %+v, %+v)", round.name, st, wst, before, wantBefore)
		}
		if round.set[1] == nil && st.HostFree == before.HostFree {
			t.Fatalf("%s: layer 0 whole, yet no layer ran without the host: %+v", round.name, st)
		}
		t.Logf("%s: %+v", round.name, st)
	}
	set := g.ResidentExperts()
	for _, bad := range []struct {
		name string
		sw   tier.DeviceSwap
	}{
		{"out not resident", tier.DeviceSwap{Layer: 1, In: 0, OutLayer: 1, Out: 3}},
		{"in resident", tier.DeviceSwap{Layer: 0, In: 2, OutLayer: 0, Out: 3}},
		{"out of range", tier.DeviceSwap{Layer: 1, In: cfg.Experts, OutLayer: 0, Out: 3}},
		{"no such layer", tier.DeviceSwap{Layer: cfg.Layers, In: 0, OutLayer: 0, Out: 3}},
	} {
		if done, err := g.SwapResidentExperts(ctx, []tier.DeviceSwap{bad.sw}); err == nil || len(done) != 0 {
			t.Errorf("%s: done %v, %v; want an error", bad.name, done, err)
		}
		if got := g.ResidentExperts(); !slices.EqualFunc(got, set, slices.Equal) {
			t.Fatalf("%s: resident %v, was %v", bad.name, got, set)
		}
	}
	dense := loadGPU(t, tinyModel(t, "llama", "q4_k_m"), Options{MaxSeqs: 1})
	if _, err := dense.SwapResidentExperts(ctx, []tier.DeviceSwap{{}}); err == nil {
		t.Fatal("a dense model swapped experts")
	}
}

// sameDecode runs one greedy decode on a and b and fails unless their
// logits agree at every step (the same kernels over the same experts:
// only where the experts lie differs).
func sameDecode(t *testing.T, name string, a, b *Model, prompt []int32, steps int) {
	t.Helper()
	ctx := context.Background()
	var batches [2][]model.Step
	for i, g := range []*Model{a, b} {
		s, err := g.NewSequence(len(prompt) + steps + 1)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		batches[i] = []model.Step{{Seq: s, Tokens: prompt}}
	}
	for step := range steps {
		for i, g := range []*Model{a, b} {
			if err := g.Forward(ctx, batches[i]); err != nil {
				t.Fatalf("%s: step %d: model %d: %v", name, step, i, err)
			}
		}
		la, lb := batches[0][0].Logits[0], batches[1][0].Logits[0]
		if e := quant.NMSE(la, lb); e > 1e-10 {
			t.Fatalf("%s: step %d: logits NMSE %.3g between the swapped experts and the same set uploaded", name, step, e)
		}
		tok := sample.Argmax(lb)
		for i := range batches {
			batches[i][0] = model.Step{Seq: batches[i][0].Seq, Tokens: []int32{tok}, Logits: batches[i][0].Logits}
		}
	}
}
