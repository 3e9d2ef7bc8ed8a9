package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Summation order (shared by Dot, DotRows and DotRowsBatch, which therefore
// agree bit for bit):
//
// A row is processed in units: 256 elements for F32, F16, BF16 and INT8Row
// (the last unit may be shorter), one block for the block formats (32 for
// Q4_0/Q8_0, 256 for the K-quants). Each unit yields a float32 partial and
// the partials are added into a float64 total, which is rounded to float32
// at the end (INT8Row multiplies the total by its row scale first).
//
//   - Float units: products float32(w*x) go to 8 float32 lanes, element i of
//     the unit to lane i%8 (a trailing unit's last n%8 elements go to lane
//     0); the lanes combine as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
//   - Q4_0 / Q8_0: the block's integer quants q (Q4_0: nibble-8) are dotted
//     with x in 4 lanes (i%4) combined as (l0+l1)+(l2+l3); partial = d*sum.
//   - Q4_K / Q5_K: per 32-element sub-block s, sq = Σq·x and sx = Σx, each
//     in 4 lanes as above; partial += float32(d·sc_s·sq) −
//     float32(dmin·m_s·sx), in sub-block order. sx depends on x alone, so
//     DotRows and DotRowsBatch compute it once per vector.
//   - Q6_K: per 16-element group g, sq = Σ(q−32)·x in one sequential chain;
//     partial += float32(d·scale_g)·sq, in group order.
//
// Every product is wrapped in an explicit float32 conversion so the
// compiler never fuses it into an FMA: results are identical on every
// architecture.

// unit is the decoded form of one processing unit: exact quant values as
// float32 plus the per-sub-block scales the kernel applies.
type unit struct {
	q  [QK_K]float32
	ds [16]float32 // effective scale per sub-block (Q6_K: 16, K4/K5: 8, Q4_0/Q8_0: 1)
	ms [8]float32  // effective min per sub-block (Q4_K/Q5_K)
}

// rowBytes is the encoded size of a row of n elements, computed without a
// map lookup or allocation for the hot path; ok is false for unknown types
// or lengths that are not a whole number of blocks.
func rowBytes(t Type, n int) (int, bool) {
	if n < 0 {
		return 0, false
	}
	switch t {
	case F32:
		return 4 * n, true
	case F16, BF16:
		return 2 * n, true
	case Q4_0:
		return n / 32 * q40Bytes, n%32 == 0
	case Q8_0:
		return n / 32 * q80Bytes, n%32 == 0
	case Q4_K:
		return n / QK_K * q4kBytes, n%QK_K == 0
	case Q5_K:
		return n / QK_K * q5kBytes, n%QK_K == 0
	case Q6_K:
		return n / QK_K * q6kBytes, n%QK_K == 0
	case INT8Row:
		return 4 + n, true
	}
	return 0, false
}

// Dot returns the dot product of one encoded row of len(x) elements with x.
// It allocates nothing and is the CPU engine's matrix-vector inner loop:
// blocks are decoded on the fly (table lookups, no intermediate row).
//
// Summation: each unit of the row (256 elements for F32/F16/BF16/INT8Row,
// one block for the block formats) is summed in float32 with independent
// partial sums — 8 lanes for the float formats, 4 lanes (one chain for
// Q6_K) per sub-block for the quantized ones, with the block scales applied
// per sub-block — and the unit partials are added into a float64 total.
// Products are never fused into FMAs, so results are identical on every
// architecture, and DotRows and DotRowsBatch return exactly Dot's values.
// The rounding error stays within about 64·2⁻²⁴ of Σ|wᵢ·xᵢ| (for Q4_K/Q5_K,
// of the larger sum of the scale and min terms). dot.go documents the exact
// order.
//
// Dot has no error result: when len(row) is not the encoded size of len(x)
// elements of t, or t is unknown, it returns NaN (callers validate shapes
// once, e.g. with Type.RowBytes, or use DotRows, which returns errors).
func Dot(t Type, row []byte, x []float32) float32 {
	rb, ok := rowBytes(t, len(x))
	if !ok || rb != len(row) {
		return float32(math.NaN())
	}
	return dotRow(t, row, x, nil)
}

// stackSubSums bounds the x sub-block sums DotRows keeps on the stack
// (rows up to 65536 elements); longer rows allocate them.
const stackSubSums = 2048

// DotRows computes y[i] = Dot(t, row i, x) for len(y) consecutive encoded
// rows of rowLen elements in rows. len(x) must equal rowLen and len(rows)
// must be len(y) encoded rows; otherwise it returns an error and leaves y
// untouched. For Q4_K/Q5_K it sums x's sub-blocks once for all rows, which
// makes it faster than calling Dot per row (results are identical).
func DotRows(t Type, rows []byte, rowLen int, x []float32, y []float32) error {
	if len(x) != rowLen {
		return fmt.Errorf("dot rows: %w: x has %d elements, rows have %d", errLength, len(x), rowLen)
	}
	rb, err := checkRows(t, len(rows), rowLen, len(y))
	if err != nil {
		return fmt.Errorf("dot rows: %w", err)
	}
	var sx []float32
	if needsSubSums(t) {
		var buf [stackSubSums]float32
		if rowLen/32 <= len(buf) {
			sx = buf[:rowLen/32]
		} else {
			sx = make([]float32, rowLen/32)
		}
		rowSubSums(x, sx)
	}
	for i := range y {
		y[i] = dotRow(t, rows[i*rb:(i+1)*rb], x, sx)
	}
	return nil
}

// batchGroup is how many vectors DotRowsBatch serves per decode of a unit;
// more vectors than this decode each row once per group.
const batchGroup = 32

// DotRowsBatch computes ys[j][i] = Dot(t, row i, xs[j]) for every vector j
// and each of the len(ys[j]) rows, decoding every weight unit once and
// dotting it with all vectors (up to 32 at a time) while it is hot. This is
// the prefill / batched-decode path: weights are read from memory once per
// batch. Results equal Dot's bit for bit. len(xs) must equal len(ys), every
// xs[j] must have rowLen elements and every ys[j] the same length, the
// number of rows in rows.
func DotRowsBatch(t Type, rows []byte, rowLen int, xs [][]float32, ys [][]float32) error {
	if len(xs) != len(ys) {
		return fmt.Errorf("dot rows batch: %w: %d input vectors but %d outputs", errLength, len(xs), len(ys))
	}
	if len(xs) == 0 {
		if !t.Known() {
			return fmt.Errorf("dot rows batch: %w: %d", ErrUnknownType, uint32(t))
		}
		return nil
	}
	n := len(ys[0])
	for j := range xs {
		if len(xs[j]) != rowLen {
			return fmt.Errorf("dot rows batch: %w: x[%d] has %d elements, rows have %d", errLength, j, len(xs[j]), rowLen)
		}
		if len(ys[j]) != n {
			return fmt.Errorf("dot rows batch: %w: y[%d] has %d elements, y[0] has %d", errLength, j, len(ys[j]), n)
		}
	}
	rb, err := checkRows(t, len(rows), rowLen, n)
	if err != nil {
		return fmt.Errorf("dot rows batch: %w", err)
	}
	ue, ub := unitSize(t)
	units := (rowLen + ue - 1) / ue
	nsub := 0
	var sxAll []float32
	if needsSubSums(t) {
		nsub = rowLen / 32
		sxAll = make([]float32, min(len(xs), batchGroup)*nsub)
	}
	var u unit
	var acc [batchGroup]float64
	for j0 := 0; j0 < len(xs); j0 += batchGroup {
		j1 := min(j0+batchGroup, len(xs))
		for j := j0; j < j1; j++ {
			if nsub > 0 {
				rowSubSums(xs[j], sxAll[(j-j0)*nsub:(j-j0+1)*nsub])
			}
		}
		for i := 0; i < n; i++ {
			row := rows[i*rb : (i+1)*rb]
			body := row
			var scale float32 = 1
			if t == INT8Row {
				scale = math.Float32frombits(binary.LittleEndian.Uint32(row))
				body = row[4:]
			}
			clear(acc[:])
			for k := 0; k < units; k++ {
				e0 := k * ue
				e1 := min(e0+ue, rowLen)
				decodeUnit(t, body[k*ub:], e1-e0, &u)
				for j := j0; j < j1; j++ {
					var sx []float32
					if nsub > 0 {
						o := (j-j0)*nsub + e0/32
						sx = sxAll[o : o+8]
					}
					acc[j-j0] += float64(kernelUnit(t, &u, xs[j][e0:e1], sx))
				}
			}
			for j := j0; j < j1; j++ {
				if t == INT8Row {
					ys[j][i] = float32(acc[j-j0] * float64(scale))
				} else {
					ys[j][i] = float32(acc[j-j0])
				}
			}
		}
	}
	return nil
}

// Decode tables: one L1-resident load replaces an integer-to-float
// conversion (which is slow and serialising in scalar Go code).
var (
	tabI8    [256]float32 // float32(int8(b))
	tabLo4   [256]float32 // float32(b & 15)
	tabHi4   [256]float32 // float32(b >> 4)
	tabLo4m8 [256]float32 // float32(b&15 - 8)
	tabHi4m8 [256]float32 // float32(b>>4 - 8)
	tab5     [32]float32  // float32(v)
	tab6m32  [64]float32  // float32(v - 32)
	// tabQ5[h<<8|b] holds the two Q5_K quants of qs byte b whose high bits
	// are h&1 (low nibble) and h>>1 (high nibble).
	tabQ5 [1024][2]float32
)

func init() {
	for i := 0; i < 256; i++ {
		tabI8[i] = float32(int8(i))
		tabLo4[i] = float32(i & 15)
		tabHi4[i] = float32(i >> 4)
		tabLo4m8[i] = float32(i&15 - 8)
		tabHi4m8[i] = float32(i>>4 - 8)
	}
	for i := range tab5 {
		tab5[i] = float32(i)
	}
	for i := range tabQ5 {
		b, h := i&255, i>>8
		tabQ5[i] = [2]float32{float32(b&15 | (h&1)<<4), float32(b>>4 | (h>>1)<<4)}
	}
	for i := range tab6m32 {
		tab6m32[i] = float32(i - 32)
	}
}

// subSums writes the sums of x's eight 32-element sub-blocks, each in 4
// lanes combined as (l0+l1)+(l2+l3).
func subSums(x *[QK_K]float32, s *[8]float32) {
	for j := 0; j < 8; j++ {
		s[j] = sum32((*[32]float32)(x[32*j:]))
	}
}

func sum32(x *[32]float32) float32 {
	var s0, s1, s2, s3 float32
	for l := 0; l < 32; l += 4 {
		s0 += x[l]
		s1 += x[l+1]
		s2 += x[l+2]
		s3 += x[l+3]
	}
	return (s0 + s1) + (s2 + s3)
}

// rowSubSums fills sx (len(x)/32 entries) with the sub-block sums of x for
// the affine K-quants, which need Σx per sub-block for every row; DotRows
// computes them once per vector instead of once per row.
func rowSubSums(x []float32, sx []float32) {
	for j := range sx {
		sx[j] = sum32((*[32]float32)(x[32*j:]))
	}
}

// needsSubSums reports whether t's kernel uses per-sub-block sums of x.
func needsSubSums(t Type) bool { return t == Q4_K || t == Q5_K }

// dotRow is Dot on validated input. sx, when not nil, holds x's sub-block
// sums (Q4_K/Q5_K); otherwise they are computed per block.
func dotRow(t Type, row []byte, x []float32, sx []float32) float32 {
	var total float64
	n := len(x)
	full := n &^ 255
	switch t {
	case F32:
		for e := 0; e < full; e += 256 {
			total += float64(unitF32((*[1024]byte)(row[4*e:]), (*[256]float32)(x[e:])))
		}
	case F16:
		for e := 0; e < full; e += 256 {
			total += float64(unitF16((*[512]byte)(row[2*e:]), (*[256]float32)(x[e:])))
		}
	case BF16:
		for e := 0; e < full; e += 256 {
			total += float64(unitBF16((*[512]byte)(row[2*e:]), (*[256]float32)(x[e:])))
		}
	case INT8Row:
		scale := math.Float32frombits(binary.LittleEndian.Uint32(row))
		q := row[4:]
		for e := 0; e < full; e += 256 {
			total += float64(unitI8((*[256]byte)(q[e:]), (*[256]float32)(x[e:])))
		}
		if full < n {
			var u unit
			decodeUnit(t, q[full:], n-full, &u)
			total += float64(kernelFloat(&u.q, x[full:]))
		}
		return float32(total * float64(scale))
	case Q4_0:
		for b := 0; b < n/32; b++ {
			total += float64(blockQ4_0((*[q40Bytes]byte)(row[b*q40Bytes:]), (*[32]float32)(x[32*b:])))
		}
		return float32(total)
	case Q8_0:
		for b := 0; b < n/32; b++ {
			total += float64(blockQ8_0((*[q80Bytes]byte)(row[b*q80Bytes:]), (*[32]float32)(x[32*b:])))
		}
		return float32(total)
	case Q4_K, Q5_K:
		var local [8]float32
		for b := 0; b < n/QK_K; b++ {
			xb := (*[QK_K]float32)(x[QK_K*b:])
			s := &local
			if sx != nil {
				s = (*[8]float32)(sx[8*b:])
			} else {
				subSums(xb, s)
			}
			if t == Q4_K {
				total += float64(blockQ4K((*[q4kBytes]byte)(row[b*q4kBytes:]), xb, s))
			} else {
				total += float64(blockQ5K((*[q5kBytes]byte)(row[b*q5kBytes:]), xb, s))
			}
		}
		return float32(total)
	case Q6_K:
		for b := 0; b < n/QK_K; b++ {
			total += float64(blockQ6K((*[q6kBytes]byte)(row[b*q6kBytes:]), (*[QK_K]float32)(x[QK_K*b:])))
		}
		return float32(total)
	}
	// Float types: a trailing partial unit.
	if full < n {
		var u unit
		es := t.BlockBytes()
		decodeUnit(t, row[es*full:], n-full, &u)
		total += float64(kernelFloat(&u.q, x[full:]))
	}
	return float32(total)
}

// Fused unit kernels for Dot. Each performs exactly the arithmetic of
// decodeUnit followed by kernelUnit, so Dot and DotRowsBatch agree bit for
// bit.

func unitF32(w *[1024]byte, x *[256]float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	for i := 0; i < 256; i += 8 {
		ws := (*[32]byte)(w[4*i:])
		xs := (*[8]float32)(x[i:])
		l0 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[0:])) * xs[0])
		l1 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[4:])) * xs[1])
		l2 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[8:])) * xs[2])
		l3 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[12:])) * xs[3])
		l4 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[16:])) * xs[4])
		l5 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[20:])) * xs[5])
		l6 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[24:])) * xs[6])
		l7 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ws[28:])) * xs[7])
	}
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

func unitF16(w *[512]byte, x *[256]float32) float32 {
	tab := f16Table
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	for i := 0; i < 256; i += 8 {
		ws := (*[16]byte)(w[2*i:])
		xs := (*[8]float32)(x[i:])
		l0 += float32(tab[binary.LittleEndian.Uint16(ws[0:])] * xs[0])
		l1 += float32(tab[binary.LittleEndian.Uint16(ws[2:])] * xs[1])
		l2 += float32(tab[binary.LittleEndian.Uint16(ws[4:])] * xs[2])
		l3 += float32(tab[binary.LittleEndian.Uint16(ws[6:])] * xs[3])
		l4 += float32(tab[binary.LittleEndian.Uint16(ws[8:])] * xs[4])
		l5 += float32(tab[binary.LittleEndian.Uint16(ws[10:])] * xs[5])
		l6 += float32(tab[binary.LittleEndian.Uint16(ws[12:])] * xs[6])
		l7 += float32(tab[binary.LittleEndian.Uint16(ws[14:])] * xs[7])
	}
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

func unitBF16(w *[512]byte, x *[256]float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	for i := 0; i < 256; i += 8 {
		ws := (*[16]byte)(w[2*i:])
		xs := (*[8]float32)(x[i:])
		l0 += float32(bf16At(ws[0:]) * xs[0])
		l1 += float32(bf16At(ws[2:]) * xs[1])
		l2 += float32(bf16At(ws[4:]) * xs[2])
		l3 += float32(bf16At(ws[6:]) * xs[3])
		l4 += float32(bf16At(ws[8:]) * xs[4])
		l5 += float32(bf16At(ws[10:]) * xs[5])
		l6 += float32(bf16At(ws[12:]) * xs[6])
		l7 += float32(bf16At(ws[14:]) * xs[7])
	}
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

func bf16At(b []byte) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
}

func unitI8(q *[256]byte, x *[256]float32) float32 {
	tab := &tabI8
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	for i := 0; i < 256; i += 8 {
		qs := (*[8]byte)(q[i:])
		xs := (*[8]float32)(x[i:])
		l0 += float32(tab[qs[0]] * xs[0])
		l1 += float32(tab[qs[1]] * xs[1])
		l2 += float32(tab[qs[2]] * xs[2])
		l3 += float32(tab[qs[3]] * xs[3])
		l4 += float32(tab[qs[4]] * xs[4])
		l5 += float32(tab[qs[5]] * xs[5])
		l6 += float32(tab[qs[6]] * xs[6])
		l7 += float32(tab[qs[7]] * xs[7])
	}
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

func blockQ4_0(b *[q40Bytes]byte, x *[32]float32) float32 {
	lt, ht := &tabLo4m8, &tabHi4m8
	qs := (*[16]byte)(b[2:])
	xh := (*[16]float32)(x[16:])
	var a0, a1, a2, a3 float32
	for l := 0; l < 16; l += 4 {
		a0 += float32(lt[qs[l]] * x[l])
		a1 += float32(lt[qs[l+1]] * x[l+1])
		a2 += float32(lt[qs[l+2]] * x[l+2])
		a3 += float32(lt[qs[l+3]] * x[l+3])
	}
	for l := 0; l < 16; l += 4 {
		a0 += float32(ht[qs[l]] * xh[l])
		a1 += float32(ht[qs[l+1]] * xh[l+1])
		a2 += float32(ht[qs[l+2]] * xh[l+2])
		a3 += float32(ht[qs[l+3]] * xh[l+3])
	}
	return halfAt(b[0:]) * ((a0 + a1) + (a2 + a3))
}

func blockQ8_0(b *[q80Bytes]byte, x *[32]float32) float32 {
	tab := &tabI8
	qs := (*[32]byte)(b[2:])
	var a0, a1, a2, a3 float32
	for l := 0; l < 32; l += 4 {
		a0 += float32(tab[qs[l]] * x[l])
		a1 += float32(tab[qs[l+1]] * x[l+1])
		a2 += float32(tab[qs[l+2]] * x[l+2])
		a3 += float32(tab[qs[l+3]] * x[l+3])
	}
	return halfAt(b[0:]) * ((a0 + a1) + (a2 + a3))
}

func blockQ4K(b *[q4kBytes]byte, x *[QK_K]float32, sx *[8]float32) float32 {
	var ds, ms [8]float32
	kScales(b[:], &ds, &ms)
	lt, ht := &tabLo4, &tabHi4
	var p float32
	for j := 0; j < 4; j++ {
		qs := (*[32]byte)(b[q4kQs+32*j:])
		xl := (*[32]float32)(x[64*j:])
		xh := (*[32]float32)(x[64*j+32:])
		var a0, a1, a2, a3 float32
		for l := 0; l < 32; l += 4 {
			a0 += float32(lt[qs[l]] * xl[l])
			a1 += float32(lt[qs[l+1]] * xl[l+1])
			a2 += float32(lt[qs[l+2]] * xl[l+2])
			a3 += float32(lt[qs[l+3]] * xl[l+3])
		}
		p += float32(ds[2*j]*((a0+a1)+(a2+a3))) - float32(ms[2*j]*sx[2*j])
		a0, a1, a2, a3 = 0, 0, 0, 0
		for l := 0; l < 32; l += 4 {
			a0 += float32(ht[qs[l]] * xh[l])
			a1 += float32(ht[qs[l+1]] * xh[l+1])
			a2 += float32(ht[qs[l+2]] * xh[l+2])
			a3 += float32(ht[qs[l+3]] * xh[l+3])
		}
		p += float32(ds[2*j+1]*((a0+a1)+(a2+a3))) - float32(ms[2*j+1]*sx[2*j+1])
	}
	return p
}

func blockQ5K(b *[q5kBytes]byte, x *[QK_K]float32, sx *[8]float32) float32 {
	var ds, ms [8]float32
	kScales(b[:], &ds, &ms)
	qh := (*[32]byte)(b[q5kQh:])
	tab := &tabQ5
	var p float32
	for j := 0; j < 4; j++ {
		qs := (*[32]byte)(b[q5kQs+32*j:])
		xl := (*[32]float32)(x[64*j:])
		xh := (*[32]float32)(x[64*j+32:])
		sh := uint(2 * j)
		var a0, a1, a2, a3, c0, c1, c2, c3 float32
		for l := 0; l < 32; l += 4 {
			v0 := &tab[uint(qh[l]>>sh&3)<<8|uint(qs[l])]
			v1 := &tab[uint(qh[l+1]>>sh&3)<<8|uint(qs[l+1])]
			v2 := &tab[uint(qh[l+2]>>sh&3)<<8|uint(qs[l+2])]
			v3 := &tab[uint(qh[l+3]>>sh&3)<<8|uint(qs[l+3])]
			a0 += float32(v0[0] * xl[l])
			a1 += float32(v1[0] * xl[l+1])
			a2 += float32(v2[0] * xl[l+2])
			a3 += float32(v3[0] * xl[l+3])
			c0 += float32(v0[1] * xh[l])
			c1 += float32(v1[1] * xh[l+1])
			c2 += float32(v2[1] * xh[l+2])
			c3 += float32(v3[1] * xh[l+3])
		}
		p += float32(ds[2*j]*((a0+a1)+(a2+a3))) - float32(ms[2*j]*sx[2*j])
		p += float32(ds[2*j+1]*((c0+c1)+(c2+c3))) - float32(ms[2*j+1]*sx[2*j+1])
	}
	return p
}

// blockQ6K walks the 32 (ql, ql+32, qh) positions of each 128-element half
// once, producing the four values each position holds; they belong to
// groups g, g+2, g+4 and g+6, whose sums are four independent chains.
func blockQ6K(b *[q6kBytes]byte, x *[QK_K]float32) float32 {
	t6 := &tab6m32
	var sq [16]float32
	for n := 0; n < 2; n++ {
		ql := (*[64]byte)(b[64*n:])
		qh := (*[32]byte)(b[q6kQh+32*n:])
		xs := (*[128]float32)(x[128*n:])
		for h := 0; h < 2; h++ { // positions 16h..16h+15 -> groups 8n+h+{0,2,4,6}
			var s0, s1, s2, s3 float32
			for l := 16 * h; l < 16*h+16; l++ {
				a, c, q := ql[l], ql[l+32], qh[l]
				s0 += float32(t6[a&15|(q&3)<<4] * xs[l])
				s1 += float32(t6[c&15|(q<<2)&0x30] * xs[l+32])
				s2 += float32(t6[a>>4|q&0x30] * xs[l+64])
				s3 += float32(t6[c>>4|(q>>2)&0x30] * xs[l+96])
			}
			sq[8*n+h], sq[8*n+h+2], sq[8*n+h+4], sq[8*n+h+6] = s0, s1, s2, s3
		}
	}
	d := halfAt(b[q6kD:])
	sc := (*[16]byte)(b[q6kScales:])
	var p float32
	for g := 0; g < 16; g++ {
		p += float32(float32(d*tabI8[sc[g]]) * sq[g])
	}
	return p
}

// ---------------------------------------------------------------------------
// Decoded path, used by DotRowsBatch: a unit is decoded once into exact
// float32 quants and scales, then dotted with every vector.

// unitSize returns the elements and encoded bytes of one processing unit.
func unitSize(t Type) (elems, bytes int) {
	switch t {
	case F32:
		return 256, 4 * 256
	case F16, BF16:
		return 256, 2 * 256
	case INT8Row:
		return 256, 256
	case Q4_0:
		return 32, q40Bytes
	case Q8_0:
		return 32, q80Bytes
	case Q4_K:
		return QK_K, q4kBytes
	case Q5_K:
		return QK_K, q5kBytes
	case Q6_K:
		return QK_K, q6kBytes
	}
	return 1, 1
}

// decodeUnit decodes the unit at the start of src holding n elements.
func decodeUnit(t Type, src []byte, n int, u *unit) {
	switch t {
	case F32:
		for i := 0; i < n; i++ {
			u.q[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		tab := f16Table
		for i := 0; i < n; i++ {
			u.q[i] = tab[binary.LittleEndian.Uint16(src[2*i:])]
		}
	case BF16:
		for i := 0; i < n; i++ {
			u.q[i] = bf16At(src[2*i:])
		}
	case INT8Row:
		for i := 0; i < n; i++ {
			u.q[i] = tabI8[src[i]]
		}
	case Q4_0:
		b := (*[q40Bytes]byte)(src)
		u.ds[0] = halfAt(b[0:])
		for l := 0; l < 16; l++ {
			v := b[2+l]
			u.q[l] = tabLo4m8[v]
			u.q[l+16] = tabHi4m8[v]
		}
	case Q8_0:
		b := (*[q80Bytes]byte)(src)
		u.ds[0] = halfAt(b[0:])
		for l := 0; l < 32; l++ {
			u.q[l] = tabI8[b[2+l]]
		}
	case Q4_K:
		b := (*[q4kBytes]byte)(src)
		kScales(b[:], (*[8]float32)(u.ds[:8]), &u.ms)
		for j := 0; j < 4; j++ {
			qs := (*[32]byte)(b[q4kQs+32*j:])
			lo := (*[32]float32)(u.q[64*j:])
			hi := (*[32]float32)(u.q[64*j+32:])
			for l := 0; l < 32; l++ {
				lo[l] = tabLo4[qs[l]]
				hi[l] = tabHi4[qs[l]]
			}
		}
	case Q5_K:
		b := (*[q5kBytes]byte)(src)
		kScales(b[:], (*[8]float32)(u.ds[:8]), &u.ms)
		qh := (*[32]byte)(b[q5kQh:])
		for j := 0; j < 4; j++ {
			qs := (*[32]byte)(b[q5kQs+32*j:])
			lo := (*[32]float32)(u.q[64*j:])
			hi := (*[32]float32)(u.q[64*j+32:])
			sh := uint(2 * j)
			for l := 0; l < 32; l++ {
				v := qs[l]
				h := qh[l] >> sh
				lo[l] = tab5[v&15|(h&1)<<4]
				hi[l] = tab5[v>>4|(h&2)<<3]
			}
		}
	case Q6_K:
		b := (*[q6kBytes]byte)(src)
		d := halfAt(b[q6kD:])
		for i := 0; i < 16; i++ {
			u.ds[i] = d * float32(int8(b[q6kScales+i]))
		}
		for n := 0; n < 2; n++ {
			ql := (*[64]byte)(b[64*n:])
			qh := (*[32]byte)(b[q6kQh+32*n:])
			out := (*[128]float32)(u.q[128*n:])
			for l := 0; l < 32; l++ {
				h := qh[l]
				a, c := ql[l], ql[l+32]
				out[l] = tab6m32[a&15|(h&3)<<4]
				out[l+32] = tab6m32[c&15|(h>>2&3)<<4]
				out[l+64] = tab6m32[a>>4|(h>>4&3)<<4]
				out[l+96] = tab6m32[c>>4|(h>>6)<<4]
			}
		}
	}
}

// kernelUnit dots a decoded unit with x (len(x) = the unit's elements); sx
// holds x's sub-block sums for Q4_K/Q5_K.
func kernelUnit(t Type, u *unit, x []float32, sx []float32) float32 {
	switch t {
	case F32, F16, BF16, INT8Row:
		return kernelFloat(&u.q, x)
	case Q4_0, Q8_0:
		return u.ds[0] * sum4((*[32]float32)(u.q[:32]), (*[32]float32)(x))
	case Q4_K, Q5_K:
		return kernelAffine(u, (*[QK_K]float32)(x), (*[8]float32)(sx))
	case Q6_K:
		return kernelQ6K(u, (*[QK_K]float32)(x))
	}
	return 0
}

// kernelFloat is the float unit kernel: 8 lanes, see the summation note.
func kernelFloat(w *[QK_K]float32, x []float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	n := len(x)
	m := n &^ 7
	i := 0
	for ; i < m; i += 8 {
		xs := (*[8]float32)(x[i:])
		ws := (*[8]float32)(w[i:])
		l0 += float32(ws[0] * xs[0])
		l1 += float32(ws[1] * xs[1])
		l2 += float32(ws[2] * xs[2])
		l3 += float32(ws[3] * xs[3])
		l4 += float32(ws[4] * xs[4])
		l5 += float32(ws[5] * xs[5])
		l6 += float32(ws[6] * xs[6])
		l7 += float32(ws[7] * xs[7])
	}
	for ; i < n; i++ {
		l0 += float32(w[i] * x[i])
	}
	return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
}

// sum4 is Σ q[i]*x[i] over 32 elements in 4 lanes (Q4_0 reaches lane i%4
// for its low and high halves alike, as blockQ4_0 does).
func sum4(q, x *[32]float32) float32 {
	var a0, a1, a2, a3 float32
	for l := 0; l < 32; l += 4 {
		a0 += float32(q[l] * x[l])
		a1 += float32(q[l+1] * x[l+1])
		a2 += float32(q[l+2] * x[l+2])
		a3 += float32(q[l+3] * x[l+3])
	}
	return (a0 + a1) + (a2 + a3)
}

// kernelAffine is the Q4_K/Q5_K kernel.
func kernelAffine(u *unit, x *[QK_K]float32, sx *[8]float32) float32 {
	var p float32
	for s := 0; s < 8; s++ {
		q := (*[32]float32)(u.q[32*s:])
		xs := (*[32]float32)(x[32*s:])
		var a0, a1, a2, a3 float32
		for l := 0; l < 32; l += 4 {
			a0 += float32(q[l] * xs[l])
			a1 += float32(q[l+1] * xs[l+1])
			a2 += float32(q[l+2] * xs[l+2])
			a3 += float32(q[l+3] * xs[l+3])
		}
		p += float32(u.ds[s]*((a0+a1)+(a2+a3))) - float32(u.ms[s]*sx[s])
	}
	return p
}

// kernelQ6K is the Q6_K kernel: each 16-element group is summed in one
// sequential chain (four groups run interleaved), then the scaled group
// sums are added in group order.
func kernelQ6K(u *unit, x *[QK_K]float32) float32 {
	var sq [16]float32
	for g := 0; g < 16; g += 4 {
		q := (*[64]float32)(u.q[16*g:])
		xs := (*[64]float32)(x[16*g:])
		var s0, s1, s2, s3 float32
		for l := 0; l < 16; l++ {
			s0 += float32(q[l] * xs[l])
			s1 += float32(q[l+16] * xs[l+16])
			s2 += float32(q[l+32] * xs[l+32])
			s3 += float32(q[l+48] * xs[l+48])
		}
		sq[g], sq[g+1], sq[g+2], sq[g+3] = s0, s1, s2, s3
	}
	var p float32
	for g := 0; g < 16; g++ {
		p += float32(u.ds[g] * sq[g])
	}
	return p
}
