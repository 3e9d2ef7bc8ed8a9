package gemv

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/strata-llm/strata/engine/quant"
)

// Impl is a family of kernels: the pure-Go reference or a SIMD level.
type Impl int

const (
	// Go is the pure-Go reference, on every machine.
	Go Impl = iota
	// AVX2 needs AVX2, FMA and F16C (x86-64 since about 2013).
	AVX2
	// AVX512 needs AVX-512 F, BW and VL; it uses VNNI where present.
	AVX512
)

func (i Impl) String() string {
	switch i {
	case Go:
		return "go"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("impl(%d)", int(i))
}

// ErrUnsupported is returned for a weight type no kernel of an Impl takes.
var ErrUnsupported = errors.New("gemv: unsupported")

// kernel computes y[r] for rows consecutive rows of n elements, stride
// bytes apart, starting at w. Each format's kernel reads the parts of x it
// needs: q, d and s for the quantized formats, f for the float ones.
type kernel func(w *byte, stride, rows, n int, q *int16, d *float32, s *int32, f *float32, y *float32)

// Impls lists the kernel families this machine can run, best last.
func Impls() []Impl {
	out := []Impl{Go}
	for _, i := range []Impl{AVX2, AVX512} {
		if available(i) {
			out = append(out, i)
		}
	}
	return out
}

// Detect is the best kernel family this machine runs.
func Detect() Impl {
	l := Impls()
	return l[len(l)-1]
}

// Supports reports whether t has a kernel in impl (the Go reference takes
// every format the package knows).
func Supports(impl Impl, t quant.Type) bool {
	if impl == Go {
		return refKnown(t)
	}
	return lookup(impl, t) != nil
}

func refKnown(t quant.Type) bool {
	switch t {
	case quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.INT8Row, quant.F16, quant.BF16, quant.F32:
		return true
	}
	return false
}

// Rows computes y[i] = row i · x for the len(y) encoded rows of n elements
// in rows, with impl's kernel for t (types impl lacks, and row lengths its
// kernel does not take, run the reference, which returns the same bits for
// the quantized formats). It allocates nothing.
func Rows(impl Impl, t quant.Type, rows []byte, n int, x *X, y []float32) error {
	if x.N != n {
		return fmt.Errorf("gemv: vector has %d elements, rows have %d", x.N, n)
	}
	rb, err := checkRows(t, rows, n, len(y))
	if err != nil {
		return err
	}
	rowsStride(impl, t, rows, rb, rb, n, x, y)
	return nil
}

// RowsStride is Rows over rows that lie stride bytes apart, each of n
// elements: a view of the first n columns of a wider matrix (n a whole
// number of t's blocks), whose rows are stride bytes long. rows runs from
// the first row's start to the last row's end.
func RowsStride(impl Impl, t quant.Type, rows []byte, stride, n int, x *X, y []float32) error {
	if x.N != n {
		return fmt.Errorf("gemv: vector has %d elements, rows have %d", x.N, n)
	}
	rb, err := checkStride(t, rows, stride, n, len(y))
	if err != nil {
		return err
	}
	rowsStride(impl, t, rows, rb, stride, n, x, y)
	return nil
}

// rowsStride is Rows over checked rows of rb bytes, stride bytes apart.
func rowsStride(impl Impl, t quant.Type, rows []byte, rb, stride, n int, x *X, y []float32) {
	if len(y) == 0 {
		return
	}
	if impl != Go && n > 0 && n%blockOf(t) == 0 { // the kernels take at least one block
		if k := lookup(impl, t); k != nil {
			k(unsafe.SliceData(rows), stride, len(y), n, unsafe.SliceData(x.Q), unsafe.SliceData(x.D), unsafe.SliceData(x.S), unsafe.SliceData(x.F), unsafe.SliceData(y))
			return
		}
	}
	for i := range y {
		y[i] = refRow(t, rows[i*stride:i*stride+rb], n, x)
	}
}

// blockOf is the row length granularity a SIMD kernel of t needs.
func blockOf(t quant.Type) int {
	switch t {
	case quant.Q8_0, quant.Q4_0:
		return 32
	case quant.F16, quant.BF16, quant.F32:
		return 16
	}
	return Block
}

// tile is how many rows RowsBatch takes through every vector before
// moving on: a tile of the widest rows (14336 Q6_K elements, ~12 KiB a
// row) stays within a core's L2, so the weights come from memory once.
const tile = 16

// RowsBatch computes ys[j][i] = row i · xs[j] for every vector: each tile
// of rows is read from memory once and dotted with every vector while it
// sits in cache. ys[j] must each have one element per row.
func RowsBatch(impl Impl, t quant.Type, rows []byte, n int, xs []*X, ys [][]float32) error {
	nr, err := checkBatch(xs, ys, n)
	if err != nil || len(xs) == 0 {
		return err
	}
	rb, err := checkRows(t, rows, n, nr)
	if err != nil {
		return err
	}
	rowsBatchStride(impl, t, rows, rb, rb, n, xs, ys, nr)
	return nil
}

// RowsBatchStride is RowsBatch over rows stride bytes apart, as
// RowsStride.
func RowsBatchStride(impl Impl, t quant.Type, rows []byte, stride, n int, xs []*X, ys [][]float32) error {
	nr, err := checkBatch(xs, ys, n)
	if err != nil || len(xs) == 0 {
		return err
	}
	rb, err := checkStride(t, rows, stride, n, nr)
	if err != nil {
		return err
	}
	rowsBatchStride(impl, t, rows, rb, stride, n, xs, ys, nr)
	return nil
}

// rowsBatchStride is RowsBatch over nr checked rows of rb bytes, stride
// bytes apart.
func rowsBatchStride(impl Impl, t quant.Type, rows []byte, rb, stride, n int, xs []*X, ys [][]float32, nr int) {
	for r0 := 0; r0 < nr; r0 += tile {
		r1 := min(r0+tile, nr)
		for j, x := range xs {
			rowsStride(impl, t, rows[r0*stride:(r1-1)*stride+rb], rb, stride, n, x, ys[j][r0:r1])
		}
	}
}

// checkBatch checks that there is an output per vector, every output of
// the same length (returned: the rows) and every vector of n elements.
func checkBatch(xs []*X, ys [][]float32, n int) (int, error) {
	if len(xs) != len(ys) {
		return 0, fmt.Errorf("gemv: %d vectors but %d outputs", len(xs), len(ys))
	}
	if len(xs) == 0 {
		return 0, nil
	}
	nr := len(ys[0])
	for j := range ys {
		if len(ys[j]) != nr {
			return 0, fmt.Errorf("gemv: output %d has %d rows, output 0 has %d", j, len(ys[j]), nr)
		}
		if xs[j].N != n {
			return 0, fmt.Errorf("gemv: vector %d has %d elements, rows have %d", j, xs[j].N, n)
		}
	}
	return nr, nil
}
