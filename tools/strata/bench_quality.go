package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/internal/bench/quality"
)

func init() { registerBenchCommand(benchQualityCommand) }

func benchQualityCommand() *cli.Command {
	return &cli.Command{
		Name: "quality",
		Usage: "what strata's approximations cost on held-out text, against the reference model: KL divergence, top-1 agreement and perplexity " +
			"of each pool type and of layer skip, and how often each speculative drafter (a draft model, the model's own first layers, prompt lookup) guesses the model's token",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "the reference model (a GGUF, e.g. the F16 one)", Required: true},
			&cli.StringFlag{Name: "draft", Usage: "a draft model of the same vocabulary, for its acceptance"},
			&cli.StringFlag{Name: "types", Value: "q8_0,q4_k,int8", Usage: "pool types to compare (strata model prefab --type), comma-separated; empty for none"},
			&cli.StringFlag{Name: "text", Value: "/usr/local/go/src", Usage: "directory of text: held-out files (--glob) read from the last, calibration from the others"},
			&cli.StringFlag{Name: "glob", Value: "*_test.go", Usage: "file names of the held-out text"},
			&cli.IntFlag{Name: "tokens", Value: 4096, Usage: "held-out tokens to evaluate"},
			&cli.IntFlag{Name: "window", Value: 512, Usage: "tokens a window (each evaluated as one prompt)"},
			&cli.StringFlag{Name: "skip", Value: "1,2,4", Usage: "numbers of layers to skip, the most similar first (layer cosines on the calibration text); empty for none"},
			&cli.IntFlag{Name: "self-layers", Usage: "the self-drafter's depth (default a quarter of the layers)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 0 {
				return usagef("bench quality: takes no arguments")
			}
			o := quality.Options{Model: cmd.String("model"), Draft: cmd.String("draft"), Text: cmd.String("text"), Glob: cmd.String("glob"),
				Tokens: int(cmd.Int("tokens")), Window: int(cmd.Int("window")), SelfLayers: int(cmd.Int("self-layers"))}
			if o.Tokens < 2 || o.Window < 2 || o.SelfLayers < 0 {
				return usagef("bench quality: --tokens and --window must be at least 2, --self-layers not negative")
			}
			if s := strings.TrimSpace(cmd.String("types")); s != "" {
				o.Types = strings.Split(s, ",")
			}
			if s := strings.TrimSpace(cmd.String("skip")); s != "" {
				sk, err := parseIntList(s)
				if err != nil {
					return usagef("bench quality: --skip: %v", err)
				}
				o.Skip = sk
			}
			if !cmd.Bool("quiet") {
				start := time.Now()
				o.Progress = func(msg string) { fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), msg) }
			}
			r, err := quality.Run(ctx, o)
			if errors.Is(err, quality.ErrBadOptions) {
				return usagef("bench quality: %v", err)
			}
			if err != nil {
				return fmt.Errorf("bench quality: %w", err)
			}
			if cmd.Bool("json") {
				return printJSON(r)
			}
			return r.WriteText(os.Stdout)
		},
	}
}
