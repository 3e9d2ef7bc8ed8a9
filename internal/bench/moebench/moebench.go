// Package moebench measures a mixture-of-experts model's decode with its
// experts placed one by one (`strata bench moe`): for each memory budget
// and batch size, tokens per second, the expert bytes read from storage
// per token against the bytes the routed experts hold (what reading every
// routed expert would move), how expert uses were served, and the time per
// token against the limit the measured links set.
package moebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/safefs"
	"github.com/strata-llm/strata/internal/synth"
)

// ErrBadOptions is wrapped by Run's errors about its options.
var ErrBadOptions = errors.New("bad options")

// Options select what Run measures.
type Options struct {
	// Model is a mixture-of-experts GGUF or pool; a GGUF is prefabbed
	// into Dir first (experts are read one by one from a pool only).
	// Empty means a synthetic model of Arch, Shape and Type (seed 1)
	// written to Dir.
	Model             string
	Arch, Shape, Type string
	Dir               string
	// Budgets are the memory budgets to plan the model into; 0 stands
	// for "everything resident".
	Budgets []int64
	// Batches are the sequence counts decoded together (default 1 and 8).
	Batches []int
	// Tokens is how many tokens each sequence decodes per measurement,
	// after one warm-up pass (default 32).
	Tokens int
	// Rounds is how many times a budget with experts on storage is
	// measured with the reads ahead and without (default 1); each round
	// swaps the order (ahead first, then without; then without first),
	// since a storage's caches can favour whichever reads second.
	Rounds int
	// Zipf, when above 0, skews the routing (model.SetRouterSkew): random
	// weights route almost uniformly, the worst case for a cache.
	Zipf float64
	// Links are the link speeds the limit is taken from; nil measures
	// them (storage on the pool's file, compute on the CPU's GEMV).
	Links *tier.Links
	// Progress, when set, receives a line for each phase.
	Progress func(msg string)
}

func (o *Options) fill() error {
	if o.Model == "" {
		if o.Arch == "" {
			o.Arch = "qwen3moe"
		}
		if o.Shape == "" {
			o.Shape = "tiny"
		}
		if o.Type == "" {
			o.Type = "q4_k_m"
		}
	}
	if len(o.Budgets) == 0 {
		o.Budgets = []int64{0}
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1, 8}
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Tokens == 0 {
		o.Tokens = 32
	}
	for _, b := range o.Budgets {
		if b < 0 {
			return fmt.Errorf("%w: budget %d", ErrBadOptions, b)
		}
	}
	for _, b := range o.Batches {
		if b < 1 {
			return fmt.Errorf("%w: batch %d", ErrBadOptions, b)
		}
	}
	if o.Tokens < 1 || o.Zipf < 0 || o.Rounds < 1 {
		return fmt.Errorf("%w: %d tokens, %d rounds, Zipf exponent %v", ErrBadOptions, o.Tokens, o.Rounds, o.Zipf)
	}
	if o.Dir == "" {
		d, err := safefs.CacheDir("synth")
		if err != nil {
			return err
		}
		o.Dir = d
	}
	return nil
}

func (o *Options) progress(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

// Point is one budget and batch size measured.
type Point struct {
	// Budget is the memory budget (0: everything resident).
	Budget int64 `json:"budget"`
	Batch  int   `json:"batch"`
	// Experts of the model, how many were resident at the end and their
	// bytes.
	Experts       int   `json:"experts"`
	Resident      int   `json:"resident"`
	ResidentBytes int64 `json:"resident_bytes"`
	// TokensPerSecond counts every sequence's tokens.
	TokensPerSecond float64 `json:"tokens_per_second"`
	// ReadPerToken is the expert bytes read from storage per token;
	// RoutedPerToken the bytes the experts each token was routed to hold
	// (layers × experts used × an expert's size).
	ReadPerToken   float64 `json:"read_per_token"`
	RoutedPerToken float64 `json:"routed_per_token"`
	// Hit is the share of expert uses that read nothing.
	Hit float64 `json:"hit"`
	// Ahead is whether the experts predicted for the next layer were read
	// ahead; ReadsAheadPerToken counts those reads per token, AheadUsed is
	// the share of them a layer then used, and AheadServed the share of the
	// uses that read from storage which a read ahead served. Round is the
	// comparison's round (Options.Rounds).
	Ahead              bool    `json:"ahead"`
	Round              int     `json:"round"`
	ReadsAheadPerToken float64 `json:"reads_ahead_per_token"`
	AheadUsed          float64 `json:"ahead_used"`
	AheadServed        float64 `json:"ahead_served"`
	// Time per token, and the limit the links set: the storage reads at
	// the storage speed and the bytes the passes compute on at the CPU's
	// GEMV rate, one after the other in a pass, or the slower of the two
	// where reads start ahead and so overlap the compute; Ratio is their
	// quotient.
	TimePerToken  time.Duration `json:"time_per_token_ns"`
	LimitPerToken time.Duration `json:"limit_per_token_ns"`
	Ratio         float64       `json:"ratio"`
}

// Report is a run's result.
type Report struct {
	Command string     `json:"command,omitempty"`
	Model   string     `json:"model"`
	Zipf    float64    `json:"zipf"`
	Links   tier.Links `json:"links"`
	Points  []Point    `json:"points"`
}

// Run measures every budget and batch size of o. A budget the model does
// not fit in is an error naming it; the report then holds the points
// measured before it.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	pool, err := o.pool(ctx)
	if err != nil {
		return nil, err
	}
	p, err := prefab.OpenPool(pool)
	if err != nil {
		return nil, err
	}
	cfg, sizes := p.Config(), p.Sizes()
	p.Close()
	if !cfg.MoE() {
		return nil, fmt.Errorf("%w: %s is not a mixture-of-experts model", ErrBadOptions, pool)
	}
	r := &Report{Model: pool, Zipf: o.Zipf}
	if o.Links != nil {
		r.Links = *o.Links
	} else {
		o.progress("measuring the links")
		if r.Links, err = tier.MeasureLinks(ctx, tier.MeasureOptions{Path: pool, ComputeType: sizes.Type, Kernel: engine.CPUKernel}); err != nil {
			return nil, err
		}
	}
	for _, budget := range o.Budgets {
		for _, batch := range o.Batches {
			// With the reads ahead, and where they read, the same with
			// reads only when a layer asks: what reading ahead gains, in
			// one run; rounds alternate the order.
		rounds:
			for round := range o.Rounds {
				order := []bool{true, false}
				if round%2 == 1 {
					order = []bool{false, true}
				}
				for _, ahead := range order {
					o.progress("budget %s, batch %d, round %d, reads ahead %v", budgetName(budget), batch, round+1, ahead)
					pt, err := o.measure(ctx, pool, sizes, r.Links, budget, batch, ahead)
					if err != nil {
						return r, fmt.Errorf("budget %s, batch %d, reads ahead %v: %w", budgetName(budget), batch, ahead, err)
					}
					pt.Round = round + 1
					r.Points = append(r.Points, pt)
					if ahead && pt.ReadsAheadPerToken == 0 {
						break rounds // nothing on storage: nothing to compare
					}
				}
			}
		}
	}
	return r, nil
}

func budgetName(n int64) string {
	if n == 0 {
		return "all resident"
	}
	return tier.FormatBytes(n)
}

// pool returns the pool to measure: o.Model when it is one, else a pool
// prefabbed into o.Dir from o.Model or a synthetic model (kept there for
// the next run).
func (o *Options) pool(ctx context.Context) (string, error) {
	src := o.Model
	if src != "" {
		if ok, err := prefab.IsPool(src); err != nil || ok {
			return src, err
		}
	} else {
		src = filepath.Join(o.Dir, fmt.Sprintf("%s-%s-%s-seed1.gguf", o.Arch, o.Shape, o.Type))
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			o.progress("writing the synthetic %s %s %s model to %s", o.Arch, o.Shape, o.Type, src)
			if err := synth.Write(src, synth.Options{Arch: o.Arch, Shape: o.Shape, Type: o.Type, Seed: 1}); err != nil {
				return "", err
			}
		}
	}
	dst := filepath.Join(o.Dir, filepath.Base(src)+".pool")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	o.progress("prefabbing %s into %s", src, dst)
	g, err := gguf.MapShared(src) // read once to write the pool
	if err != nil {
		return "", err
	}
	defer g.Close()
	if err := prefab.WritePool(g, dst, prefab.Options{Context: ctx, Source: filepath.Base(src)}); err != nil {
		return "", err
	}
	return dst, nil
}

// measure decodes o.Tokens tokens for batch sequences of the pool planned
// into budget (everything resident for 0).
//
// With ahead set the model reads the experts it predicts for the next
// layer ahead (engine.ReadAheadOn), else never (engine.ReadAheadOff).
func (o *Options) measure(ctx context.Context, pool string, sizes tier.Sizes, links tier.Links, budget int64, batch int, ahead bool) (Point, error) {
	readAhead := engine.ReadAheadOff
	if ahead {
		readAhead = engine.ReadAheadOn
	}
	host := budget
	if host == 0 {
		host = 1 << 50
	}
	e, err := engine.OpenWith(ctx, pool, engine.Options{Backend: engine.BackendCPU, HostBudget: host,
		Context: o.Tokens + 2, Batch: batch, Links: &links, ExpertReadAhead: readAhead})
	if err != nil {
		return Point{}, err
	}
	defer e.Close()
	c := e.Model.Config
	if o.Zipf > 0 {
		if err := e.Model.SetRouterSkew(o.Zipf); err != nil {
			return Point{}, err
		}
	}
	seqs := make([]*model.Sequence, batch)
	steps := make([]model.Step, batch)
	for i := range seqs {
		seqs[i] = e.Model.NewSequence(o.Tokens + 2)
		defer seqs[i].Close()
		// Each sequence starts from a different token, so the batch does
		// not route as one.
		steps[i] = model.Step{Seq: seqs[i], Tokens: []int32{int32((i*7919 + 1) % c.Vocab)}}
	}
	pass := func() error {
		if err := e.Model.Forward(ctx, steps); err != nil {
			return err
		}
		for i := range steps {
			steps[i].Tokens = []int32{argmax(steps[i].Logits[0])}
		}
		return nil
	}
	if err := pass(); err != nil { // warm-up
		return Point{}, err
	}
	before, _ := e.ExpertStats()
	t0 := time.Now()
	for range o.Tokens {
		if err := pass(); err != nil {
			return Point{}, err
		}
	}
	wall := time.Since(t0)
	after, _ := e.ExpertStats()
	x, _ := e.Experts()

	var expertBytes, cores int64
	n := 0
	for _, l := range sizes.Experts {
		for _, b := range l {
			expertBytes += b
			n++
		}
	}
	for _, b := range sizes.Layers {
		cores += b
	}
	avg := float64(expertBytes) / float64(n)
	tokens := float64(batch * o.Tokens)
	read := float64(after.ReadBytes - before.ReadBytes)
	served := float64((after.Resident - before.Resident) + (after.Buffered - before.Buffered))
	if x.Stats.Uses() == 0 {
		// Everything resident: no store counted the uses; each pass's
		// distinct experts are at most every routed one.
		served = float64(c.Layers*c.ExpertsUsed) * tokens
	}
	prefetched := float64(after.Prefetched - before.Prefetched)
	aheadReads := float64(after.PrefetchReads - before.PrefetchReads)
	uses := served + prefetched + float64(after.Read-before.Read)
	pt := Point{
		Budget: budget, Batch: batch, Ahead: ahead, Experts: x.Experts, Resident: x.Resident, ResidentBytes: x.ResidentBytes,
		TokensPerSecond:    tokens / wall.Seconds(),
		ReadPerToken:       read / tokens,
		RoutedPerToken:     float64(c.Layers*c.ExpertsUsed) * avg,
		Hit:                served / uses,
		ReadsAheadPerToken: aheadReads / tokens,
		TimePerToken:       time.Duration(float64(wall) / tokens),
	}
	if aheadReads > 0 {
		pt.AheadUsed = prefetched / aheadReads
	}
	if uses > served {
		pt.AheadServed = prefetched / (uses - served)
	}
	// Per pass: the reads at storage speed and the layers, the output
	// and every expert the pass used (read or not) at the GEMV rate; one
	// after the other, or overlapped where the reads start ahead.
	passes := float64(o.Tokens)
	reads, compute := read/passes/links.StorageToHost, (float64(cores+sizes.Output)+uses/passes*avg)/links.Compute
	perPass := reads + compute
	if ahead {
		perPass = max(reads, compute)
	}
	pt.LimitPerToken = time.Duration(perPass / float64(batch) * float64(time.Second))
	if pt.LimitPerToken > 0 {
		pt.Ratio = float64(pt.TimePerToken) / float64(pt.LimitPerToken)
	}
	return pt, nil
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// WriteText prints the report as a table.
func (r *Report) WriteText(w io.Writer) error {
	skew := "the model's own routing (random weights: near uniform, the worst case for residency)"
	if r.Zipf > 0 {
		skew = fmt.Sprintf("routing skewed by a Zipf law of exponent %g over each layer's experts (a stand-in for trained routers)", r.Zipf)
	}
	fmt.Fprintf(w, "%s\n%s\nlinks: storage %s, compute %s\n\n", r.Model, skew, tier.FormatRate(r.Links.StorageToHost), tier.FormatRate(r.Links.Compute))
	fmt.Fprintf(w, "%-14s %5s %9s %5s %6s %10s %12s %12s %6s %11s %12s %12s %6s\n", "budget", "batch", "resident", "round", "ahead", "tokens/s", "read/token",
		"routed/tok", "hit", "ahead used", "time/token", "limit", "ratio")
	for _, p := range r.Points {
		ahead, used := "no", "-"
		if p.Ahead {
			ahead = "yes"
			if p.ReadsAheadPerToken > 0 {
				used = fmt.Sprintf("%.2f", p.AheadUsed)
			}
		}
		_, err := fmt.Fprintf(w, "%-14s %5d %4d/%-4d %5d %6s %10.2f %12s %12s %6.2f %11s %12v %12v %6.2f\n", budgetName(p.Budget), p.Batch, p.Resident, p.Experts,
			p.Round, ahead, p.TokensPerSecond, tier.FormatBytes(int64(p.ReadPerToken)), tier.FormatBytes(int64(p.RoutedPerToken)), p.Hit, used,
			p.TimePerToken.Round(time.Microsecond), p.LimitPerToken.Round(time.Microsecond), p.Ratio)
		if err != nil {
			return err
		}
	}
	return nil
}
