package hostcpu

import (
	"cmp"
	"slices"
)

// order sorts ids physical cores first (see CPUs) given each CPU's
// package and core, and counts the cores.
func order(ids []int, topo func(cpu int) (pkg, core int, ok bool)) ([]int, int) {
	type key struct{ pkg, core int }
	type entry struct {
		cpu, rank int
		k         key
	}
	seen := map[key]int{} // CPUs of each core so far
	es := make([]entry, 0, len(ids))
	for _, c := range ids {
		pkg, core, ok := topo(c)
		k := key{pkg, core}
		if !ok {
			k = key{-1, -1 - c} // unknown topology: a core of its own
		}
		es = append(es, entry{cpu: c, rank: seen[k], k: k})
		seen[k]++
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.k.pkg, b.k.pkg), cmp.Compare(a.k.core, b.k.core), cmp.Compare(a.cpu, b.cpu))
	})
	out := make([]int, len(es))
	for i, e := range es {
		out[i] = e.cpu
	}
	return out, len(seen)
}
