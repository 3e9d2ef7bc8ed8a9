package blocktrace

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes a Tracer's counters on /metrics, read fresh at every
// scrape:
//
//	strata_block_bytes_total{device,op}      bytes completed
//	strata_block_requests_total{device,op}   requests completed in full
//	strata_block_errors_total{device}        completions with an error status
//	strata_block_latency_seconds{device,op}  issue→completion histogram
//
// device is the kernel name ("nvme0n1"), or major:minor when sysfs has none.
type Collector struct {
	snap                       func() (Snapshot, error)
	bytes, reqs, errs, latency *prometheus.Desc
	scrapeErr                  *prometheus.Desc
}

// NewCollector returns a collector over t, for registering with the
// daemon's Prometheus registry.
func NewCollector(t *Tracer) *Collector { return newCollector(t.Snapshot) }

func newCollector(snap func() (Snapshot, error)) *Collector {
	return &Collector{
		snap:      snap,
		bytes:     prometheus.NewDesc("strata_block_bytes_total", "Bytes the block layer completed per device and operation (eBPF block_rq_complete).", []string{"device", "op"}, nil),
		reqs:      prometheus.NewDesc("strata_block_requests_total", "Block requests completed in full per device and operation.", []string{"device", "op"}, nil),
		errs:      prometheus.NewDesc("strata_block_errors_total", "Block request completions with a non-zero status per device.", []string{"device"}, nil),
		latency:   prometheus.NewDesc("strata_block_latency_seconds", "Block request latency from issue to completion (log2 buckets).", []string{"device", "op"}, nil),
		scrapeErr: prometheus.NewDesc("strata_block_trace_errors", "1 when the block tracer's counters could not be read at this scrape.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.reqs, c.errs, c.latency, c.scrapeErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.snap()
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, failed)
	if err != nil {
		return
	}
	for _, d := range s.Devices {
		name := d.Name
		if name == "" {
			name = d.Dev.String()
		}
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(d.Errors), name)
		for op, st := range d.Ops {
			o := Op(op).String()
			ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.Bytes), name, o)
			ch <- prometheus.MustNewConstMetric(c.reqs, prometheus.CounterValue, float64(st.IOs), name, o)
			buckets := make(map[float64]uint64, Slots)
			var cum uint64
			var sum float64
			for i, n := range st.Latency {
				cum += n
				if i < Slots-1 { // the last bucket is open-ended: +Inf
					buckets[UpperBound(i).Seconds()] = cum
				}
				// The sum is estimated from bucket midpoints: the BPF side
				// keeps counts only.
				sum += float64(n) * UpperBound(i).Seconds() * 0.75
			}
			if math.IsNaN(sum) {
				sum = 0
			}
			ch <- prometheus.MustNewConstHistogram(c.latency, cum, sum, buckets, name, o)
		}
	}
}
