package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Matrix is a weight matrix in device memory, in engine/quant's encoding:
// Rows rows of Cols elements, each row Type.RowBytes(Cols) bytes, rows back
// to back (the GGUF layout, so a tensor's bytes are copied unchanged); or
// in Q6KA, Q6_K re-laid on the device (RelayQ6K), sized as Q6_K.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Ptr        cudadrv.DevPtr
	// Stride, where not 0, is the bytes from one row's start to the
	// next: a view of some columns of a wider matrix. Only the launches
	// that say so take such a view (MoEPickedDown); 0 is packed rows.
	Stride int64
}

// RowBytes is the encoded size of one row.
func (m Matrix) RowBytes() int64 {
	n, _ := matrixType(m.Type).RowBytes(int64(m.Cols))
	return n
}

// Pitch is the bytes from one row's start to the next: Stride, or
// RowBytes for packed rows.
func (m Matrix) Pitch() int64 {
	if m.Stride != 0 {
		return m.Stride
	}
	return m.RowBytes()
}

// Bytes is the encoded size of the whole matrix.
func (m Matrix) Bytes() int64 { return m.RowBytes() * int64(m.Rows) }

// suffixes name each type's kernel instances (common.cuh's FOR_EACH_TYPE).
var suffixes = map[quant.Type]string{
	quant.F32: "f32", quant.F16: "f16", quant.BF16: "bf16", quant.Q4_0: "q4_0", quant.Q8_0: "q8_0",
	quant.Q4_K: "q4_k", quant.Q5_K: "q5_k", quant.Q6_K: "q6_k", quant.INT8Row: "int8", quant.Q6KA: "q6_ka",
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
	if _, err := matrixType(m.Type).RowBytes(int64(m.Cols)); err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if m.Type == quant.INT8Row && m.Cols%4 != 0 {
		return "", fmt.Errorf("%s: INT8Row needs columns in multiples of 4", op)
	}
	return suf, nil
}

// MaxGEMVBatch is the most activation vectors one GEMV launch takes.
const MaxGEMVBatch = 8

// GEMV kernel paths (gemv.cu's PLAN_*).
const (
	planTiled  = iota // block-wide tiles, x staged in shared memory (any alignment)
	planDirect        // direct 16-byte loads into registers, no shared memory
	planRing          // per-warp cp.async ring in shared memory
)

// gemvPlan mirrors gemv.cu's GemvPlan<T, NB>: which path, rows per block
// (per warp for the tiled path) and the ring's stages.
type gemvPlan struct {
	kind   int
	rows   int
	stages int
	// stageX: a direct plan that stages x in shared memory (gemv.cu's
	// gemv_staged) when it fits: F16/BF16 only (for Q4_K/Q5_K it was
	// slower than the direct loads), never the misaligned fallback.
	stageX bool
}

func gemvPlanFor(t quant.Type, nb int) gemvPlan {
	f16 := t == quant.F16 || t == quant.BF16
	switch {
	case f16 && nb == 1:
		return gemvPlan{kind: planDirect, rows: 4, stageX: true}
	case (t == quant.Q4_K && nb <= 2) || (t == quant.Q5_K && nb == 1):
		return gemvPlan{kind: planDirect, rows: 4}
	case f16 && nb == 2:
		return gemvPlan{kind: planDirect, rows: 2, stageX: true}
	case t == quant.Q4_K || (t == quant.Q5_K && nb == 2):
		return gemvPlan{kind: planRing, rows: 4, stages: 2}
	case nb <= 2:
		return gemvPlan{kind: planTiled, rows: 2}
	}
	return gemvPlan{kind: planTiled, rows: 1}
}

// gemvWinBytes is gemv.cu's WinBytes<T>: the bytes of 32 32-element units.
func gemvWinBytes(t quant.Type) int {
	t = matrixType(t)
	return 32 * 32 / t.BlockElems() * t.BlockBytes()
}

const gemvTiledWarps = 8

// gemvGeometry returns the grid, block and dynamic shared memory of plan p
// for a rows x cols matrix of type t and nb vectors on a device with sms
// multiprocessors granting limit bytes of dynamic shared memory. Direct and
// ring paths: the most warps per block (a power of two, 1..8) that keeps
// the grid within tu.gemvWarpsPerSM warps per multiprocessor, the row's
// 32-unit windows and, for the ring, the shared-memory limit.
func (tu Tuning) gemvGeometry(t quant.Type, p gemvPlan, nb, rows, cols, sms, limit int) (blocks, threads, smem int) {
	if p.kind == planTiled {
		return ceilDiv(rows, gemvTiledWarps*p.rows), 32 * gemvTiledWarps, gemvTiledShared(t, nb, p.rows)
	}
	if p.kind == planDirect && p.stageX && tu.gemvStaged.warps > 0 && nb*cols*4 <= limit {
		return tu.gemvStaged.geometry(p, nb, rows, cols, sms)
	}
	blocks = ceilDiv(rows, p.rows)
	windows := ceilDiv(cols/32, 32)
	ring := 0
	if p.kind == planRing {
		ring = p.stages * p.rows * gemvWinBytes(t)
	}
	warps := 1
	for warps < 8 && 2*warps <= windows && blocks*2*warps <= sms*tu.gemvWarpsPerSM && 2*warps*ring <= limit {
		warps *= 2
	}
	return blocks, 32 * warps, warps * ring
}

// gemvStagedConfig sizes the staged direct path (x in shared memory):
// warps per block, and the blocks per multiprocessor the grid aims at
// (blocks beyond the resident ones wait and copy x again). warps == 0
// turns staging off (the __ldg direct path), which tests use to check the
// staged kernel against it.
type gemvStagedConfig struct{ warps, blocksPerSM int }

// geometry: every warp owns whole groups of p.rows rows, so the
// grid is the fewest warps (within the aimed-at resident ones) that still
// give each warp the same number of groups, rounded up to whole blocks; the
// shared memory is the nb staged vectors.
func (g gemvStagedConfig) geometry(p gemvPlan, nb, rows, cols, sms int) (blocks, threads, smem int) {
	groups := ceilDiv(rows, p.rows)
	nw := g.warps
	resident := max(1, sms*g.blocksPerSM*nw)
	perWarp := ceilDiv(groups, min(groups, resident))
	warps := ceilDiv(groups, perWarp)
	nw = min(nw, warps)
	return ceilDiv(warps, nw), 32 * nw, nb * cols * 4
}

// gemvTiledTE mirrors gemv.cu's tile width in elements for type t and nb
// vectors.
func gemvTiledTE(t quant.Type, nb int) int {
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

// gemvTiledShared mirrors the tiled path's dynamic shared memory: the
// staged x slices (36 floats per 32-element part and vector) plus each
// warp's R row slots (a tile's bytes plus 32 of alignment slack, rounded
// to 16).
func gemvTiledShared(t quant.Type, nb, r int) int {
	te := gemvTiledTE(t, nb)
	t = matrixType(t)
	tb := te / t.BlockElems() * t.BlockBytes()
	slot := (tb + 32 + 15) &^ 15
	return nb*(te/32*36)*4 + gemvTiledWarps*r*slot
}

// gemvSharedLimit is the dynamic shared memory Load grants GEMV kernels on
// compute_80 devices; compute_61 devices keep the default 48 KiB.
const gemvSharedLimit = 96 << 10

// gemvQ6KDirectCols: the float path takes Q6_K GEMVs of one or two vectors
// with at most this many columns to gemv_fused's word-loaded 64-element
// units (DQ6K) instead of the tiled kernel. Narrow rows leave the tiled kernel's staging too little
// to hide; at 14336 columns the two ran alike, so the rule stays one
// threshold.
const gemvQ6KDirectCols = 4096

// GEMV computes y[b] = W x[b] for nb (1..8) vectors: x is nb rows of
// W.Cols float32 (row stride W.Cols), y nb rows of W.Rows float32 (row
// stride W.Rows). Weights are dequantized on the fly; this is the decode
// path, bound by weight bandwidth. x must be 16-byte aligned.
func (k *Kernels) GEMV(c *cudadrv.Ctx, s cudadrv.Stream, w Matrix, x, y cudadrv.DevPtr, nb int) error {
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
	if xq, ok := k.fastScratch(s, x, nb, w); ok {
		return k.gemvqLaunch(c, s, "gemv", x, xq, nb, 0, []GEMVOut{{W: w, Y: y}})
	}
	if w.Type == quant.Q6_K && w.Cols <= gemvQ6KDirectCols && k.CanFuseGEMV(nb, w) {
		return k.GEMVFused(c, s, x, nb, GEMVOut{W: w, Y: y})
	}
	f, err := k.fn(fmt.Sprintf("gemv_%s_%d", suf, nb))
	if err != nil {
		return err
	}
	return k.launchGEMV(c, s, f, gemvPlanFor(w.Type, nb), w, x, y, nb)
}

func (k *Kernels) launchGEMV(c *cudadrv.Ctx, s cudadrv.Stream, f cudadrv.Function, p gemvPlan, w Matrix, x, y cudadrv.DevPtr, nb int) error {
	if p.kind != planTiled && (uint64(w.Ptr)|uint64(w.RowBytes()))%16 != 0 {
		// gemv.cu's fallback for misaligned weights: one row per block.
		p = gemvPlan{kind: planDirect, rows: 1}
	}
	blocks, threads, smem := k.tune.gemvGeometry(w.Type, p, nb, w.Rows, w.Cols, k.SMs, k.gemvSmem)
	if smem > k.gemvSmem {
		return fmt.Errorf("gemv: %v batch %d needs %d bytes of shared memory, the device allows %d", w.Type, nb, smem, k.gemvSmem)
	}
	var a cudadrv.Args
	a.Ptr(w.Ptr).I64(w.RowBytes()).Int(w.Rows).Int(w.Cols).Ptr(x).Int(w.Cols).Ptr(y).Int(w.Rows)
	cfg := cudadrv.LaunchConfig{
		Grid:      cudadrv.Dim3{X: uint32(blocks)},
		Block:     cudadrv.Dim3{X: uint32(threads)},
		SharedMem: uint32(smem),
	}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("gemv %v %dx%d batch %d: %w", w.Type, w.Rows, w.Cols, nb, err)
	}
	return nil
}

// MatMul picks GEMV for up to MaxGEMVBatch rows and GEMM above.
func (k *Kernels) MatMul(c *cudadrv.Ctx, s cudadrv.Stream, w Matrix, x, y cudadrv.DevPtr, m int) error {
	if m <= MaxGEMVBatch {
		return k.GEMV(c, s, w, x, y, m)
	}
	return k.GEMM(c, s, w, x, y, m)
}
