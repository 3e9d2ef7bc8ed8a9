package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/internal/synth"
)

// TestExpertStatus serves a mixture-of-experts pool under a RAM budget
// that keeps some experts on storage next to the same pool resident: the
// same greedy text, and status and /metrics say where the experts are and
// how their uses were served.
func TestExpertStatus(t *testing.T) {
	t.Parallel()
	h := start(t, opts{cfg: Config{Links: pinnedLinks()}})
	src := filepath.Join(t.TempDir(), "moe.gguf")
	if err := synth.Write(src, synth.Options{Arch: "mixtral", Shape: "tiny", Type: "q8_0", Seed: 4}); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(modelDir, "moe-status.pool")
	err = prefab.WritePool(g, pool, prefab.Options{})
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	res := api.LoadRequest{Name: "moe-resident", Context: 128}
	rst, err := h.srv.LoadFile(context.Background(), pool, res)
	if err != nil {
		t.Fatal(err)
	}
	if x := rst.Experts; x == nil || x.Resident != x.Experts || x.Experts != 16 {
		t.Fatalf("resident MoE model: experts %+v", x)
	}
	// The layers and a quarter of the experts' bytes: the rest is read.
	low := api.LoadRequest{Name: "moe-low", Context: 128}
	low.Budgets.RAMBytes = rst.Plan.DeviceBytes + rst.Experts.ResidentBytes*3/4
	lst, err := h.srv.LoadFile(context.Background(), pool, low)
	if err != nil {
		t.Fatal(err)
	}
	if x := lst.Experts; x == nil || x.Resident == 0 || x.Resident == x.Experts || x.ReadBuffers == 0 {
		t.Fatalf("MoE model under %d bytes: experts %+v", low.Budgets.RAMBytes, x)
	}
	want, _ := h.completion(t, "moe-resident", "Experts are read", 10)
	got, _ := h.completion(t, "moe-low", "Experts are read", 10)
	if got != want {
		t.Fatalf("experts on storage: %q, resident %q", got, want)
	}
	x := modelByName(t, mustStatus(t, h), "moe-low").Experts
	if x == nil || x.UsesRead+x.UsesPrefetched == 0 || x.ReadsAhead == 0 || x.ReadBytes == 0 || x.HitRate <= 0 || x.HitRate >= 1 {
		t.Fatalf("status after a request: %+v", x)
	}
	_, b := h.get(t, "/metrics")
	for _, w := range []string{`strata_experts_resident{model="moe-low"}`, `strata_expert_uses{model="moe-low",served="read"}`, `strata_expert_uses{model="moe-low",served="prefetched"}`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}
