// Package quality measures what strata's approximations cost on real text:
// KL divergence, top-1 agreement and perplexity of each pool type and of
// layer skip against the F16 model, and how often each speculative
// drafter's guess is the model's own choice. `strata bench quality` runs it.
package quality

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// ErrBadOptions is wrapped by Run for options it cannot use.
var ErrBadOptions = errors.New("bad options")

// Options say what to measure on which text.
type Options struct {
	// Model is the reference: a GGUF (F16, or whatever the model was
	// published in); every other figure is against its distribution.
	Model string
	// Draft is a draft model of the same vocabulary, for its acceptance.
	Draft string
	// Types are pool types to compare (prefab's q8_0, q4_k, int8).
	Types []string
	// Text is a directory of held-out text: its files matching Glob,
	// sorted by path, are read from the last backwards until Tokens are
	// gathered. Calibration text (which layers to skip) comes from the
	// files that do not match, from the first on.
	Text string
	Glob string
	// Tokens of held-out text, evaluated in windows of Window tokens.
	Tokens, Window int
	// Skip are the numbers of layers to skip (the most similar first, by
	// model.LayerCosines on the calibration text).
	Skip []int
	// SelfLayers is the self-drafter's depth: the model's first
	// SelfLayers layers, then the output head (0: a quarter of them).
	SelfLayers int
	// SpeedTokens is how many greedy tokens each layer-skip count's decode
	// speed is timed over (the engine's CPU backend, every layer
	// resident); 0 means 64, negative leaves speed out.
	SpeedTokens int
	// WorkDir receives the pool files; "" means a temporary directory.
	WorkDir  string
	Progress func(string)
}

// Report is the run's result.
type Report struct {
	Model   string    `json:"model"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Text    Text      `json:"text"`
	// Perplexity is the reference's on the text.
	Perplexity float64 `json:"perplexity"`
	// TokensPerSecond is the CPU backend's decode rate with every layer
	// (the base of the layer-skip variants' speed; 0 when not timed).
	TokensPerSecond float64   `json:"tokens_per_second,omitempty"`
	Variants        []Variant `json:"variants"`
	Drafters        []Drafter `json:"drafters"`
	// Cosines are each layer's mean cosine between the hidden state
	// entering and leaving it, on the calibration text.
	Cosines []float64 `json:"layer_cosines"`
}

// Text says which held-out text was read.
type Text struct {
	Dir         string `json:"dir"`
	Files       int    `json:"files"`
	First       string `json:"first_file"`
	Last        string `json:"last_file"`
	Tokens      int    `json:"tokens"`
	Windows     int    `json:"windows"`
	Calibration string `json:"calibration"`
}

// Variant is one approximation of the reference: a pool type or skipped
// layers.
type Variant struct {
	Name string `json:"name"`
	// KL is the mean KL divergence (nats) of the variant's next-token
	// distribution from the reference's; Top1 how often their arg maxes
	// agree; Perplexity the variant's own on the text.
	KL         float64 `json:"kl"`
	Top1       float64 `json:"top1"`
	Perplexity float64 `json:"perplexity"`
	// Skipped lists the layers left out (layer skip).
	Skipped []int `json:"skipped,omitempty"`
	// TokensPerSecond is the CPU backend's decode rate with those layers
	// left out (layer skip; 0 when not timed).
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
}

// Drafter is one drafter's acceptance on the text, teacher-forced: at
// every position it guesses the next token from the true prefix.
type Drafter struct {
	Name string `json:"name"`
	// Greedy is how often its guess is the reference's arg max (the
	// chance a guess is accepted at temperature 0); Sampled the mean
	// reference probability of its guess (the chance at temperature 1).
	// Coverage is the share of positions where it guessed at all.
	Greedy   float64 `json:"greedy"`
	Sampled  float64 `json:"sampled"`
	Coverage float64 `json:"coverage"`
	// PerPass is the tokens one verify pass yields at Greedy's rate with
	// 4 guesses: (1 − a⁵)/(1 − a).
	PerPass float64 `json:"tokens_per_pass_k4"`
}

// Run measures.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if o.Model == "" || o.Text == "" {
		return nil, fmt.Errorf("%w: a model and a text directory are needed", ErrBadOptions)
	}
	if o.Tokens <= 0 {
		o.Tokens = 4096
	}
	if o.Window <= 1 {
		o.Window = 512
	}
	if o.Glob == "" {
		o.Glob = "*_test.go"
	}
	progress := func(f string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(f, a...))
		}
	}
	ref, err := model.Open(o.Model)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	defer ref.Close()
	gf, err := gguf.Map(o.Model)
	if err != nil {
		return nil, err
	}
	defer gf.Close()
	voc, err := tokenizer.VocabFromGGUF(gf.File)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.New(voc)
	if err != nil {
		return nil, err
	}
	r := &Report{Model: o.Model, Started: start}
	windows, calib, err := readText(o, tok, &r.Text)
	if err != nil {
		return nil, err
	}
	progress("held-out text: %d tokens of %d files (%s … %s), %d windows", r.Text.Tokens, r.Text.Files, r.Text.First, r.Text.Last, len(windows))

	// The variants: pool types through the engine (engine/gemv's
	// kernels, as the CPU backend runs them), then the F16 model with
	// layers skipped.
	type variant struct {
		name    string
		m       *model.Model
		skipped []int
		acc     stats
		close   func()
	}
	var vs []*variant
	defer func() {
		for _, v := range vs {
			v.close()
		}
	}()
	work := o.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "strata-quality-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(work)
	}
	for _, typ := range o.Types {
		progress("pool type %s", typ)
		p := filepath.Join(work, "model-"+typ+".pool")
		if err := prefab.WritePool(gf, p, prefab.Options{Type: typ, Source: filepath.Base(o.Model), Context: ctx}); err != nil {
			return nil, fmt.Errorf("pool %s: %w", typ, err)
		}
		e, err := engine.OpenWith(ctx, p, engine.Options{Backend: engine.BackendCPU, Context: o.Window})
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", typ, err)
		}
		vs = append(vs, &variant{name: typ + " (" + e.BackendInfo().Kernels + ")", m: e.Model, close: func() { e.Close() }})
	}
	r.Cosines, err = ref.LayerCosines(ctx, calib)
	if err != nil {
		return nil, err
	}
	order := model.BySimilarity(r.Cosines)
	for _, n := range o.Skip {
		if n <= 0 || n >= ref.Config.Layers {
			return nil, fmt.Errorf("%w: skipping %d of %d layers", ErrBadOptions, n, ref.Config.Layers)
		}
		m, err := model.Open(o.Model)
		if err != nil {
			return nil, err
		}
		skipped := slices.Sorted(slices.Values(order[:n]))
		if err := m.SetSkip(skipped); err != nil {
			m.Close()
			return nil, err
		}
		vs = append(vs, &variant{name: fmt.Sprintf("skip %d", n), m: m, skipped: skipped, close: func() { m.Close() }})
	}

	// The drafters: the draft model, the model's own first layers, and
	// prompt lookup.
	type drafter struct {
		name                  string
		m                     *model.Model // nil for lookup
		greedy, sampled, seen float64
		close                 func()
	}
	var ds []*drafter
	defer func() {
		for _, d := range ds {
			d.close()
		}
	}()
	if o.Draft != "" {
		m, err := model.Open(o.Draft)
		if err != nil {
			return nil, fmt.Errorf("draft: %w", err)
		}
		if m.Config.Vocab != ref.Config.Vocab {
			m.Close()
			return nil, fmt.Errorf("%w: draft vocabulary %d, the model's %d", ErrBadOptions, m.Config.Vocab, ref.Config.Vocab)
		}
		ds = append(ds, &drafter{name: "draft model " + filepath.Base(o.Draft), m: m, close: func() { m.Close() }})
	}
	self := o.SelfLayers
	if self <= 0 {
		self = max(1, ref.Config.Layers/4)
	}
	if self < ref.Config.Layers {
		m, err := model.Open(o.Model)
		if err != nil {
			return nil, err
		}
		var rest []int
		for l := self; l < ref.Config.Layers; l++ {
			rest = append(rest, l)
		}
		if err := m.SetSkip(rest); err != nil {
			m.Close()
			return nil, err
		}
		ds = append(ds, &drafter{name: fmt.Sprintf("self, first %d layers", self), m: m, close: func() { m.Close() }})
	}
	lookup := &drafter{name: "prompt lookup (1-4-grams)", close: func() {}}
	ds = append(ds, lookup)

	var refAcc stats
	positions := 0
	for wi, w := range windows {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		progress("window %d of %d", wi+1, len(windows))
		rl, err := logits(ctx, ref, w)
		if err != nil {
			return nil, err
		}
		rp := make([][]float64, len(rl))
		for i, l := range rl {
			rp[i] = logSoftmax(l)
			refAcc.nll -= rp[i][w[i+1]]
		}
		positions += len(rl)
		for _, v := range vs {
			vl, err := logits(ctx, v.m, w)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			for i, l := range vl {
				v.acc.add(rp[i], logSoftmax(l), w[i+1])
			}
		}
		for _, d := range ds {
			guess := func(i int, g int32) {
				d.seen++
				if g == sample.Argmax(rl[i]) {
					d.greedy++
				}
				d.sampled += math.Exp(rp[i][g])
			}
			if d.m == nil {
				for i := range rl {
					if g, _ := (sched.Lookup{MinN: 1, MaxN: 4}).Propose(ctx, w[:i+1], 1); len(g) > 0 {
						guess(i, g[0])
					}
				}
				continue
			}
			dl, err := logits(ctx, d.m, w)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			for i, l := range dl {
				guess(i, sample.Argmax(l))
			}
		}
	}
	n := float64(positions)
	r.Perplexity = math.Exp(refAcc.nll / n)
	for _, v := range vs {
		r.Variants = append(r.Variants, Variant{Name: v.name, KL: v.acc.kl / n, Top1: v.acc.top1 / n,
			Perplexity: math.Exp(v.acc.nll / n), Skipped: v.skipped})
	}
	if o.SpeedTokens >= 0 && len(o.Skip) > 0 {
		progress("decode speed with layers skipped")
		sets := [][]int{nil}
		for _, v := range vs {
			if v.skipped != nil {
				sets = append(sets, v.skipped)
			}
		}
		tps, err := skipSpeeds(ctx, o.Model, sets, cmp.Or(o.SpeedTokens, 64))
		if err != nil {
			return nil, err
		}
		r.TokensPerSecond = tps[0]
		k := 1
		for i := range r.Variants {
			if r.Variants[i].Skipped != nil {
				r.Variants[i].TokensPerSecond = tps[k]
				k++
			}
		}
	}
	for _, d := range ds {
		dr := Drafter{Name: d.name, Coverage: d.seen / n}
		if d.seen > 0 {
			dr.Greedy, dr.Sampled = d.greedy/d.seen, d.sampled/d.seen
		}
		a := dr.Greedy
		dr.PerPass = 5
		if a < 1 {
			dr.PerPass = (1 - math.Pow(a, 5)) / (1 - a)
		}
		r.Drafters = append(r.Drafters, dr)
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// skipSpeeds times the CPU backend's greedy decode of tokens tokens with
// each set of layers left out (nil: none), on one engine: every
// end-of-generation token is barred so each run decodes all of them,
// runs go round the sets three times (after a warm-up request that maps
// the file's pages in) and each set keeps its fastest, so a busy moment
// of the machine does not land on one set alone.
func skipSpeeds(ctx context.Context, path string, sets [][]int, tokens int) ([]float64, error) {
	e, err := engine.OpenWith(ctx, path, engine.Options{Backend: engine.BackendCPU, Context: tokens + 16})
	if err != nil {
		return nil, fmt.Errorf("decode speed: %w", err)
	}
	defer e.Close()
	bias := map[int32]float32{}
	for id := range int32(e.Model.Config.Vocab) {
		if e.Tok.IsEOG(id) {
			bias[id] = -1e9
		}
	}
	prompt := e.Tok.Encode("func main() {", true, false)
	req := sched.Request{Prompt: prompt, MaxTokens: 4, Sample: sample.Greedy(), LogitBias: bias}
	if _, err := sched.Generate(ctx, e.Backend(), e.Tok, req, nil); err != nil {
		return nil, fmt.Errorf("decode speed: %w", err)
	}
	req.MaxTokens = tokens
	out := make([]float64, len(sets))
	for range 3 {
		for i, set := range sets {
			if err := e.Model.SetSkip(set); err != nil {
				return nil, fmt.Errorf("decode speed: %w", err)
			}
			res, err := sched.Generate(ctx, e.Backend(), e.Tok, req, nil)
			if err != nil {
				return nil, fmt.Errorf("decode speed, %d layers skipped: %w", len(set), err)
			}
			if res.DecodeTime > 0 && res.CompletionTokens > 1 {
				out[i] = max(out[i], float64(res.CompletionTokens-1)/res.DecodeTime.Seconds())
			}
		}
	}
	return out, nil
}

// stats accumulate a variant's divergence from the reference.
type stats struct{ kl, top1, nll float64 }

func (s *stats) add(ref, got []float64, next int32) {
	var kl float64
	for i, lp := range ref {
		if p := math.Exp(lp); p > 0 {
			kl += p * (lp - got[i])
		}
	}
	s.kl += kl
	if argmax64(ref) == argmax64(got) {
		s.top1++
	}
	s.nll -= got[next]
}

func argmax64(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// logSoftmax is the log-softmax of l in float64.
func logSoftmax(l []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range l {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range l {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = float64(v) - lse
	}
	return out
}

// logits runs window w through m as one prompt and returns the rows that
// predict w[1:].
func logits(ctx context.Context, m *model.Model, w []int32) ([][]float32, error) {
	seq := m.NewSequence(len(w))
	defer seq.Close()
	b := []model.Step{{Seq: seq, Tokens: w[:len(w)-1], AllLogits: true}}
	if err := m.Forward(ctx, b); err != nil {
		return nil, err
	}
	return b[0].Logits, nil
}

// readText gathers the held-out windows (the last matching files first)
// and the calibration tokens (the first non-matching files).
func readText(o Options, tok *tokenizer.Tokenizer, t *Text) (windows [][]int32, calib []int32, err error) {
	var held, other []string
	err = filepath.WalkDir(o.Text, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ok, _ := filepath.Match(o.Glob, d.Name()); ok {
			held = append(held, p)
		} else if strings.HasSuffix(d.Name(), filepath.Ext(o.Glob)) {
			other = append(other, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("text %s: %w", o.Text, err)
	}
	sort.Strings(held)
	sort.Strings(other)
	if len(held) == 0 || len(other) == 0 {
		return nil, nil, fmt.Errorf("%w: text %s has %d files matching %q and %d others; both are needed", ErrBadOptions, o.Text, len(held), o.Glob, len(other))
	}
	t.Dir = o.Text
	var cur []int32
	for i := len(held) - 1; i >= 0 && t.Tokens < o.Tokens; i-- {
		b, err := os.ReadFile(held[i])
		if err != nil {
			return nil, nil, err
		}
		ids := tok.Encode(string(b), true, false)
		t.Files++
		if t.Last == "" {
			t.Last = rel(o.Text, held[i])
		}
		t.First = rel(o.Text, held[i])
		for len(ids) > 0 && t.Tokens < o.Tokens {
			take := min(len(ids), o.Window-len(cur), o.Tokens-t.Tokens)
			cur = append(cur, ids[:take]...)
			ids = ids[take:]
			t.Tokens += take
			if len(cur) == o.Window {
				windows = append(windows, cur)
				cur = nil
			}
		}
	}
	if len(cur) > 1 {
		windows = append(windows, cur)
	}
	t.Windows = len(windows)
	for _, p := range other {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		calib = append(calib, tok.Encode(string(b), true, false)...)
		if len(calib) >= o.Window {
			calib = calib[:o.Window]
			t.Calibration = fmt.Sprintf("%d tokens from %s on", len(calib), rel(o.Text, other[0]))
			break
		}
	}
	return windows, calib, nil
}

func rel(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return r
	}
	return p
}
