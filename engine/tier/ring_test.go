package tier

import (
	"slices"
	"strings"
	"testing"
)

func TestLayRing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		lengths  []int64
		capacity int64
		off      []int64
		after    []int
		err      string
	}{
		// Whole layers of one size are the ring of depth slots: layer n
		// waits for layer n-depth.
		{"slots", []int64{1024, 1024, 1024, 1024, 1024}, 2048, []int64{0, 1024, 0, 1024, 0}, []int{-1, -1, 0, 1, 2}, ""},
		{"depth 3", []int64{512, 512, 512, 512}, 1536, []int64{0, 512, 1024, 0}, []int{-1, -1, -1, 0}, ""},
		// Short layers (attention only) between whole ones: more in
		// flight; a layer that does not fit before the end goes back to
		// the start and waits for every layer it overwrites.
		{"short", []int64{1024, 256, 256, 1024, 256}, 2048, []int64{0, 1024, 1280, 0, 1024}, []int{-1, -1, -1, 0, 1}, ""},
		{"wrap", []int64{768, 768, 768}, 2048, []int64{0, 768, 0}, []int{-1, -1, 0}, ""},
		// Lengths round up to RingAlign.
		{"align", []int64{100, 300, 256}, 1024, []int64{0, 256, 768}, []int{-1, -1, -1}, ""},
		{"too long", []int64{256, 4096}, 2048, nil, nil, "layer 1 of 4096 bytes"},
		{"empty layer", []int64{0}, 2048, nil, nil, "layer 0 of 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := LayRing(tc.lengths, tc.capacity)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Off, tc.off) || !slices.Equal(r.After, tc.after) {
				t.Fatalf("off %v after %v, want %v %v", r.Off, r.After, tc.off, tc.after)
			}
			for n := range r.Off {
				if r.Off[n]%RingAlign != 0 || r.Off[n]+r.Size[n] > tc.capacity || r.Size[n] < tc.lengths[n] {
					t.Fatalf("layer %d at [%d, +%d) in %d", n, r.Off[n], r.Size[n], tc.capacity)
				}
			}
		})
	}
}

// TestLayRingFences: every earlier layer whose bytes a layer overwrites
// comes at or before its After, so waiting for After's release (releases
// come in order) waits for all of them.
func TestLayRingFences(t *testing.T) {
	t.Parallel()
	lengths := []int64{5000, 300, 300, 7000, 256, 9000, 300, 300, 300, 6000, 300, 8192, 300}
	capacity := RingCapacity(lengths, 2)
	r, err := LayRing(lengths, capacity)
	if err != nil {
		t.Fatal(err)
	}
	for n := range lengths {
		for m := range n {
			overlap := r.Off[m] < r.Off[n]+r.Size[n] && r.Off[n] < r.Off[m]+r.Size[m]
			if overlap && m > r.After[n] {
				t.Fatalf("layer %d overwrites layer %d but waits only for %d", n, m, r.After[n])
			}
		}
	}
	if got := RingCapacity([]int64{100, 5000}, 3); got != 3*5120 {
		t.Fatalf("capacity %d", got)
	}
}
