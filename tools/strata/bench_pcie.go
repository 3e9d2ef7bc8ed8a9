package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/bench/hw"
	"github.com/strata-llm/strata/internal/bench/plot"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

func init() { registerBenchCommand(benchPCIeCommand) }

// cudaErr gives "CUDA unavailable" the exit code of an unavailable
// service (exitBusy), the code stratad's 503 cuda_unavailable maps to too.
func cudaErr(err error) error {
	if errors.Is(err, cudadrv.ErrUnavailable) {
		return codedError{err, exitBusy}
	}
	return err
}

func benchPCIeCommand() *cli.Command {
	return &cli.Command{
		Name: "pcie",
		Usage: "sweep host↔GPU copy sizes (H2D and D2H, pinned and pageable host memory): GB/s per size, timed with CUDA events. " +
			"Without a usable GPU it says \"CUDA unavailable: …\" and exits 6",
		Flags: benchOutputFlags(
			&cli.StringFlag{Name: "sizes", Value: "64k,256k,1m,4m,16m,64m,256m,1g", Usage: "copy sizes: a list or a range of powers of two (64k..1g)"},
			&cli.StringFlag{Name: "dir", Value: "h2d,d2h", Usage: "directions: h2d, d2h"},
			&cli.StringFlag{Name: "mem", Value: "pinned,pageable", Usage: "host memory: pinned, pageable"},
			&cli.StringFlag{Name: "point-bytes", Value: "4g", Usage: "about how many bytes each point moves"},
			&cli.IntFlag{Name: "gpu", Usage: "CUDA device ordinal"},
			&cli.StringFlag{Name: "plot", Usage: "write a chart of GB/s against copy size, one line per direction and memory, to this .svg file"},
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 0 {
				return usagef("bench pcie: takes no arguments")
			}
			if err := checkPlotPath(cmd.String("plot")); err != nil {
				return err
			}
			sizes, err := parseSizeList(cmd.String("sizes"))
			if err != nil {
				return usagef("bench pcie: --sizes: %v", err)
			}
			pb, err := parseBytes(cmd.String("point-bytes"))
			if err != nil {
				return usagef("bench pcie: --point-bytes: %v", err)
			}
			o := bench.PCIeOptions{Sizes: sizes, PointBytes: pb}
			for _, d := range strings.Split(cmd.String("dir"), ",") {
				switch strings.ToLower(strings.TrimSpace(d)) {
				case "h2d":
					o.Directions = append(o.Directions, bench.HostToDevice)
				case "d2h":
					o.Directions = append(o.Directions, bench.DeviceToHost)
				default:
					return usagef("bench pcie: --dir %q: want h2d, d2h", d)
				}
			}
			for _, m := range strings.Split(cmd.String("mem"), ",") {
				switch hm := bench.HostMemory(strings.ToLower(strings.TrimSpace(m))); hm {
				case bench.Pinned, bench.Pageable:
					o.Memory = append(o.Memory, hm)
				default:
					return usagef("bench pcie: --mem %q: want pinned, pageable", m)
				}
			}
			if cmd.Int("gpu") < 0 {
				return usagef("bench pcie: --gpu must not be negative")
			}
			bar := newBenchBar(cmd, len(sizes)*len(o.Directions)*len(o.Memory), "pcie")
			var res *bench.PCIeResult
			if cmd.Bool("daemon") {
				req := api.BenchPCIeRequest{GPU: int(cmd.Int("gpu")), Sizes: sizes, PointBytes: pb}
				for _, d := range o.Directions {
					req.Directions = append(req.Directions, string(d))
				}
				for _, m := range o.Memory {
					req.Memory = append(req.Memory, string(m))
				}
				res, err = dial(cmd).BenchPCIe(ctx, req, bar.update)
				bar.finish()
				if err != nil {
					return clientErr(err)
				}
			} else {
				gpu, err := hw.OpenGPU(int(cmd.Int("gpu")))
				if err != nil {
					return cudaErr(err)
				}
				defer gpu.Close()
				cp, err := gpu.NewCopier(slices.Max(sizes))
				if err != nil {
					return cudaErr(err)
				}
				defer cp.Close()
				o.Progress = bar.update
				res, err = bench.PCIe(ctx, cp, o)
				bar.finish()
				if err != nil {
					return cudaErr(err)
				}
			}
			if p := cmd.String("plot"); p != "" {
				if err := writePlot(p, plot.PCIeChart(res)); err != nil {
					return err
				}
			}
			if cmd.Bool("json") {
				return printJSON(res)
			}
			return printPCIeBench(os.Stdout, res)
		},
	}
}

// printPCIeBench renders a PCIe sweep as a table, one column per curve.
func printPCIeBench(out io.Writer, r *bench.PCIeResult) error {
	fmt.Fprintf(out, "%s, via %s (GB/s; mean time per copy in µs)\n", r.Device, r.Via)
	type curve struct {
		d bench.Direction
		m bench.HostMemory
	}
	var curves []curve
	var sizes []int64
	for _, p := range r.Points {
		if c := (curve{p.Direction, p.Memory}); !slices.Contains(curves, c) {
			curves = append(curves, c)
		}
		if !slices.Contains(sizes, p.Bytes) {
			sizes = append(sizes, p.Bytes)
		}
	}
	slices.Sort(sizes)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "size\t")
	for _, c := range curves {
		fmt.Fprintf(tw, "%s %s\t", c.d, c.m)
	}
	fmt.Fprintln(tw)
	for _, n := range sizes {
		fmt.Fprintf(tw, "%s\t", bench.FormatSize(n))
		for _, c := range curves {
			cell := "-"
			for _, p := range r.Points {
				if p.Direction == c.d && p.Memory == c.m && p.Bytes == n {
					cell = fmt.Sprintf("%.2f (%.0f)", p.GBps, p.MeanUS)
				}
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range curves {
		if b, ok := r.Best(c.d, c.m); ok {
			fmt.Fprintf(out, "best %s %s: %.2f GB/s at %s\n", c.d, c.m, b.GBps, bench.FormatSize(b.Bytes))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	return nil
}
