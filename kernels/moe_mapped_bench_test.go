package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkMoEPickedMapped times the picked expert kernels at one token
// (MoEPickedGLU then MoEPickedDown, the launches of a layer's picks) with
// some of each call's picks in pinned, mapped host memory, three ways:
// every expert in device memory (the floor), the host picks read in place
// over PCIe by the kernels (the table holds the host copies' device
// addresses: engine/gpu's SetMappedExperts), and the host picks copied
// into slots by MoEStage first. Each call takes other experts, so neither
// way is served by the L2. Reported per case: the host picks' bytes a
// second read in place and staged, and both against a pinned
// host-to-device copy's rate in the same run. A layer of a model with
// most of its routing resident has one or two host picks of eight: the
// case where the kernels have the fewest reads in flight. The ways'
// outputs are checked bit for bit first. Run with -test.benchtime 1x.
func BenchmarkMoEPickedMapped(b *testing.B) {
	needIntegerGEMV(b)
	d, k := gpu(b)
	for _, sh := range []struct {
		name                          string
		experts, topk, host, dim, ffn int
		down                          quant.Type
	}{
		{"qwen3moe-30b/8-of-8-host", 64, 8, 8, 2048, 768, quant.Q6_K},
		{"qwen3moe-30b/2-of-8-host", 64, 8, 2, 2048, 768, quant.Q6_K},
		{"qwen3moe-30b/1-of-8-host", 64, 8, 1, 2048, 768, quant.Q6_K},
		{"mixtral-8x7b/2-of-2-host", 4, 2, 2, 4096, 14336, quant.Q6_K},
		{"mixtral-8x7b/1-of-2-host", 4, 2, 1, 4096, 14336, quant.Q6_K},
	} {
		b.Run(sh.name, func(b *testing.B) {
			err := d.Do(func(c *cudadrv.Ctx) error {
				a := &arena{c: c}
				defer a.free()
				// The picked kernels quantize each pick's GLU output into
				// the stream's scratch: room for topk vectors of ffn.
				s, done := gemvqStream(c, k, max(sh.dim, sh.topk*sh.ffn))
				defer done()
				p := MoEPicked{Experts: sh.experts,
					Gate: Matrix{Type: quant.Q4_K, Rows: sh.ffn, Cols: sh.dim}, Up: Matrix{Type: quant.Q4_K, Rows: sh.ffn, Cols: sh.dim},
					Down: Matrix{Type: sh.down, Rows: sh.dim, Cols: sh.ffn}}
				uo, do, size, err := MoEStageLayout(p)
				if err != nil {
					return err
				}
				offs := [3]int64{0, uo, do}
				gate, _ := randMatrix(quant.Q4_K, sh.ffn, sh.dim, 5)
				up, _ := randMatrix(quant.Q4_K, sh.ffn, sh.dim, 6)
				down, _ := randMatrix(sh.down, sh.dim, sh.ffn, 7)
				parts := [][]byte{gate, up, down}
				total := size * int64(sh.experts)
				host, err := c.HostAlloc(int(total), cudadrv.HostAllocDeviceMap)
				if err != nil {
					return err
				}
				defer c.FreeHost(host)
				hostDev, err := c.HostDevicePointer(host)
				if err != nil {
					return err
				}
				hb := host.Bytes()
				for e := range sh.experts {
					for i, p := range parts {
						copy(hb[int64(e)*size+offs[i]:], p)
					}
				}
				dev := a.alloc(total)
				must(c.CopyHtoD(dev, hb, s))
				// Expert e is in host memory in the mixed table when it is
				// among the first host of its call's group of topk.
				onHost := func(e int) bool { return e%sh.topk < sh.host }
				var tables [2]cudadrv.DevPtr
				for w := range tables {
					t := make([]uint64, 3*sh.experts)
					for e := range sh.experts {
						base := dev
						if w == 1 && onHost(e) {
							base = hostDev
						}
						for i := range parts {
							t[3*e+i] = uint64(base.Add(int64(e)*size + offs[i]))
						}
					}
					tables[w] = put(a, t)
				}
				p.Table = tables[0]
				if !k.CanMoEPicked(s, p, sh.topk) {
					return errors.New("the picked expert kernels refuse this shape")
				}
				st := MoEStaging{Table: a.alloc(int64(24 * sh.experts)), Slots: a.alloc(int64(sh.topk) * size), SlotBytes: size,
					Lo: dev, Hi: dev.Add(total)}
				// One call's ids a rotation: topk other experts each.
				rot := sh.experts / sh.topk
				ids := make([]int32, rot*sh.topk)
				for i := range ids {
					ids[i] = int32(i % sh.experts)
				}
				dids := put(a, ids)
				x := put(a, randVec(rand.New(rand.NewPCG(1, 2)), sh.dim, 1))
				g, out, where := a.alloc(int64(sh.topk*sh.ffn*4)), a.alloc(int64(sh.topk*sh.dim*4)), a.alloc(int64(sh.topk*4))
				// way 0: every expert on the device; 1: host picks read in
				// place; 2: host picks staged first.
				call := func(way, i int) error {
					q := p
					q.Table = tables[min(way, 1)]
					id := dids.Add(int64((i%rot)*sh.topk) * 4)
					if way == 2 {
						var err error
						if q, err = k.MoEStage(c, s, q, st, id, sh.topk); err != nil {
							return err
						}
					}
					if err := k.MoEPickedGLU(c, s, q, MoEPicks{IDs: id, T: 1, TopK: sh.topk}, x, g, where, SwiGLU); err != nil {
						return err
					}
					return k.MoEPickedDown(c, s, q, MoEPicks{IDs: id, T: 1, TopK: sh.topk}, g, out)
				}
				var outs [3][]float32
				for w := range outs {
					must(call(w, 0))
					must(c.StreamSync(s))
					outs[w] = get[float32](a, out, sh.topk*sh.dim)
				}
				for w := 1; w < 3; w++ {
					for i := range outs[0] {
						if math.Float32bits(outs[0][i]) != math.Float32bits(outs[w][i]) {
							return fmt.Errorf("way %d, output %d: %v, from device memory %v", w, i, outs[w][i], outs[0][i])
						}
					}
				}
				iters := 4 * rot
				timed := func(fn func(i int) error) float64 { return timeOn(c, s, iters, fn) / 1e3 }
				var secs [3]float64
				for range b.N {
					for w := range secs {
						secs[w] = timed(func(i int) error { return call(w, i) })
					}
				}
				n := min(total, 256<<20)
				h2d := float64(n) / timed(func(int) error { return c.CopyHtoD(dev, hb[:n], s) })
				hostBytes := float64(int64(sh.host) * size)
				mapped, staged := hostBytes/secs[1], hostBytes/secs[2]
				b.ReportMetric(secs[0]*1e6, "device_us")
				b.ReportMetric(secs[1]*1e6, "mapped_us")
				b.ReportMetric(secs[2]*1e6, "staged_us")
				b.ReportMetric(mapped/h2d, "mapped/h2d")
				b.ReportMetric(staged/h2d, "staged/h2d")
				b.Logf("%s: %d of %d picks of %d-byte experts in host memory a call: all on the device %.1f us; read in place %.1f us (%.1f GB/s of host bytes), staged %.1f us (%.1f GB/s); pinned copy %.1f GB/s (in place %.3f, staged %.3f of it)",
					sh.name, sh.host, sh.topk, size, secs[0]*1e6, secs[1]*1e6, mapped/1e9, secs[2]*1e6, staged/1e9, h2d/1e9, mapped/h2d, staged/h2d)
				return nil
			})
			if err != nil {
				b.Fatal(fmt.Errorf("%s: %w", sh.name, err))
			}
		})
	}
}
