package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps privileged machinery out of the unprivileged client, as
// the style guide asks (tailscale's deps_test): neither the strata binary
// nor the package its daemon commands talk through links the NVMe driver
// or VFIO, and daemon/client links no CUDA either. The binary does link
// the CUDA binding, for two offline commands that run the engine in their
// own process: `strata run` (see backend.go) and `strata bench engine`
// (internal/bench/enginebench, which times engine/gpu on the GPU). The test pins
// both down, so the exception stays a decision rather than drift.
func TestDeps(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) map[string]bool {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Skipf("go list unavailable: %v", err)
		}
		m := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			m[d] = true
		}
		return m
	}
	const mod = "github.com/strata-llm/strata/"
	for _, c := range []struct {
		pkg    string
		banned []string
		want   []string
	}{
		{pkg: mod + "tools/strata", banned: []string{mod + "nvme", mod + "vfio"},
			want: []string{mod + "kernels/cudadrv", mod + "engine/gpu", mod + "internal/bench/enginebench"}},
		{pkg: mod + "daemon/client", banned: []string{mod + "nvme", mod + "vfio", mod + "kernels", mod + "engine", "github.com/ebitengine/purego"}},
	} {
		t.Run(strings.TrimPrefix(c.pkg, mod), func(t *testing.T) {
			t.Parallel()
			got := deps(c.pkg)
			for d := range got {
				for _, b := range c.banned {
					if d == b || strings.HasPrefix(d, b+"/") {
						t.Errorf("%s links %s", c.pkg, d)
					}
				}
			}
			for _, w := range c.want {
				if !got[w] {
					t.Errorf("%s does not link %s: `strata run` cannot pick the GPU, or `strata bench engine` is gone", c.pkg, w)
				}
			}
		})
	}
}
