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
func q4kPanel(name string) { panelKernel(name, quant4) }

// q5kPanel emits the Q5_K panel kernel: q4kPanel's with each weight's
// fifth bit from the block's 32 bytes of high bits (bit 2j of byte l for
// element 64j+l, bit 2j+1 for element 64j+32+l), at most 31·63.
func q5kPanel(name string) { panelKernel(name, quant5) }

// q6kPanel emits the Q6_K panel kernel (AVX-512 VNNI), ref.go's contract
// bit for bit: each weight widens to (q6 − 32)·sc_g (at most 32·128 in
// magnitude) so that T = Σ_g sc_g·Σ_{i∈g} w_i·q_i, and P =
// float32(d·float32(T))·dx. It reads its scales and d from the blocks
// (meta and s are not used: Q6_K has no mins).
func q6kPanel(name string) { panelKernel(name, quant6) }

// panelFormat is a panel kernel's weight format.
type panelFormat int

const (
	quant4 panelFormat = iota
	quant5
	quant6
)

// panelKernel emits the panel kernel of format f.
func panelKernel(name string, f panelFormat) {
	TEXT(name, NOSPLIT, "func(w *byte, stride, nb, ng int, meta *byte, x *int32, s *int32, dx *float32, wide *int16, tot *float64)")
	format := map[panelFormat]string{quant4: "Q4_K", quant5: "Q5_K", quant6: "Q6_K"}[f]
	q6 := f == quant6
	bb, _ := kBlock(f == quant5)
	if q6 {
		bb = 210
	}
	Doc(name + " computes a panel of eight " + format + " rows against groups of 16 vectors with the tokens in lanes (ref.go's contract).")
	// The block in hand is b (a stack slot); every pointer of the block
	// and group loops derives from it and the arguments, so that few
	// registers stay live across the loops.
	bl := AllocLocal(8)
	MOVQ(U32(0), bl)
	// Q6_K: the rows' d as float32, and a row's sixteen scales as int16.
	dloc, scloc := AllocLocal(4*panelRows), AllocLocal(32)
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
		IMUL3Q(U32(uint32(bb)), b, rp)
		ADDQ(paramAddr("w"), rp)
		wd := Load(Param("wide"), GP64())
		stride := Load(Param("stride"), GP64())
		if q6 {
			q6kWidenRows(rp, stride, wd, mask, dloc, scloc)
		} else {
			IMUL3Q(U32(448), b, mp)
			ADDQ(paramAddr("meta"), mp)
			q4kWidenRows(rp, stride, wd, mp, mask, f == quant5)
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

		var sums []VecVirtual
		if !q6 {
			sums = make([]VecVirtual, 8)
			for i := range sums {
				sums[i] = ZMM()
				VMOVDQU32(Mem{Base: sg, Disp: 64 * i}, sums[i])
			}
		}
		dxz := ZMM()
		VMOVUPS(Mem{Base: dg}, dxz)
		for r := 0; r < panelRows; r++ {
			f := acc[r]
			VCVTDQ2PS(f, f)
			if q6 {
				VMULPS_BCST(dloc.Offset(4*r), f, f) // float32(d·float32(T))
			} else {
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
			}
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

// q4kWidenRows widens the panel's rows' Q4_K (or, with five, Q5_K) block
// at rp (rows stride apart) into wd, 512 bytes a row: sub-block 2j is the
// low nibbles of bytes 32j..32j+31 of the quants, 2j+1 their high ones
// (with five, bits 2j and 2j+1 of the high bits' bytes above them), each
// times its scale (meta's int16 at mp).
func q4kWidenRows(rp, stride, wd, mp Register, mask VecVirtual, five bool) {
	_, qsOff := kBlock(five)
	var sixteen VecVirtual
	if five {
		sixteen = ZMM()
		t := GP32()
		MOVL(U32(0x00100010), t)
		VPBROADCASTD(t, sixteen)
	}
	for r := 0; r < panelRows; r++ {
		var qh VecVirtual
		if five {
			qh = ZMM()
			VPMOVZXBW(Mem{Base: rp, Disp: 16}, qh)
		}
		for j := 0; j < 4; j++ {
			v, hi, slo, shi := ZMM(), ZMM(), ZMM(), ZMM()
			VPMOVZXBW(Mem{Base: rp, Disp: qsOff + 32*j}, v)
			VPSRLW(U8(4), v, hi)
			VPANDD(mask, v, v)
			if five {
				// Bit k of the high bits' byte to bit 4: 16 when set.
				for h, k := range []int{2 * j, 2*j + 1} {
					b := ZMM()
					switch {
					case k < 4:
						VPSLLW(U8(4-k), qh, b)
					case k > 4:
						VPSRLW(U8(k-4), qh, b)
					default:
						VMOVDQA64(qh, b)
					}
					VPANDD(sixteen, b, b)
					dst := v
					if h == 1 {
						dst = hi
					}
					VPORD(b, dst, dst)
				}
			}
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

// q6kWidenRows widens the panel's rows' Q6_K block at rp into wd: each
// half h of 128 elements is four runs of 32, the low or high nibbles of
// ql's bytes 64h..64h+31 or 64h+32..64h+63 with two bits of qh's bytes
// 32h..32h+31 above them, less 32, times the scale of each 16-element
// group (int8 at byte 192, widened through the stack slot scloc). Each
// row's d goes to dloc as float32.
func q6kWidenRows(rp, stride, wd Register, mask VecVirtual, dloc, scloc Mem) {
	three, thirtytwo := ZMM(), ZMM()
	t := GP32()
	MOVL(U32(0x00030003), t)
	VPBROADCASTD(t, three)
	MOVL(U32(0x00200020), t)
	VPBROADCASTD(t, thirtytwo)
	for r := 0; r < panelRows; r++ {
		sc := YMM()
		VPMOVSXBW(Mem{Base: rp, Disp: 192}, sc)
		VMOVDQU(sc, scloc)
		dh := XMM()
		VPBROADCASTW(Mem{Base: rp, Disp: 208}, dh)
		VCVTPH2PS(dh, dh)
		VMOVSS(dh, dloc.Offset(4*r))
		for h := 0; h < 2; h++ {
			ql0, ql1, qh := ZMM(), ZMM(), ZMM()
			VPMOVZXBW(Mem{Base: rp, Disp: 64 * h}, ql0)
			VPMOVZXBW(Mem{Base: rp, Disp: 64*h + 32}, ql1)
			VPMOVZXBW(Mem{Base: rp, Disp: 128 + 32*h}, qh)
			for q := 0; q < 4; q++ {
				lo, hb := ZMM(), ZMM()
				q6Quarter(q, ql0, ql1, qh, lo, hb, mask, three, VPSRLW, VPSLLW)
				VPSUBW(thirtytwo, lo, lo)
				// Groups 8h+2q and 8h+2q+1: their scales in the two halves.
				s0, s1 := ZMM(), YMM()
				g := 8*h + 2*q
				VPBROADCASTW(scloc.Offset(2*g), s0)
				VPBROADCASTW(scloc.Offset(2*g+2), s1)
				VINSERTI64X4(U8(1), s1, s0, s0)
				VPMULLW(s0, lo, lo)
				VMOVDQU32(lo, Mem{Base: wd, Disp: 512*r + 256*h + 64*q})
			}
		}
		if r < panelRows-1 {
			ADDQ(stride, rp)
		}
	}
}

// q6Quarter emits quarter k (0..3) of a Q6_K half-block's quants, in
// elements of the width the shifts shr and shl take (words or dwords),
// into q: the low nibbles of lo0 (k 0) or lo1 (k 1), or their high ones
// (k 2, 3), with bits 2k and 2k+1 of hi above them. mask holds 15 and
// three 3 in every element; t is scratch.
func q6Quarter(k int, lo0, lo1, hi, q, t, mask, three Op, shr, shl func(...Op)) {
	src := lo0
	if k%2 == 1 {
		src = lo1
	}
	if k < 2 {
		VPANDD(mask, src, q)
	} else {
		shr(U8(4), src, q)
	}
	if k == 0 {
		VPANDD(three, hi, t)
	} else {
		shr(U8(2*k), hi, t)
		if k < 3 {
			VPANDD(three, t, t)
		}
	}
	shl(U8(4), t, t)
	VPORD(t, q, q)
}
