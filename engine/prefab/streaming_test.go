package prefab

import (
	"errors"
	"os"
	"testing"
)

// TestStreamingModel builds a model over a pool without verifying (so
// without reading) its layers: a corrupt layer extent does not stop it,
// while Model refuses the pool, and the layers it holds are views of the
// mapping with the right shapes.
func TestStreamingModel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, _ := prefab(t, dir, "llama", "q8_0", TypeKeep)
	p, err := OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	ext := p.Extent(1)
	p.Close()
	corruptAt(t, path, ext.Offset+100)
	p, err = OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Model(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Model over a corrupt extent: %v", err)
	}
	m, err := p.StreamingModel()
	if err != nil {
		t.Fatalf("StreamingModel: %v", err)
	}
	b := p.data[ext.Offset:ext.End()]
	dec, err := p.Decode(1, b)
	if err != nil {
		t.Fatal(err)
	}
	l := &m.Weights.Layers[1]
	if len(m.Weights.Layers) != p.NumLayers() || &l.Q.Data[0] != &dec.Q.Data[0] || &l.Down.Data[0] != &dec.Down.Data[0] {
		t.Fatal("streaming model's layers are not views of the mapping")
	}
	// The pipeline's own check still catches the damage.
	if err := p.Verify(1, b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify: %v", err)
	}
}

// corruptAt flips a byte of the file at path.
func corruptAt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c [1]byte
	if _, err := f.ReadAt(c[:], off); err != nil {
		t.Fatal(err)
	}
	c[0] ^= 0xff
	if _, err := f.WriteAt(c[:], off); err != nil {
		t.Fatal(err)
	}
}
