package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/kernels"
)

// greedyCompare runs prompt then steps greedy decode steps on the CPU
// reference and on each GPU model, feeding all of them the CPU's greedy
// token, and requires each GPU model to choose the same token with logits
// within maxNMSE at every step (or one whose reference logit ties the
// CPU's choice within tieMargin). It returns each model's worst NMSE.
func greedyCompare(t *testing.T, cpu *model.Model, gms []*Model, prompt []int32, steps int) []float64 {
	t.Helper()
	ctx := context.Background()
	cs := cpu.NewSequence(len(prompt) + steps + 1)
	cb := []model.Step{{Seq: cs, Tokens: prompt}}
	gbs := make([][]model.Step, len(gms))
	for i, g := range gms {
		gs, err := g.NewSequence(len(prompt) + steps + 1)
		if err != nil {
			t.Fatal(err)
		}
		defer gs.Close()
		gbs[i] = []model.Step{{Seq: gs, Tokens: prompt}}
	}
	worst := make([]float64, len(gms))
	var toks []int32
	for i := 0; i <= steps; i++ {
		t0 := time.Now()
		if err := cpu.Forward(ctx, cb); err != nil {
			t.Fatalf("step %d: cpu: %v", i, err)
		}
		cpuTime := time.Since(t0)
		cl := cb[0].Logits[0]
		ct := sample.Argmax(cl)
		for gi, g := range gms {
			gb := gbs[gi]
			t1 := time.Now()
			if err := g.Forward(ctx, gb); err != nil {
				t.Fatalf("step %d: gpu model %d: %v", i, gi, err)
			}
			if i < 2 {
				t.Logf("step %d: cpu %v, gpu model %d %v", i, cpuTime.Round(time.Millisecond), gi, time.Since(t1).Round(time.Microsecond))
			}
			gl := gb[0].Logits[0]
			e := quant.NMSE(gl, cl)
			worst[gi] = max(worst[gi], e)
			if e > maxNMSE {
				t.Fatalf("step %d: gpu model %d: logits NMSE %.3g > %g", i, gi, e, maxNMSE)
			}
			if gt := sample.Argmax(gl); gt != ct {
				// A tie within the logits' measured error is no
				// disagreement: both models go on with the CPU's token.
				if gap := cl[ct] - cl[gt]; gap > tieMargin(cl, e) {
					t.Fatalf("step %d: gpu model %d: greedy token %d, %d on the CPU (NMSE %.3g; the CPU's logits %.4g apart, a tie within %.3g; tokens so far %v)", i, gi, gt, ct, e, gap, tieMargin(cl, e), toks)
				}
				t.Logf("step %d: gpu model %d: greedy token %d, %d on the CPU: a tie (the CPU's logits %.3g apart, NMSE %.3g)", i, gi, gt, ct, cl[ct]-cl[gt], e)
			}
			if cs.Pos() != gb[0].Seq.Pos() {
				t.Fatalf("step %d: positions %d (cpu) and %d (gpu model %d)", i, cs.Pos(), gb[0].Seq.Pos(), gi)
			}
			gb[0] = model.Step{Seq: gb[0].Seq, Tokens: []int32{ct}, Logits: gb[0].Logits}
		}
		toks = append(toks, ct)
		cb[0] = model.Step{Seq: cs, Tokens: []int32{ct}}
	}
	return worst
}

// tieMargin is how far apart two of the reference's logits may be and
// still tie for a model whose logits differ from them by an NMSE of e:
// four times the error's RMS.
func tieMargin(ref []float32, e float64) float32 {
	var ss float64
	for _, x := range ref {
		ss += float64(x) * float64(x)
	}
	return float32(4 * math.Sqrt(e*ss/float64(len(ref))))
}

// TestTinyFidelity: logits NMSE <= 1e-4 at every step and the same 64
// greedy tokens as engine/model, for every architecture the GPU runs in
// f32 and Q4_K_M, with graphs (the default) and without. The 16-token
// prompt goes through the GEMM path, the decode steps through GEMV.
func TestTinyFidelity(t *testing.T) {
	gpu(t)
	for _, arch := range gpuFamilies {
		for _, typ := range []string{"f32", "q4_k_m"} {
			for _, graphs := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/graphs=%v", arch, typ, graphs), func(t *testing.T) {
					cpu := tinyModel(t, arch, typ)
					g := loadGPU(t, cpu, Options{NoGraphs: !graphs})
					const steps = 64
					worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cpu.Config.Vocab, 16, 1), steps)
					st := g.Stats()
					t.Logf("worst NMSE %.3g over %d steps; stats %+v", worst[0], steps+1, st)
					if graphs && st.GraphReplays != steps {
						t.Errorf("%d graph replays, want %d (one per decode step)", st.GraphReplays, steps)
					}
					if !graphs && st.GraphReplays != 0 {
						t.Errorf("%d graph replays with NoGraphs", st.GraphReplays)
					}
				})
			}
		}
	}
}

// TestBatched drives several sequences through shared passes — prompts of
// different lengths with and without AllLogits, then batched decode (the
// graph path), then a mixed pass (decode tokens around a continued
// prompt) — and compares every logit row with the CPU reference, which is
// batch-independent.
func TestBatched(t *testing.T) {
	gpu(t)
	for _, tc := range []struct{ arch, typ string }{{"llama", "q4_k_m"}, {"gemma2", "f32"}, {"mistral", "q4_k_m"},
		{"qwen2", "q4_k_m"}, {"qwen3", "f32"}, {"gemma3", "q4_k_m"}, {"phi3", "q4_k_m"}} {
		t.Run(tc.arch+"/"+tc.typ, func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			g := loadGPU(t, cpu, Options{MaxSeqs: 4})
			ctx := context.Background()
			V := cpu.Config.Vocab
			var cs []*model.Sequence
			var gs []*Sequence
			for range 3 {
				cs = append(cs, cpu.NewSequence(0))
				s, err := g.NewSequence(0)
				if err != nil {
					t.Fatal(err)
				}
				gs = append(gs, s)
			}
			run := func(name string, toks [][]int32, all []bool) []int32 {
				t.Helper()
				var cb []model.Step
				var gb []model.Step
				for i, tk := range toks {
					if tk == nil {
						continue
					}
					cb = append(cb, model.Step{Seq: cs[i], Tokens: tk, AllLogits: all[i]})
					gb = append(gb, model.Step{Seq: gs[i], Tokens: tk, AllLogits: all[i]})
				}
				if err := cpu.Forward(ctx, cb); err != nil {
					t.Fatalf("%s: cpu: %v", name, err)
				}
				if err := g.Forward(ctx, gb); err != nil {
					t.Fatalf("%s: gpu: %v", name, err)
				}
				next := make([]int32, len(toks))
				j := 0
				for i := range toks {
					if toks[i] == nil {
						continue
					}
					if len(gb[j].Logits) != len(cb[j].Logits) {
						t.Fatalf("%s: seq %d: %d logit rows, want %d", name, i, len(gb[j].Logits), len(cb[j].Logits))
					}
					for r := range cb[j].Logits {
						if len(gb[j].Logits[r]) != V {
							t.Fatalf("%s: seq %d row %d: %d logits", name, i, r, len(gb[j].Logits[r]))
						}
						if e := quant.NMSE(gb[j].Logits[r], cb[j].Logits[r]); e > maxNMSE {
							t.Errorf("%s: seq %d row %d: NMSE %.3g", name, i, r, e)
						}
					}
					last := cb[j].Logits[len(cb[j].Logits)-1]
					next[i] = sample.Argmax(last)
					if gt := sample.Argmax(gb[j].Logits[len(gb[j].Logits)-1]); gt != next[i] {
						t.Errorf("%s: seq %d: greedy %d on the GPU, %d on the CPU", name, i, gt, next[i])
					}
					if gs[i].Pos() != cs[i].Pos() {
						t.Errorf("%s: seq %d: position %d, want %d", name, i, gs[i].Pos(), cs[i].Pos())
					}
					j++
				}
				return next
			}
			next := run("prompts", [][]int32{promptTokens(V, 12, 1), promptTokens(V, 1, 2), promptTokens(V, 5, 3)}, []bool{true, false, false})
			for i := range 10 {
				next = run(fmt.Sprintf("decode %d", i), [][]int32{{next[0]}, {next[1]}, {next[2]}}, []bool{false, false, false})
			}
			// Two of three sequences, then a mixed pass: a continued prompt
			// between two decode tokens (GEMV path, prefill attention).
			n2 := run("decode pair", [][]int32{{next[0]}, nil, {next[2]}}, []bool{false, false, false})
			run("mixed", [][]int32{{n2[0]}, append([]int32{next[1]}, promptTokens(V, 3, 4)...), {n2[2]}}, []bool{false, true, false})
			if st := g.Stats(); st.GraphCaptures < 2 || st.GraphReplays != 11 {
				t.Errorf("stats %+v: want captures for 3 and 2 sequences and 11 replays", st)
			}
		})
	}
}

// TestGraphMatchesDirect compares decode steps replayed from a graph with
// the same steps launched kernel by kernel. They differ only in how decode
// attention splits its keys (the graph sizes it for a span bucket), so the
// logits agree to float32 rounding — on the float GEMV path. On the
// integer one (the default) a rounding difference in x can move an
// element of x across a 16-bit quantization step, which the next GEMV
// carries in full (2^-16 of its block's largest element), so that path
// gets 1e-7, well above what it shows.
func TestGraphMatchesDirect(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	ga := loadGPU(t, cpu, Options{MaxSeqs: 2})
	gd := loadGPU(t, cpu, Options{MaxSeqs: 2, NoGraphs: true})
	bound := 1e-9
	if ga.k.Tuning().IntegerGEMV {
		bound = 1e-7
	}
	worst, _, _ := lockstep(t, gd, ga, promptTokens(cpu.Config.Vocab, 20, 5), 39)
	if worst > bound {
		t.Fatalf("graph vs direct NMSE %.3g (bound %.0e)", worst, bound)
	}
	st := ga.Stats()
	t.Logf("graph vs direct: worst NMSE %.3g; %d nodes per decode step (%d layers)", worst, st.GraphNodes, cpu.Config.Layers)
	if st.GraphReplays != 39 || st.GraphNodes == 0 {
		t.Errorf("stats %+v: want 39 replays", st)
	}
}

// TestRelayQ6K: a model whose resident Q6_K matrices were re-laid at load
// (quant.Q6KA: the tiny Q4_K_M llama's v and down of its use_more_bits
// layers and its output) gives the logits of the same model with every
// layer streamed from tier B, whose layers keep plain Q6_K, to the integer
// GEMVs' reordering of float sums, and the same greedy tokens, over a
// prompt and 24 decode steps.
func TestRelayQ6K(t *testing.T) {
	t.Parallel()
	gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	all := make([]int, cpu.Config.Layers)
	for i := range all {
		all[i] = i
	}
	gp := loadGPU(t, cpu, Options{MaxSeqs: 1, StreamLayers: all})
	gr := loadGPU(t, cpu, Options{MaxSeqs: 1})
	for i, lw := range gp.layers {
		for _, m := range []kernels.Matrix{lw.q, lw.k, lw.v, lw.o, lw.gate, lw.up, lw.down} {
			if m.Type == quant.Q6KA {
				t.Fatalf("streamed layer %d has a re-laid matrix", i)
			}
		}
	}
	relaid := 0
	for _, lw := range gr.layers {
		for _, m := range []kernels.Matrix{lw.q, lw.k, lw.v, lw.o, lw.gate, lw.up, lw.down} {
			if m.Type == quant.Q6KA {
				relaid++
			}
		}
	}
	if gr.output.Type == quant.Q6KA {
		relaid++
	}
	if relaid == 0 || gr.relaid != relaid || !strings.Contains(gr.KernelImage(), fmt.Sprintf("%d resident Q6_K matrices re-laid", relaid)) {
		t.Fatalf("%d matrices re-laid, model counts %d, kernel image %q", relaid, gr.relaid, gr.KernelImage())
	}
	const steps = 24
	worst, _, agree := lockstep(t, gp, gr, promptTokens(cpu.Config.Vocab, 20, 3), steps)
	if worst > 1e-7 || agree != steps+1 {
		t.Fatalf("re-laid vs streamed plain: worst NMSE %.3g, the same greedy token at %d of %d passes", worst, agree, steps+1)
	}
	t.Logf("%d matrices re-laid; worst NMSE against the streamed plain layers %.3g", relaid, worst)
}

// TestValidation: bad batches fail before anything changes, as on the CPU.
func TestValidation(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "f32")
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, MaxContext: 32})
	other := loadGPU(t, cpu, Options{MaxSeqs: 1})
	ctx := context.Background()
	a, err := g.NewSequence(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.NewSequence(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.NewSequence(0); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("third sequence of two slots: %v, want ErrNoSlot", err)
	}
	foreign, _ := other.NewSequence(0)
	if err := g.Forward(ctx, []model.Step{{Seq: a, Tokens: []int32{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		batch []model.Step
		is    error
	}{
		{"empty", ctx, nil, nil},
		{"nil sequence", ctx, []model.Step{{Tokens: []int32{1}}}, nil},
		{"no tokens", ctx, []model.Step{{Seq: a}}, nil},
		{"duplicate", ctx, []model.Step{{Seq: a, Tokens: []int32{1}}, {Seq: a, Tokens: []int32{2}}}, nil},
		{"token range", ctx, []model.Step{{Seq: a, Tokens: []int32{1, int32(cpu.Config.Vocab)}}}, nil},
		{"negative token", ctx, []model.Step{{Seq: b, Tokens: []int32{-1}}}, nil},
		{"foreign", ctx, []model.Step{{Seq: a, Tokens: []int32{1}}, {Seq: foreign, Tokens: []int32{1}}}, nil},
		{"overflow", ctx, []model.Step{{Seq: a, Tokens: []int32{1}}, {Seq: b, Tokens: make([]int32, 9)}}, model.ErrContextOverflow},
		{"slot overflow", ctx, []model.Step{{Seq: a, Tokens: make([]int32, 30)}}, model.ErrContextOverflow},
		{"cancelled", cancelled, []model.Step{{Seq: a, Tokens: []int32{1}}}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := g.Forward(tc.ctx, tc.batch)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("%v, want %v", err, tc.is)
			}
			if a.Pos() != 3 || b.Pos() != 0 {
				t.Fatalf("positions moved to %d, %d", a.Pos(), b.Pos())
			}
		})
	}
	b.Close()
	if err := g.Forward(ctx, []model.Step{{Seq: b, Tokens: []int32{1}}}); err == nil {
		t.Error("forward on a closed sequence succeeded")
	}
	if _, err := g.NewSequence(0); err != nil {
		t.Errorf("closing a sequence did not free its slot: %v", err)
	}
	if err := a.Truncate(4); err == nil {
		t.Error("truncate past the position succeeded")
	}
	if err := a.Truncate(1); err != nil || a.Pos() != 1 {
		t.Errorf("truncate to 1: %v, pos %d", err, a.Pos())
	}
}

// TestResumeAfterTruncate: a truncated sequence recomputes the dropped
// positions exactly as the CPU does (the cache slots are overwritten).
func TestResumeAfterTruncate(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "gemma2", "q4_k_m")
	g := loadGPU(t, cpu, Options{MaxSeqs: 1})
	ctx := context.Background()
	cs := cpu.NewSequence(0)
	gs, _ := g.NewSequence(0)
	p := promptTokens(cpu.Config.Vocab, 24, 9)
	for _, s := range []func() error{
		func() error { return cpu.Forward(ctx, []model.Step{{Seq: cs, Tokens: p}}) },
		func() error { return g.Forward(ctx, []model.Step{{Seq: gs, Tokens: p}}) },
	} {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	cs.Truncate(10)
	gs.Truncate(10)
	q := promptTokens(cpu.Config.Vocab, 6, 11)
	cb := []model.Step{{Seq: cs, Tokens: q, AllLogits: true}}
	gb := []model.Step{{Seq: gs, Tokens: q, AllLogits: true}}
	if err := cpu.Forward(ctx, cb); err != nil {
		t.Fatal(err)
	}
	if err := g.Forward(ctx, gb); err != nil {
		t.Fatal(err)
	}
	for r := range cb[0].Logits {
		if e := quant.NMSE(gb[0].Logits[r], cb[0].Logits[r]); e > maxNMSE {
			t.Errorf("row %d: NMSE %.3g", r, e)
		}
	}
}

// TestStreamedFidelity: with layers on tier B (pinned host memory, copied
// into rotating device slots on the copy stream every pass) the logits and
// 64 greedy tokens match the CPU reference as the resident model does.
func TestStreamedFidelity(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch, typ string
		layers    []int
		slots     int
	}{
		{"llama", "q4_k_m", []int{0, 1}, 1},
		{"llama", "f32", []int{1}, 2},
		{"gemma2", "q4_k_m", []int{0, 2, 3}, 2},
		{"gemma2", "f32", []int{0, 1, 2, 3}, 3},
		{"qwen2", "q4_k_m", []int{1}, 1},
		{"qwen3", "f32", []int{0, 1}, 2},
		{"gemma3", "q4_k_m", []int{1, 4, 5}, 2},
		{"phi3", "f32", []int{0}, 1},
	} {
		t.Run(fmt.Sprintf("%s/%s/%v/k=%d", tc.arch, tc.typ, tc.layers, tc.slots), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			g := loadGPU(t, cpu, Options{StreamLayers: tc.layers, Slots: tc.slots})
			worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cpu.Config.Vocab, 16, 1), 64)
			t.Logf("worst NMSE %.3g; %d bytes streamed per pass", worst[0], g.StreamedBytes())
			if g.StreamedBytes() == 0 || g.Stats().GraphReplays != 0 {
				t.Errorf("streamed %d bytes per pass, %d graph replays", g.StreamedBytes(), g.Stats().GraphReplays)
			}
		})
	}
	cpu := tinyModel(t, "llama", "f32")
	if _, err := Load(gpuDev, cpu.Config, cpu.Weights, Options{StreamLayers: []int{2}, Kernels: gpuK}); err == nil {
		t.Error("streaming layer 2 of 2 loaded")
	}
}

// Test8B compares the 8b shape (Q4_K_M) with the CPU reference, resident,
// with layers 16..31 streamed from tier B, and hybrid (the CPU computing
// the FFN of every other streamed layer). The model is big (4.9 GB)
// and slow on the CPU (about a second per token on 16 cores), so the test
// runs only when STRATA_8B_GGUF names a file written by `strata model synth
// --arch llama --shape 8b --type q4_k_m`, and compares STRATA_8B_STEPS
// greedy steps (default 8) after a 16-token prompt.
func Test8B(t *testing.T) {
	cpu, _ := openBig(t, "STRATA_8B_GGUF", "8b")
	steps := steps8B(t)
	t0 := time.Now()
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, MaxContext: 256})
	t.Logf("loaded %.2f GiB of weights in %v", gib(g.WeightBytes()), time.Since(t0).Round(time.Millisecond))
	var half []int
	for l := cpu.Config.Layers / 2; l < cpu.Config.Layers; l++ {
		half = append(half, l)
	}
	t0 = time.Now()
	gs := loadGPU(t, cpu, Options{MaxSeqs: 1, MaxContext: 256, StreamLayers: half})
	t.Logf("streamed model: %.2f GiB resident, %.2f GiB on tier B, loaded in %v", gib(gs.WeightBytes()), gib(gs.StreamedBytes()), time.Since(t0).Round(time.Millisecond))
	// Hybrid: the CPU takes the FFN of every other streamed layer.
	var cpuFFN []int
	for _, l := range half {
		if l%2 == 1 {
			cpuFFN = append(cpuFFN, l)
		}
	}
	gh := loadGPU(t, cpu, Options{MaxSeqs: 1, MaxContext: 256, StreamLayers: half, Hybrid: &Hybrid{Plans: [][]int{cpuFFN}}})
	worst := greedyCompare(t, cpu, []*Model{g, gs, gh}, promptTokens(cpu.Config.Vocab, 16, 3), steps)
	t.Logf("8b: worst NMSE %.3g resident, %.3g streamed, %.3g hybrid (CPU FFN of layers %v: %+v), over %d steps (prompt + %d greedy); integer GEMV %v (Q6_K %v)",
		worst[0], worst[1], worst[2], cpuFFN, gh.HybridStats(), steps+1, steps, g.k.Tuning().IntegerGEMV, g.k.Tuning().IntegerQ6K)
}

// TestLoadVariants: Options.Variants change the model's view of the given
// kernels (here the float GEMVs, whose logits then agree with the
// integer ones' within the fidelity bound) and leave the given Kernels
// as they are; a variant that would change the loaded image, or an
// unknown one, fails the load.
func TestLoadVariants(t *testing.T) {
	t.Parallel()
	dev, k := gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	gi := loadGPU(t, cpu, Options{MaxSeqs: 1})
	gf := loadGPU(t, cpu, Options{MaxSeqs: 1, Variants: []string{"float-gemv"}})
	if gf.k.Tuning().IntegerGEMV || gi.k.Tuning() != k.Tuning() {
		t.Fatalf("float-gemv: model's tuning %+v, the given kernels' %+v", gf.k.Tuning(), k.Tuning())
	}
	worst, _, agree := lockstep(t, gi, gf, promptTokens(cpu.Config.Vocab, 20, 4), 8)
	if worst > maxNMSE {
		t.Fatalf("integer vs float GEMVs: worst NMSE %.3g", worst)
	}
	t.Logf("integer vs float GEMVs: worst NMSE %.3g, the same greedy token at %d of 9 passes", worst, agree)
	for _, v := range [][]string{{"no such variant"}, {"jit"}} {
		if v[0] == "jit" && !k.Tuning().Cubin {
			continue // the given kernels are the PTX already: jit changes nothing
		}
		if _, err := Load(dev, cpu.Config, cpu.Weights, Options{MaxSeqs: 1, Kernels: k, Variants: v}); err == nil {
			t.Errorf("variants %q: loaded", v)
		}
	}
}
