package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// MoELogits writes a mixture-of-experts router's scores, logits[t*E+e] =
// router[e]·x[t] (+ bias[e] when bias is not 0), for T rows of x (dim
// float32 each); router is E rows of dim float32. It is an f32 product of
// its own rather than MatMul because routing is discrete: the GEMM's f16
// inputs would move scores near a tie and pick other experts than the
// CPU reference. bias is engine/model's router skew for the layer.
func (k *Kernels) MoELogits(c *cudadrv.Ctx, s cudadrv.Stream, x, router, bias, logits cudadrv.DevPtr, T, E, dim int) error {
	if T < 1 || E < 1 || dim < 4 || dim%4 != 0 {
		return fmt.Errorf("moe logits: %d rows, %d experts, width %d (a multiple of 4)", T, E, dim)
	}
	if (x|router)%16 != 0 {
		return fmt.Errorf("moe logits: x %#x or router %#x not 16-byte aligned", uint64(x), uint64(router))
	}
	var a cudadrv.Args
	a.Ptr(x).Ptr(router).Ptr(bias).Ptr(logits).Int(T).Int(E).Int(dim)
	warps := int64(T) * int64(E)
	return k.launch(c, s, "moe_logits", cudadrv.LaunchConfig{Grid: gridFor(warps*32, 256), Block: cudadrv.Dim3{X: 256}}, &a)
}

// MoETopK picks each of T rows' top topk experts from its E logits:
// ids[t*topk+j] (int32) and weights[t*topk+j] (float32), j in rank order,
// exactly engine/model's routing (scores descending, ties to the lower
// index; weights the softmax over the picked scores). A row with fewer
// than topk numbers (NaN scores) gets id -1 for the picks it lacks.
func (k *Kernels) MoETopK(c *cudadrv.Ctx, s cudadrv.Stream, logits cudadrv.DevPtr, T, E, topk int, ids, weights cudadrv.DevPtr) error {
	if T < 1 || E < 1 || topk < 1 || topk > E {
		return fmt.Errorf("moe top-k: %d rows, top %d of %d experts", T, topk, E)
	}
	var a cudadrv.Args
	a.Ptr(logits).Int(E).Int(topk).Ptr(ids).Ptr(weights)
	return k.launch(c, s, "moe_topk", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(T)}, Block: cudadrv.Dim3{X: 32}}, &a)
}

// MoEGather copies rows rows[p] (device int32) of x into out's row p, for
// n rows of dim float32: the tokens an expert computed on the GPU takes,
// made contiguous for its products.
func (k *Kernels) MoEGather(c *cudadrv.Ctx, s cudadrv.Stream, x, rows, out cudadrv.DevPtr, n, dim int) error {
	if dim < 1 {
		return fmt.Errorf("moe gather: width %d", dim)
	}
	var a cudadrv.Args
	a.Ptr(x).Ptr(rows).Ptr(out).Int(n).Int(dim)
	return k.elementwise(c, s, "moe_gather", int64(n)*int64(dim), &a)
}

// MoECombine adds the GPU's experts into the residual: h[t] = base[t] (h[t]
// when base is 0) + Σ_j weights[t*topk+j]·out[where[t*topk+j]] over the
// picks j whose where (device int32) is not -1, in pick order; out holds
// the experts' output rows (dim float32), weights MoETopK's.
func (k *Kernels) MoECombine(c *cudadrv.Ctx, s cudadrv.Stream, h, base, out, weights, where cudadrv.DevPtr, T, topk, dim int) error {
	if topk < 1 || dim < 1 {
		return fmt.Errorf("moe combine: top %d, width %d", topk, dim)
	}
	var a cudadrv.Args
	a.Ptr(h).Ptr(base).Ptr(out).Ptr(weights).Ptr(where).Int(T).Int(topk).Int(dim)
	return k.elementwise(c, s, "moe_combine", int64(T)*int64(dim), &a)
}
