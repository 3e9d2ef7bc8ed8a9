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

// TestHybridFidelity: with the FFN of some tier-B layers on the CPU, or
// the whole layer (given plans for 1 and 2 tokens; the 16-token prompt
// streams every layer whole, so the pipeline's copy lengths and the
// layers it leaves out switch between passes, and the prompt's KV-cache
// rows move to the CPU's cache for its whole layers) the logits and 64
// greedy tokens match the CPU reference, and the CPU computed an FFN or
// a layer per planned layer of every decode step.
func TestHybridFidelity(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch, typ string
		streamed  []int
		cpu       []int
		whole     []int
		slots     int
	}{
		{"llama", "q4_k_m", []int{0, 1}, []int{1}, nil, 1},
		{"llama", "f32", []int{0, 1}, []int{0, 1}, nil, 2},
		{"gemma2", "q4_k_m", []int{0, 1, 2, 3}, []int{1, 2}, nil, 2},
		{"gemma2", "f32", []int{1, 2, 3}, []int{3}, nil, 3},
		{"qwen2", "q4_k_m", []int{0, 1}, []int{1}, nil, 1},
		{"gemma3", "q4_k_m", []int{3, 4, 5}, []int{4, 5}, nil, 2},
		{"phi3", "q4_k_m", []int{0, 1}, []int{0, 1}, nil, 2}, // gate and up split on the host
		// Whole layers: a run from the model's first layer, one after an
		// FFN on the CPU, around a GPU layer, with biases, q/k norms,
		// post-norms, local RoPE bases and windows, LongRoPE's factor
		// (which scales the CPU's cached keys, not the GPU's) and a
		// fused layer split on the host.
		{"llama", "q4_k_m", []int{0, 1}, nil, []int{0, 1}, 1},
		{"llama", "f32", []int{1}, nil, []int{1}, 1},
		{"gemma2", "q4_k_m", []int{0, 1, 2, 3}, []int{1}, []int{2, 3}, 2},
		{"qwen2", "q4_k_m", []int{0, 1}, []int{1}, []int{0}, 1},
		{"qwen3", "q4_k_m", []int{0, 1}, nil, []int{1}, 1},
		{"gemma3", "q4_k_m", []int{3, 4, 5}, []int{4}, []int{3, 5}, 2},
		{"phi3", "q4_k_m", []int{0, 1}, nil, []int{0, 1}, 1},
	} {
		t.Run(fmt.Sprintf("%s/%s/cpu%v/whole%v", tc.arch, tc.typ, tc.cpu, tc.whole), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			g := loadGPU(t, cpu, Options{StreamLayers: tc.streamed, Slots: tc.slots,
				Hybrid: &Hybrid{Plans: [][]int{tc.cpu, tc.cpu}, Whole: [][]int{tc.whole, tc.whole}}})
			const steps = 64
			worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cpu.Config.Vocab, 16, 1), steps)
			st := g.HybridStats()
			t.Logf("worst NMSE %.3g; CPU: %+v", worst[0], st)
			if st.Passes != steps || st.Layers != int64(steps*len(tc.cpu)) || st.Whole != int64(steps*len(tc.whole)) || st.Busy <= 0 {
				t.Errorf("CPU share %+v, want %d passes of %d FFNs and %d whole layers", st, steps, len(tc.cpu), len(tc.whole))
			}
			if tc.whole != nil && st.Synced != int64(16*len(tc.whole)) {
				t.Errorf("%d KV rows moved, want the prompt's 16 for each of %d whole layers", st.Synced, len(tc.whole))
			}
			var moved []int
			for _, l := range tc.streamed {
				if !slices.Contains(tc.whole, l) {
					moved = append(moved, l)
				}
			}
			checkTimeline(t, g, moved, tc.cpu)
		})
	}
}

// TestHybridWholeCaches: a layer's place changing between passes (whole
// on the CPU at one token a step, on the GPU at two) moves the KV-cache
// rows the other side computed before the pass that needs them, through
// truncation, a sequence copied from another, a batch of both and a
// reset: every step's logits match the CPU reference doing the same.
func TestHybridWholeCaches(t *testing.T) {
	gpu(t)
	ctx := context.Background()
	for _, arch := range []string{"llama", "phi3"} {
		t.Run(arch, func(t *testing.T) {
			cpu := tinyModel(t, arch, "q4_k_m")
			// One token: layers 0 and 1 whole on the CPU; two: layer 1 only.
			g := loadGPU(t, cpu, Options{MaxSeqs: 2, StreamLayers: []int{0, 1}, Slots: 1,
				Hybrid: &Hybrid{Plans: [][]int{nil, nil}, Whole: [][]int{{0, 1}, {1}}}})
			type pair struct {
				c *model.Sequence
				g *Sequence
			}
			newPair := func() pair {
				gs, err := g.NewSequence(64)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(gs.Close)
				return pair{cpu.NewSequence(64), gs}
			}
			a, b := newPair(), newPair()
			next := 1
			tokens := func(n int) []int32 {
				next++
				return promptTokens(cpu.Config.Vocab, n, next)
			}
			step := func(what string, ps ...pair) {
				t.Helper()
				var cb, gb []model.Step
				n := map[string]int{"prompt": 12, "two": 2}[what]
				for _, p := range ps {
					toks := tokens(max(n, 1))
					cb = append(cb, model.Step{Seq: p.c, Tokens: toks})
					gb = append(gb, model.Step{Seq: p.g, Tokens: toks})
				}
				if err := cpu.Forward(ctx, cb); err != nil {
					t.Fatal(err)
				}
				if err := g.Forward(ctx, gb); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for i := range cb {
					if e := quant.NMSE(gb[i].Logits[0], cb[i].Logits[0]); !(e <= maxNMSE) {
						t.Fatalf("%s, step %d at %d: logits NMSE %.3g", what, i, ps[i].g.Pos(), e)
					}
				}
			}
			step("prompt", a)
			for range 4 {
				step("one", a)
			}
			step("two", a) // layer 0 back on the GPU: the CPU's rows go up
			for range 3 {
				step("one", a) // and down again
			}
			if err := a.c.Truncate(15); err != nil {
				t.Fatal(err)
			}
			if err := a.g.Truncate(15); err != nil {
				t.Fatal(err)
			}
			step("one", a)
			step("two", a)
			step("one", a)
			if err := b.c.CopyFrom(a.c, a.c.Pos()-2); err != nil {
				t.Fatal(err)
			}
			if err := b.g.CopyFrom(a.g, a.g.Pos()-2); err != nil {
				t.Fatal(err)
			}
			step("one", b)
			step("one", a)
			step("batch", a, b) // two tokens a pass: layer 0 on the GPU
			step("one", b)
			a.c.Reset()
			a.g.Reset()
			step("prompt", a)
			step("one", a)
			step("batch", a, b)
			st := g.HybridStats()
			t.Logf("CPU: %+v", st)
			if st.Synced == 0 || st.Whole == 0 {
				t.Errorf("no rows moved or no whole layer: %+v", st)
			}
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
	if len(streamed) == 0 {
		if ok || err != nil {
			t.Errorf("a pass that moved no layer: timeline %+v, ok %v, %v", lt, ok, err)
		}
		return
	}
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
		{"whole where the CPU takes FFNs only", Options{StreamLayers: []int{1}, Hybrid: &Hybrid{Plans: [][]int{nil}, Whole: [][]int{{1}}, FFNOnly: true}}, "takes FFNs only"},
		{"whole and FFN at once", Options{StreamLayers: []int{1}, Hybrid: &Hybrid{Plans: [][]int{{1}}, Whole: [][]int{{1}}}}, "both whole and by its FFN"},
		{"more whole plans than plans", Options{StreamLayers: []int{1}, Hybrid: &Hybrid{Plans: [][]int{nil}, Whole: [][]int{{1}, {1}}}}, "plans of whole layers"},
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
	fast, err := pl.plan(90e9, 90e9, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := &hybrid{planner: pl, plans: []tier.HybridPlan{fast}, rates: []float64{90e9}, wholeRates: []float64{90e9}, seen: make([]hybridSeen, 1), applied: 0}
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
	// The whole layers' rate is its own: drifting alone, it re-plans at
	// the rate seen and leaves the FFNs' as it was.
	rate = h.rates[0]
	run(rate, replanPasses)
	h.seen[0].wholeBytes, h.seen[0].wholeBusy = 45e9, time.Second
	if err := h.replan(1); err != nil || math.Abs(h.rates[0]/rate-1) > 1e-9 || math.Abs(h.wholeRates[0]/45e9-1) > 1e-9 || h.seen[0].replans != 3 {
		t.Fatalf("after the whole layers' drift: rates %g and %g (want %g and 45e9), %d re-plans, %v", h.rates[0], h.wholeRates[0], rate, h.seen[0].replans, err)
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
