package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q4kAVX512 emits the Q4_K (or, with five, Q5_K) kernel for AVX-512 F/BW/VL:
// q4kAVX2's arithmetic on 32 int16 lanes at a time. A block's 128 bytes of
// nibbles widen 32 at a time into one zmm whose low nibbles are one
// sub-block and whose high nibbles are the next, so each zmm of weights
// has a single scale (broadcast from a stack slot that holds it twice, a
// plain load). With vnni the multiply-add and the accumulation are one
// VPDPWSSD; without, VPMADDWD and VPADDD. Both wrap int32 exactly as the
// reference's sums do. The float tail is ref.go's, one scalar at a time.
func q4kAVX512(name string, five, vnni bool) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	fam := "AVX-512"
	if vnni {
		fam = "AVX-512 with VNNI"
	}
	Doc(name + " is the " + map[bool]string{false: "Q4_K", true: "Q5_K"}[five] + " kernel for " + fam + " (ref.go's contract).")
	blockBytes, qsOff := 144, 16
	if five {
		blockBytes, qsOff = 176, 48
	}
	wp := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	y := Load(Param("y"), GP64())
	SHRQ(U8(8), n) // blocks a row

	// The block's eight scales, each as two int16 in a dword, so that
	// VPBROADCASTD (a load, no shuffle) fills a zmm with one of them.
	scd := AllocLocal(32)

	tmp := GP32()
	mask := ZMM() // 0x000f in every word
	MOVL(U32(0x000f000f), tmp)
	VPBROADCASTD(tmp, mask)
	var bit4 VecVirtual // 0x0010 in every word
	if five {
		bit4 = ZMM()
		MOVL(U32(0x00100010), tmp)
		VPBROADCASTD(tmp, bit4)
	}

	Label(name + "_row")
	CMPQ(rows, Imm(0))
	JE(LabelRef(name + "_done"))
	qp := Load(Param("q"), GP64())
	dp := Load(Param("d"), GP64())
	sp := Load(Param("s"), GP64())
	nb := GP64()
	MOVQ(n, nb)
	total := XMM()
	VPXORQ(total, total, total)

	Label(name + "_block")
	sc03, sc47, m03, m47 := kScalesGP(wp)
	scx := XMM()
	VMOVQ(pack64(sc03, sc47), scx)
	scy, sct := YMM(), YMM()
	VPMOVZXBD(scx, scy)
	VPSLLD(U8(16), scy, sct)
	VPORD(sct, scy, scy)
	VMOVDQU32(scy, scd)
	mx := XMM()
	VMOVQ(pack64(m03, m47), mx)
	mins := YMM()
	VPMOVZXBD(mx, mins)
	VPMULLD(Mem{Base: sp}, mins, mins) // m_s · S_s, exact

	// Two accumulators halve the chain of dependent multiply-adds.
	acc := [2]VecVirtual{ZMM(), ZMM()}
	if vnni {
		VPXORD(acc[0], acc[0], acc[0])
		VPXORD(acc[1], acc[1], acc[1])
	}
	var qh VecVirtual
	if five {
		qh = ZMM()
		VPMOVZXBW(Mem{Base: wp, Disp: 16}, qh)
	}
	for j := 0; j < 4; j++ {
		v, lo, hi := ZMM(), ZMM(), ZMM()
		VPMOVZXBW(Mem{Base: wp, Disp: qsOff + 32*j}, v)
		VPANDD(mask, v, lo)
		VPSRLW(U8(4), v, hi)
		if five {
			// Byte l of qh holds element l's fifth bit in bit 2j (low
			// nibbles) and 2j+1 (high nibbles): move it to bit 4 and
			// merge it with VPTERNLOGD (lo | hb&bit4).
			for k, dst := range []VecVirtual{lo, hi} {
				b := 2*j + k
				hb := qh
				if b != 4 {
					hb = ZMM()
					if b < 4 {
						VPSLLW(U8(4-b), qh, hb)
					} else {
						VPSRLW(U8(b-4), qh, hb)
					}
				}
				VPTERNLOGD(U8(0xf8), bit4, hb, dst)
			}
		}
		for k, part := range []VecVirtual{lo, hi} {
			s := ZMM()
			VPBROADCASTD(scd.Offset(8*j+4*k), s)
			VPMULLW(s, part, part)
			qm := Mem{Base: qp, Disp: 2 * (64*j + 32*k)}
			if vnni {
				VPDPWSSD(qm, part, acc[k])
			} else if j == 0 {
				VPMADDWD(qm, part, acc[k])
			} else {
				VPMADDWD(qm, part, part)
				VPADDD(part, acc[k], acc[k])
			}
		}
	}
	VPADDD(acc[1], acc[0], acc[0])
	tm := reduceTM(acc[0], mins)
	VCVTDQ2PS(tm, tm)
	dd := XMM()
	VMOVD(Mem{Base: wp}, dd)
	VCVTPH2PS(dd, dd) // [d dmin 0 0]
	VMULPS(dd, tm, tm)
	mm := XMM()
	VMOVSHDUP(tm, mm)
	VSUBSS(mm, tm, tm)
	VMULSS(Mem{Base: dp}, tm, tm)
	VCVTSS2SD(tm, tm, tm)
	VADDSD(tm, total, total)

	ADDQ(U32(blockBytes), wp)
	ADDQ(U32(2*256), qp)
	ADDQ(U8(4), dp)
	ADDQ(U8(32), sp)
	DECQ(nb)
	JNE(LabelRef(name + "_block"))

	VCVTSD2SS(total, total, total)
	VMOVSS(total, Mem{Base: y})
	ADDQ(U8(4), y)
	DECQ(rows)
	JMP(LabelRef(name + "_row"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// kScalesGP unpacks the Q4_K/Q5_K block at wp's eight 6-bit scales and
// mins (ref.go's kScales) into four dwords of four bytes each, with 32-bit
// scalar arithmetic: scales 0-3, scales 4-7, mins 0-3, mins 4-7.
func kScalesGP(wp Register) (sc03, sc47, m03, m47 GPVirtual) {
	a, b, c, t1, t2 := GP32(), GP32(), GP32(), GP32(), GP32()
	MOVL(Mem{Base: wp, Disp: 4}, a)
	MOVL(Mem{Base: wp, Disp: 8}, b)
	MOVL(Mem{Base: wp, Disp: 12}, c)
	MOVL(a, t1)
	SHRL(U8(2), t1)
	ANDL(U32(0x30303030), t1)
	ANDL(U32(0x3f3f3f3f), a) // sc 0-3
	MOVL(c, t2)
	ANDL(U32(0x0f0f0f0f), t2)
	ORL(t1, t2) // sc 4-7
	MOVL(b, t1)
	SHRL(U8(2), t1)
	ANDL(U32(0x30303030), t1)
	ANDL(U32(0x3f3f3f3f), b) // m 0-3
	SHRL(U8(4), c)
	ANDL(U32(0x0f0f0f0f), c)
	ORL(t1, c) // m 4-7
	return a, t2, b, c
}

// pack64 joins two dwords (the low one first) in lo's 64-bit register: a
// VMOVQ then moves both, where VPINSRD would need AVX-512 DQ for the high
// registers.
func pack64(lo, hi GPVirtual) Register {
	SHLQ(U8(32), hi.As64())
	ORQ(hi.As64(), lo.As64())
	return lo.As64()
}

// reduceTM sums the sixteen int32 lanes of t (a zmm) and the eight of m (a
// ymm) into an xmm [T M T M], with EVEX-encodable instructions only (the
// allocator may hand out registers 16-31, which VEX cannot name).
func reduceTM(t, m VecVirtual) VecVirtual {
	h := YMM()
	VEXTRACTI64X4(U8(1), t, h)
	VPADDD(h, t.AsY(), h) // T in eight lanes
	u, v := YMM(), YMM()
	VPUNPCKLDQ(m, h, u) // [t0 m0 t1 m1 | t4 m4 t5 m5]
	VPUNPCKHDQ(m, h, v) // [t2 m2 t3 m3 | t6 m6 t7 m7]
	VPADDD(v, u, u)
	VPSHUFD(U8(0x4e), u, v)
	VPADDD(v, u, u) // [ta ma ta ma | tb mb tb mb]
	x := XMM()
	VEXTRACTI32X4(U8(1), u, x)
	VPADDD(x, u.AsX(), x) // [T M T M]
	return x
}
