package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrNoQuantizer is returned (wrapped, naming the type) by Quantize and
// QuantizeRows for formats strata can read but not write (Q4_0).
var ErrNoQuantizer = errors.New("no quantizer for tensor type")

// maxHalf is the largest finite binary16 value.
const maxHalf = 65504

// hasQuantizer reports whether Quantize supports t.
func hasQuantizer(t Type) bool {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K, INT8Row:
		return true
	}
	return false
}

// Quantize encodes src into dst. len(src) must be a whole number of blocks
// of t and dst exactly the encoded size. For INT8Row, src is one row; use
// QuantizeRows for several. Supported: F32, F16, BF16, Q8_0, Q4_K, Q5_K,
// Q6_K, INT8Row; other known types get ErrNoQuantizer. Block formats reject
// NaN and Inf inputs, and values too large for their fp16 scales.
//
// The K-quant encoders minimise squared error in three steps: a small
// search per sub-block for the best unquantized scale (and min), a search
// for the fp16 super-block scale that best fits those values on the
// format's 6- or 8-bit code grid, and a search of the neighbouring codes
// against the exact decoded values (see fitAffine, superScale,
// refineAffine and fitSym in quantize.go). Q8_0 and INT8Row use the largest
// magnitude (with −128 available for negative extremes).
func Quantize(t Type, src []float32, dst []byte) error {
	if err := checkQuantize(t); err != nil {
		return err
	}
	if err := checkRow(t, len(dst), len(src)); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	if err := quantizeRow(t, src, dst); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	return nil
}

// QuantizeRows encodes len(src)/rowLen rows of rowLen elements into dst,
// which must be exactly that many encoded rows. For INT8Row every row gets
// its own scale.
func QuantizeRows(t Type, src []float32, rowLen int, dst []byte) error {
	if err := checkQuantize(t); err != nil {
		return err
	}
	if rowLen <= 0 || len(src)%rowLen != 0 {
		return fmt.Errorf("quantize rows: %w: %d elements are not a whole number of rows of %d", errLength, len(src), rowLen)
	}
	rows := len(src) / rowLen
	rb, err := checkRows(t, len(dst), rowLen, rows)
	if err != nil {
		return fmt.Errorf("quantize rows: %w", err)
	}
	for r := 0; r < rows; r++ {
		if err := quantizeRow(t, src[r*rowLen:(r+1)*rowLen], dst[r*rb:(r+1)*rb]); err != nil {
			return fmt.Errorf("quantize rows: row %d: %w", r, err)
		}
	}
	return nil
}

func checkQuantize(t Type) error {
	if !t.Known() {
		return fmt.Errorf("quantize: %w: %d", ErrUnknownType, uint32(t))
	}
	if !hasQuantizer(t) {
		return fmt.Errorf("quantize %v: %w", t, ErrNoQuantizer)
	}
	return nil
}

// quantizeRow encodes one validated row.
func quantizeRow(t Type, src []float32, dst []byte) error {
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
		return nil
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
		return nil
	}
	for i, v := range src {
		if v-v != 0 {
			return fmt.Errorf("%v cannot encode non-finite value %v at element %d", t, v, i)
		}
	}
	switch t {
	case Q8_0:
		for b := 0; b < len(src)/32; b++ {
			if err := quantQ8_0((*[32]float32)(src[b*32:]), (*[q80Bytes]byte)(dst[b*q80Bytes:])); err != nil {
				return fmt.Errorf("block %d: %w", b, err)
			}
		}
	case Q4_K, Q5_K:
		var e kEncoder
		for b := 0; b < len(src)/QK_K; b++ {
			var err error
			x := (*[QK_K]float32)(src[b*QK_K:])
			if t == Q4_K {
				err = e.quantQ4K(x, (*[q4kBytes]byte)(dst[b*q4kBytes:]))
			} else {
				err = e.quantQ5K(x, (*[q5kBytes]byte)(dst[b*q5kBytes:]))
			}
			if err != nil {
				return fmt.Errorf("block %d: %w", b, err)
			}
		}
	case Q6_K:
		for b := 0; b < len(src)/QK_K; b++ {
			if err := quantQ6K((*[QK_K]float32)(src[b*QK_K:]), (*[q6kBytes]byte)(dst[b*q6kBytes:])); err != nil {
				return fmt.Errorf("block %d: %w", b, err)
			}
		}
	case INT8Row:
		scale := int8Scale(src)
		binary.LittleEndian.PutUint32(dst, math.Float32bits(scale))
		q := dst[4:]
		if scale == 0 {
			clear(q)
			return nil
		}
		inv := 1 / scale
		for i, v := range src {
			q[i] = byte(int8(roundClamp(v*inv, -128, 127)))
		}
	}
	return nil
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// nearestInt rounds f (|f| < 2^22) to the nearest integer, ties to even,
// by letting the float adder do it: adding 1.5·2^23 leaves round(f) in the
// low mantissa bits.
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x7fffff) - 0x400000
}

func clampInt(v, lo, hi int32) int32 { return min(max(v, lo), hi) }

// roundClamp rounds f to the nearest integer in [lo, hi]; clamping first
// keeps nearestInt in range and maps NaN to lo.
func roundClamp(f float32, lo, hi int32) int32 {
	if !(f >= float32(lo)) {
		return lo
	}
	if f > float32(hi) {
		return hi
	}
	return nearestInt(f)
}

// int8Scale returns the step for symmetric int8 codes of x, using the
// whole [-128, 127] range: max(−min(x)/128, max(x)/127).
func int8Scale(x []float32) float32 {
	var neg, pos float32
	for _, v := range x {
		neg = min(neg, v)
		pos = max(pos, v)
	}
	return max(-neg/128, pos/127)
}

// quantQ8_0 encodes one Q8_0 block: d = int8Scale(x) rounded to fp16,
// q = round(x/d) in [-128, 127].
func quantQ8_0(x *[32]float32, b *[q80Bytes]byte) error {
	d := int8Scale(x[:])
	if d > maxHalf {
		return fmt.Errorf("Q8_0 block scale %v exceeds the fp16 range", d)
	}
	dh := F32ToF16(d)
	binary.LittleEndian.PutUint16(b[0:], dh)
	df := F16ToF32(dh)
	if df == 0 {
		clear(b[2:])
		return nil
	}
	inv := 1 / df
	for l, v := range x {
		b[2+l] = byte(int8(roundClamp(v*inv, -128, 127)))
	}
	return nil
}

// ---------------------------------------------------------------------------
// Q4_K / Q5_K: x ≈ d·sc_s·q − dmin·m_s per 32-element sub-block s, with
// q ∈ [0, nmax], 6-bit sc_s and m_s, fp16 d and dmin.

// kEncoder holds the scratch of the affine K-quant encoder.
type kEncoder struct {
	scale, min [8]float32 // unquantized per-sub-block fit
	l          [QK_K]uint8
}

// fitAffine finds s >= 0 and m >= 0 minimising Σ (s·q_i − m − x_i)² with
// q_i = clamp(round((x_i+m)/s), 0, nmax). It tries a grid of step sizes
// around (max−min)/nmax — from one level coarser to two levels finer,
// which clips the extremes in exchange for a finer grid, plus whole step
// counts down to nmax/2 — rounds the data
// for each, refits s and m by least squares for those q, and keeps the
// candidate with the smallest squared error; two refinement rounds then
// re-round with the best fit and refit again. w is Σq² of the fit, the
// weight of an error in s.
func fitAffine(x *[32]float32, nmax int32) (s, m float32, w float64) {
	xmin, xmax := x[0], x[0]
	var sx, sxx float64
	for _, v := range x {
		xmin = min(xmin, v)
		xmax = max(xmax, v)
		sx += float64(v)
		sxx += float64(v) * float64(v)
	}
	xmin = min(xmin, 0) // m >= 0: the grid must reach down to 0 or below
	if xmax <= xmin {
		return 0, -xmin, 0
	}
	rng := xmax - xmin
	bestErr := math.Inf(1)
	var bestS, bestB, bestW float64
	try := func(s, b float32) {
		// Re-round with (s, b) then refit by least squares.
		var sl, sll int32
		var slx float32
		is := 1 / s
		for _, v := range x {
			q := roundClamp((v-b)*is, 0, nmax)
			sl += q
			sll += q * q
			slx += float32(q) * v
		}
		fs, fb, e := lsqAffine(32, float64(sl), float64(sll), float64(slx), sx, sxx)
		if e < bestErr && fs > 0 {
			bestErr, bestS, bestB, bestW = e, fs, fb, float64(sll)
		}
	}
	n := float32(nmax)
	for k := -4; k <= 8; k++ {
		try(rng/(n+float32(k)*0.25), xmin)
	}
	// Data that does not span the whole level range (re-encoded decodes,
	// sub-blocks with a few wide outliers) fits a grid with fewer steps
	// across its range; integer step counts find such grids exactly.
	for c := nmax - 2; c >= nmax/2; c-- {
		try(rng/float32(c), xmin)
	}
	for it := 0; it < 2 && bestS > 0; it++ {
		try(float32(bestS), float32(bestB))
	}
	if bestS <= 0 {
		return rng / n, -xmin, 1
	}
	return float32(bestS), float32(-bestB), bestW
}

// superScale picks the fp16 super-block scale d for the sub-block values v
// (scales or mins), which are stored as integer codes in [lo, hi] with
// v_s ≈ d·code_s. It tries d = max|v|/c for c from hi down to hi/2 and
// keeps the one minimising Σ w_s·(v_s − d·round(v_s/d))², so data that
// already came from a block with a smaller top code is matched exactly.
func superScale(v []float32, w []float64, lo, hi int32) (uint16, float32) {
	var vmax float32
	for _, x := range v {
		vmax = max(vmax, abs32(x))
	}
	if vmax == 0 {
		return 0, 0
	}
	best := math.Inf(1)
	var bh uint16
	for c := hi; c >= hi/2; c-- {
		h := F32ToF16(vmax / float32(c))
		d := F16ToF32(h)
		if d == 0 {
			continue
		}
		var e float64
		for s, x := range v {
			r := float64(x - d*float32(roundClamp(x/d, lo, hi)))
			e += w[s] * r * r
		}
		if e < best {
			best, bh = e, h
		}
	}
	return bh, F16ToF32(bh)
}

// lsqAffine solves min over (s, b) of Σ (s·q_i + b − x_i)² subject to
// b <= 0 from the sums of q, q², q·x, x and x² over n points, returning the
// fit and its squared error.
func lsqAffine(n, sl, sll, slx, sx, sxx float64) (s, b, err float64) {
	det := n*sll - sl*sl
	if det > 0 {
		s = (n*slx - sl*sx) / det
		b = (sll*sx - sl*slx) / det
	}
	if det <= 0 || b > 0 {
		b = 0
		if sll == 0 {
			return 0, 0, sxx
		}
		s = slx / sll
	}
	err = sxx - 2*s*slx - 2*b*sx + s*s*sll + 2*s*b*sl + n*b*b
	return s, b, err
}

// affineErr is the squared error of encoding x with the exact decoded
// scale d1 and min m1 (value = d1·q − m1), q chosen by rounding.
func affineErr(x *[32]float32, d1, m1 float32, nmax int32) float64 {
	var e float64
	if d1 == 0 {
		for _, v := range x {
			r := float64(-m1 - v)
			e += r * r
		}
		return e
	}
	inv := 1 / d1
	for _, v := range x {
		q := roundClamp((v+m1)*inv, 0, nmax)
		r := float64(float32(d1*float32(q)) - m1 - v)
		e += r * r
	}
	return e
}

// refineAffine searches 6-bit (scale, min) codes near (is, im) against the
// exact decode. For each scale code within ±1 it re-derives the min code by
// alternating rounding and a least-squares min (a sub-block whose data
// skips the lowest levels fits equally well with q shifted by one, which
// moves the unquantized min by a whole step; this pulls it back onto the
// dmin grid), then tries that code ±1, keeping the pair with the smallest
// squared error.
func refineAffine(x *[32]float32, d, dmin float32, is, im, nmax int32) (int32, int32) {
	best := math.Inf(1)
	bs, bm := is, im
	for ts := max(is-1, 0); ts <= min(is+1, 63); ts++ {
		d1 := d * float32(ts)
		tm := im
		for it := 0; it < 3 && dmin > 0; it++ {
			m1 := dmin * float32(tm)
			var sum float64
			for _, v := range x {
				var q int32
				if d1 > 0 {
					q = roundClamp((v+m1)/d1, 0, nmax)
				}
				sum += float64(d1*float32(q) - v)
			}
			next := roundClamp(float32(sum/32)/dmin, 0, 63)
			if next == tm {
				break
			}
			tm = next
		}
		for c := max(tm-1, 0); c <= min(tm+1, 63); c++ {
			if err := affineErr(x, d1, dmin*float32(c), nmax); err < best {
				best, bs, bm = err, ts, c
			}
		}
		if im != tm && (im < tm-1 || im > tm+1) {
			if err := affineErr(x, d1, dmin*float32(im), nmax); err < best {
				best, bs, bm = err, ts, im
			}
		}
	}
	return bs, bm
}

// encodeAffine computes the super-block scales and 6-bit sub-block codes
// for x, writing d, dmin and the packed scales to b[0:16] and the chosen
// quants to e.l.
func (e *kEncoder) encodeAffine(x *[QK_K]float32, b []byte, nmax int32, name string) error {
	var maxS, maxM float32
	var ws, wm [8]float64
	for s := 0; s < 8; s++ {
		e.scale[s], e.min[s], ws[s] = fitAffine((*[32]float32)(x[32*s:]), nmax)
		wm[s] = 32
		maxS = max(maxS, e.scale[s])
		maxM = max(maxM, e.min[s])
	}
	if maxS/32 > maxHalf || maxM/32 > maxHalf {
		return fmt.Errorf("%s block range exceeds the fp16 scale range", name)
	}
	dh, d := superScale(e.scale[:], ws[:], 0, 63)
	mh, dmin := superScale(e.min[:], wm[:], 0, 63)
	var sc, mn [8]uint8
	for s := 0; s < 8; s++ {
		var is, im int32
		if d > 0 {
			is = roundClamp(e.scale[s]/d, 0, 63)
		}
		if dmin > 0 {
			im = roundClamp(e.min[s]/dmin, 0, 63)
		}
		xs := (*[32]float32)(x[32*s:])
		bs, bm := refineAffine(xs, d, dmin, is, im, nmax)
		sc[s], mn[s] = uint8(bs), uint8(bm)
		d1, m1 := d*float32(bs), dmin*float32(bm)
		for l, v := range xs {
			var q int32
			if d1 > 0 {
				q = roundClamp((v+m1)/d1, 0, nmax)
			}
			e.l[32*s+l] = uint8(q)
		}
	}
	binary.LittleEndian.PutUint16(b[0:], dh)
	binary.LittleEndian.PutUint16(b[2:], mh)
	packScaleMinK4(&sc, &mn, (*[12]byte)(b[q4kScales:]))
	return nil
}

// quantQ4K encodes one Q4_K super-block.
func (e *kEncoder) quantQ4K(x *[QK_K]float32, b *[q4kBytes]byte) error {
	if err := e.encodeAffine(x, b[:], 15, "Q4_K"); err != nil {
		return err
	}
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			b[q4kQs+32*j+l] = e.l[64*j+l] | e.l[64*j+32+l]<<4
		}
	}
	return nil
}

// quantQ5K encodes one Q5_K super-block: Q4_K's search with 32 levels; bit
// 4 of element 32s+l goes to bit s of qh[l].
func (e *kEncoder) quantQ5K(x *[QK_K]float32, b *[q5kBytes]byte) error {
	if err := e.encodeAffine(x, b[:], 31, "Q5_K"); err != nil {
		return err
	}
	var qh [32]byte
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			lo, hi := e.l[64*j+l], e.l[64*j+32+l]
			b[q5kQs+32*j+l] = lo&15 | (hi&15)<<4
			qh[l] |= (lo>>4)<<(2*j) | (hi>>4)<<(2*j+1)
		}
	}
	copy(b[q5kQh:], qh[:])
	return nil
}

// ---------------------------------------------------------------------------
// Q6_K: x ≈ d·sc_g·(q−32) per 16-element group g, q ∈ [0, 63], int8 sc_g,
// fp16 d.

// fitSym finds the scale s minimising Σ (s·q_i − x_i)² with q_i =
// clamp(round(x_i/s), −32, 31). Candidates map the largest-magnitude value
// to −32 or +31 levels (± up to 0.8 of a level, so a slightly clipped,
// finer grid can win); for each, q is rounded and s refitted by least
// squares (s = Σqx/Σq²), keeping the best, which is then refined by two
// more round-and-refit passes. w is Σq² of the fit, the weight of an error
// in s.
func fitSym(x *[16]float32) (s float32, w float64) {
	var amax, vmax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, vmax = a, v
		}
	}
	if amax == 0 {
		return 0, 0
	}
	bestGain := -1.0
	var best, bestW float64
	try := func(is float32) {
		var sqq int32
		var sqx float32
		for _, v := range x {
			q := roundClamp(v*is, -32, 31)
			sqq += q * q
			sqx += float32(q) * v
		}
		if sqq == 0 {
			return
		}
		// Squared error = Σx² − sqx²/sqq; maximise the gain.
		qq, qx := float64(sqq), float64(sqx)
		if g := qx * qx / qq; g > bestGain {
			bestGain, best, bestW = g, qx/qq, qq
		}
	}
	for k := -4; k <= 4; k++ {
		try(-(32 + 0.2*float32(k)) / vmax)
		try((31 + 0.2*float32(k)) / vmax)
	}
	for it := 0; it < 2 && best != 0; it++ {
		try(float32(1 / best))
	}
	return float32(best), bestW
}

// symErr is the squared error of encoding x with the exact decoded group
// scale d1.
func symErr(x *[16]float32, d1 float32) float64 {
	var e float64
	if d1 == 0 {
		for _, v := range x {
			e += float64(v) * float64(v)
		}
		return e
	}
	inv := 1 / d1
	for _, v := range x {
		q := roundClamp(v*inv, -32, 31)
		r := float64(d1*float32(q) - v)
		e += r * r
	}
	return e
}

// quantQ6K encodes one Q6_K super-block: fit each group's scale, set d =
// max|scale|/127 (fp16), round each scale to int8 and try its two
// neighbours on each side against the exact decode, then round the quants.
func quantQ6K(x *[QK_K]float32, b *[q6kBytes]byte) error {
	var scale [16]float32
	var w [16]float64
	var maxS float32
	for g := 0; g < 16; g++ {
		scale[g], w[g] = fitSym((*[16]float32)(x[16*g:]))
		maxS = max(maxS, abs32(scale[g]))
	}
	if maxS/64 > maxHalf {
		return fmt.Errorf("Q6_K block range exceeds the fp16 scale range")
	}
	dh, d := superScale(scale[:], w[:], -128, 127)
	var l [QK_K]uint8
	for g := 0; g < 16; g++ {
		xs := (*[16]float32)(x[16*g:])
		var is int32
		if d > 0 {
			is = roundClamp(scale[g]/d, -128, 127)
		}
		best := math.Inf(1)
		bs := is
		for ts := max(is-2, -128); ts <= min(is+2, 127); ts++ {
			if err := symErr(xs, d*float32(ts)); err < best {
				best, bs = err, ts
			}
		}
		b[q6kScales+g] = byte(int8(bs))
		d1 := d * float32(bs)
		for i, v := range xs {
			var q int32
			if d1 != 0 {
				q = roundClamp(v/d1, -32, 31)
			}
			l[16*g+i] = uint8(q + 32)
		}
	}
	for n := 0; n < 2; n++ {
		ql := (*[64]byte)(b[64*n:])
		qh := (*[32]byte)(b[q6kQh+32*n:])
		e := (*[128]uint8)(l[128*n:])
		for i := 0; i < 32; i++ {
			ql[i] = e[i]&15 | (e[i+64]&15)<<4
			ql[i+32] = e[i+32]&15 | (e[i+96]&15)<<4
			qh[i] = e[i]>>4 | (e[i+32]>>4)<<2 | (e[i+64]>>4)<<4 | (e[i+96]>>4)<<6
		}
	}
	binary.LittleEndian.PutUint16(b[q6kD:], dh)
	return nil
}
