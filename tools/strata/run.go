package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/daemon/sched"
	"github.com/strata-llm/strata/internal/synth"
)

// defaultPrompt starts the default model (a story model) where its
// stories start.
const defaultPrompt = "Once upon a time"

func init() { registerCommand(runCommand) }

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "generate text offline (no daemon) and print tokens as they come",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "GGUF model, prefab pool or Hugging Face directory (config.json, safetensors, tokenizer.json) (default: the embedded stories260K, a tiny trained story model, written to the cache); only a pool can stream layers that do not fit"},
			&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "prompt text (default: \"" + defaultPrompt + "\")"},
			&cli.BoolFlag{Name: "chat", Usage: "wrap the prompt as a user message in the model's chat template"},
			&cli.StringFlag{Name: "system", Usage: "system message (with --chat)"},
			&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 64, Usage: "tokens to generate"},
			&cli.FloatFlag{Name: "temperature", Aliases: []string{"t"}, Value: 0, Usage: "0 = greedy"},
			&cli.IntFlag{Name: "top-k", Value: 0},
			&cli.FloatFlag{Name: "top-p", Value: 1},
			&cli.FloatFlag{Name: "min-p", Value: 0},
			&cli.FloatFlag{Name: "repeat-penalty", Value: 1},
			&cli.IntFlag{Name: "repeat-last-n", Value: 64},
			&cli.Uint64Flag{Name: "seed", Value: 0},
			&cli.BoolFlag{Name: "stats", Usage: "print prompt and decode speed to stderr at the end, and the tier plan and pipeline counters when layers stream"},
			&cli.IntFlag{Name: "stats-every", Usage: "print to stderr, every N completion tokens, that window's time per token and what its passes did (expert picks by where they were served, the host store's hits and reads, the CPU's FFNs): where a long decode's time goes as its context grows"},
			&cli.StringFlag{Name: "backend", Value: "auto", Usage: "where to run: auto (the GPU when CUDA is usable, else the CPU), cpu, or cuda (exit " + fmt.Sprint(exitBusy) + " with \"CUDA unavailable: ...\" when no GPU is usable)"},
			&cli.StringFlag{Name: "vram", Usage: "device memory budget, e.g. 24GiB (default: the GPU's free memory less a reserve; on the CPU backend none: device memory is host memory)"},
			&cli.StringFlag{Name: "ram", Usage: "host memory budget, e.g. 32GiB (default: MemAvailable minus a reserve); layers that do not fit stream from the pool every token"},
			&cli.IntFlag{Name: "ctx", Usage: "context the KV cache is planned for (default: the model's, at most 4096)"},
			&cli.IntFlag{Name: "depth", Usage: "streaming pipeline depth (slots); 0 = let the planner choose"},
			&cli.StringFlag{Name: "tiers", Usage: "force a placement instead of planning: all-A, all-B, all-C, mixed or one tier per layer (A,C,B,...); for tests and benchmarks"},
			&cli.StringFlag{Name: "draft", Usage: "speculative decoding with this draft model (a GGUF of the same vocabulary; it runs where the model runs, on the CPU when the GPU has no room for it), whose guesses each pass verifies; the output is what plain decoding gives"},
			&cli.BoolFlag{Name: "lookup", Usage: "speculative decoding by prompt lookup (guesses from earlier repeats of the text's last tokens), when no --draft is given"},
			&cli.IntFlag{Name: "self-draft", Usage: "speculative decoding with the model's own first N layers and its output head as the drafter (on the GPU when those layers are resident there, else on the CPU; N 1..layers-1), when neither --draft nor --lookup is given (off by default)"},
			&cli.IntFlag{Name: "max-draft", Value: 8, Usage: "most guesses one pass verifies (the number used adapts to the acceptance and the measured costs)"},
			&cli.StringFlag{Name: "skip-layers", Usage: "leave layers out of every pass (CPU backend; costs quality, see strata bench quality): auto, a count N, or a list 4,9 (off by default)"},
			&cli.StringFlag{Name: "grammar-file", Usage: "constrain the output to this GBNF grammar (llama.cpp's notation)"},
			&cli.StringFlag{Name: "json-schema", Usage: "constrain the output to JSON valid under this JSON Schema (inline, or @FILE)"},
			&cli.StringFlag{Name: "verify", Value: "always", Usage: "when streamed (tier-C) extents are checked against the pool's checksums: always (every read; the default), first (each extent's first read) or never"},
			&cli.BoolFlag{Name: "no-hybrid", Usage: "on a GPU, keep the CPU out of the passes: every tier-B layer crosses PCIe whole (default: the CPU computes the FFN of the tier-B layers the hybrid plan gives it)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			path := cmd.String("model")
			if path == "" {
				p, created, err := synth.DefaultPath()
				if err != nil {
					return err
				}
				if created {
					log.Info("wrote the default model", "path", p)
				}
				path = p
			}
			backend, err := engine.ParseBackend(cmd.String("backend"))
			if err != nil {
				return usagef("--backend: %v", err)
			}
			verify, err := stream.ParseVerifyMode(cmd.String("verify"))
			if err != nil {
				return usagef("--verify: %v", err)
			}
			o := engine.Options{Context: int(cmd.Int("ctx")), Depth: int(cmd.Int("depth")), Tiers: cmd.String("tiers"), Logger: log, Backend: backend,
				NoHybrid: cmd.Bool("no-hybrid"), Skip: cmd.String("skip-layers"), Verify: verify}
			if cmd.Int("self-draft") != 0 {
				// On a GPU the self-drafter's cache is a sequence of the
				// model's own: room for it beside the request's.
				o.Batch = 2
			}
			for _, f := range []struct {
				name string
				dst  *int64
			}{{"vram", &o.DeviceBudget}, {"ram", &o.HostBudget}} {
				if v := cmd.String(f.name); v != "" {
					n, err := tier.ParseBytes(v)
					if err != nil {
						return usagef("--%s: %v", f.name, err)
					}
					if n <= 0 {
						return usagef("--%s must be positive", f.name)
					}
					*f.dst = n
				}
			}
			if o.Context < 0 || o.Depth < 0 {
				return usagef("--ctx and --depth must not be negative")
			}
			if o.Tiers != "" {
				// A bad mix is a usage error, found before the model opens
				// (the layer count is checked by the engine).
				if _, err := tier.MixTiers(o.Tiers, strings.Count(o.Tiers, ",")+1); err != nil {
					return usagef("--tiers: %v", err)
				}
			}
			maxTokens := int(cmd.Int("max-tokens"))
			if maxTokens <= 0 {
				return usagef("--max-tokens must be positive")
			}
			if cmd.Int("stats-every") < 0 {
				return usagef("--stats-every must not be negative")
			}
			if cmd.Int("max-draft") < 1 {
				return usagef("--max-draft must be positive")
			}
			g, err := runGrammar(cmd.String("grammar-file"), cmd.String("json-schema"))
			if err != nil {
				return err
			}
			// Links are measured on demand, once, if the model must stream.
			o.LinkCache = engine.NewLinkCache()
			e, err := engine.OpenWith(ctx, path, o)
			if errors.Is(err, tier.ErrNoFit) && o.Batch == 2 {
				// No room for the self-drafter's sequence: the model as it
				// would run alone, the drafter then on the CPU.
				log.Info("no device memory for the self-drafter's cache beside the model's; it runs on the CPU")
				o.Batch = 1
				e, err = engine.OpenWith(ctx, path, o)
			}
			if errors.Is(err, engine.ErrCUDAUnavailable) {
				return codedError{err, exitBusy}
			}
			if err != nil {
				return err
			}
			defer e.Close()
			params := sample.Params{
				Temperature:   float32(cmd.Float("temperature")),
				TopK:          int(cmd.Int("top-k")),
				TopP:          float32(cmd.Float("top-p")),
				MinP:          float32(cmd.Float("min-p")),
				RepeatPenalty: float32(cmd.Float("repeat-penalty")),
				RepeatLastN:   int(cmd.Int("repeat-last-n")),
				Seed:          cmd.Uint64("seed"),
			}
			prompt := cmd.String("prompt")
			if !cmd.IsSet("prompt") {
				prompt = defaultPrompt
			}
			var ids []int32
			if cmd.Bool("chat") {
				var msgs []tokenizer.Message
				if s := cmd.String("system"); s != "" {
					msgs = append(msgs, tokenizer.Message{Role: "system", Content: s})
				}
				msgs = append(msgs, tokenizer.Message{Role: "user", Content: prompt})
				// The template carries BOS and the control tokens; the
				// messages are text.
				var err error
				if ids, err = e.Tok.EncodeChat(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true}); err != nil {
					return fmt.Errorf("chat template: %w", err)
				}
			} else {
				fmt.Print(prompt)
				ids = e.Tok.Encode(prompt, true, false)
			}
			gopts := sched.GenerateOptions{MaxDraft: int(cmd.Int("max-draft"))}
			switch {
			case cmd.String("draft") != "":
				d, err := engine.OpenDraft(ctx, cmd.String("draft"), e, engine.Options{Context: o.Context, Logger: log})
				if err != nil {
					return err
				}
				defer d.Close()
				gopts.Drafter = sched.ModelDrafter{B: d.Backend()}
			case cmd.Bool("lookup"):
				gopts.Drafter = sched.Lookup{MinN: 1, MaxN: 4}
			case cmd.Int("self-draft") != 0:
				d, err := engine.OpenSelfDraft(ctx, path, e, int(cmd.Int("self-draft")), engine.Options{Context: o.Context, Logger: log})
				if err != nil {
					return err
				}
				defer d.Close()
				gopts.Drafter = sched.ModelDrafter{B: d.Backend(), Label: "self"}
			}
			m, err := runMatcher(g, e.Tok)
			if err != nil {
				return err
			}
			var win *windowStats
			if n := int(cmd.Int("stats-every")); n > 0 {
				win = &windowStats{every: n}
			}
			// The daemon's scheduler, in this process: the one decode loop.
			res, err := sched.GenerateWith(ctx, e.Backend(), e.Tok, sched.Request{Prompt: ids, MaxTokens: maxTokens, Sample: params, Grammar: m}, gopts,
				func(ev sched.Event) error {
					if win != nil && ev.Token >= 0 {
						win.token(os.Stderr, e)
					}
					_, err := os.Stdout.WriteString(ev.Text)
					return err
				})
			fmt.Println()
			if err != nil {
				return err
			}
			if cmd.Bool("stats") {
				fmt.Fprintf(os.Stderr, "prompt: %d tokens in %v (%.1f tok/s); completion: %d tokens in %v (%.2f tok/s); finish: %s\n",
					res.PromptTokens, res.PromptTime.Round(1e6), rate(res.PromptTokens, res.PromptTime.Seconds()),
					res.CompletionTokens, res.DecodeTime.Round(1e6), rate(res.CompletionTokens, res.DecodeTime.Seconds()), res.FinishReason)
				fmt.Fprintf(os.Stderr, "backend: %s\n", e.BackendInfo())
				if sk := e.Skipped(); len(sk) > 0 {
					fmt.Fprintf(os.Stderr, "layer skip: %d of %d layers left out: %v\n", len(sk), e.Model.Config.Layers, sk)
				}
				if gopts.Drafter != nil {
					fmt.Fprintf(os.Stderr, "speculation (%s): %d passes for %d tokens; %d of %d guesses accepted; %s\n",
						gopts.Drafter.Name(), res.Passes, res.CompletionTokens, res.Accepted, res.Drafted, specCosts(res.PassCost, res.DraftCost))
				}
				writeRunStats(os.Stderr, e)
			}
			return nil
		},
	}
}

func rate(n int, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return float64(n) / s
}

// specCosts formats the scheduler's measured costs: a pass by the tokens
// it fed, a drafted token.
func specCosts(pass []time.Duration, draft time.Duration) string {
	var parts []string
	for i, d := range pass {
		if d > 0 {
			parts = append(parts, fmt.Sprintf("%d: %v", i+1, d.Round(time.Microsecond)))
		}
	}
	return fmt.Sprintf("pass time by tokens {%s}, a drafted token %v", strings.Join(parts, ", "), draft.Round(time.Microsecond))
}
