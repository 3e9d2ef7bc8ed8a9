package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Panel kernels: a batch of vectors with the tokens in lanes. For a panel
// of panelRows weight rows and groups of 16 vectors, the vectors' quants
// are laid out once a batch as int16 pairs (element 2p and 2p+1 of every
// vector of a group in one zmm, gemv's Packed), and each row's block is
// widened once for every group into int16 pairs of its weights times its
// sub-block's scale (w·sc, at most 15·63), so that one VPDPWSSD with the
// row's pair broadcast adds two products into each of the group's 16
// vectors' sums: a block is 128 such instructions a row and group, and
// its finishing (the mins' sum, the float steps of ref.go's contract)
// runs for 16 vectors at once. The four-vector kernels instead reduce
// and finish every block of every vector alone, as many instructions
// again as their multiply-adds.

// panelRows is the rows a panel kernel call computes: one accumulator
// each, eight independent VPDPWSSD chains.
const panelRows = 8

// q4kPanel emits the Q4_K panel kernel (AVX-512 VNNI), ref.go's contract
// bit for bit: T = Σ_i (w_i·sc_s)·q_i is the contract's Σ_s sc_s·Σ w·q
// (integers, the same exact int32), M = Σ_s m_s·S_s with VPMULLD, and
// P = float32(float32(d·float32(T)) − float32(dmin·float32(M)))·dx by
// separate multiplies and a subtraction, added in float64 to each row's
// and vector's total in block order. Its arguments: w the panel's first
// row (rows stride bytes apart), nb blocks a row, ng groups of 16
// vectors; meta per block 448 bytes: the eight rows' eight scales
// (int16), eight mins (int32), d and dmin (float32); x the pairs, per
// group and block 128 zmm of (q_2p, q_2p+1) dwords; s the sums, per group
// and block eight zmm of int32; dx per group and block a zmm of scales;
// wide 4 KiB of scratch for the widened block; tot per group the rows'
// 16 float64 totals, added to.
func q4kPanel(name string) {
	TEXT(name, NOSPLIT, "func(w *byte, stride, nb, ng int, meta *byte, x *int32, s *int32, dx *float32, wide *int16, tot *float64)")
	Doc(name + " computes a panel of eight Q4_K rows against groups of 16 vectors with the tokens in lanes (ref.go's contract).")
	// The block in hand is b (a stack slot); every pointer of the block
	// and group loops derives from it and the arguments, so that few
	// registers stay live across the loops.
	bl := AllocLocal(8)
	MOVQ(U32(0), bl)
	mask := ZMM()
	t32 := GP32()
	MOVL(U32(0x000f000f), t32)
	VPBROADCASTD(t32, mask)

	Label(name + "_block")
	mp := GP64()
	{
		b := GP64()
		MOVQ(bl, b)
		rp := GP64()
		IMUL3Q(U32(144), b, rp)
		ADDQ(paramAddr("w"), rp)
		IMUL3Q(U32(448), b, mp)
		ADDQ(paramAddr("meta"), mp)
		wd := Load(Param("wide"), GP64())
		stride := Load(Param("stride"), GP64())
		// Widen the panel's rows' block: sub-block 2j is the low nibbles
		// of bytes 32j..32j+31, 2j+1 their high ones, each times its scale.
		for r := 0; r < panelRows; r++ {
			for j := 0; j < 4; j++ {
				v, hi, slo, shi := ZMM(), ZMM(), ZMM(), ZMM()
				VPMOVZXBW(Mem{Base: rp, Disp: 16 + 32*j}, v)
				VPSRLW(U8(4), v, hi)
				VPANDD(mask, v, v)
				VPBROADCASTW(Mem{Base: mp, Disp: 16*r + 2*(2*j)}, slo)
				VPBROADCASTW(Mem{Base: mp, Disp: 16*r + 2*(2*j+1)}, shi)
				VPMULLW(slo, v, v)
				VPMULLW(shi, hi, hi)
				VMOVDQU32(v, Mem{Base: wd, Disp: 512*r + 64*(2*j)})
				VMOVDQU32(hi, Mem{Base: wd, Disp: 512*r + 64*(2*j+1)})
			}
			if r < panelRows-1 {
				ADDQ(stride, rp)
			}
		}
	}

	// Each group: its pairs against the widened rows, then finishing.
	xg, sg, dg := GP64(), GP64(), GP64()
	{
		b := GP64()
		MOVQ(bl, b)
		MOVQ(b, xg)
		SHLQ(U8(13), xg)
		ADDQ(paramAddr("x"), xg)
		MOVQ(b, sg)
		SHLQ(U8(9), sg)
		ADDQ(paramAddr("s"), sg)
		MOVQ(b, dg)
		SHLQ(U8(6), dg)
		ADDQ(paramAddr("dx"), dg)
	}
	tg := Load(Param("tot"), GP64())
	g := Load(Param("ng"), GP64())
	Label(name + "_group")
	{
		acc := make([]VecVirtual, panelRows)
		for r := range acc {
			acc[r] = ZMM()
			VPXORD(acc[r], acc[r], acc[r])
		}
		wq := Load(Param("wide"), GP64())
		n := GP64()
		MOVQ(U32(128/8), n)
		Label(name + "_pairs")
		for p := 0; p < 8; p++ {
			zx := ZMM()
			VMOVDQU32(Mem{Base: xg, Disp: 64 * p}, zx)
			for r := 0; r < panelRows; r++ {
				VPDPWSSD_BCST(Mem{Base: wq, Disp: 512*r + 4*p}, zx, acc[r])
			}
		}
		ADDQ(U32(512), xg)
		ADDQ(U8(32), wq)
		DECQ(n)
		JNZ(LabelRef(name + "_pairs"))

		sums := make([]VecVirtual, 8)
		for i := range sums {
			sums[i] = ZMM()
			VMOVDQU32(Mem{Base: sg, Disp: 64 * i}, sums[i])
		}
		dxz := ZMM()
		VMOVUPS(Mem{Base: dg}, dxz)
		for r := 0; r < panelRows; r++ {
			f := acc[r]
			VCVTDQ2PS(f, f)
			VMULPS_BCST(Mem{Base: mp, Disp: 384 + 4*r}, f, f) // float32(d·float32(T))
			mm, t := ZMM(), ZMM()
			VPMULLD_BCST(Mem{Base: mp, Disp: 128 + 32*r}, sums[0], mm)
			for i := 1; i < 8; i++ {
				VPMULLD_BCST(Mem{Base: mp, Disp: 128 + 32*r + 4*i}, sums[i], t)
				VPADDD(t, mm, mm)
			}
			VCVTDQ2PS(mm, mm)
			VMULPS_BCST(Mem{Base: mp, Disp: 416 + 4*r}, mm, mm) // float32(dmin·float32(M))
			VSUBPS(mm, f, f)
			VMULPS(dxz, f, f)
			lo, hi := ZMM(), ZMM()
			VCVTPS2PD(f.AsY(), lo)
			y := YMM()
			VEXTRACTF32X8(U8(1), f, y)
			VCVTPS2PD(y, hi)
			VADDPD(Mem{Base: tg, Disp: 128 * r}, lo, lo)
			VADDPD(Mem{Base: tg, Disp: 128*r + 64}, hi, hi)
			VMOVUPD(lo, Mem{Base: tg, Disp: 128 * r})
			VMOVUPD(hi, Mem{Base: tg, Disp: 128*r + 64})
		}
	}
	// The next group's block b: xg has moved 8 KiB through this one.
	{
		nb := Load(Param("nb"), GP64())
		t := GP64()
		MOVQ(nb, t)
		SHLQ(U8(13), t)
		SUBQ(U32(8192), t)
		ADDQ(t, xg)
		MOVQ(nb, t)
		SHLQ(U8(9), t)
		ADDQ(t, sg)
		SHLQ(U8(6), nb)
		ADDQ(nb, dg)
	}
	ADDQ(U32(128*panelRows), tg)
	DECQ(g)
	JNZ(LabelRef(name + "_group"))

	{
		b := GP64()
		MOVQ(bl, b)
		INCQ(b)
		MOVQ(b, bl)
		CMPQ(b, paramAddr("nb"))
		JB(LabelRef(name + "_block"))
	}
	VZEROUPPER()
	RET()
}
