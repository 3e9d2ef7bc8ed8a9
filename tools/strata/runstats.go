package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// writeRunStats prints, for `strata run --stats`, the tier plan the engine
// ran and, when layers streamed, the pipeline's counters: bytes and
// bandwidth per link, busy and stall time per stage, overlap.
func writeRunStats(w io.Writer, e *engine.Engine) {
	p := e.Plan()
	if p == nil {
		return
	}
	fmt.Fprintf(w, "plan: tier A %d layers (%s), B %d (%s), C %d (%s); ",
		p.Tiers[tier.TierA].Layers, tier.FormatBytes(p.Tiers[tier.TierA].Bytes),
		p.Tiers[tier.TierB].Layers, tier.FormatBytes(p.Tiers[tier.TierB].Bytes),
		p.Tiers[tier.TierC].Layers, tier.FormatBytes(p.Tiers[tier.TierC].Bytes))
	if p.Depth == 0 {
		// Nothing streams: no link bounds the pass, and the planner's
		// figure (from unmeasured defaults) would say nothing real.
		fmt.Fprintln(w, "every layer resident")
	} else {
		fmt.Fprintf(w, "depth %d; expected %v per pass (%.2f tokens/s), bound by %s\n", p.Depth, dur(p.PassTime), p.TokensPerSecond, p.Bound)
	}
	if len(p.Links.Notes) > 0 {
		fmt.Fprintf(w, "links: %s\n", strings.Join(p.Links.Notes, "; "))
	}
	if p.Shared {
		fmt.Fprintf(w, "memory: %s + tier-C staging %s of %s (device memory is host memory)\n",
			tier.FormatBytes(p.Device.Total), tier.FormatBytes(p.Host.Staging), tier.FormatBytes(p.Device.Budget))
	} else {
		fmt.Fprintf(w, "memory: device %s of %s, host %s of %s\n", tier.FormatBytes(p.Device.Total), tier.FormatBytes(p.Device.Budget),
			tier.FormatBytes(p.Host.Total), tier.FormatBytes(p.Host.Budget))
	}
	if x, ok := e.Experts(); ok {
		writeExperts(w, x)
	}
	st := e.PipelineStats()
	if bi := e.BackendInfo(); st == nil && bi.StreamedBytes > 0 {
		fmt.Fprintf(w, "streaming: %s per pass from pinned host memory over PCIe into %d device slots (GPU tier B)\n",
			tier.FormatBytes(bi.StreamedBytes), p.Depth)
		return
	}
	if st == nil {
		fmt.Fprintln(w, "pipeline: none (every layer resident)")
		return
	}
	writePipelineStats(w, st)
	if h, ok := e.Hybrid(); ok {
		writeHybrid(w, h)
	}
}

// writeExperts prints a mixture-of-experts model's expert residency and
// how its expert uses were served.
func writeExperts(w io.Writer, x engine.ExpertInfo) {
	fmt.Fprintf(w, "experts: %d of %d resident (%s), %s on storage", x.Resident, x.Experts,
		tier.FormatBytes(x.ResidentBytes), tier.FormatBytes(x.StorageBytes))
	if x.Buffers > 0 {
		fmt.Fprintf(w, ", %d read buffers of %s", x.Buffers, tier.FormatBytes(x.BufferBytes))
	}
	fmt.Fprintln(w)
	if x.OnDevice > 0 || x.DeviceUses > 0 {
		// CPUUses counts every pick of an expert off the device: those the
		// CPU computed and those sent over PCIe for the GPU to compute.
		fmt.Fprintf(w, "experts in device memory: %d (%s); picks of them %d, of the others %d, device hit rate %.2f",
			x.OnDevice, tier.FormatBytes(x.DeviceBytes), x.DeviceUses, x.CPUUses, x.DeviceHit())
		if x.StreamedPicks > 0 {
			fmt.Fprintf(w, "; %d of the others sent over PCIe and computed on the GPU beside the CPU", x.StreamedPicks)
		}
		if x.MappedPicks > 0 {
			fmt.Fprintf(w, "; %d of the others pulled over PCIe by the GPU alone", x.MappedPicks)
		}
		if x.MappedWay != "" {
			fmt.Fprintf(w, "; at one token the others go %s", x.MappedWay)
		}
		fmt.Fprintln(w)
	}
	if s := x.Stats; s.Uses() > 0 {
		fmt.Fprintf(w, "expert uses: %d resident, %d still in a read buffer, %d read ahead (of %d reads ahead, waited %v), %d read when asked (%v); %s read in all; hit rate %.2f; %d promoted (of %d reads to promote), %d demoted",
			s.Resident, s.Buffered, s.Prefetched, s.PrefetchReads, dur(s.PrefetchWait), s.Read, dur(s.ReadTime), tier.FormatBytes(s.ReadBytes), s.Hit(), s.Promoted, s.PromoteReads, s.Demoted)
		if s.Failed > 0 {
			fmt.Fprintf(w, "; %d reads failed", s.Failed)
		}
		fmt.Fprintln(w)
	}
	for _, c := range x.Stats.AheadChoices {
		way := "without"
		if c.On {
			way = "with"
		}
		fmt.Fprintf(w, "batch %d: kept reading %s reads ahead (storage wait per pass %v with, %v without)\n", c.Batch, way, dur(c.With), dur(c.Without))
	}
}

// writeHybrid prints the CPU's share of a GPU's passes: its plan for one
// token and what it computed (busy, and the hops of the hidden state).
func writeHybrid(w io.Writer, h engine.HybridInfo) {
	if len(h.Plans) > 0 {
		p := h.Plans[0]
		rate := ""
		if len(h.Rates) > 0 {
			rate = fmt.Sprintf(", CPU FFN %.1f GB/s measured", h.Rates[0]/1e9)
		}
		fmt.Fprintf(w, "hybrid (1 token): the CPU computes the FFN of %d layers %v from pinned memory; %s over PCIe and %s on the CPU a pass, expected %v (streaming alone %v)%s\n",
			len(p.CPU), p.CPU, tier.FormatBytes(p.Moved), tier.FormatBytes(p.CPUBytes), dur(p.Pass), dur(p.Streamed), rate)
	}
	st := h.Stats
	if st.Layers == 0 {
		fmt.Fprintln(w, "cpu: no FFN computed (no pass small enough for the hybrid plans)")
		return
	}
	gbps := 0.0
	if st.Busy > 0 {
		gbps = float64(st.Bytes) / st.Busy.Seconds() / 1e9
	}
	fmt.Fprintf(w, "cpu: %d FFNs in %d passes, %s read at %.2f GB/s; busy %v, hops %v (%v a layer)\n",
		st.Layers, st.Passes, tier.FormatBytes(st.Bytes), gbps, st.Busy.Round(time.Microsecond), st.Hop.Round(time.Microsecond),
		(st.Hop / time.Duration(st.Layers)).Round(time.Microsecond))
}

// writePipelineStats prints a pipeline's cumulative counters as a table.
func writePipelineStats(w io.Writer, st *stream.Stats) {
	fmt.Fprintf(w, "pipeline: %d passes (%d failed) in %v; overlap %.2f, compute fed %.0f%% of the time; %s resident, %s streamed\n",
		st.Passes, st.Failed, st.Wall.Round(time.Millisecond), st.Overlap, 100*st.ComputeUtil,
		tier.FormatBytes(st.ResidentBytes), tier.FormatBytes(st.StreamedBytes))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tlink\tlayers\tbytes\tbytes/pass\tGB/s\tbusy\tstall\t")
	for _, s := range []struct {
		name, link string
		s          stream.StageStats
	}{
		{"read", "storage→staging", st.Read},
		{"copy", "host→device slot", st.Copy},
		{"compute", "device", st.Compute},
	} {
		per := int64(0)
		if st.Passes > 0 {
			per = s.s.Bytes / st.Passes
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.2f\t%v\t%v\t\n", s.name, s.link, s.s.Layers, tier.FormatBytes(s.s.Bytes),
			tier.FormatBytes(per), s.s.GBps, s.s.Busy.Round(time.Microsecond), s.s.Stall.Round(time.Microsecond))
	}
	tw.Flush()
	if st.Passes > 0 && (st.Lead > 0 || st.Tail > 0) {
		fmt.Fprintf(w, "compute outside the streamed layers: %v before them, %v after, a pass; %d copies carried over from the pass before\n",
			(st.Lead / time.Duration(st.Passes)).Round(time.Microsecond), (st.Tail / time.Duration(st.Passes)).Round(time.Microsecond), st.Carried)
	}
	if st.Verify > 0 {
		fmt.Fprintf(w, "checksums: %v of the read stage\n", st.Verify.Round(time.Microsecond))
	}
}

// windowStats prints, for `strata run --stats-every N`, a line per N
// completion tokens: the window's time per token and, where the engine
// counts them, what its passes did (expert picks by where they were
// served, the CPU's FFNs) — to see whether a decode grows dearer as its
// context grows, and which share does.
type windowStats struct {
	every int
	n     int // completion tokens seen
	at    windowSnap
}

// windowSnap is the counters at a window's start.
type windowSnap struct {
	t       time.Time
	experts engine.ExpertInfo
	xok     bool
	hybrid  engine.HybridInfo
	hok     bool
}

func snapWindow(e *engine.Engine, now time.Time) windowSnap {
	s := windowSnap{t: now}
	s.experts, s.xok = e.Experts()
	s.hybrid, s.hok = e.Hybrid()
	return s
}

// token counts one completion token; the first starts the first window
// (the prompt's pass is not in any).
func (w *windowStats) token(out io.Writer, e *engine.Engine) {
	w.n++
	if w.n == 1 {
		w.at = snapWindow(e, time.Now())
		return
	}
	if (w.n-1)%w.every != 0 {
		return
	}
	now := snapWindow(e, time.Now())
	writeWindow(out, w.n-w.every+1, w.n, w.at, now)
	w.at = now
}

// writeWindow prints the window of tokens first..last (after the first
// token) from the counters at its start (a) and end (b).
func writeWindow(w io.Writer, first, last int, a, b windowSnap) {
	n := last - first + 1
	per := b.t.Sub(a.t) / time.Duration(n)
	fmt.Fprintf(w, "tokens %d-%d: %v a token (%.2f tok/s)", first, last, per.Round(time.Microsecond), rate(n, b.t.Sub(a.t).Seconds()))
	if a.xok && b.xok {
		x := b.experts.Since(a.experts) // the window's counts
		if x.DeviceUses+x.CPUUses > 0 {
			fmt.Fprintf(w, "; expert picks on the device %d, off it %d (hit %.2f), sent over PCIe %d, pulled by the GPU %d, moved to the device %d",
				x.DeviceUses, x.CPUUses, x.DeviceHit(), x.StreamedPicks, x.MappedPicks, x.DeviceMoves)
		}
		if st := x.Stats; st.Uses() > 0 {
			// The host's store: uses that read nothing, reads, promotions.
			fmt.Fprintf(w, "; expert uses %d, hit %.2f, %s read, %d promoted",
				st.Uses(), st.Hit(), tier.FormatBytes(st.ReadBytes), st.Promoted)
		}
	}
	if a.hok && b.hok {
		sa, sb := a.hybrid.Stats, b.hybrid.Stats
		if l := sb.Layers - sa.Layers; l > 0 {
			fmt.Fprintf(w, "; cpu %d FFNs, busy %v a token, hops %v a token", l,
				((sb.Busy - sa.Busy) / time.Duration(n)).Round(time.Microsecond), ((sb.Hop - sa.Hop) / time.Duration(n)).Round(time.Microsecond))
		}
	}
	fmt.Fprintln(w)
}
