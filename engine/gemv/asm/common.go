package main

import (
	"github.com/mmcloughlin/avo/gotypes"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// splat16 returns a YMM register with v in every int16 lane.
func splat16(v uint16) VecVirtual {
	r, t := YMM(), GP32()
	MOVL(U32(uint32(v)<<16|uint32(v)), t)
	VMOVD(t, r.AsX())
	VPBROADCASTD(r.AsX(), r)
	return r
}

// splat8 returns a YMM register with v in every byte.
func splat8(v uint8) VecVirtual {
	return splat16(uint16(v)<<8 | uint16(v))
}

// hsumPD leaves the sum of y's four float64 lanes in the low lane of
// the returned XMM register (pairs first, then the two halves' sums).
func hsumPD(y VecVirtual) VecVirtual {
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	VADDPD(x, y.AsX(), x)
	h := XMM()
	VPERMILPD(U8(1), x, h)
	VADDSD(h, x, x)
	return x
}

// hsumD leaves the sum of v's eight int32 lanes in the low lane of the
// returned XMM register (wrapping, as the exact sums never do).
func hsumD(v VecVirtual) VecVirtual {
	hi := XMM()
	VEXTRACTI128(U8(1), v, hi)
	VPADDD(hi, v.AsX(), hi)
	t := XMM()
	VPSHUFD(U8(0x4e), hi, t)
	VPADDD(t, hi, hi)
	VPSHUFD(U8(0xb1), hi, t)
	VPADDD(t, hi, hi)
	return hi
}

// sum4 folds four float32 accumulators into the first, pairwise (0+1,
// 2+3, then the two), the order every float kernel sums them in.
func sum4(acc [4]VecVirtual) VecVirtual {
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	return acc[0]
}

// q32Format is the name and block bytes of q32AVX2's and q32AVX512x's
// format: Q8_0's, or with four Q4_0's.
func q32Format(four bool) (string, int) {
	if four {
		return "Q4_0", 18
	}
	return "Q8_0", 34
}

// addBlock adds float32 p's float64 value to total (ref.go's
// total += float64(P_b)).
func addBlock(p, total VecVirtual) {
	VCVTSS2SD(p, p, p)
	VADDSD(p, total, total)
}

// addBlocks8 adds the eight float32 lanes of p, as float64, to total one
// at a time in lane order: eight addBlock calls' sums, bit for bit.
func addBlocks8(p, total VecVirtual) {
	for half := 0; half < 2; half++ {
		x := p.AsX()
		if half == 1 {
			x = XMM()
			VEXTRACTF128(U8(1), p, x)
		}
		pd := YMM()
		VCVTPS2PD(x, pd)
		addPD4(pd, total)
	}
}

// addPD4 adds the four float64 lanes of pd to total one at a time in
// lane order.
func addPD4(pd, total VecVirtual) {
	lo, t := XMM(), XMM()
	VMOVAPD(pd.AsX(), lo)
	VADDSD(lo, total, total)
	VUNPCKHPD(lo, lo, t)
	VADDSD(t, total, total)
	VEXTRACTF128(U8(1), pd, lo)
	VADDSD(lo, total, total)
	VUNPCKHPD(lo, lo, t)
	VADDSD(t, total, total)
}

// rowStart opens the row loop (label name_row) and leaves it for the
// kernel's exit (rowEnd's name_done) when no rows are left. It keeps the
// row's first byte (wp, which the kernel walks through the row) for
// rowEnd, which moves wp on by the stride: rows need not be contiguous
// (a view of some columns of a wider matrix). It returns the slot.
func rowStart(name string, rows, wp Register) Mem {
	start := AllocLocal(8)
	Label(name + "_row")
	CMPQ(rows, Imm(0))
	JE(LabelRef(name + "_done"))
	MOVQ(wp, start)
	return start
}

// rowEnd ends a row and the kernel: the row's float64 total is stored at
// y as float32 (times scale, when given, in float32), y moves on, wp goes
// to the next row's first byte (the row's start, from rowStart's slot,
// plus the stride), and the loop goes to the next row (label name_row);
// then the kernel's exit (label name_done).
func rowEnd(name string, total VecVirtual, scale Op, y, rows, wp Register, start Mem) {
	VCVTSD2SS(total, total, total)
	if scale != nil {
		VMULSS(scale, total, total)
	}
	VMOVSS(total, Mem{Base: y})
	ADDQ(U8(4), y)
	nextRow(name, rows, wp, start)
}

// nextRow is rowEnd past the row's store: wp to the next row, the loop,
// and the kernel's exit.
func nextRow(name string, rows, wp Register, start Mem) {
	MOVQ(start, wp)
	stride, err := Param("stride").Resolve()
	if err != nil {
		panic(err)
	}
	ADDQ(stride.Addr, wp)
	DECQ(rows)
	JMP(LabelRef(name + "_row"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// subEightS takes Q4_0's −8 off one block's sum in lane 0 of i: 8·S_k,
// S_k the vector's 32-element sum at sp.
func subEightS(sp Register, i VecVirtual) {
	sk := GP32()
	MOVL(Mem{Base: sp}, sk)
	SHLL(U8(3), sk)
	sx := XMM()
	VMOVD(sk, sx)
	VPSUBD(sx, i, i)
}

// prefetchAhead is how far ahead of the block in hand a kernel asks for
// the weights (0: not at all). A row streams in order, and a core's own
// prefetchers may keep too few lines in flight to reach its share of the
// memory's rate once every core reads; main's -prefetch flag sets it.
// AVX2's INT8Row and float kernels do without: their rows are plain runs
// of bytes the core's prefetchers follow, and asking for them too lost
// ~10% on the build machine.
var prefetchAhead = 4096

// prefetch asks for the cache lines of the n bytes prefetchAhead past
// base (a prefetch past the buffer's end is harmless: it never faults).
func prefetch(base Register, n int) { prefetchAt(base, 0, n) }

// prefetchAt is prefetch for the n bytes at base+off: one block of
// several a loop step walks.
func prefetchAt(base Register, off, n int) {
	if prefetchAhead == 0 {
		return
	}
	for o := 0; o < n; o += 64 {
		PREFETCHT0(Mem{Base: base, Disp: prefetchAhead + off + o})
	}
}

// rowTotals is a multi-vector kernel's row totals, one float64 a vector
// in a stack slot: in registers they would leave too few for the
// accumulators.
type rowTotals struct {
	m Mem
	n int
}

func newRowTotals(n int) rowTotals { return rowTotals{m: AllocLocal(8 * n), n: n} }

// zero emits the totals' reset at a row's start. VXORPS has a VEX form,
// so the AVX2 kernels that share this stay AVX2 (VPXORQ is AVX-512 only).
func (r rowTotals) zero() {
	z := XMM()
	VXORPS(z, z, z)
	for t := 0; t < r.n; t++ {
		VMOVSD(z, r.m.Offset(8*t))
	}
}

// add adds lane 0 of p (a float64; p is overwritten) to vector t's total.
func (r rowTotals) add(t int, p VecVirtual) {
	VADDSD(r.m.Offset(8*t), p, p)
	VMOVSD(p, r.m.Offset(8*t))
}

// rowEnd is rowEnd for the multi-vector kernels: each vector's total as
// float32 at y (in vector order), y on by the row's results.
func (r rowTotals) rowEnd(name string, y, rows, wp Register, start Mem) {
	for t := 0; t < r.n; t++ {
		f := XMM()
		VMOVSD(r.m.Offset(8*t), f)
		VCVTSD2SS(f, f, f)
		VMOVSS(f, Mem{Base: y, Disp: 4 * t})
	}
	ADDQ(U8(4*r.n), y)
	nextRow(name, rows, wp, start)
}

// vectorOffsets is n vectors' offsets, step bytes apart from base.
func vectorOffsets(n, step, base int) []int {
	o := make([]int, n)
	for t := range o {
		o[t] = base + t*step
	}
	return o
}

// packedStep moves the packed vectors' pointers past k blocks (gemv's pack
// layout): Tokens vectors' quants (qp), scales (dp) and, where sp is not
// nil, sums.
func packedStep(k int, qp, dp, sp Register) {
	ADDQ(U32(Tokens*k*2*256), qp)
	ADDQ(U8(Tokens*k*4), dp)
	if sp != nil {
		ADDQ(U32(Tokens*k*32), sp)
	}
}

// madd adds the products of qm's int16 pairs with w's (VPMADDWD's int32
// lanes) into the accumulator acc. first says acc holds nothing yet, so
// the products become it, unless zeroed (acc was set to zero ahead, for
// VNNI); VNNI's VPDPWSSD adds them in one instruction; otherwise the
// products land in w where last says w is not needed after this (one
// vector), else in a new register, and are added.
func madd(vnni, first, zeroed, last bool, qm Mem, w, acc VecVirtual) {
	switch {
	case vnni && (zeroed || !first):
		VPDPWSSD(qm, w, acc)
	case first:
		VPMADDWD(qm, w, acc)
	case last:
		VPMADDWD(qm, w, w)
		VPADDD(w, acc, acc)
	default: // w is still needed
		t := ZMM()
		VPMADDWD(qm, w, t)
		VPADDD(t, acc, acc)
	}
}

// kBlock is a Q4_K block's bytes and its quants' offset in it, or with
// five a Q5_K block's, whose 32 bytes of fifth bits come before them.
func kBlock(five bool) (bytes, qsOff int) {
	if five {
		return 176, 48
	}
	return 144, 16
}

// retAddr is the address of the function's i-th result and paramAddr
// that of the named parameter, for VEX loads and stores: avo's Load and
// Store of a float emit MOVSS and MOVSD, legacy SSE forms that on an
// AVX-512 core wait on the vector registers' dirty upper halves.
func retAddr(i int) Mem { return addr(ReturnIndex(i)) }

func paramAddr(name string) Mem { return addr(Param(name)) }

// addr is the stack address of an argument or result.
func addr(c gotypes.Component) Mem {
	b, err := c.Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}
