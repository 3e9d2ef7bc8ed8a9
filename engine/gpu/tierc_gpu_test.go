package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// streamingModel is the pool's streaming model with every layer not on
// tier C (onC) copied in and verified (prefab.Pool.Mapped), as the engine
// does before a load: the streaming model's layers are views over the
// pool's memory, filled only as extents are first used.
func streamingModel(t testing.TB, pool *prefab.Pool, onC []int) *model.Model {
	t.Helper()
	sm, err := pool.StreamingModel()
	if err != nil {
		t.Fatal(err)
	}
	for i := range pool.NumLayers() {
		if !slices.Contains(onC, i) {
			if _, err := pool.Mapped(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sm
}

// loadTierC loads the pool's model onto the test device with the given
// layers on tier B and tier C (read from src), over the pool's streaming
// model (tier-C extents untouched).
func loadTierC(t testing.TB, pool *prefab.Pool, src tier.Source, onB, onC []int, k int) *Model {
	t.Helper()
	sm := streamingModel(t, pool, onC)
	return loadGPU(t, sm, Options{MaxSeqs: 2, StreamLayers: onB, Slots: k,
		TierC: &TierC{Layers: onC, Store: pool, Source: src}})
}

// lockstep runs ref and got over the same prompt and then steps greedy
// tokens (ref's choice), and returns the worst NMSE between their logits,
// how many of the steps+1 passes gave bit-identical logits and at how many
// got's arg max was ref's.
func lockstep(t testing.TB, ref, got *Model, prompt []int32, steps int) (worst float64, identical, agree int) {
	t.Helper()
	ctx := context.Background()
	rs, err := ref.NewSequence(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	gs, err := got.NewSequence(0)
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	rb, gb := []model.Step{{Seq: rs, Tokens: prompt}}, []model.Step{{Seq: gs, Tokens: prompt}}
	for i := 0; i <= steps; i++ {
		if err := ref.Forward(ctx, rb); err != nil {
			t.Fatalf("step %d: reference: %v", i, err)
		}
		if err := got.Forward(ctx, gb); err != nil {
			t.Fatalf("step %d: tier C: %v", i, err)
		}
		rl, gl := rb[0].Logits[0], gb[0].Logits[0]
		e := quant.NMSE(gl, rl)
		worst = max(worst, e)
		same := true
		for j := range rl {
			if rl[j] != gl[j] {
				same = false
				break
			}
		}
		if same {
			identical++
		}
		tok := sample.Argmax(rl)
		if sample.Argmax(gl) == tok {
			agree++
		}
		rb[0] = model.Step{Seq: rs, Tokens: []int32{tok}, Logits: rb[0].Logits}
		gb[0] = model.Step{Seq: gs, Tokens: []int32{tok}, Logits: gb[0].Logits}
	}
	return worst, identical, agree
}

// TestTierCFidelity: with layers on tier C, read every pass from a
// FileSource over the pool into pinned staging and copied into k device
// slots, the logits equal the resident GPU model's (the same kernels on
// the same bytes: bit-identical expected, NMSE 0) and match the CPU
// reference for 32 greedy tokens, for both architectures, k = 1, 2, 3 and
// mixes of tiers A, B and C.
func TestTierCFidelity(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch, typ string
		onB, onC  []int
		k         int
	}{
		{"llama", "q4_k_m", nil, []int{0, 1}, 1},
		{"llama", "f32", []int{0}, []int{1}, 2},
		{"llama", "q4_k_m", nil, []int{1}, 3},
		{"gemma2", "q4_k_m", []int{2}, []int{1, 3}, 3},
		{"gemma2", "f32", nil, []int{0, 1, 2, 3}, 2},
		{"gemma2", "q4_k_m", []int{0}, []int{1, 2, 3}, 1},
	} {
		t.Run(fmt.Sprintf("%s/%s/B=%v/C=%v/k=%d", tc.arch, tc.typ, tc.onB, tc.onC, tc.k), func(t *testing.T) {
			cpu, pool, path := tinyPool(t, tc.arch, tc.typ)
			fs, err := stream.OpenFile(path, stream.FileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			// The reference launches kernel by kernel, as every streamed
			// pass does: a replayed decode graph sizes attention's split-K
			// for its span bucket rather than the exact span, which sums in
			// another order (NMSE ~1e-13, TestGraphMatchesDirect).
			res := loadGPU(t, cpu, Options{MaxSeqs: 2, NoGraphs: true})
			g := loadTierC(t, pool, fs, tc.onB, tc.onC, tc.k)
			const steps = 32
			prompt := promptTokens(cpu.Config.Vocab, 16, 1)
			worst, same, _ := lockstep(t, res, g, prompt, steps)
			t.Logf("vs resident GPU: worst NMSE %.3g, %d of %d steps bit-identical (direct O_DIRECT: %v)", worst, same, steps+1, fs.Direct())
			if worst != 0 {
				t.Errorf("tier-C logits differ from the resident model's: NMSE %.3g", worst)
			}
			w := greedyCompare(t, cpu, []*Model{g}, prompt, steps)
			total, last, ok := g.PipelineStats()
			t.Logf("vs CPU: worst NMSE %.3g; last pass %+v", w[0], last)
			var cBytes int64
			for _, l := range tc.onC {
				cBytes += pool.Extent(l).Length
			}
			if !ok || total.Failed != 0 || last.Read.Bytes != cBytes || last.Read.Layers != int64(len(tc.onC)) ||
				last.Copy.Bytes != g.StreamedBytes() || last.Copy.Busy <= 0 || g.TierCBytes() != cBytes {
				t.Errorf("stats: %v total %+v last %+v; want %d tier-C bytes per pass", ok, total, last, cBytes)
			}
		})
	}
}

// TestTierCFaults: a read error (FaultySource) fails its pass with an
// error naming the layer and byte range, leaves the sequence where it
// was, and the next pass is correct (bit-identical to the resident
// model); so does a cancelled pass.
func TestTierCFaults(t *testing.T) {
	gpu(t)
	for _, k := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			cpu, pool, path := tinyPool(t, "gemma2", "q4_k_m")
			fs, err := stream.OpenFile(path, stream.FileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			faulty := stream.NewFaulty(fs)
			res := loadGPU(t, cpu, Options{MaxSeqs: 1, NoGraphs: true}) // as in TestTierCFidelity
			g := loadTierC(t, pool, faulty, []int{0}, []int{1, 2, 3}, k)
			ctx := context.Background()
			rs, _ := res.NewSequence(0)
			gs, _ := g.NewSequence(0)
			defer rs.Close()
			defer gs.Close()
			prompt := promptTokens(cpu.Config.Vocab, 8, 2)
			check := func(name string, toks []int32) {
				t.Helper()
				rb, gb := []model.Step{{Seq: rs, Tokens: toks}}, []model.Step{{Seq: gs, Tokens: toks}}
				if err := res.Forward(ctx, rb); err != nil {
					t.Fatal(err)
				}
				if err := g.Forward(ctx, gb); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if e := quant.NMSE(gb[0].Logits[0], rb[0].Logits[0]); e != 0 {
					t.Fatalf("%s: NMSE %.3g vs the resident model", name, e)
				}
			}
			check("prompt", prompt)
			fail := func(name string, arm func(), want string, is error) {
				t.Helper()
				arm()
				pos := gs.Pos()
				err := g.Forward(ctx, []model.Step{{Seq: gs, Tokens: []int32{5}}})
				if err == nil || !errors.Is(err, is) || !strings.Contains(err.Error(), want) {
					t.Fatalf("%s: %v, want an error naming %q", name, err, want)
				}
				if gs.Pos() != pos {
					t.Fatalf("%s: the failed pass moved the sequence from %d to %d", name, pos, gs.Pos())
				}
				t.Logf("%s: %v", name, err)
				faulty.Clear()
				check("after "+name, []int32{5})
			}
			e2 := pool.Extent(2)
			fail("bad extent", func() { faulty.FailExtent(e2, true) },
				fmt.Sprintf("layer 2 (tier C, extent %v)", e2), stream.ErrInjected)
			fail("first read", func() { faulty.FailNth(1) }, "layer 1 (tier C", stream.ErrInjected)
			fail("last read", func() { faulty.FailNth(3) }, "layer 3 (tier C", stream.ErrInjected)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := g.Forward(cctx, []model.Step{{Seq: gs, Tokens: []int32{6}}}); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled pass: %v", err)
			}
			check("after cancel", []int32{6})
			total, _, _ := g.PipelineStats()
			if total.Failed != 3 || total.Passes != 8 {
				t.Errorf("stats: %d passes, %d failed; want 8 and 3 (the cancelled pass is refused before it starts)", total.Passes, total.Failed)
			}
		})
	}
}

// TestTierCLoadErrors: Load refuses a tier-C source that does not hold
// the extents and a store for another model.
func TestTierCLoadErrors(t *testing.T) {
	dev, k := gpu(t)
	_, pool, path := tinyPool(t, "llama", "f32")
	fs, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	other, _, _ := tinyPool(t, "gemma2", "f32")
	sm, err := pool.StreamingModel()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  model.Config
		w    *model.Weights
		want string
	}{
		{"other model", other.Config, other.Weights, "store has 2 layers"},
	} {
		_, err := Load(dev, tc.cfg, tc.w, Options{Kernels: k, TierC: &TierC{Layers: []int{1}, Store: pool, Source: fs}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	g, err := Load(dev, sm.Config, sm.Weights, Options{Kernels: k, TierC: &TierC{Layers: []int{1}, Store: pool, Source: fs}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}
