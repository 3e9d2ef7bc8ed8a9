package bench

import (
	"math"
	"strings"
	"testing"
)

func TestColdStartRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		bps       float64
		notes     []string
		ratio     float64
		printed   string
		noteNamed bool
	}{
		{"measured, under the goal", 1e9, []string{"storage: 64 MiB of nvme://x/1, userspace NVMe driver", "h2d: memmove"}, 1.1, "meets the goal", false},
		{"measured, over the goal", 1e9, []string{"storage: 64 MiB of /m/p.pool, O_DIRECT"}, 1.1 * 2, "misses the goal", false},
		{"pinned links", 1e9, []string{"defaults (not measured)"}, 0, "no ratio", true},
		{"default storage", 1e9, []string{"storage: default"}, 0, "no ratio", true},
	} {
		r := &ColdStartResult{Model: "m", PoolBytes: 1e9, FirstTokenSeconds: 1.1}
		if strings.Contains(tc.name, "over") {
			r.FirstTokenSeconds = 2.2
		}
		r.SetStorage(tc.bps, tc.notes)
		if math.Abs(r.Ratio-tc.ratio) > 1e-9 || r.Goal != ColdStartGoal || (r.Note != "") != tc.noteNamed || !strings.Contains(r.String(), tc.printed) {
			t.Errorf("%s: %+v\n%s", tc.name, r, r.String())
		}
	}
}
