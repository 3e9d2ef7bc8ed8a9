package engine_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine"
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
}
