package tier

import "testing"

// TestPlanStreamedSizes: with tier-B layers stored smaller than resident
// ones (Sizes.Streamed, e.g. packed bf16), slots shrink to the streamed
// size, the bytes moved per pass are the streamed sizes, resident layers
// still cost their full size, and the freed slot memory keeps more layers
// resident than the plain plan in the same budget.
func TestPlanStreamedSizes(t *testing.T) {
	t.Parallel()
	const n = 10
	req := Request{Sizes: Sizes{Layers: uniform(n, 100*mib), Globals: 50 * mib, Output: 30 * mib},
		DeviceBudget: 520 * mib, HostBudget: 2000 * mib, Depth: 2, Links: testLinks()}
	plain, err := NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	req.Sizes.Streamed = uniform(n, 76*mib)
	packed, err := NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plain %s (slot %d MiB, moved %d MiB); packed %s (slot %d MiB, moved %d MiB)",
		tiersOf(plain), plain.SlotBytes/mib, plain.Moved.HostToDevice/mib, tiersOf(packed), packed.SlotBytes/mib, packed.Moved.HostToDevice/mib)
	// Plain: 520-50-2*100 = 270 → 2 resident. Packed: 520-50-2*76 = 318 → 3.
	if plain.Tiers[TierA].Layers != 2 || packed.Tiers[TierA].Layers != 3 {
		t.Errorf("resident layers: plain %d, packed %d; want 2 and 3", plain.Tiers[TierA].Layers, packed.Tiers[TierA].Layers)
	}
	if packed.SlotBytes != 76*mib {
		t.Errorf("packed slot %d MiB, want 76", packed.SlotBytes/mib)
	}
	if want := int64(n-3) * 76 * mib; packed.Moved.HostToDevice != want || packed.Host.Layers != want {
		t.Errorf("packed moves %d, holds %d on the host; want %d", packed.Moved.HostToDevice, packed.Host.Layers, want)
	}
	if want := int64(50+3*100+2*76) * mib; packed.Device.Total != want {
		t.Errorf("packed device total %d MiB, want %d", packed.Device.Total/mib, want/mib)
	}
	req.Sizes.Streamed = uniform(n-1, 76*mib)
	if _, err := NewPlan(req); err == nil {
		t.Error("streamed sizes of the wrong length accepted")
	}
}
