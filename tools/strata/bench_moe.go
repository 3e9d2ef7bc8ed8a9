package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/bench/moebench"
)

func init() { registerBenchCommand(benchMoECommand) }

func benchMoECommand() *cli.Command {
	return &cli.Command{
		Name: "moe",
		Usage: "measure a mixture-of-experts model's decode on the CPU with its experts placed one by one: for each memory budget and batch, " +
			"tokens/s, the expert bytes read from storage per token against the bytes its routed experts hold, the share of expert uses " +
			"that read nothing, and the time per token against the limit the measured links set",
		ArgsUsage: "[MODEL]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "arch", Value: "qwen3moe", Usage: "synthetic model without MODEL: mixtral | qwen3moe"},
			&cli.StringFlag{Name: "shape", Value: "tiny", Usage: "synthetic shape (qwen3moe: tiny | 30b-a3b | 235b-a22b; mixtral: tiny | 8x7b)"},
			&cli.StringFlag{Name: "type", Value: "q4_k_m", Usage: "synthetic type: f32 | f16 | bf16 | q8_0 | q4_k_m"},
			&cli.StringFlag{Name: "dir", Usage: "where the synthetic model and the pools are written (default strata's cache directory)"},
			&cli.StringFlag{Name: "budgets", Value: "all", Usage: "memory budgets, comma-separated: all (every expert resident) or sizes such as 8GiB,4GiB"},
			&cli.StringFlag{Name: "batch", Value: "1,8", Usage: "sequences decoded together, comma-separated"},
			&cli.IntFlag{Name: "tokens", Value: 32, Usage: "tokens each sequence decodes per measurement (after one warm-up pass)"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "times a budget with experts on storage is measured with the reads ahead and without, the order swapped each round"},
			&cli.Float64Flag{Name: "zipf", Usage: "skew the routing by a Zipf law of this exponent over each layer's experts (0: the model's own routing, which random weights make near uniform)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the whole run (the synthetic model's writing too, where it is written) to this file (go tool pprof reads it)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 1 {
				return usagef("bench moe: at most one MODEL")
			}
			o := moebench.Options{Model: cmd.Args().First(), Arch: cmd.String("arch"), Shape: cmd.String("shape"), Type: cmd.String("type"),
				Dir: cmd.String("dir"), Tokens: int(cmd.Int("tokens")), Rounds: int(cmd.Int("rounds")), Zipf: cmd.Float64("zipf")}
			for _, f := range strings.Split(cmd.String("budgets"), ",") {
				f = strings.TrimSpace(f)
				if f == "all" {
					o.Budgets = append(o.Budgets, 0)
					continue
				}
				n, err := tier.ParseBytes(f)
				if err != nil || n <= 0 {
					return usagef("bench moe: budget %q: want all or a size such as 8GiB", f)
				}
				o.Budgets = append(o.Budgets, n)
			}
			for _, f := range strings.Split(cmd.String("batch"), ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return usagef("bench moe: batch %q: want a positive number", f)
				}
				o.Batches = append(o.Batches, n)
			}
			if !cmd.Bool("quiet") {
				start := time.Now()
				o.Progress = func(msg string) { fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), msg) }
			}
			stop, err := startProfile(cmd.String("cpuprofile"))
			if err != nil {
				return fmt.Errorf("bench moe: %w", err)
			}
			r, err := moebench.Run(ctx, o)
			err = errors.Join(err, stop())
			if errors.Is(err, moebench.ErrBadOptions) {
				return usagef("bench moe: %v", err)
			}
			if r != nil {
				r.Command = strings.Join(os.Args, " ")
				w := cmd.Root().Writer
				if cmd.Bool("json") {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					err = errors.Join(err, enc.Encode(r))
				} else {
					err = errors.Join(err, r.WriteText(w))
				}
			}
			if err != nil {
				return fmt.Errorf("bench moe: %w", err)
			}
			return nil
		},
	}
}
