package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// gemmConfig mirrors one gemm_h_<name> instance of gemm.cu (its HGEMM
// line): a block computes bm tokens x bn weight rows, k in steps of bk,
// through a stages-deep cp.async pipeline, with warps of wm x wn;
// minBlocks is its __launch_bounds__ residency target.
type gemmConfig struct {
	name               string
	bm, bn, bk, wm, wn int
	stages, minBlocks  int
}

func (g gemmConfig) threads() int { return 32 * (g.bm / g.wm) * (g.bn / g.wn) }

// smem is the dynamic shared memory of one block: stages x (A + B tiles).
func (g gemmConfig) smem() int { return g.stages * (g.bm + g.bn) * g.bk * 2 }

// gemmConfigs are the f16 GEMM instances, in gemm.cu's order: of nine
// tile configurations tried, the three that were fastest for some shape.
var gemmConfigs = []gemmConfig{
	{name: "m128n128k32", bm: 128, bn: 128, bk: 32, wm: 64, wn: 64, stages: 4, minBlocks: 2},
	{name: "m128n128k64", bm: 128, bn: 128, bk: 64, wm: 64, wn: 64, stages: 3, minBlocks: 2},
	{name: "m64n64k32", bm: 64, bn: 64, bk: 32, wm: 32, wn: 32, stages: 4, minBlocks: 4},
}

// gemmTuning holds the dispatch knobs of the dequantize-then-GEMM path.
// Tests and the sweep benchmark override them on their own Kernels view
// (Tuning.gemm); baseTuning holds the defaults.
type gemmTuning struct {
	// config forces one gemmConfigs entry by name; "" picks per shape.
	config string
	// panelBytes caps the f16 weight panel dequantized at a time, xBytes
	// the f16 copy of x (larger m is processed in chunks of tokens). Each
	// panel is one GEMM launch, so panels must stay large: at 32 MiB the
	// launches' grids were too small to fill the device.
	panelBytes, xBytes int64
	// fusedMaxM: up to this many tokens the on-the-fly kernel (gemm_<type>,
	// decode inside the MMA loop, no workspace) runs instead. 0: the
	// dequantize-then-GEMM path is the faster at every m past the GEMVs.
	fusedMaxM int
	// deqDirect: the dequantizer stores each thread's 64 bytes directly
	// instead of through shared memory (for comparison).
	deqDirect bool
}

func gemmConfigNamed(name string) (gemmConfig, bool) {
	for _, g := range gemmConfigs {
		if g.name == name {
			return g, true
		}
	}
	return gemmConfig{}, false
}

// gemmPick chooses the configuration for m tokens against n weight rows on
// sms multiprocessors, from the number of 128x128 tiles:
// fewer than ~3/4 of the multiprocessors -> 64x64 tiles (more blocks:
// 1024 rows at m=512, 114 against 76 TFLOP/s); up to ~2.5 waves, or m <=
// 128 -> 128x128 with k steps of 64 (best alone on a multiprocessor:
// 4096x14336 at m=512, 322 against 255); larger grids -> 128x128 with k
// steps of 32 and 4 stages (14336x4096 at m=512, 357 against 339).
func gemmPick(tu gemmTuning, m, n, sms int) gemmConfig {
	if g, ok := gemmConfigNamed(tu.config); ok {
		return g
	}
	tiles := ceilDiv(m, 128) * ceilDiv(n, 128)
	name := "m128n128k32"
	switch {
	case 4*tiles < 3*sms:
		name = "m64n64k32"
	case m <= 128 || 2*tiles < 5*sms:
		name = "m128n128k64"
	}
	g, _ := gemmConfigNamed(name)
	return g
}

// gemmState is the GEMM's per-Kernels state: a workspace per stream (the
// f16 copy of x and the dequantized weight panel; keyed by stream so GEMMs
// on different streams never share one) and the kernels whose shared
// memory limit has been raised.
type gemmState struct {
	ws     map[cudadrv.Stream]*gemmWorkspace
	raised map[cudadrv.Function]bool
}

type gemmWorkspace struct {
	ptr  cudadrv.DevPtr
	size int64
}

// workspace returns at least n bytes of s's workspace, growing it when
// needed. Growing waits for s (the old buffer may still be read by queued
// kernels), so it must not happen under graph capture; prefill, the only
// GEMM user, is never captured.
func (g *gemmState) workspace(c *cudadrv.Ctx, s cudadrv.Stream, n int64) (cudadrv.DevPtr, error) {
	if g.ws == nil {
		g.ws = map[cudadrv.Stream]*gemmWorkspace{}
	}
	w := g.ws[s]
	if w != nil && w.size >= n {
		return w.ptr, nil
	}
	if w != nil {
		if err := c.StreamSync(s); err != nil {
			return 0, fmt.Errorf("gemm workspace: %w", err)
		}
		if err := c.Free(w.ptr); err != nil {
			return 0, fmt.Errorf("gemm workspace: %w", err)
		}
		delete(g.ws, s)
	}
	n = (n + 1<<20 - 1) &^ (1<<20 - 1)
	p, err := c.Alloc(n)
	if err != nil {
		return 0, fmt.Errorf("gemm workspace of %d bytes: %w", n, err)
	}
	g.ws[s] = &gemmWorkspace{ptr: p, size: n}
	return p, nil
}

// free releases every workspace.
func (g *gemmState) free(c *cudadrv.Ctx) error {
	return freeEach(c, g.ws, func(w *gemmWorkspace) cudadrv.DevPtr { return w.ptr })
}

// freeEach frees the buffer of every stream's entry in m (ptr names it)
// and empties m, returning the first error.
func freeEach[V any](c *cudadrv.Ctx, m map[cudadrv.Stream]V, ptr func(V) cudadrv.DevPtr) error {
	var first error
	for s, w := range m {
		if err := c.Free(ptr(w)); err != nil && first == nil {
			first = err
		}
		delete(m, s)
	}
	return first
}

// GEMM computes y[m] = W x[m] for m activation rows (tokens) with tensor
// cores (f16 operands, f32 accumulation); x is m rows of W.Cols float32, y
// m rows of W.Rows float32. Used for prefill and large batches. x must be
// 16-byte aligned.
//
// On compute_80 devices x is converted to f16 once and the weights are
// dequantized to f16, a panel of rows at a time, into a workspace the
// Kernels keep per stream (grown on first use of a larger shape: that
// allocation must not happen under graph capture), then one f16 GEMM runs
// per panel; F16 weights are read in place. compute_61 devices, and m up
// to Tuning.gemm.fusedMaxM, use the on-the-fly kernel, which decodes weights
// inside the MMA loop.
func (k *Kernels) GEMM(c *cudadrv.Ctx, s cudadrv.Stream, w Matrix, x, y cudadrv.DevPtr, m int) error {
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
	if !k.mma() || m <= k.tune.gemm.fusedMaxM {
		return k.gemmFused(c, s, suf, w, x, y, m)
	}
	if err := k.gemmF16(c, s, suf, w, x, y, m); err != nil {
		return fmt.Errorf("gemm %v %dx%d by %d: %w", w.Type, w.Rows, w.Cols, m, err)
	}
	return nil
}

// gemmFused launches the on-the-fly kernel gemm_<type>.
func (k *Kernels) gemmFused(c *cudadrv.Ctx, s cudadrv.Stream, suf string, w Matrix, x, y cudadrv.DevPtr, m int) error {
	f, err := k.fn("gemm_" + suf)
	if err != nil {
		return err
	}
	var a cudadrv.Args
	a.Ptr(w.Ptr).I64(w.RowBytes()).Int(w.Rows).Int(w.Cols).Ptr(x).Int(w.Cols).Int(m).Ptr(y).Int(w.Rows)
	// gemm.cu: 128 weight rows x gemmBN tokens per block, 2*gemmBN threads.
	cfg := cudadrv.LaunchConfig{
		Grid:  cudadrv.Dim3{X: uint32(ceilDiv(w.Rows, 128)), Y: uint32(ceilDiv(m, gemmBN))},
		Block: cudadrv.Dim3{X: 2 * gemmBN},
	}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("gemm %v %dx%d by %d: %w", w.Type, w.Rows, w.Cols, m, err)
	}
	return nil
}

// gemmBN mirrors gemm.cu's GEMM_BN (tokens per block of the on-the-fly
// kernel).
const gemmBN = 128

// gemmPlan is how gemmF16 splits one product: tokens in chunks of mChunk
// (each converted to f16 into the workspace's first xBytes), weight rows in
// panels of panelRows (0: the f16 weights are used in place).
type gemmPlan struct {
	mChunk, panelRows int
	xBytes, wsBytes   int64
}

// planGEMM sizes the chunks and panels for w and m tokens under the
// tuning's caps. Panels are whole multiples of 256 rows (every config's
// bn divides 256) and chunks of 256 tokens, so only the last is ragged.
func planGEMM(tu gemmTuning, w Matrix, m int, inPlace bool) gemmPlan {
	k := int64(w.Cols)
	p := gemmPlan{mChunk: m}
	if int64(m)*k*2 > tu.xBytes {
		p.mChunk = max(256, int(tu.xBytes/(2*k))/256*256)
	}
	p.xBytes = (int64(p.mChunk)*k*2 + 255) &^ 255
	p.wsBytes = p.xBytes
	if !inPlace {
		p.panelRows = w.Rows
		if int64(w.Rows)*k*2 > tu.panelBytes {
			p.panelRows = min(w.Rows, max(256, int(tu.panelBytes/(2*k))/256*256))
		}
		p.wsBytes += int64(p.panelRows) * k * 2
	}
	return p
}

// GEMMWorkspaceBytes is the device memory GEMM allocates (once, per
// stream, kept until Unload) for m tokens against w on a compute_80
// device, assuming w is 16-byte aligned: the f16 copy of x (at most 32
// MiB) plus, unless w is F16, its dequantized f16 weight panel (at most 128
// MiB). Memory planners reserve it next to the activations.
func GEMMWorkspaceBytes(w Matrix, m int) int64 {
	tu := baseTuning().gemm
	if m <= MaxGEMVBatch || m <= tu.fusedMaxM {
		return 0
	}
	return planGEMM(tu, w, m, w.Type == quant.F16).wsBytes
}

func (k *Kernels) gemmF16(c *cudadrv.Ctx, s cudadrv.Stream, suf string, w Matrix, x, y cudadrv.DevPtr, m int) error {
	inPlace := w.Type == quant.F16 && uint64(w.Ptr)%16 == 0
	p := planGEMM(k.tune.gemm, w, m, inPlace)
	ws, err := k.gemm.workspace(c, s, p.wsBytes)
	if err != nil {
		return err
	}
	x16, panel := ws, ws.Add(p.xBytes)
	K := w.Cols
	pairs := 0
	if uint64(y)%8 == 0 && w.Rows%2 == 0 {
		pairs = 1
	}
	chunks := ceilDiv(m, p.mChunk)
	convert := func(t0, mt int) error {
		return k.gemmX16(c, s, x.Add(int64(t0)*int64(K)*4), x16, int64(mt)*int64(K))
	}
	if chunks == 1 {
		if err := convert(0, m); err != nil {
			return err
		}
	}
	rows := w.Rows
	wp := w.Ptr
	if !inPlace {
		rows = p.panelRows
		wp = panel
	}
	for n0 := 0; n0 < w.Rows; n0 += rows {
		nr := min(rows, w.Rows-n0)
		if !inPlace {
			if err := k.gemmDequant(c, s, suf, w, n0, nr, panel); err != nil {
				return err
			}
		} else {
			wp = w.Ptr.Add(int64(n0) * int64(K) * 2)
		}
		for t0 := 0; t0 < m; t0 += p.mChunk {
			mt := min(p.mChunk, m-t0)
			if chunks > 1 {
				if err := convert(t0, mt); err != nil {
					return err
				}
			}
			yp := y.Add((int64(t0)*int64(w.Rows) + int64(n0)) * 4)
			if err := k.gemmH(c, s, x16, mt, wp, nr, K, yp, w.Rows, pairs); err != nil {
				return err
			}
		}
	}
	return nil
}

// gemmX16 converts n float32s (a multiple of 4) at x to f16 at out.
func (k *Kernels) gemmX16(c *cudadrv.Ctx, s cudadrv.Stream, x, out cudadrv.DevPtr, n int64) error {
	f, err := k.fn("gemm_x16")
	if err != nil {
		return err
	}
	n4 := n / 4
	blocks := min(ceilDiv(int(n4), 256), 16*max(k.SMs, 1))
	var a cudadrv.Args
	a.Ptr(x).I64(n4).Ptr(out)
	return k.run(c, f, cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks)}, Block: cudadrv.Dim3{X: 256}}, s, &a)
}

// gemmDequant decodes weight rows n0..n0+rows-1 of w to f16 at out.
func (k *Kernels) gemmDequant(c *cudadrv.Ctx, s cudadrv.Stream, suf string, w Matrix, n0, rows int, out cudadrv.DevPtr) error {
	f, err := k.fn("gemm_deq_" + suf)
	if err != nil {
		return err
	}
	parts := int64(rows) * int64(w.Cols/32)
	coalesce := 1
	if k.tune.gemm.deqDirect {
		coalesce = 0
	}
	var a cudadrv.Args
	a.Ptr(w.Ptr.Add(int64(n0) * w.RowBytes())).I64(w.RowBytes()).Int(rows).Int(w.Cols).Ptr(out).Int(coalesce)
	return k.run(c, f, cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32((parts + 255) / 256)}, Block: cudadrv.Dim3{X: 256}}, s, &a)
}

// gemmH launches the f16 GEMM for m tokens of x16 against n rows of w16
// (row stride K), writing y with row stride ystride.
func (k *Kernels) gemmH(c *cudadrv.Ctx, s cudadrv.Stream, x16 cudadrv.DevPtr, m int, w16 cudadrv.DevPtr, n, K int, y cudadrv.DevPtr, ystride, pairs int) error {
	g := gemmPick(k.tune.gemm, m, n, k.SMs)
	f, err := k.fn("gemm_h_" + g.name)
	if err != nil {
		return err
	}
	smem := g.smem()
	if k.gemm.raised == nil {
		k.gemm.raised = map[cudadrv.Function]bool{}
	}
	if smem > 48<<10 && !k.gemm.raised[f] {
		if err := c.SetAttribute(f, cudadrv.FuncMaxDynamicSharedMemory, smem); err != nil {
			return fmt.Errorf("gemm_h_%s: raising shared memory to %d: %w", g.name, smem, err)
		}
		k.gemm.raised[f] = true
	}
	var a cudadrv.Args
	a.Ptr(x16).Int(m).Ptr(w16).Int(n).Int(K).Ptr(y).Int(ystride).Int(pairs)
	cfg := cudadrv.LaunchConfig{
		Grid:      cudadrv.Dim3{X: uint32(ceilDiv(m, g.bm) * ceilDiv(n, g.bn))},
		Block:     cudadrv.Dim3{X: uint32(g.threads())},
		SharedMem: uint32(smem),
	}
	return k.run(c, f, cfg, s, &a)
}
