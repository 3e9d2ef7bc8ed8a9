package enginebench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/internal/workpool"
)

// TestMoEServedCPU runs the served decode on the tiny shapes through the
// CPU backend (the GPU runs it in the moe scenario): every token it asks
// for, a rate, the hit rows (0 here: the CPU holds no device experts) and
// the note saying so; none without tokens asked for.
func TestMoEServedCPU(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, arch := range []string{"mixtral", "qwen3moe"} {
		rn := &runner{o: &Options{SynthDir: dir, MoEServed: 24}}
		path, err := rn.synthArch("", arch, "tiny", "q4_k_m")
		if err != nil {
			t.Fatal(err)
		}
		res := &ScenarioResult{Model: path}
		mc := MoECase{Arch: arch, Shape: "tiny", Budget: 1 << 30}
		if err := rn.moeServed(context.Background(), res, mc, engine.BackendCPU); err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		keys := map[string]Metric{}
		for _, m := range res.Metrics {
			keys[m.Key] = m
		}
		if m, ok := keys["served_decode_24_tps"]; !ok || !(m.Value > 0) || m.Ratio != nil {
			t.Errorf("%s: served row %+v (found %v), want a rate without a peer", arch, m, ok)
		}
		for _, k := range []string{"served_device_hit", "served_device_hit_first", "served_device_hit_last"} {
			if m, ok := keys[k]; !ok || m.Value != 0 {
				t.Errorf("%s: %s = %+v (found %v), want 0 on the CPU", arch, k, m, ok)
			}
		}
		if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, "24 greedy tokens") || !strings.Contains(notes, "no expert in device memory") {
			t.Errorf("%s: notes %q", arch, notes)
		}
		rn.o.MoEServed = 0
		before := len(res.Metrics)
		if err := rn.moeServed(context.Background(), res, mc, engine.BackendCPU); err != nil || len(res.Metrics) != before {
			t.Errorf("%s: MoEServed 0 ran a decode (%v, %d rows)", arch, err, len(res.Metrics)-before)
		}
	}
}

// TestServedMetrics: the rows of a finished decode, with the peer's
// ratio and the 1.5x goal; a decode that stopped short is an error.
func TestServedMetrics(t *testing.T) {
	t.Parallel()
	peer := &Ratio{Value: 2, Basis: "llama.cpp", BasisValue: 50}
	m, notes, err := servedMetrics(served{tokens: 512, tps: 100, hit: 0.8, firstHit: 0.7, lastHit: 0.9, moved: 300, onDevice: 2000, deviceGiB: 5.5, promptSize: 15}, 512, peer)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 || m[0].Key != "served_decode_512_tps" || m[0].Value != 100 || m[0].Ratio != peer || m[0].Goal == nil || m[0].Goal.Target != 1.5 {
		t.Fatalf("rows %+v", m)
	}
	if m[1].Value != 0.8 || m[2].Value != 0.7 || m[3].Value != 0.9 {
		t.Errorf("hit rows %+v", m[1:])
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "2000 experts (5.50 GiB)") || !strings.Contains(notes[0], "300 moved") {
		t.Errorf("notes %q", notes)
	}
	for _, sv := range []served{{tokens: 300, tps: 90}, {tokens: 512}} {
		if _, _, err := servedMetrics(sv, 512, nil); err == nil || !strings.Contains(err.Error(), "of 512 tokens") {
			t.Errorf("%+v: %v, want an error", sv, err)
		}
	}
}

// TestMoEServedBatchCPU runs the served batch on the tiny shapes through
// the CPU backend: requests decoded at once, a rate from passes that
// advanced them all, the peer's ratio against a peers file's figure of
// that name, and nothing where the batch is 0 or 1.
func TestMoEServedBatchCPU(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, arch := range []string{"mixtral", "qwen3moe"} {
		mc := MoECase{Arch: arch, Shape: "tiny", Budget: 1 << 30}
		peers := &Peers{Figures: map[string]Peer{mc.servedBatchPeerName(4, 12): {System: "llama.cpp", Value: 1e-3, Unit: "tok/s"}}}
		rn := &runner{o: &Options{SynthDir: dir, MoEServedBatch: 4, MoEServedBatchTokens: 12, Peers: peers}}
		path, err := rn.synthArch("", arch, "tiny", "q4_k_m")
		if err != nil {
			t.Fatal(err)
		}
		res := &ScenarioResult{Model: path}
		if err := rn.moeServedBatch(context.Background(), res, mc, engine.BackendCPU); err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		keys := map[string]Metric{}
		for _, m := range res.Metrics {
			keys[m.Key] = m
		}
		m, ok := keys["served_batch4_decode_12_tps"]
		if !ok || !(m.Value > 0) {
			t.Fatalf("%s: served batch row %+v (found %v)", arch, m, ok)
		}
		notes := strings.Join(res.Notes, "\n")
		if !strings.Contains(notes, "4 requests at once") {
			t.Errorf("%s: notes %q", arch, notes)
		}
		// The tiny models may end a request early; the peer's ratio is
		// kept only where none did.
		if strings.Contains(notes, "ended before") {
			if m.Ratio != nil {
				t.Errorf("%s: a short request and a peer ratio %+v", arch, m.Ratio)
			}
		} else if m.Ratio == nil || m.Ratio.Value != m.Value/1e-3 || m.Goal == nil {
			t.Errorf("%s: ratio %+v goal %+v, want the rate over the peers file's figure", arch, m.Ratio, m.Goal)
		}
		for _, seqs := range []int{0, 1} {
			rn.o.MoEServedBatch = seqs
			before := len(res.Metrics)
			if err := rn.moeServedBatch(context.Background(), res, mc, engine.BackendCPU); err != nil || len(res.Metrics) != before {
				t.Errorf("%s: MoEServedBatch %d ran a decode (%v, %d rows)", arch, seqs, err, len(res.Metrics)-before)
			}
		}
	}
}

// TestServedBatchMetrics: the batch's rows with the peer's ratio and the
// 1.5x goal; none where a request ended early; an error where no pass
// advanced every sequence.
func TestServedBatchMetrics(t *testing.T) {
	t.Parallel()
	peer := &Ratio{Value: 2, Basis: "llama.cpp", BasisValue: 50}
	sv := servedBatch{seqs: 8, tokens: 128, passes: 127, decoded: 1016, elapsed: 10 * time.Second, hit: 0.6, streamed: 0.25, moved: 40, onDevice: 900, deviceGiB: 2.5, promptTokens: 120, distinct: 311}
	m, notes, err := servedBatchMetrics(sv, peer)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 3 || m[0].Key != "served_batch8_decode_128_tps" || math.Abs(m[0].Value-101.6) > 1e-9 || m[0].Ratio != peer || m[0].Goal == nil || m[0].Goal.Target != 1.5 {
		t.Fatalf("rows %+v", m)
	}
	if m[1].Key != "served_batch8_device_hit" || m[1].Value != 0.6 {
		t.Errorf("hit row %+v", m[1])
	}
	if m[2].Key != "served_batch8_streamed" || m[2].Value != 0.25 {
		t.Errorf("pick stream row %+v", m[2])
	}
	sides := sv
	sides.sides(engine.ExpertInfo{CPUBusy: 6 * time.Second, Hop: time.Second, CPUBeside: 1500 * time.Millisecond, CPUBytes: 180e9}, 12*time.Second)
	m, _, err = servedBatchMetrics(sides, peer)
	if err != nil || len(m) != 7 || m[3].Value != 0.5 || m[4].Value != 30 || m[5].Key != "served_batch8_beside" || m[5].Value != 0.25 || math.Abs(m[6].Value-1.0/12) > 1e-12 {
		t.Errorf("CPU rows %+v (%v): want busy 0.5, 30 GB/s, beside 0.25 of it, hop 1/12", m, err)
	}
	// With the links' rates: 180 GB read by the CPU and 60 GB copied
	// over 12 s, at 80 + 40 GB/s, is 2 s of links: 6x.
	links := sv
	links.dram, links.h2d = 80e9, 40e9
	links.sides(engine.ExpertInfo{CPUBusy: 6 * time.Second, Hop: time.Second, CPUBytes: 180e9, PCIeBytes: 60e9}, 12*time.Second)
	m, _, err = servedBatchMetrics(links, peer)
	if err != nil || len(m) != 8 || m[7].Key != "served_batch8_wall_s" || m[7].Value != 12 || m[7].Ratio == nil || math.Abs(m[7].Ratio.Value-6) > 1e-9 {
		t.Errorf("combined-link row %+v (%v): want 12 s, 6x the limit", m, err)
	}
	// Batch layers the pick stream split, a quarter of them cut short by
	// the slots: a row after the hand-overs'.
	capped := links
	capped.sides(engine.ExpertInfo{CPUBusy: 6 * time.Second, Hop: time.Second, CPUBytes: 180e9, PCIeBytes: 60e9, StreamBatchLayers: 100, StreamCapped: 25}, 12*time.Second)
	m, _, err = servedBatchMetrics(capped, peer)
	if err != nil || len(m) != 9 || m[7].Key != "served_batch8_slots_capped" || m[7].Value != 0.25 || m[8].Key != "served_batch8_wall_s" {
		t.Errorf("slots' row %+v (%v): want a quarter capped, then the combined-link row", m, err)
	}
	// Of those, 60 timed, the GPU's share running 1.2 s past the CPU's
	// in all: a row after the slots', a tenth of the wall time.
	tail := links
	tail.sides(engine.ExpertInfo{CPUBusy: 6 * time.Second, Hop: time.Second, CPUBytes: 180e9, PCIeBytes: 60e9, StreamBatchLayers: 100, StreamCapped: 25,
		StreamSideLayers: 60, StreamSideLate: 40, StreamSideTail: 1200 * time.Millisecond}, 12*time.Second)
	m, _, err = servedBatchMetrics(tail, peer)
	if err != nil || len(m) != 10 || m[7].Key != "served_batch8_slots_capped" || m[8].Key != "served_batch8_pcie_tail" || math.Abs(m[8].Value-0.1) > 1e-12 || m[9].Key != "served_batch8_wall_s" {
		t.Errorf("PCIe tail's row %+v (%v): want a tenth of the wall after the slots' row", m, err)
	}
	// 400 experts copied ahead of their layers, 300 of them picked for
	// the CPU: a row after the PCIe tail's.
	ahead := links
	ahead.sides(engine.ExpertInfo{CPUBusy: 6 * time.Second, Hop: time.Second, CPUBytes: 180e9, PCIeBytes: 60e9, StreamBatchLayers: 100, StreamCapped: 25,
		StreamSideLayers: 60, StreamSideLate: 40, StreamSideTail: 1200 * time.Millisecond, StreamAhead: 400, StreamAheadUsed: 300}, 12*time.Second)
	m, _, err = servedBatchMetrics(ahead, peer)
	if err != nil || len(m) != 11 || m[9].Key != "served_batch8_ahead_used" || m[9].Value != 0.75 || m[10].Key != "served_batch8_wall_s" {
		t.Errorf("ahead's row %+v (%v): want three quarters used, then the combined-link row", m, err)
	}
	// The CPU's threads woke sleepers in 300 of 1200 steps, 4500 of
	// them: a row after the slots', and a note.
	woke := capped
	woke.pool = workpool.Stats{Steps: 1200, WokenSteps: 300, Woken: 4500}
	m, wnotes, err := servedBatchMetrics(woke, peer)
	if err != nil || len(m) != 10 || m[8].Key != "served_batch8_woken_steps" || m[8].Value != 0.25 || m[9].Key != "served_batch8_wall_s" ||
		len(wnotes) != 2 || !strings.Contains(wnotes[1], "1200 steps, 300 of them woke 4500 sleeping threads (15.0 a step") {
		t.Errorf("wake-ups' row %+v notes %q (%v): want a quarter of the steps, then the combined-link row", m, wnotes, err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "127 passes") || !strings.Contains(notes[0], "900 experts (2.50 GiB)") || !strings.Contains(notes[0], "(311 different tokens among them)") {
		t.Errorf("notes %q", notes)
	}
	short := sv
	short.short = 2
	m, notes, err = servedBatchMetrics(short, peer)
	if err != nil || m[0].Ratio != nil || m[0].Goal != nil || len(notes) != 2 || !strings.Contains(notes[1], "2 of 8 requests ended") {
		t.Errorf("short batch: rows %+v notes %q err %v", m, notes, err)
	}
	for _, bad := range []servedBatch{{seqs: 8, tokens: 128}, {seqs: 8, tokens: 128, passes: 3, decoded: 24}} {
		if _, _, err := servedBatchMetrics(bad, nil); err == nil || !strings.Contains(err.Error(), "no pass advanced all 8") {
			t.Errorf("%+v: %v, want an error", bad, err)
		}
	}
}

// TestMoECaseServedOnly: with the fixed placements left out the case
// still finds (synthesizes) its model and runs both served rows on it.
func TestMoECaseServedOnly(t *testing.T) {
	t.Parallel()
	rn := &runner{o: &Options{SynthDir: t.TempDir(), MoEServedOnly: true, MoEServed: 12, MoEServedBatch: 2, MoEServedBatchTokens: 8}}
	res := &ScenarioResult{}
	if err := rn.moeCase(context.Background(), res, MoECase{Arch: "qwen3moe", Shape: "tiny", Budget: 1 << 30}, engine.BackendCPU); err != nil {
		t.Fatal(err)
	}
	if res.Model == "" {
		t.Fatal("no model named")
	}
	keys := map[string]bool{}
	for _, m := range res.Metrics {
		keys[m.Key] = true
	}
	if !keys["served_decode_12_tps"] || !keys["served_batch2_decode_8_tps"] || keys["decode_tps"] {
		t.Errorf("rows %v, notes %q: want the served rows alone", keys, res.Notes)
	}
}

// TestStreamedShare: the pick stream's share is of the picks off the
// device between two reports (they count the streamed ones among the
// CPU's uses), 0 where there were none.
func TestStreamedShare(t *testing.T) {
	t.Parallel()
	a := engine.ExpertInfo{CPUUses: 100, StreamedPicks: 10}
	b := engine.ExpertInfo{CPUUses: 300, StreamedPicks: 60}
	if got := streamedShare(b.Since(a)); got != 0.25 {
		t.Errorf("streamedShare = %v, want 50 of 200", got)
	}
	if got := streamedShare(b.Since(b)); got != 0 {
		t.Errorf("no picks between: %v", got)
	}
}
