package stream

import (
	"time"
)

// StageStats describes one pipeline stage over one or more passes.
type StageStats struct {
	// Layers is the number of layers the stage handled.
	Layers int64 `json:"layers"`
	// Bytes is the number of bytes it moved (or, for compute, consumed).
	Bytes int64 `json:"bytes"`
	// Busy is the time it spent working: reading and verifying (stage 1),
	// copying (stage 2), computing (stage 3).
	Busy time.Duration `json:"busy_ns"`
	// Stall is the time it spent waiting on another stage: for its input
	// (a layer to copy, a layer to compute) or for a free buffer or slot.
	Stall time.Duration `json:"stall_ns"`
	// GBps is Bytes / Busy in 10^9 bytes per second: the bandwidth the
	// stage's link achieved while it was moving data.
	GBps float64 `json:"gbps"`
}

// Stats is the pipeline's instrumentation, per pass (Pipeline.LastPass) or
// cumulative (Pipeline.Stats). It is what the daemon reports and what
// `strata bench stream` prints.
type Stats struct {
	// Passes is the number of passes counted (failed ones included).
	Passes int64 `json:"passes"`
	// Failed is the number of passes that ended in an error or
	// cancellation.
	Failed int64 `json:"failed"`
	// Wall is the time from the start of each pass to its end, summed.
	Wall time.Duration `json:"wall_ns"`
	// Read is stage 1: storage → staging (tier C), checksum included.
	Read StageStats `json:"read"`
	// Verify is the part of Read.Busy spent on checksums.
	Verify time.Duration `json:"verify_ns"`
	// Copy is stage 2: staging or host memory → device slot (tiers B, C).
	Copy StageStats `json:"copy"`
	// Compute is stage 3: the forward pass. Busy is Wall minus the time
	// compute waited for a layer (Stall), so it includes work outside the
	// layers (embedding, output head).
	Compute StageStats `json:"compute"`
	// Carried is the copies a pass found issued by the pass before it
	// (Device: copies carried over), counted in Copy.
	Carried int64 `json:"carried"`
	// Lead is compute's time before its first streamed layer (the
	// resident layers ahead of it); Tail its time after releasing the last
	// one (the layers after it, the output head, draining). Copies carried
	// over from one pass into the next run in them; the hybrid planner
	// (engine/tier's PlanHybrid) charges them to every pass.
	Lead time.Duration `json:"lead_ns"`
	Tail time.Duration `json:"tail_ns"`
	// ResidentBytes is the size of the tier-A layers (held, not moved).
	ResidentBytes int64 `json:"resident_bytes"`
	// StreamedBytes is the bytes moved into device slots (tiers B and C)
	// per pass, summed over passes.
	StreamedBytes int64 `json:"streamed_bytes"`
	// Overlap is how much the stages ran at the same time:
	// (ΣBusy − Wall) / (ΣBusy − max Busy), clamped to [0, 1], where the
	// sums run over the three stages. 1 means the pass took only as long
	// as its slowest stage (perfect overlap); 0 means the stages ran one
	// after another. It is 0 when fewer than two stages did work.
	Overlap float64 `json:"overlap"`
	// ComputeUtil is Compute.Busy / Wall: the share of the pass the
	// compute stage was fed. 1 means streaming never held compute up.
	ComputeUtil float64 `json:"compute_util"`
}

// Add accumulates o's counted fields into s and recomputes the derived
// ones (GBps, Overlap, ComputeUtil), as the pipeline does after each pass,
// so a caller summing the Stats of several passes or pipelines gets the
// derived figures of the sum.
func (s *Stats) Add(o Stats) { s.add(o) }

// add accumulates o into s (derived fields are recomputed by finish).
func (s *Stats) add(o Stats) {
	s.Passes += o.Passes
	s.Failed += o.Failed
	s.Wall += o.Wall
	s.Verify += o.Verify
	s.Carried += o.Carried
	s.Lead += o.Lead
	s.Tail += o.Tail
	s.ResidentBytes = o.ResidentBytes
	s.StreamedBytes += o.StreamedBytes
	for _, p := range []struct{ d, o *StageStats }{{&s.Read, &o.Read}, {&s.Copy, &o.Copy}, {&s.Compute, &o.Compute}} {
		p.d.Layers += p.o.Layers
		p.d.Bytes += p.o.Bytes
		p.d.Busy += p.o.Busy
		p.d.Stall += p.o.Stall
	}
	s.finish()
}

// finish computes the derived fields from the counted ones.
func (s *Stats) finish() {
	busy := []time.Duration{s.Read.Busy, s.Copy.Busy, s.Compute.Busy}
	var sum, mx time.Duration
	working := 0
	for _, b := range busy {
		sum += b
		mx = max(mx, b)
		if b > 0 {
			working++
		}
	}
	s.Overlap = 0
	if working >= 2 && sum > mx {
		s.Overlap = min(1, max(0, float64(sum-s.Wall)/float64(sum-mx)))
	}
	s.ComputeUtil = 0
	if s.Wall > 0 {
		s.ComputeUtil = float64(s.Compute.Busy) / float64(s.Wall)
	}
	for _, st := range []*StageStats{&s.Read, &s.Copy, &s.Compute} {
		st.GBps = 0
		if st.Busy > 0 {
			st.GBps = float64(st.Bytes) / st.Busy.Seconds() / 1e9
		}
	}
}
