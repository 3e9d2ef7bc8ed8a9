package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	emodel "github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/daemon/sched"
	"github.com/strata-llm/strata/internal/synth"
)

// stackedPool writes, into dir, a pool holding the layers of several tiny
// synthetic Llamas (two per seed), so a budget can hold some layers and
// not others. It returns the pool's path and its layer extents' lengths.
func stackedPool(t *testing.T, dir string, seeds ...uint64) (string, []int64) {
	t.Helper()
	var (
		cfg   emodel.Config
		w     = &emodel.Weights{}
		vocab *tokenizer.Vocab
	)
	for k, seed := range seeds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("l%d.gguf", seed))
		if err := synth.Write(path, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: seed}); err != nil {
			t.Fatal(err)
		}
		g, err := gguf.Map(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		m, err := emodel.LoadGGUF(g)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			cfg = m.Config
			w.Embed, w.OutputNorm, w.Output = m.Weights.Embed, m.Weights.OutputNorm, m.Weights.Output
			if vocab, err = tokenizer.VocabFromGGUF(g.File); err != nil {
				t.Fatal(err)
			}
		}
		w.Layers = append(w.Layers, m.Weights.Layers...)
	}
	cfg.Layers = len(w.Layers)
	m, err := emodel.New(cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("stack-%d.pool", len(seeds)))
	if err := prefab.WriteModelPool(m, vocab, path, prefab.Options{}); err != nil {
		t.Fatal(err)
	}
	p, err := prefab.OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	return path, p.LayerBytes()
}

// pinnedLinks keeps the tests from measuring the machine.
func pinnedLinks() *tier.Links {
	l := tier.DefaultLinks()
	return &l
}

// completion runs a greedy /v1/completions request and returns its text
// and completion token count.
func (h *harness) completion(t *testing.T, model, prompt string, n int) (string, int) {
	t.Helper()
	code, b := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":%d,"temperature":0}`, model, prompt, n))
	if code != 200 {
		t.Fatalf("%s: %d %s", model, code, b)
	}
	var c openai.TextCompletion
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("%s: %v %s", model, err, b)
	}
	var u openai.Usage
	if err := json.Unmarshal(c.Usage, &u); err != nil {
		t.Fatal(err)
	}
	return c.Choices[0].Text, u.CompletionTokens
}

func modelByName(t *testing.T, st api.Status, name string) api.ModelStatus {
	t.Helper()
	for _, m := range st.Models {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("model %s not in status", name)
	return api.ModelStatus{}
}

// TestStreamedModel serves a pool streamed through the pipeline (forced
// all-C, and placed by the planner under a RAM budget) next to the same
// pool resident, and requires the same greedy text, batched passes that
// read each streamed extent exactly once per pass for all four concurrent
// requests, and the plan and pipeline counters in status and /metrics.
func TestStreamedModel(t *testing.T) {
	t.Parallel()
	h := start(t, opts{cfg: Config{Links: pinnedLinks()}})
	pool, extents := stackedPool(t, modelDir, 1, 2, 3)
	var sum int64
	for _, e := range extents {
		sum += e
	}
	base := api.LoadRequest{MaxBatch: 4, Context: 256}
	res := base
	res.Name = "resident"
	rst, err := h.srv.LoadFile(context.Background(), pool, res)
	if err != nil {
		t.Fatal(err)
	}
	if rst.Plan == nil || rst.Plan.Depth != 0 || rst.Plan.Tiers[0].Layers != len(extents) || rst.Pipeline != nil {
		t.Fatalf("resident model: plan %+v pipeline %+v", rst.Plan, rst.Pipeline)
	}
	allC := base
	allC.Name, allC.Tiers = "allc", "all-C"
	if _, err := h.srv.LoadFile(context.Background(), pool, allC); err != nil {
		t.Fatal(err)
	}
	// A RAM budget the whole model (with KV cache and scratch for 4
	// sequences) misses by a third of a layer: the planner streams some
	// layers.
	budget := base
	budget.Name = "budget"
	budget.Budgets.RAMBytes = rst.Plan.DeviceBytes - extents[0]/3
	bst, err := h.srv.LoadFile(context.Background(), pool, budget)
	if err != nil {
		t.Fatal(err)
	}
	if p := bst.Plan; p == nil || p.Tiers[0].Layers == 0 || p.Tiers[2].Layers == 0 || p.Depth < 2 || p.DeviceBytes+p.HostBytes > budget.Budgets.RAMBytes {
		t.Fatalf("budget %d: plan %+v", budget.Budgets.RAMBytes, bst.Plan)
	}
	t.Logf("RAM budget %d: layers %v, depth %d, note %q", budget.Budgets.RAMBytes, bst.Plan.Layers, bst.Plan.Depth, bst.PlanNote)

	const n = 12
	prompts := []string{"The fastest way", "to move a layer", "is to move it once", "per pass"}
	want := map[string]string{}
	for _, p := range prompts {
		want[p], _ = h.completion(t, "resident", p, n)
	}
	for _, name := range []string{"allc", "budget"} {
		before := modelByName(t, mustStatus(t, h), name)
		got := make([]string, len(prompts))
		toks := make([]int, len(prompts))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], toks[i] = h.completion(t, name, p, n)
			}()
		}
		close(start)
		wg.Wait()
		total := 0
		for i, p := range prompts {
			if got[i] != want[p] {
				t.Errorf("%s: %q generated %q, resident %q", name, p, got[i], want[p])
			}
			total += toks[i]
		}
		after := modelByName(t, mustStatus(t, h), name)
		passes := after.Counters.Passes - before.Counters.Passes
		if passes >= uint64(total) {
			t.Errorf("%s: %d passes for %d tokens: the requests did not share passes", name, passes, total)
		}
		pl := after.Pipeline
		if pl == nil || after.Plan == nil {
			t.Fatalf("%s: no pipeline or plan in status", name)
		}
		var read int64
		for i, l := range after.Plan.Layers {
			if l == "C" {
				read += extents[i]
			}
		}
		if pl.Failed != 0 || uint64(pl.Passes) != after.Counters.Passes || pl.Read.Bytes != pl.Passes*read || pl.Copy.Bytes != pl.Passes*read {
			t.Fatalf("%s: %d pipeline passes (%d failed) for %d scheduler passes; read %d, copied %d; want %d per pass",
				name, pl.Passes, pl.Failed, after.Counters.Passes, pl.Read.Bytes, pl.Copy.Bytes, read)
		}
		if c := after.Plan.Tiers[2]; c.BytesMoved != uint64(pl.Read.Bytes) {
			t.Fatalf("%s: tier C moved %d, pipeline read %d", name, c.BytesMoved, pl.Read.Bytes)
		}
		t.Logf("%s: 4 concurrent requests, %d tokens in %d passes; %d bytes read (%d per pass); read %.2f GB/s, overlap %.2f",
			name, total, passes, pl.Read.Bytes, read, pl.Read.GBps, pl.Overlap)
	}

	// /metrics: the tier counters equal what the pipelines read, and the
	// per-model pipeline series exist.
	st := mustStatus(t, h)
	var wantC int64
	for _, name := range []string{"allc", "budget"} {
		wantC += modelByName(t, st, name).Pipeline.Read.Bytes
	}
	_, b := h.get(t, "/metrics")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	tiers := map[string]float64{}
	for _, m := range fams["strata_tier_bytes_moved_total"].GetMetric() {
		tiers[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if tiers["C"] != float64(wantC) || tiers["B"] != 0 || tiers["A"] != 0 {
		t.Fatalf("strata_tier_bytes_moved_total %v, want C=%d", tiers, wantC)
	}
	for _, name := range []string{"strata_pipeline_passes_total", "strata_pipeline_stage_bytes_total", "strata_pipeline_stage_busy_seconds_total",
		"strata_pipeline_stage_stall_seconds_total", "strata_pipeline_stage_gbps", "strata_pipeline_overlap_ratio", "strata_plan_layers"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("missing %s", name)
		}
	}
	for _, m := range fams["strata_pipeline_stage_bytes_total"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "allc" && m.GetLabel()[1].GetValue() == "read" &&
			m.GetCounter().GetValue() != float64(modelByName(t, st, "allc").Pipeline.Read.Bytes) {
			t.Errorf("allc read bytes metric %v", m.GetCounter().GetValue())
		}
	}
	// The raw status carries the pipeline object for streamed models.
	_, sb := h.get(t, api.PathStatus)
	if !bytes.Contains(sb, []byte(`"pipeline":{`)) || !bytes.Contains(sb, []byte(`"layers":["C","C"`)) {
		t.Fatalf("status JSON: %s", sb)
	}

	// Unloading a streamed model keeps the daemon-wide counters.
	if _, err := h.srv.Unload("allc"); err != nil {
		t.Fatal(err)
	}
	_, b = h.get(t, "/metrics")
	if !strings.Contains(string(b), fmt.Sprintf(`strata_tier_bytes_moved_total{tier="C"} %d`, wantC)) &&
		!strings.Contains(string(b), fmt.Sprintf(`strata_tier_bytes_moved_total{tier="C"} %g`, float64(wantC))) {
		t.Fatalf("tier C counter changed after unload:\n%s", b)
	}
}

func mustStatus(t *testing.T, h *harness) api.Status {
	t.Helper()
	st, err := h.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSchedulerStreamsOncePerPass drives the scheduler over an all-C
// engine with four requests queued before it starts, so every pass
// carries all four: the pipeline must read each extent once per pass (not
// once per sequence), and there are exactly as many passes as the longest
// request needs.
func TestSchedulerStreamsOncePerPass(t *testing.T) {
	t.Parallel()
	pool, extents := stackedPool(t, t.TempDir(), 1, 2)
	var sum int64
	for _, e := range extents {
		sum += e
	}
	eng, err := engine.OpenWith(context.Background(), pool, engine.Options{Tiers: "all-C", Batch: 4, Context: 256, HostBudget: 1 << 30, Links: pinnedLinks(),
		Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	sc := sched.New(eng.Backend(), eng.Tok, sched.Config{MaxBatch: 4})
	const n = 10
	var hs []*sched.Handle
	for i := range 4 {
		h, err := sc.Submit(context.Background(), sched.Request{
			Prompt: eng.Tok.Encode(fmt.Sprintf("sequence %d of four", i), true, false), MaxTokens: n,
			Sample: sample.Params{TopP: 1, RepeatPenalty: 1}})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go sc.Run(ctx)
	longest := 0
	for i, h := range hs {
		var last sched.Event
		for ev := range h.Events {
			last = ev
		}
		if last.Err != nil {
			t.Fatalf("request %d: %v", i, last.Err)
		}
		longest = max(longest, last.CompletionTokens)
	}
	cancel()
	sc.Close(context.Canceled)
	st := eng.PipelineStats()
	passes := sc.Stats().Passes
	if passes != uint64(longest) || st.Passes != int64(passes) || st.Failed != 0 {
		t.Fatalf("%d scheduler passes, %d pipeline passes (%d failed); want %d (the longest request)", passes, st.Passes, st.Failed, longest)
	}
	if st.Read.Bytes != st.Passes*sum || st.Copy.Bytes != st.Passes*sum {
		t.Fatalf("read %d, copied %d over %d passes; want %d per pass (each extent once)", st.Read.Bytes, st.Copy.Bytes, st.Passes, sum)
	}
	t.Logf("4 sequences, %d passes, %d bytes read = %d per pass", st.Passes, st.Read.Bytes, sum)
}
