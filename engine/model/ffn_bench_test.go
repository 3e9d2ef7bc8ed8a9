package model

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
)

// BenchmarkFFN: one FFN of the 8b shape (Q4_K gate and up, Q6_K down, as
// Q4_K_M stores them) on FFNDevice for 1 and 8 rows, in weight bytes per
// second. Five copies of the layer are cycled so that the weights come
// from memory, as a streamed layer's do.
func BenchmarkFFN(b *testing.B) {
	cfg := Config{Arch: ArchLlama, Vocab: 256, Dim: 4096, FFN: 14336, Layers: 1, Heads: 32, KVHeads: 8, HeadDim: 128, Context: 64, RopeTheta: 5e5, NormEps: 1e-5, AttnScale: 0.088, EmbedScale: 1}
	mk := func(name string, typ quant.Type, rows, cols int, seed uint64) Tensor {
		return randomQuantTensor(b, name, typ, rows, cols, seed)
	}
	ones := make([]float32, cfg.Dim)
	for i := range ones {
		ones[i] = 1
	}
	var layers []Layer
	for i := range 5 {
		layers = append(layers, Layer{
			FFNNorm: F32Tensor("ffn_norm", 1, cfg.Dim, ones),
			Gate:    mk("gate", quant.Q4_K, cfg.FFN, cfg.Dim, uint64(3*i)),
			Up:      mk("up", quant.Q4_K, cfg.FFN, cfg.Dim, uint64(3*i+1)),
			Down:    mk("down", quant.Q6_K, cfg.Dim, cfg.FFN, uint64(3*i+2)),
		})
	}
	dev, err := NewFFNDevice(cfg, gemv.Detect())
	if err != nil {
		b.Fatal(err)
	}
	// The same three products alone, each core a static share of the rows:
	// what the FFN's own overheads (quantizing, the activation, the
	// pool's scheduling) cost on top.
	b.Run(fmt.Sprintf("%v/T1/static", gemv.Detect()), func(b *testing.B) {
		nw := runtime.GOMAXPROCS(0)
		xs := make([]gemv.X, 2)
		if err := xs[0].Set(randomVector(cfg.Dim, 1)); err != nil {
			b.Fatal(err)
		}
		if err := xs[1].Set(randomVector(cfg.FFN, 2)); err != nil {
			b.Fatal(err)
		}
		y := make([]float32, cfg.FFN)
		b.SetBytes(FFNBytes(&layers[0]))
		i := 0
		for b.Loop() {
			l := &layers[i%len(layers)]
			for _, op := range []struct {
				t *Tensor
				x *gemv.X
			}{{&l.Gate, &xs[0]}, {&l.Up, &xs[0]}, {&l.Down, &xs[1]}} {
				rb := op.t.rowBytes()
				var wg sync.WaitGroup
				for w := 0; w < nw; w++ {
					r0, r1 := w*op.t.Rows/nw, (w+1)*op.t.Rows/nw
					wg.Go(func() {
						_ = gemv.Rows(gemv.Detect(), op.t.Type, op.t.Data[r0*rb:r1*rb], op.t.Cols, op.x, y[r0:r1])
					})
				}
				wg.Wait()
			}
			i++
		}
	})
	for _, T := range []int{1, 8} {
		b.Run(fmt.Sprintf("%v/T%d", gemv.Detect(), T), func(b *testing.B) {
			h := make([][]float32, T)
			for t := range h {
				h[t] = randomVector(cfg.Dim, uint64(t))
			}
			b.SetBytes(FFNBytes(&layers[0]))
			i := 0
			for b.Loop() {
				if err := dev.Run(context.Background(), 0, &layers[i%len(layers)], h); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// moeShape is a MoE block's shape for the benchmarks here.
type moeShape struct {
	name                                 string
	arch                                 string
	layers, experts, used, dim, ffn, eff int
}

// The blocks the benchmarks time: Qwen3-30B-A3B's (many narrow experts:
// the inputs to quantize, 2048 and 768 wide, are one or three blocks of
// gemv.Block, done inline) and Mixtral-8x7B's (few wide ones: 4096 and
// 14336, two and seven blocks, each a pool step of that many items
// between two products on every thread). Mixtral's one layer of eight
// experts is 0.9 GiB, past any cache.
var (
	qwenMoEShape    = moeShape{"qwen3moe-30b", ArchQwen3MoE, 4, 128, 8, 2048, 6144, 768}
	mixtralMoEShape = moeShape{"mixtral-8x7b", ArchLlama, 1, 8, 2, 4096, 14336, 14336}
)

// moeBenchBlock is the benchmarks' model: sh.layers MoE blocks of sh's
// shape on an FFNDevice, and one expert's bytes.
func moeBenchBlock(b *testing.B, sh moeShape) (cfg Config, ls []Layer, dev *FFNDevice, perExpert int64) {
	layers, experts, used, dim, eff := sh.layers, sh.experts, sh.used, sh.dim, sh.eff
	cfg = Config{Arch: sh.arch, Vocab: 256, Dim: dim, FFN: sh.ffn, ExpertFFN: eff, Experts: experts, ExpertsUsed: used,
		Layers: layers, Heads: 32, KVHeads: 4, HeadDim: 128, Context: 64, RopeTheta: 1e6, NormEps: 1e-6, AttnScale: 0.088, EmbedScale: 1}
	mk := func(name string, typ quant.Type, rows, cols int, seed uint64) Tensor {
		return randomQuantTensor(b, name, typ, rows, cols, seed)
	}
	ones := make([]float32, dim)
	for i := range ones {
		ones[i] = 1
	}
	ls = make([]Layer, layers)
	for l := range ls {
		ls[l].FFNNorm = F32Tensor("ffn_norm", 1, dim, ones)
		ls[l].Router = F32Tensor("router", experts, dim, make([]float32, experts*dim))
		for e := range experts {
			s := uint64(3 * (l*experts + e))
			x := Expert{
				Gate: mk(expertName("gate", e), quant.Q4_K, eff, dim, s),
				Up:   mk(expertName("up", e), quant.Q4_K, eff, dim, s+1),
				Down: mk(expertName("down", e), quant.Q6_K, dim, eff, s+2),
			}
			perExpert = x.Bytes()
			ls[l].Experts = append(ls[l].Experts, x)
		}
	}
	dev, err := NewFFNDevice(cfg, gemv.Detect())
	if err != nil {
		b.Fatal(err)
	}
	return cfg, ls, dev, perExpert
}

// BenchmarkMoEFFN: one MoE block of Qwen3-30B-A3B's shape (128 experts of
// 768 rows over a width of 2048, 8 picked a token; Q4_K gate and up, Q6_K
// down) on FFNDevice.RunRouted, as engine/gpu calls it for the experts
// the GPU does not hold, in bytes of the picked experts per second. Each
// pass picks 8 distinct experts at random in one of four layers (1.5 GiB
// in all), so that most picks come from memory, as a decode step's do.
// Its rate against BenchmarkFFN's shows what small products cost: an
// expert's gate is 0.9 MB where the 8b's is 33 MB.
func BenchmarkMoEFFN(b *testing.B) {
	cfg, ls, dev, perExpert := moeBenchBlock(b, qwenMoEShape)
	layers, experts, used, dim := cfg.Layers, cfg.Experts, cfg.ExpertsUsed, cfg.Dim
	r := rand.New(rand.NewPCG(1, 2))
	// "all" computes every pick here; "one" only the first pick of the
	// first token, as where the GPU holds the layer's other picks: what is
	// left is the call's fixed cost; "third" the picks of a third of the
	// experts (those whose index is a multiple of three), about what a
	// served batch of eight leaves the CPU beside a GPU that holds half
	// the layer's experts and is sent a share of the others.
	for _, share := range []string{"all", "one", "third"} {
		for _, T := range []int{1, 8} {
			b.Run(fmt.Sprintf("%v/%s/T%d", gemv.Detect(), share, T), func(b *testing.B) {
				h := make([][]float32, T)
				for t := range h {
					h[t] = randomVector(dim, uint64(t))
				}
				// The routings are drawn before the clock starts (a timer
				// stopped and started per pass would stop the world twice a
				// pass), then cycled.
				type pass struct {
					l      int
					rt     Routing
					picked int64
					one    int // the one expert computed here, with share "one"
				}
				passes := make([]pass, 256)
				for i := range passes {
					ps := &passes[i]
					ps.l = r.IntN(layers)
					ps.rt = Routing{IDs: make([]int32, T*used), Weights: make([]float32, T*used)}
					seen := map[int]bool{}
					for t := range T {
						for j, e := range r.Perm(experts)[:used] {
							ps.rt.IDs[t*used+j], ps.rt.Weights[t*used+j] = int32(e), 1/float32(used)
							seen[e] = true
						}
					}
					ps.picked = int64(len(seen)) * perExpert
					switch share {
					case "one":
						ps.one, ps.picked = int(ps.rt.IDs[0]), perExpert
					case "third":
						ps.picked = 0
						for e := range seen {
							if e%3 == 0 {
								ps.picked += perExpert
							}
						}
					}
				}
				var picked int64
				i := 0
				for b.Loop() {
					ps := &passes[i%len(passes)]
					var keep func(e int) bool
					switch share {
					case "one":
						keep = func(e int) bool { return e == ps.one }
					case "third":
						keep = func(e int) bool { return e%3 == 0 }
					}
					if err := dev.RunRouted(context.Background(), ps.l, &ls[ps.l], h, ps.rt, keep); err != nil {
						b.Fatal(err)
					}
					picked += ps.picked
					i++
				}
				b.ReportMetric(float64(picked)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkMoEFFNGap: one pick of a MoE block at one token (what
// engine/gpu leaves the CPU of a layer whose other picks the GPU
// computes), in Qwen3-30B-A3B's and Mixtral-8x7B's shapes, with the
// caller idle between calls for a gap, as the CPU beside a GPU is while
// the GPU computes the layers between its own: us/call is the call alone.
// An idle gap longer than the team's spin puts its threads to sleep, and
// the next call starts by waking them (workpool's bells). The gap is a
// busy wait on the caller's thread, as a host waiting on the GPU's event.
// In Qwen's shape also a served batch's share (batch8): of eight tokens'
// picks, those of the experts with the fewest tokens (the pick stream
// sends the others to the GPU), a tenth of the layer's experts, about
// what a served batch of eight at 8 GiB leaves the CPU a layer, after
// gaps of a batch layer's hand-over; GB/s is their bytes over the call
// alone, to set against the served batch's CPU rate.
func BenchmarkMoEFFNGap(b *testing.B) {
	for _, sh := range []moeShape{qwenMoEShape, mixtralMoEShape} {
		b.Run(sh.name, func(b *testing.B) { benchMoEFFNGap(b, sh, 1) })
	}
	b.Run(qwenMoEShape.name+"/batch8", func(b *testing.B) { benchMoEFFNGap(b, qwenMoEShape, 8) })
}

func benchMoEFFNGap(b *testing.B, sh moeShape, T int) {
	cfg, ls, dev, perExpert := moeBenchBlock(b, sh)
	used, dim := cfg.ExpertsUsed, cfg.Dim
	h := make([][]float32, T)
	for t := range h {
		h[t] = randomVector(dim, uint64(t+1))
	}
	r := rand.New(rand.NewPCG(3, 4))
	type pass struct {
		l     int
		rt    Routing
		keep  []bool // per expert: computed here
		bytes int64  // the kept experts' bytes
	}
	passes := make([]pass, 256)
	tokens := make([]int, cfg.Experts)
	for i := range passes {
		ps := &passes[i]
		ps.l = r.IntN(cfg.Layers)
		ps.rt = Routing{IDs: make([]int32, T*used), Weights: make([]float32, T*used)}
		for t := range T {
			for j, e := range r.Perm(cfg.Experts)[:used] {
				ps.rt.IDs[t*used+j], ps.rt.Weights[t*used+j] = int32(e), 1/float32(used)
			}
		}
		ps.keep = make([]bool, cfg.Experts)
		if T == 1 {
			ps.keep[ps.rt.IDs[0]], ps.bytes = true, perExpert
			continue
		}
		// The picked experts with the fewest tokens, a tenth of the
		// layer's experts.
		clear(tokens)
		var es []int
		for _, e := range ps.rt.IDs {
			if tokens[e] == 0 {
				es = append(es, int(e))
			}
			tokens[e]++
		}
		slices.SortStableFunc(es, func(p, q int) int { return cmp.Compare(tokens[p], tokens[q]) })
		for _, e := range es[:min(len(es), max(1, cfg.Experts/10))] {
			ps.keep[e] = true
			ps.bytes += perExpert
		}
	}
	gaps := []time.Duration{0, 100 * time.Microsecond, 500 * time.Microsecond}
	if T > 1 {
		gaps = []time.Duration{0, 250 * time.Microsecond}
	}
	for _, gap := range gaps {
		b.Run(fmt.Sprintf("%v/gap%v", gemv.Detect(), gap), func(b *testing.B) {
			var in time.Duration
			var bytes int64
			calls := 0
			for b.Loop() {
				ps := &passes[calls%len(passes)]
				for t0 := time.Now(); time.Since(t0) < gap; {
				}
				keep := func(e int) bool { return ps.keep[e] }
				t0 := time.Now()
				if err := dev.RunRouted(context.Background(), ps.l, &ls[ps.l], h, ps.rt, keep); err != nil {
					b.Fatal(err)
				}
				in += time.Since(t0)
				bytes += ps.bytes
				calls++
			}
			b.ReportMetric(float64(in.Microseconds())/float64(calls), "us/call")
			if T > 1 {
				b.ReportMetric(float64(bytes)/in.Seconds()/1e9, "GB/s")
			}
		})
	}
}

// randomQuantTensor is a rows x cols tensor of typ holding random blocks
// of the scale trained weights have.
func randomQuantTensor(b testing.TB, name string, typ quant.Type, rows, cols int, seed uint64) Tensor {
	rb, err := typ.RowBytes(int64(cols))
	if err != nil {
		b.Fatal(err)
	}
	d := make([]byte, int(rb)*rows)
	if err := quant.FillRandomRows(typ, d, cols, seed, 0.02); err != nil {
		b.Fatal(err)
	}
	return Tensor{Name: name, Type: typ, Rows: rows, Cols: cols, Data: d}
}
