package quant

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

// randomRows returns rows encoded rows of rowLen elements of type t with
// Gaussian-like content (FillRandom row by row, so INT8Row rows each get
// their scale).
func randomRows(t testing.TB, ty Type, rows, rowLen int, seed uint64) []byte {
	t.Helper()
	rb := mustRowBytes(t, ty, rowLen)
	m := make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		if err := FillRandom(ty, m[r*rb:(r+1)*rb], seed+uint64(r), 0.5); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// dotCases lists types with row lengths that exercise full units, trailing
// partial units (float types, INT8Row) and several blocks.
var dotCases = []struct {
	t    Type
	lens []int
}{
	{F32, []int{1, 7, 256, 300, 1041}},
	{F16, []int{1, 9, 256, 777}},
	{BF16, []int{3, 256, 520}},
	{INT8Row, []int{1, 5, 256, 1000}},
	{Q4_0, []int{32, 96, 1024}},
	{Q8_0, []int{32, 160, 1024}},
	{Q4_K, []int{256, 1024}},
	{Q5_K, []int{256, 1024}},
	{Q6_K, []int{256, 1024}},
}

// TestDotMatchesReference compares Dot with Dequantize followed by a
// float64 dot product. The tolerance is relative to Σ|w·x| (and, for the
// affine K-quants, to the larger sums Σ|d·sc·q·x| + Σ|dmin·m·x| their
// kernel actually adds): float32 accumulation over at most 64 terms per
// lane bounds the error by about 64·2⁻²⁴ ≈ 4e-6 of that.
func TestDotMatchesReference(t *testing.T) {
	t.Parallel()
	var worst float64
	for _, dc := range dotCases {
		for _, n := range dc.lens {
			t.Run(fmt.Sprintf("%v/%d", dc.t, n), func(t *testing.T) {
				const rows = 8
				m := randomRows(t, dc.t, rows, n, 11)
				rb := mustRowBytes(t, dc.t, n)
				x := gaussian(n, 12, 1)
				w := make([]float32, n)
				for r := 0; r < rows; r++ {
					row := m[r*rb : (r+1)*rb]
					if err := Dequantize(dc.t, row, w); err != nil {
						t.Fatal(err)
					}
					var ref, mag float64
					for i := range w {
						ref += float64(w[i]) * float64(x[i])
						mag += math.Abs(float64(w[i]) * float64(x[i]))
					}
					if dc.t == Q4_K || dc.t == Q5_K {
						mag += affineMagnitude(t, dc.t, row, x)
					}
					got := float64(Dot(dc.t, row, x))
					rel := math.Abs(got-ref) / mag
					worst = max(worst, rel)
					if rel > 5e-6 {
						t.Errorf("row %d: Dot = %v, reference %v (error %.2g of Σ|w·x|)", r, got, ref, rel)
					}
				}
			})
		}
	}
	t.Logf("worst error relative to the magnitude bound: %.2g", worst)
}

// affineMagnitude is Σ over sub-blocks of |d·sc|·Σ|q·x| + |dmin·m|·Σ|x|.
func affineMagnitude(t *testing.T, ty Type, row []byte, x []float32) float64 {
	var mag float64
	var u unit
	_, ub := unitSize(ty)
	for b := 0; b < len(x)/QK_K; b++ {
		decodeUnit(ty, row[b*ub:], QK_K, &u)
		for s := 0; s < 8; s++ {
			var qx, ax float64
			for l := 0; l < 32; l++ {
				e := QK_K*b + 32*s + l
				qx += math.Abs(float64(u.q[32*s+l]) * float64(x[e]))
				ax += math.Abs(float64(x[e]))
			}
			mag += math.Abs(float64(u.ds[s]))*qx + math.Abs(float64(u.ms[s]))*ax
		}
	}
	return mag
}

// TestDotRowsAndBatchAgreeWithDot requires DotRows and DotRowsBatch to
// reproduce Dot bit for bit (the engine's batched prefill and one-token
// decode must produce identical numbers). 35 vectors cross the batch group
// of 32.
func TestDotRowsAndBatchAgreeWithDot(t *testing.T) {
	t.Parallel()
	for _, dc := range dotCases {
		for _, n := range dc.lens {
			t.Run(fmt.Sprintf("%v/%d", dc.t, n), func(t *testing.T) {
				t.Parallel()
				const rows, nv = 5, 35
				m := randomRows(t, dc.t, rows, n, 21)
				rb := mustRowBytes(t, dc.t, n)
				xs := make([][]float32, nv)
				ys := make([][]float32, nv)
				for j := range xs {
					xs[j] = gaussian(n, uint64(100+j), 1)
					ys[j] = make([]float32, rows)
				}
				if err := DotRowsBatch(dc.t, m, n, xs, ys); err != nil {
					t.Fatal(err)
				}
				y := make([]float32, rows)
				for j := range xs {
					if err := DotRows(dc.t, m, n, xs[j], y); err != nil {
						t.Fatal(err)
					}
					for r := 0; r < rows; r++ {
						d := Dot(dc.t, m[r*rb:(r+1)*rb], xs[j])
						if math.Float32bits(d) != math.Float32bits(y[r]) {
							t.Fatalf("x %d row %d: DotRows %v != Dot %v", j, r, y[r], d)
						}
						if math.Float32bits(d) != math.Float32bits(ys[j][r]) {
							t.Fatalf("x %d row %d: DotRowsBatch %v != Dot %v", j, r, ys[j][r], d)
						}
					}
				}
			})
		}
	}
}

// TestDotRowsLongRow covers rows too long for DotRows' stack buffer of
// sub-block sums.
func TestDotRowsLongRow(t *testing.T) {
	t.Parallel()
	n := (stackSubSums + 8) * 32
	for _, ty := range []Type{Q4_K, Q5_K} {
		t.Run(ty.String(), func(t *testing.T) {
			t.Parallel()
			m := randomRows(t, ty, 2, n, 3)
			x := gaussian(n, 4, 1)
			y := make([]float32, 2)
			if err := DotRows(ty, m, n, x, y); err != nil {
				t.Fatal(err)
			}
			rb := mustRowBytes(t, ty, n)
			for r := range y {
				if d := Dot(ty, m[r*rb:(r+1)*rb], x); d != y[r] {
					t.Fatalf("row %d: DotRows %v != Dot %v", r, y[r], d)
				}
			}
		})
	}
}

// Sequential: testing.AllocsPerRun sets GOMAXPROCS and counts process-wide mallocs.
func TestDotNoAllocs(t *testing.T) {
	for _, ty := range Types() {
		t.Run(ty.String(), func(t *testing.T) {
			const n = 1024
			m := randomRows(t, ty, 4, n, 1)
			x := gaussian(n, 2, 1)
			y := make([]float32, 4)
			rb := mustRowBytes(t, ty, n)
			if a := testing.AllocsPerRun(20, func() { Dot(ty, m[:rb], x) }); a != 0 {
				t.Errorf("Dot allocates %v times", a)
			}
			if a := testing.AllocsPerRun(20, func() { _ = DotRows(ty, m, n, x, y) }); a != 0 {
				t.Errorf("DotRows allocates %v times", a)
			}
		})
	}
}

func TestDotInvalid(t *testing.T) {
	t.Parallel()
	x := make([]float32, 256)
	tests := []struct {
		name string
		t    Type
		row  int
		n    int
	}{
		{"unknown type", Type(5), 1024, 256},
		{"row too short", Q4_K, q4kBytes - 1, 256},
		{"row too long", F32, 1028, 256},
		{"partial block", Q8_0, q80Bytes, 31},
		{"int8row without scale", INT8Row, 256, 256},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := Dot(tc.t, make([]byte, tc.row), x[:tc.n]); !math.IsNaN(float64(d)) {
				t.Errorf("Dot = %v, want NaN", d)
			}
		})
	}
}

func TestDotRowsErrors(t *testing.T) {
	t.Parallel()
	rows := make([]byte, 2*q8RowBytes(64))
	tests := []struct {
		name    string
		t       Type
		rows    []byte
		rowLen  int
		x, y    int
		unknown bool
	}{
		{"x length", Q8_0, rows, 64, 63, 2, false},
		{"rows length", Q8_0, rows[1:], 64, 64, 2, false},
		{"too many outputs", Q8_0, rows, 64, 64, 3, false},
		{"row not whole blocks", Q8_0, rows, 48, 48, 2, false},
		{"zero row length", Q8_0, rows, 0, 0, 2, false},
		{"unknown type", Type(3), rows, 64, 64, 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			y := make([]float32, tc.y)
			for i := range y {
				y[i] = 42
			}
			err := DotRows(tc.t, tc.rows, tc.rowLen, make([]float32, tc.x), y)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrUnknownType) != tc.unknown {
				t.Errorf("error %q: errors.Is(ErrUnknownType) = %v", err, !tc.unknown)
			}
			for _, v := range y {
				if v != 42 {
					t.Fatal("y modified on error")
				}
			}
			xs := [][]float32{make([]float32, tc.x)}
			ys := [][]float32{make([]float32, tc.y)}
			if err := DotRowsBatch(tc.t, tc.rows, tc.rowLen, xs, ys); err == nil {
				t.Error("DotRowsBatch: no error")
			}
		})
	}
	batch := []struct {
		name   string
		xs, ys [][]float32
	}{
		{"vector count mismatch", [][]float32{make([]float32, 64)}, nil},
		{"second x short", [][]float32{make([]float32, 64), make([]float32, 63)}, [][]float32{make([]float32, 2), make([]float32, 2)}},
		{"second y short", [][]float32{make([]float32, 64), make([]float32, 64)}, [][]float32{make([]float32, 2), make([]float32, 1)}},
	}
	for _, tc := range batch {
		t.Run("batch/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if err := DotRowsBatch(Q8_0, rows, 64, tc.xs, tc.ys); err == nil {
				t.Fatal("no error")
			}
		})
	}
	t.Run("batch/empty", func(t *testing.T) {
		t.Parallel()
		if err := DotRowsBatch(Q8_0, rows, 64, nil, nil); err != nil {
			t.Fatalf("empty batch: %v", err)
		}
		if err := DotRowsBatch(Type(3), rows, 64, nil, nil); !errors.Is(err, ErrUnknownType) {
			t.Fatalf("empty batch of unknown type: %v", err)
		}
	})
}

func q8RowBytes(n int) int { return n / 32 * q80Bytes }
