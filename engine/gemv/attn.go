package gemv

import (
	"fmt"
	"math"
)

// A prompt's attention on the CPU, four queries of one key-value head at a
// time (engine/model runs a prompt's query heads in blocks so): the
// scores against the head's keys laid out transposed (TransposeKeys), so
// that each key's score takes one lane and four queries share every load;
// each score row's softmax; the values' sum weighted by four rows of
// probabilities, each value row read once for the four. DotRows and
// AddRows, one query a call, read a key and a value row per query and
// reduce each dot product across lanes.
//
// Every output is one sum in a fixed order over its own inputs (d in
// order for a score, keys in order for a mixed value), so it does not
// depend on the other queries of its block, nor on how many keys the
// block spans past its own: a probability of 0 adds nothing. The kernels
// run where AttnBlock says (AVX-512, heads of a multiple of 64); the
// plain Go below is their definition and the fallback, and agrees with
// them within float32 rounding (the kernels fuse each multiply-add, and
// the softmax's exponential is a polynomial).

// KeyBlock is how many keys Scores4 scores at a time: a transposed key
// panel's width and a score row's length are multiples of it.
const KeyBlock = 64

// SoftmaxBlock is the multiple a row's length must be for Softmax.
const SoftmaxBlock = 16

// AttnBlock reports whether Scores4, Softmax and Mix4 run their AVX-512
// kernels for heads of n elements.
func AttnBlock(impl Impl, n int) bool { return rowsF(impl, n) }

// TransposeKeys writes keys rows of k (n elements each, stride apart) to
// the first keys columns of kt's n rows of width elements, kt[d·width+j]
// = k[j·stride+d]; the columns past them are left as they are (a panel is
// filled in ranges of keys, and the scores of columns past the last key
// are never read).
func TransposeKeys(kt []float32, width int, k []float32, stride, n, keys int) error {
	switch {
	case keys < 0 || n < 0 || width < keys:
		return fmt.Errorf("gemv: transpose keys: %d keys of %d elements into rows of %d", keys, n, width)
	case n > 0 && len(kt) < (n-1)*width+keys:
		return fmt.Errorf("gemv: transpose keys: %d rows of %d need %d elements, have %d", n, width, (n-1)*width+keys, len(kt))
	}
	if err := checkRowsF(len(k), stride, n, keys); err != nil {
		return fmt.Errorf("gemv: transpose keys: %w", err)
	}
	// Runs of 16 keys, written a panel row at a time: each write is a
	// run of 16 columns, and the reads stay in the 16 keys' cache lines.
	const b = 16
	for j0 := 0; j0 < keys; j0 += b {
		j1 := min(j0+b, keys)
		for d := range n {
			dst := kt[d*width+j0 : d*width+j1]
			src := k[j0*stride+d:]
			for j := range dst {
				dst[j] = src[j*stride]
			}
		}
	}
	return nil
}

// Scores4 sets s[i·sStride+j] to Σ_d q[4d+i]·kt[d·width+j] for the four
// queries i of q, interleaved (q[4d+i] is query i's element d; n elements
// each), and the first keys columns j of the transposed keys kt (n rows
// of width), keys a multiple of KeyBlock.
func Scores4(impl Impl, q []float32, n int, kt []float32, width, keys int, s []float32, sStride int) error {
	switch {
	case n <= 0 || len(q) < 4*n:
		return fmt.Errorf("gemv: scores4: %d elements of queries for 4 of %d", len(q), n)
	case keys < 0 || keys%KeyBlock != 0 || width < keys || len(kt) < (n-1)*width+keys:
		return fmt.Errorf("gemv: scores4: %d keys (a multiple of %d) in %d rows of %d: %d elements", keys, KeyBlock, n, width, len(kt))
	case sStride < keys || len(s) < 3*sStride+keys:
		return fmt.Errorf("gemv: scores4: 4 rows of %d scores %d apart in %d elements", keys, sStride, len(s))
	}
	if keys == 0 {
		return nil
	}
	if AttnBlock(impl, n) {
		scores4AVX512(&q[0], n, &kt[0], 4*width, keys, &s[0], 4*sStride)
		return nil
	}
	for i := range 4 {
		row := s[i*sStride : i*sStride+keys]
		clear(row)
		for d := range n {
			a := q[4*d+i]
			for j, k := range kt[d*width : d*width+keys] {
				row[j] += a * k
			}
		}
	}
	return nil
}

// Softmax sets s to softmax(s·scale): e^(s[j]·scale − m) over their
// float64 sum, m the largest s[j]·scale; scale is positive and len(s) a
// positive multiple of SoftmaxBlock. Entries of −Inf (a row's padding)
// give 0; at least one must be finite.
func Softmax(impl Impl, s []float32, scale float32) error {
	if len(s) == 0 || len(s)%SoftmaxBlock != 0 || !(scale > 0) {
		return fmt.Errorf("gemv: softmax of %d scores (a multiple of %d) at scale %v", len(s), SoftmaxBlock, scale)
	}
	if available(AVX512) && impl >= AVX512 {
		softmaxAVX512(&s[0], len(s), scale)
		return nil
	}
	m := float32(math.Inf(-1))
	for _, v := range s {
		m = max(m, v*scale)
	}
	var sum float64
	for j, v := range s {
		e := float32(math.Exp(float64(v*scale - m)))
		s[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range s {
		s[j] *= inv
	}
	return nil
}

// Mix4 sets out[i·n+c] to Σ_j p[i·pStride+j]·v[j·vStride+c] for the four
// rows i of p, keys rows j of v in order and the n columns c of each.
func Mix4(impl Impl, p []float32, pStride int, v []float32, vStride, keys, n int, out []float32) error {
	switch {
	case n <= 0 || len(out) < 4*n:
		return fmt.Errorf("gemv: mix4: %d elements of output for 4 rows of %d", len(out), n)
	case keys < 0 || pStride < keys || len(p) < 3*pStride+keys:
		return fmt.Errorf("gemv: mix4: 4 rows of %d weights %d apart in %d elements", keys, pStride, len(p))
	}
	if err := checkRowsF(len(v), vStride, n, keys); err != nil {
		return fmt.Errorf("gemv: mix4: %w", err)
	}
	if AttnBlock(impl, n) {
		if keys == 0 {
			clear(out[:4*n])
			return nil
		}
		mix4AVX512(&p[0], 4*pStride, &v[0], 4*vStride, keys, n, &out[0])
		return nil
	}
	for i := range 4 {
		o := out[i*n : (i+1)*n]
		clear(o)
		for j, w := range p[i*pStride : i*pStride+keys] {
			row := v[j*vStride : j*vStride+n]
			for c := range o {
				o[c] += w * row[c]
			}
		}
	}
	return nil
}
