package gpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tier"
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
		{"qwen2", "q4_k_m", []int{0, 1}, []int{1}, 1},
		{"gemma3", "q4_k_m", []int{3, 4, 5}, []int{4, 5}, 2},
		{"phi3", "q4_k_m", []int{0, 1}, []int{0, 1}, 2}, // gate and up split on the host
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
			checkTimeline(t, g, tc.streamed, tc.cpu)
		})
	}
}

// checkTimeline: the last pass's timeline (LastPassLayers) has a line per
// streamed layer in order, the CPU's FFNs where the plan put them with
// their times, and each copy and wait ending after it starts, no copy
// ending after compute went on from its wait (but for the events' own
// resolution, a microsecond at most).
func checkTimeline(t *testing.T, g *Model, streamed, cpu []int) {
	t.Helper()
	lt, ok, err := g.LastPassLayers()
	if err != nil || !ok {
		t.Fatalf("LastPassLayers: ok %v, %v", ok, err)
	}
	if len(lt) != len(streamed) {
		t.Fatalf("timeline of %d layers, %d streamed: %+v", len(lt), len(streamed), lt)
	}
	for i, l := range lt {
		onCPU := slices.Contains(cpu, l.Layer)
		if l.Layer != streamed[i] || l.CPU != onCPU || onCPU != (l.FFN > 0) || l.Hand < 0 ||
			l.CopyEnd < l.CopyStart || l.WaitEnd < l.WaitStart || l.CopyEnd > l.WaitEnd+5*time.Microsecond {
			t.Errorf("line %d: %+v (streamed %v, CPU %v)", i, l, streamed, cpu)
		}
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

// TestHybridReplan: a batch size's plan is made again from the CPU's rate
// in passes once replanPasses passes ran and that rate drifted more than
// replanDrift from the planned one; a rate within the drift keeps the
// plan; and re-planning stops after maxReplans. Needs no GPU.
func TestHybridReplan(t *testing.T) {
	t.Parallel()
	var layers []tier.HybridLayer
	for i := range 16 {
		layers = append(layers, tier.HybridLayer{Index: 16 + i, Full: 120 << 20, Attn: 20 << 20, FFN: 100 << 20})
	}
	pl := &hybridPlanner{layers: layers, depth: 2, h2d: 55e9, hop: tier.DefaultHop}
	fast, err := pl.plan(90e9, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := &hybrid{planner: pl, plans: []tier.HybridPlan{fast}, rates: []float64{90e9}, seen: make([]hybridSeen, 1), applied: 0}
	// passes run: the CPU's FFNs at the given rate
	run := func(rate float64, passes int) {
		s := &h.seen[0]
		b := int64(passes) * 8 * (100 << 20)
		s.passes += passes
		s.bytes += b
		s.busy += time.Duration(float64(b) / rate * float64(time.Second))
	}
	run(60e9, replanPasses-1)
	if err := h.replan(1); err != nil || h.rates[0] != 90e9 {
		t.Fatalf("re-planned after %d passes: rate %g, %v", replanPasses-1, h.rates[0], err)
	}
	run(60e9, 1)
	if err := h.replan(1); err != nil {
		t.Fatal(err)
	}
	if math.Abs(h.rates[0]/60e9-1) > 1e-6 || h.applied != -2 {
		t.Fatalf("after drift: rate %g (want 60e9), applied %d (want -2)", h.rates[0], h.applied)
	}
	if n, m := len(h.plans[0].CPU), len(fast.CPU); n >= m {
		t.Fatalf("slower CPU: %d CPU layers, at 90 GB/s %d (want fewer)", n, m)
	}
	// Within the drift: the plan stays.
	before, rate := h.plans[0], h.rates[0]
	run(60e9*(1+replanDrift/2), replanPasses)
	if err := h.replan(1); err != nil || h.rates[0] != rate || !slices.Equal(h.plans[0].CPU, before.CPU) {
		t.Fatalf("re-planned within the drift: rate %g, %v", h.rates[0], err)
	}
	// The copy stage's rate drifting alone re-plans too, at the rate seen.
	run(rate, replanPasses)
	h.seen[0].copyBytes, h.seen[0].copyBusy = 40e9, time.Second
	if err := h.replan(1); err != nil || math.Abs(pl.h2d/40e9-1) > 1e-9 || h.seen[0].replans != 2 {
		t.Fatalf("after the copy's drift: h2d %g (want 40e9), %d re-plans, %v", pl.h2d, h.seen[0].replans, err)
	}
	// At most maxReplans times.
	for i := range 2 * maxReplans {
		run(float64(30+10*(i%2))*1e9, replanPasses)
		if err := h.replan(1); err != nil {
			t.Fatal(err)
		}
	}
	if h.seen[0].replans != maxReplans {
		t.Fatalf("%d re-plans, want %d", h.seen[0].replans, maxReplans)
	}
}

// TestForwardExit: a pass that stops after the first layer and goes to the
// output head (the model drafting for itself) gives engine/model's logits
// with the later layers skipped, step after step, resident and with the
// later layer streamed; it is refused where the layers it needs stream;
// full passes afterwards still match the reference.
func TestForwardExit(t *testing.T) {
	gpu(t)
	for _, streamed := range [][]int{nil, {1}} {
		t.Run(fmt.Sprintf("streamed%v", streamed), func(t *testing.T) {
			cpu := tinyModel(t, "llama", "q4_k_m")
			g := loadGPU(t, cpu, Options{MaxSeqs: 2, StreamLayers: streamed, Slots: 1})
			if r, want := g.ResidentPrefix(), 1+btoi(streamed == nil); r != want {
				t.Fatalf("resident prefix %d, want %d", r, want)
			}
			if err := cpu.SetSkip([]int{1}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			prompt := promptTokens(cpu.Config.Vocab, 12, 3)
			cs := cpu.NewSequence(64)
			gs, err := g.NewSequence(64)
			if err != nil {
				t.Fatal(err)
			}
			cb := []model.Step{{Seq: cs, Tokens: prompt}}
			gb := []model.Step{{Seq: gs, Tokens: prompt}}
			for i := range 16 {
				if err := cpu.Forward(ctx, cb); err != nil {
					t.Fatal(err)
				}
				if err := g.ForwardExit(ctx, gb, 1); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				cl, gl := cb[0].Logits[len(cb[0].Logits)-1], gb[0].Logits[len(gb[0].Logits)-1]
				if e := quant.NMSE(gl, cl); e > maxNMSE || sample.Argmax(gl) != sample.Argmax(cl) {
					t.Fatalf("step %d: NMSE %.3g, greedy %d vs %d on the CPU", i, e, sample.Argmax(gl), sample.Argmax(cl))
				}
				next := sample.Argmax(cl)
				cb[0] = model.Step{Seq: cs, Tokens: []int32{next}}
				gb[0] = model.Step{Seq: gs, Tokens: []int32{next}, Logits: gb[0].Logits}
			}
			gs.Close()
			if err := g.ForwardExit(ctx, gb, 2); err == nil {
				t.Error("an exit after every layer was accepted")
			}
			if err := cpu.SetSkip(nil); err != nil {
				t.Fatal(err)
			}
			greedyCompare(t, cpu, []*Model{g}, prompt, 8)
		})
	}
	cpu := tinyModel(t, "llama", "q4_k_m")
	g := loadGPU(t, cpu, Options{StreamLayers: []int{0, 1}, Slots: 1})
	gs, err := g.NewSequence(32)
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	if err := g.ForwardExit(context.Background(), []model.Step{{Seq: gs, Tokens: []int32{1, 2}}}, 1); err == nil {
		t.Error("an early exit through a streamed layer was accepted")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSequenceCopyFrom: a sequence that copies another's cache for all
// but the prompt's last token and feeds that token gives the logits the
// other got for it (within the NMSE the prompt's GEMM and a step's GEMV
// differ by), and decodes on with the same tokens; a copy past the
// source's end, or from a closed sequence, is refused.
func TestSequenceCopyFrom(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	g := loadGPU(t, cpu, Options{MaxSeqs: 2})
	ctx := context.Background()
	prompt := promptTokens(cpu.Config.Vocab, 12, 5)
	a, err := g.NewSequence(64)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := g.NewSequence(64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sa := []model.Step{{Seq: a, Tokens: prompt}}
	if err := g.Forward(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if err := b.CopyFrom(a, len(prompt)+1); err == nil {
		t.Fatal("a copy past the source's end was accepted")
	}
	if err := b.CopyFrom(a, len(prompt)-1); err != nil || b.Pos() != len(prompt)-1 {
		t.Fatalf("copy: %v, position %d", err, b.Pos())
	}
	sb := []model.Step{{Seq: b, Tokens: prompt[len(prompt)-1:]}}
	for i := range 8 {
		if err := g.Forward(ctx, sb); err != nil {
			t.Fatal(err)
		}
		la, lb := sa[0].Logits[len(sa[0].Logits)-1], sb[0].Logits[len(sb[0].Logits)-1]
		if e := quant.NMSE(lb, la); e > maxNMSE || sample.Argmax(la) != sample.Argmax(lb) {
			t.Fatalf("step %d: NMSE %.3g, greedy %d vs %d", i, e, sample.Argmax(lb), sample.Argmax(la))
		}
		next := sample.Argmax(la)
		sa[0] = model.Step{Seq: a, Tokens: []int32{next}, Logits: sa[0].Logits}
		if err := g.Forward(ctx, sa); err != nil {
			t.Fatal(err)
		}
		sb[0] = model.Step{Seq: b, Tokens: []int32{next}, Logits: sb[0].Logits}
	}
	a.Close()
	if err := b.CopyFrom(a, 1); err == nil {
		t.Error("a copy from a closed sequence was accepted")
	}
}
