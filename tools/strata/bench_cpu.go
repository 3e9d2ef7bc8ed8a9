package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/internal/bench/cpubench"
)

func init() { registerBenchCommand(benchCPUCommand) }

func benchCPUCommand() *cli.Command {
	return &cli.Command{
		Name: "cpu",
		Usage: "measure the CPU as a compute device: the cores' memory read bandwidth (one pinned thread per CPU, each reading its own slice " +
			"of a buffer far larger than the caches), then each weight type's multi-threaded GEMV (engine/gemv) over weights cycled so none stays " +
			"cached, as weight bytes/s and as a ratio to the read bandwidth at the same thread count",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "threads", Usage: "thread counts: a list (1,4,16) or a range of powers of two (1..16) (default 1, 2, 4, … and every CPU)"},
			&cli.StringFlag{Name: "size", Usage: "the read probe's buffer, e.g. 8GiB (default 4GiB, or half of MemAvailable when that is less)"},
			&cli.StringFlag{Name: "weights", Usage: "each weight type's matrices in all, e.g. 2GiB (default 1GiB, or 4× the last-level cache when that is more)"},
			&cli.StringFlag{Name: "only", Value: "all", Usage: "weight types, comma-separated: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, INT8_ROW, F16, BF16 (or all)"},
			&cli.StringFlag{Name: "impl", Usage: "kernel family of the GEMV rates and the model's decode: go, avx2, avx512 (default the best this CPU runs)"},
			&cli.DurationFlag{Name: "time", Value: cpubench.DefaultTime, Usage: "least time of each measurement (and at least three passes)"},
			&cli.StringFlag{Name: "model", Usage: "also time this model's CPU-only decode (every layer resident, engine/gemv's kernels) against the memory read rate, and its prefill"},
			&cli.IntFlag{Name: "tokens", Value: 32, Usage: "greedy tokens the --model decode generates"},
			&cli.IntFlag{Name: "prompt", Value: 256, Usage: "then time the --model's prefill of a prompt this long (0: none)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the --model's decode and prefill to this file (go tool pprof reads it)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			o, err := benchCPUOptions(cmd)
			if err != nil {
				return err
			}
			if cmd.String("model") != "" && cmd.Int("tokens") < 1 {
				return usagef("bench cpu: --tokens must be positive")
			}
			if cmd.Int("prompt") < 0 {
				return usagef("bench cpu: --prompt must not be negative")
			}
			if !cmd.Bool("quiet") {
				start := time.Now()
				o.Progress = func(msg string) {
					fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), msg)
				}
			}
			r, err := cpubench.Run(ctx, o)
			if errors.Is(err, cpubench.ErrBadOptions) {
				return usagef("bench cpu: %v", err)
			}
			if r == nil {
				return fmt.Errorf("bench cpu: %w", err)
			}
			r.Command = strings.Join(os.Args, " ")
			if m := cmd.String("model"); m != "" && err == nil {
				if o.Progress != nil {
					o.Progress("CPU-only decode of " + m)
				}
				var read float64
				if p := r.Read.Points; len(p) > 0 {
					read = p[len(p)-1].Best
				}
				stop, perr := startProfile(cmd.String("cpuprofile"))
				if perr != nil {
					return fmt.Errorf("bench cpu: %w", perr)
				}
				r.Decode, err = cpubench.MeasureDecode(ctx, m, int(cmd.Int("tokens")), int(cmd.Int("prompt")), cmd.String("impl"), read)
				err = errors.Join(err, stop())
				if errors.Is(err, cpubench.ErrBadOptions) {
					return usagef("bench cpu: %v", err)
				}
			}
			if cmd.Bool("json") {
				err = errors.Join(err, printJSON(r))
			} else {
				err = errors.Join(err, r.WriteText(os.Stdout))
			}
			if err != nil {
				return fmt.Errorf("bench cpu: %w", err)
			}
			return nil
		},
	}
}

// benchCPUOptions turns the flags into the run's options.
func benchCPUOptions(cmd *cli.Command) (cpubench.Options, error) {
	var o cpubench.Options
	if cmd.Args().Len() != 0 {
		return o, usagef("bench cpu: takes no arguments")
	}
	if s := cmd.String("threads"); s != "" {
		t, err := parseIntList(s)
		if err != nil {
			return o, usagef("bench cpu: --threads: %v", err)
		}
		o.Threads = t
	}
	for _, f := range []struct {
		flag string
		dst  *int64
	}{{"size", &o.ReadBytes}, {"weights", &o.WeightBytes}} {
		if s := cmd.String(f.flag); s != "" {
			n, err := parseBytes(s)
			if err != nil || n <= 0 {
				return o, usagef("bench cpu: --%s %q: want a positive byte count such as 1GiB", f.flag, s)
			}
			*f.dst = n
		}
	}
	types, err := cpubench.ParseTypes(cmd.String("only"))
	if err != nil {
		return o, usagef("bench cpu: --only: %v", err)
	}
	o.Types = types
	o.Impl = cmd.String("impl")
	if o.Time = cmd.Duration("time"); o.Time <= 0 {
		return o, usagef("bench cpu: --time must be positive")
	}
	return o, nil
}

// startProfile starts a CPU profile into path ("" none) and returns what
// stops it and closes the file.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("cpu profile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		return nil
	}, nil
}
