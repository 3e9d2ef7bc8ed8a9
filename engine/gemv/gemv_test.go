package gemv

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

var allTypes = []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.INT8Row, quant.F16, quant.BF16, quant.F32}

// randomRows returns rows of n elements of t: realistic weights from
// quant.FillRandomRows, or, with wild, random bytes whose scales are
// finite (every quant and 6-bit scale at any value, the case that tests
// the integer bounds).
func randomRows(t testing.TB, typ quant.Type, rows, n int, seed uint64, wild bool) []byte {
	t.Helper()
	rb, err := typ.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, int(rb)*rows)
	if !wild {
		if err := quant.FillRandomRows(typ, buf, n, seed, 0.02); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	half := func(b []byte) { binary.LittleEndian.PutUint16(b, quant.F32ToF16(float32(r.NormFloat64()*0.01))) }
	for row := 0; row < rows; row++ {
		rw := buf[row*int(rb) : (row+1)*int(rb)]
		switch typ {
		case quant.Q4_K, quant.Q5_K:
			bb := map[quant.Type]int{quant.Q4_K: q4kBytes, quant.Q5_K: q5kBytes}[typ]
			for b := 0; b < n/Block; b++ {
				half(rw[b*bb:])
				half(rw[b*bb+2:])
			}
		case quant.Q6_K:
			for b := 0; b < n/Block; b++ {
				half(rw[b*q6kBytes+208:])
			}
		case quant.Q8_0, quant.Q4_0:
			bb := map[quant.Type]int{quant.Q8_0: q8Bytes, quant.Q4_0: q4Bytes}[typ]
			for b := 0; b < n/32; b++ {
				half(rw[b*bb:])
			}
		case quant.INT8Row:
			binary.LittleEndian.PutUint32(rw, math.Float32bits(0.01))
		default:
			if err := quant.FillRandomRows(typ, rw, n, seed+uint64(row), 0.02); err != nil {
				t.Fatal(err)
			}
		}
	}
	return buf
}

// viewBatch is a batched case's weights and vectors: rows rows of width
// elements of typ (full), their first n columns as a view (rows, stride
// bytes apart; all of them where n is width), and batch vectors of n
// elements; wild as randomRows and randomVector take it.
func viewBatch(t testing.TB, typ quant.Type, nrows, n, width, batch int, wild bool) (full, rows []byte, stride int, xs []*X) {
	t.Helper()
	full = randomRows(t, typ, nrows, width, uint64(batch), wild)
	stride = len(full) / nrows
	rb, err := typ.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	rows = full[:(nrows-1)*stride+int(rb)]
	xs = make([]*X, batch)
	for j := range xs {
		xs[j] = new(X)
		if err := xs[j].Set(randomVector(n, uint64(7*j+1), wild)); err != nil {
			t.Fatal(err)
		}
	}
	return full, rows, stride, xs
}

// randomVector draws n values; with extreme, every block holds ±its
// largest value everywhere (every quant at ±Range, the integer bound).
func randomVector(n int, seed uint64, extreme bool) []float32 {
	r := rand.New(rand.NewPCG(seed, 11))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
		if extreme {
			v[i] = float32(math.Copysign(3, float64(v[i])))
			if r.IntN(8) == 0 {
				v[i] = 3 // a run of one sign
			}
		}
	}
	if n > 3 && !extreme {
		v[3] = 40 // an outlier, as real activations have
	}
	return v
}

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// TestKernelsMatchReference: every SIMD kernel returns the reference's
// bits for the quantized formats (the float ones within floatTol of it),
// on realistic and on wild weights, for several shapes and row counts.
func TestKernelsMatchReference(t *testing.T) {
	t.Parallel()
	for _, impl := range Impls()[1:] {
		for _, typ := range allTypes {
			if !Supports(impl, typ) {
				continue
			}
			matchReference(t, impl.String(), typ, func(w []byte, n int, x *X, y []float32) error {
				return Rows(impl, typ, w, n, x, y)
			})
		}
	}
}

// matchReference checks one kernel, called through run, against the
// reference on every shape, weight kind and vector kind, as parallel
// subtests under label.
func matchReference(t *testing.T, label string, typ quant.Type, run func(w []byte, n int, x *X, y []float32) error) {
	// Whole 256-element blocks, an odd count of them (eleven: the kernels
	// that take eight blocks at a time, and then one at a time), and for the formats
	// of finer granularity rows with a partial last block (after none,
	// some or many whole ones).
	for _, n := range []int{96, 160, 256, 512, 1152, 1280, 2816, 4096, 1024 + 32*3, 4096 + 32*7} {
		if n%blockOf(typ) != 0 || typ.Known() && func() bool { _, err := typ.RowBytes(int64(n)); return err != nil }() {
			continue
		}
		for _, wild := range []bool{false, true} {
			for _, extreme := range []bool{false, true} {
				name := fmt.Sprintf("%s/%v/n%d/wild=%v/extreme=%v", label, typ, n, wild, extreme)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					rows := 13
					w := randomRows(t, typ, rows, n, uint64(n)+7, wild)
					var x X
					if err := x.Set(randomVector(n, uint64(n), extreme)); err != nil {
						t.Fatal(err)
					}
					got := make([]float32, rows)
					for i := range got {
						got[i] = float32(math.NaN())
					}
					if err := run(w, n, &x, got); err != nil {
						t.Fatal(err)
					}
					want := make([]float32, rows)
					if err := Rows(Go, typ, w, n, &x, want); err != nil {
						t.Fatal(err)
					}
					rb := len(w) / rows
					for i := range got {
						if isFloat(typ) {
							if tol := floatTol * absDot(typ, w[i*rb:(i+1)*rb], &x); math.Abs(float64(got[i]-want[i])) > tol {
								t.Fatalf("row %d: %g, reference %g (tolerance %g)", i, got[i], want[i], tol)
							}
							continue
						}
						if !sameBits(got[i], want[i]) {
							t.Fatalf("row %d: %g (%#x), reference %g (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				})
			}
		}
	}
}

// floatTol bounds a float kernel's error relative to Σ|w·x|: float32
// fused multiply-adds in a different order than the float64 reference.
const floatTol = 1e-6

func isFloat(t quant.Type) bool { return t == quant.F16 || t == quant.BF16 || t == quant.F32 }

func absDot(t quant.Type, row []byte, x *X) float64 {
	w := make([]float32, x.N)
	if err := quant.Dequantize(t, row, w); err != nil {
		panic(err)
	}
	var s float64
	for i, v := range w {
		s += math.Abs(float64(v) * float64(x.F[i]))
	}
	return s
}

// TestReferenceAgainstFloat: the 12-bit vector keeps the product close to
// quant's float32 reference (the CPU model's): NMSE over a matrix below
// 1e-5 for every format, with an outlier 40 times the typical element in
// the vector (without one it is near 2e-7).
func TestReferenceAgainstFloat(t *testing.T) {
	t.Parallel()
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			t.Parallel()
			const rows, n = 64, 1024
			w := randomRows(t, typ, rows, n, 3, false)
			v := randomVector(n, 5, false)
			var x X
			if err := x.Set(v); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, rows)
			if err := Rows(Go, typ, w, n, &x, got); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, rows)
			if err := quant.DotRows(typ, w, n, v, want); err != nil {
				t.Fatal(err)
			}
			if e := quant.NMSE(got, want); !(e <= 1e-5) {
				t.Fatalf("NMSE %.3g against quant.DotRows", e)
			}
		})
	}
}

func TestSetVector(t *testing.T) {
	t.Parallel()
	var x X
	v := randomVector(300, 1, false)
	v[299] = 0
	if err := x.Set(v); err != nil {
		t.Fatal(err)
	}
	if len(x.Q) != 512 || len(x.D) != 2 || len(x.S) != 16 || x.N != 300 {
		t.Fatalf("shape: %d quants, %d scales, %d sums, N %d", len(x.Q), len(x.D), len(x.S), x.N)
	}
	for i, q := range x.Q {
		if q > Range || q < -Range {
			t.Fatalf("q[%d] = %d outside ±%d", i, q, Range)
		}
		if i >= 300 && q != 0 {
			t.Fatalf("padding q[%d] = %d", i, q)
		}
		if i < 300 {
			if e := math.Abs(float64(v[i]) - float64(x.D[i/Block])*float64(q)); e > float64(x.D[i/Block])/2*1.0001 {
				t.Fatalf("element %d: %g quantized to %d·%g", i, v[i], q, x.D[i/Block])
			}
		}
	}
	for s := range x.S {
		var sum int32
		for _, q := range x.Q[s*Sub : (s+1)*Sub] {
			sum += int32(q)
		}
		if x.S[s] != sum {
			t.Fatalf("sum %d: %d, want %d", s, x.S[s], sum)
		}
	}
	if err := x.Set(make([]float32, 256)); err != nil || x.D[0] != 0 {
		t.Fatalf("zeros: %v, scale %g", err, x.D[0])
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		v[7] = bad
		if err := x.Set(v); err == nil {
			t.Fatalf("Set accepted %v", bad)
		}
	}
}

// badShapes are products every entry point must refuse, with a vector of
// 256 elements and two outputs: too few row bytes, a vector of the wrong
// length, a partial block, a type with no kernel.
var badShapes = []struct {
	name string
	typ  quant.Type
	rows []byte
	n    int
}{
	{"short rows", quant.Q4_K, make([]byte, 144), 256},
	{"vector length", quant.Q4_K, make([]byte, 288), 512},
	{"partial block", quant.Q4_K, make([]byte, 288), 250},
	{"unknown type", quant.Q6KA, make([]byte, 420), 256},
}

func TestRowsRejectsBadShapes(t *testing.T) {
	t.Parallel()
	var x X
	if err := x.Set(make([]float32, 256)); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, 2)
	for _, tc := range badShapes {
		for _, impl := range Impls() {
			if err := Rows(impl, tc.typ, tc.rows, tc.n, &x, y); err == nil {
				t.Errorf("%s (%v): no error", tc.name, impl)
			}
		}
	}
}

func TestRowsBatchMatchesRows(t *testing.T) {
	t.Parallel()
	const rows, n = 40, 512
	w := randomRows(t, quant.Q4_K, rows, n, 9, false)
	xs := make([]*X, 3)
	ys := make([][]float32, 3)
	for j := range xs {
		xs[j] = new(X)
		if err := xs[j].Set(randomVector(n, uint64(j), false)); err != nil {
			t.Fatal(err)
		}
		ys[j] = make([]float32, rows)
	}
	impl := Detect()
	if err := RowsBatch(impl, quant.Q4_K, w, n, xs, ys); err != nil {
		t.Fatal(err)
	}
	for j := range xs {
		want := make([]float32, rows)
		if err := Rows(Go, quant.Q4_K, w, n, xs[j], want); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !sameBits(ys[j][i], want[i]) {
				t.Fatalf("vector %d row %d: %g, want %g", j, i, ys[j][i], want[i])
			}
		}
	}
}

func TestRowsAllocatesNothing(t *testing.T) {
	const rows, n = 8, 1024
	w := randomRows(t, quant.Q4_K, rows, n, 1, false)
	var x X
	if err := x.Set(randomVector(n, 1, false)); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, rows)
	for _, impl := range Impls() {
		if a := testing.AllocsPerRun(20, func() { _ = Rows(impl, quant.Q4_K, w, n, &x, y) }); a != 0 {
			t.Errorf("%v: %v allocations a call", impl, a)
		}
	}
}

// TestSetBlocksMatchesSet: a vector quantized in pieces, concurrently, is
// Set's; bad ranges are refused.
func TestSetBlocksMatchesSet(t *testing.T) {
	t.Parallel()
	v := randomVector(1000, 4, false)
	var want, got X
	if err := want.Set(v); err != nil {
		t.Fatal(err)
	}
	got.Size(len(v))
	done := make(chan error)
	for b := 0; b < got.Blocks(); b++ {
		go func() { done <- got.SetBlocks(v, b, b+1) }()
	}
	for range got.Blocks() {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("pieces differ from Set")
	}
	for _, r := range [][2]int{{-1, 1}, {0, got.Blocks() + 1}, {2, 1}} {
		if err := got.SetBlocks(v, r[0], r[1]); err == nil {
			t.Errorf("blocks %v accepted", r)
		}
	}
	if err := got.SetBlocks(v[:999], 0, 1); err == nil {
		t.Error("a vector of the wrong length accepted")
	}
}

// TestRowsStrideMatchesPacked: a view of some columns of a wider matrix
// (its rows a full row apart) gives, with every kernel family, the bits
// of the same columns copied out into packed rows, for one vector and a
// batch, from the first column and (where the format's rows are whole
// blocks, not INT8Row's scale and values) from a later block; bad views
// are refused.
func TestRowsStrideMatchesPacked(t *testing.T) {
	t.Parallel()
	const rows, width, n = 37, 768, 512
	for _, typ := range allTypes {
		full := randomRows(t, typ, rows, width, 5, false)
		stride := len(full) / rows
		rb, err := typ.RowBytes(n)
		if err != nil {
			t.Fatal(err)
		}
		offsets := []int{0, 256}
		if typ == quant.INT8Row {
			offsets = offsets[:1]
		}
		for _, col := range offsets {
			ob, err := typ.RowBytes(int64(col))
			if err != nil {
				t.Fatal(err)
			}
			if col == 0 {
				ob = 0
			}
			packed := make([]byte, 0, int(rb)*rows)
			for r := range rows {
				packed = append(packed, full[r*stride+int(ob):r*stride+int(ob)+int(rb)]...)
			}
			view := full[ob : int(ob)+(rows-1)*stride+int(rb)]
			xs := make([]*X, 3)
			for j := range xs {
				xs[j] = new(X)
				if err := xs[j].Set(randomVector(n, uint64(j+1), false)); err != nil {
					t.Fatal(err)
				}
			}
			for _, impl := range Impls() {
				name := fmt.Sprintf("%v/%v/from column %d", typ, impl, col)
				want, got := make([]float32, rows), make([]float32, rows)
				if err := Rows(impl, typ, packed, n, xs[0], want); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := RowsStride(impl, typ, view, stride, n, xs[0], got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for i := range want {
					if !sameBits(got[i], want[i]) {
						t.Fatalf("%s: row %d %g, packed %g", name, i, got[i], want[i])
					}
				}
				wantB, gotB := make([][]float32, len(xs)), make([][]float32, len(xs))
				for j := range xs {
					wantB[j], gotB[j] = make([]float32, rows), make([]float32, rows)
				}
				if err := RowsBatch(impl, typ, packed, n, xs, wantB); err != nil {
					t.Fatalf("%s batch: %v", name, err)
				}
				if err := RowsBatchStride(impl, typ, view, stride, n, xs, gotB); err != nil {
					t.Fatalf("%s batch: %v", name, err)
				}
				for j := range xs {
					for i := range wantB[j] {
						if !sameBits(gotB[j][i], wantB[j][i]) {
							t.Fatalf("%s batch: vector %d row %d %g, packed %g", name, j, i, gotB[j][i], wantB[j][i])
						}
					}
				}
			}
		}
		y := make([]float32, rows)
		var x X
		if err := x.Set(randomVector(n, 1, false)); err != nil {
			t.Fatal(err)
		}
		view := full[:(rows-1)*stride+int(rb)]
		for _, bad := range []struct {
			name   string
			rows   []byte
			stride int
		}{
			{"rows closer than a row's bytes", view, int(rb) - 1},
			{"one byte short", view[:len(view)-1], stride},
			{"one byte over", full[:len(view)+1], stride},
		} {
			if err := RowsStride(Go, typ, bad.rows, bad.stride, n, &x, y); err == nil {
				t.Errorf("%v: %s accepted", typ, bad.name)
			}
		}
	}
}
