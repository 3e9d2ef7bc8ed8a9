package plot

import (
	"fmt"
	"slices"

	"github.com/strata-llm/strata/bench"
)

// StorageChart is GB/s against block size, one line per queue depth.
func StorageChart(r *bench.StorageResult) Chart {
	c := Chart{
		Title:  fmt.Sprintf("%s %s reads (%s, %s)", r.Target.Kind, r.Pattern, r.Target.Name, r.Via),
		XLabel: "block size", YLabel: "GB/s", LogX: true, XTick: sizeTick,
	}
	var qds []int
	for _, p := range r.Points {
		qds = append(qds, p.QueueDepth)
	}
	for _, qd := range bench.SortedUnique(qds) {
		s := Series{Name: fmt.Sprintf("qd %d", qd)}
		pts := slices.Clone(r.Points)
		slices.SortStableFunc(pts, func(a, b bench.StoragePoint) int { return a.BlockSize - b.BlockSize })
		for _, p := range pts {
			if p.QueueDepth == qd {
				s.X = append(s.X, float64(p.BlockSize))
				s.Y = append(s.Y, p.GBps)
			}
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// PCIeChart is GB/s against copy size, one line per direction and host
// memory kind.
func PCIeChart(r *bench.PCIeResult) Chart {
	c := Chart{Title: fmt.Sprintf("PCIe copies, %s (%s)", r.Device, r.Via), XLabel: "copy size", YLabel: "GB/s", LogX: true, XTick: sizeTick}
	idx := map[string]int{}
	for _, p := range r.Points {
		name := fmt.Sprintf("%s %s", p.Direction, p.Memory)
		i, ok := idx[name]
		if !ok {
			i = len(c.Series)
			idx[name] = i
			c.Series = append(c.Series, Series{Name: name})
		}
		c.Series[i].X = append(c.Series[i].X, float64(p.Bytes))
		c.Series[i].Y = append(c.Series[i].Y, p.GBps)
	}
	return c
}

// sizeTick labels a power-of-two byte count compactly: 4K, 64K, 1M, 1G.
func sizeTick(v float64) string {
	n := int64(v)
	for _, u := range []struct {
		s string
		m int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	return fmt.Sprintf("%d", n)
}
