package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the client light: the unprivileged strata client links
// this package, and it must not pull in the engine, the NVMe driver, VFIO
// or the CUDA binding.
func TestDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/strata-llm/strata/daemon/client").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/strata-llm/strata/engine", "github.com/strata-llm/strata/vfio", "github.com/strata-llm/strata/nvme",
			"github.com/strata-llm/strata/p2p", "github.com/strata-llm/strata/kernels",
			"github.com/prometheus/", "github.com/ebitengine/purego",
		} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("daemon/client depends on %s", dep)
			}
		}
	}
}
