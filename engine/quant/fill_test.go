package quant

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// fillBytesFor returns a buffer of about n bytes holding whole blocks of t.
func fillBytesFor(t Type, n int) int {
	if t == INT8Row {
		return n
	}
	return n - n%t.BlockBytes()
}

func TestFillRandomStatistics(t *testing.T) {
	t.Parallel()
	const std = 0.02
	for _, ty := range Types() {
		t.Run(ty.String(), func(t *testing.T) {
			t.Parallel()
			n := 1 << 16 // elements
			rb := mustRowBytes(t, ty, n)
			buf := make([]byte, rb)
			if err := FillRandom(ty, buf, 99, std); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, n)
			if err := Dequantize(ty, buf, x); err != nil {
				t.Fatal(err)
			}
			var sum, ss float64
			for i, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("element %d is %v", i, v)
				}
				sum += float64(v)
			}
			mean := sum / float64(n)
			for _, v := range x {
				ss += (float64(v) - mean) * (float64(v) - mean)
			}
			sd := math.Sqrt(ss / float64(n))
			t.Logf("mean %.3g (%.3f std), std %.5f (%.3f of requested)", mean, mean/std, sd, sd/std)
			if math.Abs(mean) > 0.05*std {
				t.Errorf("mean %v is not centred (std %v)", mean, std)
			}
			if sd < 0.9*std || sd > 1.1*std {
				t.Errorf("std %v, want about %v", sd, std)
			}
		})
	}
}

func TestFillRandomZeroStd(t *testing.T) {
	t.Parallel()
	for _, ty := range Types() {
		t.Run(ty.String(), func(t *testing.T) {
			t.Parallel()
			buf := make([]byte, mustRowBytes(t, ty, 512))
			if err := FillRandom(ty, buf, 1, 0); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, 512)
			if err := Dequantize(ty, buf, x); err != nil {
				t.Fatal(err)
			}
			for i, v := range x {
				if v != 0 {
					t.Fatalf("element %d = %v with std 0", i, v)
				}
			}
		})
	}
}

func TestFillRandomDeterministic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, ty := range Types() {
		t.Run(ty.String(), func(t *testing.T) {
			n := fillBytesFor(ty, 5*fillChunkBytes+12345) // several chunks and a partial one
			want := make([]byte, n)
			if err := FillRandom(ty, want, 7, 0.1); err != nil {
				t.Fatal(err)
			}
			again := make([]byte, n)
			if err := FillRandom(ty, again, 7, 0.1); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want, again) {
				t.Fatal("same seed gave different output")
			}
			other := make([]byte, n)
			if err := FillRandom(ty, other, 8, 0.1); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(want, other) {
				t.Fatal("different seeds gave the same output")
			}
			for _, procs := range []int{1, 2, 3, 8} {
				runtime.GOMAXPROCS(procs)
				got := make([]byte, n)
				if err := FillRandomParallel(ty, got, 7, 0.1); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(want, got) {
					t.Fatalf("FillRandomParallel with GOMAXPROCS=%d differs from FillRandom", procs)
				}
			}
		})
	}
}

// TestFillRandomGolden pins the generator's output (synthetic model files
// must be reproducible across strata versions). Regenerate with -update
// only for a deliberate format change.
func TestFillRandomGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "fill_random.sha256")
	var lines []string
	for _, ty := range Types() {
		buf := make([]byte, fillBytesFor(ty, 3*fillChunkBytes/2))
		if err := FillRandom(ty, buf, 42, 0.02); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf)
		lines = append(lines, fmt.Sprintf("%s %d %s", ty, len(buf), hex.EncodeToString(sum[:])))
	}
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var golden []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		golden = append(golden, sc.Text())
	}
	if len(golden) != len(lines) {
		t.Fatalf("golden file has %d entries, want %d", len(golden), len(lines))
	}
	for i := range lines {
		if lines[i] != golden[i] {
			t.Errorf("output changed:\n got  %s\n want %s", lines[i], golden[i])
		}
	}
}

func TestFillRandomErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		t    Type
		n    int
		std  float32
	}{
		{"unknown type", Type(4), 64, 1},
		{"partial block", Q4_K, q4kBytes + 1, 1},
		{"partial f32", F32, 6, 1},
		{"int8row too short", INT8Row, 3, 1},
		{"negative std", F16, 64, -1},
		{"nan std", Q8_0, q80Bytes, float32(math.NaN())},
		{"inf std", Q6_K, q6kBytes, float32(math.Inf(1))},
		{"std beyond fp16 scales", Q4_K, q4kBytes, 1e9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := FillRandom(tc.t, make([]byte, tc.n), 1, tc.std); err == nil {
				t.Error("FillRandom: no error")
			}
			if err := FillRandomParallel(tc.t, make([]byte, tc.n), 1, tc.std); err == nil {
				t.Error("FillRandomParallel: no error")
			}
		})
	}
}

func TestFillRandomRows(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Run("INT8Row rows are valid", func(t *testing.T) {
		const rows, n = 37, 300
		buf := make([]byte, rows*(4+n))
		if err := FillRandomRows(INT8Row, buf, n, 3, 0.5); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, rows*n)
		if err := DequantizeRows(INT8Row, buf, n, x); err != nil {
			t.Fatal(err)
		}
		var ss float64
		for i, v := range x {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("element %d is %v", i, v)
			}
			ss += float64(v) * float64(v)
		}
		if sd := math.Sqrt(ss / float64(len(x))); sd < 0.45 || sd > 0.55 {
			t.Errorf("std %v, want about 0.5", sd)
		}
		if bytes.Equal(buf[4:4+n], buf[4+n+4:2*(4+n)]) {
			t.Error("rows 0 and 1 are identical")
		}
		for _, procs := range []int{1, 3} {
			runtime.GOMAXPROCS(procs)
			again := make([]byte, len(buf))
			if err := FillRandomRows(INT8Row, again, n, 3, 0.5); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, again) {
				t.Fatalf("GOMAXPROCS=%d changed the output", procs)
			}
		}
	})
	t.Run("block types equal FillRandom", func(t *testing.T) {
		buf := make([]byte, 8*q6kBytes)
		if err := FillRandomRows(Q6_K, buf, 512, 9, 1); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, len(buf))
		if err := FillRandom(Q6_K, want, 9, 1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatal("FillRandomRows differs from FillRandom")
		}
	})
	errs := []struct {
		name   string
		t      Type
		n      int
		rowLen int
	}{
		{"unknown type", Type(9), 8, 2},
		{"zero row length", INT8Row, 8, 0},
		{"partial row", INT8Row, 13, 4},
		{"row not whole blocks", Q4_K, q4kBytes, 128},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			if err := FillRandomRows(tc.t, make([]byte, tc.n), tc.rowLen, 1, 1); err == nil {
				t.Fatal("no error")
			}
		})
	}
}
