package hostcpu

import (
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	t.Parallel()
	// Two packages of two cores with two threads each, numbered as Linux
	// numbers an Intel host (the second threads after all first ones) and
	// as it numbers some AMD hosts (siblings adjacent); CPU 9 has no
	// topology.
	intel := map[int][2]int{0: {0, 0}, 1: {0, 1}, 2: {1, 0}, 3: {1, 1}, 4: {0, 0}, 5: {0, 1}, 6: {1, 0}, 7: {1, 1}}
	amd := map[int][2]int{0: {0, 0}, 1: {0, 0}, 2: {0, 1}, 3: {0, 1}, 4: {1, 0}, 5: {1, 0}, 6: {1, 1}, 7: {1, 1}}
	topo := func(m map[int][2]int) func(int) (int, int, bool) {
		return func(c int) (int, int, bool) { v, ok := m[c]; return v[0], v[1], ok }
	}
	for _, tc := range []struct {
		name  string
		ids   []int
		topo  map[int][2]int
		want  []int
		cores int
	}{
		{"intel", []int{0, 1, 2, 3, 4, 5, 6, 7}, intel, []int{0, 1, 2, 3, 4, 5, 6, 7}, 4},
		{"amd", []int{0, 1, 2, 3, 4, 5, 6, 7}, amd, []int{0, 2, 4, 6, 1, 3, 5, 7}, 4},
		{"amd, some allowed", []int{1, 2, 3, 6}, amd, []int{1, 2, 6, 3}, 3},
		{"unknown topology", []int{9, 0, 1}, amd, []int{9, 0, 1}, 2},
		{"none", nil, amd, []int{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, cores := order(tc.ids, topo(tc.topo))
			if !slices.Equal(got, tc.want) || cores != tc.cores {
				t.Fatalf("order(%v) = %v, %d cores; want %v, %d", tc.ids, got, cores, tc.want, tc.cores)
			}
		})
	}
}

func TestCPUs(t *testing.T) {
	t.Parallel()
	cpus, cores, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) == 0 || cores < 1 || cores > len(cpus) {
		t.Fatalf("CPUs() = %v, %d cores", cpus, cores)
	}
	s := slices.Clone(cpus)
	slices.Sort(s)
	if len(slices.Compact(s)) != len(cpus) {
		t.Fatalf("CPUs() repeats a CPU: %v", cpus)
	}
}
