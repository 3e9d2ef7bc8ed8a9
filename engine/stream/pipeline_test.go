package stream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// openFile opens the store's file as a tier-C source.
func openFile(t testing.TB, path string) *stream.FileSource {
	t.Helper()
	src, err := stream.OpenFile(path, stream.FileOptions{ChunkBytes: 64 << 10, QueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func newPipeline(t testing.TB, opts stream.Options) *stream.Pipeline {
	t.Helper()
	p, err := stream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestTierMixesBitExact runs every tier mix, batch size and depth on both
// architectures and requires the resident run's logits bit for bit, and
// exactly one transfer of each streamed layer per pass.
func TestTierMixesBitExact(t *testing.T) {
	for _, mc := range modelCases {
		tm := getModel(t, mc.arch, mc.typ, mc.seeds)
		n := tm.m.Config.Layers
		src := openFile(t, tm.path)
		t.Logf("%s: %d layers, O_DIRECT %v", mc.arch, n, src.Direct())
		want := map[int][]float32{}
		for _, B := range []int{1, 3, 8} {
			want[B] = residentLogits(t, tm, B)
		}
		for _, mix := range []string{"all-A", "all-B", "all-C", "mixed", "C,C,A,C,B,C" + strings.Repeat(",C", n-6)} {
			tiers, err := tier.MixTiers(mix, n)
			if err != nil {
				t.Fatal(err)
			}
			moved, read := streamedBytes(tm.store, tiers)
			for _, depth := range []int{1, 2, 4} {
				p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: depth, Source: src})
				for _, B := range []int{1, 3, 8} {
					if raceEnabled && B != map[int]int{1: 1, 2: 3, 4: 8}[depth] {
						// Under -race: one batch size per depth, so every
						// mix still meets every depth and every size.
						continue
					}
					t.Run(fmt.Sprintf("%s/%s/k%d/B%d", mc.arch, mix, depth, B), func(t *testing.T) {
						passes := 0
						got := schedule(t, tm.m, B, func(b []model.Step) error {
							if err := p.Forward(context.Background(), tm.m, b); err != nil {
								return err
							}
							passes++
							st := p.LastPass()
							if st.Copy.Bytes != moved || st.Read.Bytes != read || st.Compute.Layers != int64(n) || st.Failed != 0 {
								t.Errorf("pass %d of %d sequences: copied %d read %d computed %d layers failed %d; want %d, %d, %d, 0",
									passes, len(b), st.Copy.Bytes, st.Read.Bytes, st.Compute.Layers, st.Failed, moved, read, n)
							}
							return nil
						})
						sameBits(t, got, want[B])
					})
				}
				p.Close()
			}
		}
	}
}

// TestBareLayerSource uses the pipeline as a plain model.LayerSource: it
// begins a pass at Layer(0) and ends it after the last Release.
func TestBareLayerSource(t *testing.T) {
	mc := modelCases[1]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	want := residentLogits(t, tm, 3)
	tiers, _ := tier.MixTiers("mixed", tm.m.Config.Layers)
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: openFile(t, tm.path)})
	tm.m.SetLayerSource(p)
	defer tm.m.SetLayerSource(nil)
	got := schedule(t, tm.m, 3, func(b []model.Step) error { return tm.m.Forward(context.Background(), b) })
	sameBits(t, got, want)
	if st := p.Stats(); st.Passes < 3 || st.Failed != 0 {
		t.Fatalf("stats: %d passes, %d failed; want at least 3, 0", st.Passes, st.Failed)
	}
}

// TestMmapSourceTierC reads tier C through the page cache instead.
func TestMmapSourceTierC(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	want := residentLogits(t, tm, 3)
	src, err := stream.OpenMmap(tm.path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tiers, _ := tier.MixTiers("all-C", tm.m.Config.Layers)
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src, Verify: stream.VerifyAlways})
	got := schedule(t, tm.m, 3, func(b []model.Step) error { return p.Forward(context.Background(), tm.m, b) })
	sameBits(t, got, want)
}

// oneStep returns a fresh batch of B single-token steps and the logits of
// the same batch on the resident weights.
func oneStep(t *testing.T, tm *testModel, B int) (func() []model.Step, [][]float32) {
	mk := func() []model.Step {
		var b []model.Step
		for j := 0; j < B; j++ {
			b = append(b, model.Step{Seq: tm.m.NewSequence(16), Tokens: []int32{int32(3 + j), int32(40 + j)}})
		}
		return b
	}
	tm.m.SetLayerSource(nil)
	b := mk()
	if err := tm.m.Forward(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	var want [][]float32
	for _, st := range b {
		want = append(want, st.Logits[0])
	}
	return mk, want
}

// TestInjectedReadError fails a read mid-pass: that pass fails with an
// error naming the layer and extent, the sequences are untouched, and the
// next pass on the same pipeline gives the resident logits.
func TestInjectedReadError(t *testing.T) {
	for _, mc := range modelCases {
		tm := getModel(t, mc.arch, mc.typ, mc.seeds)
		n := tm.m.Config.Layers
		mk, want := oneStep(t, tm, 3)
		for _, tc := range []struct {
			name  string
			mix   string
			depth int
			arm   func(f *stream.FaultySource)
			layer int
		}{
			{"extent", "all-C", 2, func(f *stream.FaultySource) { f.FailExtent(tm.store.Extent(3), true) }, 3},
			{"nth", "all-C", 1, func(f *stream.FaultySource) { f.FailNth(5) }, 4},
			{"mixed", "mixed", 4, func(f *stream.FaultySource) { f.FailExtent(tm.store.Extent(2), true) }, 2},
		} {
			t.Run(mc.arch+"/"+tc.name, func(t *testing.T) {
				faulty := stream.NewFaulty(openFile(t, tm.path))
				tiers, _ := tier.MixTiers(tc.mix, n)
				p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: tc.depth, Source: faulty})
				tc.arm(faulty)
				b := mk()
				err := p.Forward(context.Background(), tm.m, b)
				if !errors.Is(err, stream.ErrInjected) {
					t.Fatalf("pass with a failing read: %v, want ErrInjected", err)
				}
				e := tm.store.Extent(tc.layer)
				for _, s := range []string{fmt.Sprintf("layer %d", tc.layer), e.String()} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				if st := p.LastPass(); st.Failed != 1 {
					t.Errorf("failed pass counted as %d failed", st.Failed)
				}
				for _, st := range b {
					if st.Seq.Pos() != 0 {
						t.Fatalf("failed pass moved a sequence to %d", st.Seq.Pos())
					}
				}
				// The next request on the same pipeline works.
				faulty.Clear()
				for attempt := 0; attempt < 2; attempt++ {
					b = mk()
					if err := p.Forward(context.Background(), tm.m, b); err != nil {
						t.Fatalf("pass after the failure: %v", err)
					}
					for j, st := range b {
						sameBits(t, st.Logits[0], want[j])
					}
				}
			})
		}
	}
}

// cancelSource cancels the pass's context when a given extent is read.
type cancelSource struct {
	tier.Source
	at     int64
	cancel context.CancelFunc
}

func (c *cancelSource) ReadAt(ctx context.Context, dst []byte, off int64) error {
	if off == c.at && c.cancel != nil {
		c.cancel()
		c.cancel = nil
		<-ctx.Done()
	}
	return c.Source.ReadAt(ctx, dst, off)
}

// TestCancelMidPass cancels a pass while stage 1 is reading: the pass
// fails with context.Canceled and the pipeline serves the next one.
func TestCancelMidPass(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	mk, want := oneStep(t, tm, 2)
	tiers, _ := tier.MixTiers("all-C", tm.m.Config.Layers)
	cs := &cancelSource{Source: openFile(t, tm.path), at: tm.store.Extent(2).Offset}
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 1, Source: cs})
	ctx, cancel := context.WithCancel(context.Background())
	cs.cancel = cancel
	if err := p.Forward(ctx, tm.m, mk()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled pass: %v, want context.Canceled", err)
	}
	b := mk()
	if err := p.Forward(context.Background(), tm.m, b); err != nil {
		t.Fatalf("pass after cancellation: %v", err)
	}
	for j, st := range b {
		sameBits(t, st.Logits[0], want[j])
	}
}

// corrupt flips one byte of layer i's extent in the store file.
func corrupt(t *testing.T, tm *testModel, i int) (restore func()) {
	f, err := os.OpenFile(tm.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := tm.store.Extent(i).Offset + 100
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	orig := b[0]
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	return func() {
		f, err := os.OpenFile(tm.path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{orig}, off); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorruptExtent: a tier-C extent whose bytes no longer match its
// checksum fails the pass, naming layer and extent; with VerifyAlways it
// is caught even after earlier passes verified it.
func TestCorruptExtent(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	mk, want := oneStep(t, tm, 1)
	tiers, _ := tier.MixTiers("all-C", tm.m.Config.Layers)
	src := openFile(t, tm.path)
	check := func(err error, layer int) {
		t.Helper()
		if err == nil {
			t.Fatal("pass over a corrupt extent succeeded")
		}
		for _, s := range []string{fmt.Sprintf("layer %d", layer), tm.store.Extent(layer).String(), "checksum"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
	}

	t.Run("first-read", func(t *testing.T) {
		p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src})
		restore := corrupt(t, tm, 4)
		check(p.Forward(context.Background(), tm.m, mk()), 4)
		restore()
		b := mk()
		if err := p.Forward(context.Background(), tm.m, b); err != nil {
			t.Fatalf("pass after repair: %v", err)
		}
		sameBits(t, b[0].Logits[0], want[0])
	})
	t.Run("always", func(t *testing.T) {
		p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src, Verify: stream.VerifyAlways})
		if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
			t.Fatal(err)
		}
		restore := corrupt(t, tm, 1)
		defer restore()
		check(p.Forward(context.Background(), tm.m, mk()), 1)
	})
	// The default checks every read: an extent corrupted after the first
	// pass read it is caught on the next, and the failure is logged with
	// the layer and the extent.
	t.Run("default", func(t *testing.T) {
		var logs strings.Builder
		log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error})
		p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src, Logger: log})
		if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
			t.Fatal(err)
		}
		restore := corrupt(t, tm, 3)
		defer restore()
		check(p.Forward(context.Background(), tm.m, mk()), 3)
		e := tm.store.Extent(3)
		for _, s := range []string{"[ERROR]", "checksum", "layer=3", fmt.Sprintf("offset=%d", e.Offset), fmt.Sprintf("length=%d", e.Length)} {
			if !strings.Contains(logs.String(), s) {
				t.Errorf("log lacks %q:\n%s", s, logs.String())
			}
		}
	})
	// first trusts an extent once verified; never trusts every read.
	t.Run("first", func(t *testing.T) {
		p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src, Verify: stream.VerifyFirst})
		if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
			t.Fatal(err)
		}
		restore := corrupt(t, tm, 2)
		defer restore()
		if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
			t.Fatalf("first: a verified extent was checked again: %v", err)
		}
	})
	t.Run("never", func(t *testing.T) {
		p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src, Verify: stream.VerifyNever})
		restore := corrupt(t, tm, 2)
		defer restore()
		if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
			t.Fatalf("never: %v", err)
		}
	})
}

func TestParseVerifyMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want stream.VerifyMode
		ok   bool
	}{{"", stream.VerifyAlways, true}, {"always", stream.VerifyAlways, true}, {"first", stream.VerifyFirst, true},
		{"never", stream.VerifyNever, true}, {"sometimes", 0, false}, {"Always", 0, false}} {
		m, err := stream.ParseVerifyMode(tc.in)
		if (err == nil) != tc.ok || tc.ok && (m != tc.want || m.String() != map[string]string{"": "always"}[tc.in]+tc.in) {
			t.Errorf("%q: %v %v", tc.in, m, err)
		}
	}
	if _, err := stream.New(stream.Options{Store: nil}); err == nil {
		t.Error("no store accepted")
	}
}

// TestNoGoroutineLeak: after Close of pipeline and source, every
// goroutine they started is gone, including after failed passes.
func TestNoGoroutineLeak(t *testing.T) {
	mc := modelCases[1]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	mk, _ := oneStep(t, tm, 2) // starts the model's worker pool first
	before := runtime.NumGoroutine()
	func() {
		src, err := stream.OpenFile(tm.path, stream.FileOptions{QueueDepth: 6})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		faulty := stream.NewFaulty(src)
		tiers, _ := tier.MixTiers("mixed", tm.m.Config.Layers)
		p, err := stream.New(stream.Options{Store: tm.store, Tiers: tiers, Depth: 3, Source: faulty})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := 0; i < 3; i++ {
			if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
				t.Fatal(err)
			}
		}
		faulty.FailNth(2)
		if err := p.Forward(context.Background(), tm.m, mk()); err == nil {
			t.Fatal("injected failure did not fail the pass")
		}
		// A bare pass left open (Forward failed without End) too.
		tm.m.SetLayerSource(p)
		faulty.FailNth(1)
		if err := tm.m.Forward(context.Background(), mk()); err == nil {
			t.Fatal("injected failure did not fail the bare pass")
		}
		tm.m.SetLayerSource(nil)
	}()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// TestNewRejects checks New's validation of bad plans.
func TestNewRejects(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	n := tm.m.Config.Layers
	allC, _ := tier.MixTiers("all-C", n)
	for _, tc := range []struct {
		name string
		opts stream.Options
		want string
	}{
		{"no store", stream.Options{Depth: 1}, "no layer store"},
		{"short plan", stream.Options{Store: tm.store, Tiers: allC[:2], Depth: 1}, "2 tiers for"},
		{"depth 0", stream.Options{Store: tm.store, Tiers: allC, Depth: 0}, "depth 0"},
		{"no source", stream.Options{Store: tm.store, Tiers: allC, Depth: 1}, "no source"},
		{"bad tier", stream.Options{Store: tm.store, Tiers: append(allC[:n-1:n-1], tier.Tier(9)), Depth: 1, Source: openFile(t, tm.path)}, "unknown tier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stream.New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestStatsOverlap checks the stats' arithmetic on a real pass.
func TestStatsOverlap(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	mk, _ := oneStep(t, tm, 1)
	tiers, _ := tier.MixTiers("all-C", tm.m.Config.Layers)
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: openFile(t, tm.path)})
	for i := 0; i < 3; i++ {
		if err := p.Forward(context.Background(), tm.m, mk()); err != nil {
			t.Fatal(err)
		}
	}
	st := p.Stats()
	if st.Passes != 3 || st.Read.Layers != 3*int64(tm.m.Config.Layers) {
		t.Fatalf("cumulative: %+v", st)
	}
	if st.Overlap < 0 || st.Overlap > 1 || st.ComputeUtil <= 0 || st.ComputeUtil > 1 {
		t.Fatalf("overlap %v, compute util %v out of range", st.Overlap, st.ComputeUtil)
	}
	if st.Read.GBps <= 0 || st.Copy.GBps <= 0 || st.Compute.Busy+st.Compute.Stall > st.Wall+time.Millisecond {
		t.Fatalf("stats: %+v", st)
	}
	p.ResetStats()
	if st := p.Stats(); st.Passes != 0 {
		t.Fatalf("after reset: %+v", st)
	}
}

// computeDevice is the CPU device driven the way the CUDA device is: the
// pipeline issues its copies from Layer and Release, without waiting for
// them, and Layer waits (Await) and decodes.
type computeDevice struct{ stream.CPUDevice }

func (computeDevice) IssueOnCompute() bool { return true }

// TestIssueOnCompute runs stage 2 from the compute goroutine, as for the
// CUDA device, over every tier mix and a few depths: the resident run's
// logits bit for bit and each streamed layer moved once per pass; a read
// failing mid-pass and a cancelled pass fail only themselves.
func TestIssueOnCompute(t *testing.T) {
	for _, mc := range modelCases {
		tm := getModel(t, mc.arch, mc.typ, mc.seeds)
		n := tm.m.Config.Layers
		want := residentLogits(t, tm, 3)
		for _, mix := range []string{"all-B", "all-C", "mixed", "C,C,A,C,B,C" + strings.Repeat(",C", n-6)} {
			for _, depth := range []int{1, 2, 4} {
				t.Run(fmt.Sprintf("%s/%s/k%d", mc.arch, mix, depth), func(t *testing.T) {
					tiers, err := tier.MixTiers(mix, n)
					if err != nil {
						t.Fatal(err)
					}
					moved, read := streamedBytes(tm.store, tiers)
					faulty := stream.NewFaulty(openFile(t, tm.path))
					p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: depth, Source: faulty, Device: computeDevice{}})
					got := schedule(t, tm.m, 3, func(b []model.Step) error {
						if err := p.Forward(context.Background(), tm.m, b); err != nil {
							return err
						}
						st := p.LastPass()
						if st.Copy.Bytes != moved || st.Read.Bytes != read || st.Compute.Layers != int64(n) || st.Failed != 0 {
							t.Errorf("pass: copied %d read %d computed %d layers failed %d; want %d, %d, %d, 0",
								st.Copy.Bytes, st.Read.Bytes, st.Compute.Layers, st.Failed, moved, read, n)
						}
						return nil
					})
					sameBits(t, got, want)
					if read == 0 {
						return
					}
					mk, one := oneStep(t, tm, 2)
					faulty.FailNth(1)
					if err := p.Forward(context.Background(), tm.m, mk()); !errors.Is(err, stream.ErrInjected) {
						t.Fatalf("pass with a failing read: %v", err)
					}
					faulty.Clear()
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					if err := p.Forward(ctx, tm.m, mk()); !errors.Is(err, context.Canceled) {
						t.Fatalf("cancelled pass: %v", err)
					}
					b := mk()
					if err := p.Forward(context.Background(), tm.m, b); err != nil {
						t.Fatalf("pass after the failures: %v", err)
					}
					for j, st := range b {
						sameBits(t, st.Logits[0], one[j])
					}
					if st := p.Stats(); st.Failed != 2 {
						t.Fatalf("stats: %d failed passes, want 2", st.Failed)
					}
				})
			}
		}
	}
}

// TestSetLength: a tier-B layer set to move a prefix of its extent copies
// only that many bytes a pass until it is set back; SetLength refuses an
// open pass, a layer off tier B and lengths outside (0, extent].
func TestSetLength(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	n := tm.m.Config.Layers
	tiers, err := tier.MixTiers("A"+strings.Repeat(",B", n-1), n)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := streamedBytes(tm.store, tiers)
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Device: computeDevice{}, SlotsOnly: true})
	pass := func() int64 {
		t.Helper()
		return slotsPass(t, p, n).Copy.Bytes
	}
	if got := pass(); got != full {
		t.Fatalf("copied %d bytes, want %d", got, full)
	}
	ext := tm.store.Extent(1)
	if err := p.SetLength(1, 100); err != nil {
		t.Fatal(err)
	}
	if got, want := pass(), full-ext.Length+100; got != want {
		t.Fatalf("with layer 1 trimmed: copied %d bytes, want %d", got, want)
	}
	if err := p.SetLength(1, ext.Length); err != nil {
		t.Fatal(err)
	}
	if got := pass(); got != full {
		t.Fatalf("restored: copied %d bytes, want %d", got, full)
	}
	for _, tc := range []struct {
		name string
		i    int
		n    int64
	}{{"tier A", 0, 10}, {"zero", 1, 0}, {"past the extent", 1, ext.Length + 1}, {"no such layer", n, 10}} {
		if err := p.SetLength(tc.i, tc.n); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if err := p.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.SetLength(1, 100); err == nil {
		t.Error("SetLength during a pass: no error")
	}
	// Finish the pass: the test device's copies run on their own and
	// its Sync does not wait for them.
	for i := 0; i < n; i++ {
		if _, err := p.Acquire(i); err != nil {
			t.Fatal(err)
		}
		if err := p.Done(i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Finish(false); err != nil {
		t.Fatal(err)
	}
}

// TestSetSkip: with layers skipped in the model and the pipeline, a pass
// reads and copies none of their bytes and gives the resident model's
// logits with the same layers skipped, bit for bit; restoring every
// layer restores the traffic; bad layers are refused.
func TestSetSkip(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	n := tm.m.Config.Layers
	tiers, err := tier.MixTiers("A,C,C,B,C"+strings.Repeat(",C", n-5), n)
	if err != nil {
		t.Fatal(err)
	}
	skip := []int{0, 2, 3}
	if err := tm.m.SetSkip(skip); err != nil {
		t.Fatal(err)
	}
	defer tm.m.SetSkip(nil)
	want := residentLogits(t, tm, 3)
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: openFile(t, tm.path)})
	if err := p.SetSkip(skip); err != nil {
		t.Fatal(err)
	}
	moved, read := streamedBytes(tm.store, tiers)
	for _, l := range skip[1:] {
		moved -= tm.store.Extent(l).Length
		if tiers[l] == tier.TierC {
			read -= tm.store.Extent(l).Length
		}
	}
	got := schedule(t, tm.m, 3, func(b []model.Step) error {
		if err := p.Forward(context.Background(), tm.m, b); err != nil {
			return err
		}
		if st := p.LastPass(); st.Copy.Bytes != moved || st.Read.Bytes != read || st.Compute.Layers != int64(n-len(skip)) {
			t.Errorf("skipping %v: copied %d read %d computed %d layers; want %d, %d, %d", skip, st.Copy.Bytes, st.Read.Bytes, st.Compute.Layers, moved, read, n-len(skip))
		}
		return nil
	})
	sameBits(t, got, want)

	if err := p.SetSkip(nil); err != nil {
		t.Fatal(err)
	}
	if err := tm.m.SetSkip(nil); err != nil {
		t.Fatal(err)
	}
	full, fullRead := streamedBytes(tm.store, tiers)
	sameBits(t, schedule(t, tm.m, 3, func(b []model.Step) error {
		if err := p.Forward(context.Background(), tm.m, b); err != nil {
			return err
		}
		if st := p.LastPass(); st.Copy.Bytes != full || st.Read.Bytes != fullRead {
			t.Errorf("restored: copied %d read %d; want %d, %d", st.Copy.Bytes, st.Read.Bytes, full, fullRead)
		}
		return nil
	}), residentLogits(t, tm, 3))
	for _, bad := range [][]int{{-1}, {n}} {
		if err := p.SetSkip(bad); err == nil {
			t.Errorf("SetSkip(%v): no error", bad)
		}
	}
}

// TestCarryIntoNextPass: driven from compute, a pass issues the next
// pass's first copies once it has released what they overwrite, the next
// pass starts with them (Stats.Carried) and computes the resident logits
// bit for bit; a failed pass leaves none, and Close waits for any still
// in flight. TestCarryRelaid: new lengths drop them.
func TestCarryIntoNextPass(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	n := tm.m.Config.Layers
	for _, tc := range []struct {
		mix         string
		depth       int
		wantCarried int64 // from the second pass on
	}{
		{"all-B", 1, 1},
		{"all-B", 2, 2},
		{"A" + strings.Repeat(",B", n-1), 2, 2},
		// Tier C needs a staging buffer per read: nothing is carried past
		// the first tier-C layer.
		{"C" + strings.Repeat(",B", n-1), 2, 0},
		{"B,C" + strings.Repeat(",B", n-2), 2, 1},
	} {
		t.Run(fmt.Sprintf("%s/k%d", tc.mix, tc.depth), func(t *testing.T) {
			tiers, err := tier.MixTiers(tc.mix, n)
			if err != nil {
				t.Fatal(err)
			}
			moved, _ := streamedBytes(tm.store, tiers)
			mk, want := oneStep(t, tm, 1)
			p, err := stream.New(stream.Options{Store: tm.store, Tiers: tiers, Depth: tc.depth, Source: openFile(t, tm.path), Device: computeDevice{}})
			if err != nil {
				t.Fatal(err)
			}
			pass := func(wantCarried int64) {
				t.Helper()
				b := mk()
				if err := p.Forward(context.Background(), tm.m, b); err != nil {
					t.Fatal(err)
				}
				sameBits(t, b[0].Logits[0], want[0])
				st := p.LastPass()
				if st.Carried != wantCarried || st.Copy.Bytes != moved || st.Failed != 0 {
					t.Fatalf("pass: carried %d copies, copied %d bytes, failed %d; want %d, %d, 0", st.Carried, st.Copy.Bytes, st.Failed, wantCarried, moved)
				}
				if st.Lead <= 0 || st.Tail < 0 {
					t.Fatalf("pass: lead %v, tail %v", st.Lead, st.Tail)
				}
			}
			pass(0)
			pass(tc.wantCarried)
			pass(tc.wantCarried)
			if tc.wantCarried == 0 {
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			// A cancelled pass leaves nothing carried.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := p.Forward(ctx, tm.m, mk()); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled pass: %v", err)
			}
			pass(0)
			pass(tc.wantCarried)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCarryRelaid: copies carried into a pass whose lengths changed
// (engine/gpu's hybrid placement re-planned) are dropped, since the new
// layout puts the layers elsewhere; with the lengths kept, they are used.
func TestCarryRelaid(t *testing.T) {
	mc := modelCases[0]
	tm := getModel(t, mc.arch, mc.typ, mc.seeds)
	n := tm.m.Config.Layers
	tiers, err := tier.MixTiers("A"+strings.Repeat(",B", n-1), n)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipeline(t, stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Device: computeDevice{}, SlotsOnly: true})
	pass := func(wantCarried int64) {
		t.Helper()
		if st := slotsPass(t, p, n); st.Carried != wantCarried {
			t.Fatalf("carried %d copies, want %d", st.Carried, wantCarried)
		}
	}
	pass(0)
	pass(2)
	full := tm.store.Extent(1).Length
	for _, tc := range []struct {
		length      int64
		wantCarried int64
	}{{full, 2}, {100, 0}, {100, 3}, {full, 0}, {full, 2}} { // a short layer 1 leaves room for a third
		if err := p.SetLength(1, tc.length); err != nil {
			t.Fatal(err)
		}
		pass(tc.wantCarried)
	}
}

// slotsPass runs one pass of a SlotsOnly pipeline of n layers the way the
// CUDA backend drives it (Begin, Acquire and Done for each layer, Finish)
// and returns its Stats.
func slotsPass(t *testing.T, p *stream.Pipeline, n int) stream.Stats {
	t.Helper()
	if err := p.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := p.Acquire(i); err != nil {
			t.Fatal(err)
		}
		if err := p.Done(i); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.Finish(false)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
