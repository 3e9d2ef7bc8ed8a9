package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/daemon/sched"
	"github.com/strata-llm/strata/internal/synth"
)

// stackedPool writes a pool whose layers are those of several tiny
// synthetic models of arch stacked (two per seed, none alike), so the
// planner has more layers than a pipeline slot ring and a budget can hold
// some of them. It returns the pool's path and the first model's GGUF.
func stackedPool(t *testing.T, arch, typ string, seeds ...uint64) (pool, ggufPath string) {
	t.Helper()
	dir := t.TempDir()
	var (
		cfg   model.Config
		w     = &model.Weights{}
		vocab *tokenizer.Vocab
	)
	for k, seed := range seeds {
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.gguf", arch, seed))
		if err := synth.Write(path, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: seed}); err != nil {
			t.Fatal(err)
		}
		g, err := gguf.Map(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		m, err := model.LoadGGUF(g)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			ggufPath = path
			cfg = m.Config
			w.Embed, w.OutputNorm, w.Output = m.Weights.Embed, m.Weights.OutputNorm, m.Weights.Output
			if vocab, err = tokenizer.VocabFromGGUF(g.File); err != nil {
				t.Fatal(err)
			}
		}
		w.Layers = append(w.Layers, m.Weights.Layers...)
	}
	cfg.Layers = len(w.Layers)
	m, err := model.New(cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	pool = filepath.Join(dir, arch+".pool")
	if err := prefab.WriteModelPool(m, vocab, pool, prefab.Options{}); err != nil {
		t.Fatal(err)
	}
	return pool, ggufPath
}

// defaultLinks keeps the tests from measuring the machine.
func defaultLinks() *tier.Links {
	l := tier.DefaultLinks()
	return &l
}

// greedy generates n tokens greedily (through the scheduler, as `strata
// run` does) and returns their ids and the text.
func greedy(t *testing.T, e *engine.Engine, n int) ([]int32, string, error) {
	t.Helper()
	res, err := sched.Generate(context.Background(), e.Backend(), e.Tok, sched.Request{
		Prompt: e.Tok.Encode("The fastest way to move a layer is", true, false), MaxTokens: n, Sample: sample.Params{TopP: 1, RepeatPenalty: 1},
	}, nil)
	return res.Tokens, res.Text, err
}

func sameIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// residentTokens is what the fully resident engine generates.
func residentTokens(t *testing.T, path string, n int) ([]int32, string) {
	t.Helper()
	e, err := engine.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids, text, err := greedy(t, e, n)
	if err != nil {
		t.Fatal(err)
	}
	if e.Plan() != nil || e.Streamed() || e.PipelineStats() != nil {
		t.Fatal("engine.Open reports a plan or a pipeline")
	}
	return ids, text
}

// extentSums adds up the extents a plan moves per pass: into device slots
// (tiers B and C) and from storage (tier C).
func extentSums(t *testing.T, path string, p *tier.Plan) (moved, read int64) {
	t.Helper()
	pool, err := prefab.OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i, l := range p.Layers {
		if l.Tier != tier.TierA {
			moved += pool.Extent(i).Length
		}
		if l.Tier == tier.TierC {
			read += pool.Extent(i).Length
		}
	}
	return moved, read
}

// TestStreamedSameTokens opens a pool streamed in every forced tier mix
// and under budgets the planner must stream within, and requires the
// resident engine's greedy tokens exactly, with each streamed extent moved
// once per pass.
// Sequential: it opens with the auto backend, so GPU 0 where there is one.
func TestStreamedSameTokens(t *testing.T) {
	const n = 12
	for _, mc := range []struct {
		arch, typ string
		seeds     []uint64
	}{{"llama", "q8_0", []uint64{1, 2, 3}}, {"gemma2", "f32", []uint64{4, 5}},
		{"qwen2", "q8_0", []uint64{1, 2, 3}}, {"gemma3", "q8_0", []uint64{4}}, {"phi3", "q8_0", []uint64{5, 6, 7}}, {"mixtral", "q8_0", []uint64{6, 7, 8, 9}}} {
		pool, _ := stackedPool(t, mc.arch, mc.typ, mc.seeds...)
		wantIDs, wantText := residentTokens(t, pool, n)
		t.Logf("%s: resident generates %d tokens %q", mc.arch, len(wantIDs), wantText)
		if len(wantIDs) < 2 {
			t.Fatalf("%s: resident run generated only %d tokens; the comparison would be weak", mc.arch, len(wantIDs))
		}

		// The budgets the planner must stream within: the whole model
		// misses by a third of a layer, so some layers go to C (their
		// slots and staging buffers displacing more) and the rest stay
		// on A.
		big, err := engine.OpenWith(context.Background(), pool, engine.Options{HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})
		if err != nil {
			t.Fatal(err)
		}
		full := big.Plan()
		big.Close()
		if full.Depth != 0 || full.Tiers[tier.TierA].Layers != len(full.Layers) {
			t.Fatalf("%s: 1 GiB budget: plan %+v, want all resident", mc.arch, full.Tiers)
		}
		layer := full.Layers[0].Bytes
		tight := full.Device.Total - layer/3
		mixedDev := full.Device.Total - 3*layer

		cases := []struct {
			name string
			opts engine.Options
			// want per tier, -1 = some but not all
			wantA, wantB, wantC int
		}{
			{"all-C", engine.Options{Tiers: "all-C", Depth: 2}, 0, 0, len(full.Layers)},
			{"all-B", engine.Options{Tiers: "all-B", Depth: 3}, 0, len(full.Layers), 0},
			{"mixed", engine.Options{Tiers: "mixed"}, -1, -1, -1},
			{"planned-shared", engine.Options{HostBudget: tight}, -1, 0, -1},
			{"planned-device", engine.Options{DeviceBudget: mixedDev, HostBudget: 4*layer + layer/2}, -1, -1, -1},
		}
		for _, tc := range cases {
			if mc.arch == "mixtral" && strings.HasPrefix(tc.name, "planned") {
				// These budgets count layers only: experts are planned on
				// their own (TestExpertsOnStorage).
				continue
			}
			t.Run(mc.arch+"/"+tc.name, func(t *testing.T) {
				o := tc.opts
				o.Context, o.Links = 256, defaultLinks()
				if o.HostBudget == 0 {
					o.HostBudget = 1 << 30
				}
				e, err := engine.OpenWith(context.Background(), pool, o)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				p := e.Plan()
				for tr, want := range []int{tc.wantA, tc.wantB, tc.wantC} {
					got := p.Tiers[tr].Layers
					if (want >= 0 && got != want) || (want < 0 && (got == 0 || got == len(p.Layers))) {
						t.Fatalf("tier %v has %d of %d layers, want %d (-1: some, not all)", tier.Tier(tr), got, len(p.Layers), want)
					}
				}
				if !e.Streamed() || p.Depth < 2 {
					t.Fatalf("streamed %v, depth %d", e.Streamed(), p.Depth)
				}
				if p.Shared && (p.Device.Total+p.Host.Total > p.Device.Budget || p.Host.Staging != int64(p.Depth)*p.StagingBytes ||
					(p.Tiers[tier.TierC].Layers > 0) != (p.Host.Staging > 0)) {
					t.Fatalf("shared plan: device %d + staging %d (%d x %d) over the budget %d", p.Device.Total, p.Host.Total,
						p.Depth, p.StagingBytes, p.Device.Budget)
				}
				ids, text, err := greedy(t, e, n)
				if err != nil {
					t.Fatal(err)
				}
				if !sameIDs(ids, wantIDs) || text != wantText {
					t.Fatalf("streamed %v %q, resident %v %q", ids, text, wantIDs, wantText)
				}
				st := e.PipelineStats()
				moved, read := extentSums(t, pool, p)
				if st.Passes < 2 || st.Failed != 0 || st.Copy.Bytes != st.Passes*moved || st.Read.Bytes != st.Passes*read {
					t.Fatalf("%d passes (%d failed): copied %d, read %d; want %d and %d per pass",
						st.Passes, st.Failed, st.Copy.Bytes, st.Read.Bytes, moved, read)
				}
				t.Logf("tiers A/B/C %d/%d/%d depth %d: %d passes, overlap %.2f", p.Tiers[0].Layers, p.Tiers[1].Layers,
					p.Tiers[2].Layers, p.Depth, st.Passes, st.Overlap)

				// A bare Model.Forward goes through the pipeline too.
				before := e.PipelineStats().Passes
				b := []model.Step{{Seq: e.Model.NewSequence(8), Tokens: []int32{1, 2}}}
				if err := e.Model.Forward(context.Background(), b); err != nil {
					t.Fatal(err)
				}
				if got := e.PipelineStats().Passes; got != before+1 {
					t.Fatalf("bare forward: %d passes, want %d", got, before+1)
				}
			})
		}
	}
}

// TestReadFailureFailsOneRequest injects a read error into one pass and
// requires that request to fail with an error naming the layer and the
// cause, and the next request to generate the resident tokens; then does
// the same with the pool file truncated under the open engine.
// Sequential: it opens with the auto backend, so GPU 0 where there is one.
func TestReadFailureFailsOneRequest(t *testing.T) {
	const n = 8
	pool, _ := stackedPool(t, "llama", "q8_0", 1, 2)
	wantIDs, _ := residentTokens(t, pool, n)
	if len(wantIDs) < 5 {
		t.Fatalf("resident run generated %d tokens; the decode-pass fault needs at least 5", len(wantIDs))
	}
	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	ext := []tier.Extent{p.Extent(0), p.Extent(1), p.Extent(2), p.Extent(3)}
	p.Close()

	t.Run("injected", func(t *testing.T) {
		var faulty *stream.FaultySource
		e, err := engine.OpenWith(context.Background(), pool, engine.Options{Tiers: "all-C", HostBudget: 1 << 30, Context: 256, Links: defaultLinks(),
			WrapSource: func(s tier.Source) tier.Source { faulty = stream.NewFaulty(s); return faulty }})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		// Prompt pass fails, then a decode pass fails.
		for _, failAt := range []int{0, 3} {
			faulty.Clear()
			if failAt == 0 {
				faulty.FailExtent(ext[2], true)
			} else {
				// Pass 0 (prompt) reads 4 extents; fail the 3rd read of
				// the pass after the next few.
				faulty.FailNth(int64(4*failAt + 3))
			}
			_, _, err := greedy(t, e, n)
			if err == nil || !errors.Is(err, stream.ErrInjected) || !strings.Contains(err.Error(), "layer ") {
				t.Fatalf("request over a failing read: %v", err)
			}
			t.Logf("failed request: %v", err)
			ids, _, err := greedy(t, e, n)
			if err != nil {
				t.Fatalf("next request: %v", err)
			}
			if !sameIDs(ids, wantIDs) {
				t.Fatalf("next request generated %v, want %v", ids, wantIDs)
			}
		}
		if st := e.PipelineStats(); st.Failed != 2 {
			t.Fatalf("%d failed passes, want 2", st.Failed)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		orig, err := os.ReadFile(pool)
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.OpenWith(context.Background(), pool, engine.Options{Tiers: "all-C", HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		// Cut the last layer's extent in half (the globals lie before the
		// layers, so the mapping the engine uses in place stays whole).
		last := ext[3]
		cut := last.Offset + last.Length/2/4096*4096
		if err := os.Truncate(pool, cut); err != nil {
			t.Fatal(err)
		}
		_, _, err = greedy(t, e, n)
		if err == nil || !strings.Contains(err.Error(), "layer 3") {
			t.Fatalf("request over a truncated pool: %v", err)
		}
		t.Logf("failed request: %v", err)
		f, err := os.OpenFile(pool, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt(orig[cut:], cut)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		ids, _, err := greedy(t, e, n)
		if err != nil {
			t.Fatalf("request after the file was restored: %v", err)
		}
		if !sameIDs(ids, wantIDs) {
			t.Fatalf("generated %v, want %v", ids, wantIDs)
		}
	})
}

// TestOpenWithRefuses covers the clear errors: a GGUF that would have to
// stream, budgets nothing fits, a bad forced mix, negative options.
// Sequential: it opens with the auto backend, so GPU 0 where there is one.
func TestOpenWithRefuses(t *testing.T) {
	pool, g := stackedPool(t, "llama", "q8_0", 1)
	links := defaultLinks()
	// The GGUF fits resident under a large budget and then plans all-A.
	e, err := engine.OpenWith(context.Background(), g, engine.Options{HostBudget: 1 << 30, Context: 256, Links: links})
	if err != nil {
		t.Fatal(err)
	}
	if p := e.Plan(); p == nil || p.Tiers[tier.TierA].Layers != e.Model.Config.Layers || e.Streamed() {
		t.Fatalf("GGUF under a large budget: plan %+v streamed %v", p, e.Streamed())
	}
	e.Close()
	cases := []struct {
		name, path string
		opts       engine.Options
		is         error
		msg        string
	}{
		{"gguf forced C", g, engine.Options{Tiers: "all-C"}, engine.ErrNeedsPool, "strata model prefab"},
		{"gguf forced mix", g, engine.Options{Tiers: "A,C"}, engine.ErrNeedsPool, "strata model prefab"},
		{"nothing fits", pool, engine.Options{HostBudget: 1 << 20}, tier.ErrNoFit, "device budget"},
		{"forced mix too big", pool, engine.Options{Tiers: "all-A", HostBudget: 4 << 20}, tier.ErrNoFit, "forced"},
		{"bad mix", pool, engine.Options{Tiers: "A,Q"}, nil, "tier mix"},
		{"negative", pool, engine.Options{Depth: -1}, nil, "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Context, o.Links = 256, links
			if o.HostBudget == 0 {
				o.HostBudget = 1 << 30
			}
			e, err := engine.OpenWith(context.Background(), tc.path, o)
			if err == nil {
				e.Close()
				t.Fatal("opened")
			}
			if (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v containing %q", err, tc.is, tc.msg)
			}
			t.Logf("%v", err)
		})
	}
}

// TestMoEOnCUDA: a mixture-of-experts GGUF on the CUDA backend runs its
// attention and routing on the GPU and, every expert fitting in the device
// memory left, its experts there too, with the CPU backend's logits (NMSE
// <= 1e-4, same argmax). Without
// a usable GPU, cuda is refused as unavailable and auto runs the model on
// the CPU, saying why.
func TestMoEOnCUDA(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mixtral.gguf")
	if err := synth.Write(path, synth.Options{Arch: "mixtral", Shape: "tiny", Type: "q8_0", Seed: 2}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 64, Links: defaultLinks()}
	cpu, err := engine.OpenWith(ctx, path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	want, err := passLogits(t, cpu, 4)
	if err != nil {
		t.Fatal(err)
	}
	o.Backend = engine.BackendCUDA
	e, err := engine.OpenWith(ctx, path, o)
	if errors.Is(err, engine.ErrCUDAUnavailable) {
		o.Backend = engine.BackendAuto
		a, aerr := engine.OpenWith(ctx, path, o)
		if aerr != nil {
			t.Fatal(aerr)
		}
		defer a.Close()
		if b := a.BackendInfo(); b.Name != engine.BackendCPU || b.Reason == "" {
			t.Fatalf("auto backend without a GPU: %+v", b)
		}
		t.Skipf("the GPU half needs a usable GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if b := e.BackendInfo(); b.Name != engine.BackendCUDA {
		t.Fatalf("backend %+v", b)
	}
	got, err := passLogits(t, e, 4)
	if err != nil {
		t.Fatal(err)
	}
	nearCPU(t, "cuda", got, want)
	if x, ok := e.Experts(); !ok || x.OnDevice != x.Experts || x.CPUUses != 0 || x.DeviceUses == 0 {
		t.Fatalf("experts %d of %d in device memory, picks %d on the GPU and %d on the CPU: want all on the GPU", x.OnDevice, x.Experts, x.DeviceUses, x.CPUUses)
	}
}
