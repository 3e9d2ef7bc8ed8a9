package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Byte offsets inside the block formats, as laid out by ggml-common.h.
const (
	q40Bytes = 2 + 16 // d, qs[16]
	q80Bytes = 2 + 32 // d, qs[32]

	q4kScales = 4                 // after d, dmin
	q4kQs     = 4 + 12            // after the packed scales
	q4kBytes  = 4 + 12 + 128      // 144
	q5kQh     = 4 + 12            // high bits follow the scales
	q5kQs     = 4 + 12 + 32       // then the low nibbles
	q5kBytes  = 4 + 12 + 32 + 128 // 176
	q6kQh     = 128               // ql[128] comes first
	q6kScales = 128 + 64          // then qh[64]
	q6kD      = 128 + 64 + 16     // then int8 scales[16], then d
	q6kBytes  = 128 + 64 + 16 + 2 // 210
)

// errLength reports a buffer whose size does not fit the type.
var errLength = errors.New("buffer length does not match tensor type")

func halfAt(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

// checkRow validates that src holds exactly one encoded row of n elements
// of type t.
func checkRow(t Type, srcLen, n int) error {
	if !t.Known() {
		return fmt.Errorf("%w: %d", ErrUnknownType, uint32(t))
	}
	want, err := t.RowBytes(int64(n))
	if err != nil {
		return fmt.Errorf("%w: %w", errLength, err)
	}
	if int64(srcLen) != want {
		return fmt.Errorf("%w: %v data for %d elements needs %d bytes, got %d", errLength, t, n, want, srcLen)
	}
	return nil
}

// checkRows validates a buffer of rows of rowLen elements; it returns the
// encoded size of one row.
func checkRows(t Type, dataLen int, rowLen, rows int) (int, error) {
	if !t.Known() {
		return 0, fmt.Errorf("%w: %d", ErrUnknownType, uint32(t))
	}
	if rowLen <= 0 {
		return 0, fmt.Errorf("%w: row length %d must be positive", errLength, rowLen)
	}
	rb, err := t.RowBytes(int64(rowLen))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errLength, err)
	}
	if rows > 0 && rb > int64(math.MaxInt)/int64(rows) {
		return 0, fmt.Errorf("%w: %d rows of %d bytes overflow", errLength, rows, rb)
	}
	if int64(dataLen) != rb*int64(rows) {
		return 0, fmt.Errorf("%w: %d %v rows of %d elements need %d bytes, got %d", errLength, rows, t, rowLen, rb*int64(rows), dataLen)
	}
	return int(rb), nil
}

// Dequantize decodes src into dst. len(dst) must be a whole number of
// blocks of t and src exactly the encoded size of that many elements. For
// INT8Row, dst is one row and src is its 4-byte little-endian float32 scale
// followed by len(dst) int8 values; use DequantizeRows for several rows.
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := checkRow(t, len(src), len(dst)); err != nil {
		return fmt.Errorf("dequantize: %w", err)
	}
	dequantizeRow(t, src, dst)
	return nil
}

// DequantizeRows decodes len(dst)/rowLen consecutive rows of rowLen elements
// each. len(dst) must be a multiple of rowLen and src exactly that many
// encoded rows. It works for every type and is the way to decode INT8Row
// tensors, whose rows each carry their own scale.
func DequantizeRows(t Type, src []byte, rowLen int, dst []float32) error {
	if rowLen <= 0 || len(dst)%rowLen != 0 {
		return fmt.Errorf("dequantize rows: %w: %d elements are not a whole number of rows of %d", errLength, len(dst), rowLen)
	}
	rows := len(dst) / rowLen
	rb, err := checkRows(t, len(src), rowLen, rows)
	if err != nil {
		return fmt.Errorf("dequantize rows: %w", err)
	}
	for r := 0; r < rows; r++ {
		dequantizeRow(t, src[r*rb:(r+1)*rb], dst[r*rowLen:(r+1)*rowLen])
	}
	return nil
}

// dequantizeRow decodes one validated row.
func dequantizeRow(t Type, src []byte, dst []float32) {
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		tab := f16Table
		for i := range dst {
			dst[i] = tab[binary.LittleEndian.Uint16(src[2*i:])]
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q4_0:
		for b := 0; b < len(dst)/32; b++ {
			dequantQ4_0((*[q40Bytes]byte)(src[b*q40Bytes:]), (*[32]float32)(dst[b*32:]))
		}
	case Q8_0:
		for b := 0; b < len(dst)/32; b++ {
			dequantQ8_0((*[q80Bytes]byte)(src[b*q80Bytes:]), (*[32]float32)(dst[b*32:]))
		}
	case Q4_K:
		for b := 0; b < len(dst)/QK_K; b++ {
			dequantQ4K((*[q4kBytes]byte)(src[b*q4kBytes:]), (*[QK_K]float32)(dst[b*QK_K:]))
		}
	case Q5_K:
		for b := 0; b < len(dst)/QK_K; b++ {
			dequantQ5K((*[q5kBytes]byte)(src[b*q5kBytes:]), (*[QK_K]float32)(dst[b*QK_K:]))
		}
	case Q6_K:
		for b := 0; b < len(dst)/QK_K; b++ {
			dequantQ6K((*[q6kBytes]byte)(src[b*q6kBytes:]), (*[QK_K]float32)(dst[b*QK_K:]))
		}
	case INT8Row:
		scale := math.Float32frombits(binary.LittleEndian.Uint32(src))
		q := src[4:]
		for i := range dst {
			dst[i] = scale * float32(int8(q[i]))
		}
	}
}

// dequantQ4_0: y[l] = d*(lo(qs[l])-8), y[l+16] = d*(hi(qs[l])-8).
func dequantQ4_0(b *[q40Bytes]byte, y *[32]float32) {
	d := halfAt(b[0:])
	for l := 0; l < 16; l++ {
		v := b[2+l]
		y[l] = d * float32(int32(v&15)-8)
		y[l+16] = d * float32(int32(v>>4)-8)
	}
}

// dequantQ8_0: y[l] = d*qs[l].
func dequantQ8_0(b *[q80Bytes]byte, y *[32]float32) {
	d := halfAt(b[0:])
	for l := 0; l < 32; l++ {
		y[l] = d * float32(int8(b[2+l]))
	}
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j (0..7) from the
// 12 packed bytes of a Q4_K/Q5_K block (ggml's get_scale_min_k4): the first
// four pairs sit in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins);
// the last four take their low 4 bits from bytes 8..11 and their top 2 bits
// from the spare high bits of bytes 0..7.
func scaleMinK4(j int, s *[12]byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// packScaleMinK4 is the inverse of scaleMinK4 for 6-bit values.
func packScaleMinK4(sc, m *[8]uint8, s *[12]byte) {
	for j := 0; j < 4; j++ {
		s[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		s[j+4] = m[j]&63 | (m[j+4]>>4)<<6
		s[j+8] = sc[j+4]&0xf | (m[j+4]&0xf)<<4
	}
}

// kScales computes the effective per-sub-block scale d*sc and offset
// dmin*m of a Q4_K/Q5_K block.
func kScales(b []byte, ds, ms *[8]float32) {
	d := halfAt(b[0:])
	dmin := halfAt(b[2:])
	s := (*[12]byte)(b[q4kScales:])
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, s)
		ds[j] = d * float32(sc)
		ms[j] = dmin * float32(m)
	}
}

// dequantQ4K: sub-block s (elements 32s..32s+31) uses the low nibbles of
// qs[32*(s/2):] for even s and the high nibbles for odd s;
// y = d*sc_s*q - dmin*m_s.
func dequantQ4K(b *[q4kBytes]byte, y *[QK_K]float32) {
	var ds, ms [8]float32
	kScales(b[:], &ds, &ms)
	for j := 0; j < 4; j++ {
		qs := (*[32]byte)(b[q4kQs+32*j:])
		lo := (*[32]float32)(y[64*j:])
		hi := (*[32]float32)(y[64*j+32:])
		d1, m1, d2, m2 := ds[2*j], ms[2*j], ds[2*j+1], ms[2*j+1]
		for l := 0; l < 32; l++ {
			v := qs[l]
			lo[l] = float32(d1*float32(v&15)) - m1
			hi[l] = float32(d2*float32(v>>4)) - m2
		}
	}
}

// dequantQ5K is Q4_K with a fifth bit: element 32s+l adds 16 when bit s of
// qh[l] is set.
func dequantQ5K(b *[q5kBytes]byte, y *[QK_K]float32) {
	var ds, ms [8]float32
	kScales(b[:], &ds, &ms)
	qh := (*[32]byte)(b[q5kQh:])
	for j := 0; j < 4; j++ {
		qs := (*[32]byte)(b[q5kQs+32*j:])
		lo := (*[32]float32)(y[64*j:])
		hi := (*[32]float32)(y[64*j+32:])
		d1, m1, d2, m2 := ds[2*j], ms[2*j], ds[2*j+1], ms[2*j+1]
		sh := uint(2 * j)
		for l := 0; l < 32; l++ {
			v := qs[l]
			h := qh[l] >> sh
			lo[l] = float32(d1*float32(v&15|(h&1)<<4)) - m1
			hi[l] = float32(d2*float32(v>>4|(h&2)<<3)) - m2
		}
	}
}

// dequantQ6K: for each half n (128 elements) and l < 32, four 6-bit values
// are assembled from ql[64n+l], ql[64n+l+32] (low/high nibbles) and the four
// 2-bit fields of qh[32n+l]; element e uses int8 scale e/16 and
// y = d*scale*(q-32).
func dequantQ6K(b *[q6kBytes]byte, y *[QK_K]float32) {
	d := halfAt(b[q6kD:])
	var ds [16]float32
	for i := 0; i < 16; i++ {
		ds[i] = d * float32(int8(b[q6kScales+i]))
	}
	for n := 0; n < 2; n++ {
		ql := (*[64]byte)(b[64*n:])
		qh := (*[32]byte)(b[q6kQh+32*n:])
		out := (*[128]float32)(y[128*n:])
		sc := (*[8]float32)(ds[8*n:])
		for l := 0; l < 32; l++ {
			h := qh[l]
			a, c := ql[l], ql[l+32]
			is := l / 16
			out[l] = sc[is] * float32(int32(a&15|(h&3)<<4)-32)
			out[l+32] = sc[is+2] * float32(int32(c&15|(h>>2&3)<<4)-32)
			out[l+64] = sc[is+4] * float32(int32(a>>4|(h>>4&3)<<4)-32)
			out[l+96] = sc[is+6] * float32(int32(c>>4|(h>>6)<<4)-32)
		}
	}
}
