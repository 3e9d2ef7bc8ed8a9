package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records latencies in log-linear buckets: exact below 128 ns,
// then 64 buckets per power of two, so every recorded value is known to
// within 1/64 (1.6 %) whatever its size, in a fixed 30 KiB, however many
// I/Os a sweep point issues. Exact minimum, maximum and mean are kept on
// the side. The zero value is ready to use; a Histogram is not safe for
// concurrent use (each sweep worker keeps its own and they are merged).
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64 // nanoseconds
	min    uint64
	max    uint64
}

const (
	histLinear  = 128                         // values below are their own bucket
	histSub     = 64                          // buckets per power of two above
	histBuckets = histLinear + (64-7)*histSub // exponents 1…57
)

// bucketOf maps a value in nanoseconds to its bucket.
func bucketOf(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	e := bits.Len64(v) - 7 // ≥ 1; v>>e is in [64, 128)
	return histLinear + (e-1)*histSub + int(v>>e) - histSub
}

// bucketRange is the smallest and largest value of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < histLinear {
		return uint64(i), uint64(i)
	}
	i -= histLinear
	e := i/histSub + 1
	m := uint64(i%histSub + histSub)
	return m << e, (m+1)<<e - 1
}

// Record adds one latency. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds o's records to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded latencies.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the latency below or at which a fraction q (0…1) of
// the records lie: the midpoint of the bucket holding the record of rank
// ⌈q·n⌉, clamped to the exact minimum and maximum. Quantiles are therefore
// non-decreasing in q. It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			v := lo + (hi-lo)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// Latency summarises a histogram in microseconds (the unit storage
// latencies are read in), for tables and JSON.
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Summary returns the histogram's percentiles in microseconds.
func (h *Histogram) Summary() Latency {
	if h.n == 0 {
		return Latency{}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return Latency{
		Min: float64(h.min) / 1e3, Mean: h.sum / float64(h.n) / 1e3, Max: float64(h.max) / 1e3,
		P50: us(h.Quantile(0.50)), P90: us(h.Quantile(0.90)), P99: us(h.Quantile(0.99)), P999: us(h.Quantile(0.999)),
	}
}
