package tier

import (
	"fmt"
	"strings"

	"github.com/strata-llm/strata/internal/hostmem"
)

// PageSize is the alignment of extents, staging buffers and O_DIRECT reads.
// NVMe logical blocks and Linux direct I/O both accept 4 KiB units.
const PageSize = hostmem.PageSize

// Extent is one contiguous byte range of a pool file: a layer's tensors in
// the order the kernels consume them, so fetching a layer is ONE sequential
// read. Offset and Length are multiples of PageSize.
type Extent struct{ Offset, Length int64 }

// End returns the offset just past the extent.
func (e Extent) End() int64 { return e.Offset + e.Length }

// String formats the extent for error messages.
func (e Extent) String() string { return fmt.Sprintf("[%d, +%d)", e.Offset, e.Length) }

// Tier is where a layer lives between passes.
type Tier uint8

const (
	// TierA layers are resident in device memory, copied and decoded once.
	TierA Tier = iota
	// TierB layers sit in host memory (the pool's mapping) and are copied
	// into a device slot every pass.
	TierB
	// TierC layers sit on storage and are read into staging, then copied
	// into a device slot, every pass.
	TierC
)

// String returns "A", "B" or "C".
func (t Tier) String() string {
	switch t {
	case TierA:
		return "A"
	case TierB:
		return "B"
	case TierC:
		return "C"
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// MarshalText writes the tier as "A", "B" or "C" (JSON plans stay readable).
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (t *Tier) UnmarshalText(b []byte) error {
	v, err := ParseTier(string(b))
	if err == nil {
		*t = v
	}
	return err
}

// ParseTier parses "A", "B" or "C" (any case).
func ParseTier(s string) (Tier, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "A":
		return TierA, nil
	case "B":
		return TierB, nil
	case "C":
		return TierC, nil
	}
	return 0, fmt.Errorf("tier %q: want A, B or C", s)
}

// MixTiers builds a per-layer plan for n layers from a named mix, as the
// benchmarks and tests use them: "all-A", "all-B", "all-C", "mixed" (A, B,
// C, B repeating, so every transition between tiers occurs) or an explicit
// comma-separated list of n tiers ("A,C,C,B").
func MixTiers(mix string, n int) ([]Tier, error) {
	if n < 0 {
		return nil, fmt.Errorf("tier mix %q: %d layers", mix, n)
	}
	ts := make([]Tier, n)
	fill := func(t Tier) []Tier {
		for i := range ts {
			ts[i] = t
		}
		return ts
	}
	switch strings.ToLower(mix) {
	case "all-a", "a":
		return fill(TierA), nil
	case "all-b", "b":
		return fill(TierB), nil
	case "all-c", "c":
		return fill(TierC), nil
	case "mixed":
		cycle := []Tier{TierA, TierB, TierC, TierB}
		for i := range ts {
			ts[i] = cycle[i%len(cycle)]
		}
		return ts, nil
	}
	parts := strings.Split(mix, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("tier mix %q: want all-A, all-B, all-C, mixed or %d comma-separated tiers", mix, n)
	}
	for i, p := range parts {
		t, err := ParseTier(p)
		if err != nil {
			return nil, fmt.Errorf("tier mix %q: layer %d: %w", mix, i, err)
		}
		ts[i] = t
	}
	return ts, nil
}
