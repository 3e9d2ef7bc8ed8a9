package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// Hand-built blocks: every expected value below is derived from the block
// layouts in ggml-common.h and written out independently of the decoder.

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }

// Scales and mins chosen to exercise every bit of the 6-bit packing,
// including the high bits of sub-blocks 4..7 that live in bytes 0..7.
var (
	k4Sc = [8]uint8{1, 17, 33, 63, 5, 21, 42, 60}
	k4M  = [8]uint8{0, 63, 16, 31, 48, 3, 40, 12}
	// Packed by hand: bytes 0..3 = sc[j] | (sc[j+4]>>4)<<6,
	// bytes 4..7 = m[j] | (m[j+4]>>4)<<6, bytes 8..11 = sc[j+4]&15 | (m[j+4]&15)<<4.
	k4Packed = [12]byte{0x01, 0x51, 0xA1, 0xFF, 0xC0, 0x3F, 0x90, 0x1F, 0x05, 0x35, 0x8A, 0xCC}
)

func TestScaleMinK4Packing(t *testing.T) {
	t.Parallel()
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, &k4Packed)
		if sc != k4Sc[j] || m != k4M[j] {
			t.Errorf("sub-block %d: got (%d, %d), want (%d, %d)", j, sc, m, k4Sc[j], k4M[j])
		}
	}
	var got [12]byte
	packScaleMinK4(&k4Sc, &k4M, &got)
	if got != k4Packed {
		t.Errorf("packScaleMinK4 = % x, want % x", got, k4Packed)
	}
}

// q4kNibble is the quant the hand-built Q4_K/Q5_K blocks store for element
// e: low nibbles count up, high nibbles count down.
func q4kNibble(e int) int {
	l := e % 64
	if l < 32 {
		return l % 16
	}
	return 15 - l%16
}

func buildQ4K() []byte {
	b := append(le16(0x3800), le16(0x3400)...) // d = 0.5, dmin = 0.25
	b = append(b, k4Packed[:]...)
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			b = append(b, byte(l%16|(15-l%16)<<4))
		}
	}
	return b
}

func q5kHigh(l int) byte { return byte(l*37 + 11) }

func buildQ5K() []byte {
	b := append(le16(0x3800), le16(0x3400)...)
	b = append(b, k4Packed[:]...)
	for l := 0; l < 32; l++ {
		b = append(b, q5kHigh(l))
	}
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			b = append(b, byte(l%16|(15-l%16)<<4))
		}
	}
	return b
}

var q6Sc = [16]int8{-128, -1, 1, 127, 2, -3, 5, -7, 11, 13, -17, 19, 23, -29, 31, 64}

func q6Val(e int) int { return (e*7 + 3) % 64 }

// buildQ6K places 6-bit value q6Val(e) of element e bit by bit: in half
// n = e/128 with r = e%128, quadrant k = r/32 and position l = r%32, the low
// 4 bits go to nibble k/2 of ql[64n + l + 32*(k%2)] and the high 2 bits to
// bits 2k, 2k+1 of qh[32n + l].
func buildQ6K() []byte {
	b := make([]byte, q6kBytes)
	for e := 0; e < QK_K; e++ {
		n, r := e/128, e%128
		k, l := r/32, r%32
		v := q6Val(e)
		b[64*n+l+32*(k%2)] |= byte(v&15) << (4 * (k / 2))
		b[128+32*n+l] |= byte(v>>4) << (2 * k)
	}
	for g, s := range q6Sc {
		b[192+g] = byte(s)
	}
	copy(b[208:], le16(0x3000)) // d = 0.125
	return b
}

func TestDequantizeHandBuilt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		t    Type
		src  []byte
		n    int
		want func(e int) float64
	}{
		{
			name: "Q4_0 d=0.5",
			t:    Q4_0,
			src: func() []byte {
				b := le16(0x3800)
				for l := 0; l < 16; l++ {
					b = append(b, byte(l|(15-l)<<4))
				}
				return b
			}(),
			n: 32,
			want: func(e int) float64 {
				if e < 16 {
					return 0.5 * float64(e-8)
				}
				return 0.5 * float64(15-(e-16)-8)
			},
		},
		{
			name: "Q8_0 d=0.25",
			t:    Q8_0,
			src: func() []byte {
				b := le16(0x3400)
				for l := 0; l < 32; l++ {
					b = append(b, byte(int8(l*9-128)))
				}
				return b
			}(),
			n:    32,
			want: func(e int) float64 { return 0.25 * float64(int8(e*9-128)) },
		},
		{
			name: "Q4_K scales and mins",
			t:    Q4_K,
			src:  buildQ4K(),
			n:    QK_K,
			want: func(e int) float64 {
				s := e / 32
				return 0.5*float64(k4Sc[s])*float64(q4kNibble(e)) - 0.25*float64(k4M[s])
			},
		},
		{
			name: "Q5_K high bits",
			t:    Q5_K,
			src:  buildQ5K(),
			n:    QK_K,
			want: func(e int) float64 {
				s, l := e/32, e%32
				q := q4kNibble(e) + 16*int(q5kHigh(l)>>s&1)
				return 0.5*float64(k4Sc[s])*float64(q) - 0.25*float64(k4M[s])
			},
		},
		{
			name: "Q6_K signed scales",
			t:    Q6_K,
			src:  buildQ6K(),
			n:    QK_K,
			want: func(e int) float64 { return 0.125 * float64(q6Sc[e/16]) * float64(q6Val(e)-32) },
		},
		{
			name: "INT8Row scale=0.5",
			t:    INT8Row,
			src: func() []byte {
				b := binary.LittleEndian.AppendUint32(nil, math.Float32bits(0.5))
				return append(b, 0x80, 0xff, 0x00, 0x01, 0x7f)
			}(),
			n: 5,
			want: func(e int) float64 {
				return 0.5 * float64([]int{-128, -1, 0, 1, 127}[e])
			},
		},
		{
			name: "F32",
			t:    F32,
			src: func() []byte {
				var b []byte
				for _, v := range []float32{1.5, -2, 3e-40, 65536} {
					b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
				}
				return b
			}(),
			n:    4,
			want: func(e int) float64 { return float64([]float32{1.5, -2, 3e-40, 65536}[e]) },
		},
		{
			name: "F16",
			t:    F16,
			src:  append(append(le16(0x3c00), le16(0xc000)...), le16(0x0001)...),
			n:    3,
			want: func(e int) float64 { return []float64{1, -2, 1.0 / (1 << 24)}[e] },
		},
		{
			name: "BF16",
			t:    BF16,
			src:  append(le16(0x3f80), le16(0xc0a0)...),
			n:    2,
			want: func(e int) float64 { return []float64{1, -5}[e] },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if len(tc.src) != mustRowBytes(t, tc.t, tc.n) {
				t.Fatalf("test block is %d bytes, type wants %d", len(tc.src), mustRowBytes(t, tc.t, tc.n))
			}
			dst := make([]float32, tc.n)
			if err := Dequantize(tc.t, tc.src, dst); err != nil {
				t.Fatal(err)
			}
			for e, got := range dst {
				if want := tc.want(e); float64(got) != want {
					t.Fatalf("element %d = %v, want %v", e, got, want)
				}
			}
			// DequantizeRows over two copies of the row decodes both.
			two := append(append([]byte{}, tc.src...), tc.src...)
			dst2 := make([]float32, 2*tc.n)
			if err := DequantizeRows(tc.t, two, tc.n, dst2); err != nil {
				t.Fatal(err)
			}
			for e := range dst2 {
				if dst2[e] != dst[e%tc.n] {
					t.Fatalf("DequantizeRows element %d = %v, want %v", e, dst2[e], dst[e%tc.n])
				}
			}
		})
	}
}

// TestDequantizeRowsINT8Scales checks each INT8Row row uses its own scale.
func TestDequantizeRowsINT8Scales(t *testing.T) {
	t.Parallel()
	var src []byte
	for _, s := range []float32{0.5, -2} {
		src = binary.LittleEndian.AppendUint32(src, math.Float32bits(s))
		src = append(src, 1, 0xfe, 3)
	}
	dst := make([]float32, 6)
	if err := DequantizeRows(INT8Row, src, 3, dst); err != nil {
		t.Fatal(err)
	}
	want := []float32{0.5, -1, 1.5, -2, 4, -6}
	for i := range want {
		if dst[i] != want[i] {
			t.Fatalf("dst = %v, want %v", dst, want)
		}
	}
}

func mustRowBytes(t testing.TB, ty Type, n int) int {
	t.Helper()
	b, err := ty.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return int(b)
}

func TestDequantizeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		t       Type
		src     int
		dst     int
		unknown bool
	}{
		{"unknown type", Type(99), 4, 1, true},
		{"partial block", Q4_K, q4kBytes, 255, false},
		{"src too short", Q4_K, q4kBytes - 1, 256, false},
		{"src too long", Q8_0, q80Bytes + 1, 32, false},
		{"f32 short", F32, 7, 2, false},
		{"int8row missing scale", INT8Row, 3, 3, false},
		{"int8row extra byte", INT8Row, 9, 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Dequantize(tc.t, make([]byte, tc.src), make([]float32, tc.dst))
			if err == nil {
				t.Fatal("no error")
			}
			if tc.unknown != errors.Is(err, ErrUnknownType) {
				t.Errorf("error %q: errors.Is(ErrUnknownType) = %v", err, !tc.unknown)
			}
		})
	}
	rowsTests := []struct {
		name   string
		t      Type
		src    int
		rowLen int
		dst    int
	}{
		{"zero row length", F32, 0, 0, 0},
		{"negative row length", F32, 0, -4, 0},
		{"dst not whole rows", F32, 20, 2, 5},
		{"row not whole blocks", Q8_0, 2 * q80Bytes, 48, 96},
		{"src short", INT8Row, 2*(4+8) - 1, 8, 16},
		{"unknown type", Type(1000), 8, 2, 2},
	}
	for _, tc := range rowsTests {
		t.Run("rows/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if err := DequantizeRows(tc.t, make([]byte, tc.src), tc.rowLen, make([]float32, tc.dst)); err == nil {
				t.Fatal("no error")
			}
		})
	}
}
