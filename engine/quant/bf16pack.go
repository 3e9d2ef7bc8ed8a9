package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// A lossless stream codec for bf16 tensors ("BF16 packed").
//
// Why: streamed bf16 layers are bound by PCIe bytes, and the 8-bit exponent
// of trained (or synthetic, Gaussian) weights has low entropy: the weights of
// one block of a tensor span a handful of exponents. The sign and the 7
// mantissa bits are close to random and are kept as they are.
//
// Format. A tensor of n bf16 values (little endian) is cut into blocks of
// BF16PackBlock values (the last may be partial). Each block has a base
// exponent E (one byte) and each value a 4-bit code c: c in 0..14 means the
// value's exponent is E-c; c = 15 is an escape, whose exponent byte is stored
// in the block's run of the escape list. The encoder picks for each block the
// E whose window [E-14, E] covers the most of its exponents (ties: the
// higher E), so an outlier, a zero or an Inf costs one escape byte rather than
// the whole block. Decoding is exact for every bit pattern (±0, subnormals,
// Inf, NaN payloads): the sign and mantissa bits are copied, the exponent
// byte is rebuilt.
//
// Layout (every plane starts 16-byte aligned relative to the blob, so a GPU
// decoder loads each with coalesced 16-byte accesses; see BF16PackLayout):
//
//	header  16 bytes: "BP16", uint32 version 0, uint64 n
//	sm      n bytes: sign<<7 | mantissa of each value
//	nib     ceil(n/2) bytes: value i's code in byte i/2, low nibble for even i
//	base    nb bytes: each block's E
//	escoff  nb+1 uint32: escapes before each block; escoff[nb] is the total
//	esc     escoff[nb] bytes: the escaped exponents, in value order
//
// For whole blocks this is 12 bits per value plus 5 bytes per block and the
// escapes: 0.760 of bf16 plus escapes/(2n).

// BF16PackBlock is the number of values that share one base exponent.
const BF16PackBlock = 256

// bf16PackMagic opens every packed blob ("BP16" little endian).
const bf16PackMagic = 0x36315042

// BF16PackMaxElems bounds the values of one packed tensor, so escape counts
// fit the uint32 offsets.
const BF16PackMaxElems = 1<<32 - 1

// ErrBF16Packed is wrapped by every decoding error of a malformed blob.
var ErrBF16Packed = errors.New("malformed packed bf16 data")

// BF16PackLayout is where each plane of a packed tensor of N values lies,
// as byte offsets from the blob's start; Size is the whole blob. It depends
// only on N and the escape count, so a GPU decoder can find the planes from
// the tensor's shape alone.
type BF16PackLayout struct {
	N, Blocks, Escapes               int64
	SM, Nib, Base, EscOff, Esc, Size int64
}

func align16(n int64) int64 { return (n + 15) &^ 15 }

// BF16PackLayoutFor returns the layout of n values with escapes escapes.
func BF16PackLayoutFor(n, escapes int64) BF16PackLayout {
	nb := (n + BF16PackBlock - 1) / BF16PackBlock
	l := BF16PackLayout{N: n, Blocks: nb, Escapes: escapes, SM: 16}
	l.Nib = align16(l.SM + n)
	l.Base = align16(l.Nib + (n+1)/2)
	l.EscOff = align16(l.Base + nb)
	l.Esc = align16(l.EscOff + 4*(nb+1))
	l.Size = align16(l.Esc + escapes)
	return l
}

// bf16Window returns the base exponent of block src (2 bytes per value)
// whose 15-exponent window covers the most values, and how many it leaves
// to escape.
func bf16Window(src []byte) (base byte, escapes int) {
	var hist [256]int32
	lo, hi := 255, 0
	n := len(src) / 2
	for i := 0; i < n; i++ {
		e := int(binary.LittleEndian.Uint16(src[2*i:])>>7) & 0xff
		hist[e]++
		lo, hi = min(lo, e), max(hi, e)
	}
	// Sliding window [E-14, E], E from hi down to lo.
	var cover int32
	for e := max(hi-14, 0); e <= hi; e++ {
		cover += hist[e]
	}
	best, bestE := cover, hi
	for E := hi - 1; E >= lo && E >= 14 && best < int32(n); E-- {
		cover += hist[E-14] - hist[E+1]
		if cover > best {
			best, bestE = cover, E
		}
	}
	return byte(bestE), n - int(best)
}

// bf16Plan is the first pass over a tensor: each block's base and the
// escapes before it.
type bf16Plan struct {
	n      int64
	base   []byte
	escOff []uint32 // nb+1
}

// bf16Workers runs fn over [0, nb) split into contiguous ranges, in
// parallel when the work is large enough to pay for goroutines.
func bf16Workers(nb int64, fn func(b0, b1 int64)) {
	const minPer = 1024 // blocks (256 KiB of values) per goroutine at least
	w := int64(runtime.GOMAXPROCS(0))
	w = min(w, nb/minPer)
	if w <= 1 {
		fn(0, nb)
		return
	}
	var wg sync.WaitGroup
	for i := range w {
		b0, b1 := i*nb/w, (i+1)*nb/w
		wg.Go(func() { fn(b0, b1) })
	}
	wg.Wait()
}

func planBF16(src []byte) (*bf16Plan, error) {
	if len(src)%2 != 0 {
		return nil, fmt.Errorf("pack bf16: %d bytes is not a whole number of values", len(src))
	}
	n := int64(len(src) / 2)
	if n > BF16PackMaxElems {
		return nil, fmt.Errorf("pack bf16: %d values exceed the codec's %d", n, int64(BF16PackMaxElems))
	}
	nb := (n + BF16PackBlock - 1) / BF16PackBlock
	p := &bf16Plan{n: n, base: make([]byte, nb), escOff: make([]uint32, nb+1)}
	bf16Workers(nb, func(b0, b1 int64) {
		for b := b0; b < b1; b++ {
			lo, hi := b*2*BF16PackBlock, min((b+1)*2*BF16PackBlock, int64(len(src)))
			e, esc := bf16Window(src[lo:hi])
			p.base[b] = e
			p.escOff[b+1] = uint32(esc) // counts for now
		}
	})
	for b := int64(0); b < nb; b++ {
		p.escOff[b+1] += p.escOff[b]
	}
	return p, nil
}

func (p *bf16Plan) layout() BF16PackLayout {
	return BF16PackLayoutFor(p.n, int64(p.escOff[len(p.escOff)-1]))
}

// BF16PackedLayout runs the codec's first pass over src (little-endian
// bf16 values) and returns the layout its packed form would have, without
// writing it: what a loader needs to size buffers and decide whether packing
// saves anything (Size < len(src)).
func BF16PackedLayout(src []byte) (BF16PackLayout, error) {
	p, err := planBF16(src)
	if err != nil {
		return BF16PackLayout{}, err
	}
	return p.layout(), nil
}

// PackBF16 encodes src (little-endian bf16 values) into dst, which must hold
// at least the packed size (BF16PackedLayout), and returns the layout
// written. The work is spread over GOMAXPROCS goroutines; the output does
// not depend on their number. Bytes of dst between planes are zeroed.
func PackBF16(dst, src []byte) (BF16PackLayout, error) {
	p, err := planBF16(src)
	if err != nil {
		return BF16PackLayout{}, err
	}
	l := p.layout()
	if int64(len(dst)) < l.Size {
		return l, fmt.Errorf("pack bf16: destination of %d bytes, the packed form needs %d", len(dst), l.Size)
	}
	dst = dst[:l.Size]
	binary.LittleEndian.PutUint32(dst[0:], bf16PackMagic)
	binary.LittleEndian.PutUint32(dst[4:], 0)
	binary.LittleEndian.PutUint64(dst[8:], uint64(l.N))
	// Padding between planes.
	clear(dst[l.SM+l.N : l.Nib])
	clear(dst[l.Nib+(l.N+1)/2 : l.Base])
	clear(dst[l.Base+l.Blocks : l.EscOff])
	clear(dst[l.EscOff+4*(l.Blocks+1) : l.Esc])
	clear(dst[l.Esc+l.Escapes : l.Size])
	copy(dst[l.Base:], p.base)
	for b, v := range p.escOff {
		binary.LittleEndian.PutUint32(dst[l.EscOff+4*int64(b):], v)
	}
	sm, nib, esc := dst[l.SM:l.SM+l.N], dst[l.Nib:l.Nib+(l.N+1)/2], dst[l.Esc:l.Esc+l.Escapes]
	if l.N%2 == 1 {
		nib[len(nib)-1] = 0 // the unused high nibble
	}
	bf16Workers(l.Blocks, func(b0, b1 int64) {
		for b := b0; b < b1; b++ {
			E := int(p.base[b])
			k := p.escOff[b]
			i1 := min((b+1)*BF16PackBlock, l.N)
			for i := b * BF16PackBlock; i < i1; i++ {
				v := binary.LittleEndian.Uint16(src[2*i:])
				sm[i] = byte(v>>8)&0x80 | byte(v)&0x7f
				e := int(v>>7) & 0xff
				c := E - e
				if c < 0 || c > 14 {
					c = 15
					esc[k] = byte(e)
					k++
				}
				if i%2 == 0 {
					nib[i/2] = byte(c)
				} else {
					nib[i/2] |= byte(c) << 4
				}
			}
		}
	})
	return l, nil
}

// UnpackBF16 decodes a packed blob src into dst, which must be exactly the
// tensor's bf16 bytes (2 per value). Malformed input (wrong magic, version,
// length or size, escape offsets that disagree with the codes, a code below
// exponent 0) returns an error wrapping ErrBF16Packed; it never panics.
func UnpackBF16(dst, src []byte) error {
	l, err := bf16CheckHeader(src, int64(len(dst)))
	if err != nil {
		return err
	}
	sm, nib, base, esc := src[l.SM:l.SM+l.N], src[l.Nib:l.Nib+(l.N+1)/2], src[l.Base:l.Base+l.Blocks], src[l.Esc:l.Esc+l.Escapes]
	escOff := func(b int64) uint32 { return binary.LittleEndian.Uint32(src[l.EscOff+4*b:]) }
	if escOff(0) != 0 {
		return fmt.Errorf("%w: first escape offset %d, want 0", ErrBF16Packed, escOff(0))
	}
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	bf16Workers(l.Blocks, func(b0, b1 int64) {
		for b := b0; b < b1; b++ {
			k, k1 := escOff(b), escOff(b+1)
			if k1 < k || int64(k1) > l.Escapes {
				fail(fmt.Errorf("%w: block %d: escape offsets %d..%d outside 0..%d", ErrBF16Packed, b, k, k1, l.Escapes))
				return
			}
			E := int(base[b])
			i1 := min((b+1)*BF16PackBlock, l.N)
			for i := b * BF16PackBlock; i < i1; i++ {
				c := int(nib[i/2]>>(4*(i%2))) & 15
				var e int
				if c == 15 {
					if k >= k1 {
						fail(fmt.Errorf("%w: block %d has more escapes than its offsets allow (%d)", ErrBF16Packed, b, k1-escOff(b)))
						return
					}
					e = int(esc[k])
					k++
				} else if e = E - c; e < 0 {
					fail(fmt.Errorf("%w: value %d: code %d below base exponent %d", ErrBF16Packed, i, c, E))
					return
				}
				s := sm[i]
				binary.LittleEndian.PutUint16(dst[2*i:], uint16(s&0x80)<<8|uint16(e)<<7|uint16(s&0x7f))
			}
			if k != k1 {
				fail(fmt.Errorf("%w: block %d: %d escapes coded, its offsets say %d", ErrBF16Packed, b, k-escOff(b), k1-escOff(b)))
				return
			}
		}
	})
	return first
}

// bf16CheckHeader validates a blob's header and size against a destination
// of dstBytes and returns its layout.
func bf16CheckHeader(src []byte, dstBytes int64) (BF16PackLayout, error) {
	if len(src) < 16 {
		return BF16PackLayout{}, fmt.Errorf("%w: %d bytes, shorter than the header", ErrBF16Packed, len(src))
	}
	if m := binary.LittleEndian.Uint32(src); m != bf16PackMagic {
		return BF16PackLayout{}, fmt.Errorf("%w: magic %#08x", ErrBF16Packed, m)
	}
	if v := binary.LittleEndian.Uint32(src[4:]); v != 0 {
		return BF16PackLayout{}, fmt.Errorf("%w: version %d, want 0", ErrBF16Packed, v)
	}
	n := binary.LittleEndian.Uint64(src[8:])
	if dstBytes%2 != 0 || n != uint64(dstBytes/2) {
		return BF16PackLayout{}, fmt.Errorf("%w: %d values, the destination holds %d bytes", ErrBF16Packed, n, dstBytes)
	}
	l := BF16PackLayoutFor(int64(n), 0)
	if int64(len(src)) < l.Esc {
		return l, fmt.Errorf("%w: %d bytes, %d values need at least %d", ErrBF16Packed, len(src), n, l.Esc)
	}
	esc := int64(binary.LittleEndian.Uint32(src[l.EscOff+4*l.Blocks:]))
	l = BF16PackLayoutFor(int64(n), esc)
	if int64(len(src)) != l.Size {
		return l, fmt.Errorf("%w: %d bytes, %d values with %d escapes take %d", ErrBF16Packed, len(src), n, esc, l.Size)
	}
	return l, nil
}
