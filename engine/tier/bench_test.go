package tier

import (
	"testing"
)

// BenchmarkPlan measures the planner on an 80-layer model with three layer
// sizes (a 70B Q4_K_M-like shape) and a budget that splits it over all
// three tiers.
func BenchmarkPlan(b *testing.B) {
	sizes := make([]int64, 80)
	for i := range sizes {
		sizes[i] = []int64{420 << 20, 520 << 20, 470 << 20}[i%3]
	}
	req := Request{Sizes: Sizes{Layers: sizes, Globals: 1 << 30, Output: 600 << 20},
		DeviceBudget: 20 << 30, HostBudget: 12 << 30, KVBytes: 2 << 30, Links: DefaultLinks()}
	for range b.N {
		if _, err := NewPlan(req); err != nil {
			b.Fatal(err)
		}
	}
}
