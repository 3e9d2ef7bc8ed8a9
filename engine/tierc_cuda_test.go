package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// TestCUDATierC: on a GPU, a pool opened with layers forced onto tier C
// streams them from the pool file through pinned staging; its greedy
// tokens match the CPU reference, PipelineStats counts the reads, a read
// error fails one generation with an error naming the layer and the next
// one is right again. A GGUF cannot put layers on tier C (no extents to
// read): ErrCUDATierC with ErrNeedsPool. Skipped without a usable GPU.
// Sequential: it opens GPU 0 where there is one.
func TestCUDATierC(t *testing.T) {
	pool, gg := stackedPool(t, "llama", "f32", 1, 2, 3)
	var faulty *stream.FaultySource
	e, err := engine.OpenWith(context.Background(), pool, engine.Options{Backend: "cuda", Tiers: "A,C,B,C,C,A", Depth: 2, Links: defaultLinks(),
		WrapSource: func(s tier.Source) tier.Source { faulty = stream.NewFaulty(s); return faulty }})
	if errors.Is(err, engine.ErrCUDAUnavailable) {
		t.Skipf("skipping GPU test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want, _ := residentTokens(t, pool, 24)
	got, _, err := greedy(t, e, 24)
	if err != nil || !sameIDs(got, want) {
		t.Fatalf("tier-C GPU tokens %v (%v), CPU %v", got, err, want)
	}
	st := e.PipelineStats()
	p := e.Pool()
	cBytes := p.Extent(1).Length + p.Extent(3).Length + p.Extent(4).Length
	if st == nil || st.Failed != 0 || st.Read.Bytes != st.Passes*cBytes || st.Copy.Bytes <= st.Read.Bytes || !e.Streamed() {
		t.Fatalf("pipeline stats %+v; want %d tier-C bytes per pass", st, cBytes)
	}
	t.Logf("%d passes: read %.2f GB/s, copy %.2f GB/s, overlap %.2f", st.Passes, st.Read.GBps, st.Copy.GBps, st.Overlap)
	faulty.FailExtent(p.Extent(3), true)
	_, _, err = greedy(t, e, 4)
	if wantErr := fmt.Sprintf("layer 3 (tier C, extent %v)", p.Extent(3)); err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("generation with a bad read: %v, want an error naming %q", err, wantErr)
	}
	if got, _, err = greedy(t, e, 24); err != nil || !sameIDs(got, want) {
		t.Fatalf("after the failed read: %v (%v), want %v", got, err, want)
	}
	_, err = engine.OpenWith(context.Background(), gg, engine.Options{Backend: "cuda", Tiers: "A,C", Links: defaultLinks()})
	if !errors.Is(err, engine.ErrCUDATierC) || !errors.Is(err, engine.ErrNeedsPool) {
		t.Fatalf("GGUF with a tier-C layer on the GPU: %v", err)
	}
}
