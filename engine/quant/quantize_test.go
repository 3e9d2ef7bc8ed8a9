package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func gaussian(n int, seed uint64, std float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

// relRMS is sqrt(Σ(a-b)²/Σa²): the RMS error of b relative to a.
func relRMS(a, b []float32) float64 { return math.Sqrt(NMSE(b, a)) }

func roundTrip(t testing.TB, ty Type, x []float32, rowLen int) []float32 {
	t.Helper()
	rb := mustRowBytes(t, ty, rowLen)
	buf := make([]byte, rb*(len(x)/rowLen))
	if err := QuantizeRows(ty, x, rowLen, buf); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := DequantizeRows(ty, buf, rowLen, y); err != nil {
		t.Fatal(err)
	}
	return y
}

// TestQuantizeRoundTripError quantizes Gaussian weights (std 0.02, like a
// trained matrix) and bounds the relative RMS error of the decode. The
// bounds sit a little above what the encoders achieve (measured: Q8_0
// 0.54%, Q6_K 1.68%, Q5_K 3.47%, Q4_K 7.0%, INT8Row 4096-wide 0.92%); for
// reference a dense brute-force search over the same formats' per-block
// parameters reaches Q6_K 1.63% and Q4_K 6.9%, so these are close to what
// the formats allow on Gaussian data.
func TestQuantizeRoundTripError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		t      Type
		rowLen int
		bound  float64
	}{
		{F32, 4096, 0},
		{F16, 4096, 3e-4},
		{BF16, 4096, 2.5e-3},
		{Q8_0, 4096, 0.006},
		{Q6_K, 4096, 0.0175},
		{Q5_K, 4096, 0.036},
		{Q4_K, 4096, 0.072},
		{INT8Row, 4096, 0.0105},
	}
	x := gaussian(64*QK_K, 1, 0.02)
	for _, tc := range tests {
		t.Run(tc.t.String(), func(t *testing.T) {
			t.Parallel()
			y := roundTrip(t, tc.t, x, tc.rowLen)
			e := relRMS(x, y)
			t.Logf("%v relative RMS error %.5f", tc.t, e)
			if e > tc.bound {
				t.Errorf("relative RMS error %.5f exceeds %.5f", e, tc.bound)
			}
		})
	}
}

// naiveQ4K encodes a Q4_K block the simple way: per sub-block scale =
// (max-min)/15 and min = -min(x,0), 6-bit codes rounded from max/63, no
// search. The real encoder must never do worse in aggregate.
func naiveQ4K(x *[QK_K]float32, b *[q4kBytes]byte) {
	var sc, mn [8]float32
	var maxS, maxM float32
	for s := 0; s < 8; s++ {
		lo, hi := x[32*s], x[32*s]
		for _, v := range x[32*s : 32*s+32] {
			lo, hi = min(lo, v), max(hi, v)
		}
		lo = min(lo, 0)
		sc[s], mn[s] = (hi-lo)/15, -lo
		maxS, maxM = max(maxS, sc[s]), max(maxM, mn[s])
	}
	dh, mh := F32ToF16(maxS/63), F32ToF16(maxM/63)
	d, dm := F16ToF32(dh), F16ToF32(mh)
	var is, im [8]uint8
	for s := 0; s < 8; s++ {
		is[s] = uint8(roundClamp(sc[s]/d, 0, 63))
		im[s] = uint8(roundClamp(mn[s]/dm, 0, 63))
	}
	binary.LittleEndian.PutUint16(b[0:], dh)
	binary.LittleEndian.PutUint16(b[2:], mh)
	packScaleMinK4(&is, &im, (*[12]byte)(b[4:]))
	for s := 0; s < 8; s++ {
		d1, m1 := d*float32(is[s]), dm*float32(im[s])
		for l := 0; l < 32; l++ {
			var q int32
			if d1 > 0 {
				q = roundClamp((x[32*s+l]+m1)/d1, 0, 15)
			}
			i := q4kQs + 32*(s/2) + l
			b[i] |= byte(q) << (4 * (s % 2))
		}
	}
}

func TestQ4KBeatsNaive(t *testing.T) {
	t.Parallel()
	for _, dist := range []string{"gaussian", "skewed"} {
		t.Run(dist, func(t *testing.T) {
			t.Parallel()
			x := gaussian(32*QK_K, 2, 1)
			if dist == "skewed" {
				for i := range x {
					x[i] = x[i]*x[i] - 0.3 // chi-square-like, mostly positive
				}
			}
			var worse int
			var seSmart, seNaive float64
			for b := 0; b < len(x)/QK_K; b++ {
				xb := (*[QK_K]float32)(x[b*QK_K:])
				smart := make([]byte, q4kBytes)
				if err := Quantize(Q4_K, xb[:], smart); err != nil {
					t.Fatal(err)
				}
				var naive [q4kBytes]byte
				naiveQ4K(xb, &naive)
				ys, yn := make([]float32, QK_K), make([]float32, QK_K)
				if err := Dequantize(Q4_K, smart, ys); err != nil {
					t.Fatal(err)
				}
				if err := Dequantize(Q4_K, naive[:], yn); err != nil {
					t.Fatal(err)
				}
				es, en := relRMS(xb[:], ys), relRMS(xb[:], yn)
				seSmart += es * es
				seNaive += en * en
				if es > en*1.001 {
					worse++
				}
			}
			t.Logf("RMS relative error: search %.4f, naive %.4f; blocks where search lost: %d/%d",
				math.Sqrt(seSmart/32), math.Sqrt(seNaive/32), worse, len(x)/QK_K)
			if seSmart >= seNaive*0.9 {
				t.Errorf("search encoder error %.4f is not clearly below naive %.4f", math.Sqrt(seSmart/32), math.Sqrt(seNaive/32))
			}
			if worse > 2 {
				t.Errorf("search encoder worse than naive on %d blocks", worse)
			}
		})
	}
}

// TestQuantizeExact checks data the formats represent exactly survives.
func TestQuantizeExact(t *testing.T) {
	t.Parallel()
	t.Run("Q8_0", func(t *testing.T) {
		t.Parallel()
		x := make([]float32, 64)
		for i := range x {
			x[i] = 0.25 * float32(int8(i*37-127)%127)
		}
		x[5] = 0.25 * 127   // block 0: step from the positive side
		x[40] = -0.25 * 128 // block 1: step from the negative side
		y := roundTrip(t, Q8_0, x, 64)
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("element %d: %v -> %v", i, x[i], y[i])
			}
		}
	})
	t.Run("INT8Row", func(t *testing.T) {
		t.Parallel()
		x := []float32{-128, 0, 3, 127, -5}
		y := roundTrip(t, INT8Row, x, len(x))
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("element %d: %v -> %v", i, x[i], y[i])
			}
		}
	})
	for _, ty := range []Type{Q4_K, Q5_K, Q6_K, Q8_0, INT8Row} {
		t.Run(ty.String()+"/zeros", func(t *testing.T) {
			t.Parallel()
			x := make([]float32, QK_K)
			y := roundTrip(t, ty, x, QK_K)
			for i, v := range y {
				if v != 0 {
					t.Fatalf("element %d decodes to %v", i, v)
				}
			}
		})
		t.Run(ty.String()+"/constant", func(t *testing.T) {
			t.Parallel()
			x := make([]float32, QK_K)
			for i := range x {
				x[i] = -0.75
			}
			y := roundTrip(t, ty, x, QK_K)
			for i, v := range y {
				if math.Abs(float64(v+0.75)) > 0.75*0.01 {
					t.Fatalf("element %d decodes to %v, want -0.75", i, v)
				}
			}
		})
	}
}

// TestQuantizeRequantize encodes the decode of a random valid block again:
// the encoders must find a representation at least nearly as good.
func TestQuantizeRequantize(t *testing.T) {
	t.Parallel()
	for _, ty := range []Type{Q4_K, Q5_K, Q6_K, Q8_0} {
		t.Run(ty.String(), func(t *testing.T) {
			t.Parallel()
			n := 16 * QK_K
			src := make([]byte, mustRowBytes(t, ty, n))
			if err := FillRandom(ty, src, 5, 1); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, n)
			if err := Dequantize(ty, src, x); err != nil {
				t.Fatal(err)
			}
			y := roundTrip(t, ty, x, n)
			e := relRMS(x, y)
			t.Logf("re-encoding valid %v data: relative RMS error %.5f", ty, e)
			if e > 0.01 {
				t.Errorf("re-encoding valid %v data: relative RMS error %.4f", ty, e)
			}
		})
	}
}

func TestQuantizeRowsINT8PerRowScale(t *testing.T) {
	t.Parallel()
	x := append(gaussian(512, 3, 100), gaussian(512, 4, 0.001)...)
	buf := make([]byte, 2*(4+512))
	if err := QuantizeRows(INT8Row, x, 512, buf); err != nil {
		t.Fatal(err)
	}
	s0 := math.Float32frombits(binary.LittleEndian.Uint32(buf))
	s1 := math.Float32frombits(binary.LittleEndian.Uint32(buf[516:]))
	if !(s0 > 1000*s1) {
		t.Fatalf("row scales %v and %v are not per row", s0, s1)
	}
	y := make([]float32, len(x))
	if err := DequantizeRows(INT8Row, buf, 512, y); err != nil {
		t.Fatal(err)
	}
	if e := relRMS(x[512:], y[512:]); e > 0.015 {
		t.Errorf("small row error %.4f: scale not per row", e)
	}
}

func TestQuantizeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		t      Type
		src    []float32
		dst    int
		target error
		substr string
	}{
		{"no quantizer", Q4_0, make([]float32, 32), q40Bytes, ErrNoQuantizer, "Q4_0"},
		{"unknown type", Type(77), make([]float32, 32), 128, ErrUnknownType, ""},
		{"partial block", Q4_K, make([]float32, 128), q4kBytes, errLength, ""},
		{"dst short", Q6_K, make([]float32, 256), q6kBytes - 1, errLength, ""},
		{"dst long", F16, make([]float32, 3), 8, errLength, ""},
		{"nan", Q8_0, append(make([]float32, 31), float32(math.NaN())), q80Bytes, nil, "non-finite"},
		{"inf", Q4_K, append(make([]float32, 255), float32(math.Inf(-1))), q4kBytes, nil, "non-finite"},
		{"int8 nan", INT8Row, []float32{1, float32(math.NaN())}, 6, nil, "non-finite"},
		{"q8 too large", Q8_0, append(make([]float32, 31), 1e10), q80Bytes, nil, "fp16"},
		{"q4k too large", Q4_K, append(make([]float32, 255), 3e38), q4kBytes, nil, "fp16"},
		{"q6k too large", Q6_K, append(make([]float32, 255), -3e38), q6kBytes, nil, "fp16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Quantize(tc.t, tc.src, make([]byte, tc.dst))
			if err == nil {
				t.Fatal("no error")
			}
			if tc.target != nil && !errors.Is(err, tc.target) {
				t.Errorf("error %q is not %v", err, tc.target)
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("error %q does not mention %q", err, tc.substr)
			}
		})
	}
	t.Run("rows not whole", func(t *testing.T) {
		t.Parallel()
		if err := QuantizeRows(F32, make([]float32, 5), 2, make([]byte, 20)); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("rows no quantizer", func(t *testing.T) {
		t.Parallel()
		err := QuantizeRows(Q4_0, make([]float32, 64), 32, make([]byte, 2*q40Bytes))
		if !errors.Is(err, ErrNoQuantizer) {
			t.Fatalf("error %v is not ErrNoQuantizer", err)
		}
	})
	t.Run("float types keep non-finite", func(t *testing.T) {
		t.Parallel()
		x := []float32{float32(math.Inf(1)), float32(math.NaN())}
		for _, ty := range []Type{F32, F16, BF16} {
			y := roundTrip(t, ty, x, 2)
			if !math.IsInf(float64(y[0]), 1) || !math.IsNaN(float64(y[1])) {
				t.Errorf("%v: %v -> %v", ty, x, y)
			}
		}
	})
}
