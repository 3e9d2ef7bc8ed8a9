package gpu

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
)

// pickedModel loads cpu's weights onto the test device with the resident
// experts which names (residentSets), skipping where the picked kernels
// do not take its experts.
func pickedModel(t *testing.T, cpu *model.Model, which string) *Model {
	t.Helper()
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, NoExpertTrial: true, ResidentExperts: residentSets(cpu.Config, which)})
	x0 := cpu.Weights.Layers[0].Experts[0]
	if !g.k.Tuning().IntegerGEMV || x0.Gate.Type != quant.Q4_K || x0.Up.Type != quant.Q4_K {
		t.Skipf("the picked kernels do not take %v gates here", x0.Gate.Type)
	}
	return g
}

// eachPickedCase runs fn as a subtest for Q4_K_M Mixtral and Qwen3-MoE
// tiny models with none and some experts resident (pickedModel).
func eachPickedCase(t *testing.T, fn func(t *testing.T, cpu *model.Model, g *Model, resident string)) {
	t.Helper()
	gpu(t)
	for _, arch := range []string{"mixtral", "qwen3moe"} {
		for _, resident := range []string{"none", "some"} {
			t.Run(fmt.Sprintf("%s/resident=%s", arch, resident), func(t *testing.T) {
				cpu := tinyModel(t, arch, "q4_k_m")
				fn(t, cpu, pickedModel(t, cpu, resident), resident)
			})
		}
	}
}

// TestMappedExperts: with the experts the device does not hold pulled
// over PCIe (SetMappedExperts: staged into device slots), Q4_K_M
// mixture-of-experts models with none and some experts resident give the
// CPU reference's logits and greedy tokens, run every decode layer
// without the host, count every routed pick once and every mapped pick as
// such, and go on as before once it is turned off, its slots freed.
func TestMappedExperts(t *testing.T) {
	eachPickedCase(t, func(t *testing.T, cpu *model.Model, g *Model, resident string) {
		cfg := cpu.Config
		if err := g.SetMappedExperts(MappedOn); err != nil {
			t.Fatal(err)
		}
		if err := g.SetMappedExperts(MappedOn); err != nil {
			t.Fatalf("turned on twice: %v", err)
		}
		const steps = 6
		st0, _ := g.MoEStats()
		worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 9, 4), steps)
		st, _ := g.MoEStats()
		t.Logf("worst NMSE %.3g; %+v", worst[0], st)
		decodePicks := int64(steps * cfg.Layers * cfg.ExpertsUsed)
		mapped := st.Mapped.Picks - st0.Mapped.Picks
		switch {
		case resident == "none" && mapped != decodePicks:
			t.Errorf("%d picks read in place, want every decode pick's %d", mapped, decodePicks)
		case resident == "some" && (mapped <= 0 || mapped >= decodePicks):
			t.Errorf("%d picks read in place of %d decode picks, with a third of the experts resident", mapped, decodePicks)
		}
		if st.Mapped.Bytes <= 0 {
			t.Errorf("mapped picks without bytes: %+v", st.Mapped)
		}
		if free := st.HostFree - st0.HostFree; free != int64(steps*cfg.Layers) {
			t.Errorf("%d layers ran without the host, want every decode layer's %d", free, steps*cfg.Layers)
		}
		if counted, want := countedPicks(g), uint64((9+steps)*cfg.Layers*cfg.ExpertsUsed); counted != want {
			t.Errorf("ExpertCounts total %d, want %d", counted, want)
		}
		if err := g.SetMappedExperts(MappedOff); err != nil {
			t.Fatal(err)
		}
		if g.moe.stage != nil {
			t.Error("the staging slots kept after mapped experts were turned off")
		}
		greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 2), 3)
		if st2, _ := g.MoEStats(); st2.Mapped.Picks != st.Mapped.Picks {
			t.Errorf("picks read in place after turning it off: %d, then %d", st.Mapped.Picks, st2.Mapped.Picks)
		}
	})
}

// TestMappedMatchesResident: the picked kernels compute an expert pulled
// from host memory (staged into device slots) as they compute it resident
// in device memory: a model with no expert resident and every one mapped
// gives, token by token (every pass at one token, so both take the
// picked kernels throughout), the bits of the same model with every
// expert resident.
func TestMappedMatchesResident(t *testing.T) {
	gpu(t)
	for _, arch := range []string{"mixtral", "qwen3moe"} {
		t.Run(arch, func(t *testing.T) {
			cpu := tinyModel(t, arch, "q4_k_m")
			all := pickedModel(t, cpu, "all")
			mapped := pickedModel(t, cpu, "none")
			if err := mapped.SetMappedExperts(MappedOn); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const n = 12
			var steps [2][]model.Step
			for i, g := range []*Model{all, mapped} {
				s, err := g.NewSequence(n + 1)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				steps[i] = []model.Step{{Seq: s}}
			}
			tok := promptTokens(cpu.Config.Vocab, 1, 3)[0]
			for i := range n {
				for j, g := range []*Model{all, mapped} {
					steps[j][0].Tokens = []int32{tok}
					if err := g.Forward(ctx, steps[j]); err != nil {
						t.Fatalf("step %d, model %d: %v", i, j, err)
					}
				}
				a, b := steps[0][0].Logits[0], steps[1][0].Logits[0]
				for v := range a {
					if math.Float32bits(a[v]) != math.Float32bits(b[v]) {
						t.Fatalf("step %d: logit %d is %v mapped, %v resident", i, v, b[v], a[v])
					}
				}
				tok = int32(sample.Argmax(a))
			}
			if st, _ := mapped.MoEStats(); st.Mapped.Picks != int64(n*cpu.Config.Layers*cpu.Config.ExpertsUsed) {
				t.Errorf("%d picks read in place, want %d", st.Mapped.Picks, n*cpu.Config.Layers*cpu.Config.ExpertsUsed)
			}
		})
	}
}

// TestMappedBesideStream: the pick stream and mapped experts share one
// pinning of the host experts: either on alone, both on, one turned off
// while the other reads the pages, and the model's close with both on,
// each gives the CPU reference's logits (a page unpinned under a kernel
// reading it would fail the pass).
func TestMappedBesideStream(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	cfg := cpu.Config
	g := pickedModel(t, cpu, "some")
	run := func(what string) {
		t.Helper()
		t.Logf("%s", what)
		greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 3, 5), 3)
	}
	for _, step := range []struct {
		what   string
		stream bool
		mapped MappedWay
	}{
		{"the pick stream", true, MappedOff},
		{"both", true, MappedOn},
		{"mapped alone, the stream turned off", false, MappedOn},
		{"the stream again beside mapped", true, MappedOn},
		{"the stream alone, mapped turned off", true, MappedOff},
		{"the stream, mapped by trial", true, MappedTrial},
		{"both again, left on for close", true, MappedOn},
	} {
		if err := g.SetStreamPicks(step.stream); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if err := g.SetMappedExperts(step.mapped); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		run(step.what)
	}
}

// TestMappedTrial: with mapped experts by trial (MappedTrial) and the
// resident experts' way by trial too, a model gives the CPU reference's
// logits and greedy tokens through both trials and after them, the
// resident way is decided first and the mapped one after it, and
// turning mapped experts off forgets the decision; unknown ways are
// refused.
func TestMappedTrial(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	cfg := cpu.Config
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, ResidentExperts: residentSets(cfg, "some")})
	x0 := cpu.Weights.Layers[0].Experts[0]
	if !g.k.Tuning().IntegerGEMV || x0.Gate.Type != quant.Q4_K {
		t.Skipf("the picked kernels do not take %v gates here", x0.Gate.Type)
	}
	if err := g.SetMappedExperts(MappedWay(7)); err == nil {
		t.Fatal("an unknown way taken")
	}
	if err := g.SetStreamPicks(true); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMappedExperts(MappedTrial); err != nil {
		t.Fatal(err)
	}
	// Both trials' passes at one token, and some after.
	steps := 2*ExpertTrialPasses + 4
	greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 7), steps)
	st, _ := g.MoEStats()
	t.Logf("%+v", st.Mapped)
	if st.Mapped.Way != MappedTrial || !st.Mapped.Decided || st.Mapped.MappedPass <= 0 || st.Mapped.HostPass <= 0 {
		t.Errorf("after %d passes at one token: %+v", steps, st.Mapped)
	}
	decided := false
	for _, d := range st.Choices {
		decided = decided || d.Batch == 1
	}
	if !decided {
		t.Errorf("the resident experts' way at one token not decided: %+v", st.Choices)
	}
	if err := g.SetMappedExperts(MappedOff); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.MoEStats(); st.Mapped.Decided || st.Mapped.Way != MappedOff {
		t.Errorf("turned off: %+v", st.Mapped)
	}
	greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 4, 8), 3)
}

// TestMappedRefused: a dense model has no experts to map.
func TestMappedRefused(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	g := loadGPU(t, cpu, Options{})
	if err := g.SetMappedExperts(MappedOn); err == nil {
		t.Error("a dense model mapped its experts")
	}
}

// TestSplitByWidth: with few CPU picks a layer the pick stream shares a
// pick by its FFN width in 256-column steps (the GPU the last columns of
// the pick before its whole ones) once SetSplitPicks lets it; with many,
// or without, only whole picks move. Before the links have fits it sends
// half, in those steps.
func TestSplitByWidth(t *testing.T) {
	t.Parallel()
	const b, f = 4e6, 1024
	fitted := func(copies, cpu float64) *pickStream {
		ps := &pickStream{widthSplit: true}
		for i := range 40 {
			n := int64(1 + i%4)
			ps.copies.add(n*b/4, time.Duration(float64(n*b/4)/copies*1e9))
			ps.cpu.add(n*b/4, time.Duration(float64(n*b/4)/cpu*1e9))
		}
		return ps
	}
	for _, tc := range []struct {
		name    string
		ps      *pickStream
		kc      int
		n, part int
	}{
		{"no fits, one pick: half its columns", &pickStream{widthSplit: true}, 1, 0, 512},
		{"no fits, two picks: one each", &pickStream{widthSplit: true}, 2, 1, 0},
		{"no fits, three picks: one and a half", &pickStream{widthSplit: true}, 3, 1, 512},
		{"no fits, not let split", &pickStream{}, 1, 0, 0},
		{"equal links, one pick", fitted(50e9, 50e9), 1, 0, 512},
		{"the CPU three times the GPU's share", fitted(25e9, 75e9), 1, 0, 256},
		{"the GPU three times the CPU's", fitted(75e9, 25e9), 1, 0, 768},
		{"equal links, three picks", fitted(50e9, 50e9), 3, 1, 512},
		{"four picks: whole ones", fitted(50e9, 50e9), 4, 2, 0},
		{"no picks", fitted(50e9, 50e9), 0, 0, 0},
	} {
		n, part := tc.ps.split(tc.kc, b, f)
		if n != tc.n || part != tc.part {
			t.Errorf("%s: split(%d) = %d whole, %d columns; want %d, %d", tc.name, tc.kc, n, part, tc.n, tc.part)
		}
	}
	if n, part := fitted(50e9, 50e9).split(1, b, 1000); n != 0 || part != 0 {
		t.Errorf("a width of no whole steps split: %d whole, %d columns", n, part)
	}
	off := fitted(50e9, 50e9)
	off.widthSplit = false
	if n, part := off.split(1, b, f); n != 0 || part != 0 {
		t.Errorf("split by width without SetSplitPicks: %d whole, %d columns", n, part)
	}
}

// TestPicksSplitByWidth: Mixtral-shaped experts four blocks wide, a third
// resident, with the pick stream on: picks split by width (the CPU their
// first columns, the GPU the rest, copied packed into a slot, the down's
// columns by a 2D copy) give the CPU reference's logits and greedy
// tokens, both kinds of down (Q4_K and Q6_K layers) among them.
func TestPicksSplitByWidth(t *testing.T) {
	gpu(t)
	cpu := shapeModel(t, "mixtral", "tiny-wide", "q4_k_m")
	cfg := cpu.Config
	g := pickedModel(t, cpu, "some")
	if err := g.SetSplitPicks(true); err == nil {
		t.Fatal("split picks without the pick stream")
	}
	if err := g.SetStreamPicks(true); err != nil {
		t.Fatal(err)
	}
	if err := g.SetSplitPicks(true); err != nil {
		t.Fatal(err)
	}
	const steps = 16
	worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 8), steps)
	st, _ := g.MoEStats()
	t.Logf("worst NMSE %.3g; %+v", worst[0], st.Streamed)
	if st.Streamed.Split == 0 {
		t.Errorf("no pick split by width in %d decode layers: %+v", steps*cfg.Layers, st.Streamed)
	}
	if counted, want := countedPicks(g), uint64((5+steps)*cfg.Layers*cfg.ExpertsUsed); counted != want {
		t.Errorf("ExpertCounts total %d, want %d", counted, want)
	}
}
