package engine

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
)

// calibration is the text layer skip calibrates on when it chooses the
// layers itself: prose, Go code and a technical paragraph, so that no one
// kind of text decides which layers matter.
//
//go:embed calib/sample.txt
var calibration string

// autoCosine is the layer cosine above which "auto" skips a layer: the
// hidden state leaves it nearly as it entered.
const autoCosine = 0.98

// streamedBonus is how much more similar a streamed layer counts as when
// layers are ranked for skipping: leaving it out also saves its bytes on
// the link every pass, so of two layers that turn the hidden state about
// as little, the streamed one goes first.
const streamedBonus = 0.005

// skipScores are the layers' cosines with each streamed layer's raised by
// streamedBonus: the ranking layer skip goes by.
func (e *Engine) skipScores(cos []float64) []float64 {
	score := slices.Clone(cos)
	if e.plan == nil {
		return score
	}
	for _, l := range e.plan.Layers {
		if l.Tier != tier.TierA && l.Index < len(score) {
			score[l.Index] += streamedBonus
		}
	}
	return score
}

// SkipLayers chooses the layers to leave out of every pass from spec:
// "auto" (the layers whose hidden state turns least: cosine of the state
// entering and leaving at least autoCosine, on the built-in calibration
// text), "N" (the N layers that turn it least; a streamed layer counts as
// streamedBonus more similar, see skipScores) or a list "4,9" (a single
// layer as "4,"). It returns the layers and their cosines (nil for a
// list). Skipping costs quality: `strata bench quality` measures how much.
func (e *Engine) SkipLayers(ctx context.Context, spec string) ([]int, []float64, error) {
	spec = strings.TrimSpace(spec)
	L := e.Model.Config.Layers
	if strings.Contains(spec, ",") {
		var out []int
		for _, f := range strings.Split(spec, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			l, err := strconv.Atoi(f)
			if err != nil || l < 0 || l >= L {
				return nil, nil, fmt.Errorf("skip layers %q: %q is not a layer of 0..%d", spec, f, L-1)
			}
			out = append(out, l)
		}
		slices.Sort(out)
		out = slices.Compact(out)
		if len(out) >= L {
			return nil, nil, fmt.Errorf("skip layers %q: every layer", spec)
		}
		return out, nil, nil
	}
	n := -1
	if spec != "auto" {
		v, err := strconv.Atoi(spec)
		if err != nil || v < 1 || v >= L {
			return nil, nil, fmt.Errorf("skip layers %q: want auto, a count of 1..%d or a list of layers (4,9)", spec, L-1)
		}
		n = v
	}
	toks := e.Tok.Encode(calibration, true, false)
	toks = toks[:min(len(toks), e.Model.Config.Context)]
	cos, err := e.Model.LayerCosines(ctx, toks)
	if err != nil {
		return nil, nil, fmt.Errorf("skip layers: calibrating: %w", err)
	}
	score := e.skipScores(cos)
	order := model.BySimilarity(score)
	if n < 0 {
		n = 0
		for n < L-1 && score[order[n]] >= autoCosine {
			n++
		}
	}
	return slices.Sorted(slices.Values(order[:n])), cos, nil
}
