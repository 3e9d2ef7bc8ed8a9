package quant

import "math"

// F16ToF32 widens an IEEE 754 binary16 value to float32. The conversion is
// exact for every input: subnormals become normal float32 values, infinities
// stay infinite and NaNs keep their sign and payload (shifted into the top
// of the float32 mantissa).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}

// F32ToF16 narrows a float32 to IEEE 754 binary16 with round-to-nearest,
// ties-to-even. Values beyond the half range become ±Inf, tiny values
// become half subnormals or ±0, and NaN stays NaN (quiet, sign and the top
// payload bits kept).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // rebiased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Half subnormal (or zero). The half value is r * 2^-24 where r is
		// the float32 significand shifted right by 14-e, correctly rounded.
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to ±0
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into the smallest normal, which encodes correctly
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is correct, including overflow to Inf
	}
	return sign | uint16(r)
}

// BF16ToF32 widens a bfloat16 (the top half of a float32) to float32; exact.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows a float32 to bfloat16 with round-to-nearest,
// ties-to-even. NaN stays NaN (quiet, sign kept) rather than rounding into
// an infinity.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f16Table holds the float32 value of every binary16 bit pattern. The F16
// dot and dequantize loops use it: one L1/L2 load beats the branches of
// F16ToF32 for bulk data.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
}()
