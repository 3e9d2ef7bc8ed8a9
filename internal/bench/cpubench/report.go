package cpubench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-llm/strata/engine/tier"
)

// Report is a whole `strata bench cpu` run.
type Report struct {
	CPU     CPU       `json:"cpu"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	// Read is the ceiling: the rate the cores read memory at.
	Read Read `json:"read"`
	// GEMV holds one entry per weight type measured, in the order asked.
	GEMV []GEMV `json:"gemv"`
	// Skipped lists the weight types asked for but not measured, and why.
	Skipped []Skipped `json:"skipped,omitempty"`
	// Notes are caveats about the figures (buffers too small to leave the
	// caches, ...).
	Notes []string `json:"notes,omitempty"`
	// Command is the command line that produced the report, when the
	// caller records it.
	Command string `json:"command,omitempty"`
	// Decode is a model's CPU-only decode, when one was asked for.
	Decode *Decode `json:"decode,omitempty"`
}

// CPU describes the compute device.
type CPU struct {
	Model string `json:"model"`
	// CPUs are the logical CPUs the run's threads took, in the order the
	// thread counts take them (one per physical core first); Cores is the
	// physical cores among them.
	CPUs       []int `json:"cpus"`
	Cores      int   `json:"cores"`
	GOMAXPROCS int   `json:"gomaxprocs"`
	// CacheBytes is the total of the distinct last-level caches of CPUs.
	CacheBytes int64 `json:"last_level_cache_bytes"`
	// MemAvailable is /proc/meminfo's at the start of the run.
	MemAvailable int64 `json:"mem_available_bytes"`
	// Impl is the GEMV kernel family measured (gemv.Impl's name).
	Impl string `json:"gemv_impl"`
}

// Point is one measurement at one thread count: best and median of its
// passes, in bytes per second.
type Point struct {
	Threads int     `json:"threads"`
	Best    float64 `json:"best_bytes_per_s"`
	Median  float64 `json:"median_bytes_per_s"`
	Passes  int     `json:"passes"`
	// Ratio is Best ÷ the best memory read rate at the same thread count
	// (GEMV points only).
	Ratio float64 `json:"ratio,omitempty"`
}

// Read is the memory read probe's result.
type Read struct {
	// Bytes is the buffer the threads read, each its own slice.
	Bytes int64 `json:"bytes"`
	// Loop is the read loop's instruction set: avx512, avx2 or go.
	Loop   string  `json:"loop"`
	Points []Point `json:"points"`
	// LoopCache and NaiveCache are one thread's rates reading a buffer
	// that stays in L2 (CacheBufBytes) with the probe's loop and with a
	// plain Go loop: the probe's own speed, far above memory's.
	CacheBufBytes int64   `json:"cache_buffer_bytes"`
	LoopCache     float64 `json:"loop_l2_bytes_per_s"`
	NaiveCache    float64 `json:"naive_l2_bytes_per_s"`
	// Naive is the plain Go loop reading the whole buffer on one thread,
	// next to Points' one-thread figure.
	Naive float64 `json:"naive_bytes_per_s"`
}

// GEMV is one weight type's products.
type GEMV struct {
	Type string `json:"type"`
	Impl string `json:"impl"`
	// Rows × N is every matrix's shape; Matrices of them, WeightBytes in
	// all, are cycled through so none is still cached when it comes round.
	N           int     `json:"n"`
	Rows        int     `json:"rows"`
	Matrices    int     `json:"matrices"`
	WeightBytes int64   `json:"weight_bytes"`
	Points      []Point `json:"points"`
}

// Skipped is a weight type that was not measured.
type Skipped struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// gb is bytes per second in GB/s.
func gb(v float64) string { return fmt.Sprintf("%.1f", v/1e9) }

// WriteText renders the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	c := r.CPU
	fmt.Fprintf(w, "%s: %d CPUs (%d cores), last-level cache %s, GEMV kernels %s\n",
		orUnknown(c.Model), len(c.CPUs), c.Cores, tier.FormatBytes(c.CacheBytes), c.Impl)
	rd := r.Read
	fmt.Fprintf(w, "\nmemory read: %s, each thread its own slice, %s loop (GB/s, best and median of the passes)\n",
		tier.FormatBytes(rd.Bytes), rd.Loop)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "threads\tbest\tmedian\tpasses\t")
	for _, p := range rd.Points {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t\n", p.Threads, gb(p.Best), gb(p.Median), p.Passes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rd.LoopCache > 0 {
		fmt.Fprintf(w, "the loop itself, one thread, %s in L2: %s GB/s (a plain Go loop: %s, %.1f×)",
			tier.FormatBytes(rd.CacheBufBytes), gb(rd.LoopCache), gb(rd.NaiveCache), rd.LoopCache/rd.NaiveCache)
		if rd.Naive > 0 && len(rd.Points) > 0 && rd.Points[0].Threads == 1 {
			fmt.Fprintf(w, "; from memory %s against the plain loop's %s", gb(rd.Points[0].Best), gb(rd.Naive))
		}
		fmt.Fprintln(w)
	}

	if len(r.GEMV) > 0 {
		fmt.Fprintf(w, "\nGEMV: weight GB/s (best of the passes) and its ratio to memory read at the same thread count\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "type\timpl\tmatrices\t")
		for _, p := range r.GEMV[0].Points {
			fmt.Fprintf(tw, "%d thr\t", p.Threads)
		}
		fmt.Fprintln(tw)
		for _, g := range r.GEMV {
			fmt.Fprintf(tw, "%s\t%s\t%d × %d×%d, %s\t", g.Type, g.Impl, g.Matrices, g.Rows, g.N, tier.FormatBytes(g.WeightBytes))
			for _, p := range g.Points {
				fmt.Fprintf(tw, "%s  %.2f\t", gb(p.Best), p.Ratio)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.Decode != nil {
		writeDecode(w, r.Decode)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Type, s.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "%.1f s\n", r.Seconds)
	return nil
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown CPU"
	}
	return s
}
