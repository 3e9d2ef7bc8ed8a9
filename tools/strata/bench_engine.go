package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/internal/bench/enginebench"
	"github.com/strata-llm/strata/internal/safefs"
	"github.com/strata-llm/strata/kernels"
)

func init() { registerBenchCommand(benchEngineCommand) }

// defaultSynthDir is where `strata bench engine` writes the synthetic
// models it needs: strata's private cache (safefs.CacheDirPath, never a
// directory shared with other users, whose planted files it would load;
// made private before use), not /dev/shm, since the 70b alone takes 40 GiB
// (on the H200 host, pass --synth-dir /dev/shm).
func defaultSynthDir() string { return safefs.CacheDirPath("synth") }

func benchEngineCommand() *cli.Command {
	return &cli.Command{
		Name: "engine",
		Usage: "measure the GPU engine in one run: the ceilings (device-to-device copy, pinned host-to-device), then the scenarios " +
			"(resident 8b, 8b half streamed, 70b in 24 GiB, bf16 8b in 6 GiB plain, losslessly packed, and as an INT8-row pool), each figure as a ratio " +
			"to a ceiling or another figure of the same run and, given --peers FILE, to other systems' reference figures, with the goals. Without a usable GPU it says " +
			"\"CUDA unavailable: …\" and exits 6",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "only", Value: "all", Usage: "scenarios to run, comma-separated: resident, streamed, 70b, bf16 (or all, which is those four), families (resident decode and prefill of Mistral 7B, Qwen2.5 7B, Qwen3 8B, Gemma 3 12B and Phi-3 mini shapes; named only), moe (Qwen3-30B-A3B in 8 and 4 GiB, Mixtral-8x7B in 12 GiB, attention on the GPU and every FFN block on the CPU, batch 1 and 8, the model's own routing and --moe-zipf's; ~43 GiB of synthetic models; named only)"},
			&cli.StringFlag{Name: "model-8b", Usage: "llama 8b Q4_K_M GGUF for resident and streamed (default: the synthetic one in --synth-dir)"},
			&cli.StringFlag{Name: "model-70b", Usage: "llama 70b Q4_K_M GGUF (default: the synthetic one in --synth-dir)"},
			&cli.StringFlag{Name: "model-8b-bf16", Usage: "llama 8b bf16 GGUF (default: the synthetic one in --synth-dir)"},
			&cli.StringFlag{Name: "pool-8b-int8", Usage: "INT8-row prefab pool of the bf16 8b (default: prefabbed from it into --synth-dir)"},
			&cli.StringFlag{Name: "synth-dir", Value: defaultSynthDir(), Usage: "where missing synthetic models are written (all four scenarios: ~70 GiB; /dev/shm on the H200 host)"},
			&cli.StringFlag{Name: "vram-70b", Value: "24GiB", Usage: "device memory budget of the 70b scenario"},
			&cli.StringFlag{Name: "vram-bf16", Value: "6GiB", Usage: "device memory budget of the bf16 scenario"},
			&cli.FloatFlag{Name: "moe-zipf", Value: enginebench.DefaultMoEZipf, Usage: "the moe scenario also decodes with its routing skewed by a Zipf law of this exponent over each layer's experts, after the model's own (random weights route near uniformly, the worst case for a cache); 0: the model's own only"},
			&cli.IntFlag{Name: "moe-served", Value: enginebench.DefaultMoEServed, Usage: "the moe scenario's served decode: this many greedy tokens from a text prompt through the engine as the daemon serves them (its own plan, the experts placed by its calibration and moved toward the routing served); 0 leaves it out"},
			&cli.StringFlag{Name: "moe-cases", Value: "all", Usage: "the moe scenario's cases, comma-separated: all, or names among " + enginebench.MoECaseNames()},
			&cli.BoolFlag{Name: "moe-fixed", Value: true, Usage: "the moe scenario's rows at fixed placements (every expert on the CPU, then the calibration's experts in device memory, each way); false leaves only the served rows"},
			&cli.IntFlag{Name: "moe-served-batch", Value: enginebench.DefaultMoEServedBatch, Usage: fmt.Sprintf("the moe scenario's served batch: this many requests at once through the engine and the daemon's scheduler, %d greedy tokens each from different text prompts, the aggregate rate of the passes that advance them all; 0 leaves it out", enginebench.DefaultMoEServedBatchTokens)},
			&cli.BoolFlag{Name: "timeline", Usage: "after each hybrid decode, note the last timed pass's streamed layers one a line: the copy's start and end and compute's wait for it on the GPU's clock, and where the CPU took the FFN, the hand-over wait and the FFN's time"},
			&cli.BoolFlag{Name: "int8", Value: true, Usage: "also run the bf16 scenario's INT8-row variant"},
			&cli.BoolFlag{Name: "float-gemv", Usage: "decode GEMVs of Q4_K/Q6_K matrices on the float path (dequantize and FMA) instead of the default integer one (x rounded to 16 bits, dp4a); the same as --variant float-gemv"},
			&cli.StringFlag{Name: "variant", Usage: "kernel tuning variants for the whole run, comma-separated, applied in order to the device's tuning: " + variantsUsage()},
			&cli.FloatFlag{Name: "acceptance", Usage: "a drafter's measured acceptance (strata bench quality's, on a real model pair): the 70b scenario projects the speculative tok/s it gives at each k; without it no projection (random weights have no acceptance of their own)"},
			&cli.StringFlag{Name: "peers", Usage: "JSON file of other systems' reference figures to relate the run's to, with their source (docs/peers-h200.json); without it no peer ratios and no goals against peers"},
			&cli.IntFlag{Name: "gpu", Usage: "CUDA device ordinal"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.StringFlag{Name: "json-file", Usage: "also write the report as JSON to this file (one run, both forms)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the whole run (synthetic models' writing too, where they are written) to this file (go tool pprof reads it): where the host's threads go beside the GPU"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			o, err := benchEngineOptions(cmd)
			if err != nil {
				return err
			}
			if !cmd.Bool("quiet") {
				start := time.Now()
				o.Progress = func(msg string) {
					fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), msg)
				}
			}
			stop, err := startProfile(cmd.String("cpuprofile"))
			if err != nil {
				return fmt.Errorf("bench engine: %w", err)
			}
			r, err := enginebench.Run(ctx, o)
			err = errors.Join(err, stop())
			if r == nil {
				return cudaErr(err)
			}
			r.Command = strings.Join(os.Args, " ")
			if perr := printBenchEngine(r, cmd.Bool("json")); perr != nil && err == nil {
				err = perr
			}
			if p := cmd.String("json-file"); p != "" {
				if werr := writeJSONFile(p, r); werr != nil && err == nil {
					err = werr
				}
			}
			if err != nil {
				return cudaErr(err)
			}
			if r.Failed() {
				return errors.New("bench engine: a scenario failed (see its FAILED line)")
			}
			return nil
		},
	}
}

// benchEngineOptions turns the flags into the run's options.
func benchEngineOptions(cmd *cli.Command) (enginebench.Options, error) {
	var o enginebench.Options
	if cmd.Args().Len() != 0 {
		return o, usagef("bench engine: takes no arguments (name models with --model-8b, --model-70b, --model-8b-bf16, --pool-8b-int8)")
	}
	sc, err := enginebench.ParseScenarios(cmd.String("only"))
	if err != nil {
		return o, usagef("bench engine: --only: %v", err)
	}
	if cmd.Int("gpu") < 0 {
		return o, usagef("bench engine: --gpu must not be negative")
	}
	for _, b := range []struct {
		flag string
		dst  *int64
	}{{"vram-70b", &o.Budget70B}, {"vram-bf16", &o.BudgetBF16}} {
		n, err := parseBytes(cmd.String(b.flag))
		if err != nil || n <= 0 {
			return o, usagef("bench engine: --%s %q: want a positive byte count such as 24GiB", b.flag, cmd.String(b.flag))
		}
		*b.dst = n
	}
	if cmd.String("synth-dir") == "" {
		return o, usagef("bench engine: --synth-dir must not be empty")
	}
	if p := cmd.String("peers"); p != "" {
		peers, err := enginebench.LoadPeers(p)
		if err != nil {
			return o, usagef("bench engine: --peers: %v", err)
		}
		o.Peers = peers
	}
	o.Scenarios = sc
	o.GPU = int(cmd.Int("gpu"))
	o.Model8B, o.Model70B = cmd.String("model-8b"), cmd.String("model-70b")
	o.Model8BBF16, o.Pool8BInt8 = cmd.String("model-8b-bf16"), cmd.String("pool-8b-int8")
	o.SynthDir = cmd.String("synth-dir")
	if o.SynthDir == defaultSynthDir() {
		if err := safefs.PrivateDir(o.SynthDir); err != nil {
			return o, fmt.Errorf("bench engine: %w", err)
		}
	}
	o.NoInt8 = !cmd.Bool("int8")
	o.MoEZipf = cmd.Float("moe-zipf")
	o.Timeline = cmd.Bool("timeline")
	o.MoEServed = int(cmd.Int("moe-served"))
	o.MoEServedBatch = int(cmd.Int("moe-served-batch"))
	o.MoEServedOnly = !cmd.Bool("moe-fixed")
	if c := cmd.String("moe-cases"); c != "all" {
		cases, err := enginebench.ParseMoECases(c)
		if err != nil {
			return o, usagef("bench engine: --moe-cases: %v", err)
		}
		o.MoECases = cases
	}
	if o.MoEServedOnly && o.MoEServed == 0 && o.MoEServedBatch < 2 {
		return o, usagef("bench engine: --moe-fixed=false with neither --moe-served nor --moe-served-batch leaves the moe scenario nothing to run")
	}
	if o.MoEServedBatch < 0 {
		return o, usagef("bench engine: --moe-served-batch must not be negative")
	}
	if o.MoEServed < 0 {
		return o, usagef("bench engine: --moe-served must not be negative")
	}
	if z := o.MoEZipf; z < 0 || math.IsNaN(z) || math.IsInf(z, 0) {
		return o, usagef("bench engine: --moe-zipf must be a finite exponent >= 0")
	}
	o.Acceptance = cmd.Float("acceptance")
	if o.Acceptance < 0 || o.Acceptance >= 1 {
		return o, usagef("bench engine: --acceptance must be in [0, 1)")
	}
	o.FloatGEMV = cmd.Bool("float-gemv")
	if v := cmd.String("variant"); v != "" {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if _, err := kernels.TuningFor(kernels.DeviceInfo{}).WithVariant(name); err != nil {
				return o, usagef("bench engine: --variant: %v", err)
			}
			o.Variants = append(o.Variants, name)
		}
	}
	return o, nil
}

// variantsUsage lists the kernel tuning variants and what each does.
func variantsUsage() string {
	var parts []string
	for _, v := range kernels.Variants() {
		parts = append(parts, v.Name+" ("+v.What+")")
	}
	return strings.Join(parts, "; ")
}

// writeJSONFile writes v as indented JSON to path, atomically.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := safefs.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json-file: %w", err)
	}
	return nil
}

// printBenchEngine writes the report to stdout, as text or JSON.
func printBenchEngine(r *enginebench.Report, asJSON bool) error {
	if asJSON {
		return printJSON(r)
	}
	return r.WriteText(os.Stdout)
}
