package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/synth"
)

// TestExpertsOnStorage: a mixture-of-experts pool under a budget that holds
// its layers and about half of its experts keeps the rest in the file and
// reads them when routed to: the same greedy tokens as the resident model,
// every read counted and checked, a failed read failing only its request,
// and a GGUF under such a budget refused with the way out. On the CPU
// backend, whose plan shares one budget (TestExpertsOnStorageCUDA is the
// GPU's).
func TestExpertsOnStorage(t *testing.T) {
	t.Parallel()
	const n = 12
	pool, gg := stackedPool(t, "mixtral", "q8_0", 6, 7)
	wantIDs, wantText := residentTokens(t, pool, n)
	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	sizes := p.Sizes()
	ext, err := p.ExpertExtent(0, 0)
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	var experts int64
	for _, l := range sizes.Experts {
		for _, n := range l {
			if n != ext.Length {
				t.Fatalf("experts of different sizes (%d, %d): the byte count below assumes one size", n, ext.Length)
			}
			experts += n
		}
	}
	big, err := engine.OpenWith(context.Background(), pool, engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	layersOnly := big.Plan().Device.Total + big.Plan().Host.Total
	if xp := big.ExpertPlan(); xp == nil || !xp.AllResident() {
		t.Fatalf("1 GiB: expert plan %+v, want all resident", xp)
	}
	if _, ok := big.ExpertStats(); ok {
		t.Fatal("all experts resident, yet a store reads them")
	}
	big.Close()
	budget := layersOnly + experts/2

	var faulty *stream.FaultySource
	e, err := engine.OpenWith(context.Background(), pool, engine.Options{Backend: engine.BackendCPU, HostBudget: budget, Context: 256, Links: defaultLinks(),
		WrapSource: func(s tier.Source) tier.Source { faulty = stream.NewFaulty(s); return faulty }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	xp := e.ExpertPlan()
	all := e.Model.Config.Layers * e.Model.Config.Experts
	// Calibrated at load: the experts the calibration text was routed to
	// most (per byte; all are one size) are the resident ones.
	x, _ := e.Experts()
	if x.Resident != xp.ResidentCount() || x.ResidentBytes != xp.ResidentBytes {
		t.Fatalf("after calibration %d experts (%d bytes) resident, the plan had %d (%d)", x.Resident, x.ResidentBytes, xp.ResidentCount(), xp.ResidentBytes)
	}
	counts := e.Model.ExpertCounts()
	for l := range counts {
		for i := range counts[l] {
			for j := range counts[l] {
				if x.Residency[l][i] && !x.Residency[l][j] && counts[l][j] > counts[l][i] {
					t.Fatalf("layer %d: expert %d (%d calibration uses) resident, expert %d (%d) not", l, i, counts[l][i], j, counts[l][j])
				}
			}
		}
	}
	// The calibration's passes and promotions are the load's: serving's
	// counts start at zero, and the source's reads so far are the load's.
	if at := x.Stats; at.Uses() != 0 || at.ReadBytes != 0 || at.PrefetchReads != 0 || at.Promoted != 0 || at.Demoted != 0 || at.PromoteReads != 0 || at.Failed != 0 {
		t.Fatalf("after the load, before any request: %+v, want nothing counted", x.Stats)
	}
	loadReads := faulty.Reads()
	if loadReads <= int64(e.Model.Config.Layers)+int64(xp.ResidentCount()) {
		t.Fatalf("the load read %d times: the routers and the planned experts alone, no calibration", loadReads)
	}
	if xp == nil || xp.ResidentCount() == 0 || xp.ResidentCount() == all || xp.Buffers == 0 {
		t.Fatalf("budget %s: %d of %d experts resident, %d buffers; want some of each", tier.FormatBytes(budget), xp.ResidentCount(), all, xp.Buffers)
	}
	if used := e.Plan().Device.Total + e.Plan().Host.Total + xp.ResidentBytes + int64(xp.Buffers)*xp.BufferBytes; used > budget {
		t.Fatalf("layers, resident experts and buffers take %d, over the budget %d", used, budget)
	}
	ids, text, err := greedy(t, e, n)
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(ids, wantIDs) || text != wantText {
		t.Fatalf("experts on storage: %v %q, resident %v %q", ids, text, wantIDs, wantText)
	}
	// A round of promotions or a read ahead may still be reading: the
	// source counts its reads as they start, the stats some as they end.
	engine.SettleExperts(e)
	st, ok := e.ExpertStats()
	// Beyond the load's reads (each layer's router, the planned resident
	// experts, the calibration's), the source read each miss, each
	// expert read ahead and each promoted (installed or not yet).
	// Their bytes count but for reads ahead cut short unused (the pass
	// that started one ended, cancelling its context).
	reads := st.Read + st.PrefetchReads + st.PromoteReads
	unused := st.PrefetchReads - min(st.Prefetched, st.PrefetchReads)
	if !ok || st.Resident == 0 || st.Read+st.Prefetched == 0 || st.PrefetchReads == 0 || st.Failed != 0 || st.PromoteReads < st.Promoted ||
		st.ReadBytes%ext.Length != 0 || st.ReadBytes > int64(reads)*ext.Length || st.ReadBytes < int64(reads-unused)*ext.Length ||
		faulty.Reads() != loadReads+int64(reads) {
		t.Fatalf("stats %+v (%d source reads)", st, faulty.Reads())
	}
	t.Logf("%d of %d experts resident (plan hit %.2f): %d uses resident, %d buffered, %d read ahead (%d reads), %d read (%s); trial %+v",
		xp.ResidentCount(), all, xp.Hit, st.Resident, st.Buffered, st.Prefetched, st.PrefetchReads, st.Read, tier.FormatBytes(st.ReadBytes), st.AheadChoices)
	// The decode passes (one token) timed both ways and kept one.
	if !slices.ContainsFunc(st.AheadChoices, func(c engine.AheadChoice) bool { return c.Batch == 1 && c.With > 0 && c.Without > 0 }) {
		t.Fatalf("no read-ahead decision for one-token passes: %+v", st.AheadChoices)
	}

	// Read only when routed to: the same tokens, nothing read ahead.
	lazy, err := engine.OpenWith(context.Background(), pool, engine.Options{Backend: engine.BackendCPU, HostBudget: budget, Context: 256, Links: defaultLinks(), ExpertReadAhead: engine.ReadAheadOff})
	if err != nil {
		t.Fatal(err)
	}
	lazyIDs, _, err := greedy(t, lazy, n)
	lst, _ := lazy.ExpertStats()
	lazy.Close()
	if err != nil || !sameIDs(lazyIDs, wantIDs) || lst.PrefetchReads != 0 || lst.Read == 0 {
		t.Fatalf("no reads ahead: %v, %v, stats %+v; want %v", lazyIDs, err, lst, wantIDs)
	}

	// Every storage expert's reads fail: read ahead or not, the request
	// that needs one fails naming it; the next one is right.
	expertReadFails(t, "CPU", e, pool, faulty, n, wantIDs)

	// Experts changed on storage under the engine: every read is checked
	// (the default), so the request that reads one fails naming it, and
	// once the file is whole again the next one is right.
	orig, err := os.ReadFile(pool)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(orig)
	for _, ext := range storageExperts(t, e, pool) {
		bad[ext.Offset+ext.Length/2] ^= 0xff
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(pool, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(bad)
	_, _, err = greedy(t, e, n)
	write(orig)
	if err == nil || !errors.Is(err, prefab.ErrCorrupt) || !strings.Contains(err.Error(), "expert") {
		t.Fatalf("request over corrupted experts: %v", err)
	}
	if ids, _, err = greedy(t, e, n); err != nil || !sameIDs(ids, wantIDs) {
		t.Fatalf("request after the file was restored: %v, %v; want %v", ids, err, wantIDs)
	}

	// The GGUF cannot read single experts: refused with the way out.
	one, err := engine.OpenWith(context.Background(), gg, engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	ggLayers := one.Plan().Device.Total + one.Plan().Host.Total
	one.Close()
	if one, err = engine.OpenWith(context.Background(), gg, engine.Options{Backend: engine.BackendCPU, HostBudget: ggLayers + experts/4, Context: 256, Links: defaultLinks()}); err == nil {
		one.Close()
		t.Fatal("a GGUF with experts on storage opened")
	}
	if !errors.Is(err, engine.ErrNeedsPool) || !strings.Contains(err.Error(), "experts on storage") {
		t.Fatalf("GGUF with experts on storage: %v", err)
	}
}

var namedExpert = regexp.MustCompile(`layer (\d+) expert (\d+)`)

// failedNaming checks err, a request's over experts whose reads fail: the
// injected error, naming a layer and an expert among failing's.
func failedNaming(t *testing.T, name string, err error, failing map[[2]int]bool) {
	t.Helper()
	if err == nil || !errors.Is(err, stream.ErrInjected) {
		t.Fatalf("%s: request over failing expert reads: %v, want the injected error", name, err)
	}
	m := namedExpert.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("%s: request over failing expert reads: %v, names no layer and expert", name, err)
	}
	l, _ := strconv.Atoi(m[1])
	x, _ := strconv.Atoi(m[2])
	if !failing[[2]int{l, x}] {
		t.Fatalf("%s: the error names layer %d expert %d, not one on storage: %v", name, l, x, err)
	}
	t.Logf("%s: failed request: %v", name, err)
}

// storageExperts returns the pool's extents of the experts e holds on
// storage now.
func storageExperts(t *testing.T, e *engine.Engine, pool string) []tier.Extent {
	t.Helper()
	var out []tier.Extent
	for _, ext := range storageExtents(t, e, pool) {
		out = append(out, ext)
	}
	return out
}

// failStorageExperts makes every read of the experts e holds on storage
// now fail, and returns them by (layer, expert).
func failStorageExperts(t *testing.T, e *engine.Engine, pool string, faulty *stream.FaultySource) map[[2]int]bool {
	t.Helper()
	failing := map[[2]int]bool{}
	for id, ext := range storageExtents(t, e, pool) {
		faulty.FailExtent(ext, false)
		failing[id] = true
	}
	return failing
}

// storageExtents returns the pool's extents of the experts e holds on
// storage now, by (layer, expert).
func storageExtents(t *testing.T, e *engine.Engine, pool string) map[[2]int]tier.Extent {
	t.Helper()
	x, _ := e.Experts()
	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := map[[2]int]tier.Extent{}
	for l := range x.Residency {
		for i, r := range x.Residency[l] {
			if !r {
				ext, err := p.ExpertExtent(l, i)
				if err != nil {
					t.Fatal(err)
				}
				out[[2]int{l, i}] = ext
			}
		}
	}
	return out
}

// TestExpertsOnStorageCUDA: a mixture-of-experts pool on the CUDA backend
// under a host budget that leaves some experts on storage runs its
// attention on the GPU and its experts from the same store as the CPU
// backend (planned in the host memory tier B leaves, calibrated at load
// on the GPU's routing, read when routed to): the CPU's logits within
// NMSE 1e-4 in f32 (quantized types flip discrete routing on near ties),
// with layers resident and with layers on tiers B and C too; a GGUF under
// such a budget is refused with the way out. It skips without a GPU.
// Sequential: it opens the GPU.
func TestExpertsOnStorageCUDA(t *testing.T) {
	ctx := context.Background()
	pool, gg := stackedPool(t, "mixtral", "f32", 6, 7)
	experts, _ := poolExperts(t, pool)
	want, _, _ := cpuReference(t, pool)

	for _, tc := range []struct{ name, tiers string }{
		{"layers resident", ""},
		{"layers on tiers A, B and C", "A,B,C,C"},
	} {
		o := engine.Options{Backend: engine.BackendCUDA, HostBudget: 1 << 30, Context: 64, Links: defaultLinks(), Tiers: tc.tiers}
		// No room for experts in device memory: the CPU computes them all
		// (TestExpertsOnDeviceCUDA places some on the GPU).
		o.DeviceBudget = deviceBudgetLeaving(t, pool, o, 0)
		e, err := engine.OpenWith(ctx, pool, o)
		if errors.Is(err, engine.ErrCUDAUnavailable) {
			t.Skipf("needs a usable GPU: %v", err)
		}
		if err != nil {
			t.Fatalf("%s, 1 GiB: %v", tc.name, err)
		}
		layers := e.Plan().Host.Total
		if xp := e.ExpertPlan(); xp == nil || !xp.AllResident() {
			t.Fatalf("%s, 1 GiB: expert plan %+v, want all resident", tc.name, xp)
		}
		e.Close()

		o.HostBudget = layers + experts*3/4
		var faulty *stream.FaultySource
		o.WrapSource = func(s tier.Source) tier.Source { faulty = stream.NewFaulty(s); return faulty }
		if e, err = engine.OpenWith(ctx, pool, o); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		xp := e.ExpertPlan()
		if b := e.BackendInfo(); b.Name != engine.BackendCUDA || xp == nil || xp.AllResident() || xp.ResidentCount() == 0 {
			e.Close()
			t.Fatalf("%s: backend %s, expert plan %+v; want the GPU with some experts on storage", tc.name, b.Name, xp)
		}
		x, _ := e.Experts()
		// The calibration's moves are the load's: serving's counts start
		// at zero (TestExpertsOnStorage).
		if x.Resident != xp.ResidentCount() || x.Stats.Uses() != 0 || x.Stats.Promoted != 0 || x.Stats.ReadBytes != 0 {
			e.Close()
			t.Fatalf("%s: after calibration %d experts resident (plan %d), stats %+v; want the plan's count, nothing counted", tc.name, x.Resident, xp.ResidentCount(), x.Stats)
		}
		before, _ := e.ExpertStats()
		got, err := passLogits(t, e, 4)
		after, ok := e.ExpertStats()
		if err != nil {
			e.Close()
			t.Fatalf("%s: %v", tc.name, err)
		}
		nearCPU(t, tc.name, got, want)
		if !ok || after.Read == 0 || after.Uses() <= before.Uses() || after.Failed != 0 {
			e.Close()
			t.Fatalf("%s: expert stats %+v (before the passes %+v): want reads, and uses by the passes", tc.name, after, before)
		}
		t.Logf("%s: %d of %d experts resident; %d uses resident, %d buffered, %d read (%s)", tc.name, x.Resident, x.Experts,
			after.Resident, after.Buffered, after.Read, tier.FormatBytes(after.ReadBytes))
		// What a request generates before the failures, as the one after
		// them must.
		want, _, err := greedy(t, e, 8)
		if err != nil {
			e.Close()
			t.Fatalf("%s: request before the failures: %v", tc.name, err)
		}
		expertReadFails(t, tc.name, e, pool, faulty, 8, want)
		e.Close()
	}

	// A GGUF cannot read single experts: refused on the GPU too, with the
	// way out.
	e, err := engine.OpenWith(ctx, gg, engine.Options{Backend: engine.BackendCUDA, HostBudget: experts * 3 / 8, Context: 64, Links: defaultLinks()})
	if err == nil {
		e.Close()
		t.Fatal("a GGUF with experts on storage opened on the GPU")
	}
	if !errors.Is(err, engine.ErrNeedsPool) || !strings.Contains(err.Error(), "experts on storage") {
		t.Fatalf("GGUF with experts on storage on the GPU: %v", err)
	}
}

// expertReadFails: with every storage expert's reads failing, the
// request of n tokens that needs one fails naming it (layer and expert),
// the engine stays up, and once the reads succeed the next request
// generates want.
func expertReadFails(t *testing.T, name string, e *engine.Engine, pool string, faulty *stream.FaultySource, n int, want []int32) {
	t.Helper()
	engine.SettleExperts(e)
	failing := failStorageExperts(t, e, pool, faulty)
	_, _, err := greedy(t, e, n)
	failedNaming(t, name, err, failing)
	faulty.Clear()
	got, _, err := greedy(t, e, n)
	if err != nil || !sameIDs(got, want) {
		t.Fatalf("%s: the request after the failures: %v, %v; want %v", name, got, err, want)
	}
	if st, _ := e.ExpertStats(); st.Failed == 0 {
		t.Fatalf("%s: no failed read counted: %+v", name, st)
	}
}

// deviceBudgetLeaving is the device budget under which o's GPU plan of
// path leaves expertBytes for experts in device memory (beyond the
// plan's layers, cache and buffers and the MoE routing overhead),
// measured on a plan under the default budget. It skips without a GPU.
func deviceBudgetLeaving(t *testing.T, path string, o engine.Options, expertBytes int64) int64 {
	t.Helper()
	o.DeviceBudget, o.NoExpertCalibration = 0, true
	e, err := engine.OpenWith(context.Background(), path, o)
	if errors.Is(err, engine.ErrCUDAUnavailable) {
		t.Skipf("needs a usable GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := e.Plan()
	overhead := p.Device.Budget - p.Device.Total - e.DeviceExpertBytes()
	return p.Device.Total + overhead + expertBytes
}

// TestExpertsOnDeviceCUDA: on the GPU, the device memory a budget leaves
// beyond the plan holds the experts the calibration text routed to most
// (their share of the picks at least their share of the experts),
// computed on the GPU while the CPU computes the others — from a GGUF's
// host memory, and from a pool's store with some experts on storage —
// with the CPU reference's logits, and strata status's counts of both.
func TestExpertsOnDeviceCUDA(t *testing.T) {
	ctx := context.Background()
	pool, gg := stackedPool(t, "mixtral", "f32", 6, 7)
	poolBytes, poolAll := poolExperts(t, pool)
	for _, tc := range []struct {
		name, path string
		storage    bool // a host budget that leaves some experts on storage
	}{
		// stackedPool's GGUF is its first seed's model alone (the pool
		// stacks both): each is compared with its own CPU reference.
		{"GGUF, every expert in host memory", gg, false},
		{"pool, some experts on storage", pool, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, held, heldAll := cpuReference(t, tc.path)
			experts, all := poolBytes, poolAll
			if tc.path != pool { // the GGUF holds its experts in its layers
				experts, all = held, heldAll
			}
			o := engine.Options{Backend: engine.BackendCUDA, HostBudget: 1 << 30, Context: 64, Links: defaultLinks()}
			o.DeviceBudget = deviceBudgetLeaving(t, tc.path, o, experts/2)
			if tc.storage {
				o.HostBudget = experts * 3 / 4
			}
			e, err := engine.OpenWith(ctx, tc.path, o)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			x, ok := e.Experts()
			xp := e.ExpertPlan()
			if !ok || x.OnDevice == 0 || x.OnDevice >= all || x.DeviceBytes > experts/2 {
				t.Fatalf("%d of %d experts in device memory (%d bytes of %d left): want some, within the budget", x.OnDevice, all, x.DeviceBytes, experts/2)
			}
			if tc.storage && xp.AllResident() {
				t.Fatalf("expert plan %+v: want some on storage", xp)
			}
			if share := float64(x.OnDevice) / float64(all); xp.DeviceHit < share-1e-9 {
				t.Fatalf("device experts serve %.3f of the calibration's picks, less than their share %.3f of the experts: not the most used", xp.DeviceHit, share)
			}
			got, err := passLogits(t, e, 4)
			if err != nil {
				t.Fatal(err)
			}
			nearCPU(t, tc.name, got, want)
			after, _ := e.Experts()
			if after.DeviceUses <= x.DeviceUses || after.CPUUses <= x.CPUUses {
				t.Fatalf("picks on the GPU %d -> %d, on the CPU %d -> %d: want both to grow", x.DeviceUses, after.DeviceUses, x.CPUUses, after.CPUUses)
			}
			both := 0
			for l := range x.Device {
				for e, d := range x.Device[l] {
					if d && x.Residency[l][e] {
						both++
					}
				}
			}
			t.Logf("%d of %d experts in device memory (%s), device hit %.2f (calibration %.2f); %d host-resident, %d of them also on the device",
				x.OnDevice, all, tier.FormatBytes(x.DeviceBytes), after.DeviceHit(), xp.DeviceHit, x.Resident, both)
		})
	}
}

// poolExperts is the bytes and the count of a pool's experts.
func poolExperts(t *testing.T, pool string) (bytes int64, count int) {
	t.Helper()
	p, err := prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, l := range p.Sizes().Experts {
		for _, n := range l {
			bytes += n
			count++
		}
	}
	return bytes, count
}

// cpuReference opens path on the CPU backend and returns its logits over
// four passes (passLogits), with the bytes and the number of the experts
// its layers hold (none for a pool, whose experts its store serves).
func cpuReference(t *testing.T, path string) (logits [][]float32, experts int64, count int) {
	t.Helper()
	cpu, err := engine.OpenWith(context.Background(), path, engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 64, Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	if logits, err = passLogits(t, cpu, 4); err != nil {
		t.Fatal(err)
	}
	for _, l := range cpu.Model.Weights.Layers {
		for _, x := range l.Experts {
			experts += x.Bytes()
			count++
		}
	}
	return logits, experts, count
}

// TestDeviceExpertsFollowRoutingCUDA: on the GPU, experts placed by the
// calibration text move while serving when the routing changes (a Zipf
// skew set after the load): each layer's hottest expert ends in device
// memory, the plan says what the device holds, the bytes stay within the
// budget, and the logits after the moves are the CPU reference's with
// the same skew.
func TestDeviceExpertsFollowRoutingCUDA(t *testing.T) {
	ctx := context.Background()
	_, gg := stackedPool(t, "mixtral", "f32", 6)
	const skew = 3
	cpu, err := engine.OpenWith(ctx, gg, engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 64, Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	if err := cpu.Model.SetRouterSkew(skew); err != nil {
		t.Fatal(err)
	}
	want, err := passLogits(t, cpu, 4)
	if err != nil {
		t.Fatal(err)
	}
	var experts int64
	for _, l := range cpu.Model.Weights.Layers {
		for _, x := range l.Experts {
			experts += x.Bytes()
		}
	}
	o := engine.Options{Backend: engine.BackendCUDA, HostBudget: 1 << 30, Context: 64, Links: defaultLinks()}
	o.DeviceBudget = deviceBudgetLeaving(t, gg, o, experts/2)
	e, err := engine.OpenWith(ctx, gg, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !engine.SetDeviceAdaptation(e, 1, 32) {
		t.Fatal("no device adapter with half the experts in device memory")
	}
	g := engine.CUDAModel(e)
	if err := g.SetRouterSkew(skew); err != nil {
		t.Fatal(err)
	}
	cfg := e.Model.Config
	hot := make([]int, cfg.Layers) // each layer's rank-0 expert
	for l, row := range model.RouterSkewBias(&cfg, skew) {
		hot[l] = slices.Index(row, 0)
	}
	start, _ := e.Experts()
	holds := func(x engine.ExpertInfo) bool {
		for l, h := range hot {
			if !x.Device[l][h] {
				return false
			}
		}
		return true
	}
	b := e.Backend()
	for pass := 0; ; pass++ {
		x, _ := e.Experts()
		if holds(x) && (x.DeviceMoves > 0 || holds(start)) {
			break
		}
		if pass == 2000 {
			t.Fatalf("after %d passes of skewed routing, device experts %v (started with %v), %d moved", pass, x.Device, start.Device, x.DeviceMoves)
		}
		seq, err := b.NewSequence(0)
		if err != nil {
			t.Fatal(err)
		}
		toks := []int32{int32(1 + pass%(cfg.Vocab-1))}
		for range 32 {
			st := []model.Step{{Seq: seq, Tokens: toks}}
			if err := b.Forward(ctx, st); err != nil {
				t.Fatal(err)
			}
			toks = []int32{int32(sample.Argmax(st[0].Logits[0]))}
			pass++
		}
		seq.Close()
	}
	x, _ := e.Experts()
	lists := g.ResidentExperts()
	for l := range x.Device {
		for ex, on := range x.Device[l] {
			if on != slices.Contains(lists[l], ex) {
				t.Fatalf("plan %v, the device holds %v", x.Device, lists)
			}
		}
	}
	if x.DeviceBytes > experts/2 {
		t.Fatalf("%d bytes of experts in device memory, %d left for them", x.DeviceBytes, experts/2)
	}
	got, err := passLogits(t, e, 4)
	if err != nil {
		t.Fatal(err)
	}
	nearCPU(t, "after the moves", got, want)
	t.Logf("device experts %v -> %v, %d moved", start.Device, x.Device, x.DeviceMoves)
}

// TestCalibrationRouting: the calibration text routed on the CPU counts
// every token's picks in every layer (ExpertsUsed each), its halves add
// up to the whole, and a dense model is refused.
func TestCalibrationRouting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "moe.gguf")
	if err := synth.Write(path, synth.Options{Arch: "mixtral", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := engine.CalibrationRouting(context.Background(), path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	const layers, used = 2, 2
	if r.Tokens < 64 || len(r.Counts) != layers || r.Second == nil {
		t.Fatalf("%d tokens, %d layers of counts, halves %v/%v", r.Tokens, len(r.Counts), r.First != nil, r.Second != nil)
	}
	for l := range r.Counts {
		var all, halves uint64
		for x := range r.Counts[l] {
			all += r.Counts[l][x]
			halves += r.First[l][x] + r.Second[l][x]
			if r.First[l][x]+r.Second[l][x] != r.Counts[l][x] {
				t.Errorf("layer %d expert %d: halves %d + %d, whole %d", l, x, r.First[l][x], r.Second[l][x], r.Counts[l][x])
			}
		}
		if all != uint64(r.Tokens*used) || halves != all {
			t.Errorf("layer %d: %d picks counted (halves %d), want %d tokens x %d", l, all, halves, r.Tokens, used)
		}
	}
	dense := filepath.Join(dir, "dense.gguf")
	if err := synth.Write(dense, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.CalibrationRouting(context.Background(), dense, 1<<30); err == nil || !strings.Contains(err.Error(), "not a mixture-of-experts") {
		t.Fatalf("dense model: %v", err)
	}
}
