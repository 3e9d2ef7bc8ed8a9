// Command routing records a mixture-of-experts model's routing over a long
// greedy decode and replays it against ways of keeping the device's experts
// placed, to choose the serving adapter's window by the routing a real
// generation makes rather than by a guess.
//
//	go run ./lab/moe/routing trace -model M -n 1024 -o trace.json   (CPU backend)
//	go run ./lab/moe/routing sim -trace trace.json -device 5.79GiB
//
// trace: the calibration text's routing as the engine counts it at load
// (its two halves), then a prompt and n greedy tokens, the counts taken
// every -every tokens. sim: the device placed from the calibration as the
// engine places it (tier.ExpertPlan.PlaceOnDevice, one half placing, the
// other held out), then each policy replayed over the decode, a round
// wherever engine/adapt.go would look (every 16 tokens); it prints the
// device hit per window of 128 tokens and the experts moved.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tier"
)

// Trace is a recorded routing.
type Trace struct {
	Model string        `json:"model"`
	Used  int           `json:"used"`
	Sizes [][]int64     `json:"sizes"`
	Calib [2][][]uint64 `json:"calib"` // the calibration text's halves
	Every int           `json:"every"`
	// Snaps are the counts since the decode began (the prompt's first),
	// after the prompt (Snaps[0]) and every Every tokens after it.
	Snaps [][][]uint64 `json:"snaps"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: routing trace|sim [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "trace":
		err = trace(os.Args[2:])
	case "sim":
		err = sim(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "routing:", err)
		os.Exit(1)
	}
}

func trace(args []string) error {
	fs := flag.NewFlagSet("trace", flag.ExitOnError)
	path := fs.String("model", "", "MoE GGUF")
	n := fs.Int("n", 1024, "tokens to decode")
	every := fs.Int("every", 16, "tokens between snapshots")
	prompt := fs.String("prompt", "The history of the printing press begins in the fifteenth century, when", "prompt")
	calib := fs.String("calib", "engine/calib/sample.txt", "the engine's calibration text")
	out := fs.String("o", "trace.json", "output")
	fs.Parse(args)
	ctx := context.Background()
	text, err := os.ReadFile(*calib)
	if err != nil {
		return err
	}
	f, err := gguf.ReadHeader(*path)
	if err != nil {
		return err
	}
	sizes, cfg, err := prefab.SizesFromGGUF(f, prefab.TypeKeep)
	if err != nil {
		return err
	}
	e, err := engine.OpenWith(ctx, *path, engine.Options{Backend: engine.BackendCPU, Context: 2048, Logger: hclog.NewNullLogger()})
	if err != nil {
		return err
	}
	defer e.Close()
	b := e.Backend()
	tr := Trace{Model: *path, Used: cfg.ExpertsUsed, Sizes: sizes.Experts, Every: *every}
	// The calibration as the engine runs it: 256 tokens in steps of 64,
	// the halves counted apart.
	toks := e.Tok.Encode(string(text), true, false)
	toks = toks[:min(len(toks), 256)]
	seq, err := b.NewSequence(len(toks))
	if err != nil {
		return err
	}
	c0 := e.ExpertCounts()
	var mid [][]uint64
	for lo := 0; lo < len(toks); lo += 64 {
		if mid == nil && lo >= len(toks)/2 {
			mid = e.ExpertCounts()
		}
		if err := b.Forward(ctx, []model.Step{{Seq: seq, Tokens: toks[lo:min(lo+64, len(toks))]}}); err != nil {
			return err
		}
	}
	c1 := e.ExpertCounts()
	tr.Calib = [2][][]uint64{tier.CountsSince(c0, mid), tier.CountsSince(mid, c1)}
	seq.Close()

	ids := e.Tok.Encode(*prompt, true, false)
	seq, err = b.NewSequence(len(ids) + *n + 1)
	if err != nil {
		return err
	}
	defer seq.Close()
	start := e.ExpertCounts()
	st := model.Step{Seq: seq, Tokens: ids, Prompt: true}
	for i := 0; i <= *n; i++ {
		batch := []model.Step{st}
		if err := b.Forward(ctx, batch); err != nil {
			return err
		}
		st = batch[0]
		if i%*every == 0 {
			tr.Snaps = append(tr.Snaps, tier.CountsSince(start, e.ExpertCounts()))
			fmt.Fprintf(os.Stderr, "\r%d tokens", i)
		}
		st = model.Step{Seq: seq, Tokens: []int32{sample.Argmax(st.Logits[0])}, Logits: st.Logits}
	}
	fmt.Fprintln(os.Stderr)
	js, err := json.Marshal(tr)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, js, 0o644)
}

// policy is one way of keeping the device's experts placed: look is called
// every 16 tokens with the counts since the decode began.
type policy interface {
	name() string
	look(now [][]uint64)
}

// windowed is engine/adapt.go's round: a window of at least window
// tokens held out against a history of the windows before (keep of each
// window's weight kept at each window after it; 0: the window before
// alone), up to swaps moves a round, capped rounds going on.
type windowed struct {
	label            string
	window           uint64
	keepNum, keepDen uint64
	swaps            int
	first            uint64 // when > 0, the window until the first round
	sizes            [][]int64
	cost             tier.DeviceCost
	plan             *tier.ExpertPlan
	last, hist       [][]uint64
	more             bool
	moved            int
	rounds           int           // looks that weighed a move
	spent            time.Duration // in DeviceSwaps
}

func (w *windowed) name() string { return w.label }

func (w *windowed) tokens(c [][]uint64) uint64 {
	var n uint64
	for _, l := range c {
		for _, x := range l {
			n += x
		}
	}
	return n / uint64(w.cost.Used*len(c))
}

func (w *windowed) fold(win, now [][]uint64) {
	if w.keepDen == 0 {
		w.hist, w.last = win, now
		return
	}
	for l := range w.hist {
		for e := range w.hist[l] {
			w.hist[l][e] = w.hist[l][e] * w.keepNum / w.keepDen
		}
	}
	w.hist, w.last = tier.AddCounts(w.hist, win), now
}

func (w *windowed) look(now [][]uint64) {
	win := tier.CountsSince(w.last, now)
	want := w.window
	if w.first > 0 && w.rounds == 0 {
		want = w.first
	}
	if !w.more && w.tokens(win) < want {
		return
	}
	if w.hist == nil {
		w.hist, w.last = win, now
		return
	}
	cost := w.cost
	cost.Holdout = win
	t0 := time.Now()
	swaps := w.plan.DeviceSwaps(w.sizes, w.hist, cost, w.swaps)
	w.spent += time.Since(t0)
	w.rounds++
	both := tier.AddCounts(w.hist, win)
	w.more = len(swaps) == w.swaps
	if !w.more {
		w.fold(win, now)
	}
	w.plan.ApplyDeviceSwaps(w.sizes, swaps, both)
	w.moved += len(swaps)
}

// store is engine/experts.go's host store (the CPU's resident experts,
// the others read from storage): use counts from the calibration, halved
// every decay tokens; every every tokens up to swaps storage experts used
// more than margin times as often as the least used resident one large
// enough take its place (promotions applied at once here; the engine's
// read in the background and land a few passes later).
type store struct {
	label               string
	every, decay, swaps int
	margin              float64
	sizes               [][]int64
	res                 [][]bool
	uses                [][]float64
	last                [][]uint64
	tokens              int
	moved               int
}

func newStore(label string, sizes [][]int64, calib [][]uint64, budget int64, every, decay, swaps int, margin float64) *store {
	st := &store{label: label, every: every, decay: decay, swaps: swaps, margin: margin, sizes: sizes}
	st.res = make([][]bool, len(sizes))
	st.uses = make([][]float64, len(sizes))
	for l := range sizes {
		st.res[l] = make([]bool, len(sizes[l]))
		st.uses[l] = make([]float64, len(sizes[l]))
		for e := range sizes[l] {
			st.uses[l][e] = float64(calib[l][e])
		}
	}
	tier.FillExperts(tier.RankExperts(sizes, calib), sizes, st.res, budget)
	return st
}

func (st *store) name() string { return st.label }

// look takes the counts every 16 tokens: the store's passes in between
// count their picks and, at its own points, decay and swap.
func (st *store) look(now [][]uint64) {
	win := tier.CountsSince(st.last, now)
	st.last = now
	for l := range win {
		for e, c := range win[l] {
			st.uses[l][e] += float64(c)
		}
	}
	for range 16 {
		st.tokens++
		if st.tokens%st.decay == 0 {
			for l := range st.uses {
				for e := range st.uses[l] {
					st.uses[l][e] /= 2
				}
			}
		}
		if st.tokens%st.every == 0 {
			st.round()
		}
	}
}

func (st *store) round() {
	type ranked struct {
		l, e int
		u    float64
	}
	var in, out []ranked
	for l := range st.res {
		for e, r := range st.res[l] {
			if r {
				out = append(out, ranked{l, e, st.uses[l][e]})
			} else if st.uses[l][e] > 0 {
				in = append(in, ranked{l, e, st.uses[l][e]})
			}
		}
	}
	slices.SortStableFunc(in, func(a, b ranked) int { return cmp.Compare(b.u, a.u) })
	slices.SortStableFunc(out, func(a, b ranked) int { return cmp.Compare(a.u, b.u) })
	n := 0
	for _, c := range in {
		if n == st.swaps {
			break
		}
		k := slices.IndexFunc(out, func(o ranked) bool { return st.sizes[o.l][o.e] >= st.sizes[c.l][c.e] })
		if k < 0 || c.u < st.margin*out[k].u {
			break
		}
		st.res[out[k].l][out[k].e], st.res[c.l][c.e] = false, true
		out = slices.Delete(out, k, k+1)
		n++
	}
	st.moved += n
}

// still never moves anything.
type still struct{}

func (still) name() string        { return "calibration's, kept" }
func (still) look(now [][]uint64) {}

func hit(dev [][]bool, win [][]uint64) float64 {
	var h, all uint64
	for l := range win {
		for e, c := range win[l] {
			all += c
			if dev[l][e] {
				h += c
			}
		}
	}
	return float64(h) / float64(max(all, 1))
}

func sim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ExitOnError)
	path := fs.String("trace", "trace.json", "a trace")
	budget := fs.String("device", "5.79GiB", "device bytes for experts")
	hop := fs.Int64("hop", 0, "tier.DeviceCost.Hop (bytes): the CPU's cost of a layer beyond its picks' bytes")
	host := fs.String("host", "", "also replay the host store's ways with this many bytes of resident experts (the CPU backend with experts on storage)")
	fs.Parse(args)
	js, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	var tr Trace
	if err := json.Unmarshal(js, &tr); err != nil {
		return err
	}
	bytes, err := tier.ParseBytes(*budget)
	if err != nil {
		return err
	}
	cost := tier.DeviceCost{Used: tr.Used, Hop: *hop}
	placed := func() *tier.ExpertPlan {
		p := &tier.ExpertPlan{}
		c := cost
		c.Holdout = tr.Calib[1]
		p.PlaceOnDevice(tr.Sizes, tr.Calib[0], bytes, c)
		return p
	}
	mk := func(label string, window, num, den uint64) *windowed {
		return &windowed{label: label, window: window, keepNum: num, keepDen: den, swaps: 32, sizes: tr.Sizes, cost: cost, plan: placed()}
	}
	withSwaps := func(w *windowed, n int) *windowed { w.swaps = n; return w }
	withFirst := func(w *windowed, n uint64) *windowed { w.first = n; return w }
	type run struct {
		p   policy
		dev func() [][]bool
	}
	var runs []run
	kept := placed()
	runs = append(runs, run{still{}, func() [][]bool { return kept.Device }})
	for _, w := range []*windowed{
		mk("512, the window before", 512, 0, 0),
		mk("256, the window before", 256, 0, 0),
		mk("128, the window before", 128, 0, 0),
		mk("128, history 1/2", 128, 1, 2),
		mk("128, history 3/4", 128, 3, 4),
		mk("64, history 3/4", 64, 3, 4),
		mk("64, history 7/8", 64, 7, 8),
		mk("64, history 1/2", 64, 1, 2),
		mk("32, history 3/4", 32, 3, 4),
		mk("32, history 7/8", 32, 7, 8),
		mk("16, history 7/8", 16, 7, 8),
		mk("256, history 1/2", 256, 1, 2),
		withSwaps(mk("32, 3/4, 64 swaps", 32, 3, 4), 64),
		withSwaps(mk("32, 3/4, 128 swaps", 32, 3, 4), 128),
		withSwaps(mk("32, 3/4, 256 swaps", 32, 3, 4), 256),
		withFirst(withSwaps(mk("32 (16 first), 128 swaps", 32, 3, 4), 128), 16),
		withSwaps(mk("16, 3/4, 128 swaps", 16, 3, 4), 128),
		withSwaps(mk("16, 7/8, 128 swaps", 16, 7, 8), 128),
	} {
		runs = append(runs, run{w, func() [][]bool { return w.plan.Device }})
	}
	if *host != "" {
		hb, err := tier.ParseBytes(*host)
		if err != nil {
			return err
		}
		calib := tier.AddCounts(tr.Calib[0], tr.Calib[1])
		for _, st := range []*store{
			newStore("host: 32, 4 swaps, decay 256", tr.Sizes, calib, hb, 32, 256, 4, 1.5),
			newStore("host: 32, 16 swaps, decay 256", tr.Sizes, calib, hb, 32, 256, 16, 1.5),
			newStore("host: 32, 32 swaps, decay 128", tr.Sizes, calib, hb, 32, 128, 32, 1.5),
			newStore("host: 16, 32 swaps, decay 64", tr.Sizes, calib, hb, 16, 64, 32, 1.5),
			newStore("host: 32, 32 swaps, decay 256", tr.Sizes, calib, hb, 32, 256, 32, 1.5),
			newStore("host: 32, 32 swaps, decay 64", tr.Sizes, calib, hb, 32, 64, 32, 1.5),
			newStore("host: 16, 16 swaps, decay 128", tr.Sizes, calib, hb, 16, 128, 16, 1.5),
			newStore("host: 16, 32 swaps, decay 128", tr.Sizes, calib, hb, 16, 128, 32, 1.5),
			newStore("host: 16, 64 swaps, decay 64", tr.Sizes, calib, hb, 16, 64, 64, 1.5),
			newStore("host: 16, 32 swaps, decay 32", tr.Sizes, calib, hb, 16, 32, 32, 1.5),
		} {
			runs = append(runs, run{st, func() [][]bool { return st.res }})
		}
	}
	fmt.Printf("device %s: %d experts of %d; calibration hit on its held-out half %.3f\n", *budget, kept.DeviceCount(), len(tr.Sizes)*len(tr.Sizes[0]), hit(kept.Device, tr.Calib[1]))
	per := 128 / tr.Every // snapshots a report window
	var head []string
	for i := per; i < len(tr.Snaps); i += per {
		head = append(head, fmt.Sprintf("%5d", i*tr.Every))
	}
	fmt.Printf("%-26s %s   all   moved\n", "policy \\ hit to token", strings.Join(head, " "))
	for _, r := range runs {
		var cols []string
		var h, all, wh, wn float64
		for i := 1; i < len(tr.Snaps); i++ {
			// The tokens between snapshots i-1 and i are served by the
			// placement as it stood; the policy looks at the end.
			win := tier.CountsSince(tr.Snaps[i-1], tr.Snaps[i])
			d := r.dev()
			var n float64
			for l := range win {
				for _, c := range win[l] {
					n += float64(c)
				}
			}
			h += hit(d, win) * n
			all += n
			wh += hit(d, win) * n
			wn += n
			if i%per == 0 {
				cols = append(cols, fmt.Sprintf("%5.3f", wh/wn))
				wh, wn = 0, 0
			}
			r.p.look(tr.Snaps[i])
		}
		moved, per := 0, time.Duration(0)
		if w, ok := r.p.(*windowed); ok && w.rounds > 0 {
			moved, per = w.moved, w.spent/time.Duration(w.rounds)
		}
		if st, ok := r.p.(*store); ok {
			moved = st.moved
		}
		fmt.Printf("%-26s %s %5.3f %5d %v a round\n", r.p.name(), strings.Join(cols, " "), h/all, moved, per.Round(time.Millisecond))
	}
	return nil
}
