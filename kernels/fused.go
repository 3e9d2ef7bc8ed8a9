package kernels

import (
	"errors"
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// GLU selects the gated activation GEMVGLU applies in its epilogue.
type GLU int

// The gated activations, numbered as common.cuh's GLU_SWIGLU/GLU_GEGLU.
const (
	// SwiGLU is silu(gate) * up (llama), as Kernels.SwiGLU.
	SwiGLU GLU = 1
	// GeGLU is gelu_tanh(gate) * up (gemma2), as Kernels.GeGLU.
	GeGLU GLU = 2
)

// MaxFusedGEMVBatch is the most vectors the fused GEMV launches take
// (gemv.cu instantiates gemv_fused for one and two).
const MaxFusedGEMVBatch = 2

// fusedTypes are the weight types gemv_fused dispatches on (its
// fused_dispatch), with the engine/quant type ids the kernel compares.
var fusedTypes = map[quant.Type]int{quant.Q4_K: 12, quant.Q6_K: 14, quant.F16: 1, quant.BF16: 30, quant.Q6KA: 1025}

// fusedRowsFor is gemv.cu's fused_rg: rows per block of one matrix.
func fusedRowsFor(t quant.Type) int {
	if matrixType(t) == quant.Q6_K {
		return 2
	}
	return 4
}

// fusedUnitElems is the elements of one lane's unit (DQ6K, DQ6KA: 64).
func fusedUnitElems(t quant.Type) int {
	if matrixType(t) == quant.Q6_K {
		return 64
	}
	return 32
}

// GEMVOut is one matrix of a fused GEMV launch and where its product goes
// (nb rows of W.Rows float32).
type GEMVOut struct {
	W Matrix
	Y cudadrv.DevPtr
}

// CanFuseGEMV reports whether GEMVFused (and, for two matrices of one
// shape and type, GEMVGLU) takes these matrices for nb vectors: 1 to 3
// matrices of the same width, types Q4_K, Q6_K, Q6KA, F16 or BF16, rows
// and pointers 16-byte aligned (the Q6_K types: any even address),
// and nb <= MaxFusedGEMVBatch. Callers fall back to GEMV otherwise.
func (k *Kernels) CanFuseGEMV(nb int, ms ...Matrix) bool {
	if nb < 1 || nb > MaxFusedGEMVBatch || len(ms) < 1 || len(ms) > 3 {
		return false
	}
	for _, m := range ms {
		if _, ok := fusedTypes[m.Type]; !ok {
			return false
		}
		if _, err := m.check("gemv"); err != nil || m.Cols != ms[0].Cols || m.Cols%fusedUnitElems(m.Type) != 0 {
			return false
		}
		if matrixType(m.Type) != quant.Q6_K && (uint64(m.Ptr)|uint64(m.RowBytes()))%16 != 0 {
			return false
		}
	}
	return true
}

// errNotFusable is returned when CanFuseGEMV would have said no.
var errNotFusable = errors.New("matrices not fusable (see CanFuseGEMV)")

// fusedGeometry: one block per row group (groups blocks), and the most
// warps per block (a power of two, 1..8) that keeps the grid within
// Tuning.gemvWarpsPerSM warps per multiprocessor and gives each warp at least
// 32 units of the narrowest unit count.
func (k *Kernels) fusedGeometry(groups int, ms []Matrix) (blocks, threads int) {
	windows := 1 << 30
	for _, m := range ms {
		windows = min(windows, ceilDiv(m.Cols/fusedUnitElems(m.Type), 32))
	}
	warps := 1
	for warps < 8 && 2*warps <= windows && groups*2*warps <= k.SMs*k.tune.gemvWarpsPerSM {
		warps *= 2
	}
	return groups, 32 * warps
}

// GEMVFused computes Y_i = W_i x for up to three matrices sharing x (nb
// rows of their common width, 16-byte aligned) in one launch, as GEMV
// does each (decode's q, k and v). The matrices may differ in type and
// height; see CanFuseGEMV.
func (k *Kernels) GEMVFused(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, nb int, outs ...GEMVOut) error {
	ms := make([]Matrix, len(outs))
	for i, o := range outs {
		ms[i] = o.W
	}
	if !k.CanFuseGEMV(nb, ms...) {
		return fmt.Errorf("gemv fused: %d matrices, batch %d: %w", len(ms), nb, errNotFusable)
	}
	if x%16 != 0 {
		return fmt.Errorf("gemv fused: x at %#x is not 16-byte aligned", uint64(x))
	}
	if k.tune.IntegerGEMV {
		// The Q4_K (and Q6_K) matrices take the integer path (gemvq.cu)
		// on one quantized x, the others the float one in another launch.
		var fast, rest []GEMVOut
		var fm []Matrix
		for _, o := range outs {
			if k.fastType(o.W.Type) {
				fast = append(fast, o)
				fm = append(fm, o.W)
			} else {
				rest = append(rest, o)
			}
		}
		if xq, ok := k.fastScratch(s, x, nb, fm...); ok {
			if err := k.gemvqLaunch(c, s, "gemv fused", x, xq, nb, 0, fast); err != nil {
				return err
			}
			if len(rest) == 0 {
				return nil
			}
			outs, ms = rest, ms[:0]
			for _, o := range rest {
				ms = append(ms, o.W)
			}
		}
	}
	groups := 0
	var a cudadrv.Args
	for i := 0; i < 3; i++ {
		if i < len(outs) {
			o := outs[i]
			groups += ceilDiv(o.W.Rows, fusedRowsFor(o.W.Type))
			a.Ptr(o.W.Ptr).I64(o.W.RowBytes()).Ptr(o.Y).Int(o.W.Rows).Int(fusedTypes[o.W.Type])
		} else {
			a.Ptr(0).I64(0).Ptr(0).Int(0).Int(fusedTypes[quant.Q4_K])
		}
	}
	a.Int(ms[0].Cols).Ptr(x).Int(0)
	return k.launchFused(c, s, "gemv fused", groups, ms, nb, &a)
}

// GEMVGLU computes out = act(gate x) * (up x) for nb vectors in one
// launch, never storing the two products: the FFN's gate and up GEMVs and
// its SwiGLU/GeGLU in one. gate and up must have the same type and shape
// (see CanFuseGEMV); out is nb rows of gate.Rows floats.
func (k *Kernels) GEMVGLU(c *cudadrv.Ctx, s cudadrv.Stream, gate, up Matrix, x, out cudadrv.DevPtr, nb int, act GLU) error {
	if act != SwiGLU && act != GeGLU {
		return fmt.Errorf("gemv glu: unknown activation %d", act)
	}
	if gate.Type != up.Type || gate.Rows != up.Rows || !k.CanFuseGEMV(nb, gate, up) {
		return fmt.Errorf("gemv glu: %v %dx%d and %v %dx%d, batch %d: %w", gate.Type, gate.Rows, gate.Cols, up.Type, up.Rows, up.Cols, nb, errNotFusable)
	}
	if x%16 != 0 {
		return fmt.Errorf("gemv glu: x at %#x is not 16-byte aligned", uint64(x))
	}
	if xq, ok := k.fastScratch(s, x, nb, gate, up); ok && gate.Type == quant.Q4_K {
		return k.gemvqLaunch(c, s, "gemv glu", x, xq, nb, int(act), []GEMVOut{{W: gate, Y: out}, {W: up}})
	}
	t := fusedTypes[gate.Type]
	var a cudadrv.Args
	a.Ptr(gate.Ptr).I64(gate.RowBytes()).Ptr(out).Int(gate.Rows).Int(t)
	a.Ptr(up.Ptr).I64(up.RowBytes()).Ptr(0).Int(up.Rows).Int(t)
	a.Ptr(0).I64(0).Ptr(0).Int(0).Int(t)
	a.Int(gate.Cols).Ptr(x).Int(int(act))
	groups := ceilDiv(gate.Rows, fusedRowsFor(gate.Type)/2)
	return k.launchFused(c, s, "gemv glu", groups, []Matrix{gate, up}, nb, &a)
}

func (k *Kernels) launchFused(c *cudadrv.Ctx, s cudadrv.Stream, what string, groups int, ms []Matrix, nb int, a *cudadrv.Args) error {
	f, err := k.fn(fmt.Sprintf("gemv_fused_%d", nb))
	if err != nil {
		return err
	}
	blocks, threads := k.fusedGeometry(groups, ms)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: uint32(threads)}}
	if err := k.run(c, f, cfg, s, a); err != nil {
		return fmt.Errorf("%s: %d matrices %dx%d.. batch %d: %w", what, len(ms), ms[0].Rows, ms[0].Cols, nb, err)
	}
	return nil
}

// AddRMSNorm is the residual update fused with the next norm: x += a,
// then y = x / rms(x) * w, for n rows of dim floats, with exactly the
// arithmetic of Add followed by RMSNorm (y must not alias x or a).
func (k *Kernels) AddRMSNorm(c *cudadrv.Ctx, s cudadrv.Stream, x, a, w, y cudadrv.DevPtr, n, dim int, eps float32) error {
	return k.addRMSNorm(c, s, x, a, w, y, n, dim, eps, 0)
}

// addRMSNorm launches add_rmsnorm; xq, when not 0, also receives y
// quantized for the integer GEMVs (AddRMSNormQ).
func (k *Kernels) addRMSNorm(c *cudadrv.Ctx, s cudadrv.Stream, x, a, w, y cudadrv.DevPtr, n, dim int, eps float32, xq cudadrv.DevPtr) error {
	if n < 1 || dim < 1 {
		return fmt.Errorf("add_rmsnorm: %d rows of %d", n, dim)
	}
	var args cudadrv.Args
	args.Ptr(x).Ptr(a).Ptr(w).Ptr(y).Int(dim).F32(eps).Ptr(xq)
	return k.launch(c, s, "add_rmsnorm", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(n)}, Block: cudadrv.Dim3{X: normThreads(dim)}}, &args)
}

// RoPEStore is RoPE of q (ntok rows of Heads*HeadDim, stride qStride) and
// k (ntok rows of kv.KVDim) followed by StoreKV of k and v, in one launch
// with the same arithmetic: q and k are rotated in place, and k and v land
// in the cache at slot slots[t], position pos[t].
func (k *Kernels) RoPEStore(c *cudadrv.Ctx, s cudadrv.Stream, at Attention, kv KVCache, q, keys, vals cudadrv.DevPtr, ntok, qStride int, pos, slots, freqs cudadrv.DevPtr, neox bool) error {
	if err := at.check(kv); err != nil {
		return fmt.Errorf("rope_store: %w", err)
	}
	if ntok < 1 || qStride < at.Heads*at.HeadDim {
		return fmt.Errorf("rope_store: %d tokens, q stride %d for %d heads of %d", ntok, qStride, at.Heads, at.HeadDim)
	}
	nx := int32(0)
	if neox {
		nx = 1
	}
	var a cudadrv.Args
	a.Ptr(q).Ptr(keys).Ptr(vals).Ptr(kv.K).Ptr(kv.V).Int(ntok).Int(at.Heads).Int(at.KVHeads).Int(at.HeadDim).
		Int(qStride).Ptr(pos).Ptr(slots).Ptr(freqs).I32(nx).I64(kv.slotStride())
	n := int64(ntok)*int64(at.Heads+at.KVHeads)*int64(at.HeadDim/2) + int64(ntok)*int64(kv.KVDim)
	return k.launch(c, s, "rope_store", cudadrv.LaunchConfig{Grid: gridFor(n, 256), Block: cudadrv.Dim3{X: 256}}, &a)
}
