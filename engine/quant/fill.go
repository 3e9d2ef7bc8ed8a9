package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
)

// FillRandom writes synthetic tensors at disk speed: `strata model synth`
// produces multi-GB files whose weights only need to look like a trained
// matrix (centred, roughly the requested std, always finite), not be one.
//
// Output is a pure function of (type, length, seed, std): the encoded
// buffer is cut into fixed chunks of about 64 KiB (whole blocks), chunk k
// draws from its own generator seeded from (seed, k), so FillRandom and
// FillRandomParallel produce identical bytes for any GOMAXPROCS.
//
// Distributions:
//   - F32, F16, BF16: a Gaussian with the given std, sampled through a
//     4096-entry table of normal quantiles (so 4096 distinct values, none
//     beyond 3.7 std).
//   - Q8_0, INT8Row: uniformly random int8 quants with a block (row) scale
//     chosen so the std matches; the mean is -0.5 quant steps (0.7% of the
//     std: int8 has one more negative level than positive).
//   - Q4_0: uniformly random nibbles, d of random sign per block so the
//     -0.5 step mean (11% of the std at 4 bits) cancels.
//   - Q4_K, Q5_K: uniformly random quants, random 6-bit sub-block scales in
//     32..63, each sub-block's 6-bit min equal to its scale and dmin = d *
//     (levels-1)/2, so every sub-block is centred on zero.
//   - Q6_K: uniformly random 6-bit quants, int8 sub-block scales of random
//     sign and magnitude 64..127, so the mean cancels across sub-blocks.

// fillChunkBytes is the target size of one independently seeded chunk.
const fillChunkBytes = 1 << 16

// wyrand is a small, fast 64-bit generator (one 64x64->128 multiply per
// output word).
type wyrand uint64

func (s *wyrand) next() uint64 {
	*s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(uint64(*s), uint64(*s)^0xe7037ed1a0b428db)
	return hi ^ lo
}

// chunkSeed derives the generator state of chunk k (splitmix64 finaliser).
func chunkSeed(seed uint64, k int) wyrand {
	z := seed + uint64(k+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return wyrand(z ^ z>>31)
}

// Standard deviations of uniformly random quants.
var (
	sdU4 = math.Sqrt((16*16 - 1) / 12.0)   // 0..15
	sdU5 = math.Sqrt((32*32 - 1) / 12.0)   // 0..31
	sdU6 = math.Sqrt((64*64 - 1) / 12.0)   // -32..31
	sdU8 = math.Sqrt((256*256 - 1) / 12.0) // -128..127
)

// gaussTable holds 4096 normal quantiles Φ⁻¹((i+0.5)/4096), rescaled to
// exactly unit standard deviation.
var gaussTable = sync.OnceValue(func() *[4096]float64 {
	var t [4096]float64
	var ss float64
	for i := range t {
		p := (float64(i) + 0.5) / 4096
		t[i] = math.Sqrt2 * math.Erfinv(2*p-1)
		ss += t[i] * t[i]
	}
	r := math.Sqrt(float64(len(t)) / ss)
	for i := range t {
		t[i] *= r
	}
	return &t
})

// fillPlan is everything a chunk needs: the layout and the per-call tables
// and scale fields derived from std.
type fillPlan struct {
	t          Type
	prefix     int // bytes before the blocks (INT8Row's scale)
	blockBytes int
	blocks     int // number of blocks after the prefix
	perChunk   int // blocks per chunk

	tab16 *[4096]uint16 // F16/BF16 encoded Gaussian samples
	tab32 *[4096]uint32 // F32 encoded Gaussian samples
	d     uint16        // fp16 block scale (Q4_0, Q8_0, K-quants)
	dmin  uint16        // fp16 block min scale (Q4_K, Q5_K)
	scale float32       // INT8Row row scale
}

func newFillPlan(t Type, n int, std float32) (*fillPlan, error) {
	if !t.Known() {
		return nil, fmt.Errorf("fill random: %w: %d", ErrUnknownType, uint32(t))
	}
	if !(std >= 0) || math.IsInf(float64(std), 0) {
		return nil, fmt.Errorf("fill random: std %v must be finite and non-negative", std)
	}
	p := &fillPlan{t: t, blockBytes: t.BlockBytes()}
	if t == INT8Row {
		if n < 4 {
			return nil, fmt.Errorf("fill random: %w: INT8_ROW row needs at least 4 bytes, got %d", errLength, n)
		}
		p.prefix = 4
	}
	if (n-p.prefix)%p.blockBytes != 0 {
		return nil, fmt.Errorf("fill random: %w: %d bytes is not a whole number of %v blocks of %d bytes", errLength, n, t, p.blockBytes)
	}
	p.blocks = (n - p.prefix) / p.blockBytes
	p.perChunk = max(1, fillChunkBytes/p.blockBytes)
	s := float64(std)
	switch t {
	case F32:
		g := gaussTable()
		p.tab32 = new([4096]uint32)
		for i, v := range g {
			p.tab32[i] = math.Float32bits(float32(v * s))
		}
	case F16, BF16:
		g := gaussTable()
		p.tab16 = new([4096]uint16)
		for i, v := range g {
			if t == F16 {
				p.tab16[i] = F32ToF16(float32(v * s))
			} else {
				p.tab16[i] = F32ToBF16(float32(v * s))
			}
		}
	case Q4_0:
		p.d = F32ToF16(float32(s / sdU4))
	case Q8_0:
		p.d = F32ToF16(float32(s / sdU8))
	case INT8Row:
		p.scale = float32(s / sdU8)
	case Q4_K, Q5_K:
		// Sub-scales are uniform on 32..63; E[sc²] over that range.
		var ss float64
		for v := 32; v < 64; v++ {
			ss += float64(v * v)
		}
		rms := math.Sqrt(ss / 32)
		sd, half := sdU4, 7.5
		if t == Q5_K {
			sd, half = sdU5, 15.5
		}
		p.d = F32ToF16(float32(s / (sd * rms)))
		p.dmin = F32ToF16(F16ToF32(p.d) * float32(half))
	case Q6_K:
		var ss float64
		for v := 64; v < 128; v++ {
			ss += float64(v * v)
		}
		rms := math.Sqrt(ss / 64)
		p.d = F32ToF16(float32(s / (sdU6 * rms)))
	}
	if p.d&0x7c00 == 0x7c00 || p.dmin&0x7c00 == 0x7c00 {
		return nil, fmt.Errorf("fill random: std %v is too large for the fp16 scales of %v", std, t)
	}
	return p, nil
}

func (p *fillPlan) chunks() int { return (p.blocks + p.perChunk - 1) / p.perChunk }

// FillRandom fills dst, a whole number of blocks of t (for INT8Row: one row,
// its 4-byte scale then int8 values), with valid encoded data whose decoded
// values look like a random weight matrix with standard deviation about std:
// centred, finite, deterministic for a given seed. See the distribution
// notes at the top of fill.go. It produces the same bytes as
// FillRandomParallel.
func FillRandom(t Type, dst []byte, seed uint64, std float32) error {
	p, err := newFillPlan(t, len(dst), std)
	if err != nil {
		return err
	}
	p.writePrefix(dst)
	for k := 0; k < p.chunks(); k++ {
		p.fillChunk(dst, seed, k)
	}
	return nil
}

// FillRandomParallel is FillRandom spread over GOMAXPROCS goroutines. Work
// is split at the fixed chunk boundaries and every chunk is seeded from its
// index, so the output is byte-identical to FillRandom's whatever the
// number of goroutines.
func FillRandomParallel(t Type, dst []byte, seed uint64, std float32) error {
	p, err := newFillPlan(t, len(dst), std)
	if err != nil {
		return err
	}
	p.writePrefix(dst)
	nc := p.chunks()
	workers := min(runtime.GOMAXPROCS(0), nc)
	if workers <= 1 {
		for k := 0; k < nc; k++ {
			p.fillChunk(dst, seed, k)
		}
		return nil
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		k0, k1 := w*nc/workers, (w+1)*nc/workers
		wg.Go(func() {
			for k := k0; k < k1; k++ {
				p.fillChunk(dst, seed, k)
			}
		})
	}
	wg.Wait()
	return nil
}

// FillRandomRows fills dst as len(dst)/RowBytes(rowLen) rows of rowLen
// elements. For INT8Row every row gets its own scale field and a generator
// seeded from (seed, row), so the result is a valid multi-row INT8Row
// tensor (FillRandom would treat the whole buffer as one row). For the
// other types rows are just consecutive blocks and this equals
// FillRandomParallel. Work is spread over GOMAXPROCS goroutines; the output
// does not depend on their number.
func FillRandomRows(t Type, dst []byte, rowLen int, seed uint64, std float32) error {
	if !t.Known() {
		return fmt.Errorf("fill random: %w: %d", ErrUnknownType, uint32(t))
	}
	if rowLen <= 0 {
		return fmt.Errorf("fill random: %w: row length %d must be positive", errLength, rowLen)
	}
	rb, err := t.RowBytes(int64(rowLen))
	if err != nil {
		return fmt.Errorf("fill random: %w: %w", errLength, err)
	}
	if int64(len(dst))%rb != 0 {
		return fmt.Errorf("fill random: %w: %d bytes is not a whole number of %v rows of %d bytes", errLength, len(dst), t, rb)
	}
	if t != INT8Row {
		return FillRandomParallel(t, dst, seed, std)
	}
	p, err := newFillPlan(t, int(rb), std)
	if err != nil {
		return err
	}
	rows := len(dst) / int(rb)
	fillRow := func(r int) {
		row := dst[r*int(rb) : (r+1)*int(rb)]
		p.writePrefix(row)
		rs := uint64(chunkSeed(seed, r))
		for k := 0; k < p.chunks(); k++ {
			p.fillChunk(row, rs, k)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), rows)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		r0, r1 := w*rows/workers, (w+1)*rows/workers
		wg.Go(func() {
			for r := r0; r < r1; r++ {
				fillRow(r)
			}
		})
	}
	wg.Wait()
	return nil
}

func (p *fillPlan) writePrefix(dst []byte) {
	if p.t == INT8Row {
		binary.LittleEndian.PutUint32(dst, math.Float32bits(p.scale))
	}
}

// fillChunk writes chunk k.
func (p *fillPlan) fillChunk(dst []byte, seed uint64, k int) {
	rng := chunkSeed(seed, k)
	b0 := k * p.perChunk
	b1 := min(b0+p.perChunk, p.blocks)
	buf := dst[p.prefix+b0*p.blockBytes : p.prefix+b1*p.blockBytes]
	nb := b1 - b0
	switch p.t {
	case F32:
		tab := p.tab32
		i := 0
		for ; i+8 <= len(buf); i += 8 {
			r := rng.next()
			binary.LittleEndian.PutUint64(buf[i:], uint64(tab[r&4095])|uint64(tab[r>>32&4095])<<32)
		}
		if i < len(buf) {
			binary.LittleEndian.PutUint32(buf[i:], tab[rng.next()&4095])
		}
	case F16, BF16:
		tab := p.tab16
		i := 0
		for ; i+8 <= len(buf); i += 8 {
			r := rng.next()
			v := uint64(tab[r&4095]) | uint64(tab[r>>16&4095])<<16 |
				uint64(tab[r>>32&4095])<<32 | uint64(tab[r>>48&4095])<<48
			binary.LittleEndian.PutUint64(buf[i:], v)
		}
		for ; i < len(buf); i += 2 {
			binary.LittleEndian.PutUint16(buf[i:], tab[rng.next()&4095])
		}
	case INT8Row:
		fillBytes(&rng, buf)
	case Q4_0:
		for b := 0; b < nb; b++ {
			blk := (*[q40Bytes]byte)(buf[b*q40Bytes:])
			r := rng.next()
			// A random sign on d cancels the -0.5 step mean of the nibbles.
			binary.LittleEndian.PutUint16(blk[0:], p.d|uint16(r>>48)&0x8000)
			binary.LittleEndian.PutUint64(blk[2:], rng.next())
			binary.LittleEndian.PutUint64(blk[10:], rng.next())
		}
	case Q8_0:
		for b := 0; b < nb; b++ {
			blk := (*[q80Bytes]byte)(buf[b*q80Bytes:])
			binary.LittleEndian.PutUint16(blk[0:], p.d)
			for i := 2; i < q80Bytes; i += 8 {
				binary.LittleEndian.PutUint64(blk[i:], rng.next())
			}
		}
	case Q4_K, Q5_K:
		for b := 0; b < nb; b++ {
			blk := buf[b*p.blockBytes : (b+1)*p.blockBytes]
			binary.LittleEndian.PutUint16(blk[0:], p.d)
			binary.LittleEndian.PutUint16(blk[2:], p.dmin)
			r := rng.next()
			var sc [8]uint8
			for j := range sc {
				sc[j] = 32 | uint8(r>>(5*j))&31
			}
			packScaleMinK4(&sc, &sc, (*[12]byte)(blk[q4kScales:]))
			fillBytes(&rng, blk[q4kQs:]) // Q5_K: qh and qs are contiguous
		}
	case Q6_K:
		for b := 0; b < nb; b++ {
			blk := (*[q6kBytes]byte)(buf[b*q6kBytes:])
			fillBytes(&rng, blk[:q6kScales])
			r0, r1 := rng.next(), rng.next()
			for j := 0; j < 8; j++ {
				blk[q6kScales+j] = k6Scale(uint8(r0 >> (8 * j)))
				blk[q6kScales+8+j] = k6Scale(uint8(r1 >> (8 * j)))
			}
			binary.LittleEndian.PutUint16(blk[q6kD:], p.d)
		}
	}
}

// k6Scale maps a random byte to an int8 scale of random sign and magnitude
// 64..127.
func k6Scale(r uint8) byte {
	m := int8(64 | r&63)
	neg := -int8(r >> 6 & 1) // 0 or -1; branch-free, the sign is random
	return byte(m ^ neg - neg)
}

// fillBytes fills b with random bytes, 8 at a time.
func fillBytes(rng *wyrand, b []byte) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.next())
	}
	if i < len(b) {
		r := rng.next()
		for ; i < len(b); i++ {
			b[i] = byte(r)
			r >>= 8
		}
	}
}
