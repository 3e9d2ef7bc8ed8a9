// Package rawstore is a test peer of the pipeline: a layer store over a
// file of random extents of different lengths, for tests of stage 1 and of
// the devices' copies that need real bytes in a real file but no model.
// It lives apart from internal/streamtest because engine/stream's own
// tests use it, and streamtest imports engine/stream.
package rawstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
)

// Store is an engine/stream LayerStore whose layers are raw extents:
// Verify compares with the bytes written, and Decode always fails.
type Store struct {
	Ext  []tier.Extent
	Data [][]byte
}

// New writes layers extents of 1 to 6 pages of seeded random bytes, one
// after another, to a file in t's temporary directory and returns the
// store over them and the file's path.
func New(t testing.TB, layers int) (*Store, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	s := &Store{}
	var file []byte
	for range layers {
		n := int64(1+rng.IntN(6)) * tier.PageSize
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		s.Ext = append(s.Ext, tier.Extent{Offset: int64(len(file)), Length: n})
		s.Data = append(s.Data, b)
		file = append(file, b...)
	}
	path := filepath.Join(t.TempDir(), "layers")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// NumLayers is the number of extents.
func (s *Store) NumLayers() int { return len(s.Ext) }

// Extent is layer i's place in the file.
func (s *Store) Extent(i int) tier.Extent { return s.Ext[i] }

// Mapped returns layer i's bytes as written.
func (s *Store) Mapped(i int) ([]byte, error) { return s.Data[i], nil }

// Verify reports whether b holds layer i's bytes.
func (s *Store) Verify(i int, b []byte) error {
	if !bytes.Equal(b, s.Data[i]) {
		return errors.New("checksum mismatch")
	}
	return nil
}

// Decode fails: the extents are no layers.
func (s *Store) Decode(int, []byte) (*model.Layer, error) {
	return nil, errors.New("rawstore: raw extents do not decode")
}
