package gemv

import (
	"encoding/binary"
	"math"

	"github.com/strata-llm/strata/engine/quant"
)

// The reference kernels: the contract every SIMD kernel meets bit for bit
// (the float formats excepted). For each 256-element block b of the
// vector (scale dx = X.D[b], quants q, 32-element sums X.S), a row's block
// contributes one float32 value P_b, and the row's result is
// float32(Σ_b float64(P_b)), summed in block order. Products are wrapped
// in float32 conversions, so the compiler never fuses them into FMAs.
//
//   - Q4_K, Q5_K: with the block's d, dmin, 6-bit scales sc_s and mins m_s
//     and quants w (0..15, 0..31), T = Σ_s sc_s·Σ_{i∈s} w_i·q_i and
//     M = Σ_s m_s·S_s, both exact int32;
//     P = float32(float32(d·float32(T)) − float32(dmin·float32(M)))·dx.
//   - Q6_K: w = q6 − 32, T = Σ_g sc_g·Σ_{i∈g} w_i·q_i over the 16-element
//     groups (exact int32); P = float32(d·float32(T))·dx.
//   - Q8_0, Q4_0 (32-element blocks with scale dw; Q4_0's w = nibble − 8):
//     I_k = Σ w_i·q_i exact; A = Σ_k float32(dw_k·float32(I_k)), added in
//     block order in float32 over the (up to) eight blocks inside b;
//     P = A·dx.
//   - INT8Row: I = Σ w_i·q_i exact; P = float32(I)·dx; the row's result is
//     float32(Σ float64(P_b))·scale.
//
// F16, BF16 and F32 rows are dotted with X.F in float64; their kernels are
// held to within floatTol of it (relative to Σ|w·x|).

// refRow dots one encoded row of n elements with x following the contract.
func refRow(t quant.Type, row []byte, n int, x *X) float32 {
	switch t {
	case quant.Q4_K:
		return refQ4K(row, n, x, false)
	case quant.Q5_K:
		return refQ4K(row, n, x, true)
	case quant.Q6_K:
		return refQ6K(row, n, x)
	case quant.Q8_0, quant.Q4_0:
		return refQ32(t, row, n, x)
	case quant.INT8Row:
		return refI8(row, n, x)
	case quant.F16, quant.BF16, quant.F32:
		return refFloat(t, row, n, x)
	}
	return float32(math.NaN())
}

func half(b []byte) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b)) }

// kScales unpacks a Q4_K/Q5_K block's eight 6-bit scales and mins from
// their 12 packed bytes (the K-quant layout: low six bits of bytes 0-3
// and 4-7 for sub-blocks 0-3, nibbles of bytes 8-11 plus the top two bits
// of bytes 0-7 for sub-blocks 4-7).
func kScales(s []byte) (sc, m [8]int32) {
	for j := 0; j < 4; j++ {
		sc[j] = int32(s[j] & 63)
		m[j] = int32(s[j+4] & 63)
		sc[j+4] = int32(s[j+8]&15 | (s[j]>>6)<<4)
		m[j+4] = int32(s[j+8]>>4 | (s[j+4]>>6)<<4)
	}
	return sc, m
}

const (
	q4kBytes = 144
	q5kBytes = 176
	q6kBytes = 210
	q8Bytes  = 34
	q4Bytes  = 18
)

func refQ4K(row []byte, n int, x *X, five bool) float32 {
	bb := q4kBytes
	if five {
		bb = q5kBytes
	}
	var total float64
	for b := 0; b < n/Block; b++ {
		blk := row[b*bb : (b+1)*bb]
		sc, m := kScales(blk[4:16])
		q := x.Q[b*Block : (b+1)*Block]
		qs := blk[16:]
		var qh []byte
		if five {
			qh, qs = blk[16:48], blk[48:]
		}
		var t, mm int32
		for j := 0; j < 4; j++ {
			var lo, hi int32
			for l := 0; l < 32; l++ {
				v := qs[32*j+l]
				wl, wh := int32(v&15), int32(v>>4)
				if five {
					wl |= int32(qh[l]>>(2*j)&1) << 4
					wh |= int32(qh[l]>>(2*j+1)&1) << 4
				}
				lo += wl * int32(q[64*j+l])
				hi += wh * int32(q[64*j+32+l])
			}
			t += sc[2*j]*lo + sc[2*j+1]*hi
		}
		for s := 0; s < 8; s++ {
			mm += m[s] * x.S[b*Block/Sub+s]
		}
		d, dmin := half(blk[0:]), half(blk[2:])
		p := float32(float32(d*float32(t))-float32(dmin*float32(mm))) * x.D[b]
		total += float64(p)
	}
	return float32(total)
}

// q6 returns element i (0..255) of a Q6_K block's quants, 0..63.
func q6(blk []byte, i int) int32 {
	h, r := i/128, i%128
	ql := blk[64*h:]
	qh := blk[128+32*h:]
	l := r % 32
	switch r / 32 {
	case 0:
		return int32(ql[l]&15 | (qh[l]&3)<<4)
	case 1:
		return int32(ql[l+32]&15 | (qh[l]>>2&3)<<4)
	case 2:
		return int32(ql[l]>>4 | (qh[l]>>4&3)<<4)
	default:
		return int32(ql[l+32]>>4 | (qh[l]>>6)<<4)
	}
}

func refQ6K(row []byte, n int, x *X) float32 {
	var total float64
	for b := 0; b < n/Block; b++ {
		blk := row[b*q6kBytes : (b+1)*q6kBytes]
		q := x.Q[b*Block : (b+1)*Block]
		var t int32
		for g := 0; g < 16; g++ {
			var s int32
			for i := 16 * g; i < 16*g+16; i++ {
				s += (q6(blk, i) - 32) * int32(q[i])
			}
			t += int32(int8(blk[192+g])) * s
		}
		p := float32(half(blk[208:])*float32(t)) * x.D[b]
		total += float64(p)
	}
	return float32(total)
}

func refQ32(t quant.Type, row []byte, n int, x *X) float32 {
	bb := q8Bytes
	if t == quant.Q4_0 {
		bb = q4Bytes
	}
	var total float64
	for b0 := 0; b0 < n; b0 += Block {
		var a float32
		for k := b0 / 32; k < min(b0+Block, n)/32; k++ {
			blk := row[k*bb : (k+1)*bb]
			q := x.Q[32*k : 32*k+32]
			var i int32
			if t == quant.Q8_0 {
				for l := 0; l < 32; l++ {
					i += int32(int8(blk[2+l])) * int32(q[l])
				}
			} else {
				for l := 0; l < 16; l++ {
					i += int32(blk[2+l]&15)*int32(q[l]) + int32(blk[2+l]>>4)*int32(q[l+16])
				}
				i -= 8 * x.S[k]
			}
			a += float32(half(blk) * float32(i))
		}
		total += float64(a * x.D[b0/Block])
	}
	return float32(total)
}

func refI8(row []byte, n int, x *X) float32 {
	scale := math.Float32frombits(binary.LittleEndian.Uint32(row))
	w := row[4:]
	var total float64
	for b0 := 0; b0 < n; b0 += Block {
		var i int32
		for k := b0; k < min(b0+Block, n); k++ {
			i += int32(int8(w[k])) * int32(x.Q[k])
		}
		total += float64(float32(i) * x.D[b0/Block])
	}
	return float32(total) * scale
}

func refFloat(t quant.Type, row []byte, n int, x *X) float32 {
	var s float64
	for i := 0; i < n; i++ {
		var w float32
		switch t {
		case quant.F32:
			w = math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
		case quant.F16:
			w = half(row[2*i:])
		default:
			w = quant.BF16ToF32(binary.LittleEndian.Uint16(row[2*i:]))
		}
		s += float64(w) * float64(x.F[i])
	}
	return float32(s)
}
