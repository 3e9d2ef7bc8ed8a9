package streamtest

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"os"
	"sync"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostmem"
)

// tensorAlign is the alignment of each tensor inside an extent.
const tensorAlign = 64

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// tensorRef locates one tensor inside its layer's extent.
type tensorRef struct {
	t   model.Tensor // Data unset
	off int
}

// Store is a flat-file LayerStore.
type Store struct {
	path    string
	ext     []tier.Extent
	sum     []uint32
	tensors [][]tensorRef // per layer, in Layer field order
	mm      *stream.MmapSource
	checked []sync.Once
	bad     []error
}

// fields lists a Layer's tensors in the order kernels consume them.
func fields(l *model.Layer) []*model.Tensor {
	return []*model.Tensor{&l.AttnNorm, &l.Q, &l.K, &l.V, &l.O, &l.PostAttnNorm, &l.FFNNorm, &l.Gate, &l.Up, &l.Down, &l.PostFFNNorm,
		&l.QBias, &l.KBias, &l.VBias, &l.QNorm, &l.KNorm, &l.QKV, &l.GateUp}
}

// Write serializes w's layers to path and opens the result. The file
// starts with one page of padding so extent offsets are non-zero.
func Write(path string, w *model.Weights) (*Store, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("streamtest: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	s := &Store{path: path}
	pos := int64(tier.PageSize)
	if _, err := bw.Write(make([]byte, pos)); err != nil {
		f.Close()
		return nil, fmt.Errorf("streamtest: %w", err)
	}
	for li := range w.Layers {
		var refs []tensorRef
		h := crc32.New(castagnoli)
		n := 0
		pad := func(to int) error {
			z := make([]byte, to-n)
			h.Write(z)
			_, err := bw.Write(z)
			n = to
			return err
		}
		for _, t := range fields(&w.Layers[li]) {
			if t.Data == nil {
				refs = append(refs, tensorRef{off: -1})
				continue
			}
			if err := pad(hostmem.AlignUp(n, tensorAlign)); err != nil {
				f.Close()
				return nil, fmt.Errorf("streamtest: %w", err)
			}
			meta := *t
			meta.Data = nil
			refs = append(refs, tensorRef{t: meta, off: n})
			h.Write(t.Data)
			if _, err := bw.Write(t.Data); err != nil {
				f.Close()
				return nil, fmt.Errorf("streamtest: %w", err)
			}
			n += len(t.Data)
		}
		if err := pad(hostmem.AlignUp(n, tier.PageSize)); err != nil {
			f.Close()
			return nil, fmt.Errorf("streamtest: %w", err)
		}
		s.ext = append(s.ext, tier.Extent{Offset: pos, Length: int64(n)})
		s.sum = append(s.sum, h.Sum32())
		s.tensors = append(s.tensors, refs)
		pos += int64(n)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return nil, fmt.Errorf("streamtest: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("streamtest: %w", err)
	}
	if s.mm, err = stream.OpenMmap(path); err != nil {
		return nil, fmt.Errorf("streamtest: %w", err)
	}
	s.checked = make([]sync.Once, len(s.ext))
	s.bad = make([]error, len(s.ext))
	return s, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// NumLayers implements stream.LayerStore.
func (s *Store) NumLayers() int { return len(s.ext) }

// Extent implements stream.LayerStore.
func (s *Store) Extent(i int) tier.Extent { return s.ext[i] }

// Mapped implements stream.LayerStore, verifying the extent once.
func (s *Store) Mapped(i int) ([]byte, error) {
	if i < 0 || i >= len(s.ext) {
		return nil, fmt.Errorf("streamtest: layer %d out of range", i)
	}
	e := s.ext[i]
	b := s.mm.Bytes()[e.Offset:e.End()]
	s.checked[i].Do(func() { s.bad[i] = s.Verify(i, b) })
	if s.bad[i] != nil {
		return nil, s.bad[i]
	}
	return b, nil
}

// Verify implements stream.LayerStore with CRC-32C.
func (s *Store) Verify(i int, b []byte) error {
	if i < 0 || i >= len(s.ext) {
		return fmt.Errorf("streamtest: layer %d out of range", i)
	}
	if int64(len(b)) != s.ext[i].Length {
		return fmt.Errorf("streamtest: extent %d: %d bytes, want %d", i, len(b), s.ext[i].Length)
	}
	if got := crc32.Checksum(b, castagnoli); got != s.sum[i] {
		return fmt.Errorf("streamtest: extent %d %v: checksum %08x, want %08x", i, s.ext[i], got, s.sum[i])
	}
	return nil
}

// Decode implements stream.LayerStore.
func (s *Store) Decode(i int, b []byte) (*model.Layer, error) {
	if i < 0 || i >= len(s.ext) {
		return nil, fmt.Errorf("streamtest: layer %d out of range", i)
	}
	if int64(len(b)) < s.ext[i].Length {
		return nil, fmt.Errorf("streamtest: decode layer %d: %d bytes, want %d", i, len(b), s.ext[i].Length)
	}
	l := &model.Layer{}
	for k, t := range fields(l) {
		r := s.tensors[i][k]
		if r.off < 0 {
			continue
		}
		*t = r.t
		n := 0
		if rb, err := r.t.Type.RowBytes(int64(r.t.Cols)); err == nil {
			n = int(rb) * r.t.Rows
		}
		t.Data = b[r.off : r.off+n : r.off+n]
	}
	return l, nil
}

// Close unmaps the file.
func (s *Store) Close() error { return s.mm.Close() }

var _ stream.LayerStore = (*Store)(nil)
