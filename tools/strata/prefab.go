package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/hf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tier"
)

func init() { registerModelCommand(prefabCommand) }

func prefabCommand() *cli.Command {
	return &cli.Command{
		Name:      "prefab",
		Usage:     "write a GGUF model or a Hugging Face directory as a prefab pool: one 4 KiB-aligned, checksummed extent per layer, tensors in kernel order",
		ArgsUsage: "MODEL",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "pool file to write"},
			&cli.StringFlag{Name: "type", Value: prefab.TypeKeep, Usage: "keep | q8_0 | q4_k | int8 (norms always stay F32)"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress bar"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usagef("prefab takes exactly one MODEL")
			}
			typ := cmd.String("type")
			if !slices.Contains(prefab.Types(), typ) {
				return usagef("--type %q: want one of %v", typ, prefab.Types())
			}
			var bar *progressbar.ProgressBar
			var progress func(done, total int64)
			if !cmd.Bool("quiet") && term.IsTerminal(int(os.Stderr.Fd())) {
				progress = func(done, total int64) {
					if bar == nil {
						bar = progressbar.DefaultBytes(total, "prefab")
					}
					_ = bar.Set64(done)
				}
			}
			in, out := cmd.Args().First(), cmd.String("output")
			size, err := prefabModel(ctx, in, out, typ, progress)
			if err != nil {
				return err
			}
			if bar != nil {
				_ = bar.Finish()
			}
			fmt.Fprintf(cmd.Root().ErrWriter, "wrote %s (%s, %s)\n", out, typ, tier.FormatBytes(size))
			return nil
		},
	}
}

// prefabModel converts the GGUF or Hugging Face directory at in into a
// pool at out and returns the pool's size.
func prefabModel(ctx context.Context, in, out, typ string, progress func(done, total int64)) (int64, error) {
	opts := prefab.Options{Type: typ, Source: filepath.Base(in), Progress: progress, Context: ctx}
	if hf.IsDir(in) {
		m, err := hf.OpenShared(in) // read once, possibly larger than memory
		if err != nil {
			return 0, err
		}
		defer m.Close()
		if err := prefab.WriteModelPool(m.Model, m.Vocab, out, opts); err != nil {
			return 0, err
		}
	} else {
		// The file's pages, not a copy: the pool is for models larger
		// than memory, which a copy would not fit.
		m, err := gguf.MapShared(in)
		if err != nil {
			return 0, err
		}
		defer m.Close()
		if err := prefab.WritePool(m, out, opts); err != nil {
			return 0, err
		}
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
