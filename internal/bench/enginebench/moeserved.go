package enginebench

import (
	"context"
	"fmt"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// DefaultMoEServed is the moe scenario's served decode length: long
// enough for the device's experts to follow the routing served (the
// engine's adapter looks every 32 tokens) and for its rate to settle.
const DefaultMoEServed = 512

// servedPrompt is the served row's text prompt: what `strata run` sends
// by default, so the row and a run by hand decode the same tokens.
const servedPrompt = "The history of the printing press begins in the fifteenth century, when"

// servedPeerName is the peers-file figure of the served row: llama.cpp's
// --n-cpu-moe decode of as many tokens ("moe_qwen3moe_30b_a3b_8gib_decode_512").
func (c MoECase) servedPeerName(tokens int) string {
	return fmt.Sprintf("%s_%d", c.peerName(), tokens)
}

// served is what one served decode measured.
type served struct {
	tokens     int
	tps        float64
	hit        float64 // the device's hit over the request's picks
	firstHit   float64 // over its first quarter's tokens
	lastHit    float64 // over its last quarter's
	moved      uint64  // experts moved into device memory during it
	onDevice   int
	deviceGiB  float64
	promptSize int
}

// moeServed opens the case's model through the engine, as the daemon
// and `strata run` do (its own plan of the budget, the calibration
// text's placement of the experts, the adapter moving them toward the
// routing served, the pick stream), and decodes rn.o.MoEServed tokens
// greedily from a text prompt: the rows the other moe rows leave out,
// whose placements stay where they were made. backend is the engine's
// (BackendCUDA on the GPU; the CPU for the tests).
func (rn *runner) moeServed(ctx context.Context, res *ScenarioResult, mc MoECase, backend string) error {
	n := rn.o.MoEServed
	if n <= 0 {
		return nil
	}
	e, err := engine.OpenWith(ctx, res.Model, engine.Options{Backend: backend, DeviceBudget: mc.Budget, Context: n + 128})
	if err != nil {
		return fmt.Errorf("served decode: %w", err)
	}
	defer e.Close()
	prompt := e.Tok.Encode(servedPrompt, true, false)
	sv := served{promptSize: len(prompt)}
	quarter := max(n/4, 1)
	info0, _ := e.Experts()
	var mark engine.ExpertInfo
	var toks int
	r, err := sched.Generate(ctx, e.Backend(), e.Tok, sched.Request{Prompt: prompt, MaxTokens: n, Sample: sample.Greedy()}, func(ev sched.Event) error {
		if ev.Token < 0 {
			return nil
		}
		toks++
		switch toks {
		case 1: // the prompt's pass is done: the decode's count starts
			info0, _ = e.Experts()
			mark = info0 // a decode too short for a last quarter after its first token
		case 1 + quarter:
			in, _ := e.Experts()
			sv.firstHit = hitSince(info0, in)
		case n - quarter:
			mark, _ = e.Experts()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("served decode: %w", err)
	}
	info1, ok := e.Experts()
	if !ok {
		return fmt.Errorf("served decode: %s has no experts", res.Model)
	}
	sv.tokens = r.CompletionTokens
	if r.DecodeTime > 0 && r.CompletionTokens > 1 {
		sv.tps = float64(r.CompletionTokens-1) / r.DecodeTime.Seconds()
	}
	sv.hit = hitSince(info0, info1)
	if toks >= n-quarter {
		sv.lastHit = hitSince(mark, info1)
	}
	sv.moved = info1.Since(info0).DeviceMoves
	sv.onDevice, sv.deviceGiB = info1.OnDevice, float64(info1.DeviceBytes)/(1<<30)
	var peer *Ratio
	if sv.tokens == n {
		peer = ratioToPeer(sv.tps, rn.o.Peers, mc.servedPeerName(n))
	}
	m, notes, err := servedMetrics(sv, n, peer)
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics, m...)
	res.Notes = append(res.Notes, notes...)
	return nil
}

// hitSince is the device's hit over the picks between two reports (0
// where none were made).
func hitSince(a, b engine.ExpertInfo) float64 { return b.Since(a).DeviceHit() }

// servedMetrics are the served decode's rows and notes; an unfinished
// decode (the model stopped early) is an error, not a row, so the rate
// compared with a peer's is always over the same token count.
func servedMetrics(sv served, n int, peer *Ratio) ([]Metric, []string, error) {
	if sv.tokens != n || !(sv.tps > 0) {
		return nil, nil, fmt.Errorf("served decode: %d of %d tokens at %v tok/s", sv.tokens, n, sv.tps)
	}
	m := []Metric{
		{Key: fmt.Sprintf("served_decode_%d_tps", n), Label: fmt.Sprintf("served decode, batch 1, %d tokens (the engine: placement followed as it serves)", n),
			Value: sv.tps, Unit: "tok/s", Ratio: peer, Goal: atLeast(peer, 1.5)},
		{Key: "served_device_hit", Label: "  picks of experts in device memory, over the decode", Value: sv.hit, Unit: "share"},
		{Key: "served_device_hit_first", Label: fmt.Sprintf("  the same over its first %d tokens", max(n/4, 1)), Value: sv.firstHit, Unit: "share"},
		{Key: "served_device_hit_last", Label: fmt.Sprintf("  the same over its last %d tokens", max(n/4, 1)), Value: sv.lastHit, Unit: "share"},
	}
	notes := []string{fmt.Sprintf("served decode: %q (%d tokens) then %d greedy tokens through engine.OpenWith and the daemon's scheduler; %d experts (%.2f GiB) in device memory, %d moved into it during the decode",
		servedPrompt, sv.promptSize, n, sv.onDevice, sv.deviceGiB, sv.moved)}
	if sv.onDevice == 0 {
		notes = append(notes, "served decode: no expert in device memory: the hit rows count nothing")
	}
	return m, notes, nil
}
