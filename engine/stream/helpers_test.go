package stream_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/streamtest"
	"github.com/strata-llm/strata/internal/synth"
)

// testModel is a model built from several tiny synthetic models' layers
// (so it has more layers than the ring is deep, and no two alike), plus a
// store holding those layers.
type testModel struct {
	m     *model.Model
	store stream.LayerStore
	path  string // the store's file
}

var (
	modelsMu sync.Mutex
	models   = map[string]*testModel{}
	modelDir string
)

// modelCases are the architectures every correctness test runs on.
var modelCases = []struct {
	arch, typ string
	seeds     []uint64
}{
	{"llama", "q4_k_m", []uint64{1, 2, 3}}, // 6 layers
	{"gemma2", "f32", []uint64{4, 5}},      // 8 layers
}

// getModel returns the shared test model for arch (built once per test
// binary; the files live in a directory removed by TestMain).
// Tests that use it stay sequential (no t.Parallel): they share its model
// and store, which they rewire (SetLayerSource) and corrupt.
func getModel(t testing.TB, arch, typ string, seeds []uint64) *testModel {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	key := fmt.Sprint(arch, typ, seeds)
	if tm, ok := models[key]; ok {
		return tm
	}
	var cfg model.Config
	w := &model.Weights{}
	for k, seed := range seeds {
		path := filepath.Join(modelDir, fmt.Sprintf("%s-%s-%d.gguf", arch, typ, seed))
		if err := synth.Write(path, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: seed}); err != nil {
			t.Fatal(err)
		}
		m, err := model.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		// The mapping stays open for the life of the test binary.
		if k == 0 {
			cfg = m.Config
			w.Embed, w.OutputNorm, w.Output = m.Weights.Embed, m.Weights.OutputNorm, m.Weights.Output
		}
		w.Layers = append(w.Layers, m.Weights.Layers...)
	}
	cfg.Layers = len(w.Layers)
	m, err := model.New(cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	st, err := streamtest.Write(filepath.Join(modelDir, key+".store"), w)
	if err != nil {
		t.Fatal(err)
	}
	tm := &testModel{m: m, store: st, path: st.Path()}
	models[key] = tm
	return tm
}

// schedule drives a batch of B sequences through five passes (three under
// -race) in which
// sequences join (odd ones one pass late) and leave (sequence 0 after
// pass 2), each feeding back its greedy token, and returns every logit
// produced, in order. fwd runs one pass.
func schedule(t testing.TB, m *model.Model, B int, fwd func([]model.Step) error) []float32 {
	t.Helper()
	seqs := make([]*model.Sequence, B)
	next := make([][]int32, B)
	for j := range seqs {
		seqs[j] = m.NewSequence(64)
		for k := 0; k <= j%3; k++ {
			next[j] = append(next[j], int32((7*j+13*k+5)%m.Config.Vocab))
		}
	}
	var out []float32
	passes := 5
	if raceEnabled {
		passes = 3
	}
	for pass := 0; pass < passes; pass++ {
		var batch []model.Step
		var who []int
		for j := range seqs {
			if (j%2 == 1 && pass == 0) || (j == 0 && B > 1 && pass > 2) {
				continue
			}
			batch = append(batch, model.Step{Seq: seqs[j], Tokens: next[j]})
			who = append(who, j)
		}
		if err := fwd(batch); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		for k, st := range batch {
			row := st.Logits[len(st.Logits)-1]
			out = append(out, row...)
			best := 0
			for v := range row {
				if row[v] > row[best] {
					best = v
				}
			}
			next[who[k]] = []int32{int32(best)}
		}
	}
	return out
}

// residentLogits runs the schedule on the resident weights.
func residentLogits(t testing.TB, tm *testModel, B int) []float32 {
	tm.m.SetLayerSource(nil)
	return schedule(t, tm.m, B, func(b []model.Step) error { return tm.m.Forward(context.Background(), b) })
}

// sameBits fails unless got and want are bit-for-bit equal.
func sameBits(t testing.TB, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %v (%#08x), want %v (%#08x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// streamedBytes sums the extents a plan moves per pass: to the device
// (tiers B and C) and from storage (tier C).
func streamedBytes(s stream.LayerStore, tiers []tier.Tier) (moved, read int64) {
	for i, t := range tiers {
		if t != tier.TierA {
			moved += s.Extent(i).Length
		}
		if t == tier.TierC {
			read += s.Extent(i).Length
		}
	}
	return
}
