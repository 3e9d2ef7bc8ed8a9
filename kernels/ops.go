package kernels

import (
	"errors"
	"fmt"
	"math"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

func gridFor(n int64, block int) cudadrv.Dim3 {
	g := (n + int64(block) - 1) / int64(block)
	return cudadrv.Dim3{X: uint32(min(g, 1<<20))}
}

func (k *Kernels) launch(c *cudadrv.Ctx, s cudadrv.Stream, name string, cfg cudadrv.LaunchConfig, a *cudadrv.Args) error {
	f, err := k.fn(name)
	if err != nil {
		return err
	}
	if err := k.run(c, f, cfg, s, a); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// RMSNorm writes y[r] = x[r] / rms(x[r]) * w for rows r < n of dim
// float32 (y may equal x), as engine/model's rmsNorm.
func (k *Kernels) RMSNorm(c *cudadrv.Ctx, s cudadrv.Stream, x, w, y cudadrv.DevPtr, n, dim int, eps float32) error {
	return k.rmsNorm(c, s, x, w, y, n, dim, eps, 0)
}

// rmsNorm launches rmsnorm; xq, when not 0, also receives y quantized
// for the integer GEMVs (RMSNormQ).
func (k *Kernels) rmsNorm(c *cudadrv.Ctx, s cudadrv.Stream, x, w, y cudadrv.DevPtr, n, dim int, eps float32, xq cudadrv.DevPtr) error {
	if n < 1 || dim < 1 {
		return fmt.Errorf("rmsnorm: %d rows of %d", n, dim)
	}
	var a cudadrv.Args
	a.Ptr(x).Ptr(w).Ptr(y).Int(dim).F32(eps).Ptr(xq)
	return k.launch(c, s, "rmsnorm", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(n)}, Block: cudadrv.Dim3{X: normThreads(dim)}}, &a)
}

// normThreads is the block of norm.cu's kernels for rows of dim floats:
// one float4 per thread, 32 to 1024 threads (a decode step's norms are a
// single row each, so one block has to cover it quickly).
func normThreads(dim int) uint32 {
	return uint32(min(1024, max(32, ceilDiv(ceilDiv(dim, 4), 32)*32)))
}

// RopeFreqs returns the per-pair angular frequencies engine/model uses:
// theta^(-2i/headDim), divided by llama3's factors[i] when factors is
// non-nil. Upload the result (float64) once per model for RoPE.
func RopeFreqs(theta float64, headDim int, factors []float32) ([]float64, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("rope: head dim %d must be even and positive", headDim)
	}
	half := headDim / 2
	if factors != nil && len(factors) != half {
		return nil, fmt.Errorf("rope: %d frequency factors for %d pairs", len(factors), half)
	}
	f := make([]float64, half)
	for i := range f {
		f[i] = math.Pow(theta, -2*float64(i)/float64(headDim))
		if factors != nil {
			f[i] /= float64(factors[i])
		}
	}
	return f, nil
}

// RoPE rotates, in place, ntok rows (row stride rowStride floats) of
// nheads heads of headDim, token t at position pos[t] (device int32), with
// frequencies freqs (device float64, from RopeFreqs). neox selects pairs
// (i, i+hd/2) (gemma2) instead of adjacent pairs (llama).
func (k *Kernels) RoPE(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, ntok, nheads, headDim, rowStride int, pos, freqs cudadrv.DevPtr, neox bool) error {
	if ntok < 1 || nheads < 1 || headDim < 2 || headDim%2 != 0 || rowStride < nheads*headDim {
		return fmt.Errorf("rope: bad shape %d tokens x %d heads x %d (stride %d)", ntok, nheads, headDim, rowStride)
	}
	nx := int32(0)
	if neox {
		nx = 1
	}
	var a cudadrv.Args
	a.Ptr(x).Int(ntok).Int(nheads).Int(headDim).Int(rowStride).Ptr(pos).Ptr(freqs).I32(nx)
	n := int64(ntok) * int64(nheads) * int64(headDim/2)
	return k.launch(c, s, "rope", cudadrv.LaunchConfig{Grid: gridFor(n, 256), Block: cudadrv.Dim3{X: 256}}, &a)
}

// KVCache describes float32 key and value caches: per sequence slot,
// MaxCtx positions of KVDim floats.
type KVCache struct {
	K, V   cudadrv.DevPtr
	MaxCtx int
	KVDim  int
}

func (kv KVCache) slotStride() int64 { return int64(kv.MaxCtx) * int64(kv.KVDim) }

// StoreKV copies ntok rows of keys and values (KVDim floats each) into the
// cache: token t goes to slot slots[t] at position pos[t] (device int32).
func (k *Kernels) StoreKV(c *cudadrv.Ctx, s cudadrv.Stream, kv KVCache, keys, vals cudadrv.DevPtr, ntok int, slots, pos cudadrv.DevPtr) error {
	if ntok < 1 {
		return errors.New("store_kv: no tokens")
	}
	var a cudadrv.Args
	a.Ptr(keys).Ptr(vals).Ptr(kv.K).Ptr(kv.V).Ptr(slots).Ptr(pos).Int(ntok).Int(kv.KVDim).I64(kv.slotStride())
	return k.launch(c, s, "store_kv", cudadrv.LaunchConfig{Grid: gridFor(int64(ntok)*int64(kv.KVDim), 256), Block: cudadrv.Dim3{X: 256}}, &a)
}

// Attention holds what both attention kernels need: the query heads and
// GQA shape, the score scale, the optional soft-cap (0 = off) and sliding
// window (0 = none).
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale, Softcap          float32
	Window                  int
}

func (at Attention) check(kv KVCache) error {
	switch {
	case at.Heads < 1 || at.KVHeads < 1 || at.Heads%at.KVHeads != 0:
		return fmt.Errorf("attention: %d heads over %d KV heads", at.Heads, at.KVHeads)
	case at.HeadDim%32 != 0 || at.HeadDim < 32 || at.HeadDim > 256:
		return fmt.Errorf("attention: head dim %d must be a multiple of 32 in [32, 256]", at.HeadDim)
	case kv.KVDim != at.KVHeads*at.HeadDim:
		return fmt.Errorf("attention: cache rows of %d floats for %d KV heads of %d", kv.KVDim, at.KVHeads, at.HeadDim)
	}
	return nil
}

// DecodeScratchBytes is the scratch AttentionDecode needs for ntok tokens
// split nsplit ways.
func (at Attention) DecodeScratchBytes(ntok, nsplit int) int64 {
	return int64(ntok) * int64(at.Heads) * int64(nsplit) * int64(at.HeadDim+2) * 4
}

// DecodeSplits picks how many ways to split each (token, head)'s keys so
// the launch fills the device (the tuning's blocks per multiprocessor, a
// larger aim for one token's long span): at least 32 keys per split (each
// of the block's 4 warps then takes at most 8 keys per split, two rounds
// of attention.cu's AU-key loads, for short contexts).
func (k *Kernels) DecodeSplits(at Attention, ntok, span int) int {
	blocks := ntok * at.Heads
	per := k.tune.decodeBlocksPerSM
	if long := k.tune.decodeLong; long.blocksPerSM > 0 && blocks < k.SMs && span >= long.span {
		per = long.blocksPerSM
	}
	want := ceilDiv(max(per, 1)*max(k.SMs, 1), max(blocks, 1))
	return max(1, min(want, ceilDiv(span, 32), 64))
}

// AttentionDecode computes, for ntok tokens each of its own sequence, the
// attention of its query row (q: ntok x Heads*HeadDim) over its slot's
// cache up to and including its position, into out (same shape). slots
// and pos are device int32 per token; the keys must already be stored.
// maxSpan bounds the keys any token attends to (its position + 1, or the
// window) and, with nsplit (0 = DecodeSplits), fixes the split layout, so
// a launch captured in a graph stays valid while positions stay below it.
// scratch must hold DecodeScratchBytes(ntok, nsplit) when nsplit > 1.
func (k *Kernels) AttentionDecode(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, out cudadrv.DevPtr, ntok int, slots, pos cudadrv.DevPtr, maxSpan, nsplit int, scratch cudadrv.DevPtr, scratchBytes int64) error {
	return k.attentionDecode(c, s, at, kv, q, out, ntok, slots, pos, maxSpan, nsplit, scratch, scratchBytes, 0)
}

// AttentionDecodeQ is AttentionDecode that also leaves out quantized for
// the integer GEMV that reads it next (the o projection), as RMSNormQ
// does for its y, where the stream's scratch can take it and the head
// width is a multiple of 64 (each 64-block of x within one head).
func (k *Kernels) AttentionDecodeQ(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, out cudadrv.DevPtr, ntok int, slots, pos cudadrv.DevPtr, maxSpan, nsplit int, scratch cudadrv.DevPtr, scratchBytes int64) error {
	cols := at.Heads * at.HeadDim
	xq, ok := k.normQScratch(s, out, ntok, cols)
	if !ok || at.HeadDim%64 != 0 {
		return k.AttentionDecode(c, s, at, kv, q, out, ntok, slots, pos, maxSpan, nsplit, scratch, scratchBytes)
	}
	if err := k.attentionDecode(c, s, at, kv, q, out, ntok, slots, pos, maxSpan, nsplit, scratch, scratchBytes, xq); err != nil {
		return err
	}
	k.holdQuantized(s, out, ntok, cols)
	return nil
}

func (k *Kernels) attentionDecode(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, out cudadrv.DevPtr, ntok int, slots, pos cudadrv.DevPtr, maxSpan, nsplit int, scratch cudadrv.DevPtr, scratchBytes int64, xq cudadrv.DevPtr) error {
	if err := at.check(kv); err != nil {
		return err
	}
	if ntok < 1 || maxSpan < 1 {
		return fmt.Errorf("attention: %d tokens, span %d", ntok, maxSpan)
	}
	if at.Window > 0 {
		maxSpan = min(maxSpan, at.Window)
	}
	if nsplit <= 0 {
		nsplit = k.DecodeSplits(at, ntok, maxSpan)
	}
	if nsplit > 1 && scratchBytes < at.DecodeScratchBytes(ntok, nsplit) {
		// Fall back to as many splits as the scratch holds.
		nsplit = int(scratchBytes / max(1, at.DecodeScratchBytes(ntok, 1)))
		if nsplit < 2 {
			nsplit = 1
		}
	}
	chunk := ceilDiv(maxSpan, nsplit)
	var a cudadrv.Args
	a.Ptr(q).Ptr(out).Ptr(kv.K).Ptr(kv.V).I64(kv.slotStride()).Int(kv.KVDim).Ptr(slots).Ptr(pos).
		Int(at.Heads).Int(at.Heads / at.KVHeads).Int(at.HeadDim).F32(at.Scale).F32(at.Softcap).Int(at.Window).
		Int(chunk).Ptr(scratch).Int(nsplit)
	if nsplit == 1 {
		a.Ptr(xq)
	} else {
		a.Ptr(0)
	}
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(at.Heads), Y: uint32(ntok), Z: uint32(nsplit)}, Block: cudadrv.Dim3{X: 128}}
	if err := k.launch(c, s, "attn_decode", cfg, &a); err != nil {
		return err
	}
	if nsplit == 1 {
		return nil
	}
	a.Reset().Ptr(scratch).Ptr(out).Int(at.Heads).Int(at.HeadDim).Int(nsplit).Ptr(xq)
	return k.launch(c, s, "attn_combine", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(at.Heads), Y: uint32(ntok)}, Block: cudadrv.Dim3{X: uint32(at.HeadDim)}}, &a)
}

// AttentionPrefill computes causal attention for ntok consecutive tokens of
// one sequence (cache slot slot, first position p0), whose keys and values
// are already stored: token i attends to positions up to p0+i.
func (k *Kernels) AttentionPrefill(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, out cudadrv.DevPtr, ntok, slot, p0 int) error {
	if err := at.check(kv); err != nil {
		return err
	}
	if ntok < 1 || p0 < 0 || p0+ntok > kv.MaxCtx {
		return fmt.Errorf("attention prefill: %d tokens from %d past the cache's %d", ntok, p0, kv.MaxCtx)
	}
	return k.attentionPrefill(c, s, at, kv, q, out, ntok, slot, p0)
}

func (k *Kernels) elementwise(c *cudadrv.Ctx, s cudadrv.Stream, name string, n int64, a *cudadrv.Args) error {
	if n < 1 {
		return fmt.Errorf("%s: %d elements", name, n)
	}
	g := gridFor(n, 256)
	g.X = min(g.X, uint32(max(k.SMs, 1)*16))
	return k.launch(c, s, name, cudadrv.LaunchConfig{Grid: g, Block: cudadrv.Dim3{X: 256}}, a)
}

// SwiGLU writes out = silu(gate) * up over n floats (out may alias gate).
func (k *Kernels) SwiGLU(c *cudadrv.Ctx, s cudadrv.Stream, gate, up, out cudadrv.DevPtr, n int64) error {
	var a cudadrv.Args
	a.Ptr(gate).Ptr(up).Ptr(out).I64(n)
	return k.elementwise(c, s, "swiglu", n, &a)
}

// GeGLU writes out = gelu_tanh(gate) * up over n floats (gemma2).
func (k *Kernels) GeGLU(c *cudadrv.Ctx, s cudadrv.Stream, gate, up, out cudadrv.DevPtr, n int64) error {
	var a cudadrv.Args
	a.Ptr(gate).Ptr(up).Ptr(out).I64(n)
	return k.elementwise(c, s, "geglu", n, &a)
}

// Softcap applies x = cap*tanh(x/cap) in place to n floats (gemma2 logits).
func (k *Kernels) Softcap(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, n int64, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("softcap: cap %v must be positive", cap)
	}
	var a cudadrv.Args
	a.Ptr(x).I64(n).F32(cap)
	return k.elementwise(c, s, "softcap", n, &a)
}

// Copy writes y = a over n floats with a kernel, not the copy engine: one
// side may be mapped pinned host memory (cudadrv.HostDevicePointer), and
// then the bytes cross PCIe as the kernel's loads or stores, beside (not
// queued behind) the bulk copies of streamed layers on a copy stream.
func (k *Kernels) Copy(c *cudadrv.Ctx, s cudadrv.Stream, y, a cudadrv.DevPtr, n int64) error {
	var args cudadrv.Args
	args.Ptr(y).Ptr(a).I64(n)
	return k.elementwise(c, s, "copy_f32", n, &args)
}

// Add does the residual update y += a over n floats.
func (k *Kernels) Add(c *cudadrv.Ctx, s cudadrv.Stream, y, a cudadrv.DevPtr, n int64) error {
	var args cudadrv.Args
	args.Ptr(y).Ptr(a).I64(n)
	return k.elementwise(c, s, "add", n, &args)
}

// Embed writes out[t] = table[ids[t]] * scale for n tokens (ids: device
// int32), dequantizing the table's rows (out: n rows of table.Cols floats).
// Ids are not range-checked on the device: validate them on the host.
func (k *Kernels) Embed(c *cudadrv.Ctx, s cudadrv.Stream, table Matrix, ids cudadrv.DevPtr, n int, out cudadrv.DevPtr, scale float32) error {
	suf, err := table.check("embed")
	if err != nil {
		return err
	}
	if n < 1 {
		return errors.New("embed: no tokens")
	}
	var a cudadrv.Args
	a.Ptr(table.Ptr).I64(table.RowBytes()).Int(table.Cols).Ptr(ids).Ptr(out).F32(scale)
	return k.launch(c, s, "embed_"+suf, cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(n)}, Block: cudadrv.Dim3{X: 128}}, &a)
}

// Argmax writes, for each of n rows of vocab logits, the index of the
// largest (lowest index on ties, NaN never chosen over a number) to out
// (device int32), as engine/sample's greedy choice.
func (k *Kernels) Argmax(c *cudadrv.Ctx, s cudadrv.Stream, logits cudadrv.DevPtr, n, vocab int, out cudadrv.DevPtr) error {
	if n < 1 || vocab < 1 {
		return fmt.Errorf("argmax: %d rows of %d", n, vocab)
	}
	var a cudadrv.Args
	a.Ptr(logits).Int(vocab).Ptr(out)
	return k.launch(c, s, "argmax", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(n)}, Block: cudadrv.Dim3{X: 1024}}, &a)
}

// SampleTemperature draws, for each of n rows of vocab logits, a token from
// softmax(logits/temp) by inverse CDF at the uniform number u[row] (device
// float32 in [0,1), from the host's seeded generator), into out (int32).
func (k *Kernels) SampleTemperature(c *cudadrv.Ctx, s cudadrv.Stream, logits cudadrv.DevPtr, n, vocab int, temp float32, u, out cudadrv.DevPtr) error {
	if n < 1 || vocab < 1 || !(temp > 0) {
		return fmt.Errorf("sample: %d rows of %d at temperature %v", n, vocab, temp)
	}
	var a cudadrv.Args
	a.Ptr(logits).Int(vocab).F32(temp).Ptr(u).Ptr(out)
	return k.launch(c, s, "sample_temp", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(n)}, Block: cudadrv.Dim3{X: 1024}}, &a)
}
