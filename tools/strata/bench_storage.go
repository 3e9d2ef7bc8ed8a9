package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/bench/hw"
	"github.com/strata-llm/strata/internal/bench/plot"
	"github.com/strata-llm/strata/internal/safefs"
)

func init() { registerBenchCommand(benchStorageCommand) }

// benchOutputFlags are the flags every bench command shares: output,
// progress, and where it runs (here or in stratad).
func benchOutputFlags(extra ...cli.Flag) []cli.Flag {
	return daemonFlags(append([]cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		&cli.BoolFlag{Name: "daemon", Usage: "run the bench in stratad (implied by an nvme:BDF/NSID target)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress bar"},
	}, extra...)...)
}

func benchStorageCommand() *cli.Command {
	return &cli.Command{
		Name:  "storage",
		Usage: "sweep block size × queue depth reads of a file (O_DIRECT) or an NVMe namespace held by stratad: GB/s, IOPS, latency percentiles",
		ArgsUsage: "FILE | nvme:BDF/NSID\n\n" +
			"A FILE is read here, with O_DIRECT, and needs no privileges; with --daemon stratad reads it (it must lie in\n" +
			"its model directories). nvme:BDF/NSID (e.g. nvme:0000:01:00.0/1) asks stratad to read a namespace of a\n" +
			"controller it holds through its userspace driver.",
		Flags: benchOutputFlags(
			&cli.StringFlag{Name: "bs", Value: "4k..4m", Usage: "block sizes: a list (4k,64k,1m) or a range of powers of two (4k..4m)"},
			&cli.StringFlag{Name: "qd", Value: "1..32", Usage: "queue depths: a list (1,8) or a range of powers of two (1..32)"},
			&cli.StringFlag{Name: "pattern", Value: bench.Sequential, Usage: "seq (consecutive blocks, how layers stream) or rand"},
			&cli.DurationFlag{Name: "time", Value: 500 * time.Millisecond, Usage: "measured time of each point"},
			&cli.DurationFlag{Name: "warmup", Usage: "unmeasured time before each point (default time/10)"},
			&cli.StringFlag{Name: "region", Usage: "read only the first BYTES of the target (e.g. 8g)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the random pattern"},
			&cli.StringFlag{Name: "plot", Usage: "write a chart of GB/s against block size, one line per queue depth, to this .svg file"},
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usagef("bench storage: want exactly one FILE or nvme:BDF/NSID argument")
			}
			o, err := storageFlags(cmd)
			if err != nil {
				return err
			}
			if err := checkPlotPath(cmd.String("plot")); err != nil {
				return err
			}
			arg := cmd.Args().First()
			bar := newBenchBar(cmd, len(o.BlockSizes)*len(o.QueueDepths), "storage")
			var res *bench.StorageResult
			if bdf, nsid, isNVMe, perr := parseNVMeTarget(arg); perr != nil {
				return perr
			} else if isNVMe || cmd.Bool("daemon") {
				req := api.BenchStorageRequest{BDF: bdf, NSID: nsid, BlockSizes: o.BlockSizes, QueueDepths: o.QueueDepths,
					Pattern: o.Pattern, PointSeconds: o.Duration.Seconds(), RegionBytes: o.Region, Seed: o.Seed}
				if !isNVMe {
					req.Path = arg
				}
				res, err = dial(cmd).BenchStorage(ctx, req, bar.update)
				bar.finish()
				if err != nil {
					return clientErr(err)
				}
			} else {
				t, err := hw.OpenFile(arg, slices.Max(o.BlockSizes), slices.Max(o.QueueDepths), log)
				if err != nil {
					return err
				}
				defer t.Close()
				o.Progress = bar.update
				res, err = bench.Storage(ctx, t, o)
				bar.finish()
				if errors.Is(err, bench.ErrBadOptions) {
					return usagef("bench storage: %v", err)
				}
				if err != nil {
					return err
				}
			}
			if p := cmd.String("plot"); p != "" {
				if err := writePlot(p, plot.StorageChart(res)); err != nil {
					return err
				}
			}
			if cmd.Bool("json") {
				return printJSON(res)
			}
			return printStorageBench(os.Stdout, res)
		},
	}
}

// storageFlags reads the sweep's flags.
func storageFlags(cmd *cli.Command) (bench.StorageOptions, error) {
	bs, err := parseSizeList(cmd.String("bs"))
	if err != nil {
		return bench.StorageOptions{}, usagef("bench: --bs: %v", err)
	}
	qd, err := parseIntList(cmd.String("qd"))
	if err != nil {
		return bench.StorageOptions{}, usagef("bench: --qd: %v", err)
	}
	region, err := parseBytes(cmd.String("region"))
	if err != nil {
		return bench.StorageOptions{}, usagef("bench: --region: %v", err)
	}
	o := bench.StorageOptions{QueueDepths: qd, Pattern: cmd.String("pattern"), Duration: cmd.Duration("time"),
		Warmup: cmd.Duration("warmup"), Region: region, Seed: cmd.Uint64("seed")}
	for _, b := range bs {
		if b > bench.MaxBlockSize {
			return o, usagef("bench: --bs: %s is larger than %s", bench.FormatSize(b), bench.FormatSize(bench.MaxBlockSize))
		}
		o.BlockSizes = append(o.BlockSizes, int(b))
	}
	for _, q := range qd {
		if q > bench.MaxQueueDepth {
			return o, usagef("bench: --qd: %d is deeper than %d", q, bench.MaxQueueDepth)
		}
	}
	if o.Pattern != bench.Sequential && o.Pattern != bench.Random {
		return o, usagef("bench: --pattern %q: want seq or rand", o.Pattern)
	}
	if o.Duration <= 0 || o.Warmup < 0 {
		return o, usagef("bench: --time must be positive and --warmup not negative")
	}
	return o, nil
}

// parseNVMeTarget recognises nvme:BDF/NSID.
func parseNVMeTarget(s string) (bdf string, nsid int, ok bool, err error) {
	rest, ok := strings.CutPrefix(s, "nvme:")
	if !ok {
		return "", 0, false, nil
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", 0, true, usagef("bench: %q: want nvme:BDF/NSID, e.g. nvme:0000:01:00.0/1", s)
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 1 || rest[:i] == "" {
		return "", 0, true, usagef("bench: %q: want nvme:BDF/NSID with a namespace ID from 1", s)
	}
	return rest[:i], n, true, nil
}

// parseSizeList reads "4k,64k" or "4k..4m" (the powers of two between).
func parseSizeList(s string) ([]int64, error) {
	if lo, hi, ok := strings.Cut(s, ".."); ok {
		a, err := parseBytes(lo)
		if err != nil {
			return nil, err
		}
		b, err := parseBytes(hi)
		if err != nil {
			return nil, err
		}
		if a <= 0 || b < a {
			return nil, fmt.Errorf("range %q is empty", s)
		}
		var out []int64
		for v := int64(1); v <= b && v > 0; v <<= 1 {
			if v >= a {
				out = append(out, v)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("range %q holds no power of two", s)
		}
		return out, nil
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := parseBytes(f)
		if err != nil {
			return nil, err
		}
		if v <= 0 {
			return nil, fmt.Errorf("%q is not a positive size", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseIntList reads "1,8" or "1..32" (the powers of two between).
func parseIntList(s string) ([]int, error) {
	if lo, hi, ok := strings.Cut(s, ".."); ok {
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil || a < 1 || b < a {
			return nil, fmt.Errorf("range %q: want LOW..HIGH with 1 ≤ LOW ≤ HIGH", s)
		}
		var out []int
		for v := 1; v <= b && v > 0; v <<= 1 {
			if v >= a {
				out = append(out, v)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("range %q holds no power of two", s)
		}
		return out, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// benchBar is a progress bar on stderr when it is a terminal (and
// --quiet is not set); otherwise its methods do nothing.
type benchBar struct{ bar *progressbar.ProgressBar }

func newBenchBar(cmd *cli.Command, total int, what string) *benchBar {
	if cmd.Bool("quiet") || total <= 1 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return &benchBar{}
	}
	return &benchBar{bar: progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(what), progressbar.OptionShowCount(), progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())}
}

func (b *benchBar) update(p bench.Progress) {
	if b.bar == nil {
		return
	}
	b.bar.Describe(p.Label)
	_ = b.bar.Set(p.Done)
}

func (b *benchBar) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
	}
}

// checkPlotPath refuses plot files other than SVG before a long run.
func checkPlotPath(p string) error {
	if p != "" && !strings.EqualFold(filepath.Ext(p), ".svg") {
		return usagef("bench: --plot %s: charts are written as SVG; name a .svg file", p)
	}
	return nil
}

// writePlot writes a chart to path, atomically.
func writePlot(path string, c plot.Chart) error {
	f, err := safefs.CreateTemp(path, 0o644)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := c.WriteSVG(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := safefs.Commit(f, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// printStorageBench renders a storage sweep as a table.
func printStorageBench(out io.Writer, r *bench.StorageResult) error {
	t := r.Target
	fmt.Fprintf(out, "%s %s (%s", t.Kind, t.Name, bench.FormatSize(t.Size))
	if t.Model != "" {
		fmt.Fprintf(out, ", %s", t.Model)
	}
	fmt.Fprintf(out, "), %s reads of the first %s, O_DIRECT %v, %.2gs per point, via %s\n",
		r.Pattern, bench.FormatSize(r.Region), t.Direct, r.Duration, r.Via)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "block\tqd\tGB/s\tIOPS\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tmax µs\tCPU s/GB\t")
	for _, p := range r.Points {
		l := p.LatencyUS
		cpu := "-"
		if p.CPUSecondsPerGB > 0 {
			cpu = fmt.Sprintf("%.2f", p.CPUSecondsPerGB)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n", bench.FormatSize(int64(p.BlockSize)), p.QueueDepth,
			p.GBps, p.IOPS, l.P50, l.P90, l.P99, l.P999, l.Max, cpu)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Best >= 0 && r.Best < len(r.Points) {
		b := r.Points[r.Best]
		fmt.Fprintf(out, "best: %.3f GB/s at %s, queue depth %d\n", b.GBps, bench.FormatSize(int64(b.BlockSize)), b.QueueDepth)
	}
	if r.Via == "stratad" {
		fmt.Fprintln(out, "CPU s/GB: stratad's CPU time per 10^9 bytes read, its other work included")
	} else {
		fmt.Fprintln(out, "CPU s/GB: this process's CPU time per 10^9 bytes read (user and system)")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	return nil
}
