package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/nvmetest/poolvol"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/nvme"
)

// passLogits runs a fixed prompt and then fixed single-token steps through
// e's backend (the same tokens whatever e predicts, so two engines stay
// comparable) and returns every step's logits.
func passLogits(t *testing.T, e *engine.Engine, steps int) ([][]float32, error) {
	t.Helper()
	b := e.Backend()
	seq, err := b.NewSequence(0)
	if err != nil {
		return nil, err
	}
	defer seq.Close()
	prompt := e.Tok.Encode("The fastest way to move a layer is", true, false)
	var out [][]float32
	toks := prompt
	for i := range steps {
		st := []model.Step{{Seq: seq, Tokens: toks}}
		if err := b.Forward(context.Background(), st); err != nil {
			return out, err
		}
		out = append(out, append([]float32(nil), st[0].Logits[len(st[0].Logits)-1]...))
		toks = []int32{int32(7 + 13*i)}
	}
	return out, nil
}

func sameLogits(t *testing.T, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d steps of logits, want %d", len(got), len(want))
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("step %d logit %d: %g through the NVMe driver, %g from the file", i, j, got[i][j], want[i][j])
			}
		}
	}
}

// nvmeTierC opens pool on backend twice with the same forced placement
// (no hybrid share: its plan follows rates measured in passes, so which
// layers the CPU computes could differ between the two runs),
// once from its file and once from a volume of the software NVMe
// controller through the userspace driver, and holds the second to the
// first: identical logits, the nvme-pinned route, the bytes read through
// the driver; a media error fails a pass with an error naming the layer,
// its extent and the NVMe status, and the next pass is right again.
func nvmeTierC(t *testing.T, backend, pool, tiers string, steps int) {
	t.Helper()
	ctx := context.Background()
	file, err := engine.OpenWith(ctx, pool, engine.Options{Backend: backend, Tiers: tiers, Depth: 2, Links: defaultLinks(), NoHybrid: true})
	if errors.Is(err, engine.ErrCUDAUnavailable) {
		t.Skipf("skipping GPU test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	want, err := passLogits(t, file, steps)
	if err != nil {
		t.Fatal(err)
	}
	vol := poolvol.New(t, pool, poolvol.Options{})
	e, err := engine.OpenWith(ctx, "nvme://test/1/pool", engine.Options{Backend: backend, Tiers: tiers, Depth: 2, Links: defaultLinks(), Storage: vol.Storage, NoHybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if r := e.TierCRoute(); r.Name != engine.RouteNVMePinned || r.Refused[engine.RouteNVMeBAR] == "" || r.Refused[engine.RouteFile] == "" {
		t.Fatalf("route %+v", r)
	}
	if r := file.TierCRoute(); r.Name != engine.RouteFile {
		t.Fatalf("file route %+v", r)
	}
	reads := vol.SC.Count("read")
	got, err := passLogits(t, e, steps)
	if err != nil {
		t.Fatal(err)
	}
	sameLogits(t, got, want)
	if vol.SC.Count("read") == reads {
		t.Fatal("no read reached the controller")
	}
	st := e.PipelineStats()
	if st == nil || st.Read.Bytes == 0 {
		t.Fatalf("pipeline stats %+v: nothing read from tier C", st)
	}
	t.Logf("%s backend: %d passes, %d tier-C bytes read through the driver (%.2f GB/s), %d controller reads", e.BackendInfo().Name, st.Passes, st.Read.Bytes, st.Read.GBps, vol.SC.Count("read")-reads)

	// A media error on a tier-C layer's extent.
	p := e.Pool()
	var layer = -1
	for i, l := range e.Plan().Layers {
		if l.Tier == 2 {
			layer = i
		}
	}
	ext := p.Extent(layer)
	lba := uint64(vol.Extent.Offset+ext.Offset)/4096 + 1
	vol.SC.InjectError(1, nvme.OpRead, lba, 1, nvme.StatusUnrecoveredRead)
	_, err = passLogits(t, e, 1)
	vol.SC.ClearFaults()
	for _, s := range []string{fmt.Sprintf("layer %d", layer), fmt.Sprint(ext), "unrecovered read error"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Fatalf("pass over a media error: %v; want an error naming %q", err, s)
		}
	}
	if !errors.Is(err, nvme.ErrMedia) {
		t.Fatalf("%v does not wrap nvme.ErrMedia", err)
	}
	got, err = passLogits(t, e, steps)
	if err != nil {
		t.Fatal(err)
	}
	sameLogits(t, got, want)
}

// TestStorageTierC: the CPU backend's tier C through the userspace driver
// on the software controller matches the pool file's.
func TestStorageTierC(t *testing.T) {
	t.Parallel()
	pool, _ := stackedPool(t, "llama", "f32", 1, 2, 3)
	nvmeTierC(t, engine.BackendCPU, pool, "A,C,B,C,C,A", 4)
}

// TestCUDATierCNVMe: on a GPU, tier C read by the userspace driver (the
// software controller behind it) into its DMA staging, registered with
// CUDA and copied into device slots, gives the logits of the pool file's
// tier C. With STRATA_8B_GGUF set (the synthetic 8b shape, written there
// if missing) the same runs on it, every layer streamed. Skipped without a
// usable GPU. Sequential: it opens GPU 0 where there is one.
func TestCUDATierCNVMe(t *testing.T) {
	pool, _ := stackedPool(t, "llama", "f32", 1, 2, 3)
	nvmeTierC(t, engine.BackendCUDA, pool, "A,C,B,C,C,A", 4)
	big := os.Getenv("STRATA_8B_GGUF")
	if big == "" {
		t.Log("STRATA_8B_GGUF is not set: the 8b shape is not run")
		return
	}
	if _, err := os.Stat(big); errors.Is(err, os.ErrNotExist) {
		if err := synth.Write(big, synth.Options{Arch: "llama", Shape: "8b", Type: "q4_k_m", Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := gguf.Map(big)
	if err != nil {
		t.Fatal(err)
	}
	bigPool := filepath.Join(t.TempDir(), "8b.pool")
	err = prefab.WritePool(g, bigPool, prefab.Options{Type: prefab.TypeKeep})
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	nvmeTierC(t, engine.BackendCUDA, bigPool, "mixed", 3)
}
