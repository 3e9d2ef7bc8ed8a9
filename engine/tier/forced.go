package tier

import (
	"errors"
	"fmt"
)

// PlanTiers costs a placement chosen by the caller instead of the planner
// (an operator's forced mix, a benchmark's "all-C"), so a forced run is
// reported with the same table, budgets and expected times as a planned
// one. tiers has one entry per layer of r.Sizes. With r.Depth 0 every depth
// from 2 to r.MaxDepth (DefaultMaxDepth) is tried and the best kept, by the
// planner's own order (fastest pass, then fewest bytes moved, then least
// memory). A placement that breaks a budget is refused with ErrNoFit.
func PlanTiers(r Request, tiers []Tier) (*Plan, error) {
	n := len(r.Sizes.Layers)
	if len(tiers) != n {
		return nil, fmt.Errorf("plan: %d tiers for %d layers", len(tiers), n)
	}
	if n == 0 {
		return nil, errors.New("plan: model has no layers")
	}
	for i, b := range r.Sizes.Layers {
		if b <= 0 {
			return nil, fmt.Errorf("plan: layer %d has %d bytes", i, b)
		}
		if tiers[i] > TierC {
			return nil, fmt.Errorf("plan: layer %d: unknown tier %v", i, tiers[i])
		}
	}
	if r.DeviceBudget < 0 || r.HostBudget < 0 || r.KVBytes < 0 || r.ScratchBytes < 0 || r.Sizes.Globals < 0 {
		return nil, errors.New("plan: negative budget or size")
	}
	if err := r.Links.validate(); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if r.Depth < 0 || r.Depth > 1024 {
		return nil, fmt.Errorf("plan: depth %d", r.Depth)
	}
	if r.Batch <= 0 {
		r.Batch = 1
	}
	maxDepth := r.MaxDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	depths := []int{r.Depth}
	if r.Depth == 0 {
		depths = nil
		for k := minDepth; k <= maxDepth; k++ {
			depths = append(depths, k)
		}
	}
	var best *Plan
	for _, k := range depths {
		if p := r.evaluate(tiers, k); p != nil && (best == nil || better(p, best)) {
			best = p
		}
	}
	if best == nil {
		var count [3]int
		for _, t := range tiers {
			count[t]++
		}
		how := fmt.Sprintf("at depth %d", r.Depth)
		if r.Depth == 0 {
			how = fmt.Sprintf("at any depth from %d to %d", minDepth, maxDepth)
		}
		return nil, fmt.Errorf("plan: %w: the forced placement (%d layers on A, %d on B, %d on C) exceeds the device budget %s or the host budget %s %s",
			ErrNoFit, count[TierA], count[TierB], count[TierC], FormatBytes(r.DeviceBudget), FormatBytes(r.HostBudget), how)
	}
	return best, nil
}
