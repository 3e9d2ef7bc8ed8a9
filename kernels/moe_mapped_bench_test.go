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
// (MoEPickedGLU then MoEPickedDown, the launches of a layer's picks)
// with their experts in device memory and with the same experts read in
// place from pinned, mapped host memory over PCIe (a table of the host
// copies' device addresses: what engine/gpu's SetMappedExperts gives the
// experts the device does not hold). Each call takes other experts, so
// neither way is served by the L2. Reported per shape: the expert bytes
// a second each way, and the mapped rate against a pinned host-to-device
// copy's in the same run, the rate the pick stream's copies move at: the
// question is whether kernels reading host memory keep the link as busy
// as the copy engine does. The two ways' outputs are checked bit for bit
// first. Run with -test.benchtime 1x.
func BenchmarkMoEPickedMapped(b *testing.B) {
	needIntegerGEMV(b)
	d, k := gpu(b)
	for _, sh := range []struct {
		name                    string
		experts, topk, dim, ffn int
		down                    quant.Type
	}{
		{"qwen3moe-30b", 64, 8, 2048, 768, quant.Q6_K},
		{"mixtral-8x7b", 4, 2, 4096, 14336, quant.Q6_K},
	} {
		b.Run(sh.name, func(b *testing.B) {
			err := d.Do(func(c *cudadrv.Ctx) error {
				a := &arena{c: c}
				defer a.free()
				// The picked kernels quantize each pick's GLU output into
				// the stream's scratch: room for topk vectors of ffn.
				s, done := gemvqStream(c, k, max(sh.dim, sh.topk*sh.ffn))
				defer done()
				gate, _ := randMatrix(quant.Q4_K, sh.ffn, sh.dim, 5)
				up, _ := randMatrix(quant.Q4_K, sh.ffn, sh.dim, 6)
				down, _ := randMatrix(sh.down, sh.dim, sh.ffn, 7)
				parts := [][]byte{gate, up, down}
				var size int64 // one expert, each matrix 256-byte aligned
				var offs [3]int64
				for i, p := range parts {
					offs[i] = size
					size += (int64(len(p)) + 255) &^ 255
				}
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
				tables := [2]cudadrv.DevPtr{}
				for w, base := range []cudadrv.DevPtr{dev, hostDev} {
					t := make([]uint64, 3*sh.experts)
					for e := range sh.experts {
						for i := range parts {
							t[3*e+i] = uint64(base.Add(int64(e)*size + offs[i]))
						}
					}
					tables[w] = put(a, t)
				}
				p := MoEPicked{Experts: sh.experts,
					Gate: Matrix{Type: quant.Q4_K, Rows: sh.ffn, Cols: sh.dim}, Up: Matrix{Type: quant.Q4_K, Rows: sh.ffn, Cols: sh.dim},
					Down: Matrix{Type: sh.down, Rows: sh.dim, Cols: sh.ffn}}
				p.Table = tables[0]
				if !k.CanMoEPicked(s, p, sh.topk) {
					return errors.New("the picked expert kernels refuse this shape")
				}
				// One call's ids a rotation: topk other experts each.
				rot := sh.experts / sh.topk
				ids := make([]int32, rot*sh.topk)
				for i := range ids {
					ids[i] = int32(i % sh.experts)
				}
				dids := put(a, ids)
				x := put(a, randVec(rand.New(rand.NewPCG(1, 2)), sh.dim, 1))
				g, out, where := a.alloc(int64(sh.topk*sh.ffn*4)), a.alloc(int64(sh.topk*sh.dim*4)), a.alloc(int64(sh.topk*4))
				call := func(table cudadrv.DevPtr, i int) error {
					q := p
					q.Table = table
					id := dids.Add(int64((i%rot)*sh.topk) * 4)
					if err := k.MoEPickedGLU(c, s, q, id, sh.topk, x, g, where, SwiGLU); err != nil {
						return err
					}
					return k.MoEPickedDown(c, s, q, id, sh.topk, g, out)
				}
				var outs [2][]float32
				for w, t := range tables {
					must(call(t, 0))
					must(c.StreamSync(s))
					outs[w] = get[float32](a, out, sh.topk*sh.dim)
				}
				for i := range outs[0] {
					if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
						return fmt.Errorf("output %d: %v from device memory, %v read in place", i, outs[0][i], outs[1][i])
					}
				}
				iters := 4 * rot
				timed := func(fn func(i int) error) float64 { return timeOn(c, s, iters, fn) / 1e3 }
				var rates [2]float64
				for range b.N {
					for w, t := range tables {
						sec := timed(func(i int) error { return call(t, i) })
						rates[w] = float64(int64(sh.topk)*size) / sec
					}
				}
				n := min(total, 256<<20)
				h2d := float64(n) / timed(func(int) error { return c.CopyHtoD(dev, hb[:n], s) })
				b.ReportMetric(rates[0]/1e9, "device_GB/s")
				b.ReportMetric(rates[1]/1e9, "mapped_GB/s")
				b.ReportMetric(h2d/1e9, "h2d_GB/s")
				b.ReportMetric(rates[1]/h2d, "mapped/h2d")
				b.Logf("%s: %d picks of %d-byte experts a call: device memory %.1f GB/s, read in place %.1f GB/s, pinned copy %.1f GB/s (mapped %.3f of it)",
					sh.name, sh.topk, size, rates[0]/1e9, rates[1]/1e9, h2d/1e9, rates[1]/h2d)
				return nil
			})
			if err != nil {
				b.Fatal(fmt.Errorf("%s: %w", sh.name, err))
			}
		})
	}
}
