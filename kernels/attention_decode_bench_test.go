package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkAttentionDecode times one layer's decode attention (the split
// kernel and its combine, as a pass launches them) for the 8b's heads
// (32 query, 8 KV) and Qwen3-30B-A3B's (32 query, 4 KV) at spans from a
// short context to a long one, one token and eight: what a decode pass
// spends in attention as its context grows, against the keys' and
// values' bytes, for each count of blocks per multiprocessor the splits
// may aim at (the tuning's decodeBlocksPerSM and decodeLong; the rows
// with the default's splits marked). Run
// with -test.benchtime 1x.
func BenchmarkAttentionDecode(b *testing.B) {
	d, _ := gpu(b)
	for _, sh := range []struct {
		name string
		at   Attention
	}{
		{"8b", Attention{Heads: 32, KVHeads: 8, HeadDim: 128}},
		{"qwen3-30b-a3b", Attention{Heads: 32, KVHeads: 4, HeadDim: 128}},
	} {
		at := sh.at
		at.Scale = 1 / float32(math.Sqrt(float64(at.HeadDim)))
		for _, ntok := range []int{1, 8} {
			for _, span := range []int{64, 512, 1024, 2048, 4096} {
				err := d.Do(func(c *cudadrv.Ctx) error {
					k := gpuK
					r := rand.New(rand.NewPCG(23, uint64(span)))
					a := &arena{c: c}
					defer a.free()
					kvdim := at.KVHeads * at.HeadDim
					kv := KVCache{K: put(a, randVec(r, ntok*span*kvdim, 1)), V: put(a, randVec(r, ntok*span*kvdim, 1)), MaxCtx: span, KVDim: kvdim}
					q := put(a, randVec(r, ntok*at.Heads*at.HeadDim, 1))
					out := a.alloc(int64(ntok * at.Heads * at.HeadDim * 4))
					slots, pos := make([]int32, ntok), make([]int32, ntok)
					for i := range slots {
						slots[i], pos[i] = int32(i), int32(span-1)
					}
					sl, ps := put(a, slots), put(a, pos)
					sb := at.DecodeScratchBytes(ntok, 64)
					scratch := a.alloc(sb)
					bytes := float64(ntok) * float64(span) * float64(kvdim) * 2 * 4
					for _, per := range []int{2, 4, 8, 16} {
						kp := tuned(k, func(t *Tuning) { t.decodeBlocksPerSM, t.decodeLong.blocksPerSM = per, per })
						def := ""
						if kp.DecodeSplits(at, ntok, span) == k.DecodeSplits(at, ntok, span) {
							def = " (default)"
						}
						ms := timeIt(c, 50, func(int) error {
							return kp.AttentionDecode(c, 0, at, kv, q, out, ntok, sl, ps, span, 0, scratch, sb)
						})
						fmt.Printf("attn-decode %-14s ntok=%d span=%-5d %2d blocks/SM: splits %2d  %7.1f us/layer  %6.1f GB/s of keys and values%s\n",
							sh.name, ntok, span, per, kp.DecodeSplits(at, ntok, span), ms*1e3, bytes/(ms*1e-3)/1e9, def)
						b.ReportMetric(ms*1e3, fmt.Sprintf("us/layer-%s-%d-%d-%d", sh.name, ntok, span, per))
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
