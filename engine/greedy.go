package engine

import "github.com/strata-llm/strata/engine/sample"

// GreedyOnly reports whether a sampler with parameters p always picks the
// arg max of the raw logit row (the largest logit, the lowest id on ties,
// NaN never chosen): temperature 0 with no repetition penalty in effect
// (penalty 1, or a window of 0 tokens). Top-k, top-p, min-p and the seed
// play no part at temperature 0. For such a request Generate asks the
// backend for Step.Greedy's token instead of sampling the logits itself,
// which lets the CUDA backend select the token on the device and download
// 4 bytes a step instead of a vocabulary-long row; the token is the one
// the sampler would have drawn, so the output is the same on either path.
// Any other parameters need the logits on the host.
func GreedyOnly(p sample.Params) bool {
	return p.Temperature == 0 && (p.RepeatPenalty == 1 || p.RepeatLastN == 0)
}

// hostGreedy sets Token for every Greedy step from its last logit row, by
// engine/sample's own greedy sampler: what a backend that does not select
// on the device (the CPU) does after filling the logits.
func hostGreedy(batch []Step) {
	var s *sample.Sampler
	for i := range batch {
		st := &batch[i]
		if !st.Greedy || len(st.Logits) == 0 {
			continue
		}
		if s == nil {
			s, _ = sample.New(sample.Greedy()) // valid parameters
		}
		st.Token = s.Sample(st.Logits[len(st.Logits)-1], nil)
	}
}
