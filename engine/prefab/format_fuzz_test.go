package prefab

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/model"
)

// FuzzParseLayout feeds arbitrary pool images to the header and manifest
// parser. Whatever it accepts must be safe to use: every extent lies inside
// the image, and decoding every layer and the globals over the image (the
// checksums aside) neither panics nor yields tensors outside it.
func FuzzParseLayout(f *testing.F) {
	m, v := miniModel(f)
	path := filepath.Join(f.TempDir(), "seed.pool")
	for _, typ := range []string{TypeKeep, TypeINT8} {
		if err := WriteModelPool(m, v, path, Options{Type: typ}); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:HeaderSize+100])
	}
	// The fast seed: one layer, INT8, a few pages. Mutating the whole
	// pools above is what made the target slow; most inputs derive from
	// this one.
	cfg := m.Config
	cfg.Layers = 1
	w := *m.Weights
	w.Layers = w.Layers[:1]
	m1, err := model.New(cfg, &w)
	if err != nil {
		f.Fatal(err)
	}
	if err := WriteModelPool(m1, v, path, Options{Type: TypeINT8}); err != nil {
		f.Fatal(err)
	}
	small, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	f.Add([]byte("STRATPOOL"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseLayout(data)
		if err != nil {
			return
		}
		if l.end > int64(len(data)) {
			t.Fatalf("accepted a layout ending at %d in %d bytes", l.end, len(data))
		}
		p := newPool("fuzz", data, l)
		for i := 0; i < p.NumLayers(); i++ {
			e := p.Extent(i)
			if e.Offset < 0 || e.End() > int64(len(data)) || e.Offset%ExtentAlign != 0 || e.Length%ExtentAlign != 0 {
				t.Fatalf("extent %d %v outside or misaligned in %d bytes", i, e, len(data))
			}
			lay, err := p.Decode(i, data[e.Offset:e.End()])
			if err != nil {
				t.Fatalf("Decode(%d) of an accepted layout: %v", i, err)
			}
			if len(lay.Q.Data) == 0 {
				t.Fatalf("layer %d: empty Q", i)
			}
			_, _ = p.Mapped(i) // checksum verdict either way, no panic
		}
		if g, err := p.Globals(); err == nil && len(g.Embed.Data) == 0 {
			t.Fatal("empty embedding")
		}
		_, _ = p.Model()
	})
}

// FuzzParseManifest fuzzes the manifest JSON behind a valid header (the
// image-level target rarely gets past the manifest checksum): whatever is
// accepted must describe extents that can be decoded without panics.
func FuzzParseManifest(f *testing.F) {
	m, v := miniModel(f)
	path := filepath.Join(f.TempDir(), "seed.pool")
	if err := WriteModelPool(m, v, path, Options{}); err != nil {
		f.Fatal(err)
	}
	img, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	p, err := OpenPool(path)
	if err != nil {
		f.Fatal(err)
	}
	manEnd := p.GlobalsExtent().Offset
	p.Close()
	man := img[HeaderSize:manEnd]
	for len(man) > 0 && man[len(man)-1] == 0 {
		man = man[:len(man)-1]
	}
	f.Add(man)
	f.Add([]byte(`{"format":"strata-pool"}`))
	f.Fuzz(func(t *testing.T, mb []byte) {
		data := append(encodeHeader(mb), mb...)
		if len(data) < len(img) {
			data = append(data, img[len(data):]...)
		}
		l, err := parseLayout(data)
		if err != nil {
			return
		}
		p := newPool("fuzz", data, l)
		for i := 0; i < p.NumLayers(); i++ {
			e := p.Extent(i)
			if e.End() > int64(len(data)) {
				t.Fatalf("extent %d %v outside %d bytes", i, e, len(data))
			}
			if _, err := p.Decode(i, data[e.Offset:e.End()]); err != nil {
				t.Fatalf("Decode(%d) of an accepted manifest: %v", i, err)
			}
		}
		_, _ = p.Model()
	})
}
