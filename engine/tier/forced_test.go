package tier

import (
	"errors"
	"strings"
	"testing"
)

// TestPlanTiers costs forced placements: the tiers are kept as given, the
// depth is the best one (or the one fixed), the numbers agree with the
// planner's for the same placement, and impossible or malformed requests
// are refused.
func TestPlanTiers(t *testing.T) {
	t.Parallel()
	const mb = 1 << 20
	base := Request{Sizes: Sizes{Layers: uniform(6, 10*mb), Globals: 5 * mb, Output: 2 * mb},
		DeviceBudget: 200 * mb, HostBudget: 200 * mb, Links: testLinks()}
	for _, tc := range []struct {
		name  string
		r     func(Request) Request
		tiers string
		depth int // want; -1: any >= 2
		err   error
		msg   string
	}{
		{"all-C chooses a depth", func(r Request) Request { return r }, "CCCCCC", -1, nil, ""},
		{"fixed depth", func(r Request) Request { r.Depth = 3; return r }, "CCCCCC", 3, nil, ""},
		{"mixed", func(r Request) Request { r.Depth = 2; return r }, "ABCBAC", 2, nil, ""},
		{"all-A needs no pipeline", func(r Request) Request { return r }, "AAAAAA", 0, nil, ""},
		{"shared", func(r Request) Request { r.Shared, r.Depth = true, 2; return r }, "AACCCC", 2, nil, ""},
		{"device too small", func(r Request) Request { r.DeviceBudget = 40 * mb; return r }, "AAAACC", 0, ErrNoFit, "forced placement (4 layers on A, 0 on B, 2 on C)"},
		{"host too small", func(r Request) Request { r.HostBudget = 15 * mb; return r }, "BBCCCC", 0, ErrNoFit, "host budget"},
		{"wrong count", func(r Request) Request { return r }, "CCC", 0, nil, "3 tiers for 6 layers"},
		{"bad depth", func(r Request) Request { r.Depth = -1; return r }, "CCCCCC", 0, nil, "depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ts []Tier
			for _, c := range tc.tiers {
				x, err := ParseTier(string(c))
				if err != nil {
					t.Fatal(err)
				}
				ts = append(ts, x)
			}
			r := tc.r(base)
			p, err := PlanTiers(r, ts)
			if tc.msg != "" || tc.err != nil {
				if err == nil || (tc.err != nil && !errors.Is(err, tc.err)) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("error %v, want %v mentioning %q", err, tc.err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tiersOf(p); got != tc.tiers {
				t.Fatalf("tiers %s, want %s", got, tc.tiers)
			}
			if (tc.depth >= 0 && p.Depth != tc.depth) || (tc.depth < 0 && p.Depth < minDepth) {
				t.Fatalf("depth %d, want %d", p.Depth, tc.depth)
			}
			// The same placement costed by the planner's own evaluation.
			want := r.evaluate(ts, p.Depth)
			if want == nil || want.PassTime != p.PassTime || want.Device.Total != p.Device.Total || want.Moved != p.Moved {
				t.Fatalf("plan %+v differs from evaluate's %+v", p, want)
			}
			if tc.depth < 0 {
				for k := minDepth; k <= DefaultMaxDepth; k++ {
					if q := r.evaluate(ts, k); q != nil && better(q, p) {
						t.Fatalf("depth %d beats the chosen %d", k, p.Depth)
					}
				}
			}
		})
	}
}
