package daemon

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// This file turns the tiered engine's plan and pipeline counters into the
// admin API's status and into Prometheus metrics.

// backendStatus converts the engine's backend description for the wire.
func backendStatus(b engine.BackendInfo) api.BackendStatus {
	return api.BackendStatus{
		Name: b.Name, Requested: b.Requested, Reason: b.Reason,
		Device: b.Device, Ordinal: b.Ordinal, ComputeCapability: b.ComputeCapability,
		DeviceMemoryBytes: b.DeviceMemory, DeviceFreeBytes: b.DeviceFree, Kernels: b.Kernels,
		WeightBytes: b.WeightBytes, StreamedBytesPerPass: b.StreamedBytes, KVBytes: b.KVBytes,
		Slots: b.Slots, MaxContext: b.MaxContext,
	}
}

// planStatus flattens an engine plan for the wire, with the bytes tiers B
// and C have moved since load; nil stays nil.
func planStatus(p *tier.Plan, movedB, movedC uint64) *api.TierPlan {
	if p == nil {
		return nil
	}
	tp := &api.TierPlan{
		Layers: make([]string, len(p.Layers)), LayerBytes: make([]int64, len(p.Layers)),
		Depth: p.Depth, SlotBytes: p.SlotBytes, Batch: p.Batch, Bound: p.Bound.String(),
		PassSeconds: p.PassTime.Seconds(), TokensPerSecond: p.TokensPerSecond, StallSeconds: p.Stall.Seconds(),
		LinkSeconds: api.Links{Storage: p.Time.Storage.Seconds(), HostToDevice: p.Time.HostToDevice.Seconds(), Compute: p.Time.Compute.Seconds()},
		LinkBPS:     api.Links{Storage: p.Links.StorageToHost, HostToDevice: p.Links.HostToDevice, Compute: p.Links.Compute},
		LinkNotes:   p.Links.Notes,
		DeviceBytes: p.Device.Total, DeviceBudgetBytes: p.Device.Budget,
		HostBytes: p.Host.Total, HostBudgetBytes: p.Host.Budget, Shared: p.Shared,
	}
	for i, l := range p.Layers {
		tp.Layers[i], tp.LayerBytes[i] = l.Tier.String(), l.Bytes
	}
	desc := [3]string{"resident in device memory", "host memory, copied to the device every pass", "storage, read every pass"}
	if p.Shared {
		desc[tier.TierA] = "resident (device memory is host memory)"
	}
	for t, tt := range p.Tiers {
		ts := api.TierStatus{Tier: tier.Tier(t).String(), Layers: tt.Layers, Bytes: tt.Bytes, Description: desc[t]}
		switch tier.Tier(t) {
		case tier.TierB:
			ts.BytesMoved = movedB
		case tier.TierC:
			ts.BytesMoved = movedC
		}
		tp.Tiers = append(tp.Tiers, ts)
	}
	return tp
}

// planNoteFor says in a sentence what the plan means.
func planNoteFor(p *tier.Plan) string {
	if p == nil {
		return ""
	}
	if p.Depth == 0 {
		return "every layer fits the budgets and is resident"
	}
	return fmt.Sprintf("%d of %d layers stream every pass through a pipeline %d slots deep; expected %.3g tokens/s at batch %d, bound by %s",
		p.Tiers[tier.TierB].Layers+p.Tiers[tier.TierC].Layers, len(p.Layers), p.Depth, p.TokensPerSecond, p.Batch, p.Bound)
}

// tierMoved splits the bytes the pipeline moved by tier: tier C is what
// stage 1 read from storage; tier B is what stage 2 copied that did not
// come from storage (every tier-C layer read is also copied, except in a
// pass that failed between the two, which the max hides).
func tierMoved(st *stream.Stats) (b, c uint64) {
	return uint64(max(0, st.Copy.Bytes-st.Read.Bytes)), uint64(max(0, st.Read.Bytes))
}

// pipelineStatus converts the pipeline's Stats for the wire; nil stays nil.
func pipelineStatus(st *stream.Stats) *api.PipelineStatus {
	if st == nil {
		return nil
	}
	stage := func(s stream.StageStats) api.StageStatus {
		return api.StageStatus{Layers: s.Layers, Bytes: s.Bytes, BusySeconds: s.Busy.Seconds(), StallSeconds: s.Stall.Seconds(), GBps: s.GBps}
	}
	return &api.PipelineStatus{
		Passes: st.Passes, Failed: st.Failed, WallSeconds: st.Wall.Seconds(),
		Read: stage(st.Read), Copy: stage(st.Copy), Compute: stage(st.Compute),
		VerifySeconds: st.Verify.Seconds(), Overlap: st.Overlap, ComputeUtil: st.ComputeUtil,
		ResidentBytes: st.ResidentBytes, StreamedBytes: st.StreamedBytes,
	}
}

// tierFeed adds one engine's streamed bytes to the daemon-wide
// strata_tier_bytes_moved_total counters as they grow. The counters are
// cumulative over every model ever loaded, so each engine's contribution
// is fed as deltas of its own cumulative Stats.
type tierFeed struct {
	m   *metrics
	eng *engine.Engine

	mu   sync.Mutex
	b, c uint64 // what has been added so far
}

// passed adds one successful pass's tier-B copies on a GPU whose
// streaming has no pipeline counters: each pass copies every tier-B layer
// once. Pipelines with counters (the CPU's, and the GPU's since it
// streams tier C) come through flush.
func (f *tierFeed) passed() {
	if f == nil || f.eng == nil || f.eng.PipelineStats() != nil {
		return
	}
	if bi := f.eng.BackendInfo(); bi.Name == engine.BackendCUDA && bi.StreamedBytes > 0 {
		f.m.tierBytes.WithLabelValues("B").Add(float64(bi.StreamedBytes))
	}
}

// flush adds what the engine's pipeline moved since the last flush.
func (f *tierFeed) flush() {
	if f == nil || f.eng == nil {
		return
	}
	st := f.eng.PipelineStats()
	if st == nil {
		return
	}
	b, c := tierMoved(st)
	f.mu.Lock()
	defer f.mu.Unlock()
	if b > f.b {
		f.m.tierBytes.WithLabelValues("B").Add(float64(b - f.b))
		f.b = b
	}
	if c > f.c {
		f.m.tierBytes.WithLabelValues("C").Add(float64(c - f.c))
		f.c = c
	}
}

// pipelineCollector exposes each loaded model's plan and pipeline counters
// at scrape time, read straight from the engine (so they vanish with the
// model and never drift from the status).
type pipelineCollector struct{ s *Server }

var (
	descPlanLayers = prometheus.NewDesc("strata_plan_layers",
		"Layers of a model on each tier (A device-resident, B host memory, C storage).", []string{"model", "tier"}, nil)
	descPlanTPS = prometheus.NewDesc("strata_plan_expected_tokens_per_second",
		"Decode throughput the tier planner expects for the model's plan at its batch size.", []string{"model"}, nil)
	descPlanDepth = prometheus.NewDesc("strata_plan_pipeline_depth",
		"Streaming pipeline depth (slots) of the model's plan; 0 when every layer is resident.", []string{"model"}, nil)
	descPasses = prometheus.NewDesc("strata_pipeline_passes_total",
		"Passes the streaming pipeline ran (failed ones included).", []string{"model"}, nil)
	descFailed = prometheus.NewDesc("strata_pipeline_failed_passes_total",
		"Pipeline passes that ended in an error or cancellation.", []string{"model"}, nil)
	descStageBytes = prometheus.NewDesc("strata_pipeline_stage_bytes_total",
		"Bytes each pipeline stage moved: read (storage to staging), copy (to a device slot), compute (weights consumed).", []string{"model", "stage"}, nil)
	descStageBusy = prometheus.NewDesc("strata_pipeline_stage_busy_seconds_total",
		"Time each pipeline stage spent working.", []string{"model", "stage"}, nil)
	descStageStall = prometheus.NewDesc("strata_pipeline_stage_stall_seconds_total",
		"Time each pipeline stage spent waiting on another stage.", []string{"model", "stage"}, nil)
	descStageGBps = prometheus.NewDesc("strata_pipeline_stage_gbps",
		"Bandwidth each stage's link achieved while busy, since load (10^9 bytes/s).", []string{"model", "stage"}, nil)
	descOverlap = prometheus.NewDesc("strata_pipeline_overlap_ratio",
		"How much the pipeline's stages overlapped since load: 1 = passes took only as long as the slowest stage, 0 = stages ran one after another.", []string{"model"}, nil)
	descBackend = prometheus.NewDesc("strata_model_backend_info",
		"Always 1: the backend a model runs on (cpu or cuda), the backend its load asked for, and the GPU's name (empty on the CPU).", []string{"model", "backend", "requested", "device"}, nil)
	descDeviceBytes = prometheus.NewDesc("strata_model_device_bytes",
		"Device memory a model holds on the GPU, by use: weights (tier A), kv (the KV cache) and streamed_per_pass (tier B copied every pass).", []string{"model", "use"}, nil)
	descRoute = prometheus.NewDesc("strata_tier_c_route",
		"1 for the route a model's tier-C layers are read by (file, nvme-pinned, nvme-bar), 0 for each route refused, with the reason.", []string{"model", "route", "reason"}, nil)
	descComputeUtil = prometheus.NewDesc("strata_pipeline_compute_utilization",
		"Share of pass time the compute stage was fed since load (1 = streaming never held compute up).", []string{"model"}, nil)
)

// Describe implements prometheus.Collector.
func (c pipelineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBackend, descDeviceBytes, descPlanLayers, descPlanTPS, descPlanDepth, descPasses, descFailed,
		descStageBytes, descStageBusy, descStageStall, descStageGBps, descOverlap, descComputeUtil, descRoute} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c pipelineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.s.modelNames() {
		lm, err := c.s.lookup(n)
		if err != nil {
			continue
		}
		bi := lm.eng.BackendInfo()
		ch <- prometheus.MustNewConstMetric(descBackend, prometheus.GaugeValue, 1, n, bi.Name, bi.Requested, bi.Device)
		if r := lm.eng.TierCRoute(); r.Name != "" {
			ch <- prometheus.MustNewConstMetric(descRoute, prometheus.GaugeValue, 1, n, r.Name, "")
			for route, why := range r.Refused {
				ch <- prometheus.MustNewConstMetric(descRoute, prometheus.GaugeValue, 0, n, route, why)
			}
		}
		if bi.Name == engine.BackendCUDA {
			for _, u := range []struct {
				use string
				v   int64
			}{{"weights", bi.WeightBytes}, {"kv", bi.KVBytes}, {"streamed_per_pass", bi.StreamedBytes}} {
				ch <- prometheus.MustNewConstMetric(descDeviceBytes, prometheus.GaugeValue, float64(u.v), n, u.use)
			}
		}
		if p := lm.eng.Plan(); p != nil {
			for t, tt := range p.Tiers {
				ch <- prometheus.MustNewConstMetric(descPlanLayers, prometheus.GaugeValue, float64(tt.Layers), n, tier.Tier(t).String())
			}
			ch <- prometheus.MustNewConstMetric(descPlanTPS, prometheus.GaugeValue, p.TokensPerSecond, n)
			ch <- prometheus.MustNewConstMetric(descPlanDepth, prometheus.GaugeValue, float64(p.Depth), n)
		}
		st := lm.eng.PipelineStats()
		if st == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descPasses, prometheus.CounterValue, float64(st.Passes), n)
		ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(st.Failed), n)
		for _, sg := range []struct {
			name string
			s    stream.StageStats
		}{{"read", st.Read}, {"copy", st.Copy}, {"compute", st.Compute}} {
			ch <- prometheus.MustNewConstMetric(descStageBytes, prometheus.CounterValue, float64(sg.s.Bytes), n, sg.name)
			ch <- prometheus.MustNewConstMetric(descStageBusy, prometheus.CounterValue, sg.s.Busy.Seconds(), n, sg.name)
			ch <- prometheus.MustNewConstMetric(descStageStall, prometheus.CounterValue, sg.s.Stall.Seconds(), n, sg.name)
			ch <- prometheus.MustNewConstMetric(descStageGBps, prometheus.GaugeValue, sg.s.GBps, n, sg.name)
		}
		ch <- prometheus.MustNewConstMetric(descOverlap, prometheus.GaugeValue, st.Overlap, n)
		ch <- prometheus.MustNewConstMetric(descComputeUtil, prometheus.GaugeValue, st.ComputeUtil, n)
	}
}
