package gemv

import (
	"fmt"
	"unsafe"

	"github.com/strata-llm/strata/engine/quant"
)

// Group is how many vectors a multi-vector kernel takes (the generator's
// Tokens): each block's weights are widened once for all of them, where
// RowsBatch's kernels widen them again for every vector.
const Group = 4

// padFrom is the fewest vectors past the whole groups that Pack fills up
// to a group with zero vectors: a multi-vector call costs about half what
// four one-vector calls do (1.6-2.5x the rate, the K-quants, in cache), so
// three vectors gain by the zero fourth and one or two would not.
const padFrom = 3

// Worth reports whether a batch of n vectors takes a multi-vector kernel
// for at least some of them (Pack's whole groups, or a group it pads).
func Worth(n int) bool { return groups(n) > 0 }

// groups is the multi-vector calls a batch of n vectors takes: its whole
// groups, and one more padded where the rest is at least padFrom.
func groups(n int) int {
	g := n / Group
	if n%Group >= padFrom {
		g++
	}
	return g
}

// Packed holds a batch's quantized vectors for RowsPacked: every whole
// group of four, interleaved pair of blocks by pair of blocks as the
// multi-vector kernels read them (pack), and the vectors themselves for
// the rest and for the formats without such a kernel. Pack fills it once a
// batch; any number of RowsPacked calls may then read it at once.
type Packed struct {
	xs []*X
	g  int // groups packed, the last padded where xs ends short of it
	q  []int16
	d  []float32
	s  []int32
	// fs is each group's four float vectors' addresses, as the float
	// kernels take them (a padded group's last ones zero's): plain
	// integers the collector does not follow, valid while xs and zero
	// hold the vectors (Go's heap does not move).
	fs   []uintptr
	zero []float32
	// pn is the whole groups of PanelGroup vectors laid out for the
	// panel kernels, where this CPU runs them and has no tile unit.
	pn panels
}

// Pack makes p hold xs (all of one length), reusing its memory. The
// vectors must not change while p is in use.
func (p *Packed) Pack(xs []*X) error { return p.PackWith(xs, nil) }

// PackWith is Pack with the panels' layout (where this CPU takes them)
// shared out by run, which calls fn(i) for every i in [0, n) and returns
// once all have: a thread team's parallel step. nil runs them in turn.
func (p *Packed) PackWith(xs []*X, run func(n int, fn func(i int))) error {
	p.xs = append(p.xs[:0], xs...)
	if len(xs) == 0 {
		return nil
	}
	n := xs[0].N
	for j, x := range xs {
		if x.N != n {
			return fmt.Errorf("gemv: pack: vector %d has %d elements, vector 0 has %d", j, x.N, n)
		}
	}
	p.g = groups(len(xs))
	g, nb := p.g, xs[0].Blocks()
	p.q = grow(p.q, g*Group*nb*Block)
	p.d = grow(p.d, g*Group*nb)
	p.s = grow(p.s, g*Group*nb*(Block/Sub))
	p.fs = grow(p.fs, g*Group)
	p.zero = grow(p.zero, len(xs[0].F)) // never written: zeros, reused or new
	var group [Group]*X                 // a padded group's missing vectors stay nil: zeros
	for i := range g {
		clear(group[:])
		copy(group[:], xs[i*Group:min((i+1)*Group, len(xs))])
		pack(group[:], nb, p.q[i*Group*nb*Block:], p.d[i*Group*nb:], p.s[i*Group*nb*(Block/Sub):])
		for j, x := range group {
			f := p.zero
			if x != nil {
				f = x.F
			}
			p.fs[i*Group+j] = uintptr(unsafe.Pointer(unsafe.SliceData(f)))
		}
	}
	p.pn.pg = 0
	if panelWanted() {
		p.pn.pack(xs, nb, run)
	}
	return nil
}

// panelWanted reports whether Pack lays out panels: where the panel
// kernels run and the tile unit, which prompts take where present
// (engine/model), does not.
func panelWanted() bool { return panelReady() && !amxReady() }

// pack lays out four vectors of nb blocks as the kernels walk them: for
// each pair of blocks, each vector's quants of the two blocks, then each
// vector's two scales, then each vector's sixteen sums; a last odd block
// alone the same way. A nil vector is zeros (a padded group's): its
// products are zero and nobody reads them.
func pack(xs []*X, nb int, q []int16, d []float32, s []int32) {
	const sums = Block / Sub
	qi, di, si := 0, 0, 0
	for b := 0; b < nb; {
		k := min(2, nb-b) // blocks in this step
		for _, x := range xs {
			if x == nil {
				clear(q[qi : qi+k*Block])
				clear(d[di : di+k])
				clear(s[si : si+k*sums])
				qi, di, si = qi+k*Block, di+k, si+k*sums
				continue
			}
			qi += copy(q[qi:], x.Q[b*Block:(b+k)*Block])
			di += copy(d[di:], x.D[b:b+k])
			si += copy(s[si:], x.S[b*sums:(b+k)*sums])
		}
		b += k
	}
}

// RowsPacked is RowsBatch (and RowsBatchStride, rows stride bytes apart)
// over packed vectors: ys[j] takes the products with the j-th vector
// given to Pack. Formats with a multi-vector kernel in impl take the
// vectors four at a time; the others, and the vectors past the last whole
// group, run as RowsBatch runs them. The bits are RowsBatch's.
func RowsPacked(impl Impl, t quant.Type, rows []byte, stride, n int, p *Packed, ys [][]float32) error {
	nr, err := checkBatch(p.xs, ys, n)
	if err != nil || len(p.xs) == 0 {
		return err
	}
	rb, err := checkStride(t, rows, stride, n, nr)
	if err != nil {
		return err
	}
	// The panels' groups first, where t has a panel kernel; the four-
	// vector groups then start at the first vector past them (PanelGroup
	// is a whole number of Groups).
	first := 0
	if pk := lookupPanel(impl, t); pk != nil && p.pn.pg > 0 && n%Block == 0 {
		rowsPanel(pk, impl, t, rows, rb, stride, n, p.xs, &p.pn, ys, nr)
		first = p.pn.pg * PanelGroup
		if first == len(p.xs) {
			return nil
		}
	}
	k := lookup4(impl, t)
	g := p.g
	if g*Group > len(p.xs) && !padPays(t) {
		g-- // the padded group's vectors one at a time
	}
	if k == nil || g <= first/Group || n%packBlock(t) != 0 {
		rowsBatchStride(impl, t, rows, rb, stride, n, p.xs[first:], ys[first:], nr)
		return nil
	}
	nb := n / Block
	var out [tile * Group]float32
	for r0 := 0; r0 < nr; r0 += tile {
		r1 := min(r0+tile, nr)
		w := rows[r0*stride : (r1-1)*stride+rb]
		for i := first / Group; i < g; i++ {
			fs := (*float32)(unsafe.Pointer(&p.fs[i*Group])) // the float kernels' four vectors
			k(unsafe.SliceData(w), stride, r1-r0, n, &p.q[i*Group*nb*Block], &p.d[i*Group*nb], &p.s[i*Group*nb*(Block/Sub)], fs, &out[0])
			for r := range r1 - r0 {
				for j := range min(Group, len(p.xs)-i*Group) {
					ys[i*Group+j][r0+r] = out[r*Group+j]
				}
			}
		}
		for j := g * Group; j < len(p.xs); j++ {
			rowsStride(impl, t, w, rb, stride, n, p.xs[j], ys[j][r0:r1])
		}
	}
	return nil
}

// padPays reports whether t's multi-vector kernel computes a group padded
// with a zero vector faster than its three vectors one at a time: where
// it gains at least 4/3 at four vectors. Q4_0's gains 1.17-1.21x (its
// shared work, the nibbles' unpacking, is little beside each vector's),
// and three padded vectors took 0.92x the time of three one-vector
// passes; every other format's gains more.
func padPays(t quant.Type) bool { return t != quant.Q4_0 }

// packBlock is the row length granularity t's multi-vector kernel needs:
// the float ones walk 16 elements at a time, the others whole 256-element
// blocks.
func packBlock(t quant.Type) int {
	if t == quant.F16 || t == quant.BF16 {
		return 16
	}
	return Block
}

// Packs reports whether impl has a multi-vector kernel for t: whether
// RowsPacked does more for t than RowsBatch would.
func Packs(impl Impl, t quant.Type) bool { return lookup4(impl, t) != nil }
