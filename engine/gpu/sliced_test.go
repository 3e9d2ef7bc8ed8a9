package gpu

import (
	"context"
	"math"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
)

// slicedRun decodes prompt and steps greedy tokens on g, one sequence,
// with down by column slices on or off (passTuning.slicedDown), and
// returns every pass's logits and the tokens chosen.
func slicedRun(t *testing.T, g *Model, on bool, prompt []int32, steps int) ([][]float32, []int32) {
	t.Helper()
	defer func(was bool) { g.pass.slicedDown = was }(g.pass.slicedDown)
	g.pass.slicedDown = on
	seq, err := g.NewSequence(len(prompt) + steps + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	b := []model.Step{{Seq: seq, Tokens: prompt}}
	var logits [][]float32
	var toks []int32
	for i := 0; i <= steps; i++ {
		if err := g.Forward(context.Background(), b); err != nil {
			t.Fatalf("sliced %v, pass %d: %v", on, i, err)
		}
		l := append([]float32(nil), b[0].Logits[0]...)
		logits = append(logits, l)
		tok := int32(sample.Argmax(l))
		toks = append(toks, tok)
		b[0] = model.Step{Seq: seq, Tokens: []int32{tok}, Logits: b[0].Logits}
	}
	return logits, toks
}

// Test8BSliced: the 8b shape's one-token passes with down by column slices
// (kernels.GEMVSliced, fixed-point sums) against the same model with them
// off: every layer's down sliced where the kernels take the shape, the
// logits the same bits on a second run (the sums do not depend on which
// block finishes first), within NMSE 1e-6 of the unsliced path's (the
// order of the float sums differs), and the same 24 greedy tokens. Both
// kernel by kernel (graphs would keep whichever path they captured);
// Test8B runs the sliced path from graphs against the CPU. Like Test8B it
// needs STRATA_8B_GGUF.
func Test8BSliced(t *testing.T) {
	cpu, _ := openBig(t, "STRATA_8B_GGUF", "8b")
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, MaxContext: 256, NoGraphs: true})
	prompt := promptTokens(cpu.Config.Vocab, 16, 5)
	// The first pass sizes the activations (downSliced needs them).
	on, onToks := slicedRun(t, g, true, prompt, 24)
	n := 0
	for i := range g.layers {
		if g.downSliced(&g.layers[i], 1) {
			n++
		}
	}
	t.Logf("down by column slices in %d of %d layers", n, len(g.layers))
	if n == 0 {
		t.Skip("the kernels take no layer's down by column slices on this device")
	}
	if n != len(g.layers) {
		t.Errorf("down by column slices in %d of %d layers, want all (each a Q4_K or re-laid Q6_K 4096x14336)", n, len(g.layers))
	}
	again, _ := slicedRun(t, g, true, prompt, 24)
	off, offToks := slicedRun(t, g, false, prompt, 24)
	worst := 0.0
	for i := range on {
		for j := range on[i] {
			if math.Float32bits(on[i][j]) != math.Float32bits(again[i][j]) {
				t.Fatalf("pass %d: logit %d = %v, then %v on a second run", i, j, on[i][j], again[i][j])
			}
		}
		e := quant.NMSE(on[i], off[i])
		worst = max(worst, e)
		if e > 1e-6 {
			t.Fatalf("pass %d: sliced against unsliced logits NMSE %.3g > 1e-6", i, e)
		}
		if onToks[i] != offToks[i] {
			t.Fatalf("pass %d: greedy token %d sliced, %d unsliced (NMSE %.3g)", i, onToks[i], offToks[i], e)
		}
	}
	t.Logf("sliced against unsliced: worst NMSE %.3g over %d passes; sliced twice: bit-identical", worst, len(on))
}
