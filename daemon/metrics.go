package daemon

import (
	"math"
	"sync"
	"time"

	"github.com/strata-llm/strata/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics holds stratad's Prometheus collectors in a registry of its own
// (never the global one), exposed on GET /metrics in the text format.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec   // endpoint, code
	promptToks   *prometheus.CounterVec   // model
	complToks    *prometheus.CounterVec   // model
	finished     *prometheus.CounterVec   // model, reason
	passes       *prometheus.CounterVec   // model
	tokPerSec    *prometheus.GaugeVec     // model
	ttft         *prometheus.HistogramVec // model
	cancelLag    prometheus.Histogram
	tierBytes    *prometheus.CounterVec // tier
	queueDepth   *prometheus.GaugeVec   // model
	activeSeqs   *prometheus.GaugeVec   // model
	drafted      *prometheus.GaugeVec   // model
	accepted     *prometheus.GaugeVec   // model
	modelsLoaded prometheus.Gauge
	duration     *prometheus.HistogramVec // endpoint
	interToken   *prometheus.HistogramVec // model
	complHist    *prometheus.HistogramVec // model
	kvBytes      *prometheus.GaugeVec     // model
	// Mixture-of-experts models: experts held in memory, and expert uses
	// by how they were served.
	expertsResident *prometheus.GaugeVec // model
	expertUses      *prometheus.GaugeVec // model, served
	// On a GPU: experts held in device memory, and the (token, expert)
	// picks computed on each side.
	expertsOnDevice *prometheus.GaugeVec // model
	expertPicks     *prometheus.GaugeVec // model, on
	expertsMoved    *prometheus.GaugeVec // model
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_requests_total", Help: "HTTP requests served, by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		promptToks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_prompt_tokens_total", Help: "Prompt tokens fed through forward passes.",
		}, []string{"model"}),
		complToks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_completion_tokens_total", Help: "Completion tokens generated.",
		}, []string{"model"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_sequences_finished_total", Help: "Sequences that left the batch, by reason (stop, length, cancelled, error).",
		}, []string{"model", "reason"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_forward_passes_total", Help: "Batched forward passes run.",
		}, []string{"model"}),
		tokPerSec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_tokens_per_second", Help: "Decode throughput of recent forward passes (tokens generated per second of pass time, smoothed).",
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_time_to_first_token_seconds", Help: "Time from a request entering the queue to its first generated token.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"model"}),
		cancelLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_cancel_lag_tokens", Help: "Tokens a cancelled sequence produced after its client went away (the contract is at most 1).",
			Buckets: []float64{0, 1, 2, 4, 8},
		}),
		tierBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_tier_bytes_moved_total",
			Help: "Bytes the streaming pipeline moved per tier, over every model: B is host memory copied into device slots, C is storage read (and then copied). A is resident and moves nothing, so it stays 0.",
		}, []string{"tier"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_queue_depth", Help: "Requests waiting for a batch slot.",
		}, []string{"model"}),
		activeSeqs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_active_sequences", Help: "Sequences in the running batch.",
		}, []string{"model"}),
		drafted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_speculative_drafted_tokens", Help: "Tokens the drafter guessed since the model loaded (speculative decoding).",
		}, []string{"model"}),
		accepted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_speculative_accepted_tokens", Help: "Guessed tokens the model accepted since it loaded; over drafted, the acceptance rate.",
		}, []string{"model"}),
		modelsLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_models_loaded", Help: "Models loaded.",
		}),
	}
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "strata_request_duration_seconds", Help: "HTTP request duration, by endpoint (a stream's until its last event).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 3, 14),
	}, []string{"endpoint"})
	m.interToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "strata_inter_token_seconds", Help: "Time between a decoding sequence's tokens: each decode pass's duration.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"model"})
	m.complHist = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "strata_completion_tokens", Help: "Completion tokens per finished request.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{"model"})
	m.kvBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_kv_cache_bytes", Help: "KV-cache bytes the running sequences hold (their positions times a position's keys and values over every layer).",
	}, []string{"model"})
	m.expertsResident = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_experts_resident", Help: "Experts of a mixture-of-experts model held in memory now (the others are read from storage when routed to).",
	}, []string{"model"})
	m.expertUses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_expert_uses", Help: "Expert uses since the model loaded, by how they were served: resident, buffered (a read buffer still held it), prefetched (read ahead of the layer on a right prediction) or read (from storage when the layer asked).",
	}, []string{"model", "served"})
	m.expertsOnDevice = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_experts_on_device", Help: "Experts of a mixture-of-experts model held in GPU memory and computed there.",
	}, []string{"model"})
	m.expertPicks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_expert_picks", Help: "A mixture-of-experts model's (token, expert) picks on a GPU since it loaded, by where the expert was computed: gpu (held in device memory), cpu, pcie (sent from host memory to the GPU for the pick, beside the CPU), or mapped (read in place from host memory by the GPU alone).",
	}, []string{"model", "on"})
	m.expertsMoved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_experts_moved_to_device", Help: "Experts a GPU moved into device memory since the model loaded, following the routing served.",
	}, []string{"model"})
	m.reg.MustRegister(m.duration, m.interToken, m.complHist, m.kvBytes, m.expertsResident, m.expertUses, m.expertsOnDevice, m.expertPicks, m.expertsMoved,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "strata_build_info", Help: "The running stratad's build: always 1, its labels say which.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "go_version": b.GoVersion},
	})
	build.Set(1)
	m.reg.MustRegister(build)
	m.reg.MustRegister(m.requests, m.promptToks, m.complToks, m.finished, m.passes, m.tokPerSec, m.ttft,
		m.cancelLag, m.tierBytes, m.queueDepth, m.activeSeqs, m.drafted, m.accepted, m.modelsLoaded)
	for _, t := range []string{"A", "B", "C"} {
		m.tierBytes.WithLabelValues(t)
	}
	return m
}

// forget drops an unloaded model's per-model series.
func (m *metrics) forget(model string) {
	l := prometheus.Labels{"model": model}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.promptToks, m.complToks, m.finished, m.passes, m.tokPerSec, m.ttft, m.queueDepth, m.activeSeqs, m.drafted, m.accepted,
		m.interToken, m.complHist, m.kvBytes, m.expertsResident, m.expertUses, m.expertsOnDevice, m.expertPicks, m.expertsMoved,
	} {
		v.DeletePartialMatch(l)
	}
}

// observer feeds one model's scheduler events into the metrics.
type observer struct {
	m     *metrics
	model string
	feed  *tierFeed

	mu  sync.Mutex
	tps float64 // smoothed tokens per second
}

func (o *observer) Pass(seqs, promptTokens, decodeTokens int, d time.Duration) {
	o.feed.flush()
	o.feed.passed()
	o.m.passes.WithLabelValues(o.model).Inc()
	o.m.promptToks.WithLabelValues(o.model).Add(float64(promptTokens))
	if decodeTokens == 0 || d <= 0 {
		return
	}
	o.m.interToken.WithLabelValues(o.model).Observe(d.Seconds())
	rate := float64(decodeTokens) / d.Seconds()
	o.mu.Lock()
	if o.tps == 0 || math.IsNaN(o.tps) {
		o.tps = rate
	} else {
		o.tps = 0.8*o.tps + 0.2*rate
	}
	v := o.tps
	o.mu.Unlock()
	o.m.tokPerSec.WithLabelValues(o.model).Set(v)
}

func (o *observer) FirstToken(d time.Duration) {
	o.m.ttft.WithLabelValues(o.model).Observe(d.Seconds())
}

func (o *observer) Finished(reason string, promptTokens, completionTokens int) {
	o.m.finished.WithLabelValues(o.model, reason).Inc()
	o.m.complToks.WithLabelValues(o.model).Add(float64(completionTokens))
	o.m.complHist.WithLabelValues(o.model).Observe(float64(completionTokens))
}

func (o *observer) CancelLag(tokens int) { o.m.cancelLag.Observe(float64(tokens)) }
