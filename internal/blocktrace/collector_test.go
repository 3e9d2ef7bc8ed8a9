package blocktrace

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	d := Device{Dev: Dev{259, 0}, Name: "nvme0n1", Errors: 2}
	d.Ops[Read] = OpStats{IOs: 5, Bytes: 5 << 20}
	d.Ops[Read].Latency[3] = 4  // [8,16) µs
	d.Ops[Read].Latency[31] = 1 // open-ended
	nameless := Device{Dev: Dev{8, 16}}
	var fail bool
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(func() (Snapshot, error) {
		if fail {
			return Snapshot{}, errors.New("closed")
		}
		return Snapshot{Devices: []Device{d, nameless}}, nil
	}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
		switch mf.GetName() {
		case "strata_block_bytes_total":
			for _, m := range mf.GetMetric() {
				l := m.GetLabel()
				if l[0].GetValue() == "nvme0n1" && l[1].GetValue() == "read" && m.GetCounter().GetValue() != 5<<20 {
					t.Errorf("read bytes = %v", m.GetCounter().GetValue())
				}
				if l[0].GetValue() != "nvme0n1" && l[0].GetValue() != "8:16" {
					t.Errorf("device label %q", l[0].GetValue())
				}
			}
		case "strata_block_latency_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				if m.GetLabel()[0].GetValue() != "nvme0n1" || m.GetLabel()[1].GetValue() != "read" {
					continue
				}
				if h.GetSampleCount() != 5 {
					t.Errorf("latency count = %d", h.GetSampleCount())
				}
				for _, b := range h.GetBucket() {
					if b.GetUpperBound() == 16e-6 && b.GetCumulativeCount() != 4 {
						t.Errorf("bucket ≤16µs = %d", b.GetCumulativeCount())
					}
				}
			}
		}
	}
	// 2 devices × 3 ops; errors per device; one scrape-error gauge.
	for name, n := range map[string]int{"strata_block_bytes_total": 6, "strata_block_requests_total": 6, "strata_block_latency_seconds": 6, "strata_block_errors_total": 2, "strata_block_trace_errors": 1} {
		if got[name] != n {
			t.Errorf("%s: %d series, want %d", name, got[name], n)
		}
	}
	fail = true
	mfs, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "strata_block_trace_errors" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("failed scrape: %v", mfs)
	}
}
