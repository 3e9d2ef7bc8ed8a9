package engine

import (
	"testing"

	"github.com/strata-llm/strata/engine/tier"
)

// TestWithStagingConverges: on the CPU backend, where device memory is host
// memory, withStaging replans until the plan and its tier-C staging
// buffers fit the budget together. A planner that keeps as many whole
// layers resident as the device budget holds leaves slack below its
// budget; replanning with the budget cut only by the overrun gave the
// same plan again and again (the daemon's volume model failed to load
// with 5 MiB where 4 MiB worked). The fit must come in a few replans,
// for any budget, and fit.
func TestWithStagingConverges(t *testing.T) {
	t.Parallel()
	const layers, layerBytes, fixed, depth = 6, 630784, 1 << 20, 2
	plan := func(r tier.Request) (*tier.Plan, error) {
		resident := min(layers, int((r.DeviceBudget-fixed-depth*layerBytes)/layerBytes))
		if resident < 0 {
			return nil, tier.ErrNoFit
		}
		p := &tier.Plan{Depth: depth, Shared: true}
		for i := range layers {
			t := tier.TierC
			if i < resident {
				t = tier.TierA
			}
			p.Layers = append(p.Layers, tier.LayerPlan{Index: i, Tier: t, Bytes: layerBytes})
		}
		p.Device.Total = fixed + depth*layerBytes + int64(resident)*layerBytes
		return p, nil
	}
	for _, budget := range []int64{4 << 20, 4<<20 + 300<<10, 5 << 20, 6 << 20, 7 << 20} {
		calls := 0
		counted := func(r tier.Request) (*tier.Plan, error) { calls++; return plan(r) }
		p, err := withStaging(tier.Request{DeviceBudget: budget, Shared: true}, counted, false)
		if err != nil {
			t.Errorf("budget %d: %v", budget, err)
			continue
		}
		if total := p.Device.Total + p.Host.Staging; total > budget {
			t.Errorf("budget %d: plan %d + staging %d over it", budget, p.Device.Total, p.Host.Staging)
		}
		if calls > layers+1 {
			t.Errorf("budget %d: %d plans to fit", budget, calls)
		}
	}
	if _, err := withStaging(tier.Request{DeviceBudget: 2 << 20, Shared: true}, plan, false); err == nil {
		t.Error("a budget below streaming every layer fit")
	}
}
