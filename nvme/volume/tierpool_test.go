package volume_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/synth"
)

// TestTierPoolOnNVMe stores a real prefab pool (engine/prefab's format) as an
// extent of a volume on the software NVMe controller and streams every
// layer from it as tier C: the pool's layer extents are offsets into the
// pool file, which are exactly the volume source's offsets.
func TestTierPoolOnNVMe(t *testing.T) {
	t.Parallel()
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
	if err := prefab.WritePool(mapped, poolPath, prefab.Options{Type: prefab.TypeQ8_0}); err != nil {
		t.Fatal(err)
	}
	pool, err := prefab.OpenPool(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	raw, err := os.ReadFile(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	nsrc := nvmeSource(t, 4096, "tiny.pool", raw)

	m, err := pool.Model()
	if err != nil {
		t.Fatal(err)
	}
	st := requireAllCLikeResident(t, m, pool, nsrc, []int32{1, 2, 3})
	if st.Read.Bytes == 0 {
		t.Fatalf("nothing read from the NVMe source: %+v", st)
	}
}
