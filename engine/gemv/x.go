package gemv

import (
	"fmt"
	"math"
)

// Block is the number of vector elements that share one scale.
const Block = 256

// Sub is the number of elements behind each of X's partial sums.
const Sub = 32

// Range is the largest magnitude of a quantized vector element. Twelve
// bits keep every kernel's integer sum of a 256-element block inside int32
// for every weight format (Q6_K's, the tightest, reaches 2146435072 at
// most), so the integer part of every product is exact.
const Range = 2047

// X is one vector prepared for the kernels: F holds it as given (zero
// padded), Q its 12-bit quantization, D the scale of each 256-element
// block (element ≈ D[b]·Q[i]) and S the integer sum of each 32 elements of
// Q. The zero value is empty; Set fills it, reusing its memory.
type X struct {
	N int       // elements set
	F []float32 // the vector, zero padded to a whole block
	Q []int16   // quantized elements, len = padded length
	D []float32 // one scale per block
	S []int32   // one sum per 32 elements of Q
}

// Padded is n rounded up to a whole number of blocks.
func Padded(n int) int { return (n + Block - 1) / Block * Block }

// Set quantizes v into x. Each block's scale is its largest magnitude over
// Range; elements round to nearest, ties to even. A block of zeros
// gets scale 0. Non-finite input is refused: a NaN or an infinity would
// make every integer of its block meaningless.
func (x *X) Set(v []float32) error {
	x.Size(len(v))
	return x.SetBlocks(v, 0, x.Blocks())
}

// Size makes x hold a vector of n elements (reusing its memory), for
// SetBlocks to fill.
func (x *X) Size(n int) {
	p := Padded(n)
	x.N = n
	x.F = grow(x.F, p)
	x.Q = grow(x.Q, p)
	x.D = grow(x.D, p/Block)
	x.S = grow(x.S, p/Sub)
}

// Blocks is the number of 256-element blocks x holds.
func (x *X) Blocks() int { return len(x.D) }

// SetBlocks quantizes blocks [b0, b1) of v (len(v) = x.N, after Size) into
// x, as Set does. Calls for disjoint ranges may run concurrently: a long
// vector is quantized by several cores.
func (x *X) SetBlocks(v []float32, b0, b1 int) error {
	if len(v) != x.N || b0 < 0 || b1 > x.Blocks() || b0 > b1 {
		return fmt.Errorf("quantize vector: blocks [%d, %d) of %d elements into a vector sized for %d", b0, b1, len(v), x.N)
	}
	lo, hi := b0*Block, min(b1*Block, x.N)
	if lo < hi {
		copy(x.F[lo:hi], v[lo:hi])
	}
	clear(x.F[max(lo, hi) : b1*Block])
	for b := b0; b < b1; b++ {
		f := x.F[b*Block : (b+1)*Block]
		var bits uint32 // the largest magnitude's bits: they order as the floats do
		for _, e := range f {
			if a := math.Float32bits(e) &^ (1 << 31); a > bits {
				bits = a
			}
		}
		amax := math.Float32frombits(bits)
		if bits >= 0x7f800000 {
			return fmt.Errorf("quantize vector: element %d is not finite", b*Block+indexNonFinite(f))
		}
		q := x.Q[b*Block : (b+1)*Block]
		if amax == 0 {
			x.D[b] = 0
			clear(q)
		} else {
			x.D[b] = amax / Range
			inv := Range / amax
			for i, e := range f {
				// Adding and subtracting 1.5·2²³ rounds a float32 of
				// magnitude below 2²² to the nearest integer, ties to
				// even; |e·inv| ≤ Range
				// (amax·(Range/amax) rounds to at most Range).
				r := float32(float32(e*inv)+roundMagic) - roundMagic
				q[i] = int16(r)
			}
		}
		for s := 0; s < Block/Sub; s++ {
			var sum int32
			for _, e := range q[s*Sub : (s+1)*Sub] {
				sum += int32(e)
			}
			x.S[b*Block/Sub+s] = sum
		}
	}
	return nil
}

// roundMagic is 1.5·2²³: float32 addition of it leaves an integer.
const roundMagic = 12582912

func indexNonFinite(f []float32) int {
	for i, e := range f {
		if !(math.Abs(float64(e)) <= math.MaxFloat32) {
			return i
		}
	}
	return 0
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
