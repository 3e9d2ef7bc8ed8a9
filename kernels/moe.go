package kernels

import (
	"errors"
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
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

// MoEPicked is one MoE layer's experts in device memory as the picked
// expert kernels read them: Table holds Experts entries of three device
// pointers (uint64: gate, up, down), 0 for an expert the device does not
// hold; Gate, Up and Down give the type and shape every held expert shares
// (their Ptr is not read: the merged expert tensors give every expert of a
// layer one type and shape). Down may be a view of some columns of the
// experts' downs (Down.Stride their full rows' bytes, the table's down
// pointers at the view's first column): an expert split by its FFN width
// between devices.
type MoEPicked struct {
	Table          cudadrv.DevPtr
	Experts        int
	Gate, Up, Down Matrix
}

// CanMoEPicked reports whether the picked expert kernels take p's experts
// for topk picks at one token on stream s: the integer GEMV path, Q4_K
// gate and up, a Q4_K or Q6_K down, and a scratch that holds the topk
// quantized inputs of the downs. Where it does not, a caller launches the
// held picks one by one (GEMVGLU, GEMVEach).
func (k *Kernels) CanMoEPicked(s cudadrv.Stream, p MoEPicked, topk int) bool {
	g, u, d := p.Gate, p.Up, p.Down
	if !k.tune.IntegerGEMV || p.Table == 0 || p.Experts < 1 || topk < 1 || topk > p.Experts {
		return false
	}
	for _, name := range []string{"gemvq_x", "gemvq_moe_glu", "gemvq_moe_down_q4", "gemvq_moe_down_q6"} {
		if _, ok := k.fns[name]; !ok {
			return false
		}
	}
	if g.Type != quant.Q4_K || u.Type != quant.Q4_K || g.Rows != u.Rows || g.Cols != u.Cols || d.Cols != g.Rows || d.Rows < 1 || g.Rows < 1 {
		return false
	}
	if d.Type != quant.Q4_K && d.Type != quant.Q6_K {
		return false
	}
	if g.Cols%256 != 0 || d.Cols%256 != 0 || g.RowBytes()%16 != 0 || (d.Type == quant.Q4_K && d.Pitch()%16 != 0) {
		return false
	}
	if g.Stride != 0 || u.Stride != 0 || (d.Stride != 0 && d.Stride < d.RowBytes()) {
		return false // gate and up packed; a down view's rows at least a row apart
	}
	w, ok := k.gemvq.ws[s]
	return ok && w.cols >= g.Cols && k.scratchTakes(s, topk, d.Cols)
}

// MoEPicks is a pass's picks for the picked expert kernels: T tokens'
// TopK picks each, IDs (device int32, T·TopK, MoETopK's) in token order.
// XQ is where the products' inputs are quantized: 0 for the stream's
// scratch, which holds one token's (CanMoEPicked); a pass of more tokens
// brings a buffer of its own of MoEPickedScratch bytes.
type MoEPicks struct {
	IDs     cudadrv.DevPtr
	T, TopK int
	XQ      cudadrv.DevPtr
}

// MoEPickedScratch is the bytes an MoEPicks.XQ takes for T tokens' topk
// picks of experts dim wide with ffn-wide downs: the tokens' quantized
// inputs, then in the same place the picks' activations.
func MoEPickedScratch(dim, ffn, T, topk int) int64 {
	return max(int64(T)*gemvqBytes(dim), int64(T)*int64(topk)*gemvqBytes(ffn))
}

// check refuses picks the kernels cannot take on s.
func (n MoEPicks) check(k *Kernels, s cudadrv.Stream, p MoEPicked, what string) error {
	if n.T < 1 || n.TopK < 1 || n.T*n.TopK > 65535 || (n.XQ == 0 && n.T != 1) {
		return fmt.Errorf("%s: %d tokens of %d picks, own scratch %v", what, n.T, n.TopK, n.XQ != 0)
	}
	if !k.CanMoEPicked(s, p, n.TopK) {
		return fmt.Errorf("%s: %v %dx%d gate, %v down, top %d: %w", what, p.Gate.Type, p.Gate.Rows, p.Gate.Cols, p.Down.Type, n.TopK, errNotFusable)
	}
	return nil
}

// MoEPickedGLU computes, for each pick y of n whose expert p holds,
// act(gate·x_t)·(up·x_t) into row y of g (T·TopK rows of Gate.Rows
// float32), x_t the pick's token's row of x (T rows of Gate.Cols float32),
// as GEMVGLU computes it, bit for bit; where (device int32, T·TopK) gets
// y for a pick computed here and -1 for another: MoECombine's map. At one
// token on the stream's scratch, x is quantized here unless the scratch
// holds it (QuantizeHeld). The host passes no pick: the launches are the
// same whatever the routing.
func (k *Kernels) MoEPickedGLU(c *cudadrv.Ctx, s cudadrv.Stream, p MoEPicked, n MoEPicks, x, g, where cudadrv.DevPtr, act GLU) error {
	if act != SwiGLU && act != GeGLU {
		return fmt.Errorf("moe picked glu: unknown activation %d", act)
	}
	if err := n.check(k, s, p, "moe picked glu"); err != nil {
		return err
	}
	cols, rows := p.Gate.Cols, p.Gate.Rows
	xq := n.XQ
	if xq == 0 {
		xq = k.gemvq.ws[s].ptr
		if err := k.quantizeUnlessHeld(c, s, x, cols, 1, xq); err != nil {
			return fmt.Errorf("moe picked glu: %w", err)
		}
	} else if err := k.quantizeX(c, s, x, cols, n.T, xq); err != nil {
		return fmt.Errorf("moe picked glu: %w", err)
	}
	f, err := k.fn("gemvq_moe_glu")
	if err != nil {
		return err
	}
	blocks, threads := k.tune.gemvqGeometry(ceilDiv(rows, gemvqRows/2), cols)
	var a cudadrv.Args
	a.Ptr(p.Table).Ptr(n.IDs).Int(p.Experts).I64(p.Gate.RowBytes()).Ptr(g).Int(rows).Int(cols).Ptr(xq).Int(int(act)).Ptr(where).Int(n.TopK)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks), Y: uint32(n.T * n.TopK)}, Block: cudadrv.Dim3{X: uint32(threads)}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("moe picked glu: %dx%d, %d tokens of %d picks: %w", rows, cols, n.T, n.TopK, err)
	}
	return nil
}

// MoEPickedDown computes, for each pick y of n whose expert p holds,
// down·g[y] into row y of out (T·TopK rows of Down.Rows float32), as GEMV
// computes it, bit for bit: the rows of g are quantized in one launch,
// then one launch takes every pick.
func (k *Kernels) MoEPickedDown(c *cudadrv.Ctx, s cudadrv.Stream, p MoEPicked, n MoEPicks, g, out cudadrv.DevPtr) error {
	if err := n.check(k, s, p, "moe picked down"); err != nil {
		return err
	}
	d := p.Down
	xq, rowsIn := n.XQ, n.T*n.TopK
	if xq == 0 {
		xq = k.gemvq.ws[s].ptr
	}
	if err := k.quantizeX(c, s, g, d.Cols, rowsIn, xq); err != nil {
		return fmt.Errorf("moe picked down: %w", err)
	}
	name, rowsPer := "gemvq_moe_down_q4", gemvqRows
	if d.Type == quant.Q6_K {
		name, rowsPer = "gemvq_moe_down_q6", gemvq6Rows
	}
	f, err := k.fn(name)
	if err != nil {
		return err
	}
	blocks, threads := k.tune.gemvqGeometry(ceilDiv(d.Rows, rowsPer), d.Cols)
	var a cudadrv.Args
	a.Ptr(p.Table).Ptr(n.IDs).Int(p.Experts).I64(d.Pitch()).Ptr(out).Int(d.Rows).Int(d.Cols).Ptr(xq)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(blocks), Y: uint32(rowsIn)}, Block: cudadrv.Dim3{X: uint32(threads)}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("moe picked down: %v %dx%d, %d tokens of %d picks: %w", d.Type, d.Rows, d.Cols, n.T, n.TopK, err)
	}
	return nil
}

// MoEStaging is where MoEStage puts a token's picks of experts in host
// memory: topk slots of SlotBytes from Slots (MoEStageLayout's size at
// least), and Table, Experts entries that the picked kernels then read
// for the staged picks. An entry whose gate lies in [Lo, Hi), the
// device's expert memory, is the device's, as is one of 0 (no expert):
// any other is a host copy mapped for the device, 16-byte aligned.
type MoEStaging struct {
	Table, Slots cudadrv.DevPtr
	SlotBytes    int64
	Lo, Hi       cudadrv.DevPtr
}

// stageAlign is where each matrix starts in a slot: as a device
// allocation's rows would, and a multiple of the copy's 16-byte units.
const stageAlign = 256

// MoEStageLayout is a slot's layout for p's experts: the up's and the
// down's offsets in it (the gate's is 0) and the slot's bytes. p's
// matrices must be packed (no Stride) and each a whole number of 16-byte
// units, as MoEStage copies them.
func MoEStageLayout(p MoEPicked) (up, down, size int64, err error) {
	if p.Gate.Stride != 0 || p.Up.Stride != 0 || p.Down.Stride != 0 {
		return 0, 0, 0, errors.New("moe stage: a view of an expert's matrix")
	}
	gb, ub, db := p.Gate.Bytes(), p.Up.Bytes(), p.Down.Bytes()
	if gb <= 0 || ub <= 0 || db <= 0 || gb%16 != 0 || ub%16 != 0 || db%16 != 0 {
		return 0, 0, 0, fmt.Errorf("moe stage: matrices of %d, %d and %d bytes, not whole 16-byte units", gb, ub, db)
	}
	up = hostmem.AlignUp(gb, stageAlign)
	down = hostmem.AlignUp(up+ub, stageAlign)
	return up, down, hostmem.AlignUp(down+db, stageAlign), nil
}

// MoEStage copies each of one token's topk picks ids (device int32,
// MoETopK's) whose expert p's table has in host memory into a slot of st
// and writes the picks' entries of st.Table, in one launch whatever the
// routing; it returns p with st.Table for the picked kernels
// (MoEPickedGLU, MoEPickedDown) to run the picks on. Every block copies a
// share of a pick, so the link has many reads in flight, where the
// picked kernels reading host memory as they compute have few.
func (k *Kernels) MoEStage(c *cudadrv.Ctx, s cudadrv.Stream, p MoEPicked, st MoEStaging, ids cudadrv.DevPtr, topk int) (MoEPicked, error) {
	uo, do, size, err := MoEStageLayout(p)
	if err != nil {
		return MoEPicked{}, err
	}
	if p.Table == 0 || st.Table == 0 || st.Slots == 0 || p.Experts < 1 || topk < 1 || topk > p.Experts {
		return MoEPicked{}, fmt.Errorf("moe stage: table %#x into %#x, slots %#x, %d experts, top %d", uint64(p.Table), uint64(st.Table), uint64(st.Slots), p.Experts, topk)
	}
	if st.SlotBytes < size || st.Slots%stageAlign != 0 || st.SlotBytes%stageAlign != 0 {
		return MoEPicked{}, fmt.Errorf("moe stage: slots of %d bytes at %#x for experts of %d (%d-byte aligned)", st.SlotBytes, uint64(st.Slots), size, stageAlign)
	}
	// Enough blocks for the largest matrix's units at a round each, up to
	// a few waves of the device.
	units := max(p.Gate.Bytes(), p.Up.Bytes(), p.Down.Bytes()) / 16
	const per = 256 * 4 // a block's units a round (moe.cu's MOE_STAGE_U)
	bx := min((units+per-1)/per, int64(max(k.SMs, 1)*4))
	var a cudadrv.Args
	a.Ptr(p.Table).Ptr(ids).Int(p.Experts).U64(uint64(st.Lo)).U64(uint64(st.Hi)).Ptr(st.Table).Ptr(st.Slots).I64(st.SlotBytes).
		I64(p.Gate.Bytes()).I64(p.Up.Bytes()).I64(p.Down.Bytes()).I64(uo).I64(do)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(bx), Y: uint32(topk)}, Block: cudadrv.Dim3{X: 256}}
	if err := k.launch(c, s, "moe_stage", cfg, &a); err != nil {
		return MoEPicked{}, fmt.Errorf("moe stage: top %d: %w", topk, err)
	}
	q := p
	q.Table = st.Table
	return q, nil
}
