package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// benchCommandFactories are the subcommands of `strata bench`; each bench
// lives in its own file and registers itself with registerBenchCommand.
var benchCommandFactories []func() *cli.Command

func registerBenchCommand(f func() *cli.Command) {
	benchCommandFactories = append(benchCommandFactories, f)
}

func init() {
	registerCommand(benchCommand)
	registerBenchCommand(benchStreamCommand)
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:     "bench",
		Usage:    "measure the whole system on this machine",
		Commands: build(benchCommandFactories),
	}
}

func benchStreamCommand() *cli.Command {
	return &cli.Command{
		Name:      "stream",
		Usage:     "run decode passes through the SLEP pipeline and report per-stage stats and tokens/s",
		ArgsUsage: "MODEL (a prefab pool, or a GGUF prefabbed to a temporary pool first)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tiers", Value: "all-C", Usage: "all-A | all-B | all-C | mixed | a comma-separated tier per layer"},
			&cli.IntFlag{Name: "depth", Aliases: []string{"k"}, Value: 2, Usage: "pipeline depth (staging buffers and device slots)"},
			&cli.IntFlag{Name: "batch", Aliases: []string{"b"}, Value: 1, Usage: "sequences advanced per pass"},
			&cli.IntFlag{Name: "passes", Aliases: []string{"n"}, Value: 8, Usage: "timed decode passes (after one warm-up pass)"},
			&cli.StringFlag{Name: "source", Value: "file", Usage: "tier-C source: file (O_DIRECT) | mmap"},
			&cli.BoolFlag{Name: "buffered", Usage: "file source without O_DIRECT"},
			&cli.IntFlag{Name: "chunk", Value: 1 << 20, Usage: "file source read size in bytes"},
			&cli.IntFlag{Name: "qd", Value: 8, Usage: "file source reads in flight"},
			&cli.StringFlag{Name: "verify", Value: "always", Usage: "checksum tier-C extents on every read (always), only the first (first) or never: the difference is the checksum's cost"},
			&cli.BoolFlag{Name: "resident", Value: true, Usage: "also time the same passes on the resident model for comparison"},
			&cli.StringFlag{Name: "tmpdir", Usage: "where a GGUF is prefabbed (default: the system temp dir)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usagef("bench stream: want exactly one MODEL argument")
			}
			if cmd.Int("depth") < 1 || cmd.Int("batch") < 1 || cmd.Int("passes") < 1 {
				return usagef("bench stream: --depth, --batch and --passes must be at least 1")
			}
			res, err := benchStream(ctx, cmd.Args().First(), cmd)
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printStreamBench(os.Stdout, res)
			return nil
		},
	}
}

// streamBenchResult is what `strata bench stream` reports.
type streamBenchResult struct {
	Model     string       `json:"model"`
	Pool      string       `json:"pool"`
	Layers    int          `json:"layers"`
	Tiers     string       `json:"tiers"`
	Depth     int          `json:"depth"`
	Batch     int          `json:"batch"`
	Passes    int          `json:"passes"`
	Source    string       `json:"source"`
	Direct    bool         `json:"direct"`
	Verify    string       `json:"verify"`
	TokensPS  float64      `json:"tokens_per_s"`
	Resident  float64      `json:"resident_tokens_per_s,omitempty"`
	Stats     stream.Stats `json:"stats"`
	PassStats stream.Stats `json:"last_pass"`
}

func benchStream(ctx context.Context, path string, cmd *cli.Command) (*streamBenchResult, error) {
	poolPath := path
	isPool, err := prefab.IsPool(path)
	if err != nil {
		return nil, fmt.Errorf("bench stream: %w", err)
	}
	if !isPool {
		dir, err := os.MkdirTemp(cmd.String("tmpdir"), "strata-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		poolPath = filepath.Join(dir, "model.pool")
		g, err := gguf.MapShared(path) // read once, possibly larger than memory
		if err != nil {
			return nil, fmt.Errorf("bench stream: %s is neither a pool nor a readable GGUF: %w", path, err)
		}
		log.Info("prefabbing to a temporary pool", "gguf", path, "pool", poolPath)
		err = prefab.WritePool(g, poolPath, prefab.Options{Source: filepath.Base(path), Context: ctx})
		g.Close()
		if err != nil {
			return nil, fmt.Errorf("bench stream: %w", err)
		}
	}
	pool, err := prefab.OpenPool(poolPath)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	n := pool.NumLayers()
	tiers, err := tier.MixTiers(cmd.String("tiers"), n)
	if err != nil {
		return nil, usagef("bench stream: %v", err)
	}
	m, raw, err := benchModel(pool, poolPath)
	if err != nil {
		return nil, err
	}
	defer raw.Close()

	var src tier.Source
	res := &streamBenchResult{
		Model: path, Pool: poolPath, Layers: n, Tiers: cmd.String("tiers"),
		Depth: int(cmd.Int("depth")), Batch: int(cmd.Int("batch")), Passes: int(cmd.Int("passes")),
		Source: cmd.String("source"),
	}
	switch res.Source {
	case "file":
		fs, err := stream.OpenFile(poolPath, stream.FileOptions{
			ChunkBytes: int(cmd.Int("chunk")), QueueDepth: int(cmd.Int("qd")),
			Buffered: cmd.Bool("buffered"), Logger: log,
		})
		if err != nil {
			return nil, err
		}
		defer fs.Close()
		src, res.Direct = fs, fs.Direct()
	case "mmap":
		src = raw
	default:
		return nil, usagef("bench stream: --source %q: want file or mmap", res.Source)
	}
	verify, err := stream.ParseVerifyMode(cmd.String("verify"))
	if err != nil {
		return nil, usagef("bench stream: --verify: %v", err)
	}
	res.Verify = verify.String()
	p, err := stream.New(stream.Options{
		Store: pool, Tiers: tiers, Depth: res.Depth, Source: src, Verify: verify,
	})
	if err != nil {
		return nil, err
	}
	defer p.Close()

	fwd := func(b []model.Step) error { return p.Forward(ctx, m, b) }
	elapsed, err := decodePasses(m, res.Batch, res.Passes, fwd, p.ResetStats)
	if err != nil {
		return nil, fmt.Errorf("bench stream: %w", err)
	}
	res.TokensPS = float64(res.Batch*res.Passes) / elapsed.Seconds()
	res.Stats, res.PassStats = p.Stats(), p.LastPass()
	if cmd.Bool("resident") {
		m.SetLayerSource(nil)
		el, err := decodePasses(m, res.Batch, res.Passes, func(b []model.Step) error { return m.Forward(ctx, b) }, func() {})
		if err != nil {
			return nil, fmt.Errorf("bench stream: resident: %w", err)
		}
		res.Resident = float64(res.Batch*res.Passes) / el.Seconds()
	}
	return res, nil
}

// benchModel builds a model over the pool's globals and (unverified,
// untouched until used) layer views of a mapping of the pool file, so
// building it reads nothing: the streamed passes must not find the layers
// in the page cache because the model was assembled from them.
func benchModel(pool *prefab.Pool, path string) (*model.Model, *stream.MmapSource, error) {
	g, err := pool.Globals()
	if err != nil {
		return nil, nil, err
	}
	raw, err := stream.OpenMmap(path)
	if err != nil {
		return nil, nil, err
	}
	cfg := pool.Config()
	w := &model.Weights{Embed: g.Embed, OutputNorm: g.OutputNorm, Output: g.Output, Layers: make([]model.Layer, pool.NumLayers())}
	if cfg.TiedOutput {
		w.Output = model.Tensor{}
	}
	for i := range w.Layers {
		e := pool.Extent(i)
		l, err := pool.Decode(i, raw.Bytes()[e.Offset:e.Offset+e.Length])
		if err != nil {
			raw.Close()
			return nil, nil, err
		}
		w.Layers[i] = *l
	}
	m, err := model.New(cfg, w)
	if err != nil {
		raw.Close()
		return nil, nil, err
	}
	return m, raw, nil
}

// decodePasses runs one warm-up pass (each sequence's first token) then
// passes timed decode passes of batch sequences, feeding back greedy
// tokens, and returns the time of the timed passes. reset runs between
// warm-up and timing.
func decodePasses(m *model.Model, batch, passes int, fwd func([]model.Step) error, reset func()) (time.Duration, error) {
	steps := make([]model.Step, batch)
	for j := range steps {
		steps[j] = model.Step{Seq: m.NewSequence(passes + 2), Tokens: []int32{int32((j*31 + 1) % m.Config.Vocab)}}
	}
	// The greedy rule of engine/sample, which the scheduler's token choice
	// follows at temperature 0.
	greedy, err := sample.New(sample.Greedy())
	if err != nil {
		return 0, err
	}
	var start time.Time
	for pass := 0; pass <= passes; pass++ {
		if pass == 1 {
			reset()
			start = time.Now()
		}
		if err := fwd(steps); err != nil {
			return 0, fmt.Errorf("pass %d: %w", pass, err)
		}
		for j := range steps {
			steps[j].Tokens = []int32{greedy.Sample(steps[j].Logits[0], nil)}
		}
	}
	return time.Since(start), nil
}

func printStreamBench(out io.Writer, r *streamBenchResult) {
	s := r.Stats
	fmt.Fprintf(out, "model %s (%d layers), tiers %s, depth %d, batch %d, %d passes, source %s (O_DIRECT %v)\n",
		r.Model, r.Layers, r.Tiers, r.Depth, r.Batch, r.Passes, r.Source, r.Direct)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tlayers\tbytes\tbusy\tstall\tGB/s\t")
	for _, row := range []struct {
		name string
		st   stream.StageStats
	}{{"1 read (storage→staging)", s.Read}, {"2 copy (→device slot)", s.Copy}, {"3 compute", s.Compute}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%v\t%.2f\t\n", row.name, row.st.Layers, tier.FormatBytes(row.st.Bytes),
			row.st.Busy.Round(time.Microsecond), row.st.Stall.Round(time.Microsecond), row.st.GBps)
	}
	tw.Flush()
	fmt.Fprintf(out, "wall %v, verify %v, resident %s, streamed %s/pass\n", s.Wall.Round(time.Microsecond),
		s.Verify.Round(time.Microsecond), tier.FormatBytes(s.ResidentBytes), tier.FormatBytes(r.PassStats.StreamedBytes))
	if s.Verify > 0 && s.Read.Busy > 0 {
		// Under --verify always every byte read was hashed: the checksum's
		// rate beside the read stage's says what verifying costs.
		line := fmt.Sprintf("checksums (--verify %s): %.1f%% of the read stage's busy time", r.Verify, 100*s.Verify.Seconds()/s.Read.Busy.Seconds())
		if r.Verify == stream.VerifyAlways.String() {
			line += fmt.Sprintf("; xxh3 at %.2f GB/s against the read's %.2f GB/s", float64(s.Read.Bytes)/s.Verify.Seconds()/1e9, s.Read.GBps)
		}
		fmt.Fprintln(out, line)
	}
	fmt.Fprintf(out, "overlap %.3f, compute utilisation %.3f\n", s.Overlap, s.ComputeUtil)
	fmt.Fprintf(out, "tokens/s %.2f", r.TokensPS)
	if r.Resident > 0 {
		fmt.Fprintf(out, " (resident %.2f, ratio %.3f)", r.Resident, r.TokensPS/r.Resident)
	}
	fmt.Fprintln(out)
}
