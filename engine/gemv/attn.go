package gemv

import (
	"fmt"
	"math"
)

// Attention on the CPU, four queries of one key-value head at a time
// (engine/model runs every token's heads in blocks so): the scores
// against the head's keys, laid out in vectors of KeyLanes keys (the
// CPU cache's key strips), so that each key's score takes one lane and
// four queries share every load; each score row's softmax; the values'
// sum weighted by four rows of probabilities, each value row read once
// for the four. One query at a time, every key and value row would be
// read once per query head, and each dot product reduced across lanes.
//
// Every output is one sum in a fixed order over its own inputs (d in
// order for a score, keys in order for a mixed value), so it does not
// depend on the other queries of its block, nor on how many keys the
// block spans past its own: a probability of 0 adds nothing. The kernels
// run where AttnBlock says (AVX-512 for heads of a multiple of 64
// elements, AVX2 for a multiple of 16); the plain Go below is their
// definition and the fallback, and agrees with them within float32
// rounding (the kernels fuse each multiply-add, and the softmax's
// exponential is a polynomial). Scores and mixed values are the same bits
// in both kernel families (the same fused chains); the softmax's sums are
// not (their lanes group differently).

// KeyLanes is how many keys a key vector holds side by side: key j's
// element d lies at (j/KeyLanes)·vStride + d·dStride + j%KeyLanes.
const KeyLanes = 16

// KeyBlock is how many keys Scores4 scores at a time: a score row's
// length is a multiple of it.
const KeyBlock = 64

// SoftmaxBlock is the multiple a row's length must be for Softmax.
const SoftmaxBlock = 16

// AttnBlock reports whether Scores4, Softmax and Mix4 run vector kernels
// (AVX-512 or AVX2) for heads of n elements.
func AttnBlock(impl Impl, n int) bool { return attnF(impl, n) != Go }

// Scores4 sets s[i·sStride+j] to Σ_d q[4d+i]·K(j, d) for the four
// queries i of q, interleaved (q[4d+i] is query i's element d; n elements
// each), and keys j below keys (a multiple of KeyBlock), key j's element
// d being k[(j/KeyLanes)·vStride + d·dStride + j%KeyLanes].
func Scores4(impl Impl, q []float32, n int, k []float32, dStride, vStride, keys int, s []float32, sStride int) error {
	switch {
	case n <= 0 || len(q) < 4*n:
		return fmt.Errorf("gemv: scores4: %d elements of queries for 4 of %d", len(q), n)
	case keys < 0 || keys%KeyBlock != 0:
		return fmt.Errorf("gemv: scores4: %d keys, not a multiple of %d", keys, KeyBlock)
	case dStride < KeyLanes || vStride < KeyLanes:
		return fmt.Errorf("gemv: scores4: key vectors %d apart with elements %d apart", vStride, dStride)
	case sStride < keys || len(s) < 3*sStride+keys:
		return fmt.Errorf("gemv: scores4: 4 rows of %d scores %d apart in %d elements", keys, sStride, len(s))
	}
	if keys == 0 {
		return nil
	}
	if need := (keys/KeyLanes-1)*vStride + (n-1)*dStride + KeyLanes; len(k) < need {
		return fmt.Errorf("gemv: scores4: %d keys of %d elements need %d elements, have %d", keys, n, need, len(k))
	}
	switch attnF(impl, n) {
	case AVX512:
		scores4AVX512(&q[0], n, &k[0], 4*dStride, 4*vStride, keys, &s[0], 4*sStride)
		return nil
	case AVX2:
		scores4AVX2(&q[0], n, &k[0], 4*dStride, 4*vStride, keys, &s[0], 4*sStride)
		return nil
	}
	for i := range 4 {
		row := s[i*sStride : i*sStride+keys]
		clear(row)
		for d := range n {
			a := q[4*d+i]
			for v := range keys / KeyLanes {
				kv := k[v*vStride+d*dStride : v*vStride+d*dStride+KeyLanes]
				rv := row[v*KeyLanes : (v+1)*KeyLanes]
				for j, x := range kv {
					rv[j] += a * x
				}
			}
		}
	}
	return nil
}

// Softmax sets s to softmax(s·scale): e^(s[j]·scale − m) over their
// float64 sum, m the largest s[j]·scale; scale is positive and len(s) a
// positive multiple of SoftmaxBlock. Entries of −Inf (a row's padding)
// give 0; at least one must be finite. It returns m and the sum: softmaxes
// over parts of a row merge by them (each part's weight is its sum times
// e^(its m − the row's)).
func Softmax(impl Impl, s []float32, scale float32) (m float32, sum float64, err error) {
	if len(s) == 0 || len(s)%SoftmaxBlock != 0 || !(scale > 0) {
		return 0, 0, fmt.Errorf("gemv: softmax of %d scores (a multiple of %d) at scale %v", len(s), SoftmaxBlock, scale)
	}
	switch vecF(impl) {
	case AVX512:
		m, sum = softmaxAVX512(&s[0], len(s), scale)
		return m, sum, nil
	case AVX2:
		m, sum = softmaxAVX2(&s[0], len(s), scale)
		return m, sum, nil
	}
	m = float32(math.Inf(-1))
	for _, v := range s {
		m = max(m, v*scale)
	}
	for j, v := range s {
		e := float32(math.Exp(float64(v*scale - m)))
		s[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range s {
		s[j] *= inv
	}
	return m, sum, nil
}

// Mix4 sets out[i·n+c] to Σ_j p[i·pStride+j]·v[j·vStride+c] for the four
// rows i of p, keys rows j of v in order and the n columns c of each; with
// acc it adds the sum to out, continuing its chain of roundings: keys
// mixed in two calls, the second with acc, give one call's bits.
func Mix4(impl Impl, p []float32, pStride int, v []float32, vStride, keys, n int, out []float32, acc bool) error {
	switch {
	case n <= 0 || len(out) < 4*n:
		return fmt.Errorf("gemv: mix4: %d elements of output for 4 rows of %d", len(out), n)
	case keys < 0 || pStride < keys || len(p) < 3*pStride+keys:
		return fmt.Errorf("gemv: mix4: 4 rows of %d weights %d apart in %d elements", keys, pStride, len(p))
	}
	if err := checkRowsF(len(v), vStride, n, keys); err != nil {
		return fmt.Errorf("gemv: mix4: %w", err)
	}
	if keys == 0 {
		if !acc {
			clear(out[:4*n])
		}
		return nil
	}
	switch attnF(impl, n) {
	case AVX512:
		mix4AVX512(&p[0], 4*pStride, &v[0], 4*vStride, keys, n, &out[0], acc)
		return nil
	case AVX2:
		mix4AVX2(&p[0], 4*pStride, &v[0], 4*vStride, keys, n, &out[0], acc)
		return nil
	}
	for i := range 4 {
		o := out[i*n : (i+1)*n]
		if !acc {
			clear(o)
		}
		for j, w := range p[i*pStride : i*pStride+keys] {
			row := v[j*vStride : j*vStride+n]
			for c := range o {
				o[c] += w * row[c]
			}
		}
	}
	return nil
}

// checkRowsF checks that rows rows of n elements stride apart lie in a
// slice of size elements.
func checkRowsF(size, stride, n, rows int) error {
	if rows == 0 {
		return nil
	}
	if stride < n || n < 0 {
		return fmt.Errorf("rows of %d elements %d apart overlap", n, stride)
	}
	if need := (rows-1)*stride + n; size < need {
		return fmt.Errorf("%d rows of %d elements %d apart need %d elements, have %d", rows, n, stride, need, size)
	}
	return nil
}
