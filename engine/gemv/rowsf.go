package gemv

import "fmt"

// DotRows and AddRows are attention's float products over a cache: a
// query's dot product with each position's key, and the values' sum
// weighted by the scores. Rows lie stride elements apart (a head's slice
// of each position's row). They run AVX-512 kernels where impl allows and
// the row length is a multiple of 64 (a head's width), else plain Go; the
// two sum in different orders and agree within float32 rounding
// (TestRowsF).

// DotRows sets y[r] to q's dot product with k[r·stride : r·stride+len(q)]
// for every r below len(y).
func DotRows(impl Impl, q, k []float32, stride int, y []float32) error {
	n := len(q)
	if err := checkRowsF(len(k), stride, n, len(y)); err != nil {
		return fmt.Errorf("gemv: dot rows: %w", err)
	}
	if len(y) == 0 {
		return nil
	}
	if rowsF(impl, n) {
		dotRowsAVX512(&q[0], &k[0], 4*stride, len(y), n, &y[0])
		return nil
	}
	for r := range y {
		row := k[r*stride : r*stride+n]
		var s0, s1, s2, s3 float32
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 += q[i] * row[i]
			s1 += q[i+1] * row[i+1]
			s2 += q[i+2] * row[i+2]
			s3 += q[i+3] * row[i+3]
		}
		for ; i < n; i++ {
			s0 += q[i] * row[i]
		}
		y[r] = (s0 + s1) + (s2 + s3)
	}
	return nil
}

// AddRows adds w[r]·v[r·stride : r·stride+len(out)] to out for every r
// below len(w), in order.
func AddRows(impl Impl, out, w, v []float32, stride int) error {
	n := len(out)
	if err := checkRowsF(len(v), stride, n, len(w)); err != nil {
		return fmt.Errorf("gemv: add rows: %w", err)
	}
	if len(w) == 0 || n == 0 {
		return nil
	}
	if rowsF(impl, n) {
		addRowsAVX512(&out[0], &w[0], &v[0], 4*stride, len(w), n)
		return nil
	}
	for r, a := range w {
		row := v[r*stride : r*stride+n]
		for i := range out {
			out[i] += a * row[i]
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
