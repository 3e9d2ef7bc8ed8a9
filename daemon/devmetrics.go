package daemon

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// deviceCollector exposes the counters of every NVMe controller the daemon
// holds at scrape time, read from the driver as `strata devices stats`
// reads them: they appear with a bind and vanish with the unbind.
type deviceCollector struct{ r *deviceRegistry }

var (
	descNVMeCommands = prometheus.NewDesc("strata_nvme_commands_total",
		"Read and write commands the userspace NVMe driver completed on a held controller.", []string{"bdf", "op"}, nil)
	descNVMeBytes = prometheus.NewDesc("strata_nvme_bytes_total",
		"Payload bytes the userspace NVMe driver read and wrote on a held controller.", []string{"bdf", "op"}, nil)
	descNVMeEvents = prometheus.NewDesc("strata_nvme_events_total",
		"Faults and recoveries on a held controller: error (a command failed), timeout, abort (aborts asked for), reset, resubmitted (commands submitted again after a reset).",
		[]string{"bdf", "event"}, nil)
	descNVMeInflight = prometheus.NewDesc("strata_nvme_inflight_commands",
		"Commands in flight on each I/O queue of a held controller.", []string{"bdf", "queue"}, nil)
	descNVMeDMA = prometheus.NewDesc("strata_nvme_dma_mapped_bytes",
		"Bytes the daemon has mapped into a held controller's IOMMU domain (queues, bounce buffers, the DMA staging of the models it streams).", []string{"bdf"}, nil)
)

// Describe implements prometheus.Collector.
func (c deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNVMeCommands, descNVMeBytes, descNVMeEvents, descNVMeInflight, descNVMeDMA} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c deviceCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.mu.RLock()
	held := make([]*heldCtrl, 0, len(c.r.held))
	for _, bdf := range slices.Sorted(mapKeys(c.r.held)) {
		held = append(held, c.r.held[bdf])
	}
	c.r.mu.RUnlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, hc := range held {
		st := hc.stats()
		b := st.BDF
		counter(descNVMeCommands, st.Reads, b, "read")
		counter(descNVMeCommands, st.Writes, b, "write")
		counter(descNVMeBytes, st.ReadBytes, b, "read")
		counter(descNVMeBytes, st.WriteBytes, b, "write")
		for _, e := range []struct {
			name string
			v    uint64
		}{{"error", st.Errors}, {"timeout", st.Timeouts}, {"abort", st.Aborts}, {"reset", st.Resets}, {"resubmitted", st.Resubmitted}} {
			counter(descNVMeEvents, e.v, b, e.name)
		}
		for _, q := range st.Queues {
			ch <- prometheus.MustNewConstMetric(descNVMeInflight, prometheus.GaugeValue, float64(q.Inflight), b, fmt.Sprint(q.ID))
		}
		if hc.h.dmaStats != nil {
			ch <- prometheus.MustNewConstMetric(descNVMeDMA, prometheus.GaugeValue, float64(st.DMABytes), b)
		}
	}
}
