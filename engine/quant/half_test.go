package quant

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestF16ToF32(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    uint16
		want float32
	}{
		{"zero", 0x0000, 0},
		{"one", 0x3c00, 1},
		{"minus two", 0xc000, -2},
		{"half", 0x3800, 0.5},
		{"one plus ulp", 0x3c01, 1 + 1.0/1024},
		{"max", 0x7bff, 65504},
		{"min normal", 0x0400, 1.0 / (1 << 14)},
		{"min subnormal", 0x0001, 1.0 / (1 << 24)},
		{"max subnormal", 0x03ff, 1023.0 / (1 << 24)},
		{"negative subnormal", 0x8003, -3.0 / (1 << 24)},
		{"+inf", 0x7c00, float32(math.Inf(1))},
		{"-inf", 0xfc00, float32(math.Inf(-1))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := F16ToF32(tc.h); got != tc.want {
				t.Errorf("F16ToF32(%#04x) = %v, want %v", tc.h, got, tc.want)
			}
		})
	}
	t.Run("negative zero", func(t *testing.T) {
		t.Parallel()
		if got := math.Float32bits(F16ToF32(0x8000)); got != 0x80000000 {
			t.Errorf("F16ToF32(0x8000) bits = %#x, want -0", got)
		}
	})
	t.Run("nan", func(t *testing.T) {
		t.Parallel()
		for _, h := range []uint16{0x7e00, 0x7c01, 0xfe00, 0x7fff} {
			if v := F16ToF32(h); !math.IsNaN(float64(v)) {
				t.Errorf("F16ToF32(%#04x) = %v, want NaN", h, v)
			}
		}
	})
}

func TestF32ToF16(t *testing.T) {
	t.Parallel()
	ulp1 := float32(1.0 / 1024) // spacing of halves in [1, 2)
	tests := []struct {
		name string
		f    float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"max", 65504, 0x7bff},
		{"just below overflow tie", 65519.99, 0x7bff},
		{"overflow tie rounds to inf", 65520, 0x7c00},
		{"overflow", 1e10, 0x7c00},
		{"negative overflow", -1e10, 0xfc00},
		{"+inf", float32(math.Inf(1)), 0x7c00},
		{"-inf", float32(math.Inf(-1)), 0xfc00},
		{"tie to even down", 1 + ulp1/2, 0x3c00},
		{"tie to even up", 1 + 3*ulp1/2, 0x3c02},
		{"above tie rounds up", 1 + ulp1/2 + 1.0/(1<<20), 0x3c01},
		{"min normal", 1.0 / (1 << 14), 0x0400},
		{"min subnormal", 1.0 / (1 << 24), 0x0001},
		{"half min subnormal ties to zero", 1.0 / (1 << 25), 0x0000},
		{"just above half min subnormal", 1.0/(1<<25) + 1.0/(1<<40), 0x0001},
		{"subnormal tie to even up", 3.0 / (1 << 25), 0x0002},
		{"subnormal tie to even down", 5.0 / (1 << 25), 0x0002},
		{"max subnormal to min normal tie", 1.0/(1<<14) - 1.0/(1<<25), 0x0400},
		{"negative subnormal", -3.0 / (1 << 24), 0x8003},
		{"underflow", 1e-30, 0x0000},
		{"negative underflow", -1e-30, 0x8000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := F32ToF16(tc.f); got != tc.want {
				t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tc.f, got, tc.want)
			}
		})
	}
	t.Run("nan", func(t *testing.T) {
		t.Parallel()
		for _, bits := range []uint32{0x7fc00000, 0x7f800001, 0xffc00000, 0x7fffffff} {
			h := F32ToF16(math.Float32frombits(bits))
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
				t.Errorf("F32ToF16(NaN %#x) = %#04x, want a NaN", bits, h)
			}
			if (h&0x8000 != 0) != (bits&0x80000000 != 0) {
				t.Errorf("F32ToF16(NaN %#x) = %#04x lost the sign", bits, h)
			}
		}
	})
}

// TestF16RoundTripExhaustive checks every half converts to float32 and
// back unchanged.
func TestF16RoundTripExhaustive(t *testing.T) {
	t.Parallel()
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if math.IsNaN(float64(f)) {
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
				t.Fatalf("%#04x decoded to NaN", h)
			}
			continue
		}
		if got := F32ToF16(f); got != h {
			t.Fatalf("round trip %#04x -> %v -> %#04x", h, f, got)
		}
		if f16Table[h] != f && !(f != f) {
			t.Fatalf("f16Table[%#04x] = %v, want %v", h, f16Table[h], f)
		}
	}
}

// refF32ToF16 rounds by searching the sorted list of finite half values:
// an independent statement of round-to-nearest-even.
func refF32ToF16(f float32, pos []float64) uint16 {
	var sign uint16
	a := float64(f)
	if math.Signbit(a) {
		sign, a = 0x8000, -a
	}
	if a >= 65520 { // halfway between max (65504) and the next step (65536)
		return sign | 0x7c00
	}
	i := sort.SearchFloat64s(pos, a) // pos[i] >= a
	if i == len(pos) {
		return sign | 0x7bff // between max and the overflow midpoint
	}
	if pos[i] == a {
		return sign | uint16(i)
	}
	lo, hi := pos[i-1], pos[i]
	switch {
	case a-lo < hi-a:
		return sign | uint16(i-1)
	case a-lo > hi-a:
		return sign | uint16(i)
	case (i-1)%2 == 0:
		return sign | uint16(i-1)
	default:
		return sign | uint16(i)
	}
}

func TestF32ToF16MatchesReference(t *testing.T) {
	t.Parallel()
	pos := make([]float64, 0x7c00) // bit patterns 0..0x7bff are increasing
	for i := range pos {
		pos[i] = float64(F16ToF32(uint16(i)))
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 300000; i++ {
		var f float32
		switch i % 3 {
		case 0: // random bit patterns with exponents from 2^-30 to 2^17
			exp := uint32(97 + r.IntN(48))
			f = math.Float32frombits(r.Uint32()&0x807fffff | exp<<23)
		case 1: // values on and next to half boundaries and midpoints
			h := uint16(r.IntN(0x7bff))
			mid := float32((float64(F16ToF32(h)) + float64(F16ToF32(h+1))) / 2)
			switch r.IntN(3) {
			case 0:
				f = mid
			case 1:
				f = math.Nextafter32(mid, 0)
			default:
				f = math.Nextafter32(mid, 1e9)
			}
		default:
			f = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-8)))
		}
		if want, got := refF32ToF16(f, pos), F32ToF16(f); got != want {
			t.Fatalf("F32ToF16(%v [%#x]) = %#04x, reference %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

func TestBF16(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bits uint32
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"tie to even down", 0x3f808000, 0x3f80},
		{"tie to even up", 0x3f818000, 0x3f82},
		{"above tie", 0x3f808001, 0x3f81},
		{"below tie", 0x3f807fff, 0x3f80},
		{"negative zero", 0x80000000, 0x8000},
		{"max float rounds to inf", 0x7f7fffff, 0x7f80},
		{"inf", 0x7f800000, 0x7f80},
		{"-inf", 0xff800000, 0xff80},
		{"subnormal", 0x00010000, 0x0001},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := F32ToBF16(math.Float32frombits(tc.bits)); got != tc.want {
				t.Errorf("F32ToBF16(%#x) = %#04x, want %#04x", tc.bits, got, tc.want)
			}
			if got := math.Float32bits(BF16ToF32(tc.want)); got != uint32(tc.want)<<16 {
				t.Errorf("BF16ToF32(%#04x) bits = %#x", tc.want, got)
			}
		})
	}
	t.Run("nan preserved", func(t *testing.T) {
		t.Parallel()
		// A NaN whose payload sits only in the low 16 bits must not round
		// into an infinity or lose its NaN-ness.
		for _, bits := range []uint32{0x7f800001, 0x7fc00000, 0xff80ffff, 0x7fffffff} {
			h := F32ToBF16(math.Float32frombits(bits))
			if !math.IsNaN(float64(BF16ToF32(h))) {
				t.Errorf("F32ToBF16(NaN %#x) = %#04x, not a NaN", bits, h)
			}
			if h>>15 != uint16(bits>>31) {
				t.Errorf("F32ToBF16(NaN %#x) = %#04x lost the sign", bits, h)
			}
		}
	})
	t.Run("exhaustive round trip", func(t *testing.T) {
		t.Parallel()
		for i := 0; i < 1<<16; i++ {
			h := uint16(i)
			f := BF16ToF32(h)
			if math.IsNaN(float64(f)) {
				continue
			}
			if got := F32ToBF16(f); got != h {
				t.Fatalf("round trip %#04x -> %#04x", h, got)
			}
		}
	})
}
