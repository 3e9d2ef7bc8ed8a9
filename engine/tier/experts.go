package tier

import (
	"cmp"
	"fmt"
	"slices"
)

// ExpertPlan places a mixture-of-experts model's experts one by one: an
// expert is either resident (held in memory and used in place) or stays
// on storage and is read into a buffer when a pass routes a token to it. A
// token touches only the experts its router picks, so the experts worth
// memory are the ones used most per byte they take.
type ExpertPlan struct {
	// Resident says, per layer and expert, whether the expert is held in
	// memory.
	Resident [][]bool `json:"resident"`
	// ResidentBytes and StorageBytes sum the two sides.
	ResidentBytes int64 `json:"resident_bytes"`
	StorageBytes  int64 `json:"storage_bytes"`
	// Buffers is how many read buffers of BufferBytes each the storage
	// experts need: enough for every storage expert of the layer that has
	// the most, since one pass may route to all of them.
	Buffers     int   `json:"buffers"`
	BufferBytes int64 `json:"buffer_bytes"`
	// Hit is the share of the routing counts the plan was made from that
	// resident experts serve: the expected share of expert uses that read
	// nothing (with no counts, the share of experts resident).
	Hit float64 `json:"hit"`
}

// AllResident reports whether every expert is held in memory.
func (p *ExpertPlan) AllResident() bool { return p.StorageBytes == 0 }

// ResidentCount is how many experts are resident.
func (p *ExpertPlan) ResidentCount() int {
	n := 0
	for _, l := range p.Resident {
		for _, r := range l {
			if r {
				n++
			}
		}
	}
	return n
}

// PlanExperts places experts of the given sizes (per layer, per expert)
// within budget bytes: every expert resident if they all fit, else the
// read buffers first and then experts in order of use per byte — counts
// (routing counts per layer and expert; nil or all zero when none were
// measured) plus one, so an unmeasured expert still ranks by its size —
// ties to the lower layer and expert. It fails with ErrNoFit when not even
// the buffers fit.
func PlanExperts(sizes [][]int64, counts [][]uint64, budget int64) (ExpertPlan, error) {
	var p ExpertPlan
	var total int64
	for l, s := range sizes {
		for e, n := range s {
			if n <= 0 {
				return p, fmt.Errorf("expert plan: layer %d expert %d has size %d", l, e, n)
			}
			total += n
			p.BufferBytes = max(p.BufferBytes, n)
		}
		if counts != nil && (len(counts) != len(sizes) || len(counts[l]) != len(s)) {
			return p, fmt.Errorf("expert plan: counts for %d layers (layer %d: %d experts), sizes for %d (%d experts)",
				len(counts), l, len(counts[min(l, len(counts)-1)]), len(sizes), len(s))
		}
	}
	p.Resident = make([][]bool, len(sizes))
	for l := range sizes {
		p.Resident[l] = make([]bool, len(sizes[l]))
	}
	if total <= budget {
		for l := range p.Resident {
			for e := range p.Resident[l] {
				p.Resident[l][e] = true
			}
		}
		p.ResidentBytes, p.BufferBytes, p.Hit = total, 0, 1
		return p, nil
	}
	// Buffers for the worst layer as if nothing were resident; refined
	// below once the resident set is known.
	worst := 0
	for _, s := range sizes {
		worst = max(worst, len(s))
	}
	if int64(worst)*p.BufferBytes > budget {
		return p, fmt.Errorf("%w: the experts' read buffers (%d x %s) exceed the %s left for experts",
			ErrNoFit, worst, FormatBytes(p.BufferBytes), FormatBytes(budget))
	}
	type cand struct {
		l, e  int
		n     int64
		count uint64
	}
	var cs []cand
	for l, s := range sizes {
		for e, n := range s {
			var c uint64
			if counts != nil {
				c = counts[l][e]
			}
			cs = append(cs, cand{l, e, n, c})
		}
	}
	// (a+1)/na > (b+1)/nb, compared without division.
	slices.SortStableFunc(cs, func(a, b cand) int {
		return cmp.Compare(float64(b.count+1)*float64(a.n), float64(a.count+1)*float64(b.n))
	})
	left := budget - int64(worst)*p.BufferBytes
	for _, c := range cs {
		if c.n <= left {
			p.Resident[c.l][c.e] = true
			left -= c.n
		}
	}
	// Fewer storage experts per layer need fewer buffers: the bytes freed
	// take more experts, as long as the buffers still cover every layer.
	for {
		p.Buffers = 0
		for l := range sizes {
			n := 0
			for e := range sizes[l] {
				if !p.Resident[l][e] {
					n++
				}
			}
			p.Buffers = max(p.Buffers, n)
		}
		freed := int64(worst-p.Buffers) * p.BufferBytes
		worst = p.Buffers
		if freed == 0 {
			break
		}
		left += freed
		for _, c := range cs {
			if !p.Resident[c.l][c.e] && c.n <= left {
				p.Resident[c.l][c.e] = true
				left -= c.n
			}
		}
	}
	var hit, all uint64
	for _, c := range cs {
		if p.Resident[c.l][c.e] {
			p.ResidentBytes += c.n
			hit += c.count
		} else {
			p.StorageBytes += c.n
		}
		all += c.count
	}
	if all > 0 {
		p.Hit = float64(hit) / float64(all)
	} else {
		p.Hit = float64(p.ResidentCount()) / float64(len(cs))
	}
	return p, nil
}
