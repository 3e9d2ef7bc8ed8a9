package gpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
)

// TestMoEOnCUDA: a mixture-of-experts model on the GPU — attention there
// (resident, and with layers streamed from tier B), routing on the device,
// the experts of Options.ResidentExperts computed on the GPU and the rest
// on the CPU — gives the CPU reference's logits and 32 greedy tokens with
// none, some and all of the experts resident, also with the layers'
// experts served by Options.Experts (as the engine's expert store serves
// a pool's) and with a router skew set on both; the stats count every
// pick on the side that computed it, and a layer the CPU had no pick in
// as the GPU's alone. In f32: routing is discrete, and where the GPU's
// quantized products differ from the CPU's by their usual margin a router
// near a tie picks another expert and the logits part (a Q4_K_M Mixtral
// did at step 13, NMSE 0.13), which says nothing of the placement this
// test is about.
func TestMoEOnCUDA(t *testing.T) {
	gpu(t)
	const none, some, all = "none", "some", "all"
	for _, tc := range []struct {
		arch, typ string
		streamed  []int
		source    bool // the layers without experts, served by Options.Experts
		resident  string
		skew      float64
	}{
		{"mixtral", "f32", nil, false, none, 0},
		{"mixtral", "f32", nil, false, some, 0},
		{"mixtral", "f32", nil, false, all, 0},
		{"mixtral", "f32", []int{1}, false, none, 0},
		{"mixtral", "f32", []int{1}, false, some, 0},
		{"mixtral", "f32", []int{1}, true, some, 0},
		{"mixtral", "f32", nil, false, some, 2},
		{"qwen3moe", "f32", nil, false, none, 0},
		{"qwen3moe", "f32", nil, false, some, 0},
		{"qwen3moe", "f32", nil, false, all, 0},
		{"qwen3moe", "f32", []int{0, 1}, false, some, 0},
		{"qwen3moe", "f32", nil, true, all, 0},
		{"qwen3moe", "f32", nil, true, some, 2},
	} {
		t.Run(fmt.Sprintf("%s/%s/streamed%v/source=%v/resident=%s/skew=%v", tc.arch, tc.typ, tc.streamed, tc.source, tc.resident, tc.skew), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, tc.typ)
			cfg := cpu.Config
			opts := Options{MaxSeqs: 2, StreamLayers: tc.streamed}
			if len(tc.streamed) > 0 {
				opts.Slots = 1
			}
			opts.ResidentExperts = residentSets(cfg, tc.resident)
			load := cpu
			if tc.source {
				// The engine's expert store stands here: the layers lack
				// their experts, and the source serves the CPU model's.
				w := *cpu.Weights
				w.Layers = slices.Clone(w.Layers)
				for i := range w.Layers {
					w.Layers[i].Experts = nil
				}
				load = &model.Model{Config: cfg, Weights: &w}
				opts.Experts = layerExperts{cpu.Weights}
			}
			// The placement is what is checked: no trial of the CPU alone.
			opts.NoExpertTrial = true
			g := loadGPU(t, load, opts)
			if tc.skew > 0 {
				if err := cpu.SetRouterSkew(tc.skew); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cpu.SetRouterSkew(0) })
				if err := g.SetRouterSkew(tc.skew); err != nil {
					t.Fatal(err)
				}
			}
			const steps, promptN = 32, 12
			worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, promptN, 1), steps)
			st, ok := g.MoEStats()
			t.Logf("worst NMSE %.3g; experts: %+v", worst[0], st)
			if !ok {
				t.Fatal("no MoE stats")
			}
			blocks := int64((steps + 1) * cfg.Layers) // the prompt's pass and steps decode passes
			picks := int64((promptN + steps) * cfg.Layers * cfg.ExpertsUsed)
			if st.GPUExperts+st.CPUExperts != picks {
				t.Errorf("%d GPU + %d CPU picks, want %d", st.GPUExperts, st.CPUExperts, picks)
			}
			if st.Layers+st.GPULayers != blocks {
				t.Errorf("%d CPU + %d GPU-only FFN blocks, want %d", st.Layers, st.GPULayers, blocks)
			}
			switch tc.resident {
			case none:
				if st.GPUExperts != 0 || st.GPULayers != 0 || st.Busy <= 0 || st.ResidentExperts != 0 {
					t.Errorf("nothing resident, yet %+v", st)
				}
			case all:
				if st.CPUExperts != 0 || st.Layers != 0 || st.Busy != 0 || st.ResidentExperts != cfg.Layers*cfg.Experts {
					t.Errorf("everything resident, yet %+v", st)
				}
			default:
				if st.CPUExperts == 0 || st.GPUExperts == 0 {
					t.Errorf("some resident, yet %+v", st)
				}
			}
			if counted := countedPicks(g); int64(counted) != picks {
				t.Errorf("ExpertCounts total %d, want %d", counted, picks)
			}
		})
	}
}

// TestMoEOnCUDAQ4KM: Q4_K_M experts resident on the GPU run the integer
// and GEMM paths of dense layers on per-expert matrices: with none and
// with all resident, the CPU reference's logits and greedy tokens over a
// prompt and 6 steps. Short: routing is discrete, and over longer runs
// the GPU's quantized products (attention's included) move a router near
// a tie to another expert (TestMoEOnCUDA says why it runs f32).
func TestMoEOnCUDAQ4KM(t *testing.T) {
	gpu(t)
	for _, arch := range []string{"mixtral", "qwen3moe"} {
		for _, resident := range []string{"none", "some", "all"} {
			t.Run(fmt.Sprintf("%s/resident=%s", arch, resident), func(t *testing.T) {
				cpu := tinyModel(t, arch, "q4_k_m")
				cfg := cpu.Config
				opts := Options{MaxSeqs: 2, NoExpertTrial: true, ResidentExperts: residentSets(cfg, resident)}
				g := loadGPU(t, cpu, opts)
				const steps = 6
				worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 9, 4), steps)
				st, _ := g.MoEStats()
				t.Logf("worst NMSE %.3g; experts: %+v", worst[0], st)
				all := resident == "all"
				if all != (st.CPUExperts == 0) || (resident == "none") != (st.GPUExperts == 0) {
					t.Errorf("resident %s, yet %+v", resident, st)
				}
				// The decode steps' blocks find their resident picks on
				// the device; with every expert resident, without the host.
				x0 := cpu.Weights.Layers[0].Experts[0]
				if resident != "none" && g.k.Tuning().IntegerGEMV && x0.Gate.Type == quant.Q4_K && x0.Up.Type == quant.Q4_K {
					if want := int64(steps * cfg.Layers); st.DeviceFound < want {
						t.Errorf("%d blocks found their picks on the device, want at least %d", st.DeviceFound, want)
					}
					if all != (st.HostFree > 0) {
						t.Errorf("resident %s, %d blocks without the host", resident, st.HostFree)
					}
				}
				if counted, want := countedPicks(g), uint64((9+steps)*cfg.Layers*cfg.ExpertsUsed); counted != want {
					t.Errorf("ExpertCounts total %d, want %d", counted, want)
				}
			})
		}
	}
}

// countedPicks is the routing picks g counted over every layer and
// expert (ExpertCounts).
func countedPicks(g *Model) uint64 {
	var counted uint64
	for _, c := range g.ExpertCounts() {
		for _, n := range c {
			counted += n
		}
	}
	return counted
}

// residentSets is a resident expert set per layer of cfg: "all", "some"
// (every third expert, shifted by the layer) or "none".
func residentSets(cfg model.Config, which string) [][]int {
	var rs [][]int
	for l := range cfg.Layers {
		var es []int
		for e := range cfg.Experts {
			if which == "all" || which == "some" && (e+l)%3 == 0 {
				es = append(es, e)
			}
		}
		rs = append(rs, es)
	}
	return rs
}

// TestSetResidentExperts: the resident experts replaced between passes
// (as the engine does once it has measured the routing) are computed on
// the GPU from then on, with the CPU reference's logits; nil empties the
// set, and a bad set is refused.
func TestSetResidentExperts(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "f32")
	cfg := cpu.Config
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, NoExpertTrial: true})
	ctx := context.Background()
	greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 2), 4)
	if st, _ := g.MoEStats(); st.GPUExperts != 0 {
		t.Fatalf("nothing resident, yet %+v", st)
	}
	var rs [][]int
	for l := range cfg.Layers {
		rs = append(rs, []int{l, 3, 6})
	}
	if err := g.SetResidentExperts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	before := g.WeightBytes()
	worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 3), 8)
	st, _ := g.MoEStats()
	t.Logf("worst NMSE %.3g; %+v", worst[0], st)
	if st.GPUExperts == 0 || st.ResidentExperts != 3*cfg.Layers || st.ResidentBytes <= 0 {
		t.Fatalf("three experts a layer resident, yet %+v", st)
	}
	if err := g.SetResidentExperts(ctx, [][]int{{cfg.Experts}}); err == nil {
		t.Fatal("an expert out of range was accepted")
	}
	if err := g.SetResidentExperts(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.MoEStats(); st.ResidentExperts != 0 || st.ResidentBytes != 0 || g.WeightBytes() >= before {
		t.Fatalf("emptied, yet %+v (weight bytes %d, were %d)", st, g.WeightBytes(), before)
	}
}

// TestPickPlan: the host's plan of a layer's resident picks — grouped by
// expert in increasing order, tokens in order within a group, every
// resident pick mapped to its row and its token, every other pick -1 —
// for random routings and resident sets (the device's gather and combine
// read it; their kernels are TestMoEGatherCombine's).
func TestPickPlan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		E, k, T := 2+r.IntN(14), 1+r.IntN(4), 1+r.IntN(9)
		k = min(k, E)
		ids := make([]int32, 0, T*k)
		for range T {
			for _, e := range r.Perm(E)[:k] {
				ids = append(ids, int32(e))
			}
		}
		held := make([]bool, E)
		for e := range held {
			held[e] = r.IntN(2) == 0
		}
		pairs := residentPicks(nil, ids, k, func(e int) bool { return held[e] })
		where, gtok := make([]int32, T*k), make([]int32, len(pairs))
		pickPlan(pairs, k, where, gtok)
		for p := 1; p < len(pairs); p++ {
			a, b := pairs[p-1], pairs[p]
			if a.e > b.e || a.e == b.e && a.t >= b.t {
				t.Fatalf("picks %v not grouped by expert, tokens in order", pairs)
			}
		}
		n := 0
		for i, e := range ids {
			p := where[i]
			if !held[e] {
				if p != -1 {
					t.Fatalf("pick %d of a CPU expert %d mapped to row %d", i, e, p)
				}
				continue
			}
			n++
			if p < 0 || int(p) >= len(pairs) || pairs[p].e != int(e) || gtok[p] != int32(i/k) || pairs[p].t*k+pairs[p].j != i {
				t.Fatalf("pick %d (token %d, expert %d) mapped to row %d: %+v, token %d", i, i/k, e, p, pairs, gtok)
			}
		}
		if n != len(pairs) {
			t.Fatalf("%d resident picks, %d rows", n, len(pairs))
		}
	}
}

// TestResidentSet: Options.ResidentExperts is checked against the model
// (experts in range, none twice, no more layers than the model's, a
// dense model takes none) and sorted per layer.
func TestResidentSet(t *testing.T) {
	t.Parallel()
	moe := model.Config{Layers: 2, Experts: 8, ExpertsUsed: 2, ExpertFFN: 64}
	dense := model.Config{Layers: 2}
	for _, tc := range []struct {
		name string
		cfg  model.Config
		rs   [][]int
		want [][]int // nil: refused
	}{
		{"none", moe, nil, [][]int{nil, nil}},
		{"sorted", moe, [][]int{{5, 1}, {7}}, [][]int{{1, 5}, {7}}},
		{"short", moe, [][]int{{0}}, [][]int{{0}, nil}},
		{"dense none", dense, nil, [][]int{nil, nil}},
		{"dense some", dense, [][]int{{0}}, nil},
		{"range", moe, [][]int{{8}}, nil},
		{"negative", moe, [][]int{{-1}}, nil},
		{"twice", moe, [][]int{{2, 2}}, nil},
		{"layers", moe, [][]int{{}, {}, {}}, nil},
		{"narrow experts", model.Config{Layers: 1, Experts: 8, ExpertsUsed: 2, ExpertFFN: 48}, [][]int{{1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := residentSet(&tc.cfg, tc.rs)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, func(a, b []int) bool { return slices.Equal(a, b) }) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// layerExperts serves the experts of full weights as a
// model.ExpertSource.
type layerExperts struct{ w *model.Weights }

func (s layerExperts) Experts(_ context.Context, l int, es []int, dst []*model.Expert) error {
	for j, e := range es {
		dst[j] = &s.w.Layers[l].Experts[e]
	}
	return nil
}

// TestExpertTrialOnCUDA: with experts resident, the first passes of a
// batch size run the GPU's way, then the CPU computing every pick
// (moechoice.go); both give the CPU reference's greedy tokens, and once
// decided the stats name the way kept and both pass times.
func TestExpertTrialOnCUDA(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "f32")
	cfg := cpu.Config
	var rs [][]int
	for l := range cfg.Layers {
		rs = append(rs, []int{l, 3, 6})
	}
	g := loadGPU(t, cpu, Options{MaxSeqs: 2, ResidentExperts: rs})
	steps := 2*(choiceWarm+choiceTrials) + 4
	worst := greedyCompare(t, cpu, []*Model{g}, promptTokens(cfg.Vocab, 5, 2), steps)
	st, _ := g.MoEStats()
	t.Logf("worst NMSE %.3g; %+v", worst[0], st)
	if st.GPUExperts == 0 || st.CPUExperts == 0 {
		t.Fatalf("trial passes both ways, yet %+v", st)
	}
	var one *ExpertChoice
	for i, c := range st.Choices {
		if c.Batch == 1 {
			one = &st.Choices[i]
		}
	}
	if one == nil || one.DevicePass <= 0 || one.CPUPass <= 0 {
		t.Fatalf("batch 1 not decided after %d passes: %+v", steps, st.Choices)
	}
}

// TestMoEHop: the CPU's fixed cost of a MoE layer is measured once, not
// negative, and the same figure after; a model whose layers do not hold
// their experts (an expert source) gives 0 rather than time its reads; a
// dense model refuses.
func TestMoEHop(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, NoExpertTrial: true})
	h, err := g.MoEHop(context.Background())
	if err != nil || h < 0 {
		t.Fatalf("MoEHop = %d, %v", h, err)
	}
	if h2, err := g.MoEHop(context.Background()); err != nil || h2 != h {
		t.Fatalf("again: %d, %v; want %d", h2, err, h)
	}
	w := *cpu.Weights
	w.Layers = slices.Clone(w.Layers)
	for i := range w.Layers {
		w.Layers[i].Experts = nil
	}
	src := loadGPU(t, &model.Model{Config: cpu.Config, Weights: &w}, Options{MaxSeqs: 1, NoExpertTrial: true, Experts: layerExperts{cpu.Weights}})
	if h, err := src.MoEHop(context.Background()); err != nil || h != 0 {
		t.Fatalf("with an expert source: %d, %v; want 0", h, err)
	}
	dense := loadGPU(t, tinyModel(t, "llama", "q4_k_m"), Options{MaxSeqs: 1})
	if _, err := dense.MoEHop(context.Background()); err == nil {
		t.Fatal("a dense model measured a MoE hop")
	}
}

// TestHostWork: a pass waits for the device asleep exactly where it may
// put the host's threads to work: the CPU's share of tier B, an expert
// of some layer not in device memory, or the trial's CPU-only way; not
// for a dense model or one whose experts are all resident.
func TestHostWork(t *testing.T) {
	t.Parallel()
	all := func() map[int]expertW { return map[int]expertW{0: {}, 1: {}, 2: {}, 3: {}} }
	short := all()
	delete(short, 2)
	for _, c := range []struct {
		name string
		m    *Model
		want bool
	}{
		{"dense", &Model{}, false},
		{"dense, hybrid", &Model{hy: &hybrid{}}, true},
		{"experts all resident", &Model{Config: model.Config{Experts: 4}, moe: &gpuMoE{resident: []map[int]expertW{all(), all()}}}, false},
		{"an expert on the host", &Model{Config: model.Config{Experts: 4}, moe: &gpuMoE{resident: []map[int]expertW{all(), short}}}, true},
		{"all resident, the CPU's way", &Model{Config: model.Config{Experts: 4}, moe: &gpuMoE{resident: []map[int]expertW{all(), all()}, cpuOnly: true}}, true},
	} {
		if got := c.m.hostWork(); got != c.want {
			t.Errorf("%s: hostWork %v, want %v", c.name, got, c.want)
		}
	}
}
