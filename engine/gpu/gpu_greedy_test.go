package gpu

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
)

// greedyPair advances two pairs of sequences in lockstep for steps decode
// passes after their prompts: one pair downloads its logits and picks each
// next token on the host by engine/sample's greedy sampler, the other asks
// for Step.Greedy (selected on the device); both pairs are fed the logits
// path's tokens, and every device token must equal it. It returns the
// tokens chosen and fails on the first difference.
func greedyPair(t *testing.T, g *Model, prompts [2][]int32, steps int) []int32 {
	t.Helper()
	ctx := context.Background()
	smp, err := sample.New(sample.Greedy())
	if err != nil {
		t.Fatal(err)
	}
	var lb, gb []model.Step
	for i := range 2 {
		for _, b := range []*[]model.Step{&lb, &gb} {
			s, err := g.NewSequence(len(prompts[i]) + steps + 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			*b = append(*b, model.Step{Seq: s, Tokens: prompts[i], Greedy: b == &gb})
		}
	}
	var toks []int32
	for i := 0; i <= steps; i++ {
		if err := g.Forward(ctx, lb); err != nil {
			t.Fatalf("step %d: logits pass: %v", i, err)
		}
		if err := g.Forward(ctx, gb); err != nil {
			t.Fatalf("step %d: greedy pass: %v", i, err)
		}
		for j := range 2 {
			want := smp.Sample(lb[j].Logits[0], nil)
			if gb[j].Token != want {
				t.Fatalf("step %d sequence %d: device token %d, logits path %d (tokens so far %v)", i, j, gb[j].Token, want, toks)
			}
			if gb[j].Logits != nil {
				t.Fatalf("step %d sequence %d: the device-selecting pass filled Logits", i, j)
			}
			if gb[j].Seq.Pos() != lb[j].Seq.Pos() {
				t.Fatalf("step %d sequence %d: positions %d and %d", i, j, gb[j].Seq.Pos(), lb[j].Seq.Pos())
			}
			lb[j] = model.Step{Seq: lb[j].Seq, Tokens: []int32{want}, Logits: lb[j].Logits}
			gb[j] = model.Step{Seq: gb[j].Seq, Tokens: []int32{want}, Greedy: true}
			toks = append(toks, want)
		}
	}
	// A pass mixing a greedy step with one that wants its logits downloads
	// the rows and leaves the token to the caller's sampler: Logits
	// filled, Token untouched.
	mixed := []model.Step{{Seq: lb[0].Seq, Tokens: lb[0].Tokens}, {Seq: gb[0].Seq, Tokens: gb[0].Tokens, Greedy: true, Token: -1}}
	if err := g.Forward(ctx, mixed); err != nil {
		t.Fatalf("mixed pass: %v", err)
	}
	if len(mixed[1].Logits) != 1 || mixed[1].Token != -1 {
		t.Fatalf("mixed pass: token %d, %d logit rows", mixed[1].Token, len(mixed[1].Logits))
	}
	return toks
}

// TestGreedyOnDevice: Step.Greedy's device-selected tokens equal the
// logits path's greedy choice for 64 steps (two sequences per pass, after
// a prompt pass that also selects on the device), for every architecture
// (gemma2's final soft-cap runs before the selection), resident with the
// decode graph (its copies inside the graph or around it) and without,
// and with a layer streamed from tier B.
func TestGreedyOnDevice(t *testing.T) {
	gpu(t)
	for _, arch := range gpuFamilies {
		for _, typ := range []string{"f32", "q4_k_m"} {
			cpu := tinyModel(t, arch, typ)
			for _, v := range []struct {
				name   string
				opts   Options
				copies bool
			}{
				{"graph", Options{}, true},
				{"graph, copies outside", Options{}, false},
				{"no graph", Options{NoGraphs: true}, true},
				{"layer 1 on tier B", Options{StreamLayers: []int{1}}, true},
			} {
				t.Run(fmt.Sprintf("%s/%s/%s", arch, typ, v.name), func(t *testing.T) {
					g := loadGPU(t, cpu, v.opts)
					g.pass.graphCopies = v.copies
					V := cpu.Config.Vocab
					toks := greedyPair(t, g, [2][]int32{promptTokens(V, 16, 1), promptTokens(V, 9, 2)}, 64)
					st := g.Stats()
					wantGraphs := !v.opts.NoGraphs && v.opts.StreamLayers == nil
					if wantGraphs != (st.GraphReplays > 0) {
						t.Errorf("%d graph replays", st.GraphReplays)
					}
					if wantGraphs && st.GraphCaptures < 2 {
						t.Errorf("%d graph captures: want a logits graph and a selecting graph", st.GraphCaptures)
					}
					if g.fw.noGraphCopies != nil {
						t.Errorf("capturing the copies failed: %v", g.fw.noGraphCopies)
					}
					t.Logf("%d tokens equal; %+v; first %v", len(toks), st, toks[:8])
				})
			}
		}
	}
}

// Test8BGreedy: on the resident 8b shape (STRATA_8B_GGUF; STRATA_8B_STEPS
// steps, default 8), the device-selected greedy tokens equal the logits
// path's for every step; no CPU reference is needed, Test8B ties the
// logits path to engine/model.
func Test8BGreedy(t *testing.T) {
	cpu, _ := openBig(t, "STRATA_8B_GGUF", "8b")
	steps := steps8B(t)
	g := loadGPU(t, cpu, Options{MaxSeqs: 4, MaxContext: 256})
	t0 := time.Now()
	V := cpu.Config.Vocab
	toks := greedyPair(t, g, [2][]int32{promptTokens(V, 16, 3), promptTokens(V, 16, 4)}, steps)
	t.Logf("8b: %d greedy tokens selected on the device equal the logits path's (%v); %+v", len(toks), time.Since(t0).Round(time.Millisecond), g.Stats())
}

// steps8B is STRATA_8B_STEPS (default 8).
func steps8B(t *testing.T) int {
	t.Helper()
	s := os.Getenv("STRATA_8B_STEPS")
	if s == "" {
		return 8
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("STRATA_8B_STEPS=%q: want a positive count", s)
	}
	return n
}
