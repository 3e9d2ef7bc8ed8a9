package enginebench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/internal/daemon/sched"
	"github.com/strata-llm/strata/internal/workpool"
)

// DefaultMoEServed is the moe scenario's served decode length: long
// enough for the device's experts to follow the routing served (the
// engine's adapter looks every few passes) and for its rate to settle.
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

// streamedShare is the share of the picks of experts off the device that
// the pick stream sent over PCIe in d, the difference of two reports (0
// where there were none).
func streamedShare(d engine.ExpertInfo) float64 {
	if d.CPUUses == 0 {
		return 0
	}
	return float64(d.StreamedPicks) / float64(d.CPUUses)
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

// DefaultMoEServedBatch is the moe scenario's served batch: that many
// requests at once through the daemon's scheduler, every pass advancing
// all of them (llama.cpp's llama-batched-bench at as many sequences is
// its peer).
const DefaultMoEServedBatch = 8

// DefaultMoEServedBatchTokens is each of the served batch's requests'
// length: a thousand tokens over the batch, enough passes for the
// adapter to follow the routing, few enough for Mixtral's rate to finish
// them in a device call.
const DefaultMoEServedBatchTokens = 128

// servedBatchPrompts are the served batch's requests' prompts, one each
// (cycled, numbered, past the last): different texts, so the sequences
// route as different users' would.
var servedBatchPrompts = []string{
	servedPrompt,
	"Write a short story about a lighthouse keeper who finds a message in a bottle.",
	"Explain how a compiler turns source code into machine instructions.",
	"The recipe calls for flour, butter, two eggs and a pinch of salt. First,",
	"List the planets of the solar system and one fact about each.",
	"Dear committee, I am writing to apply for the position of",
	"In economics, the law of supply and demand states that",
	"func main() {\n\tfmt.Println(\"hello\")\n}\n// This Go program",
}

// servedBatchPeerName is the peers-file figure of the served batch:
// llama.cpp's aggregate decode of seqs sequences of tokens each
// ("moe_qwen3moe_30b_a3b_8gib_decode_b8_128").
func (c MoECase) servedBatchPeerName(seqs, tokens int) string {
	return fmt.Sprintf("%s_b%d_%d", c.peerName(), seqs, tokens)
}

// batchTimer is the served batch's sched.Observer: the wall time and
// decode tokens of the passes that advanced every sequence of the batch
// and read no prompt, each pass's time taken from the previous pass's end
// (the scheduler's work between passes counts).
type batchTimer struct {
	seqs    int
	mu      sync.Mutex
	last    time.Time
	tokens  int
	passes  int
	elapsed time.Duration
}

func (t *batchTimer) Pass(seqs, promptTokens, decodeTokens int, _ time.Duration) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if seqs == t.seqs && promptTokens == 0 && !t.last.IsZero() {
		t.tokens += decodeTokens
		t.passes++
		t.elapsed += now.Sub(t.last)
	}
	t.last = now
}

func (t *batchTimer) FirstToken(time.Duration)  {}
func (t *batchTimer) Finished(string, int, int) {}
func (t *batchTimer) CancelLag(int)             {}

// moeServedBatch opens the case's model through the engine for a batch
// of rn.o.MoEServedBatch sequences and decodes that many requests at once
// through the daemon's scheduler, rn.o.MoEServedBatchTokens greedy tokens
// each from different text prompts: the aggregate rate of the passes that
// advance them all, the served row's batch counterpart.
func (rn *runner) moeServedBatch(ctx context.Context, res *ScenarioResult, mc MoECase, backend string) error {
	seqs, n := rn.o.MoEServedBatch, rn.o.MoEServedBatchTokens
	if seqs <= 1 || n <= 0 {
		return nil
	}
	if rn.ceil.H2D > 0 {
		// The combined-link row's host read rate, probed before the
		// engine's threads start.
		if _, err := rn.hostRead(ctx); err != nil {
			return fmt.Errorf("served batch: %w", err)
		}
	}
	e, err := engine.OpenWith(ctx, res.Model, engine.Options{Backend: backend, DeviceBudget: mc.Budget, Context: n + 128, Batch: seqs})
	if err != nil {
		return fmt.Errorf("served batch: %w", err)
	}
	defer e.Close()
	bt := &batchTimer{seqs: seqs}
	s := sched.New(e.Backend(), e.Tok, sched.Config{MaxBatch: seqs, MaxQueue: seqs, Observer: bt})
	if st := s.Stats(); st.MaxBatch < seqs {
		return fmt.Errorf("served batch: the backend advances at most %d sequences a pass, want %d", st.MaxBatch, seqs)
	}
	info0, ok := e.Experts()
	if !ok {
		return fmt.Errorf("served batch: %s has no experts", res.Model)
	}
	pool0 := workpool.Default().Stats()
	t0 := time.Now()
	// Every request queued before the scheduler runs: its first pass
	// reads all the prompts, and every pass after advances them all.
	handles := make([]*sched.Handle, seqs)
	promptTokens := 0
	var submitErr error
	for i := range handles {
		text := servedBatchPrompts[i%len(servedBatchPrompts)]
		if i >= len(servedBatchPrompts) {
			text = fmt.Sprintf("%d. %s", i/len(servedBatchPrompts)+1, text)
		}
		p := e.Tok.Encode(text, true, false)
		promptTokens += len(p)
		if handles[i], submitErr = s.Submit(ctx, sched.Request{Prompt: p, MaxTokens: n, Sample: sample.Greedy()}); submitErr != nil {
			submitErr = fmt.Errorf("served batch: request %d: %w", i+1, submitErr)
			break
		}
	}
	defer s.Start(ctx)(errors.New("served batch finished"))
	if submitErr != nil {
		return submitErr
	}
	short := 0
	seen := map[int32]bool{}
	for i, h := range handles {
		var got int
		for ev := range h.Events {
			if ev.Token >= 0 {
				got++
				seen[ev.Token] = true
			}
			if ev.Err != nil {
				return fmt.Errorf("served batch: request %d: %w", i+1, ev.Err)
			}
		}
		if got < n {
			short++
		}
	}
	info1, _ := e.Experts()
	wall := time.Since(t0)
	bt.mu.Lock()
	tokens, passes, elapsed := bt.tokens, bt.passes, bt.elapsed
	bt.mu.Unlock()
	d := info1.Since(info0)
	sv := servedBatch{seqs: seqs, tokens: n, short: short, passes: passes, decoded: tokens, elapsed: elapsed,
		hit: d.DeviceHit(), streamed: streamedShare(d), moved: d.DeviceMoves, onDevice: info1.OnDevice,
		deviceGiB: float64(info1.DeviceBytes) / (1 << 30), promptTokens: promptTokens, distinct: len(seen)}
	sv.sides(d, wall)
	sv.pool = workpool.Default().Stats().Sub(pool0)
	sv.dram, sv.h2d = rn.dram, rn.ceil.H2D
	// servedBatchMetrics drops the ratio where a request ended early.
	m, notes, err := servedBatchMetrics(sv, ratioToPeer(sv.rate(), rn.o.Peers, mc.servedBatchPeerName(seqs, n)))
	if err != nil {
		return err
	}
	res.Metrics = append(res.Metrics, m...)
	res.Notes = append(res.Notes, notes...)
	return nil
}

// moeCase is the moe scenario's part for one case: the rows at fixed
// placements (moe; left out with Options.MoEServedOnly), then the served
// decode and the served batch through the engine on backend, each
// failure of those a note that leaves the rows before it.
func (rn *runner) moeCase(ctx context.Context, res *ScenarioResult, mc MoECase, backend string) error {
	if rn.o.MoEServedOnly {
		// The served rows open the model themselves.
		path, err := rn.synthArch("", mc.Arch, mc.Shape, "q4_k_m")
		if err != nil {
			return err
		}
		res.Model = path
	} else if err := rn.moe(ctx, res, mc); err != nil {
		return err
	}
	// After moe's own model is closed: the engine plans the budget
	// afresh.
	if err := rn.moeServed(ctx, res, mc, backend); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("served decode: not measured: %v", err))
	}
	if err := rn.moeServedBatch(ctx, res, mc, backend); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("served batch: not measured: %v", err))
	}
	return nil
}

// servedBatch is what one served batch decode measured.
type servedBatch struct {
	seqs, tokens int
	short        int // requests that ended before tokens (the model's end of text)
	passes       int // passes that advanced every sequence, prompts read
	decoded      int // the tokens those passes produced
	elapsed      time.Duration
	hit          float64
	streamed     float64 // the share of the picks off the device copied over PCIe (the pick stream)
	// On a GPU, the CPU's busy time and the hand-overs' as shares of the
	// batch's wall time (prompts and decode), and the CPU's expert reads
	// a second while busy (0 where the CPU had no picks).
	cpuBusy, hop, cpuRate float64
	// beside is the host thread's share of the CPU's busy time spent
	// issuing the GPU's share of the layers.
	beside float64
	// capped is the share of the batch layers the pick stream split whose
	// PCIe share the staging slots cut short (-1 where it split none).
	capped float64
	// tail is the time the GPU's share of those layers ran past the
	// CPU's, as a share of the batch's wall time (-1 where none was
	// timed): the hand-overs' part that waits for PCIe's share.
	tail float64
	// ahead is the share of the experts copied ahead of their layer (its
	// guessed routing, during the hand-over) that the layer's CPU would
	// have computed (-1 where none was copied).
	ahead float64
	// pool is what the CPU's threads (workpool.Default) did over the
	// batch: its steps, and the sleeping threads they woke.
	pool workpool.Stats
	// wall is the batch's wall time (prompts and decode), off the expert
	// bytes it moved off the device (the CPU's reads and PCIe's copies),
	// dram and h2d the host's read rate and pinned host-to-device rate
	// (bytes/s) its combined-link limit takes.
	wall         time.Duration
	off          int64
	dram, h2d    float64
	moved        uint64
	onDevice     int
	deviceGiB    float64
	promptTokens int
	// distinct is how many different tokens the requests generated:
	// greedy text on random weights may fall into a loop, and what the
	// batch generates sets its routing, so two runs' rates compare only
	// where their texts are alike.
	distinct int
}

// sides fills sv's CPU and hand-over figures from d, the engine's
// expert report over the batch, whose wall time was wall.
func (sv *servedBatch) sides(d engine.ExpertInfo, wall time.Duration) {
	if d.CPUBusy <= 0 || wall <= 0 {
		return
	}
	sv.cpuBusy, sv.hop = d.CPUBusy.Seconds()/wall.Seconds(), d.Hop.Seconds()/wall.Seconds()
	sv.cpuRate = float64(d.CPUBytes) / d.CPUBusy.Seconds()
	sv.beside = d.CPUBeside.Seconds() / d.CPUBusy.Seconds()
	sv.capped, sv.tail, sv.ahead = -1, -1, -1
	if d.StreamAhead > 0 {
		sv.ahead = float64(d.StreamAheadUsed) / float64(d.StreamAhead)
	}
	if d.StreamBatchLayers > 0 {
		sv.capped = float64(d.StreamCapped) / float64(d.StreamBatchLayers)
	}
	if d.StreamSideLayers > 0 {
		sv.tail = d.StreamSideTail.Seconds() / wall.Seconds()
	}
	sv.wall, sv.off = wall, d.CPUBytes+d.PCIeBytes
}

// linkLimit is the batch's combined-link limit: its off-device expert
// bytes over the host's read rate and the pinned host-to-device rate
// together, what the best split of them between the CPU computing in
// place and copies to the GPU could reach (0 where not known).
func (sv servedBatch) linkLimit() time.Duration {
	if sv.off <= 0 {
		return 0
	}
	// The fixed rows' limit, all of the bytes being experts'.
	lim, err := moeLimitsFor(float64(sv.off), 0, sv.dram, sv.h2d)
	if err != nil {
		return 0 // a rate not measured
	}
	return lim.Combined
}

// rate is the batch's aggregate decode rate over its passes that
// advanced every sequence (0 where it timed none).
func (sv servedBatch) rate() float64 {
	if sv.elapsed <= 0 {
		return 0
	}
	return float64(sv.decoded) / sv.elapsed.Seconds()
}

// servedBatchMetrics are the served batch's rows and notes. The peer's
// ratio and goal are kept for a batch whose every request ran its length
// (llama-batched-bench's sequences all do); a batch with no pass that
// advanced every sequence is an error, not a row.
func servedBatchMetrics(sv servedBatch, peer *Ratio) ([]Metric, []string, error) {
	if sv.passes == 0 || sv.decoded == 0 || sv.elapsed <= 0 {
		return nil, nil, fmt.Errorf("served batch: no pass advanced all %d sequences (%d requests ended early)", sv.seqs, sv.short)
	}
	if sv.short > 0 {
		peer = nil
	}
	tps := sv.rate()
	m := []Metric{
		{Key: fmt.Sprintf("served_batch%d_decode_%d_tps", sv.seqs, sv.tokens),
			Label: fmt.Sprintf("served decode, batch %d (aggregate), %d tokens each (the engine: placement followed as it serves)", sv.seqs, sv.tokens),
			Value: tps, Unit: "tok/s", Ratio: peer, Goal: atLeast(peer, 1.5)},
		{Key: fmt.Sprintf("served_batch%d_device_hit", sv.seqs), Label: "  picks of experts in device memory, over the batch's prompts and decode", Value: sv.hit, Unit: "share"},
		{Key: fmt.Sprintf("served_batch%d_streamed", sv.seqs), Label: "  of the other picks, copied over PCIe and computed on the GPU (the pick stream)", Value: sv.streamed, Unit: "share"},
	}
	if sv.cpuBusy > 0 {
		m = append(m,
			Metric{Key: fmt.Sprintf("served_batch%d_cpu_busy", sv.seqs), Label: "  CPU busy with its picks, of the batch's wall time", Value: sv.cpuBusy, Unit: "share"},
			Metric{Key: fmt.Sprintf("served_batch%d_cpu_read", sv.seqs), Label: "  CPU's expert reads while busy (each expert once a layer)", Value: sv.cpuRate / 1e9, Unit: "GB/s"},
			Metric{Key: fmt.Sprintf("served_batch%d_beside", sv.seqs), Label: "  the host thread issuing the GPU's share, of the CPU's busy time", Value: sv.beside, Unit: "share"},
			Metric{Key: fmt.Sprintf("served_batch%d_hop", sv.seqs), Label: "  hand-overs (waiting for a layer's routing, the rows' copies), of the wall time", Value: sv.hop, Unit: "share"})
		if sv.capped >= 0 {
			m = append(m, Metric{Key: fmt.Sprintf("served_batch%d_slots_capped", sv.seqs), Label: "  batch layers whose PCIe share the staging slots cut short, of those the pick stream split", Value: sv.capped, Unit: "share"})
		}
		if sv.tail >= 0 {
			m = append(m, Metric{Key: fmt.Sprintf("served_batch%d_pcie_tail", sv.seqs), Label: "    of the hand-overs, the GPU's share running past the CPU's (PCIe's tail), of the wall time", Value: sv.tail, Unit: "share"})
		}
		if sv.ahead >= 0 {
			m = append(m, Metric{Key: fmt.Sprintf("served_batch%d_ahead_used", sv.seqs), Label: "  experts copied during the hand-over by the next layer's guessed routing that it picked for the CPU", Value: sv.ahead, Unit: "share"})
		}
		if st := sv.pool; st.Steps > 0 {
			m = append(m, Metric{Key: fmt.Sprintf("served_batch%d_woken_steps", sv.seqs), Label: "  the CPU's steps that first woke sleeping threads, of its steps", Value: float64(st.WokenSteps) / float64(st.Steps), Unit: "share"})
		}
		if lim := sv.linkLimit(); lim > 0 {
			m = append(m, Metric{Key: fmt.Sprintf("served_batch%d_wall_s", sv.seqs), Label: "  the batch's wall time vs the combined-link limit of its off-device expert bytes", Value: sv.wall.Seconds(), Unit: "s",
				Ratio: ratioTo(sv.wall.Seconds(), lim.Seconds(), fmt.Sprintf("combined-link limit %.3f s (%s ÷ (host read %.1f + H2D %.1f GB/s))", lim.Seconds(), gib(sv.off), sv.dram/1e9, sv.h2d/1e9))})
		}
	}
	notes := []string{fmt.Sprintf("served batch: %d requests at once through engine.OpenWith (batch %d) and the daemon's scheduler, %d prompt tokens in all, then up to %d greedy tokens each (%d different tokens among them); the rate is the %d passes that advanced all %d sequences (%d tokens, %s of wall time, the scheduler's work between passes included); %d experts (%.2f GiB) in device memory, %d moved into it",
		sv.seqs, sv.seqs, sv.promptTokens, sv.tokens, sv.distinct, sv.passes, sv.seqs, sv.decoded, sv.elapsed.Round(time.Millisecond), sv.onDevice, sv.deviceGiB, sv.moved)}
	if st := sv.pool; sv.cpuBusy > 0 && st.WokenSteps > 0 {
		notes = append(notes, fmt.Sprintf("served batch: the CPU's threads: %d steps, %d of them woke %d sleeping threads (%.1f a step that woke any)",
			st.Steps, st.WokenSteps, st.Woken, float64(st.Woken)/float64(st.WokenSteps)))
	}
	if sv.short > 0 {
		notes = append(notes, fmt.Sprintf("served batch: %d of %d requests ended before %d tokens (the model's end of text): no peer ratio", sv.short, sv.seqs, sv.tokens))
	}
	return m, notes, nil
}
