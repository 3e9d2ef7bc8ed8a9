package waytrial

import (
	"testing"
	"time"
)

// TestTrial: a batch size runs a block of the first way, then one of the
// second, and keeps the way with the smaller median (a tie keeps the
// first; one slow outlier changes nothing); warm-up passes do not count,
// passes out of turn are ignored, batches past MaxBatch always take the
// first way, and Reset starts over.
func TestTrial(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name          string
		first, second []time.Duration // each block's passes, warm-up first
		want          bool
	}{
		{"first faster", []time.Duration{900 * ms, 10 * ms, 12 * ms, 11 * ms, 13 * ms}, []time.Duration{900 * ms, 20 * ms, 21 * ms, 22 * ms, 19 * ms}, true},
		{"second faster", []time.Duration{1, 30 * ms, 31 * ms, 29 * ms, 32 * ms}, []time.Duration{1, 20 * ms, 21 * ms, 5 * ms, 22 * ms}, false},
		{"a tie keeps the first", []time.Duration{1, 20 * ms, 20 * ms, 20 * ms, 20 * ms}, []time.Duration{1, 20 * ms, 20 * ms, 20 * ms, 20 * ms}, true},
		{"one slow outlier", []time.Duration{1, 10 * ms, 11 * ms, 900 * ms, 12 * ms}, []time.Duration{1, 20 * ms, 21 * ms, 22 * ms, 19 * ms}, true},
	} {
		tr := Trial{MaxBatch: 8}
		for _, d := range tc.first {
			if !tr.First(3) {
				t.Fatalf("%s: the first block does not take the first way", tc.name)
			}
			tr.Record(3, false, time.Hour) // out of turn: ignored
			tr.Record(3, true, d)
		}
		for i, d := range tc.second {
			if tr.First(3) || tr.Decided(3) {
				t.Fatalf("%s: pass %d of the second block takes the first way or is decided", tc.name, i)
			}
			tr.Record(3, false, d)
		}
		if !tr.Decided(3) || tr.First(3) != tc.want {
			t.Fatalf("%s: decided %v, first %v", tc.name, tr.Decided(3), tr.First(3))
		}
		ds := tr.Decisions()
		if len(ds) != 1 || ds[0].Batch != 3 || ds[0].First != tc.want || ds[0].FirstTime == 0 || ds[0].SecondTime == 0 || ds[0].FirstTime >= 900*ms {
			t.Fatalf("%s: decisions %+v", tc.name, ds)
		}
		if !tr.First(9) || tr.Decided(1) || !tr.First(1) {
			t.Fatalf("%s: a batch past MaxBatch must take the first way, and another batch size starts its own trial", tc.name)
		}
		tr.Reset()
		if tr.Decided(3) || !tr.First(3) {
			t.Fatalf("%s: Reset kept the decision", tc.name)
		}
	}
}
