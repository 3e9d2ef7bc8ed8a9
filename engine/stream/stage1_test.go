package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
)

// rawStore is a LayerStore over a file of random extents of different
// lengths; Verify compares with the bytes written. It does not decode.
type rawStore struct {
	ext  []tier.Extent
	data [][]byte
}

func (s *rawStore) NumLayers() int               { return len(s.ext) }
func (s *rawStore) Extent(i int) tier.Extent     { return s.ext[i] }
func (s *rawStore) Mapped(i int) ([]byte, error) { return s.data[i], nil }
func (s *rawStore) Verify(i int, b []byte) error {
	if !bytes.Equal(b, s.data[i]) {
		return errors.New("checksum mismatch")
	}
	return nil
}
func (s *rawStore) Decode(int, []byte) (*model.Layer, error) {
	return nil, errors.New("rawStore does not decode")
}

func newRawStore(t testing.TB, layers int) (*rawStore, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	s := &rawStore{}
	var file []byte
	for range layers {
		n := int64(1+rng.IntN(6)) * tier.PageSize
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		s.ext = append(s.ext, tier.Extent{Offset: int64(len(file)), Length: n})
		s.data = append(s.data, b)
		file = append(file, b...)
	}
	path := filepath.Join(t.TempDir(), "layers")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// TestStage1RunAhead: stage 1 alone reads the tier-C layers in order, at
// most k ahead of the staging buffers handed back, and counts what it
// read.
func TestStage1RunAhead(t *testing.T) {
	t.Parallel()
	store, path := newRawStore(t, 8)
	fs, err := OpenFile(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	tiers, _ := tier.MixTiers("all-C", 8)
	for _, k := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			p, err := New(Options{Store: store, Tiers: tiers, Depth: k, Source: fs, SlotsOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(context.Background())
			ps := &pass{ctx: ctx, cancel: cancel, fetched: make([]chan staged, 8), freeStaging: make(chan int, k)}
			for l := range ps.fetched {
				ps.fetched[l] = make(chan staged, 1)
			}
			for s := range k {
				ps.freeStaging <- s
			}
			ps.wg.Add(1)
			go p.stage1(ps)
			for l := range 8 {
				g := <-ps.fetched[l]
				if g.err != nil {
					t.Fatal(g.err)
				}
				if !bytes.Equal(p.staging[g.s].Bytes()[:store.ext[l].Length], store.data[l]) {
					t.Fatalf("layer %d: wrong bytes in staging buffer %d", l, g.s)
				}
				// With the buffer still held, no more than k-1 later
				// layers can have been read.
				time.Sleep(time.Millisecond)
				ahead := 0
				for _, ch := range ps.fetched[l+1:] {
					ahead += len(ch)
				}
				if ahead > k-1 {
					t.Fatalf("%d layers read ahead of layer %d with its buffer held", ahead, l)
				}
				ps.freeStaging <- g.s
			}
			cancel()
			ps.wg.Wait()
			if ps.read.Layers != 8 || ps.read.Bytes == 0 {
				t.Fatalf("counted %d layers, %d bytes", ps.read.Layers, ps.read.Bytes)
			}
		})
	}
}
