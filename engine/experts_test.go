package engine_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// TestExpertsOnStorage: a mixture-of-experts pool under a budget that holds
// its layers and about half of its experts keeps the rest in the file and
// reads them when routed to: the same greedy tokens as the resident model,
// every read counted and checked, a failed read failing only its request,
// and a GGUF under such a budget refused with the way out.
// Sequential: it opens with the auto backend.
func TestExpertsOnStorage(t *testing.T) {
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
	big, err := engine.OpenWith(context.Background(), pool, engine.Options{HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})
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
	e, err := engine.OpenWith(context.Background(), pool, engine.Options{HostBudget: budget, Context: 256, Links: defaultLinks(),
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
	if x.Stats.Promoted == 0 {
		t.Fatalf("calibration moved no expert: %+v", x.Stats)
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
	st, ok := e.ExpertStats()
	// The source read the resident experts once at load, then each miss.
	if !ok || st.Resident == 0 || st.Read == 0 || st.Failed != 0 || st.ReadBytes != int64(st.Read)*ext.Length ||
		faulty.Reads() != int64(st.Read)+int64(xp.ResidentCount())+int64(st.Promoted) {
		t.Fatalf("stats %+v (%d source reads)", st, faulty.Reads())
	}
	t.Logf("%d of %d experts resident (plan hit %.2f): %d uses resident, %d buffered, %d read (%s)",
		xp.ResidentCount(), all, xp.Hit, st.Resident, st.Buffered, st.Read, tier.FormatBytes(st.ReadBytes))

	faulty.FailNth(1)
	_, _, err = greedy(t, e, n)
	if err == nil || !errors.Is(err, stream.ErrInjected) || !strings.Contains(err.Error(), "expert") || !strings.Contains(err.Error(), "layer") {
		t.Fatalf("request over a failing expert read: %v", err)
	}
	t.Logf("failed request: %v", err)
	faulty.Clear()
	if ids, _, err = greedy(t, e, n); err != nil || !sameIDs(ids, wantIDs) {
		t.Fatalf("next request: %v, %v; want %v", ids, err, wantIDs)
	}
	if st, _ := e.ExpertStats(); st.Failed != 1 {
		t.Fatalf("%d failed reads, want 1", st.Failed)
	}

	// Experts changed on storage under the engine: every read is checked
	// (the default), so the request that reads one fails naming it, and
	// once the file is whole again the next one is right.
	orig, err := os.ReadFile(pool)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(orig)
	x, _ = e.Experts()
	p, err = prefab.OpenPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	for l := range x.Residency {
		for i, r := range x.Residency[l] {
			if !r {
				ext, _ := p.ExpertExtent(l, i)
				bad[ext.Offset+ext.Length/2] ^= 0xff
			}
		}
	}
	p.Close()
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
	one, err := engine.OpenWith(context.Background(), gg, engine.Options{HostBudget: 1 << 30, Context: 256, Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	ggLayers := one.Plan().Device.Total + one.Plan().Host.Total
	one.Close()
	if one, err = engine.OpenWith(context.Background(), gg, engine.Options{HostBudget: ggLayers + experts/4, Context: 256, Links: defaultLinks()}); err == nil {
		one.Close()
		t.Fatal("a GGUF with experts on storage opened")
	}
	if !errors.Is(err, engine.ErrNeedsPool) || !strings.Contains(err.Error(), "experts on storage") {
		t.Fatalf("GGUF with experts on storage: %v", err)
	}
}
