package gemv

import (
	"sync"
	"unsafe"

	"github.com/strata-llm/strata/engine/quant"
)

// The panel path (asm/panel.go): a batch's whole groups of PanelGroup
// vectors with the tokens in lanes, for CPUs without the tile unit
// (tiles.go) whose four-vector kernels reduce and finish every block of
// every vector alone. Pack lays the groups out once a batch; RowsPacked
// then takes eight rows at a time through every group, each row's block
// widened once for all of them. The bits are ref.go's.

// PanelGroup is the vectors a panel kernel takes in its lanes.
const PanelGroup = 16

// panelRows is the rows one panel kernel call computes (asm's panelRows).
const panelRows = 8

// panelMeta is a Q4_K block's per-panel metadata bytes: eight rows'
// eight int16 scales (128), eight int32 mins (256), then d and dmin (32
// each).
const panelMeta = 448

// panelPairs is the int16 pairs of a block (128), each a dword a vector.
const panelPairs = Block / 2

// panels is the layout Pack makes for the panel kernels: pg groups, per
// group and block 128 zmm of pairs, 8 zmm of sums and a zmm of scales.
type panels struct {
	pg int
	x  []int32
	s  []int32
	d  []float32
}

// pack lays out xs's whole groups (nb blocks each), a group's block an
// item of run (nil: in turn).
func (pn *panels) pack(xs []*X, nb int, run func(n int, fn func(i int))) {
	pn.pg = len(xs) / PanelGroup
	if pn.pg == 0 {
		return
	}
	pn.x = grow(pn.x, pn.pg*nb*panelPairs*PanelGroup)
	pn.s = grow(pn.s, pn.pg*nb*(Block/Sub)*PanelGroup)
	pn.d = grow(pn.d, pn.pg*nb*PanelGroup)
	fn := func(i int) { pn.packBlock(xs, nb, i/nb, i%nb) }
	if run == nil {
		for i := range pn.pg * nb {
			fn(i)
		}
		return
	}
	run(pn.pg*nb, fn)
}

// packBlock lays out group g's block b: the pairs a zmm a pair (one
// int32 a vector), written in order while the group's sixteen vectors are
// read side by side, then the sums and the scales.
func (pn *panels) packBlock(xs []*X, nb, g, b int) {
	grp := xs[g*PanelGroup : (g+1)*PanelGroup]
	gb := g*nb + b
	px := (*[panelPairs * PanelGroup]int32)(pn.x[gb*panelPairs*PanelGroup:])
	var src [PanelGroup]*[panelPairs]uint32
	for t, x := range grp {
		q := x.Q[b*Block : (b+1)*Block]
		src[t] = (*[panelPairs]uint32)(unsafe.Pointer(unsafe.SliceData(q)))
	}
	for p := range panelPairs {
		row := (*[PanelGroup]int32)(px[p*PanelGroup:])
		for t := range PanelGroup {
			row[t] = int32(src[t][p])
		}
	}
	ps := pn.s[gb*(Block/Sub)*PanelGroup:]
	for t, x := range grp {
		for s := range Block / Sub {
			ps[s*PanelGroup+t] = x.S[b*(Block/Sub)+s]
		}
		pn.d[gb*PanelGroup+t] = x.D[b]
	}
}

// panelScratch is one call's working memory (panelPool).
type panelScratch struct {
	meta []byte
	wide []int16
	tot  []float64
}

var panelPool = sync.Pool{New: func() any { return new(panelScratch) }}

// rowsPanel computes ys[j][r] for the nr rows (stride bytes apart) and
// the vectors of pn's groups, with k: eight rows a call, the last rows
// short of eight one vector at a time (the same bits).
func rowsPanel(k panelKernel, impl Impl, t quant.Type, rows []byte, rb, stride, n int, xs []*X, pn *panels, ys [][]float32, nr int) {
	nb := n / Block
	sc := panelPool.Get().(*panelScratch)
	defer panelPool.Put(sc)
	sc.meta = grow(sc.meta, nb*panelMeta)
	sc.wide = grow(sc.wide, panelRows*Block)
	sc.tot = grow(sc.tot, pn.pg*panelRows*PanelGroup)
	full := nr / panelRows * panelRows
	for r0 := 0; r0 < full; r0 += panelRows {
		w := rows[r0*stride:]
		switch t {
		case quant.Q4_K:
			q4kPanelMeta(w, stride, nb, q4kBytes, sc.meta)
		case quant.Q5_K:
			q4kPanelMeta(w, stride, nb, q5kBytes, sc.meta)
		} // Q6_K's kernel reads its blocks' own
		clear(sc.tot)
		k(unsafe.SliceData(w), stride, nb, pn.pg, unsafe.SliceData(sc.meta), unsafe.SliceData(pn.x), unsafe.SliceData(pn.s),
			unsafe.SliceData(pn.d), unsafe.SliceData(sc.wide), unsafe.SliceData(sc.tot))
		for g := range pn.pg {
			for r := range panelRows {
				tot := sc.tot[(g*panelRows+r)*PanelGroup:]
				for v := range PanelGroup {
					ys[g*PanelGroup+v][r0+r] = float32(tot[v])
				}
			}
		}
	}
	if full < nr {
		w := rows[full*stride : (nr-1)*stride+rb]
		for j := range pn.pg * PanelGroup {
			rowsStride(impl, t, w, rb, stride, n, xs[j], ys[j][full:nr])
		}
	}
}

// panelKernel is a panel kernel's signature (asm/panel.go).
type panelKernel func(w *byte, stride, nb, ng int, meta *byte, x *int32, s *int32, dx *float32, wide *int16, tot *float64)

// q4kPanelMeta writes the metadata of the eight Q4_K (bb 144) or Q5_K
// (176) rows at w (stride bytes apart) for each of nb blocks: the scales
// and mins of kScales, d and dmin as float32. It runs for every panel of
// eight rows, beside kernels that take a few hundred cycles a block, so
// its stores go through typed views rather than a byte encoder, and it
// unpacks the scales as kScales does, inline: calling kScales (two arrays
// returned a row) cost a group of sixteen vectors a fifth of its rate.
func q4kPanelMeta(w []byte, stride, nb, bb int, meta []byte) {
	_ = meta[nb*panelMeta-1]
	for b := range nb {
		base := unsafe.Pointer(&meta[b*panelMeta])
		sc := (*[panelRows * 8]int16)(base)
		mn := (*[panelRows * 8]int32)(unsafe.Add(base, 128))
		d := (*[panelRows]float32)(unsafe.Add(base, 384))
		dm := (*[panelRows]float32)(unsafe.Add(base, 416))
		for r := range panelRows {
			blk := (*[16]byte)(w[r*stride+b*bb:])
			s := blk[4:16]
			for j := range 4 {
				sc[8*r+j] = int16(s[j] & 63)
				mn[8*r+j] = int32(s[j+4] & 63)
				sc[8*r+j+4] = int16(s[j+8]&15 | (s[j]>>6)<<4)
				mn[8*r+j+4] = int32(s[j+8]>>4 | (s[j+4]>>6)<<4)
			}
			d[r] = quant.F16ToF32(uint16(blk[0]) | uint16(blk[1])<<8)
			dm[r] = quant.F16ToF32(uint16(blk[2]) | uint16(blk[3])<<8)
		}
	}
}
