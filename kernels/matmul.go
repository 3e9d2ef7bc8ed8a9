package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cuda"
)

// Matrix is a weight matrix in device memory, in engine/quant's encoding:
// Rows rows of Cols elements, each row Type.RowBytes(Cols) bytes, rows back
// to back (the GGUF layout, so a tensor's bytes are copied unchanged).
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Ptr        cuda.DevPtr
}

// RowBytes is the encoded size of one row.
func (m Matrix) RowBytes() int64 {
	n, _ := m.Type.RowBytes(int64(m.Cols))
	return n
}

// Bytes is the encoded size of the whole matrix.
func (m Matrix) Bytes() int64 { return m.RowBytes() * int64(m.Rows) }

// suffixes name each type's kernel instances (common.cuh's FOR_EACH_TYPE).
var suffixes = map[quant.Type]string{
	quant.F32: "f32", quant.F16: "f16", quant.BF16: "bf16", quant.Q4_0: "q4_0", quant.Q8_0: "q8_0",
	quant.Q4_K: "q4_k", quant.Q5_K: "q5_k", quant.Q6_K: "q6_k", quant.INT8Row: "int8",
}

func (m Matrix) check(op string) (string, error) {
	suf, ok := suffixes[m.Type]
	if !ok {
		return "", fmt.Errorf("%s: no kernel for %v weights", op, m.Type)
	}
	if m.Rows <= 0 || m.Cols <= 0 || m.Ptr == 0 {
		return "", fmt.Errorf("%s: empty %v matrix %dx%d", op, m.Type, m.Rows, m.Cols)
	}
	if m.Cols%32 != 0 {
		return "", fmt.Errorf("%s: %d columns is not a multiple of 32", op, m.Cols)
	}
	if _, err := m.Type.RowBytes(int64(m.Cols)); err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if m.Type == quant.INT8Row && m.Cols%4 != 0 {
		return "", fmt.Errorf("%s: INT8Row needs columns in multiples of 4", op)
	}
	return suf, nil
}

// MaxGEMVBatch is the most activation vectors one GEMV launch takes.
const MaxGEMVBatch = 8

const gemvWarps = 8

// The GEMV kernels can loop over row groups (grid smaller than the row
// groups), but on the H200 one row group per block measured faster (Q4_K
// 0.30 vs 0.25 of copy bandwidth with 2 blocks per SM), so the wrapper
// launches one block per group.

// gemvTE mirrors gemv.cu's tile width in elements for type t and nb
// vectors.
func gemvTE(t quant.Type, nb int) int {
	te := 2048
	switch t {
	case quant.F32:
		te = 512
	case quant.F16, quant.BF16:
		te = 1024
	}
	if nb > 2 {
		te = min(te, 1024)
	}
	return te
}

// gemvShared mirrors gemv.cu's dynamic shared memory: the staged x slices
// (36 floats per 32-element part and vector) plus each warp's R row slots
// (a tile's bytes plus 32 of alignment slack, rounded to 16).
func gemvShared(t quant.Type, nb, r int) int {
	te := gemvTE(t, nb)
	var tb int
	switch t {
	case quant.F32:
		tb = te * 4
	case quant.F16, quant.BF16:
		tb = te * 2
	case quant.INT8Row:
		tb = te
	default:
		tb = te / t.BlockElems() * t.BlockBytes()
	}
	slot := (tb + 32 + 15) &^ 15
	return nb*(te/32*36)*4 + gemvWarps*r*slot
}

// gemvSharedLimit is the dynamic shared memory Load grants GEMV kernels on
// compute_80 devices; compute_61 devices keep the default 48 KiB.
const gemvSharedLimit = 96 << 10

// GEMV computes y[b] = W x[b] for nb (1..8) vectors: x is nb rows of
// W.Cols float32 (row stride W.Cols), y nb rows of W.Rows float32 (row
// stride W.Rows). Weights are dequantized on the fly; this is the decode
// path, bound by weight bandwidth. x must be 16-byte aligned.
func (k *Kernels) GEMV(c *cuda.Ctx, s cuda.Stream, w Matrix, x, y cuda.DevPtr, nb int) error {
	suf, err := w.check("gemv")
	if err != nil {
		return err
	}
	if nb < 1 || nb > MaxGEMVBatch {
		return fmt.Errorf("gemv: batch %d outside 1..%d", nb, MaxGEMVBatch)
	}
	if x%16 != 0 {
		return fmt.Errorf("gemv: x at %#x is not 16-byte aligned", uint64(x))
	}
	f, err := k.fn(fmt.Sprintf("gemv_%s_%d", suf, nb))
	if err != nil {
		return err
	}
	r := 1
	if nb <= 2 {
		r = 2
	}
	rowsPerBlock := gemvWarps * r
	smem := gemvShared(w.Type, nb, r)
	if limit := k.gemvSmem; smem > limit {
		return fmt.Errorf("gemv: %v batch %d needs %d bytes of shared memory, the device allows %d", w.Type, nb, smem, limit)
	}
	var a cuda.Args
	a.Ptr(w.Ptr).I64(w.RowBytes()).Int(w.Rows).Int(w.Cols).Ptr(x).Int(w.Cols).Ptr(y).Int(w.Rows)
	cfg := cuda.LaunchConfig{
		Grid:      cuda.Dim3{X: uint32(ceilDiv(w.Rows, rowsPerBlock))},
		Block:     cuda.Dim3{X: 32 * gemvWarps},
		SharedMem: uint32(smem),
	}
	if err := c.Launch(f, cfg, s, &a); err != nil {
		return fmt.Errorf("gemv %v %dx%d batch %d: %w", w.Type, w.Rows, w.Cols, nb, err)
	}
	return nil
}

// GEMM computes y[m] = W x[m] for m activation rows (tokens) with the
// tensor-core kernel (f16 operands, f32 accumulation, weights dequantized
// on the fly into shared memory); x is m rows of W.Cols float32, y m rows
// of W.Rows float32. Used for prefill and large batches. x must be 16-byte
// aligned.
func (k *Kernels) GEMM(c *cuda.Ctx, s cuda.Stream, w Matrix, x, y cuda.DevPtr, m int) error {
	suf, err := w.check("gemm")
	if err != nil {
		return err
	}
	if m < 1 {
		return fmt.Errorf("gemm: %d rows", m)
	}
	if x%16 != 0 {
		return fmt.Errorf("gemm: x at %#x is not 16-byte aligned", uint64(x))
	}
	f, err := k.fn("gemm_" + suf)
	if err != nil {
		return err
	}
	var a cuda.Args
	a.Ptr(w.Ptr).I64(w.RowBytes()).Int(w.Rows).Int(w.Cols).Ptr(x).Int(w.Cols).Int(m).Ptr(y).Int(w.Rows)
	cfg := cuda.LaunchConfig{
		Grid:  cuda.Dim3{X: uint32(ceilDiv(w.Rows, 64)), Y: uint32(ceilDiv(m, 64))},
		Block: cuda.Dim3{X: 128},
	}
	if err := c.Launch(f, cfg, s, &a); err != nil {
		return fmt.Errorf("gemm %v %dx%d by %d: %w", w.Type, w.Rows, w.Cols, m, err)
	}
	return nil
}

// MatMul picks GEMV for up to MaxGEMVBatch rows and GEMM above.
func (k *Kernels) MatMul(c *cuda.Ctx, s cuda.Stream, w Matrix, x, y cuda.DevPtr, m int) error {
	if m <= MaxGEMVBatch {
		return k.GEMV(c, s, w, x, y, m)
	}
	return k.GEMM(c, s, w, x, y, m)
}
