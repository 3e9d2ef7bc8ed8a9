package main

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gpu"
)

func TestWriteWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	x := func(dev, off, streamed, mapped uint64) engine.ExpertInfo {
		return engine.ExpertInfo{DeviceUses: dev, CPUUses: off, StreamedPicks: streamed, MappedPicks: mapped}
	}
	h := func(layers int64, busy, hop time.Duration) engine.HybridInfo {
		return engine.HybridInfo{Stats: gpu.HybridStats{Layers: layers, Busy: busy, Hop: hop}}
	}
	for _, tc := range []struct {
		name       string
		a, b       windowSnap
		first, end int
		want, not  []string
	}{
		{
			name: "time alone", first: 2, end: 5,
			a:    windowSnap{t: t0},
			b:    windowSnap{t: t0.Add(40 * time.Millisecond)},
			want: []string{"tokens 2-5: 10ms a token (100.00 tok/s)"},
			not:  []string{"expert", "cpu"},
		},
		{
			name: "expert picks are the window's", first: 129, end: 256,
			a:    windowSnap{t: t0, experts: x(1000, 500, 100, 7), xok: true},
			b:    windowSnap{t: t0.Add(1280 * time.Millisecond), experts: x(1300, 600, 150, 7), xok: true},
			want: []string{"tokens 129-256: 10ms a token", "on the device 300, off it 100 (hit 0.75), sent over PCIe 50, pulled by the GPU 0"},
		},
		{
			name: "the host store's uses are the window's", first: 2, end: 5,
			a:    windowSnap{t: t0, xok: true, experts: engine.ExpertInfo{Stats: engine.ExpertStats{Resident: 10, Buffered: 5, Read: 5, ReadBytes: 1 << 20}}},
			b:    windowSnap{t: t0.Add(4 * time.Millisecond), xok: true, experts: engine.ExpertInfo{Stats: engine.ExpertStats{Resident: 40, Buffered: 5, Read: 15, ReadBytes: 3 << 20, Promoted: 2}}},
			want: []string{"expert uses 40, hit 0.75, 2.00 MiB read, 2 promoted"},
			not:  []string{"on the device"},
		},
		{
			name: "no picks in the window print none", first: 2, end: 3,
			a:   windowSnap{t: t0, experts: x(9, 9, 0, 0), xok: true},
			b:   windowSnap{t: t0.Add(time.Millisecond), experts: x(9, 9, 0, 0), xok: true},
			not: []string{"expert"},
		},
		{
			name: "the CPU's FFNs per token", first: 2, end: 3,
			a:    windowSnap{t: t0, hybrid: h(26, time.Millisecond, 0), hok: true},
			b:    windowSnap{t: t0.Add(20 * time.Millisecond), hybrid: h(52, 17*time.Millisecond, 2*time.Millisecond), hok: true},
			want: []string{"cpu 26 FFNs, busy 8ms a token, hops 1ms a token"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			writeWindow(&b, tc.first, tc.end, tc.a, tc.b)
			got := b.String()
			if !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
				t.Errorf("want one line, got %q", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("%q has %q", got, w)
				}
			}
		})
	}
}
