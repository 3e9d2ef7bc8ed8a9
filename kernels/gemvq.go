package kernels

import (
	"fmt"
	"strings"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// fastType reports whether the integer path takes matrices of type t
// (Tuning.IntegerGEMV, Tuning.IntegerQ6K).
func (k *Kernels) fastType(t quant.Type) bool {
	return k.tune.IntegerGEMV && (t == quant.Q4_K || (matrixType(t) == quant.Q6_K && k.tune.IntegerQ6K))
}

// gemvqBytes is gemvq.cu's gemvq_bytes: one vector's quantized x (L0:
// int8 high bytes, uint8 low bytes, a 32-byte header per 64 elements; L6
// and LP: the same arranged for the Q6_K units and for the Q4_K pair
// units; common.cuh), rounded up to 16.
func gemvqBytes(cols int) int64 { return (gemvqLP(cols) + 140*int64(cols/64) + 15) &^ 15 }

// gemvqL6 is gemvq_l6: where the copy arranged for the Q6_K units (L6,
// common.cuh) starts in one vector's quantized x.
func gemvqL6(cols int) int64 { return 2*int64(cols) + int64(cols)/2 }

// gemvqLP is gemvq_lp: where the copy arranged for the Q4_K pair units
// (LP, common.cuh) starts.
func gemvqLP(cols int) int64 { return (gemvqL6(cols) + 152*int64(cols/64) + 15) &^ 15 }

// gemvqState holds the quantized-x scratch of each stream (a GEMV's x is
// quantized on the stream that then reads it, so streams never share one).
type gemvqState struct {
	ws map[cudadrv.Stream]gemvqScratch
}

type gemvqScratch struct {
	ptr  cudadrv.DevPtr
	cols int // the widest x it holds, for MaxFusedGEMVBatch vectors
	// held is the x (nb vectors of heldCols floats) whose quantized form
	// the scratch holds, written by a norm launched through RMSNormQ or
	// AddRMSNormQ; 0 when none. Any launch on the stream but an integer
	// GEMV's clears it (Kernels.run), so it is never stale.
	held             cudadrv.DevPtr
	heldCols, heldNB int
}

// ReserveFastGEMV allocates stream s's scratch for quantized x of up to
// cols columns (growing it if smaller) when the tuning takes the integer
// path (Tuning.IntegerGEMV); else it does nothing. It allocates, so it must be called outside graph
// capture, before the first captured GEMV on s: GEMV calls never
// allocate, and without a large enough scratch they take the float path.
func (k *Kernels) ReserveFastGEMV(c *cudadrv.Ctx, s cudadrv.Stream, cols int) error {
	if !k.tune.IntegerGEMV {
		return nil
	}
	if cols < 1 {
		return fmt.Errorf("reserve fast gemv: %d columns", cols)
	}
	if k.gemvq.ws == nil {
		k.gemvq.ws = map[cudadrv.Stream]gemvqScratch{}
	}
	old, ok := k.gemvq.ws[s]
	if ok && old.cols >= cols {
		return nil
	}
	if ok {
		// Queued launches may still read the old buffer.
		if err := c.StreamSync(s); err != nil {
			return fmt.Errorf("reserve fast gemv: %w", err)
		}
		if err := c.Free(old.ptr); err != nil {
			return fmt.Errorf("reserve fast gemv: %w", err)
		}
		delete(k.gemvq.ws, s)
	}
	n := MaxFusedGEMVBatch * gemvqBytes(cols)
	p, err := c.Alloc(n)
	if err != nil {
		return fmt.Errorf("reserve fast gemv: %d bytes: %w", n, err)
	}
	k.gemvq.ws[s] = gemvqScratch{ptr: p, cols: cols}
	return nil
}

// ReleaseFastGEMV frees stream s's scratch, if it has one, after the work
// queued on s; call it before destroying s. The driver reuses the handles
// of destroyed streams, so a scratch left behind would be taken for a new
// stream's reservation (harmless, the memory stays valid, but it is held
// until Unload).
func (k *Kernels) ReleaseFastGEMV(c *cudadrv.Ctx, s cudadrv.Stream) error {
	w, ok := k.gemvq.ws[s]
	if !ok {
		return nil
	}
	delete(k.gemvq.ws, s)
	if err := c.StreamSync(s); err != nil {
		return fmt.Errorf("release fast gemv: %w", err)
	}
	if err := c.Free(w.ptr); err != nil {
		return fmt.Errorf("release fast gemv: %w", err)
	}
	return nil
}

// free releases every stream's scratch.
func (g *gemvqState) free(c *cudadrv.Ctx) error {
	return freeEach(c, g.ws, func(w gemvqScratch) cudadrv.DevPtr { return w.ptr })
}

// fastScratch returns s's scratch when the integer path can take these
// matrices for nb vectors: the tuning's integer path for their type,
// widths a multiple of 256 and equal, Q4_K rows 16-byte aligned (Q6_K:
// 2-byte), nb <= MaxFusedGEMVBatch, x 8-byte aligned and a reserved
// scratch wide enough.
func (k *Kernels) fastScratch(s cudadrv.Stream, x cudadrv.DevPtr, nb int, ms ...Matrix) (cudadrv.DevPtr, bool) {
	if !k.tune.IntegerGEMV || nb < 1 || nb > MaxFusedGEMVBatch || len(ms) == 0 || x%8 != 0 {
		return 0, false
	}
	if _, ok := k.fns["gemvq_x"]; !ok {
		return 0, false
	}
	for _, m := range ms {
		if !k.fastType(m.Type) || m.Cols != ms[0].Cols || m.Cols%256 != 0 || m.Rows < 1 || m.Ptr == 0 {
			return 0, false
		}
		align := uint64(16)
		if matrixType(m.Type) == quant.Q6_K {
			align = 2 // word loads; Q6KA's alignment is its own (re-laid in place)
		}
		if (uint64(m.Ptr)|uint64(m.RowBytes()))%align != 0 {
			return 0, false
		}
	}
	w, ok := k.gemvq.ws[s]
	if !ok || w.cols < ms[0].Cols {
		return 0, false
	}
	return w.ptr, true
}

// quantizeX enqueues gemvq_x: nb vectors of cols floats at x into xq.
func (k *Kernels) quantizeX(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, cols, nb int, xq cudadrv.DevPtr) error {
	f, err := k.fn("gemvq_x")
	if err != nil {
		return err
	}
	warps := nb * cols / 64
	var a cudadrv.Args
	a.Ptr(x).Int(cols).Int(nb).Ptr(xq)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(ceilDiv(warps, 8))}, Block: cudadrv.Dim3{X: 256}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("gemvq x: %d x %d: %w", nb, cols, err)
	}
	return nil
}

// quantizeUnlessHeld quantizes x (nb vectors of cols floats) into xq,
// s's scratch, unless the scratch holds it already (RMSNormQ,
// QuantizeHeld).
func (k *Kernels) quantizeUnlessHeld(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, cols, nb int, xq cudadrv.DevPtr) error {
	if w := k.gemvq.ws[s]; w.held == x && w.heldCols == cols && w.heldNB == nb {
		return nil
	}
	return k.quantizeX(c, s, x, cols, nb, xq)
}

// scratchTakes reports whether stream s's scratch, sized for
// MaxFusedGEMVBatch vectors of its own width, takes n quantized vectors
// of cols floats.
func (k *Kernels) scratchTakes(s cudadrv.Stream, n, cols int) bool {
	w, ok := k.gemvq.ws[s]
	return ok && int64(n)*gemvqBytes(cols) <= MaxFusedGEMVBatch*gemvqBytes(w.cols)
}

// gemvqRows is gemvq.cu's GEMVQ_R: rows per block (GLU: half of gate,
// half of up); gemvq6Rows is GEMVQ6_R, gemvq_q6k's.
const gemvqRows, gemvq6Rows = 4, 2

// gemvqGeometry: one block per row group, and the fewest warps per block
// (a power of two, 1..8) that leave each lane at most 64 columns of a row
// (two Q4_K units, one Q6_K unit): 2 warps at 4096 columns, 8 at 14336.
// More warps per block split a row too finely (each block's cross-warp
// reduction and ramp weigh more), fewer leave a lane's units in a chain
// of dependent loads (BenchmarkGEMVQWarps sweeps both ways).
func (t Tuning) gemvqGeometry(groups, cols int) (blocks, threads int) {
	warps := 1
	for warps < 8 && 32*64*warps < cols {
		warps *= 2
	}
	if t.warps > 0 {
		warps = t.warps
	}
	return groups, 32 * warps
}

// gemvqLaunch quantizes x into xq (unless a norm just left it there:
// RMSNormQ) and launches the integer kernels over
// the outputs (mode 0: gemvq_fused_<nb> for the Q4_K ones, gemvq_q6k_<nb>
// for each Q6_K one) or over gate and up (GLU mode, Q4_K: outs[0] gate
// with the output pointer, outs[1] up).
func (k *Kernels) gemvqLaunch(c *cudadrv.Ctx, s cudadrv.Stream, what string, x, xq cudadrv.DevPtr, nb, mode int, outs []GEMVOut) error {
	cols := outs[0].W.Cols
	q4, q6 := splitQ6(outs)
	if err := k.quantizeUnlessHeld(c, s, x, cols, nb, xq); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The integer GEMVs keep a norm's quantized x held (Kernels.run) only
	// while their outputs leave the x it came from alone.
	if w := k.gemvq.ws[s]; w.held != 0 {
		end := w.held + cudadrv.DevPtr(4*w.heldCols*w.heldNB)
		for _, o := range outs {
			rows := o.W.Rows
			if o.Y < end && o.Y+cudadrv.DevPtr(4*rows*nb) > w.held {
				w.held = 0
				k.gemvq.ws[s] = w
				break
			}
		}
	}
	if k.gemvqMixed(nb, mode, q4, q6) {
		return k.gemvqOrRead(c, s, what, func() error { return k.gemvqMixedLaunch(c, s, what, xq, q4, q6[0]) }, q4, q6)
	}
	for i := range q6 {
		o := q6[i : i+1]
		if err := k.gemvqOrRead(c, s, what, func() error { return k.gemvq6Launch(c, s, what, xq, nb, o[0]) }, o); err != nil {
			return err
		}
	}
	if len(q4) == 0 {
		return nil
	}
	return k.gemvqOrRead(c, s, what, func() error { return k.gemvq4Launch(c, s, what, xq, nb, mode, q4) }, q4)
}

// gemvq6sRows, gemvq6sChunks are GEMVQ6S_R and GEMVQ6S_CH of gemvq_q6k_s.
const gemvq6sRows, gemvq6sChunks = 4, 2

// gemvq6Staged reports whether a Q6_K matrix's GEMV takes gemvq_q6k_s,
// and its block size: rows 16-byte aligned (columns a multiple of 2048),
// 4 rows within the shared memory the GEMVs may use, and at least two
// blocks per multiprocessor (a short matrix such as v 1024x4096 runs
// faster on the direct kernel, whose smaller blocks fill the device).
// Threads: the fewest warps (a power of two, 1..8) that leave each thread
// at most two 64-column units of a row: 1 warp at 4096 columns, 4 at
// 14336, the best of 1..8 for both.
func (k *Kernels) gemvq6Staged(w Matrix) (ok bool, threads int) {
	rb := w.RowBytes()
	if rb%16 != 0 || w.Ptr%16 != 0 || gemvq6sRows*rb > int64(k.gemvSmem) ||
		ceilDiv(w.Rows, gemvq6sRows) < 2*k.SMs || !k.mma() {
		return false, 0
	}
	warps := 1
	for warps < 8 && 2*32*warps*64 < w.Cols {
		warps *= 2
	}
	if k.tune.warps > 0 {
		warps = k.tune.warps
	}
	return true, 32 * warps
}

// gemvq6Launch launches gemvq_q6k_<nb> (or gemvq_q6k_s_<nb>, see
// gemvq6Staged) on quantized x.
func (k *Kernels) gemvq6Launch(c *cudadrv.Ctx, s cudadrv.Stream, what string, xq cudadrv.DevPtr, nb int, o GEMVOut) error {
	rb := o.W.RowBytes()
	name := fmt.Sprintf("gemvq_q6k_%d", nb)
	blocks, threads := k.tune.gemvqGeometry(ceilDiv(o.W.Rows, gemvq6Rows), o.W.Cols)
	smem := int64(0)
	if o.W.Type == quant.Q6KA {
		name, blocks, threads = k.gemvq6aWaveGeometry(nb, o.W.Rows, o.W.Cols)
	} else if ok, th := k.gemvq6Staged(o.W); ok {
		name, smem = fmt.Sprintf("gemvq_q6k_s_%d", nb), gemvq6sRows*rb
		blocks, threads = ceilDiv(o.W.Rows, gemvq6sRows), th
	}
	f, err := k.fn(name)
	if err != nil {
		return err
	}
	var a cudadrv.Args
	a.Ptr(o.W.Ptr).I64(rb).Ptr(o.Y).Int(o.W.Rows).Int(o.W.Cols).Ptr(xq)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: uint32(threads)}, SharedMem: uint32(smem)}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("%s: %s %dx%d batch %d: %w", what, name, o.W.Rows, o.W.Cols, nb, err)
	}
	return nil
}

// gemvq6aRows is gemvq.cu's GEMVQ6A_R: rows per block of gemvq_q6ka_1
// (gemvq_q6ka_2 takes 2).
const gemvq6aRows = 4

// gemvq6aGeometry picks the Q6KA kernel for nb vectors and its grid:
// gemvq_q6ka_<nb> with gemvqGeometry's warps (each lane at most one
// 64-column unit of a row); 4 rows a block for one vector, the fastest
// of the sizes tried.
func (t Tuning) gemvq6aGeometry(nb, rows, cols int) (name string, blocks, threads int) {
	r := gemvq6aRows
	if nb == 2 {
		r = 2
	}
	blocks, threads = t.gemvqGeometry(ceilDiv(rows, r), cols)
	return fmt.Sprintf("gemvq_q6ka_%d", nb), blocks, threads
}

// gemvq6aR2BlocksPerSMDefault is how many gemvq_q6ka_r2u2_1 blocks (one
// warp) a compute 9.0 multiprocessor holds at once with ptxas 11.8's
// sm_90 cubin (120 registers a thread), where Load's occupancy query
// fails.
const gemvq6aR2BlocksPerSMDefault = 17

// gemvq6aWaveGeometry picks gemvq_q6ka_r2u2_1 (2 rows a block, one warp,
// two units a lane in flight, both loaded before pdl_wait) for a plain
// one-vector Q6KA GEMV whose blocks all fit the device at once, where the
// tuning forces no unroll or warps; else gemvq6aGeometry. Why: on down's
// shape it is faster than gemvq_q6ka_1's 4 rows of 8 warps (1024 blocks, 2
// a multiprocessor), which have less in flight before the wait.
func (k *Kernels) gemvq6aWaveGeometry(nb, rows, cols int) (name string, blocks, threads int) {
	if nb == 1 && k.tune.unroll == 0 && k.tune.warps == 0 {
		perSM := k.q6aR2PerSM
		if perSM <= 0 {
			perSM = gemvq6aR2BlocksPerSMDefault
		}
		if blocks = ceilDiv(rows, 2); blocks <= perSM*k.SMs {
			return "gemvq_q6ka_r2u2_1", blocks, 32
		}
	}
	return k.tune.gemvq6aGeometry(nb, rows, cols)
}

// gemvqU2Threads is gemvq_fused_u2_1's block size where gemvq4Geometry
// picks it for a wave that fits the device.
const gemvqU2Threads = 64

// gemvqU2BlocksPerSMDefault is how many gemvq_fused_u2_1 blocks of 2
// warps a compute 9.0 multiprocessor holds at once with ptxas 11.8's sm_90
// cubin (116 registers a thread: 8 blocks of 64 threads in 64K
// registers); Load asks the driver for the loaded image's figure
// (Kernels.u2PerSM) and keeps this one only where the query fails.
const gemvqU2BlocksPerSMDefault = 8

// Pair-unit kernels' blocks a compute 9.0 multiprocessor holds at once
// (ptxas 11.8's sm_90 cubin: gemvq_p4_1 125 registers at 64 threads,
// gemvq_p2u2_1 118 at 32, gemvq_ps6_1 128 at 64), where Load's occupancy
// query fails.
const gemvqP4BlocksPerSMDefault, gemvqP2BlocksPerSMDefault, gemvqPS6BlocksPerSMDefault = 8, 17, 8

// perSMOr is n, or def where Load's occupancy query left n unknown.
func perSMOr(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// gemvqPairGeometry picks a pair-unit kernel (Q4_K in 64-element units,
// x from LP) for a plain one-vector launch of Q4_K matrices whose blocks
// fit the device in one wave, where the tuning forces no unroll or warps:
// for one matrix, gemvq_p4_1 (4 rows a block, one unit a lane,
// warps to cover a row's cols/64 units, at most 2) for rows of up to 4096
// columns, gemvq_p2u2_1 (2 rows, one warp, two units a lane in flight)
// for longer ones; else, for up to three matrices of up to 4096 columns
// (the q/k/v of the 8b shape), gemvq_ps6_1 (6 rows a block, 4 of them
// loaded before the wait). Why: the pair kernels decode scales and update
// floats once per 64 weights instead of once per 32 and read x in
// contiguous pieces, so o and down run faster than in gemvq_fused_u2_1;
// q/k/v, whose 4-row blocks take more than one wave, run faster in
// gemvq_ps6_1 than in gemvq_fused_1, and so does the decode step.
func (k *Kernels) gemvqPairGeometry(nb, mode int, outs []GEMVOut) (name string, blocks, threads int, ok bool) {
	if nb != 1 || mode != 0 || len(outs) < 1 || len(outs) > 3 || k.tune.unroll != 0 || k.tune.warps != 0 {
		return "", 0, 0, false
	}
	cols := outs[0].W.Cols
	for _, o := range outs {
		if o.W.Type != quant.Q4_K || o.W.Cols != cols {
			return "", 0, 0, false
		}
	}
	nv := cols / 64
	if len(outs) == 1 {
		rows := outs[0].W.Rows
		if nv > 64 {
			blocks = ceilDiv(rows, 2)
			return "gemvq_p2u2_1", blocks, 32, blocks <= perSMOr(k.p2PerSM, gemvqP2BlocksPerSMDefault)*k.SMs
		}
		blocks, threads = ceilDiv(rows, 4), 32*ceilDiv(nv, 32)
		if blocks <= perSMOr(k.p4PerSM, gemvqP4BlocksPerSMDefault)*k.SMs {
			return "gemvq_p4_1", blocks, threads, true
		}
	}
	if nv > 64 {
		return "", 0, 0, false
	}
	blocks, threads = 0, 32*ceilDiv(nv, 32)
	for _, o := range outs {
		blocks += ceilDiv(o.W.Rows, 6)
	}
	return "gemvq_ps6_1", blocks, threads, blocks <= perSMOr(k.ps6PerSM, gemvqPS6BlocksPerSMDefault)*k.SMs
}

// gemvq4Geometry picks gemvq_fused's variant and grid for groups row
// groups of cols columns and nb vectors: where nb is 1 and the groups fit
// the device in one wave of 2-warp gemvq_fused_u2_1 blocks (o 4096x4096
// and down 4096x14336 of the 8b shape), that kernel with 2 warps, which
// has two units per lane in flight, both loaded before pdl_wait: o then
// has every weight in flight before the wait. Else gemvq_fused_<nb> with
// gemvqGeometry's warps. o and down run faster that way; q/k/v (1536
// groups) and gate/up (7168), more than a wave of such blocks, run
// slower.
func (k *Kernels) gemvq4Geometry(nb, groups, cols int) (name string, blocks, threads int) {
	un := k.tune.unroll
	if un == 0 {
		un = 1
		if nb == 1 && groups <= k.u2BlocksPerSM()*k.SMs {
			un = 2
		}
	}
	if un == 2 && nb == 1 {
		threads = gemvqU2Threads
		if k.tune.warps > 0 {
			threads = 32 * k.tune.warps
		}
		return "gemvq_fused_u2_1", groups, threads
	}
	blocks, threads = k.tune.gemvqGeometry(groups, cols)
	return fmt.Sprintf("gemvq_fused_%d", nb), blocks, threads
}

// u2BlocksPerSM is how many gemvq_fused_u2_1 blocks one multiprocessor
// holds at once: the driver's occupancy figure for the loaded image
// (Load), else gemvqU2BlocksPerSMDefault. The one-wave rule above depends
// on it: a PTX image the driver JIT-compiles, or another GPU's register
// file, can hold fewer blocks than the sm_90 cubin, and a second wave of
// u2 blocks is what the rule exists to avoid.
func (k *Kernels) u2BlocksPerSM() int {
	if k.u2PerSM > 0 {
		return k.u2PerSM
	}
	return gemvqU2BlocksPerSMDefault
}

// gemvqMixed reports whether q4 (Q4_K) and q6 (Q6_K or Q6KA) outputs of
// one plain, one-vector launch go to gemvq_mixed_1 (gemvq_mixed_a_1 for
// Q6KA) together: one or two Q4_K matrices and one Q6_K matrix that
// gemvq_q6k_1 would take (not the staged kernel; a Q6KA one of any
// height), where gemvq_fused_1 and gemvq_q6k_1 would use the same block
// size. Why: a Q4_K_M layer whose v is Q6_K otherwise launches q/k/v as
// two kernels, and the second (v, 1024x4096) is too small to be more than
// launch latency.
func (k *Kernels) gemvqMixed(nb, mode int, q4, q6 []GEMVOut) bool {
	if nb != 1 || mode != 0 || len(q6) != 1 || len(q4) < 1 || len(q4) > 2 {
		return false
	}
	if q6[0].W.Type == quant.Q6_K {
		if ok, _ := k.gemvq6Staged(q6[0].W); ok {
			return false
		}
	}
	cols, groups := q4[0].W.Cols, q4Groups(q4)
	_, _, th4 := k.gemvq4Geometry(1, groups, cols)
	_, th6 := k.tune.gemvqGeometry(ceilDiv(q6[0].W.Rows, gemvq6Rows), cols)
	_, thm := k.tune.gemvqGeometry(groups, cols)
	return th4 == thm && th6 == thm
}

// packQ4Outs appends slots output slots (matrix, row bytes, output, rows;
// zeros past len(outs)) for the Q4_K kernels' arguments and returns the
// outputs' 4-row groups.
func packQ4Outs(a *cudadrv.Args, outs []GEMVOut, slots int) (groups int) {
	for i := 0; i < slots; i++ {
		if i < len(outs) {
			o := outs[i]
			a.Ptr(o.W.Ptr).I64(o.W.RowBytes()).Ptr(o.Y).Int(o.W.Rows)
		} else {
			a.Ptr(0).I64(0).Ptr(0).Int(0)
		}
	}
	return q4Groups(outs)
}

// q4Groups is the plain (not GLU) Q4_K launches' row groups over outs.
func q4Groups(outs []GEMVOut) (groups int) {
	for _, o := range outs {
		groups += ceilDiv(o.W.Rows, gemvqRows)
	}
	return groups
}

// splitQ6 separates the Q6_K (and Q6KA) outputs from the others (Q4_K).
func splitQ6(outs []GEMVOut) (q4, q6 []GEMVOut) {
	for _, o := range outs {
		if matrixType(o.W.Type) == quant.Q6_K {
			q6 = append(q6, o)
		} else {
			q4 = append(q4, o)
		}
	}
	return q4, q6
}

// gemvqMixedName is the mixed kernel for a Q6_K (or Q6KA) matrix of type
// t in blocks of threads: gemvq_mixed_1 for plain Q6_K, gemvq_mixed_a_1
// for Q6KA, or, for Q6KA in blocks of 2 warps (4096 columns: the q/k/v of
// the 8b shape's layers with a Q6_K v), gemvq_mixed_a_w2_1, the same code
// held to gemvq_fused_1's 72 registers so that 14 blocks share a
// multiprocessor: gemvq_mixed_a_1's 100 registers (its Q6KA rows') gave
// its Q4_K rows 10, and the launch took more than one wave where
// all-Q4_K q/k/v takes one.
func gemvqMixedName(t quant.Type, threads int) string {
	switch {
	case t != quant.Q6KA:
		return "gemvq_mixed_1"
	case threads == 64:
		return "gemvq_mixed_a_w2_1"
	}
	return "gemvq_mixed_a_1"
}

// gemvqMixedSplitGeometry is gemvq_mixed_s_1's grid for the Q4_K outputs
// q4 and the Q6_K one q6 of a launch gemvqMixed takes: where the tuning
// forces no unroll or warps, q6 is re-laid (Q6KA),
// the columns (the same for all) are at most 4096 and the 6-row blocks
// fit the device in one wave (the 8b shape's q/k/v with a Q6_K v: 1025).
func (k *Kernels) gemvqMixedSplitGeometry(q4 []GEMVOut, q6 GEMVOut) (blocks, threads int, ok bool) {
	cols := q6.W.Cols
	if k.tune.unroll != 0 || k.tune.warps != 0 || q6.W.Type != quant.Q6KA || cols > 4096 {
		return 0, 0, false
	}
	for _, o := range q4 {
		if o.W.Type != quant.Q4_K || o.W.Cols != cols {
			return 0, 0, false
		}
		blocks += ceilDiv(o.W.Rows, 6)
	}
	blocks += ceilDiv(q6.W.Rows, 6)
	return blocks, 32 * ceilDiv(cols/64, 32), blocks <= perSMOr(k.mixedSPerSM, gemvqPS6BlocksPerSMDefault)*k.SMs
}

// gemvqMixedLaunch launches gemvq_mixed_s_1 where gemvqMixedSplitGeometry
// takes the launch, else gemvq_mixed_1 (see gemvqMixed), or
// gemvq_mixed_a_1 / gemvq_mixed_a_w2_1 where the Q6_K matrix is re-laid
// (Q6KA; gemvqMixedName).
func (k *Kernels) gemvqMixedLaunch(c *cudadrv.Ctx, s cudadrv.Stream, what string, xq cudadrv.DevPtr, q4 []GEMVOut, q6 GEMVOut) error {
	cols := q6.W.Cols
	var a cudadrv.Args
	groups := packQ4Outs(&a, q4, 2)
	a.Ptr(q6.W.Ptr).I64(q6.W.RowBytes()).Ptr(q6.Y).Int(q6.W.Rows).Int(cols).Ptr(xq)
	blocks, threads := k.tune.gemvqGeometry(groups, cols)
	blocks += ceilDiv(q6.W.Rows, gemvq6Rows)
	name := gemvqMixedName(q6.W.Type, threads)
	if b, th, ok := k.gemvqMixedSplitGeometry(q4, q6); ok {
		name, blocks, threads = "gemvq_mixed_s_1", b, th
	}
	f, err := k.fn(name)
	if err != nil {
		return err
	}
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: uint32(threads)}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("%s: %d Q4_K matrices and a Q6_K one, %dx%d..: %w", what, len(q4), q4[0].W.Rows, cols, err)
	}
	return nil
}

// gemvq4Launch launches gemvq_fused_<nb> on quantized x, or the pair-unit
// kernel where gemvqPairGeometry takes the launch.
func (k *Kernels) gemvq4Launch(c *cudadrv.Ctx, s cudadrv.Stream, what string, xq cudadrv.DevPtr, nb, mode int, outs []GEMVOut) error {
	cols := outs[0].W.Cols
	if name, blocks, threads, ok := k.gemvqPairGeometry(nb, mode, outs); ok {
		f, err := k.fn(name)
		if err != nil {
			return err
		}
		o := outs[0]
		var a cudadrv.Args
		if strings.HasPrefix(name, "gemvq_ps") {
			packQ4Outs(&a, outs, 3)
			a.Int(cols).Ptr(xq)
		} else {
			a.Ptr(o.W.Ptr).I64(o.W.RowBytes()).Ptr(o.Y).Int(o.W.Rows).Int(cols).Ptr(xq)
		}
		cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: uint32(threads)}}
		if err := k.run(c, f, cfg, s, &a); err != nil {
			return fmt.Errorf("%s: %d matrices %dx%d..: %w", what, len(outs), o.W.Rows, cols, err)
		}
		return nil
	}
	var a cudadrv.Args
	groups := packQ4Outs(&a, outs, 3)
	if mode != 0 {
		groups = ceilDiv(outs[0].W.Rows, gemvqRows/2)
	}
	a.Int(cols).Ptr(xq).Int(mode)
	name, blocks, threads := k.gemvq4Geometry(nb, groups, cols)
	f, err := k.fn(name)
	if err != nil {
		return err
	}
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: uint32(threads)}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("%s: %d matrices %dx%d.. batch %d: %w", what, len(outs), outs[0].W.Rows, cols, nb, err)
	}
	return nil
}

// normQScratch returns stream s's quantized-x scratch when a norm of n
// rows of dim floats into y can leave y quantized for the integer GEMVs
// that read it next: the integer path in the tuning, a scratch wide enough, n within
// MaxFusedGEMVBatch, dim a multiple of 256 and y 16-byte aligned (the
// norms' float4 path).
func (k *Kernels) normQScratch(s cudadrv.Stream, y cudadrv.DevPtr, n, dim int) (cudadrv.DevPtr, bool) {
	w, ok := k.gemvq.ws[s]
	if !k.tune.IntegerGEMV || !ok || w.cols < dim || n < 1 || n > MaxFusedGEMVBatch || dim%256 != 0 || y%16 != 0 {
		return 0, false
	}
	return w.ptr, true
}

// holdQuantized records that s's scratch now holds y (n vectors of dim
// floats) quantized: called after the norm's launch, which cleared it.
func (k *Kernels) holdQuantized(s cudadrv.Stream, y cudadrv.DevPtr, n, dim int) {
	w := k.gemvq.ws[s]
	w.held, w.heldCols, w.heldNB = y, dim, n
	k.gemvq.ws[s] = w
}

// GEMVEach computes Y_i = W_i x_i for the len(outs) vectors at x (rows of
// outs[0].W.Cols floats, one a matrix; every matrix that wide): a MoE
// layer's downs at one token, each expert's on its own activation. On the
// integer path all the vectors are quantized in one launch and each
// product reads its own from the scratch, one launch a matrix where GEMV
// takes two; where that path cannot take them (a type it does not run, or
// a scratch too small for them all) each is a GEMV of its own. The results
// are GEMV's, bit for bit.
func (k *Kernels) GEMVEach(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, outs []GEMVOut) error {
	if len(outs) == 0 {
		return nil
	}
	cols := outs[0].W.Cols
	ms := make([]Matrix, len(outs))
	for i, o := range outs {
		if o.W.Cols != cols {
			return fmt.Errorf("gemv each: matrix %d has %d columns, matrix 0 %d", i, o.W.Cols, cols)
		}
		ms[i] = o.W
	}
	row := int64(cols) * 4
	xq, ok := k.fastScratch(s, x, 1, ms...)
	ok = ok && k.scratchTakes(s, len(outs), cols)
	if !ok {
		for i, o := range outs {
			if err := k.GEMV(c, s, o.W, x.Add(int64(i)*row), o.Y, 1); err != nil {
				return fmt.Errorf("gemv each, vector %d: %w", i, err)
			}
		}
		return nil
	}
	if err := k.quantizeX(c, s, x, cols, len(outs), xq); err != nil {
		return fmt.Errorf("gemv each: %w", err)
	}
	for i, o := range outs {
		q, one := xq.Add(int64(i)*gemvqBytes(cols)), []GEMVOut{o}
		launch := func() error { return k.gemvq4Launch(c, s, "gemv each", q, 1, 0, one) }
		if matrixType(o.W.Type) == quant.Q6_K {
			launch = func() error { return k.gemvq6Launch(c, s, "gemv each", q, 1, o) }
		}
		if err := k.gemvqOrRead(c, s, "gemv each", launch, one); err != nil {
			return fmt.Errorf("gemv each, vector %d: %w", i, err)
		}
	}
	return nil
}

// QuantizeHeld quantizes x (n vectors of dim floats) into stream s's
// integer-GEMV scratch and records that the scratch holds it, as RMSNormQ
// does for its output: the integer GEMVs that read x next on s skip their
// own quantizing launch. For several products over one x in a row (a MoE
// layer's experts at one token); any other launch on s drops the hold
// (Kernels.run). Where the integer path cannot take x it does nothing,
// and the GEMVs quantize for themselves.
func (k *Kernels) QuantizeHeld(c *cudadrv.Ctx, s cudadrv.Stream, x cudadrv.DevPtr, n, dim int) error {
	xq, ok := k.normQScratch(s, x, n, dim)
	if !ok {
		return nil
	}
	if err := k.quantizeX(c, s, x, dim, n, xq); err != nil {
		return err
	}
	k.holdQuantized(s, x, n, dim)
	return nil
}

// RMSNormQ is RMSNorm (y = x / rms(x) * w, n rows of dim) that also
// leaves y quantized in stream s's integer-GEMV scratch, so the GEMV,
// GEMVFused or GEMVGLU that reads y next on s (same n and dim) skips its
// quantizing launch: one launch and one dependent round trip fewer per
// GEMV in a decode step. The quantized bytes equal gemvq_x's. Where the
// integer path cannot take y (normQScratch) it is RMSNorm alone.
func (k *Kernels) RMSNormQ(c *cudadrv.Ctx, s cudadrv.Stream, x, w, y cudadrv.DevPtr, n, dim int, eps float32) error {
	return k.normQ(s, y, n, dim, (x|w)%16 == 0, func(xq cudadrv.DevPtr) error { return k.rmsNorm(c, s, x, w, y, n, dim, eps, xq) })
}

// normQ launches a norm into y (n rows of dim) through launch, with s's
// integer-GEMV scratch as its quantized output where the integer path can
// take y (normQScratch) and the norm's other operands are 16-byte aligned,
// recording that the scratch holds y; else with none (the plain norm).
func (k *Kernels) normQ(s cudadrv.Stream, y cudadrv.DevPtr, n, dim int, aligned bool, launch func(xq cudadrv.DevPtr) error) error {
	xq, ok := k.normQScratch(s, y, n, dim)
	if !ok || !aligned {
		return launch(0)
	}
	if err := launch(xq); err != nil {
		return err
	}
	k.holdQuantized(s, y, n, dim)
	return nil
}

// AddRMSNormQ is AddRMSNorm (x += a, y = rmsnorm(x) * w) that also leaves
// y quantized for the integer GEMV that reads it next, as RMSNormQ.
func (k *Kernels) AddRMSNormQ(c *cudadrv.Ctx, s cudadrv.Stream, x, a, w, y cudadrv.DevPtr, n, dim int, eps float32) error {
	return k.normQ(s, y, n, dim, (x|a|w)%16 == 0, func(xq cudadrv.DevPtr) error { return k.addRMSNorm(c, s, x, a, w, y, n, dim, eps, xq) })
}

// MarkQuantized declares that stream s's scratch holds x (n vectors of dim
// floats) quantized, as RMSNormQ leaves it, without launching anything:
// the integer GEMVs that read x next on s skip their quantizing launch
// and read whatever the scratch holds. For benchmarks that time a decode
// step's GEMVs alone as the step launches them (the norms that quantize x
// are not in that graph); the values computed are then meaningless. It
// reports whether the integer path could take x.
func (k *Kernels) MarkQuantized(s cudadrv.Stream, x cudadrv.DevPtr, n, dim int) bool {
	if _, ok := k.normQScratch(s, x, n, dim); !ok {
		return false
	}
	k.holdQuantized(s, x, n, dim)
	return true
}
