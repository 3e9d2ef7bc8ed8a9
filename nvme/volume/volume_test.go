package volume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/nvmetest"
	"github.com/strata-llm/strata/internal/streamtest"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/volume"
)

var ctx = context.Background()

func fileDev(t testing.TB, size int64, bs int) (*volume.FileDevice, *os.File) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "ns.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	d, err := volume.NewFileDevice(f, bs)
	if err != nil {
		t.Fatal(err)
	}
	return d, f
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var files = []struct {
	name string
	size int
}{
	{"empty", 0}, {"one", 1}, {"odd", 5000}, {"page", 4096}, {"pool/llama-8b.pool", 3<<20 + 7}, {"big", 1<<20 + 4096},
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{512, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			t.Parallel()
			dev, _ := fileDev(t, 32<<20, bs)
			v, err := volume.Format(ctx, dev, volume.FormatOptions{TableBytes: 8192, Label: "test"})
			if err != nil {
				t.Fatal(err)
			}
			data := map[string][]byte{}
			for i, f := range files {
				data[f.name] = randBytes(f.size, uint64(i))
				e, err := v.WriteFile(ctx, f.name, bytes.NewReader(data[f.name]), int64(f.size))
				if err != nil {
					t.Fatal(err)
				}
				if e.Offset%volume.Unit != 0 || e.Length != int64(f.size) {
					t.Errorf("%s: %+v", f.name, e)
				}
			}
			v2, err := volume.Open(ctx, dev)
			if err != nil {
				t.Fatal(err)
			}
			if sb := v2.Superblock(); sb.Label != "test" || sb.BlockSize != uint32(bs) || sb.Generation != uint64(1+len(files)) {
				t.Errorf("superblock %+v", sb)
			}
			if len(v2.Extents()) != len(files) {
				t.Fatalf("%d extents", len(v2.Extents()))
			}
			rng := rand.New(rand.NewPCG(1, 1))
			for _, f := range files {
				e, err := v2.Lookup(f.name)
				if err != nil {
					t.Fatal(err)
				}
				if err := v2.Verify(ctx, e); err != nil {
					t.Error(err)
				}
				all, err := io.ReadAll(io.NewSectionReader(v2.Reader(e), 0, e.Length))
				if err != nil || !bytes.Equal(all, data[f.name]) {
					t.Fatalf("%s: whole read differs (%v)", f.name, err)
				}
				for k := 0; k < 20 && f.size > 0; k++ {
					off := rng.IntN(f.size)
					n := rng.IntN(f.size-off) + 1
					p := make([]byte, n)
					got, err := v2.ReadAt(ctx, e, p, int64(off))
					if err != nil || got != n || !bytes.Equal(p, data[f.name][off:off+n]) {
						t.Fatalf("%s: ReadAt(%d, %d) = %d, %v", f.name, off, n, got, err)
					}
				}
				p := make([]byte, 10)
				if n, err := v2.ReadAt(ctx, e, p, e.Length-3); e.Length >= 3 && (n != 3 || err != io.EOF) {
					t.Errorf("%s: read past end: %d, %v", f.name, n, err)
				}
			}
		})
	}
}

func TestDeleteReuseAndNoSpace(t *testing.T) {
	t.Parallel()
	dev, _ := fileDev(t, 2<<20, 512)
	v, err := volume.Format(ctx, dev, volume.FormatOptions{TableBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	free := v.Free()
	a, err := v.WriteFile(ctx, "a", bytes.NewReader(make([]byte, 100<<10)), 100<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "a", bytes.NewReader(nil), 0); !errors.Is(err, volume.ErrExists) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := v.WriteFile(ctx, "huge", bytes.NewReader(nil), free); !errors.Is(err, volume.ErrNoSpace) {
		t.Errorf("too big: %v", err)
	}
	if err := v.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Lookup("a"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("deleted extent found: %v", err)
	}
	b, err := v.WriteFile(ctx, "b", bytes.NewReader(make([]byte, 4096)), 4096)
	if err != nil || b.Offset != a.Offset {
		t.Errorf("space not reused: %+v %v", b, err)
	}
	if v.Free() != free-4096 {
		t.Errorf("free %d, want %d", v.Free(), free-4096)
	}
	for _, name := range []string{"", strings.Repeat("x", 256), "a\x00b", "\xff"} {
		if _, err := v.WriteFile(ctx, name, bytes.NewReader(nil), 0); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	// A source shorter or longer than announced leaves the table alone.
	gen := v.Superblock().Generation
	if _, err := v.WriteFile(ctx, "short", bytes.NewReader(make([]byte, 10)), 20); err == nil {
		t.Error("short source accepted")
	}
	if _, err := v.WriteFile(ctx, "long", bytes.NewReader(make([]byte, 30)), 20); err == nil {
		t.Error("long source accepted")
	}
	if v.Superblock().Generation != gen {
		t.Error("failed writes committed")
	}
}

// TestTornCommit: a crash after the new table but before the new
// superblock, or a torn superblock, leaves the previous generation.
func TestTornCommit(t *testing.T) {
	t.Parallel()
	dev, f := fileDev(t, 4<<20, 512)
	v, err := volume.Format(ctx, dev, volume.FormatOptions{TableBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "keep", bytes.NewReader([]byte("hello")), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "new", bytes.NewReader([]byte("world")), 5); err != nil {
		t.Fatal(err)
	}
	gen := v.Superblock().Generation
	// Tear the newest superblock copy.
	at := int64(gen%2) * 4096
	if _, err := f.WriteAt([]byte{0xee}, at+100); err != nil {
		t.Fatal(err)
	}
	v2, err := volume.Open(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Superblock().Generation != gen-1 {
		t.Fatalf("generation %d, want %d", v2.Superblock().Generation, gen-1)
	}
	if _, err := v2.Lookup("keep"); err != nil {
		t.Error(err)
	}
	if _, err := v2.Lookup("new"); err == nil {
		t.Error("the torn generation's extent is visible")
	}
	// Both copies bad: a clear error, not an empty volume.
	if _, err := f.WriteAt([]byte{0xee}, (1-int64(gen%2))*4096+100); err != nil {
		t.Fatal(err)
	}
	if _, err := volume.Open(ctx, dev); !errors.Is(err, volume.ErrCorrupt) {
		t.Errorf("both superblocks torn: %v", err)
	}
	blank, _ := fileDev(t, 1<<20, 512)
	if _, err := volume.Open(ctx, blank); !errors.Is(err, volume.ErrNotFormatted) {
		t.Errorf("blank device: %v", err)
	}
}

func TestVerifyCatchesBitFlip(t *testing.T) {
	t.Parallel()
	dev, f := fileDev(t, 4<<20, 4096)
	v, _ := volume.Format(ctx, dev, volume.FormatOptions{TableBytes: 4096})
	e, err := v.WriteFile(ctx, "x", bytes.NewReader(randBytes(50000, 1)), 50000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0}, e.Offset+40000); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, e); !errors.Is(err, volume.ErrChecksum) {
		t.Errorf("flipped byte: %v", err)
	}
}

// nvmeVolume formats a volume on a software NVMe controller through the
// userspace driver.
func nvmeVolume(t testing.TB, bs int, size int64) (*nvmetest.Controller, *volume.NVMe, *volume.Volume) {
	t.Helper()
	sw := nvmetest.New(nvmetest.Options{Namespaces: []nvmetest.Namespace{{BlockSize: bs, Blocks: uint64(size) / uint64(bs)}}, Reorder: true})
	c, err := nvme.Open(ctx, nvme.Config{MMIO: sw, DMA: sw, IOQueues: 2, QueueDepth: 32})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := volume.NewNVMe(c, sw, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Close()
		c.Close(ctx)
		sw.Close()
	})
	v, err := volume.Format(ctx, dev, volume.FormatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sw, dev, v
}

// nvmeSource stores raw as the extent name of a fresh volume (8 MiB to
// spare) on a software NVMe controller with block size bs, and returns the
// extent's stream source, closed when the test ends.
func nvmeSource(t testing.TB, bs int, name string, raw []byte) *volume.Source {
	t.Helper()
	_, _, v := nvmeVolume(t, bs, int64(len(raw))+8<<20)
	if _, err := v.WriteFile(ctx, name, bytes.NewReader(raw), int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	src, err := v.Source(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// tinyLlamaStore writes a tiny synthetic llama model (q8_0) and its layer
// store under a temporary directory, and returns the model, the open store
// (closed when the test ends) and the store file's bytes, which the tests
// put on a volume.
func tinyLlamaStore(t testing.TB) (*model.Model, *streamtest.Store, []byte) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(path, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 4}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := streamtest.Write(filepath.Join(dir, "tiny.store"), m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	raw, err := os.ReadFile(store.Path())
	if err != nil {
		t.Fatal(err)
	}
	return m, store, raw
}

// requireAllCLikeResident runs the engine's pipeline over store with every
// layer on tier C read through src, one sequence per entry of tokens, and
// fails unless the logits equal m's resident forward pass bit for bit: the
// end-to-end check that bytes read from a volume are the layers. It returns
// the pass's stats.
func requireAllCLikeResident(t testing.TB, m *model.Model, store stream.LayerStore, src tier.Source, tokens ...[]int32) stream.Stats {
	t.Helper()
	steps := func() []model.Step {
		s := make([]model.Step, len(tokens))
		for i, tok := range tokens {
			s[i] = model.Step{Seq: m.NewSequence(16), Tokens: slices.Clone(tok)}
		}
		return s
	}
	m.SetLayerSource(nil)
	want := steps()
	if err := m.Forward(ctx, want); err != nil {
		t.Fatal(err)
	}
	tiers, err := tier.MixTiers("all-C", store.NumLayers())
	if err != nil {
		t.Fatal(err)
	}
	p, err := stream.New(stream.Options{Store: store, Tiers: tiers, Depth: 2, Source: src, Verify: stream.VerifyAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := steps()
	if err := p.Forward(ctx, m, got); err != nil {
		t.Fatal(err)
	}
	m.SetLayerSource(nil)
	for i := range got {
		g, w := got[i].Logits[0], want[i].Logits[0]
		for k := range g {
			if math.Float32bits(g[k]) != math.Float32bits(w[k]) {
				t.Fatalf("sequence %d logit %d: %v, want %v", i, k, g[k], w[k])
			}
		}
	}
	return p.LastPass()
}

func TestOnNVMe(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{512, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			t.Parallel()
			sw, dev, v := nvmeVolume(t, bs, 32<<20)
			data := randBytes(5<<20+123, 9)
			e, err := v.WriteFile(ctx, "pool", bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			// The bytes are where the table says, on the namespace itself.
			if !bytes.Equal(sw.Data(1)[e.Offset:e.Offset+e.Length], data) {
				t.Fatal("namespace bytes differ from the file")
			}
			v2, err := volume.Open(ctx, dev)
			if err != nil {
				t.Fatal(err)
			}
			e2, err := v2.Lookup("pool")
			if err != nil || e2 != e {
				t.Fatalf("%+v %v", e2, err)
			}
			if err := v2.Verify(ctx, e2); err != nil {
				t.Fatal(err)
			}
			// Stream source reads into DMA buffers, zero copy.
			src, err := v2.Source("pool")
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			buf, err := src.Alloc(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Free()
			for _, off := range []int64{0, 4096, 3 << 20, 5 << 20} {
				n := min(int64(buf.Len()), (e.Reserved-off)/4096*4096)
				if err := src.ReadAt(ctx, buf.Bytes()[:n], off); err != nil {
					t.Fatal(err)
				}
				want := make([]byte, n)
				copy(want, data[off:min(off+n, int64(len(data)))])
				if !bytes.Equal(buf.Bytes()[:n], want) {
					t.Fatalf("source read at %d differs", off)
				}
			}
			if err := src.ReadAt(ctx, buf.Bytes()[:4096], e.Reserved); err == nil {
				t.Error("read past the extent accepted")
			}
			if err := src.ReadAt(ctx, buf.Bytes()[1:4097], 0); !errors.Is(err, tier.ErrMisaligned) {
				t.Errorf("misaligned: %v", err)
			}
			// Media errors surface as typed errors through the volume.
			sw.InjectError(1, nvme.OpRead, uint64(e.Offset)/uint64(bs)+10, 1, nvme.StatusUnrecoveredRead)
			if err := src.ReadAt(ctx, buf.Bytes()[:64<<10], 0); !errors.Is(err, nvme.ErrMedia) {
				t.Errorf("injected media error: %v", err)
			}
		})
	}
}

// TestSourceFeedsPipeline stores a layer store in a volume on the
// software NVMe controller and runs the engine's pipeline with every layer
// on tier C read through the volume source: the logits must equal the
// resident model's bit for bit.
func TestSourceFeedsPipeline(t *testing.T) {
	t.Parallel()
	m, store, raw := tinyLlamaStore(t)
	src := nvmeSource(t, 512, "tiny.store", raw)
	st := requireAllCLikeResident(t, m, store, src, []int32{3, 5, 7}, []int32{11})
	t.Logf("pass stats: %+v", st)
}

func FuzzParse(f *testing.F) {
	dev, file := fileDev(f, 1<<20, 512)
	v, err := volume.Format(ctx, dev, volume.FormatOptions{TableBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	v.WriteFile(ctx, "a", bytes.NewReader([]byte("abc")), 3)
	v.WriteFile(ctx, "b", bytes.NewReader(make([]byte, 9000)), 9000)
	img := make([]byte, 4*4096)
	file.ReadAt(img, 0)
	f.Add(img[:4096], img[8192:])
	f.Add(img[4096:8192], img[12288:])
	f.Fuzz(func(t *testing.T, sb, table []byte) {
		s, err := volume.ParseSuperblock(sb)
		if err != nil {
			s = volume.Superblock{Version: 1, BlockSize: 512, Size: 1 << 20, TableBytes: 4096, DataOffset: 3 * 4096}
		}
		es, err := volume.ParseTable(table, s)
		if err != nil {
			return
		}
		for _, e := range es {
			if e.Offset < s.DataOffset || e.End() > s.Size || e.Offset%volume.Unit != 0 {
				t.Fatalf("accepted extent %+v outside %+v", e, s)
			}
		}
	})
}
