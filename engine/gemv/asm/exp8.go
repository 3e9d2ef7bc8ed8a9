package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The exponential of the AVX2 softmax and gated activations (attn.go's
// generators, for the CPUs without AVX-512). Sixteen registers do not
// hold its constants beside the work, so its polynomial takes them from
// memory (exp8Consts, each constant in 8 lanes), and without
// VSCALEFPS the power of two is built in the exponent's bits, which
// holds normal numbers only: arguments below exp8Floor give 0, where
// AVX-512's exponential gives a subnormal down to e^−103 (a probability
// or a gate no float32 sum would notice).

const exp8Floor = -87 // e^−87 is normal in float32; its 2^k is 2^−126

// exp8Consts' 32-byte entries, in order.
const (
	e8Log2e = iota
	e8LnHi
	e8LnLo
	e8Floor
	e8Coef // 8 coefficients, 1/7! down to 1/0!
	e8Bias = e8Coef + 8
	e8Ceil = iota + 7
	e8One
	e8Cube
	e8TwoC
	e8OneD // a float64 1 (the sum's reciprocal)
	e8Count
)

var exp8Consts Mem

// exp8Table lays out exp8Consts once.
func exp8Table() {
	if exp8Consts.Symbol.Name != "" {
		return
	}
	exp8Consts = GLOBL("exp8Consts", RODATA|NOPTR)
	coef := expCoefs()
	vals := map[int]float32{e8Log2e: 1 / math.Ln2, e8LnHi: ln2Hi, e8LnLo: ln2Lo, e8Floor: exp8Floor,
		e8Ceil: expCeil, e8One: 1, e8Cube: 0.044715, e8TwoC: float32(2 * math.Sqrt(2/math.Pi))}
	for i, c := range coef {
		vals[e8Coef+i] = c
	}
	for e := range e8Count {
		for l := range 8 {
			switch {
			case e == e8Bias:
				DATA(32*e+4*l, U32(127))
				continue
			case e == e8OneD && l%2 == 0:
				DATA(32*e+4*l, F64(1))
				continue
			case e == e8OneD:
				continue
			}
			DATA(32*e+4*l, F32(vals[e]))
		}
	}
}

// exp8 returns e^x in a new register for the 8 lanes of x (overwritten),
// 0 for arguments below exp8Floor (−Inf included).
func exp8(x VecVirtual) VecVirtual {
	c := func(e int) Mem { return exp8Consts.Offset(32 * e) }
	low := YMM()
	VCMPPS(U8(1), c(e8Floor), x, low) // x < floor (ordered, signalling)
	VMAXPS(c(e8Floor), x, x)
	k := YMM()
	VMULPS(c(e8Log2e), x, k)
	VROUNDPS(U8(8), k, k) // to nearest, no precision exception
	VFNMADD231PS(c(e8LnHi), k, x)
	VFNMADD231PS(c(e8LnLo), k, x)
	e := YMM()
	VMOVUPS(c(e8Coef), e)
	for i := 1; i < 8; i++ {
		VFMADD213PS(c(e8Coef+i), x, e)
	}
	// 2^k: k+127 in the exponent's bits.
	VCVTPS2DQ(k, k)
	VPADDD(c(e8Bias), k, k)
	VPSLLD(U8(23), k, k)
	VMULPS(k, e, e)
	VANDNPS(e, low, e)
	return e
}
