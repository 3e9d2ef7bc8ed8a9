package prefab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

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

// FuzzDecodeExtent fuzzes pool decoding past the header: the bytes of one
// extent (a layer's or the globals') of a valid one-layer pool, as storage
// might return them, and how many of them reach the decoder. The checksum
// refuses bytes other than those written, and OpenPool's Model with them;
// decoding them unverified (what --verify never does with storage reads)
// gives tensors inside the bytes, or an error when they are short, and a
// forward step over those weights runs without a panic, whatever the
// numbers (NaN included).
func FuzzDecodeExtent(f *testing.F) {
	m, v := miniModel(f)
	cfg := m.Config
	cfg.Layers = 1
	w := *m.Weights
	w.Layers = w.Layers[:1]
	m1, err := model.New(cfg, &w)
	if err != nil {
		f.Fatal(err)
	}
	types := []string{TypeKeep, TypeINT8, TypeQ8_0}
	// One thread of compute: the forward pass's workers spin for a
	// varying while and share a step's rows by timing, which would make
	// one input's coverage differ from run to run.
	runtime.GOMAXPROCS(1)
	images := make([][]byte, len(types))
	dir := f.TempDir()
	for k, typ := range types {
		path := filepath.Join(dir, typ+".pool")
		if err := WriteModelPool(m1, v, path, Options{Type: typ}); err != nil {
			f.Fatal(err)
		}
		if images[k], err = os.ReadFile(path); err != nil {
			f.Fatal(err)
		}
		p, err := OpenPool(path)
		if err != nil {
			f.Fatal(err)
		}
		for i := 0; i <= p.NumLayers(); i++ {
			e := p.GlobalsExtent()
			if i < p.NumLayers() {
				e = p.Extent(i)
			}
			ext := images[k][e.Offset:e.End()]
			f.Add(uint8(k), uint8(i), ext, uint16(len(ext)))
			f.Add(uint8(k), uint8(i), ext[:len(ext)/3], uint16(len(ext)))
		}
		p.Close()
	}
	f.Add(uint8(0), uint8(0), []byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, typ, which uint8, ext []byte, n uint16) {
		img := bytes.Clone(images[int(typ)%len(images)])
		l, err := parseLayout(img)
		if err != nil {
			t.Fatal(err)
		}
		p := newPool("fuzz", img, l)
		i := int(which) % (p.NumLayers() + 1) // the last is the globals
		e := p.GlobalsExtent()
		if i < p.NumLayers() {
			e = p.Extent(i)
		}
		// The extent as read: the fuzzed bytes, cut or zero-padded to
		// the extent's length.
		b := make([]byte, e.Length)
		copy(b, ext)
		same := bytes.Equal(b, img[e.Offset:e.End()])
		copy(img[e.Offset:e.End()], b)
		if i < p.NumLayers() {
			if err := p.Verify(i, b); (err == nil) != same {
				t.Fatalf("Verify of layer %d: %v, bytes as written: %v", i, err, same)
			}
		}
		_, err = p.Model()
		if (err == nil) != same {
			t.Fatalf("Model with extent %d changed=%v: %v", i, !same, err)
		}
		if !same && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Model with extent %d changed: %v does not wrap ErrCorrupt", i, err)
		}
		if i == p.NumLayers() {
			return // the globals are always verified before use
		}
		short := b[:min(int(n), len(b))]
		lay, err := p.Decode(i, short)
		if err != nil {
			if int64(len(short)) >= l.layers[i].used {
				t.Fatalf("Decode of %d bytes (the layer needs %d): %v", len(short), l.layers[i].used, err)
			}
			return
		}
		for _, r := range m1.Config.LayerRoles() {
			d := r.Field(lay).Data
			if !bytesWithin(d, short) {
				t.Fatalf("layer %d %s: %d bytes not a view inside the %d decoded", i, r.Suffix, len(d), len(short))
			}
		}
		// The forward pass over unverified weights: the globals as
		// written, layer i as decoded.
		g, err := p.Globals()
		if err != nil {
			t.Fatal(err)
		}
		ww := &model.Weights{Embed: g.Embed, OutputNorm: g.OutputNorm, Output: g.Output, Layers: []model.Layer{*lay}}
		fm, err := model.New(p.Config(), ww)
		if err != nil {
			t.Fatalf("model over decoded layer %d: %v", i, err)
		}
		step := []model.Step{{Seq: fm.NewSequence(2), Tokens: []int32{1, 2}}}
		if err := fm.Forward(context.Background(), step); err != nil {
			t.Fatalf("forward over decoded layer %d: %v", i, err)
		}
	})
}

// bytesWithin reports whether d lies inside b's backing array.
func bytesWithin(d, b []byte) bool {
	if len(d) == 0 || len(b) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	ds := uintptr(unsafe.Pointer(&d[0]))
	return ds >= start && ds+uintptr(len(d)) <= start+uintptr(len(b))
}
