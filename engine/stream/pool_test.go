package stream_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/synth"
)

// writePool prefabs a tiny synthetic model into a pool in dir.
func writePool(t *testing.T, dir, arch, typ string) string {
	t.Helper()
	src := filepath.Join(dir, arch+".gguf")
	if err := synth.Write(src, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	path := filepath.Join(dir, arch+".pool")
	if err := prefab.WritePool(g, path, prefab.Options{}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRealPool streams a real engine/prefab pool through every tier mix and
// requires the logits of the pool's resident model bit for bit; a
// corrupted tier-C extent is caught by the pool's xxh3.
func TestRealPool(t *testing.T) {
	for _, mc := range modelCases {
		t.Run(mc.arch, func(t *testing.T) {
			dir := t.TempDir()
			path := writePool(t, dir, mc.arch, mc.typ)
			pool, err := prefab.OpenPool(path)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			m, err := pool.Model()
			if err != nil {
				t.Fatal(err)
			}
			tm := &testModel{m: m}
			want := residentLogits(t, tm, 3)
			src := openFile(t, path)
			n := pool.NumLayers()
			for _, mix := range []string{"all-A", "all-B", "all-C", "mixed"} {
				tiers, _ := tier.MixTiers(mix, n)
				p := newPipeline(t, stream.Options{Store: pool, Tiers: tiers, Depth: 2, Source: src})
				got := schedule(t, m, 3, func(b []model.Step) error { return p.Forward(context.Background(), m, b) })
				sameBits(t, got, want)
				p.Close()
			}

			// Corrupt the last layer's extent on disk; a fresh pipeline
			// reading it from storage must refuse it.
			last := pool.Extent(n - 1)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0xde, 0xad}, last.Offset+8); err != nil {
				t.Fatal(err)
			}
			f.Close()
			tiers, _ := tier.MixTiers("all-C", n)
			p := newPipeline(t, stream.Options{Store: pool, Tiers: tiers, Depth: 2, Source: src})
			_, err = pipelineStep(p, m)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("layer %d", n-1)) {
				t.Fatalf("pass over a corrupt pool extent: %v", err)
			}
			t.Logf("corrupt extent: %v", err)
		})
	}
}

// pipelineStep runs one single-token pass of a fresh sequence.
func pipelineStep(p *stream.Pipeline, m *model.Model) ([]float32, error) {
	b := []model.Step{{Seq: m.NewSequence(8), Tokens: []int32{1}}}
	if err := p.Forward(context.Background(), m, b); err != nil {
		return nil, err
	}
	return b[0].Logits[0], nil
}
