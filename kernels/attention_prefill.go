package kernels

import (
	"errors"
	"fmt"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Causal prefill attention: prefill.cu's tiled float32 kernels. A block
// holds one KV head and 64 query rows (token, head of the group), so the
// group's query heads share every key and value tile staged in shared
// memory; scores and P.V are register tiles, not per-pair warp sums. The
// warp-per-query attn_prefill (attention.cu) remains for compute_61
// devices, misaligned pointers and devices whose shared memory is too
// small, and as the benchmark's baseline.

// prefillRows is the query rows per block (PF_BR in prefill.cu).
const prefillRows = 64

// prefillBC is the key tile of the compiled instances (prefill.cu's BC).
const prefillBC = 64

// prefillVariant is one compiled instance of the tiled kernel: head dims
// up to 32*nd (padded), key tiles of bc keys.
type prefillVariant struct{ nd, bc int }

func (v prefillVariant) name() string { return fmt.Sprintf("attn_prefill_f32_d%d_k%d", v.nd, v.bc) }

// smem is the dynamic shared memory: Q (64 rows), K and V (bc rows each)
// of nd*32+4 floats, P (bc rows of 68 floats).
func (v prefillVariant) smem() int {
	ld := v.nd*32 + 4
	return 4 * (prefillRows*ld + 2*v.bc*ld + v.bc*(prefillRows+4))
}

// prefillND is the padded head dim / 32 for head dim hd (a multiple of 32
// in [32, 256], checked by Attention.check).
func prefillND(hd int) int {
	switch {
	case hd <= 64:
		return 2
	case hd <= 128:
		return 4
	default:
		return 8
	}
}

// prefillTuning holds the tiled kernel's dispatch knobs (Tuning.prefill;
// baseTuning holds the defaults, the fastest of the benchmark's variants);
// tests and the benchmark override them on their own Kernels view.
type prefillTuning struct {
	// pair: each block takes query tiles y and ntiles-1-y (equal causal
	// work per block) when the unpaired grid has at most pairMaxWaves
	// blocks per SM; 0 never pairs.
	pairMaxWaves float64
	// pair forces pairing on (1) or off (-1); 0 uses pairMaxWaves.
	pair int
	// legacy runs attention.cu's attn_prefill instead.
	legacy bool
}

// attentionPrefill is AttentionPrefill's implementation: the tiled kernel
// where it applies, else the warp-per-query one.
func (k *Kernels) attentionPrefill(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, out cudadrv.DevPtr, ntok, slot, p0 int) error {
	if err := at.check(kv); err != nil {
		return err
	}
	if ntok < 1 || p0 < 0 || p0+ntok > kv.MaxCtx || slot < 0 {
		return fmt.Errorf("attention prefill: %d tokens from %d past the cache's %d (slot %d)", ntok, p0, kv.MaxCtx, slot)
	}
	aligned := (uint64(q)|uint64(out)|uint64(kv.K)|uint64(kv.V))%16 == 0
	if k.tune.prefill.legacy || !k.mma() || !aligned {
		return k.attentionPrefillLegacy(c, s, at, kv, q, out, ntok, slot, p0)
	}
	v := prefillVariant{nd: prefillND(at.HeadDim), bc: prefillBC}
	f, err := k.fn(v.name())
	if err != nil {
		return err
	}
	// Idempotent and cheap; prefill is never graph-captured. A device
	// whose per-block opt-in limit is below the variant's need (e.g. 99
	// KiB on sm_86/89 for head dim 256) keeps the warp-per-query kernel.
	if err := c.SetAttribute(f, cudadrv.FuncMaxDynamicSharedMemory, v.smem()); err != nil {
		var ce *cudadrv.Error
		if errors.As(err, &ce) && ce.Code == cudadrv.ResultInvalidValue {
			return k.attentionPrefillLegacy(c, s, at, kv, q, out, ntok, slot, p0)
		}
		return fmt.Errorf("%s: raising shared memory to %d: %w", v.name(), v.smem(), err)
	}
	group := at.Heads / at.KVHeads
	ntiles := ceilDiv(ntok*group, prefillRows)
	pair := k.tune.prefill.pair > 0 ||
		(k.tune.prefill.pair == 0 && float64(ntiles*at.KVHeads) <= k.tune.prefill.pairMaxWaves*float64(max(k.SMs, 1)))
	gy, pi := ntiles, int32(0)
	if pair && ntiles > 1 {
		gy, pi = ceilDiv(ntiles, 2), 1
	}
	var a cudadrv.Args
	a.Ptr(q).Ptr(out).Ptr(kv.K).Ptr(kv.V).I64(kv.slotStride()).Int(kv.KVDim).Int(slot).Int(p0).Int(ntok).
		Int(at.Heads).Int(group).Int(at.HeadDim).F32(at.Scale).F32(at.Softcap).Int(at.Window).Int(ntiles).I32(pi)
	cfg := cudadrv.LaunchConfig{
		Grid:      cudadrv.Dim3{X: uint32(at.KVHeads), Y: uint32(gy)},
		Block:     cudadrv.Dim3{X: 256},
		SharedMem: uint32(v.smem()),
	}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("%s: %w", v.name(), err)
	}
	return nil
}

// attentionPrefillLegacy launches attention.cu's attn_prefill: grid
// (heads, ceil(ntok/8)), a warp per query.
func (k *Kernels) attentionPrefillLegacy(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, out cudadrv.DevPtr, ntok, slot, p0 int) error {
	var a cudadrv.Args
	a.Ptr(q).Ptr(out).Ptr(kv.K).Ptr(kv.V).I64(kv.slotStride()).Int(kv.KVDim).Int(slot).Int(p0).Int(ntok).
		Int(at.Heads).Int(at.Heads / at.KVHeads).Int(at.HeadDim).F32(at.Scale).F32(at.Softcap).Int(at.Window)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(at.Heads), Y: uint32(ceilDiv(ntok, 8))}, Block: cudadrv.Dim3{X: 256}}
	return k.launch(c, s, "attn_prefill", cfg, &a)
}
