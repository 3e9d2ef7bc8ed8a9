package engine_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/synth"
)

// TestSkipLayers: a list is taken as given, a count takes the layers whose
// hidden state turns least on the calibration text, auto those above the
// threshold; the engine opened with Skip leaves them out; bad specs fail.
func TestSkipLayers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := synth.Write(path, synth.Options{Arch: "gemma2", Shape: "tiny", Type: "f32", Seed: 5}); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if got, cos, err := e.SkipLayers(ctx, "3,1,1"); err != nil || !slices.Equal(got, []int{1, 3}) || cos != nil {
		t.Fatalf("list: %v %v %v", got, cos, err)
	}
	got, cos, err := e.SkipLayers(ctx, "2")
	if err != nil || len(got) != 2 || len(cos) != e.Model.Config.Layers {
		t.Fatalf("count: %v %v %v", got, cos, err)
	}
	for l := range cos {
		if !slices.Contains(got, l) {
			for _, s := range got {
				if cos[l] > cos[s] {
					t.Fatalf("layer %d (cosine %.3f) kept while %d (%.3f) is skipped", l, cos[l], s, cos[s])
				}
			}
		}
	}
	auto, cos, err := e.SkipLayers(ctx, "auto")
	if err != nil {
		t.Fatal(err)
	}
	for l, c := range cos {
		if slices.Contains(auto, l) != (c >= 0.98) && len(auto) < e.Model.Config.Layers-1 {
			t.Fatalf("auto skipped %v with cosines %v", auto, cos)
		}
	}
	for _, bad := range []string{"0", "4", "x", "9,", "0,1,2,3"} {
		if _, _, err := e.SkipLayers(ctx, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s, err := engine.OpenWith(ctx, path, engine.Options{Backend: engine.BackendCPU, Skip: "1,"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !slices.Equal(s.Skipped(), []int{1}) {
		t.Fatalf("skipped %v", s.Skipped())
	}
	if _, err := engine.OpenWith(ctx, path, engine.Options{Backend: engine.BackendCPU, Skip: "7,"}); err == nil {
		t.Fatal("a layer past the model's accepted")
	}
	// The same as a list of layers.
	l, err := engine.OpenWith(ctx, path, engine.Options{Backend: engine.BackendCPU, SkipLayers: []int{3, 1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !slices.Equal(l.Skipped(), []int{1, 3}) {
		t.Fatalf("skipped %v", l.Skipped())
	}
	for _, bad := range []engine.Options{{SkipLayers: []int{0, 1, 2, 3}}, {SkipLayers: []int{4}}, {Skip: "1,", SkipLayers: []int{2}}} {
		bad.Backend = engine.BackendCPU
		if e, err := engine.OpenWith(ctx, path, bad); err == nil {
			e.Close()
			t.Fatalf("skip %q %v accepted", bad.Skip, bad.SkipLayers)
		}
	}
}

// TestSkipStreamed: on a pool whose layers stream on the CPU, the skipped
// layers are neither read nor copied, the tokens are those of the
// resident engine with the same layers skipped, and a count prefers a
// streamed layer over a resident one that turns the hidden state only a
// little less (skipScores).
func TestSkipStreamed(t *testing.T) {
	pool, _ := stackedPool(t, "llama", "q8_0", 1, 2, 3)
	ctx := context.Background()
	res, err := engine.OpenWith(ctx, pool, engine.Options{Backend: engine.BackendCPU, Context: 256, Skip: "1,4,"})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, wantText, err := greedy(t, res, 10)
	res.Close()
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.OpenWith(ctx, pool, engine.Options{Backend: engine.BackendCPU, Context: 256, Tiers: "mixed", Depth: 2, Links: defaultLinks(), Skip: "1,4,"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids, text, err := greedy(t, e, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(ids, wantIDs) || text != wantText {
		t.Fatalf("streamed with layers 1 and 4 skipped: %v %q, resident %v %q", ids, text, wantIDs, wantText)
	}
	p := e.Plan()
	var moved, read int64
	pf, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	for i, l := range p.Layers {
		if l.Tier == tier.TierA || i == 1 || i == 4 {
			continue
		}
		moved += pf.Extent(i).Length
		if l.Tier == tier.TierC {
			read += pf.Extent(i).Length
		}
	}
	if st := e.PipelineStats(); st.Passes < 2 || st.Copy.Bytes != st.Passes*moved || st.Read.Bytes != st.Passes*read {
		t.Fatalf("%d passes: copied %d read %d, want %d and %d a pass (layers 1 and 4 left out)", st.Passes, st.Copy.Bytes, st.Read.Bytes, moved, read)
	}

	streamed := map[int]bool{}
	for _, l := range p.Layers {
		streamed[l.Index] = l.Tier != tier.TierA
	}
	got, cos, err := e.SkipLayers(ctx, "3")
	if err != nil {
		t.Fatal(err)
	}
	score := func(l int) float64 {
		if streamed[l] {
			return cos[l] + 0.005
		}
		return cos[l]
	}
	for l := range cos {
		for _, s := range got {
			if !slices.Contains(got, l) && score(l) > score(s) {
				t.Fatalf("layer %d (cosine %.4f, streamed %v) kept while %d (%.4f, streamed %v) is skipped", l, cos[l], streamed[l], s, cos[s], streamed[s])
			}
		}
	}
}
