package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// GEMV by column slices (gemvq.cu's gemvq_sk_p and gemvq_sk_q6ka): for a
// one-vector product whose x is still in floats, each block quantizes the
// 1024 columns of x it reads into shared memory and adds its rows'
// products over them into 64-bit fixed-point accumulators (common.cuh's
// gemv_fx) by integer atomics, which AddFixed (zeroing them) or
// AddFixedRMSNormQ (leaving them to the next GEMVSliced told to zero them)
// then add to their target. Why: the decode step's down projection
// reads the x gate/up has just written, and the integer GEMVs would first
// quantize it in a launch of its own (gemvq_x): one more dependent launch,
// ramp and tail a layer. Integer sums are exact in any order, so the
// result is the same bits every run, whichever block finishes first, as
// float atomics' would not be.

// GEMVSliceCols is the columns of one slice; gemvSKMaxSlices the most
// slices (partial sums a row) the fixed point takes (common.cuh).
const GEMVSliceCols, gemvSKMaxSlices = 1024, 16

// gemvSKRows are gemvq.cu's GEMVQ_SK rows a block (RC) for Q4_K and Q6KA;
// gemvSKThreads its block size (8 warps).
const gemvSKRowsQ4K, gemvSKRowsQ6KA, gemvSKThreads = 256, 240, 256

// gemvSKBlocksPerSMDefault is how many blocks of either kernel a compute
// 9.0 multiprocessor holds with the sm_90 cubin (123 and 120 registers a thread, 256 threads),
// where Load's occupancy query fails.
const gemvSKBlocksPerSMDefault = 2

// gemvSKGeometry picks the kernel, its rows a block and its grid for w,
// or ok false where GEMVSliced takes nothing: the integer path in the
// tuning (Tuning.IntegerGEMV), Q4_K rows 16-byte aligned or
// Q6KA (re-laid: 2-byte), cols a multiple of GEMVSliceCols and at most
// gemvSKMaxSlices of them (the fixed point's limit, common.cuh), x 8-byte
// aligned, and every block resident at once (one wave: the kernels'
// block sizes were chosen for down 4096x14336, 224 and 252 blocks, within
// one wave on a device of 132 multiprocessors holding two each; a second
// wave would run behind the first with nothing in flight).
func (k *Kernels) gemvSKGeometry(w Matrix, x cudadrv.DevPtr) (name string, rc, blocks int, ok bool) {
	if !k.tune.IntegerGEMV || w.Rows < 1 || w.Cols < GEMVSliceCols || w.Cols%GEMVSliceCols != 0 ||
		w.Cols > gemvSKMaxSlices*GEMVSliceCols || w.Ptr == 0 || x%8 != 0 {
		return "", 0, 0, false
	}
	switch {
	case w.Type == quant.Q4_K && (uint64(w.Ptr)|uint64(w.RowBytes()))%16 == 0:
		name, rc = "gemvq_sk_p", gemvSKRowsQ4K
	case w.Type == quant.Q6KA && w.Ptr%2 == 0:
		name, rc = "gemvq_sk_q6ka", gemvSKRowsQ6KA
	default:
		return "", 0, 0, false
	}
	if _, ok := k.fns[name]; !ok {
		return "", 0, 0, false
	}
	perSM := k.skPerSM[name]
	if perSM <= 0 {
		perSM = gemvSKBlocksPerSMDefault
	}
	blocks = ceilDiv(w.Rows, rc) * (w.Cols / GEMVSliceCols)
	if blocks > perSM*max(k.SMs, 1) {
		return "", 0, 0, false
	}
	return name, rc, blocks, true
}

// GEMVFixedBytes is the bytes of fixed-point accumulators for n outputs.
func GEMVFixedBytes(n int) int64 { return 8 * int64(n) }

// GEMVSlicedTakes reports whether GEMVSliced would take w with x.
func (k *Kernels) GEMVSlicedTakes(w Matrix, x cudadrv.DevPtr) bool {
	_, _, _, ok := k.gemvSKGeometry(w, x)
	return ok
}

// GEMVSliced enqueues acc += W x for one vector x of W.Cols floats by
// column slices where it can take the product (gemvSKGeometry), reporting
// false having enqueued nothing where it cannot (the caller then launches
// GEMV). x is quantized as GEMV's integer path does; each slice's sum is
// GEMV's arithmetic in another order, added to acc (W.Rows accumulators,
// GEMVFixedBytes, 8-byte aligned) in fixed point: acc must hold zeros, or
// what earlier products added, and is read by AddFixed (which zeroes it)
// or AddFixedRMSNormQ (which does not). zero, when not 0, is another
// W.Rows accumulators (not overlapping acc) that the launch zeroes, after
// whatever ran before it on s. A slice's sum of magnitude 2^20 or more,
// or NaN, makes the output NaN (common.cuh).
func (k *Kernels) GEMVSliced(c *cudadrv.Ctx, s cudadrv.Stream, w Matrix, x, acc, zero cudadrv.DevPtr) (bool, error) {
	name, _, blocks, ok := k.gemvSKGeometry(w, x)
	if !ok {
		return false, nil
	}
	n := cudadrv.DevPtr(GEMVFixedBytes(w.Rows))
	if acc == 0 || acc%8 != 0 || zero%8 != 0 || (zero != 0 && zero < acc+n && acc < zero+n) {
		return false, fmt.Errorf("gemv sliced: accumulators at %#x, to zero at %#x (%d bytes each)", uint64(acc), uint64(zero), n)
	}
	err := k.gemvqOrRead(c, s, "gemv sliced", func() error {
		f, err := k.fn(name)
		if err != nil {
			return err
		}
		var a cudadrv.Args
		a.Ptr(w.Ptr).I64(w.RowBytes()).Ptr(acc).Int(w.Rows).Int(w.Cols).Ptr(x).Ptr(zero)
		cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: gemvSKThreads}}
		if err := k.run(c, f, cfg, s, &a); err != nil {
			return fmt.Errorf("gemv sliced: %s %dx%d: %w", name, w.Rows, w.Cols, err)
		}
		return nil
	}, []GEMVOut{{W: w, Y: acc}})
	return err == nil, err
}

// AddFixed adds n fixed-point accumulators (GEMVSliced's) to y and zeroes
// them: y[i] += acc[i], acc[i] = 0.
func (k *Kernels) AddFixed(c *cudadrv.Ctx, s cudadrv.Stream, y, acc cudadrv.DevPtr, n int64) error {
	if acc%8 != 0 {
		return fmt.Errorf("add_fx: accumulators at %#x", uint64(acc))
	}
	var args cudadrv.Args
	args.Ptr(y).Ptr(acc).I64(n)
	return k.elementwise(c, s, "add_fx", n, &args)
}

// AddFixedRMSNormQ is AddRMSNormQ (x += a, y = rmsnorm(x) * w, y left
// quantized for the integer GEMV that reads it next) with a as n rows of
// dim fixed-point accumulators (GEMVSliced's), left as they are: a
// single block's time is its bytes, and writing zeros back would add to
// every layer; a GEMVSliced told to zero them (or AddFixed) must before the
// next product adds into them.
func (k *Kernels) AddFixedRMSNormQ(c *cudadrv.Ctx, s cudadrv.Stream, x, acc, w, y cudadrv.DevPtr, n, dim int, eps float32) error {
	if n < 1 || dim < 1 || acc%8 != 0 {
		return fmt.Errorf("add_fx_rmsnorm: %d rows of %d, accumulators at %#x", n, dim, uint64(acc))
	}
	return k.normQ(s, y, n, dim, (x|acc|w)%16 == 0, func(xq cudadrv.DevPtr) error {
		var args cudadrv.Args
		args.Ptr(x).Ptr(acc).Ptr(w).Ptr(y).Int(dim).F32(eps).Ptr(xq)
		return k.launch(c, s, "add_fx_rmsnorm", cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(n)}, Block: cudadrv.Dim3{X: normThreads(dim)}}, &args)
	})
}
