package prefab

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/hostmem"
)

// Pool is an opened prefab pool: its manifest parsed and validated, and a
// reservation the size of the file (a hostmem.Snapshot) that each extent is
// copied into the first time it is used in memory. It is the tier-B source
// (Mapped) and the extent table tier-C readers use (Extent, Verify,
// Decode). Extents are copied rather than used from a shared mapping of the
// file because a mapping's pages past the end of a truncated file crash the
// process with SIGBUS and change when the file is rewritten; the copy is
// checked against the manifest after it is made, so what is served is what
// was verified. Extents that are only streamed (tier C) are never copied
// and take no memory. Bytes read from storage are checked by Verify. A Pool
// is safe for concurrent use; Close must not race with other calls.
type Pool struct {
	path   string
	m      *hostmem.Snapshot // nil for a pool over plain memory
	data   []byte
	l      *layout
	checks []extentCheck // one per layer, then the globals
	tmpl   []model.Layer // per layer: tensors with Data unset
	order  []role        // a layer's tensors, in extent order
}

// extentCheck remembers the outcome of verifying one extent of the mapping.
type extentCheck struct {
	once sync.Once
	err  error
}

// OpenPool opens the pool at path, reads and validates its header,
// manifest and extent table, and that the file is long enough for every
// extent. Anything wrong is an error wrapping ErrCorrupt that says what
// (and, for truncation, which extent). Extents are read and their checksums
// verified lazily, on first use.
func OpenPool(path string) (*Pool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open pool %s: %w", path, err)
	}
	size := st.Size()
	if size < HeaderSize {
		// Too small to map usefully (mmap of an empty file fails); let the
		// parser say what is wrong with the few bytes there are.
		b, err := io.ReadAll(io.LimitReader(f, HeaderSize))
		if err != nil {
			return nil, fmt.Errorf("open pool %s: %w", path, err)
		}
		_, err = parseLayout(b)
		return nil, fmt.Errorf("open pool %s: %w", path, err)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("open pool %s: %d bytes is too large to map", path, size)
	}
	m, err := hostmem.NewSnapshot(f, size)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return openSnapshot(path, m, size)
}

// OpenPoolReader opens a pool of size bytes that r reads, as OpenPool
// opens a file: for a pool stored where there is no file to open (an
// extent of a strata volume, read by the userspace NVMe driver). name is
// what errors and Path call it. Extents are copied from r on first use
// (Mapped, Globals); those only streamed through tier C are never read
// through r. r must stay usable until the pool is closed.
func OpenPoolReader(name string, r io.ReaderAt, size int64) (*Pool, error) {
	if size < HeaderSize {
		b := make([]byte, max(size, 0))
		if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
			return nil, fmt.Errorf("open pool %s: %w", name, err)
		}
		_, err := parseLayout(b)
		return nil, fmt.Errorf("open pool %s: %w", name, err)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("open pool %s: %d bytes is too large to map", name, size)
	}
	m, err := hostmem.NewSnapshotReader(name, r, size)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return openSnapshot(name, m, size)
}

// openSnapshot reads and validates the header, manifest and extent table
// of the pool whose snapshot m (of size bytes) was just reserved; m is
// closed on failure.
func openSnapshot(path string, m *hostmem.Snapshot, size int64) (*Pool, error) {
	// The header, then the manifest it points to (bounded; parseLayout
	// checks the header's checksum and the bounds in full).
	if err := m.Fill(0, HeaderSize); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("open pool %s: %w", path, err)
	}
	if mlen := binary.LittleEndian.Uint64(m.Bytes()[24:]); mlen > 0 && mlen <= maxManifest {
		if err := m.Fill(HeaderSize, min(int64(mlen), size-HeaderSize)); err != nil {
			_ = m.Close()
			return nil, fmt.Errorf("open pool %s: %w", path, err)
		}
	}
	l, err := parseLayout(m.Bytes())
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("open pool %s: %w", path, err)
	}
	p := newPool(path, m.Bytes(), l)
	p.m = m
	return p, nil
}

// newPool builds a Pool over data (the mapping's bytes; the fuzz tests pass
// plain memory and no mapping).
func newPool(path string, data []byte, l *layout) *Pool {
	p := &Pool{path: path, data: data, l: l, order: layerOrder(&l.cfg)}
	p.checks = make([]extentCheck, len(l.layers)+1+len(l.layers)*l.cfg.Experts)
	order := layerOrder(&l.cfg)
	p.tmpl = make([]model.Layer, len(l.layers))
	for i := range l.layers {
		for j, r := range order {
			ti := &l.layers[i].tensors[j]
			*r.field(&p.tmpl[i]) = model.Tensor{Name: ti.name, Type: ti.typ, Rows: ti.rows, Cols: ti.cols}
		}
	}
	return p
}

// Path is the file the pool was opened from.
func (p *Pool) Path() string { return p.path }

// Config is the model's hyperparameters from the manifest.
func (p *Pool) Config() model.Config { return p.l.cfg }

// Vocab is the tokenizer description from the manifest; build a tokenizer
// with tokenizer.New. Treat it as read-only.
func (p *Pool) Vocab() *tokenizer.Vocab { return p.l.vocab }

// Type is the prefab type the pool was written with (keep, q8_0, q4_k or
// int8).
func (p *Pool) Type() string { return p.l.man.Type }

// Source names the model file the pool was made from, as recorded.
func (p *Pool) Source() string { return p.l.man.Source }

// NumLayers is the number of layer extents (the model's layer count).
func (p *Pool) NumLayers() int { return len(p.l.layers) }

// Extent is where layer i's bytes lie in the pool file: one aligned,
// sequential read. It panics if i is out of range, like a slice index: the
// layer count is known from NumLayers.
func (p *Pool) Extent(i int) tier.Extent { return p.l.layers[i].ext }

// GlobalsExtent is where the non-layer tensors lie in the pool file.
func (p *Pool) GlobalsExtent() tier.Extent { return p.l.globals.ext }

// LayerBytes returns every layer extent's length (what streaming the layer
// moves), in layer order: the planner's input.
func (p *Pool) LayerBytes() []int64 {
	out := make([]int64, len(p.l.layers))
	for i := range p.l.layers {
		out[i] = p.l.layers[i].ext.Length
	}
	return out
}

// GlobalBytes is the globals extent's length.
func (p *Pool) GlobalBytes() int64 { return p.l.globals.ext.Length }

// extent returns layer i's info, or the globals for i == NumLayers().
func (p *Pool) extent(i int) (*extentInfo, error) {
	switch {
	case i >= 0 && i < len(p.l.layers):
		return &p.l.layers[i], nil
	case i == len(p.l.layers):
		return &p.l.globals, nil
	}
	return nil, fmt.Errorf("pool %s: layer %d out of range [0, %d)", p.path, i, len(p.l.layers))
}

// view returns the in-memory bytes of extent i (layers, then globals),
// copying them from the file and verifying the checksum on first use.
func (p *Pool) view(i int) ([]byte, error) {
	e, err := p.extent(i)
	if err != nil {
		return nil, err
	}
	return p.fill(e, i)
}

// fill returns extent e's bytes in the pool's memory, copying them from the
// file and verifying them the first time (check k remembers the verdict).
func (p *Pool) fill(e *extentInfo, k int) ([]byte, error) {
	if p.data == nil {
		return nil, fmt.Errorf("pool %s: closed", p.path)
	}
	b := p.data[e.ext.Offset : e.ext.Offset+e.ext.Length : e.ext.Offset+e.ext.Length]
	c := &p.checks[k]
	c.once.Do(func() {
		if p.m != nil {
			if c.err = p.m.Fill(e.ext.Offset, e.ext.Length); c.err != nil {
				c.err = fmt.Errorf("pool %s: extent %s: %w", p.path, e.name, c.err)
				return
			}
		}
		c.err = p.check(e, b)
	})
	if c.err != nil {
		return nil, c.err
	}
	return b, nil
}

// check compares b's checksum with extent e's.
func (p *Pool) check(e *extentInfo, b []byte) error {
	if int64(len(b)) != e.ext.Length {
		return fmt.Errorf("pool %s: extent %s: %d bytes, want %d", p.path, e.name, len(b), e.ext.Length)
	}
	if got := xxh3.Hash(b); got != e.sum {
		return fmt.Errorf("pool %s: extent %s (bytes [%d, %d)): %w: checksum %016x, manifest says %016x",
			p.path, e.name, e.ext.Offset, e.ext.Offset+e.ext.Length, ErrCorrupt, got, e.sum)
	}
	return nil
}

// Mapped returns layer i's extent as a view of the pool's memory: the
// tier-B source. The first call for an extent copies it from the file and
// verifies its checksum (and
// every later call returns the same verdict); a mismatch is an error naming
// the extent and wrapping ErrCorrupt. The slice is valid until Close.
func (p *Pool) Mapped(i int) ([]byte, error) {
	if i == len(p.l.layers) {
		return nil, fmt.Errorf("pool %s: layer %d out of range [0, %d)", p.path, i, len(p.l.layers))
	}
	return p.view(i)
}

// Verify checks bytes of layer i's extent that were read from storage (tier
// C) against the manifest checksum. b must be exactly the extent: Length
// bytes from Offset.
func (p *Pool) Verify(i int, b []byte) error {
	if i == len(p.l.layers) {
		return fmt.Errorf("pool %s: layer %d out of range [0, %d)", p.path, i, len(p.l.layers))
	}
	e, err := p.extent(i)
	if err != nil {
		return err
	}
	return p.check(e, b)
}

// Decode builds layer i's tensors as views over b, which holds the
// extent's bytes (from Mapped, or read from storage and checked with
// Verify); nothing is copied, so the Layer is valid as long as b is. b may
// be longer than the extent (a larger slot) but must hold every tensor.
// Shapes and types come from the manifest, validated when the pool was
// opened.
func (p *Pool) Decode(i int, b []byte) (*model.Layer, error) {
	if i < 0 || i >= len(p.l.layers) {
		return nil, fmt.Errorf("pool %s: layer %d out of range [0, %d)", p.path, i, len(p.l.layers))
	}
	e := &p.l.layers[i]
	if int64(len(b)) < e.used {
		return nil, fmt.Errorf("pool %s: extent %s: decoding %d bytes, its tensors need %d", p.path, e.name, len(b), e.used)
	}
	l := p.tmpl[i]
	for j, r := range p.order {
		ti := &e.tensors[j]
		r.field(&l).Data = b[ti.off : ti.off+ti.size : ti.off+ti.size]
	}
	return &l, nil
}

// NumExperts is the experts per layer (0 for a dense model).
func (p *Pool) NumExperts() int { return p.l.cfg.Experts }

// expert returns layer i's expert e's info and its index among the
// extents' checks.
func (p *Pool) expert(i, e int) (*extentInfo, int, error) {
	if i < 0 || i >= len(p.l.layers) || e < 0 || e >= p.l.cfg.Experts {
		return nil, 0, fmt.Errorf("pool %s: layer %d expert %d out of range [0, %d) x [0, %d)", p.path, i, e, len(p.l.layers), p.l.cfg.Experts)
	}
	return &p.l.experts[i][e], len(p.l.layers) + 1 + i*p.l.cfg.Experts + e, nil
}

// ExpertExtent is layer i's expert e's extent (a MoE pool's).
func (p *Pool) ExpertExtent(i, e int) (tier.Extent, error) {
	x, _, err := p.expert(i, e)
	if err != nil {
		return tier.Extent{}, err
	}
	return x.ext, nil
}

// MappedExpert is Mapped for layer i's expert e: a view of the pool's
// memory, copied from the file and verified on first use.
func (p *Pool) MappedExpert(i, e int) ([]byte, error) {
	x, k, err := p.expert(i, e)
	if err != nil {
		return nil, err
	}
	return p.fill(x, k)
}

// VerifyExpert is Verify for layer i's expert e read from storage.
func (p *Pool) VerifyExpert(i, e int, b []byte) error {
	x, _, err := p.expert(i, e)
	if err != nil {
		return err
	}
	return p.check(x, b)
}

// DecodeExpert builds layer i's expert e's tensors as views over b, which
// holds its extent (from MappedExpert, or read and checked with
// VerifyExpert).
func (p *Pool) DecodeExpert(i, e int, b []byte) (model.Expert, error) {
	x, _, err := p.expert(i, e)
	if err != nil {
		return model.Expert{}, err
	}
	if int64(len(b)) < x.used {
		return model.Expert{}, fmt.Errorf("pool %s: extent %s: decoding %d bytes, its tensors need %d", p.path, x.name, len(b), x.used)
	}
	t := make([]model.Tensor, len(x.tensors))
	for j := range x.tensors {
		ti := &x.tensors[j]
		t[j] = model.Tensor{Name: ti.name, Type: ti.typ, Rows: ti.rows, Cols: ti.cols, Data: b[ti.off : ti.off+ti.size : ti.off+ti.size]}
	}
	return model.Expert{Gate: t[0], Up: t[1], Down: t[2]}, nil
}

// experts returns layer i's experts as views of the pool's memory,
// verifying each on first use.
func (p *Pool) experts(i int) ([]model.Expert, error) {
	if p.l.cfg.Experts == 0 {
		return nil, nil
	}
	out := make([]model.Expert, p.l.cfg.Experts)
	for e := range out {
		b, err := p.MappedExpert(i, e)
		if err == nil {
			out[e], err = p.DecodeExpert(i, e, b)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Globals are the non-layer tensors: always resident (see Plan).
type Globals struct {
	// Embed is the token embedding (Vocab rows of Dim).
	Embed model.Tensor
	// OutputNorm is the final RMSNorm weight.
	OutputNorm model.Tensor
	// Output is the output projection; for tied models it is Embed.
	Output model.Tensor
}

// Globals returns the non-layer tensors as views of the mapping, verifying
// the globals extent's checksum on first use.
func (p *Pool) Globals() (*Globals, error) {
	b, err := p.view(len(p.l.layers))
	if err != nil {
		return nil, err
	}
	e := &p.l.globals
	ts := make([]model.Tensor, len(e.tensors))
	for j := range e.tensors {
		ti := &e.tensors[j]
		ts[j] = model.Tensor{Name: ti.name, Type: ti.typ, Rows: ti.rows, Cols: ti.cols,
			Data: b[ti.off : ti.off+ti.size : ti.off+ti.size]}
	}
	g := &Globals{Embed: ts[0], OutputNorm: ts[1], Output: ts[0]}
	if len(ts) > 2 {
		g.Output = ts[2]
	}
	return g, nil
}

// Model builds a fully resident model.Model over the mapping, verifying
// every extent first. The pool must stay open while the model is used.
func (p *Pool) Model() (*model.Model, error) {
	g, err := p.Globals()
	if err != nil {
		return nil, err
	}
	w := &model.Weights{Embed: g.Embed, OutputNorm: g.OutputNorm, Output: g.Output, Layers: make([]model.Layer, len(p.l.layers))}
	if p.l.cfg.TiedOutput {
		w.Output = model.Tensor{}
	}
	for i := range p.l.layers {
		b, err := p.Mapped(i)
		if err != nil {
			return nil, err
		}
		l, err := p.Decode(i, b)
		if err != nil {
			return nil, err
		}
		if l.Experts, err = p.experts(i); err != nil {
			return nil, err
		}
		w.Layers[i] = *l
	}
	m, err := model.New(p.l.cfg, w)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.path, err)
	}
	return m, nil
}

// Close releases the pool's memory and descriptor. Slices and models obtained from it must not be
// used afterwards. Closing twice is a no-op.
func (p *Pool) Close() error {
	if p.data == nil {
		return nil
	}
	p.data = nil
	if p.m == nil {
		return nil
	}
	if err := p.m.Close(); err != nil {
		return fmt.Errorf("pool %s: %w", p.path, err)
	}
	return nil
}

// IsPool reports whether the file at path starts with the pool magic, so
// callers that accept either a GGUF or a pool can tell them apart.
func IsPool(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := make([]byte, len(Magic))
	if _, err := io.ReadFull(f, b); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		}
		return false, err
	}
	return IsPoolHeader(b), nil
}

// Sizes returns the pool's sizes for the planner.
func (p *Pool) Sizes() tier.Sizes {
	s := tier.Sizes{Layers: p.LayerBytes(), Globals: p.GlobalBytes()}
	if p.l.cfg.MoE() {
		s.Experts = make([][]int64, len(p.l.layers))
		for i := range s.Experts {
			for _, x := range p.l.experts[i] {
				s.Experts[i] = append(s.Experts[i], x.ext.Length)
			}
		}
	}
	by := map[quant.Type]int64{}
	for _, t := range p.l.layers[0].tensors {
		by[t.typ] += t.size
	}
	s.Type = heaviest(by)
	for _, t := range p.l.globals.tensors {
		if t.name != "token_embd.weight" || p.l.cfg.TiedOutput {
			s.Output += t.size
		}
	}
	return s
}
