package gpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
)

// TestStreamSplit: the share of a CPU layer's picks sent over PCIe
// finishes both links together, as near as whole picks allow, a link's
// fixed cost counted only where it has picks.
func TestStreamSplit(t *testing.T) {
	t.Parallel()
	const b = 3e6
	rate := func(fixed time.Duration, gbps float64) link { return link{fixed.Seconds(), 1 / (gbps * 1e9)} }
	for _, tc := range []struct {
		name        string
		kc          int
		copies, cpu link
		want        int
	}{
		{"equal rates, no fixed cost", 8, rate(0, 50), rate(0, 50), 4},
		{"copies faster", 8, rate(0, 55), rate(0, 40), 5}, // 5 copies end before 3 on the CPU
		{"CPU faster", 8, rate(0, 40), rate(0, 55), 3},
		{"a tie keeps the pick on the CPU", 1, rate(0, 50), rate(0, 50), 0},
		{"one pick, the copy faster", 1, rate(0, 100), rate(0, 40), 1},
		{"the CPU's call costs more than its bytes", 2, rate(10*time.Microsecond, 45), rate(200*time.Microsecond, 40), 2},
		{"the copies' latency keeps one pick home", 1, rate(100*time.Microsecond, 50), rate(20*time.Microsecond, 40), 0},
		{"slow copies", 2, rate(0, 10), rate(0, 70), 0},
		{"no picks", 0, rate(0, 50), rate(0, 50), 0},
	} {
		if got := streamSplit(tc.kc, b, tc.copies, tc.cpu); got != tc.want {
			t.Errorf("%s: streamSplit(%d) = %d, want %d", tc.name, tc.kc, got, tc.want)
		}
	}
}

// TestLinkFit: the fit finds a link's fixed cost and rate from layers of
// several sizes, reports none before it can tell them apart, and follows
// a rate that moves.
func TestLinkFit(t *testing.T) {
	t.Parallel()
	var f linkFit
	at := func(fixed time.Duration, gbps float64, bytes int64) time.Duration {
		return fixed + time.Duration(float64(bytes)/(gbps*1e9)*1e9)
	}
	for range 10 {
		f.add(3e6, at(50*time.Microsecond, 40, 3e6))
	}
	if _, _, ok := f.line(); ok {
		t.Error("a fit from layers of one size")
	}
	for i := range 40 {
		n := int64(1 + i%8)
		f.add(n*3e6, at(50*time.Microsecond, 40, n*3e6))
	}
	fixed, pb, ok := f.line()
	if !ok || math.Abs(fixed-50e-6) > 1e-6 || math.Abs(1/pb-40e9) > 0.4e9 {
		t.Errorf("fit %v s + bytes at %.3g B/s (ok %v), want 50 µs and 40 GB/s", fixed, 1/pb, ok)
	}
	for i := range 400 {
		n := int64(1 + i%8)
		f.add(n*3e6, at(50*time.Microsecond, 20, n*3e6))
	}
	if r := f.rate(); math.Abs(r-20e9) > 0.5e9 {
		t.Errorf("after the rate halved the fit says %.3g B/s", r)
	}
	f = linkFit{}
	f.add(0, time.Millisecond)
	f.add(5, 0)
	if f.n != 0 {
		t.Error("empty measurements counted")
	}
}

// TestStreamPicks: with a share of the CPU's picks copied to the GPU and
// computed there (SetStreamPicks), Q4_K_M mixture-of-experts models with
// none and some experts resident give the CPU reference's logits and
// greedy tokens, count every routed pick once, and go on as before once
// it is turned off.
func TestStreamPicks(t *testing.T) {
	eachPickedCase(t, func(t *testing.T, cpu *model.Model, g *Model, _ string) {
		cfg := cpu.Config
		if err := g.SetStreamPicks(true); err != nil {
			t.Fatal(err)
		}
		if err := g.SetStreamPicks(true); err != nil {
			t.Fatalf("turned on twice: %v", err)
		}
		const steps = 6
		worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 9, 4), steps)
		st, _ := g.MoEStats()
		t.Logf("worst NMSE %.3g; %+v", worst[0], st)
		if st.Streamed.Picks == 0 || st.Streamed.Bytes == 0 {
			t.Errorf("no pick went over PCIe: %+v", st.Streamed)
		}
		if counted, want := countedPicks(g), uint64((9+steps)*cfg.Layers*cfg.ExpertsUsed); counted != want {
			t.Errorf("ExpertCounts total %d, want %d", counted, want)
		}
		if err := g.SetStreamPicks(false); err != nil {
			t.Fatal(err)
		}
		greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 2), 3)
		if st2, _ := g.MoEStats(); st2.Streamed.Picks != st.Streamed.Picks {
			t.Errorf("picks streamed after turning it off: %d, then %d", st.Streamed.Picks, st2.Streamed.Picks)
		}
	})
}

// TestStreamPicksBatch: at more than one token (a prompt's pass, then
// passes of two sequences) the pick stream copies some of the CPU's
// experts to the GPU, each once for all of its tokens, and the grouped
// launches compute them beside the resident ones: the logits stay the CPU
// reference's, row by row.
func TestStreamPicksBatch(t *testing.T) {
	eachPickedCase(t, func(t *testing.T, cpu *model.Model, g *Model, _ string) {
		cfg := cpu.Config
		if err := g.SetStreamPicks(true); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var cs []*model.Sequence
		var gs []*Sequence
		for range 2 {
			cs = append(cs, cpu.NewSequence(0))
			s, err := g.NewSequence(0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			gs = append(gs, s)
		}
		pass := func(name string, toks [][]int32) []int32 {
			t.Helper()
			var cb, gb []model.Step
			for i, tk := range toks {
				cb = append(cb, model.Step{Seq: cs[i], Tokens: tk})
				gb = append(gb, model.Step{Seq: gs[i], Tokens: tk})
			}
			if err := cpu.Forward(ctx, cb); err != nil {
				t.Fatalf("%s: cpu: %v", name, err)
			}
			if err := g.Forward(ctx, gb); err != nil {
				t.Fatalf("%s: gpu: %v", name, err)
			}
			next := make([]int32, len(toks))
			for i := range toks {
				cl, gl := cb[i].Logits[0], gb[i].Logits[0]
				if e := quant.NMSE(gl, cl); e > maxNMSE {
					t.Fatalf("%s: seq %d: logits NMSE %.3g > %g", name, i, e, maxNMSE)
				}
				next[i] = sample.Argmax(cl)
			}
			return next
		}
		st0, _ := g.MoEStats()
		next := pass("prompts", [][]int32{promptTokens(cfg.Vocab, 9, 5), promptTokens(cfg.Vocab, 6, 6)})
		st1, _ := g.MoEStats()
		if st1.Streamed.Picks == st0.Streamed.Picks || st1.Streamed.Layers == st0.Streamed.Layers {
			t.Errorf("the prompts' pass (15 tokens) staged no expert: %+v", st1.Streamed)
		}
		// 15 tokens' picks outnumber the experts: the grouped products.
		if st1.BatchPicked != st0.BatchPicked {
			t.Errorf("the prompts' pass ran %d blocks by the picked kernels", st1.BatchPicked-st0.BatchPicked)
		}
		for i := range 4 {
			next = pass(fmt.Sprintf("decode %d", i), [][]int32{{next[0]}, {next[1]}})
		}
		st2, _ := g.MoEStats()
		t.Logf("streamed: prompts %+v, then %+v", st1.Streamed, st2.Streamed)
		if st2.Streamed.Picks == st1.Streamed.Picks {
			t.Errorf("passes of two sequences staged no expert: %+v", st2.Streamed)
		}
		// Two tokens' picks are no more than the tiny models' experts:
		// the blocks of those passes whose GPU computes its share (the
		// other way, the CPU computing every pick, is tried too) by the
		// picked kernels.
		if cfg.ExpertsUsed*2 <= cfg.Experts && st2.BatchPicked == st1.BatchPicked {
			t.Errorf("passes of two sequences ran no block by the picked kernels")
		}
		// The host's launches beside the CPU's work are timed within the
		// CPU's span.
		if st2.Beside < st0.Beside || st2.Beside-st0.Beside > st2.Busy-st0.Busy {
			t.Errorf("beside %v of the CPU's busy %v", st2.Beside-st0.Beside, st2.Busy-st0.Busy)
		}
		// The GPU's side of the split batch layers is timed (each read at
		// the next such layer, so all but the last).
		sp := st2.Streamed
		if sp.SideLayers == 0 || sp.SideLate > sp.SideLayers || sp.SideTail < 0 || sp.SideLate == 0 && sp.SideTail != 0 {
			t.Errorf("the GPU's side: %d layers timed, %d late by %v in all", sp.SideLayers, sp.SideLate, sp.SideTail)
		}
		// Models of fine experts stage the next layer's guessed experts
		// during the hand-overs of the decode passes, and the logits
		// above held with the guesses that were picked computed from
		// their sets.
		if aheadSlots(&cfg) > 0 && cfg.Layers > 1 {
			if sp.AheadStaged == 0 || sp.AheadUsed == 0 || sp.AheadUsed > sp.AheadStaged || sp.AheadBytes <= 0 {
				t.Errorf("staged ahead: %d experts (%d bytes), %d of them used", sp.AheadStaged, sp.AheadBytes, sp.AheadUsed)
			}
		}
	})
}

// TestBatchShare: a batch layer's share over PCIe is half its CPU experts
// until both links have fits (and every exploreEvery layers after), then
// the fits' balance, never more than the slots; the experts with the most
// tokens go first.
func TestBatchShare(t *testing.T) {
	t.Parallel()
	const E, b = 16, 3e6
	ps := &pickStream{tokens: make([]int, E)}
	ids := []int32{3, 5, 7, 9, 3, 5, 11, 3, 12, 13, 9, 3} // 3: four tokens, 5 and 9: two, others one
	es := []int{5, 7, 9, 11, 12, 13, 3}
	got := ps.batchShare(es, ids, b, 8)
	if len(got) != 3 || got[0] != 3 || got[1] != 5 || got[2] != 9 {
		t.Errorf("without fits: %v, want half of 7 by tokens: [3 5 9]", got)
	}
	if got := ps.batchShare([]int{1, 2, 3, 4, 5, 6, 7, 8}, ids, b, 2); len(got) != 2 {
		t.Errorf("two slots: %d experts staged", len(got))
	}
	var st PickStats
	ps.stats(&st)
	if st.BatchLayers != 2 || st.Capped != 1 {
		t.Errorf("after a split of 7 into 8 slots and one of 8 into 2: %d batch layers, %d capped; want 2, 1", st.BatchLayers, st.Capped)
	}
	// Fits: copies at 50 GB/s, the CPU at 25 GB/s: two thirds over PCIe.
	for i := range 40 {
		n := int64(1 + i%8)
		ps.copies.add(n*b, time.Duration(float64(n*b)/50e9*1e9))
		ps.cpuBatch.add(n*b, time.Duration(float64(n*b)/25e9*1e9))
	}
	ps.batchSplits = 0
	es = []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got := ps.batchShare(es, ids, b, 16); len(got) != 6 {
		t.Errorf("fitted: %d of 9 experts staged, want 6", len(got))
	}
	// The GPU side timed whole (late start, launches) at 25 GB/s: the
	// split follows it, not the copies' 50: half over PCIe.
	for i := range 40 {
		n := int64(1 + i%8)
		ps.side.add(n*b, time.Duration(float64(n*b)/25e9*1e9))
	}
	ps.batchSplits = 0
	es = []int{1, 2, 3, 4, 5, 6, 7, 8}
	if got := ps.batchShare(es, ids, b, 16); len(got) != 4 {
		t.Errorf("fitted with the side's time: %d of 8 experts staged, want 4", len(got))
	}
	if got := ps.batchShare(nil, ids, b, 8); got != nil {
		t.Errorf("no CPU experts: %v", got)
	}
}

// TestAheadTake: a batch layer takes from the set staged for it the
// experts its CPU would compute, marks them staged, serves it once, and
// clear ends the marks; a layer no set holds takes none.
func TestAheadTake(t *testing.T) {
	t.Parallel()
	a := &aheadStage{layer: [2]int{-1, 5}, usedSet: -1}
	a.es[1] = []int{3, 9, 12}
	staged := make([]bool, 16)
	if rest := a.take(4, []int{3, 9}, staged); len(rest) != 2 || a.usedSet != -1 || staged[3] {
		t.Errorf("layer 4 (no set): rest %v, set %d", rest, a.usedSet)
	}
	rest := a.take(5, []int{1, 3, 7, 12}, staged)
	if !slices.Equal(rest, []int{1, 7}) || !slices.Equal(a.used, []int{3, 12}) || a.usedSet != 1 || !staged[3] || !staged[12] || staged[9] || a.hits != 2 {
		t.Errorf("layer 5: rest %v, used %v of set %d, hits %d", rest, a.used, a.usedSet, a.hits)
	}
	if a.layer[1] != -1 {
		t.Errorf("the set still holds layer %d after serving it", a.layer[1])
	}
	a.clear(staged)
	if staged[3] || staged[12] || a.usedSet != -1 || len(a.used) != 0 {
		t.Errorf("after clear: marks %v, set %d", staged, a.usedSet)
	}
	if rest := a.take(5, []int{3}, staged); len(rest) != 1 || a.usedSet != -1 {
		t.Errorf("layer 5 again: rest %v, set %d", rest, a.usedSet)
	}
}

// TestAheadSlots: models of fine experts stage half a token's picks
// ahead; those of few large experts none, and take no memory for it.
func TestAheadSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		experts, used, want int
	}{{128, 8, 4}, {8, 2, 0}, {64, 4, 2}} {
		cfg := &model.Config{Experts: tc.experts, ExpertsUsed: tc.used, Dim: 64}
		if got := aheadSlots(cfg); got != tc.want {
			t.Errorf("%d of %d: %d slots, want %d", tc.used, tc.experts, got, tc.want)
		}
		if b := aheadBytes(cfg, 1<<20); (b == 0) != (tc.want == 0) || b != 0 && b < int64(2*tc.want)<<20 {
			t.Errorf("%d of %d: %d bytes for %d slots a set", tc.used, tc.experts, b, tc.want)
		}
	}
}

// TestGuessedCPU: the experts staged ahead are the guess's off the
// device, each once, those with the most tokens first, no more than the
// slots; an id out of range is an error.
func TestGuessedCPU(t *testing.T) {
	t.Parallel()
	resident := func(e int) bool { return e == 2 || e == 6 }
	count := make([]int, 8)
	tests := []struct {
		name  string
		ids   []int32
		slots int
		want  []int
	}{
		{"by tokens", []int32{1, 3, 2, 5, 3, 4, 5, 3}, 4, []int{3, 5, 1, 4}},
		{"capped", []int32{1, 3, 2, 5, 3, 4, 5, 3}, 2, []int{3, 5}},
		{"resident only", []int32{2, 6, 2, 6}, 4, []int{}},
		{"tie keeps order", []int32{7, 0, 7, 0}, 4, []int{7, 0}},
	}
	for _, tc := range tests {
		got, err := guessedCPU(nil, count, tc.ids, 8, tc.slots, resident)
		if err != nil || !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := guessedCPU(nil, count, []int32{1, 8}, 8, 4, resident); err == nil {
		t.Error("expert 8 of 8 taken")
	}
}
