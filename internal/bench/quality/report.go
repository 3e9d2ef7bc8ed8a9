package quality

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	t := r.Text
	fmt.Fprintf(w, "%s on %d tokens of held-out text: the last %d files matching of %s (%s … %s), %d windows\n",
		r.Model, t.Tokens, t.Files, t.Dir, t.First, t.Last, t.Windows)
	fmt.Fprintf(w, "reference perplexity %.3f; calibration: %s\n", r.Perplexity, t.Calibration)
	if r.TokensPerSecond > 0 {
		fmt.Fprintf(w, "CPU decode with every layer: %.1f tok/s (the base of the layer-skip rows' speed)\n", r.TokensPerSecond)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tKL (nats)\ttop-1 agree\tperplexity\tΔ perplexity\tlayers skipped\tCPU decode\t")
	for _, v := range r.Variants {
		skipped, speed := "-", "-"
		if len(v.Skipped) > 0 {
			skipped = fmt.Sprint(v.Skipped)
		}
		if v.TokensPerSecond > 0 && r.TokensPerSecond > 0 {
			speed = fmt.Sprintf("%.1f tok/s (%+.1f%%)", v.TokensPerSecond, 100*(v.TokensPerSecond/r.TokensPerSecond-1))
		}
		fmt.Fprintf(tw, "%s\t%.5f\t%.4f\t%.3f\t%+.2f%%\t%s\t%s\t\n", v.Name, v.KL, v.Top1, v.Perplexity, 100*(v.Perplexity/r.Perplexity-1), skipped, speed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "drafter\taccepted (greedy)\taccepted (T=1)\tguesses at\ttokens a pass, k=4\t")
	for _, d := range r.Drafters {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.0f%% of positions\t%.2f\t\n", d.Name, d.Greedy, d.Sampled, 100*d.Coverage, d.PerPass)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nlayer cosines (entering vs leaving, calibration text):")
	for l, c := range r.Cosines {
		fmt.Fprintf(w, " %d:%.3f", l, c)
	}
	fmt.Fprintf(w, "\n%.1f s\n", r.Seconds)
	return nil
}
