package gemv

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/strata-llm/strata/engine/quant"
)

// The matrix tiles (Intel AMX) path: for a batch of vectors, each panel of
// 16 weight rows is widened to bfloat16 once (BF16 rows are read as they
// are) and multiplied with 16 vectors at a time by the CPU's tile unit,
// which does a 16×16×32 product in one instruction. The one- and
// four-vector kernels pay a block's widening and then integer arithmetic
// for every vector; here the arithmetic is nearly free and the widening is
// paid once for up to 64 vectors, so a batch of prompt tokens or of
// sequences costs little more than a few vectors do.
//
// Precision: each weight is rounded to bfloat16 (8 significant bits: a
// relative error of 2⁻⁹ at most, small beside what a 4-8-bit format
// already dropped; BF16 weights are exact), and each vector element is
// split in two bfloat16 parts, its rounding and the rounding of what that
// leaves (16 significant bits); the products are summed in float32. The
// results are not the integer path's bits (ref.go), and their error
// against the exact product is of the integer path's size, whose largest
// part is the vector's 12-bit quantization: TestRowsTiledAccuracy states
// the bounds.

// TileRows is a tile's rows: the weight rows of a panel (RowsTiled
// computes whole panels; a caller sharing rows out keeps to them) and the
// vectors of a token tile.
const TileRows = 16

// TileCols is the columns one tile product takes, 32 bfloat16 (64 bytes)
// a row: RowsTiled's rows are a whole number of them.
const TileCols = 32

// tileGroup is the most token tiles one kernel call takes (its
// accumulators are tile registers 0-3).
const tileGroup = 4

// tileBlock is the columns of a panel widened at a time: two panels'
// blocks (32 KiB) stay in the first-level cache while the tiles read them.
const tileBlock = 512

// Tiles holds a batch of vectors for RowsTiled, as the tile unit reads
// them: for each 32 columns, for each tile of 16 vectors, the high parts
// then the low parts, each 16 rows of column pairs × 16 vectors. Pack
// fills it once a batch; any number of RowsTiled calls may then read it at
// once.
type Tiles struct {
	n     int // columns, a multiple of TileCols
	count int // vectors
	nt    int // token tiles
	x     []uint16
}

// Pack makes t hold xs (all of one length, a multiple of 32), reusing its
// memory: Size, then SetBlocks for every vector.
func (t *Tiles) Pack(xs []*X) error {
	if len(xs) == 0 {
		t.count = 0
		return nil
	}
	n := xs[0].N
	for j, x := range xs {
		if x.N != n {
			return fmt.Errorf("gemv: tiles: vector %d has %d elements, vector 0 has %d", j, x.N, n)
		}
	}
	if err := t.Size(len(xs), n); err != nil {
		return err
	}
	for v, x := range xs {
		if err := t.SetBlocks(v, x.F[:x.N], 0, x.Blocks()); err != nil {
			return err
		}
	}
	return nil
}

// Size makes t hold count vectors of n elements (a multiple of 32), for
// SetBlocks to fill, reusing its memory.
func (t *Tiles) Size(count, n int) error {
	if n%TileCols != 0 {
		return fmt.Errorf("gemv: tiles: %d elements are not a whole number of %d", n, TileCols)
	}
	t.count, t.n, t.nt = count, n, (count+TileRows-1)/TileRows
	t.x = grow(t.x, n/TileCols*t.nt*2*TileRows*TileCols)
	// The last tile's missing vectors hold whatever an earlier batch left
	// (or zeros): each result column reads its own vector's column alone,
	// and theirs are dropped.
	return nil
}

// SetBlocks writes vector v's elements of blocks [b0, b1) (Block elements
// each, up to the vector's end) from f (the vector, len n), each as its
// bfloat16 rounding (to nearest, ties to even) and the rounding of what
// that leaves. Non-finite elements are refused, as X refuses them. Calls
// for different vectors, or disjoint blocks, may run concurrently.
func (t *Tiles) SetBlocks(v int, f []float32, b0, b1 int) error {
	if v < 0 || v >= t.count || len(f) != t.n || b0 < 0 || b0 > b1 || b1 > (t.n+Block-1)/Block {
		return fmt.Errorf("gemv: tiles: vector %d's blocks [%d, %d) of %d elements into tiles of %d vectors of %d", v, b0, b1, len(f), t.count, t.n)
	}
	j, col := v/TileRows, v%TileRows
	const tile = TileRows * TileCols
	c0, c1 := b0*Block/TileCols, min(b1*Block, t.n)/TileCols
	if c0 < c1 && available(AVX512) {
		// The kernel (asm/tileset.go) lays out chunk c0 on; where it
		// stops early the loop below finds the element that stopped it.
		at := ((c0*t.nt+j)*2)*tile + col*2
		last := ((c1-1)*t.nt+j)*2*tile + 2*tile
		_ = t.x[last-1] // every tile the kernel writes lies in t.x
		c0 += tilesSetAVX512(&f[c0*TileCols], c1-c0, &t.x[at], t.nt*2*tile*2)
	}
	return t.setChunks(v, f, c0, c1)
}

// setChunks is SetBlocks in Go for vector v's chunks [c0, c1) of
// TileCols elements.
func (t *Tiles) setChunks(v int, f []float32, c0, c1 int) error {
	j, col := v/TileRows, v%TileRows
	const tile = TileRows * TileCols
	for c := c0; c < c1; c++ {
		at := ((c*t.nt + j) * 2) * tile
		hi, lo := t.x[at:at+tile:at+tile], t.x[at+tile:at+2*tile:at+2*tile]
		src := f[c*TileCols : (c+1)*TileCols : (c+1)*TileCols]
		// Element pair (2r, 2r+1) goes to row r, the vector's column of
		// pairs: the layout TDPBF16PS reads a tile of vectors in.
		for r := range TileRows {
			e0, e1 := src[2*r], src[2*r+1]
			const exp = 0x7f800000
			if math.Float32bits(e0)&exp == exp || math.Float32bits(e1)&exp == exp {
				k := 2 * r
				if math.Float32bits(e0)&exp != exp {
					k++
				}
				return fmt.Errorf("gemv: tiles: vector %d's element %d is not finite", v, c*TileCols+k)
			}
			h0, l0 := splitBF16(e0)
			h1, l1 := splitBF16(e1)
			p := r*TileCols + col*2
			hi[p], hi[p+1] = h0, h1
			lo[p], lo[p+1] = l0, l1
		}
	}
	return nil
}

// splitBF16 is f's bfloat16 rounding (to nearest, ties to even) and the
// rounding of what it leaves: together 16 significant bits of f.
func splitBF16(f float32) (hi, lo uint16) {
	hi = toBF16(f)
	return hi, toBF16(f - math.Float32frombits(uint32(hi)<<16))
}

// toBF16 rounds a finite float32 to bfloat16, to nearest, ties to even.
func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Tiled reports whether impl's CPU runs the tile path (RowsTiled) for t:
// AVX512 on a CPU with AMX's bfloat16 tiles and AVX512_BF16, the kernel
// granting the permission, and BF16 or a format with a widening kernel.
func Tiled(impl Impl, t quant.Type) bool {
	if impl < AVX512 || !available(AVX512) || !amxReady() {
		return false
	}
	return t == quant.BF16 || widens[t] != nil
}

// tileScratch is one RowsTiled call's working memory: the tile shapes,
// the accumulators of every token tile (for two panels), and two panels'
// widened blocks.
type tileScratch struct {
	cfg [64]byte
	c   []float32 // token tiles × 16 rows × 16 vectors
	w   []uint16  // two panels × tileBlock
}

var tileScratches = sync.Pool{New: func() any {
	return &tileScratch{w: make([]uint16, 2*TileRows*tileBlock)}
}}

// widen is a widening kernel: nb blocks of each of rows rows, stride bytes
// apart, into bfloat16 rows ld bytes apart.
type widen func(w *byte, stride, rows, nb int, out *uint16, ld int)

// RowsTiled is RowsPacked on the tile unit: ys[j][r] = row r · the j-th
// vector given to p's Pack, for the len(ys[0]) rows of n columns in rows,
// stride bytes apart. It needs Tiled(impl, t) and n a multiple of 32 (and
// of t's block). Its results differ from RowsBatch's within the bounds
// the package's tests state. It allocates nothing once warm.
func RowsTiled(impl Impl, t quant.Type, rows []byte, stride, n int, p *Tiles, ys [][]float32) error {
	if !Tiled(impl, t) {
		return fmt.Errorf("%w: no tile path for %v on %v", ErrUnsupported, t, impl)
	}
	if len(ys) != p.count {
		return fmt.Errorf("gemv: tiles: %d outputs for %d vectors", len(ys), p.count)
	}
	if p.count == 0 {
		return nil
	}
	if n != p.n {
		return fmt.Errorf("gemv: tiles: rows of %d columns, vectors of %d", n, p.n)
	}
	if n%t.BlockElems() != 0 {
		return fmt.Errorf("gemv: tiles: %d columns are not whole %v blocks", n, t)
	}
	nr := len(ys[0])
	for j, y := range ys {
		if len(y) != nr {
			return fmt.Errorf("gemv: tiles: output %d has %d rows, output 0 has %d", j, len(y), nr)
		}
	}
	if _, err := checkStride(t, rows, stride, n, nr); err != nil {
		return err
	}
	if nr == 0 {
		return nil
	}
	s := tileScratches.Get().(*tileScratch)
	defer tileScratches.Put(s)
	s.c = grow(s.c, p.nt*2*TileRows*TileRows)
	wd := widens[t]
	blockBytes, perBlock := t.BlockBytes(), t.BlockElems()
	xstep := p.nt * 2 * TileRows * TileCols * 2 // bytes of Tiles a chunk
	const tile = TileRows * TileRows            // a C tile's floats
	// With two or more tiles of vectors, two panels at a time (tilesAMX2:
	// each vector tile loaded serves both; 1.1-1.4x at 32 vectors in
	// BenchmarkRowsTiled), one where a single panel is left; with one tile
	// of vectors, a panel at a time (tilesAMX: pairs lost up to 0.82x).
	step := TileRows
	if p.nt >= 2 {
		step = 2 * TileRows
	}
	for r0 := 0; r0 < nr; r0 += step {
		pr := min(step, nr-r0)
		two := pr > TileRows
		s.configure(min(TileRows, pr), pr-min(TileRows, pr))
		clear(s.c)
		panel := rows[r0*stride:]
		// A block of columns at a time: widened into the scratch; BF16
		// rows, read where they are, in blocks whose vector tiles (64
		// bytes a column a token tile) stay within 1 MiB, in the
		// second-level cache while every panel reads them (a block per
		// call costs the accumulators' round trip: BF16 takes the
		// longest that fit).
		kstep := tileBlock
		if wd == nil {
			kstep = max(tileBlock, (1<<20)/(64*p.nt)/tileBlock*tileBlock)
		}
		for k0 := 0; k0 < n; k0 += kstep {
			kb := min(kstep, n-k0)
			var w *uint16
			ws := stride
			if wd != nil {
				wd(&panel[k0/perBlock*blockBytes], stride, pr, kb/perBlock, &s.w[0], 2*tileBlock)
				w, ws = &s.w[0], 2*tileBlock
			} else {
				w = (*uint16)(unsafe.Pointer(&panel[2*k0]))
			}
			x := p.x[k0/TileCols*xstep/2:]
			if two {
				for g := 0; g < p.nt; g += 2 {
					tilesAMX2(&s.cfg[0], w, ws, TileRows*ws, &x[g*2*TileRows*TileCols], xstep,
						&s.c[g*2*tile], kb/TileCols, min(2, p.nt-g))
				}
				continue
			}
			for g := 0; g < p.nt; g += tileGroup {
				tilesAMX(&s.cfg[0], w, ws, &x[g*2*TileRows*TileCols], xstep,
					&s.c[g*tile], kb/TileCols, min(tileGroup, p.nt-g))
			}
		}
		// Each vector's results are a column of its tiles: panel p's
		// accumulator of token tile j is s.c's tile j (one panel) or
		// 2j+p (two).
		for v, y := range ys {
			j, col := v/TileRows, v%TileRows
			y = y[r0 : r0+pr]
			for p := 0; p*TileRows < pr; p++ {
				at := j
				if two {
					at = 2*j + p
				}
				c := s.c[at*tile+col : (at+1)*tile]
				out := y[p*TileRows : min(pr, (p+1)*TileRows)]
				for r := range out {
					out[r] = c[r*TileRows]
				}
			}
		}
	}
	return nil
}

// configure writes the tile shapes for a panel of p0 weight rows, or
// two of p0 and p1 (tilesAMX2): accumulators and weights as many rows as
// their panel, the vectors' parts (tmm6-7) 16 rows of column pairs; every
// row 64 bytes.
func (s *tileScratch) configure(p0, p1 int) {
	clear(s.cfg[:])
	s.cfg[0] = 1 // palette 1
	rows := [8]int{p0, p0, p0, p0, p0, 0, TileRows, TileRows}
	if p1 > 0 {
		rows = [8]int{p0, p1, p0, p1, p0, p1, TileRows, TileRows}
	}
	for tmm, r := range rows {
		if r == 0 {
			continue // unused: left unconfigured
		}
		*(*uint16)(unsafe.Pointer(&s.cfg[16+2*tmm])) = 64
		s.cfg[48+tmm] = byte(r)
	}
}
