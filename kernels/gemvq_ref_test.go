package kernels

import (
	"encoding/binary"
	"math"

	"github.com/strata-llm/strata/engine/quant"
)

// CPU emulation of gemvq.cu, operation for operation: what the GPU tests
// compare against, and what TestGEMVQFidelity measures the integer path's
// error with (no GPU needed).

const gemvqMax = 32767

// gemvqQuantizeRef is gemvq_x for one vector, bit for bit: per 64-block
// sx = max|x|/32767 and x_int = rint(x * (32767/max)), clamped, split into
// the high byte (x_int >> 8) and the low byte, plus the header (sx and the
// four 16-element sums of x_int in the order 0, 2, 1, 3).
func gemvqQuantizeRef(x []float32) []byte {
	cols := len(x)
	out := make([]byte, gemvqBytes(cols))
	for blk := 0; blk < cols/64; blk++ {
		v := x[64*blk : 64*blk+64]
		var mx float32
		nan := false
		for _, e := range v {
			if a := float32(math.Abs(float64(e))); a > mx {
				mx = a
			}
			if e != e {
				nan = true
			}
		}
		var q [64]int32
		var sx float32
		if mx > 0 {
			inv := float32(gemvqMax) / mx
			for i, e := range v {
				p := float64(e * inv)
				switch {
				case p != p:
					q[i] = 0
				case p > gemvqMax:
					q[i] = gemvqMax
				case p < -gemvqMax:
					q[i] = -gemvqMax
				default:
					q[i] = int32(math.RoundToEven(p))
				}
			}
			sx = mx / gemvqMax
		}
		if nan {
			sx = math.Float32frombits(0x7fc00000)
		}
		var sums [4]int32
		for i, qi := range q {
			out[64*blk+i] = byte(qi >> 8)
			out[cols+64*blk+i] = byte(qi)
			sums[i/16] += qi
		}
		h := out[2*cols+32*blk:]
		binary.LittleEndian.PutUint32(h, math.Float32bits(sx))
		for g, s := range sums {
			slot := (g&1)<<1 | g>>1
			binary.LittleEndian.PutUint32(h[16+4*slot:], uint32(s))
		}
		// L6: the same bytes, sums and scale arranged for the Q6_K units.
		nu, t := cols/64, blk&1
		l6 := out[gemvqL6(cols):]
		for p := 0; p < 64; p++ {
			qq, u := 2*t+(p>>5), blk-t+((p>>4)&1)
			l6[16*(qq*nu+u)+(p&15)] = byte(q[p] >> 8)
			l6[16*((4+qq)*nu+u)+(p&15)] = byte(q[p])
		}
		for g, s := range sums {
			binary.LittleEndian.PutUint32(l6[128*nu+4*(4*(blk-t+(g&1))+2*t+(g>>1)):], uint32(s))
		}
		for hh := 0; hh < 2; hh++ {
			binary.LittleEndian.PutUint32(l6[144*nu+4*(2*(blk-t+hh)+t):], math.Float32bits(sx))
		}
		// LP: the same arranged for the Q4_K pair units (64-block blk).
		lp := out[gemvqLP(cols):]
		for p := 0; p < 64; p++ {
			i := p >> 4
			lp[16*(i*nu+blk)+(p&15)] = byte(q[p] >> 8)
			lp[16*((4+i)*nu+blk)+(p&15)] = byte(q[p])
		}
		binary.LittleEndian.PutUint32(lp[128*nu+8*blk:], uint32(sums[0]+sums[1]))
		binary.LittleEndian.PutUint32(lp[128*nu+8*blk+4:], uint32(sums[2]+sums[3]))
		binary.LittleEndian.PutUint32(lp[136*nu+4*blk:], math.Float32bits(sx))
	}
	return out
}

// gemvqScale is the scale sx of element i's 64-block.
func gemvqScale(xq []byte, cols, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(xq[2*cols+32*(i/64):]))
}

// gemvqDequantX returns the x the integer path multiplies by: sx * x_int.
func gemvqDequantX(xq []byte, cols int) []float64 {
	x := make([]float64, cols)
	for i := range x {
		x[i] = float64(gemvqScale(xq, cols, i)) * float64(256*int32(int8(xq[i]))+int32(xq[cols+i]))
	}
	return x
}

func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// k4ScaleMin is engine/quant's scaleMinK4 (ggml's get_scale_min_k4).
func k4ScaleMin(j int, s []byte) (sc, m int32) {
	if j < 4 {
		return int32(s[j] & 63), int32(s[j+4] & 63)
	}
	return int32(s[j+4]&0xf | (s[j-4]>>6)<<4), int32(s[j+4]>>4 | (s[j]>>6)<<4)
}

// gemvqUnitRef is QW4::dot: unit u of a Q4_K row against quantized x,
// accumulated into acc as the kernel does.
func gemvqUnitRef(row []byte, u int, xq []byte, cols int, acc float32) float32 {
	sb, c := u>>3, u&7
	j, half := c>>1, c&1
	le := k4SumsRef(xq, cols, sb, j)
	return k4UnitRef(row, sb, j, 16*half, 16, xq, cols, le(16+8*half), le(20+8*half), acc)
}

// gemvqPairUnitRef is QW4P::dot: pair unit v (sub-blocks 2j and 2j+1 of
// super-block v>>2, j = v&3) of a Q4_K row against quantized x (read from
// L0: the same numbers as LP), accumulated into acc as the kernel does:
// both halves' integer sums before the scales, one float update.
func gemvqPairUnitRef(row []byte, v int, xq []byte, cols int, acc float32) float32 {
	sb, j := v>>2, v&3
	le := k4SumsRef(xq, cols, sb, j)
	// Header order 0, 2, 1, 3: groups 0+1 under the low nibbles, 2+3 under the high.
	return k4UnitRef(row, sb, j, 0, 32, xq, cols, le(16)+le(24), le(20)+le(28), acc)
}

// k4SumsRef reads the int32 at byte o of the L0 header of x's 64-block
// 4sb + j (the one under sub-blocks 2j and 2j+1 of super-block sb).
func k4SumsRef(xq []byte, cols, sb, j int) func(o int) int32 {
	h := xq[2*cols+32*(4*sb+j):]
	return func(o int) int32 { return int32(binary.LittleEndian.Uint32(h[o:])) }
}

// k4UnitRef is the arithmetic QW4::dot and QW4P::dot share: the n quant
// bytes from byte off of sub-block pair j's 32 in super-block sb (low
// nibbles against x from element 256sb + 64j + off, high nibbles 32 on),
// their exact integer dot products under the pair's scales and mins (s0,
// s1: x_int's sums under the low and under the high nibbles), then one
// float update of acc with the x 64-block's scale.
func k4UnitRef(row []byte, sb, j, off, n int, xq []byte, cols int, s0, s1 int32, acc float32) float32 {
	b := row[144*sb:]
	d := quant.F16ToF32(binary.LittleEndian.Uint16(b[0:]))
	dmin := quant.F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	sc0, m0 := k4ScaleMin(2*j, b[4:16])
	sc1, m1 := k4ScaleMin(2*j+1, b[4:16])
	qs := b[16+32*j+off : 16+32*j+off+n]
	a0 := 256*sb + 64*j + off
	var i0, i1 int32
	for l, q := range qs {
		x0 := 256*int32(int8(xq[a0+l])) + int32(xq[cols+a0+l])
		x1 := 256*int32(int8(xq[a0+32+l])) + int32(xq[cols+a0+32+l])
		i0 += int32(q&15) * x0
		i1 += int32(q>>4) * x1
	}
	sx := math.Float32frombits(binary.LittleEndian.Uint32(xq[2*cols+32*(4*sb+j):]))
	t := sc0*i0 + sc1*i1
	m := m0*s0 + m1*s1
	f := fma32(-dmin, float32(m), float32(d*float32(t)))
	return fma32(sx, f, acc)
}

// gemvq6UnitRef is q6_dot: Q6_K unit u (64 elements) of a row against
// quantized x, accumulated into acc as the kernel does.
func gemvq6UnitRef(row []byte, u int, xq []byte, cols int, acc float32) float32 {
	sb, n, h := u>>2, (u>>1)&1, u&1
	b := row[210*sb:]
	d := quant.F16ToF32(binary.LittleEndian.Uint16(b[208:]))
	var f [2]float32
	for qq := 0; qq < 4; qq++ {
		c0 := 256*sb + 128*n + 32*qq + 16*h
		var i int32
		for j := 0; j < 16; j++ {
			l := 16*h + j
			lo := b[64*n+32*(qq&1)+l]
			if qq >= 2 {
				lo >>= 4
			}
			q := int32(lo&15 | (b[128+32*n+l]>>(2*qq))&3<<4)
			i += q * (256*int32(int8(xq[c0+j])) + int32(xq[cols+c0+j]))
		}
		hdr := xq[2*cols+32*(c0/64):]
		g := (c0 % 64) / 16
		s := int32(binary.LittleEndian.Uint32(hdr[16+4*((g&1)<<1|g>>1):]))
		i -= 32 * s
		scf := float32(int8(b[192+8*n+2*qq+h]))
		f[qq/2] = fma32(scf, float32(i), f[qq/2])
	}
	blk := 4*sb + 2*n
	acc = fma32(float32(d*gemvqScale(xq, cols, 64*blk)), f[0], acc)
	return fma32(float32(d*gemvqScale(xq, cols, 64*(blk+1))), f[1], acc)
}

// gemvqRowRef is one row's result of gemvq_fused (Q4_K) or gemvq_q6k
// with nw warps per block: lane partials over units w*32+lane, +32*nw,
// ..., warp_sum's shuffle tree, then the warps' sums in order. split > 0
// (gemvq_q6k_s's two copy halves) restarts the units' walk at unit split:
// thread t then takes split+t, split+t+32*nw, ...
func gemvqRowRef(t quant.Type, row []byte, cols int, xq []byte, nw, split int) float32 {
	unit, ue := gemvqUnitRef, 32
	if t == quant.Q6_K {
		unit, ue = gemvq6UnitRef, 64
	}
	return gemvqWalkRef(unit, ue, row, cols, xq, nw, split)
}

// gemvqPairRowRef is one row's result of gemvq_p4_1 / gemvq_p2u2_1 with nw
// warps per block (the units' walk and sums of gemvqRowRef; units in
// flight change when a lane's loads happen, not its order of sums).
func gemvqPairRowRef(row []byte, cols int, xq []byte, nw int) float32 {
	return gemvqWalkRef(gemvqPairUnitRef, 64, row, cols, xq, nw, 0)
}

// gemvqWalkRef runs unit (ue elements each) over a row as gemvqRowRef
// describes.
func gemvqWalkRef(unit func([]byte, int, []byte, int, float32) float32, ue int, row []byte, cols int, xq []byte, nw, split int) float32 {
	part := make([]float32, 32*nw)
	for u := 0; u < cols/ue; u++ {
		i := u % (32 * nw)
		if split > 0 && u >= split {
			i = (u - split) % (32 * nw)
		}
		part[i] = unit(row, u, xq, cols, part[i])
	}
	var s float32
	for w := 0; w < nw; w++ {
		v := append([]float32(nil), part[32*w:32*w+32]...)
		for o := 16; o > 0; o >>= 1 {
			nv := make([]float32, 32)
			for l := range v {
				nv[l] = v[l] + v[l^o]
			}
			v = nv
		}
		s += v[0]
	}
	return s
}

// gemvqGLURef is common.cuh's glu_act: the gated activation of the kernel's epilogue.
func gemvqGLURef(act GLU, g, u float32) float32 {
	v := float64(g)
	if act == SwiGLU {
		return float32(v/(1+math.Exp(-v))) * u
	}
	return float32(0.5*v*(1+math.Tanh(0.7978845608028654*(v+0.044715*v*v*v)))) * u
}
