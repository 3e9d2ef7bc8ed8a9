package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/bench/hw"
)

func init() { registerBenchCommand(benchE2ECommand) }

func benchE2ECommand() *cli.Command {
	return &cli.Command{
		Name: "e2e",
		Usage: "measure storage → GPU end to end through each route that exists here (file→pinned→GPU; " +
			"nvme→pinned→GPU in stratad; nvme→GPU BAR once admitted), and say why the others do not",
		ArgsUsage: "[FILE | nvme:BDF/NSID]\n\n" +
			"A FILE is read here with O_DIRECT (with --daemon, by stratad from its model directories); nvme:BDF/NSID\n" +
			"asks stratad to read a namespace of a controller it holds. Without a GPU nothing is measured: the routes\n" +
			"are listed with the reason.",
		Flags: benchOutputFlags(
			&cli.StringFlag{Name: "bytes", Value: "1g", Usage: "bytes to move per route"},
			&cli.StringFlag{Name: "chunk", Value: "4m", Usage: "size of one read and one copy"},
			&cli.IntFlag{Name: "slots", Value: 2, Usage: "staging slots (reads overlap copies)"},
			&cli.IntFlag{Name: "gpu", Usage: "CUDA device ordinal"},
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 1 {
				return usagef("bench e2e: want at most one FILE or nvme:BDF/NSID argument")
			}
			n, err := parseBytes(cmd.String("bytes"))
			if err != nil || n <= 0 {
				return usagef("bench e2e: --bytes %q: want a positive byte count", cmd.String("bytes"))
			}
			chunk, err := parseBytes(cmd.String("chunk"))
			if err != nil || chunk <= 0 || chunk > bench.MaxBlockSize || chunk%4096 != 0 {
				return usagef("bench e2e: --chunk %q: want a multiple of 4 KiB up to %s", cmd.String("chunk"), bench.FormatSize(bench.MaxBlockSize))
			}
			slots := int(cmd.Int("slots"))
			if slots < 1 || slots > 16 || cmd.Int("gpu") < 0 {
				return usagef("bench e2e: --slots must be 1 … 16 and --gpu not negative")
			}
			ro := bench.RouteOptions{Bytes: n, Chunk: int(chunk), Slots: slots}
			arg := cmd.Args().First()
			bdf, nsid, isNVMe, err := parseNVMeTarget(arg)
			if err != nil {
				return err
			}
			var res *bench.E2EResult
			if isNVMe || cmd.Bool("daemon") {
				req := api.BenchE2ERequest{BDF: bdf, NSID: nsid, GPU: int(cmd.Int("gpu")), Bytes: n, Chunk: int(chunk), Slots: slots}
				if !isNVMe {
					req.Path = arg
				}
				if res, err = dial(cmd).BenchE2E(ctx, req, nil); err != nil {
					return clientErr(err)
				}
			} else {
				v, verr := hostVerdict(ctx)
				res, err = hw.E2E(ctx, hw.E2EOptions{File: arg, GPU: int(cmd.Int("gpu")), Route: ro, Verdict: v, VerdictErr: verr,
					Where: "local", Log: log})
				if err != nil {
					return cudaErr(err)
				}
			}
			if cmd.Bool("json") {
				return printJSON(res)
			}
			return printE2EBench(os.Stdout, res)
		},
	}
}

// hostVerdict asks this binary's own `strata setup check --json` which
// route the daemon would pick here and why the others lost. It runs as a
// child process so that the bench command itself links none of the
// privileged packages setup's checks use; the check exits 1 when some
// line fails, which still prints the report.
func hostVerdict(ctx context.Context) (*bench.HostVerdict, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, self, "setup", "check", "--json")
	c.Stdout, c.Stderr = &out, &errb
	runErr := c.Run()
	var rep struct {
		Route *bench.HostVerdict `json:"route"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Route == nil {
		if runErr == nil {
			runErr = errors.New("no route in its report")
		}
		return nil, fmt.Errorf("strata setup check: %v %s", runErr, strings.TrimSpace(errb.String()))
	}
	return rep.Route, nil
}

// printE2EBench renders the routes as a table.
func printE2EBench(out io.Writer, r *bench.E2EResult) error {
	gpu := r.GPU
	if gpu == "" {
		gpu = "no GPU"
	}
	fmt.Fprintf(out, "storage → GPU routes, %s, via %s\n", gpu, r.Via)
	if r.HostRoute != "" {
		fmt.Fprintf(out, "setup check picks %s\n", r.HostRoute)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "route\tsource\texists\tGB/s\tread s\tcopy wait s\t")
	for _, rt := range r.Routes {
		gb, rd, wt := "-", "-", "-"
		if rt.Measured {
			gb, rd, wt = fmt.Sprintf("%.3f", rt.GBps), fmt.Sprintf("%.3f", rt.ReadSeconds), fmt.Sprintf("%.3f", rt.WaitSeconds)
		}
		src := rt.Source
		if src == "" {
			src = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t\n", rt.Kind, src, rt.Available, gb, rd, wt)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, rt := range r.Routes {
		if rt.Reason != "" {
			fmt.Fprintf(out, "%s: %s\n", rt.Kind, rt.Reason)
		}
		for _, f := range rt.Facts {
			fmt.Fprintf(out, "  %s\n", f)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	return nil
}
