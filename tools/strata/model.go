package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/synth"
)

func init() {
	registerCommand(modelCommand)
	registerModelCommand(synthCommand)
	registerModelCommand(tokenizeCommand)
	registerModelCommand(inspectCommand)
}

func modelCommand() *cli.Command {
	return &cli.Command{
		Name:     "model",
		Usage:    "offline model tools",
		Commands: build(modelCommandFactories),
	}
}

func synthCommand() *cli.Command {
	return &cli.Command{
		Name:      "synth",
		Usage:     "write a random-weight model with the exact layout of a real one",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "arch", Value: "llama", Usage: "llama | gemma2 | gemma3 | mistral | phi3 | qwen2 | qwen3 | mixtral | qwen3moe"},
			&cli.StringFlag{Name: "shape", Value: "tiny", Usage: "tiny, and per arch: llama 8b 70b, gemma2 8b 70b, gemma3 4b 12b, mistral 8b 12b, phi3 4b 14b, qwen2 8b, qwen3 8b, mixtral 8x7b, qwen3moe 30b-a3b 235b-a22b"},
			&cli.StringFlag{Name: "type", Value: "q4_k_m", Usage: "f32 | f16 | bf16 | q8_0 | q4_k_m"},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "GGUF file to write"},
			&cli.StringFlag{Name: "hf", Usage: "also write the same model as a Hugging Face directory here (config.json, safetensors, tokenizer.json): strata run and prefab open it too"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress bar"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			opts := synth.Options{
				Arch:  cmd.String("arch"),
				Shape: cmd.String("shape"),
				Type:  cmd.String("type"),
				Seed:  cmd.Uint64("seed"),
				HFDir: cmd.String("hf"),
			}
			if _, err := synth.LookupShape(opts.Arch, opts.Shape); err != nil {
				return usageError{err.Error()}
			}
			var bar *progressbar.ProgressBar
			if !cmd.Bool("quiet") && term.IsTerminal(int(os.Stderr.Fd())) {
				opts.Progress = func(done, total int64) {
					if bar == nil {
						bar = progressbar.DefaultBytes(total, "synth")
					}
					_ = bar.Set64(done)
				}
			}
			out := cmd.String("output")
			if err := synth.Write(out, opts); err != nil {
				return err
			}
			if bar != nil {
				_ = bar.Finish()
			}
			st, err := os.Stat(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wrote %s (%s %s %s, %.2f GiB)\n", out, opts.Arch, opts.Shape, opts.Type, float64(st.Size())/(1<<30))
			return nil
		},
	}
}

func tokenizeCommand() *cli.Command {
	return &cli.Command{
		Name:  "tokenize",
		Usage: "read text on stdin and print its token ids on one line (no BOS)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Required: true, Usage: "GGUF file (a vocab-only file works)"},
			&cli.BoolFlag{Name: "special", Usage: "parse special-token text such as <|eot_id|>"},
			&cli.BoolFlag{Name: "bos", Usage: "apply the vocabulary's BOS/EOS rule"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			tok, err := tokenizer.FromGGUFFile(cmd.String("model"))
			if err != nil {
				return err
			}
			text, err := io.ReadAll(bufio.NewReader(os.Stdin))
			if err != nil {
				return fmt.Errorf("reading stdin: %w", err)
			}
			ids := tok.Encode(string(text), cmd.Bool("bos"), cmd.Bool("special"))
			var b strings.Builder
			for i, id := range ids {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(strconv.Itoa(int(id)))
			}
			b.WriteByte('\n')
			_, err = os.Stdout.WriteString(b.String())
			return err
		},
	}
}

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "print a GGUF file's metadata and tensors",
		ArgsUsage: "FILE",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usagef("inspect takes exactly one FILE")
			}
			m, err := gguf.ReadHeader(cmd.Args().First())
			if err != nil {
				return err
			}
			type tensor struct {
				Name  string   `json:"name"`
				Type  string   `json:"type"`
				Dims  []uint64 `json:"dims"`
				Bytes int64    `json:"bytes"`
			}
			out := struct {
				Version  uint32         `json:"version"`
				Metadata map[string]any `json:"metadata"`
				Tensors  []tensor       `json:"tensors"`
				Bytes    int64          `json:"tensor_bytes"`
			}{Version: m.Version, Metadata: map[string]any{}}
			for _, kv := range m.KV {
				out.Metadata[kv.Key] = summarize(kv.Value)
			}
			for _, t := range m.Tensors {
				out.Tensors = append(out.Tensors, tensor{t.Name, t.Type.String(), t.Dims, t.Size})
				out.Bytes += t.Size
			}
			if cmd.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			keys := make([]string, 0, len(out.Metadata))
			for k := range out.Metadata {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Printf("GGUF v%d, %d metadata keys, %d tensors, %.3f GiB of tensor data\n", out.Version, len(keys), len(out.Tensors), float64(out.Bytes)/(1<<30))
			for _, k := range keys {
				fmt.Printf("  %-48s %v\n", k, out.Metadata[k])
			}
			for _, t := range out.Tensors {
				fmt.Printf("  %-32s %-8s %v\n", t.Name, t.Type, t.Dims)
			}
			return nil
		},
	}
}

// summarize keeps long arrays (vocabularies) from flooding the output.
func summarize(v any) any {
	if a, ok := v.(gguf.Array); ok {
		return fmt.Sprintf("[%s array]", a.Type)
	}
	return v
}
