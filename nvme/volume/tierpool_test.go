package volume_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/synth"
	"github.com/strata-llm/strata/engine/tier"
)

// TestTierPoolOnNVMe stores a real prefab pool (engine/tier's format) as an
// extent of a volume on the software NVMe controller and streams every
// layer from it as tier C: the pool's layer extents are offsets into the
// pool file, which are exactly the volume source's offsets.
func TestTierPoolOnNVMe(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(src, synth.Options{Arch: "gemma2", Shape: "tiny", Type: "f32", Seed: 2}); err != nil {
		t.Fatal(err)
	}
	mapped, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	poolPath := filepath.Join(dir, "tiny.pool")
	if err := tier.WritePool(mapped, poolPath, tier.PrefabOptions{Type: tier.TypeQ8_0}); err != nil {
		t.Fatal(err)
	}
	pool, err := tier.OpenPool(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	raw, err := os.ReadFile(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	_, _, v := nvmeVolume(t, 4096, int64(len(raw))+8<<20)
	if _, err := v.WriteFile(ctx, "tiny.pool", bytes.NewReader(raw), int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	nsrc, err := v.Source("tiny.pool")
	if err != nil {
		t.Fatal(err)
	}
	defer nsrc.Close()

	m, err := pool.Model()
	if err != nil {
		t.Fatal(err)
	}
	steps := func() []model.Step {
		return []model.Step{{Seq: m.NewSequence(16), Tokens: []int32{1, 2, 3}}}
	}
	want := steps()
	if err := m.Forward(ctx, want); err != nil {
		t.Fatal(err)
	}
	tiers, _ := stream.MixTiers("all-C", pool.NumLayers())
	p, err := stream.New(stream.Options{Store: pool, Tiers: tiers, Depth: 2, Source: nsrc, Verify: stream.VerifyAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := steps()
	if err := p.Forward(ctx, m, got); err != nil {
		t.Fatal(err)
	}
	for k := range got[0].Logits[0] {
		if math.Float32bits(got[0].Logits[0][k]) != math.Float32bits(want[0].Logits[0][k]) {
			t.Fatalf("logit %d: %v, want %v", k, got[0].Logits[0][k], want[0].Logits[0][k])
		}
	}
	if st := p.LastPass(); st.Read.Bytes == 0 {
		t.Fatalf("nothing read from the NVMe source: %+v", st)
	}
}
