package enginebench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goal is a target a ratio must meet: Ratio Op Target, Op ">=" or "<=".
type Goal struct {
	Op     string  `json:"op"`
	Target float64 `json:"target"`
	// Met reports whether the measured ratio meets it.
	Met bool `json:"met"`
}

// Metric is one measured figure, with the ratio that judges it where
// there is one.
type Metric struct {
	// Key names the metric for scripts ("decode_tps_graph").
	Key   string  `json:"key"`
	Label string  `json:"label"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Ratio is Value ÷ Basis (or, for a time against its limit, time ÷
	// limit); nil when the figure stands alone.
	Ratio *Ratio `json:"ratio,omitempty"`
	// Goal is the target Ratio is judged by, where there is one (a goal
	// against a peer's figure only when the run was given peers).
	Goal *Goal `json:"goal,omitempty"`
}

// Ratio relates a metric to its basis: a ceiling or another figure
// measured in the same run, or a peer's reference figure.
type Ratio struct {
	Value float64 `json:"value"`
	// Basis describes the denominator ("pinned H2D peak 55.4 GB/s").
	Basis      string  `json:"basis"`
	BasisValue float64 `json:"basis_value"`
	// Peer is set when the basis is a peer's reference figure (from the
	// peers file) rather than a measurement of this run.
	Peer *Peer `json:"peer,omitempty"`
}

// Placement says where a scenario's layers lived.
type Placement struct {
	Layers   int `json:"layers"`
	Resident int `json:"resident_layers"`
	Streamed int `json:"streamed_layers"`
	// Slots is the pipeline depth k (device slots streamed layers rotate
	// through); 0 when every layer is resident.
	Slots         int   `json:"slots,omitempty"`
	WeightBytes   int64 `json:"resident_weight_bytes"`
	StreamedBytes int64 `json:"streamed_bytes_per_pass"`
	// Budget is the device memory budget the placement was planned for (0:
	// none, or a fixed layer split); DeviceBytes the device memory the
	// loaded model took, measured (free memory before loading minus after
	// its passes).
	Budget      int64 `json:"budget_bytes,omitempty"`
	DeviceBytes int64 `json:"device_bytes"`
	// How says how the placement was chosen.
	How string `json:"how"`
}

// ScenarioResult is one scenario's measurements.
type ScenarioResult struct {
	Scenario Scenario `json:"scenario"`
	// Variant tells apart two runs of one scenario (the bf16 scenario's
	// INT8-row variant); empty for the main run.
	Variant   string     `json:"variant,omitempty"`
	Title     string     `json:"title"`
	Model     string     `json:"model"`
	Placement *Placement `json:"placement,omitempty"`
	Metrics   []Metric   `json:"metrics"`
	Notes     []string   `json:"notes,omitempty"`
	// Error is why the scenario did not finish (its metrics are then
	// those measured before the failure).
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Ceilings are the link speeds every ratio of a run divides by, measured
// at its start.
type Ceilings struct {
	// D2D is device-to-device copy bandwidth, bytes read + written per
	// second (D2DBytes per copy).
	D2D      float64 `json:"d2d_bytes_per_s"`
	D2DBytes int64   `json:"d2d_copy_bytes"`
	// H2D is pinned host-to-device copy bandwidth (H2DBytes per copy).
	H2D      float64 `json:"h2d_pinned_bytes_per_s"`
	H2DBytes int64   `json:"h2d_copy_bytes"`
}

// Report is a whole `strata bench engine` run.
type Report struct {
	Device            string           `json:"device"`
	Ordinal           int              `json:"gpu"`
	ComputeCapability string           `json:"compute_capability"`
	DeviceMemory      int64            `json:"device_memory_bytes"`
	Started           time.Time        `json:"started"`
	Seconds           float64          `json:"seconds"`
	Ceilings          Ceilings         `json:"ceilings"`
	Scenarios         []ScenarioResult `json:"scenarios"`
	// PeerSource says where the peer figures came from (Peers.Source);
	// empty when the run was given none.
	PeerSource string `json:"peer_source,omitempty"`
	// Command is the command line that produced the report, when the
	// caller records it.
	Command string `json:"command,omitempty"`
	// FloatGEMV says the run used kernels' float decode GEMVs
	// (Options.FloatGEMV) instead of the default integer ones.
	FloatGEMV bool `json:"float_gemv"`
	// Kernels is the kernel image the run loaded (kernels.Kernels.Image:
	// the sm_90 cubin or the PTX the driver JIT-compiles).
	Kernels string `json:"kernels,omitempty"`
	// RelayQ6K says resident Q6_K matrices ran re-laid (always, since
	// the re-lay won its comparison; false only in older reports).
	RelayQ6K bool `json:"q6ka,omitempty"`
	// Variants are the kernel tuning variants of the run
	// (Options.Variants).
	Variants []string `json:"variants,omitempty"`
}

// Failed reports whether any scenario stopped with an error.
func (r *Report) Failed() bool {
	for _, s := range r.Scenarios {
		if s.Error != "" {
			return true
		}
	}
	return false
}

// Goals counts the goals the run judged and those it met.
func (r *Report) Goals() (met, total int) {
	for _, s := range r.Scenarios {
		for _, m := range s.Metrics {
			if m.Goal != nil {
				total++
				if m.Goal.Met {
					met++
				}
			}
		}
	}
	return met, total
}

// ratioTo relates value to a basis measured in this run.
func ratioTo(value, basis float64, desc string) *Ratio {
	return &Ratio{Value: value / basis, Basis: desc, BasisValue: basis}
}

// ratioToPeer relates value to the named figure of peers, or returns nil
// where there is none (no peers given, or the file leaves it out).
func ratioToPeer(value float64, peers *Peers, name string) *Ratio {
	p, ok := peers.Figure(name)
	if !ok {
		return nil
	}
	return &Ratio{Value: value / p.Value, Basis: fmt.Sprintf("%s %s %s", p.System, formatValue(p.Value), p.Unit), BasisValue: p.Value, Peer: &p}
}

// atLeast and atMost build a goal judged on ratio r; without a ratio (a
// peer's figure not given) there is nothing to judge, and no goal.
func atLeast(r *Ratio, target float64) *Goal {
	if r == nil {
		return nil
	}
	return &Goal{Op: ">=", Target: target, Met: r.Value >= target && !math.IsNaN(r.Value)}
}

func atMost(r *Ratio, target float64) *Goal {
	if r == nil {
		return nil
	}
	return &Goal{Op: "<=", Target: target, Met: r.Value <= target && !math.IsNaN(r.Value)}
}

// formatValue prints a figure with about four significant digits.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// formatRatio prints a ratio with three decimals below 10.
func formatRatio(r float64) string {
	if math.Abs(r) >= 10 {
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.3f", r)
}

func gib(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }

// WriteText renders the report as the tables `strata bench engine` prints:
// the ceilings, then per scenario its placement and one row per metric
// with its ratio, goal and verdict.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "strata bench engine on %s (GPU %d, sm %s, %s), started %s, took %s\n",
		r.Device, r.Ordinal, r.ComputeCapability, gib(r.DeviceMemory), r.Started.UTC().Format(time.RFC3339),
		(time.Duration(r.Seconds * 1e9)).Round(time.Second))
	if r.Command != "" {
		fmt.Fprintf(&b, "command: %s\n", r.Command)
	}
	if r.FloatGEMV {
		fmt.Fprintf(&b, "decode GEMVs: float (dequantize and FMA, --float-gemv), Q4_K and Q6_K\n")
	} else {
		fmt.Fprintf(&b, "decode GEMVs: integer (x in 16 bits, dp4a; the default), Q4_K and Q6_K\n")
	}
	if r.RelayQ6K {
		fmt.Fprintf(&b, "resident Q6_K matrices re-laid for aligned loads (Q6KA; the default)\n")
	} else {
		fmt.Fprintf(&b, "resident Q6_K matrices as in the file (plain Q6_K)\n")
	}
	if len(r.Variants) > 0 {
		fmt.Fprintf(&b, "kernel tuning variants: %s\n", strings.Join(r.Variants, ", "))
	}
	if r.Kernels != "" {
		fmt.Fprintf(&b, "kernels: %s\n", r.Kernels)
	}
	if r.PeerSource != "" {
		fmt.Fprintf(&b, "peer figures (marked *) are references read from a file, not measured by this run: %s\n", r.PeerSource)
	} else {
		fmt.Fprintf(&b, "no peer figures given (--peers FILE): no peer ratios, no goals against peers\n")
	}
	b.WriteString("\n")
	c := r.Ceilings
	fmt.Fprintf(&b, "ceilings, measured in this run:\n")
	fmt.Fprintf(&b, "  device-to-device copy   %8.1f GB/s (read + write, %s copies)\n", c.D2D/1e9, sizeName(c.D2DBytes))
	fmt.Fprintf(&b, "  pinned host-to-device   %8.1f GB/s (%s copies)\n", c.H2D/1e9, sizeName(c.H2DBytes))
	for _, s := range r.Scenarios {
		name := string(s.Scenario)
		if s.Variant != "" {
			name += "/" + s.Variant
		}
		fmt.Fprintf(&b, "\n[%s] %s (%.0f s)\n", name, s.Title, s.Seconds)
		fmt.Fprintf(&b, "  model: %s\n", s.Model)
		if p := s.Placement; p != nil {
			fmt.Fprintf(&b, "  placement: %d of %d layers resident (%s of weights)", p.Resident, p.Layers, gib(p.WeightBytes))
			if p.Streamed > 0 {
				fmt.Fprintf(&b, ", %d streamed from pinned host memory (%s per pass) through %d device slots",
					p.Streamed, gib(p.StreamedBytes), p.Slots)
			}
			fmt.Fprintf(&b, "; %s\n", p.How)
			if p.DeviceBytes > 0 {
				fmt.Fprintf(&b, "  device memory taken: %s", gib(p.DeviceBytes))
				if p.Budget > 0 {
					fmt.Fprintf(&b, " of the %s budget", gib(p.Budget))
				}
				b.WriteString("\n")
			}
		}
		if len(s.Metrics) > 0 {
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  metric\tvalue\tratio\tgoal")
			for _, m := range s.Metrics {
				ratio, goal := "", ""
				if m.Ratio != nil {
					mark := ""
					if m.Ratio.Peer != nil {
						mark = "*"
					}
					ratio = fmt.Sprintf("%sx %s%s", formatRatio(m.Ratio.Value), m.Ratio.Basis, mark)
				}
				if g := m.Goal; g != nil {
					verdict := "MISS"
					if g.Met {
						verdict = "met"
					}
					goal = fmt.Sprintf("%s %g: %s", g.Op, g.Target, verdict)
				}
				fmt.Fprintf(tw, "  %s\t%s %s\t%s\t%s\n", m.Label, formatValue(m.Value), m.Unit, ratio, goal)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		var peers []string
		for _, m := range s.Metrics {
			if m.Ratio != nil && m.Ratio.Peer != nil {
				p := fmt.Sprintf("  * %s: %s", m.Ratio.Basis, m.Ratio.Peer.Setup)
				if !slices.Contains(peers, p) {
					peers = append(peers, p)
				}
			}
		}
		for _, p := range peers {
			fmt.Fprintln(&b, p)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		if s.Error != "" {
			fmt.Fprintf(&b, "  FAILED: %s\n", s.Error)
		}
	}
	met, total := r.Goals()
	fmt.Fprintf(&b, "\ngoals met: %d of %d\n", met, total)
	_, err := io.WriteString(w, b.String())
	return err
}

// sizeName prints a power-of-two byte count compactly (1 GiB, 256 MiB).
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}
