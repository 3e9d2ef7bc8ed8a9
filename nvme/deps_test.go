package nvme_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStorageDeps keeps the arrows pointing one way: the storage and device
// packages (the NVMe driver and volumes, VFIO, peer-to-peer DMA, PCI) serve
// the engine, so they never link it. The one engine package they may link
// is engine/tier, the vocabulary both sides share (Tier, Extent, the
// tier-C Source interface), with engine/quant, the weight-format leaf it
// imports. Test-only imports are not counted: integration tests may stream
// a real model through a volume.
func TestStorageDeps(t *testing.T) {
	t.Parallel()
	const mod = "github.com/strata-llm/strata/"
	allowed := map[string]bool{mod + "engine/tier": true, mod + "engine/quant": true}
	for _, pkgs := range []string{"nvme/...", "vfio/...", "p2p/...", "pci/..."} {
		t.Run(pkgs, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Deps " "}}`, mod+pkgs).Output()
			if err != nil {
				t.Skipf("go list unavailable: %v", err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				pkg, deps, _ := strings.Cut(line, ":")
				for _, d := range strings.Fields(deps) {
					if (d == mod+"engine" || strings.HasPrefix(d, mod+"engine/")) && !allowed[d] {
						t.Errorf("%s links %s; storage may link only engine/tier of the engine", pkg, d)
					}
				}
			}
		})
	}
}
