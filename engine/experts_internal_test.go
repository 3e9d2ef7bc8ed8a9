package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/internal/waytrial"
)

// tinyMixtralPool writes a tiny synthetic Mixtral (Q8_0, seed) as a pool
// in a temporary directory and opens it; the test's cleanup closes it.
func tinyMixtralPool(t *testing.T, seed uint64) (*prefab.Pool, string) {
	t.Helper()
	dir := t.TempDir()
	gg := filepath.Join(dir, "m.gguf")
	if err := synth.Write(gg, synth.Options{Arch: "mixtral", Shape: "tiny", Type: "q8_0", Seed: seed}); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Map(gg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.pool")
	err = prefab.WritePool(g, path, prefab.Options{})
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := prefab.OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool, path
}

// TestExpertStoreFollowsUse: experts a workload keeps routing to become
// resident while it runs (the unused ones they replace leave), within the
// resident budget, and every expert served, resident, buffered or read,
// holds exactly the pool's bytes.
func TestExpertStoreFollowsUse(t *testing.T) {
	t.Parallel()
	pool, path := tinyMixtralPool(t, 3)
	sizes := pool.Sizes()
	x := sizes.Experts[0][0]
	// Buffers for all 8 experts of a layer and 4 resident ones.
	plan, err := tier.PlanExperts(sizes.Experts, nil, 12*x)
	if err != nil {
		t.Fatal(err)
	}
	if plan.ResidentCount() != 4 || plan.Buffers != 8 || !plan.Resident[0][0] || plan.Resident[0][6] {
		t.Fatalf("plan %+v, want experts 0-3 of layer 0 resident and 8 buffers", plan)
	}
	fs, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	s, err := newExpertStore(context.Background(), pool, fs, plan, stream.VerifyFirst, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()

	// The pool's own bytes of each expert, to compare what is served with.
	want := func(l, e int) []byte {
		b, err := pool.MappedExpert(l, e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	serve := func(l int, es []int) {
		t.Helper()
		dst := make([]*model.Expert, len(es))
		if err := s.Experts(context.Background(), l, es, dst); err != nil {
			t.Fatal(err)
		}
		for j, e := range es {
			w := want(l, e)
			got := dst[j]
			for _, tt := range []model.Tensor{got.Gate, got.Up, got.Down} {
				if !bytes.Contains(w, tt.Data) || len(tt.Data) == 0 {
					t.Fatalf("layer %d expert %d: tensor %s is not the pool's bytes", l, e, tt.Name)
				}
			}
		}
	}
	// A workload that uses experts 6 and 7 of layer 0 and 5 of layer 1
	// every pass, and now and then one more, reading each time.
	hot := [][]int{{6, 7}, {5}}
	for pass := 0; ; pass++ {
		serve(0, append(slices.Clone(hot[0]), pass%3))
		serve(1, hot[1])
		res, _ := s.Residency()
		if res[0][6] && res[0][7] && res[1][5] {
			break
		}
		if pass > 5000 {
			t.Fatalf("after %d passes the hot experts are not resident: %v (stats %+v)", pass, res, s.Stats())
		}
		if pass%replanEvery == replanEvery-1 {
			time.Sleep(time.Millisecond) // let a round's reads finish
		}
	}
	st := s.Stats()
	res, bytesRes := s.Residency()
	if st.Promoted < 3 || st.Demoted < 3 || bytesRes > 4*x || st.Failed != 0 {
		t.Fatalf("stats %+v, %d resident bytes (budget %d)", st, bytesRes, 4*x)
	}
	if res[0][3] || res[0][2] && res[0][1] && res[0][0] {
		t.Fatalf("residency %v: the unused experts stayed", res)
	}
	// Now served in place: no more reads for the hot ones.
	before := s.Stats().Read
	for range 10 {
		serve(0, hot[0])
		serve(1, hot[1])
	}
	if got := s.Stats().Read; got != before {
		t.Fatalf("%d reads for resident experts", got-before)
	}
	t.Logf("stats %+v", s.Stats())
}

// TestDeviceExpertBudget: a GPU plan leaves its budget less its total,
// the MoE overhead and the staging of picks over PCIe for experts in
// device memory; nothing when that is negative, for a dense model, or on
// the CPU (Shared).
func TestDeviceExpertBudget(t *testing.T) {
	t.Parallel()
	moe := model.Config{Layers: 2, Dim: 256, Experts: 8, ExpertsUsed: 2, ExpertFFN: 256}
	over := gpu.MoEDeviceOverhead(&moe, moeReserveTokens)
	if over <= 0 {
		t.Fatalf("overhead %d", over)
	}
	plan := func(budget, total int64, shared bool) *tier.Plan {
		return &tier.Plan{Shared: shared, Device: tier.DeviceUse{Budget: budget, Total: total}}
	}
	for _, tc := range []struct {
		name string
		p    *tier.Plan
		cfg  model.Config
		want int64
	}{
		{"room", plan(1<<30, 1<<20, false), moe, 1<<30 - 1<<20 - over},
		{"none left", plan(1<<20+over/2, 1<<20, false), moe, 0},
		{"dense", plan(1<<30, 1<<20, false), model.Config{Layers: 2, Dim: 256}, 0},
		{"cpu", plan(1<<30, 1<<20, true), moe, 0},
		{"no plan", nil, moe, 0},
	} {
		if got := DeviceExpertBudget(tc.p, &tc.cfg, nil); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// The staging of picks sent over PCIe, and of those the GPU pulls, is
	// sized by the largest expert.
	sizes := [][]int64{{100 << 10, 300 << 10}, {200 << 10, 50 << 10}}
	stream, pulled := gpu.PickStreamBytes(&moe, 300<<10), gpu.MappedStageBytes(&moe, 300<<10)
	if stream < 2*300<<10 || pulled < 2*300<<10 {
		t.Fatalf("staging %d and %d for two picks of 300 KiB experts", stream, pulled)
	}
	stage := stream + pulled
	if got, want := DeviceExpertBudget(plan(1<<30, 1<<20, false), &moe, sizes), int64(1<<30-1<<20)-over-stage; got != want {
		t.Errorf("with experts' sizes: %d, want %d", got, want)
	}
}

// TestExpertStorePrefetch: experts read ahead are served without a read
// when the layer asks for them (and counted so), resident and buffered
// ones are not read again, a wrong prediction costs the layer its own
// read, a read ahead that fails is read again when the layer needs the
// expert, and closing the store waits for reads in flight.
func TestExpertStorePrefetch(t *testing.T) {
	t.Parallel()
	pool, path := tinyMixtralPool(t, 5)
	sizes := pool.Sizes()
	x := sizes.Experts[0][0]
	plan, err := tier.PlanExperts(sizes.Experts, nil, 12*x) // layer 0's experts 0-3 resident
	if err != nil {
		t.Fatal(err)
	}
	fs, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	faulty := stream.NewFaulty(fs)
	ctx := context.Background()
	s, err := newExpertStore(ctx, pool, faulty, plan, stream.VerifyAlways, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.loadGates(ctx)
	if err != nil || kept <= 0 {
		t.Fatalf("loadGates: %d bytes, %v", kept, err)
	}
	for l := range 2 {
		norm, router, ok := s.Gate(l, 1)
		if !ok || norm.Cols != pool.Config().Dim || router.Rows != pool.Config().Experts {
			t.Fatalf("layer %d's gate: %v %+v %+v", l, ok, norm, router)
		}
	}

	serve := func(l int, es ...int) {
		t.Helper()
		dst := make([]*model.Expert, len(es))
		if err := s.Experts(ctx, l, es, dst); err != nil {
			t.Fatal(err)
		}
		for j, e := range es {
			want, err := pool.MappedExpert(l, e)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(want, dst[j].Down.Data) || len(dst[j].Down.Data) == 0 {
				t.Fatalf("layer %d expert %d is not the pool's", l, e)
			}
		}
	}
	check := func(what string, want ExpertStats) {
		t.Helper()
		got := s.Stats()
		if got.Resident != want.Resident || got.Buffered != want.Buffered || got.Prefetched != want.Prefetched ||
			got.Read != want.Read || got.PrefetchReads != want.PrefetchReads || got.Failed != 0 || got.ReadBytes != want.ReadBytes {
			t.Fatalf("%s: stats %+v, want %+v", what, got, want)
		}
	}

	s.Prefetch(ctx, 1, []int{2, 5})
	serve(1, 2, 5)
	check("right prediction", ExpertStats{Prefetched: 2, PrefetchReads: 2, ReadBytes: 2 * x})
	s.Prefetch(ctx, 1, []int{2, 6})
	serve(0, 1)
	serve(1, 7)
	check("wrong prediction", ExpertStats{Resident: 1, Prefetched: 2, Read: 1, PrefetchReads: 3, ReadBytes: 4 * x})
	s.Prefetch(ctx, 0, []int{0, 5})
	serve(0, 0, 5)
	check("resident not read", ExpertStats{Resident: 2, Prefetched: 3, Read: 1, PrefetchReads: 4, ReadBytes: 5 * x})

	ext, err := pool.ExpertExtent(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	faulty.FailExtent(ext, true)
	s.Prefetch(ctx, 1, []int{3})
	serve(1, 3)
	check("failed read ahead", ExpertStats{Resident: 2, Prefetched: 3, Read: 2, PrefetchReads: 5, ReadBytes: 6 * x})

	s.Prefetch(ctx, 1, []int{0, 1, 4})
	if err := s.close(); err != nil {
		t.Fatalf("close with reads ahead in flight: %v", err)
	}
}

// TestAheadTrial: the store's read-ahead trial (internal/waytrial's,
// tested there) reads ahead first, reports the median storage waits as
// With and Without, and always reads ahead past aheadMaxBatch.
func TestAheadTrial(t *testing.T) {
	t.Parallel()
	s := expertStore{trial: waytrial.Trial{MaxBatch: aheadMaxBatch}}
	for _, on := range []bool{true, false} {
		for i := range waytrial.Warm + waytrial.Timed {
			if s.trial.First(1) != on {
				t.Fatalf("pass %d of the block reading ahead %v does not", i, on)
			}
			w := 30 * time.Millisecond
			if on {
				w = 10 * time.Millisecond
			}
			s.trial.Record(1, on, w)
		}
	}
	ch := s.Stats().AheadChoices
	if !s.trial.First(1) || len(ch) != 1 || !ch[0].On || ch[0].With != 10*time.Millisecond || ch[0].Without != 30*time.Millisecond {
		t.Fatalf("choices %+v", ch)
	}
	if !s.trial.First(aheadMaxBatch + 1) {
		t.Fatal("a large batch does not read ahead")
	}
}

// TestMappedWay: what ExpertInfo says of the way the picks of experts
// off the device take at one token, for every state of the GPU's trial.
func TestMappedWay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    gpu.MappedPicks
		want string
	}{
		{gpu.MappedPicks{Way: gpu.MappedOff}, ""},
		{gpu.MappedPicks{Way: gpu.MappedOn}, "pulled by the GPU"},
		{gpu.MappedPicks{Way: gpu.MappedTrial}, "by trial, undecided"},
		{gpu.MappedPicks{Way: gpu.MappedTrial, Decided: true, Kept: true, MappedPass: 5 * time.Millisecond, HostPass: 7 * time.Millisecond},
			"pulled by the GPU (kept by trial: 5ms a pass, 7ms through the host)"},
		{gpu.MappedPicks{Way: gpu.MappedTrial, Decided: true, MappedPass: 9 * time.Millisecond, HostPass: 7 * time.Millisecond},
			"through the host (kept by trial: 7ms a pass, 9ms pulled by the GPU)"},
	} {
		if got := mappedWay(tc.m); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.m, got, tc.want)
		}
	}
}
