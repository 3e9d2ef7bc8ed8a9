package prefab

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// countingReader is an io.ReaderAt over b that counts the bytes asked of
// it, as a volume extent read by the NVMe driver would be.
type countingReader struct {
	b []byte
	n atomic.Int64
}

func (r *countingReader) ReadAt(p []byte, off int64) (int, error) {
	r.n.Add(int64(len(p)))
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// TestOpenPoolReader: a pool opened through an io.ReaderAt (a pool on a
// raw device) reads only its header and manifest at open, then each extent
// the first time it is used, and builds the same model as the file; a
// short or damaged image is refused as OpenPool refuses the file.
func TestOpenPoolReader(t *testing.T) {
	t.Parallel()
	path, _ := prefab(t, t.TempDir(), "llama", "f32", TypeKeep)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	r := &countingReader{b: raw}
	p, err := OpenPoolReader("dev:pool", r, int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := r.n.Load(); got >= fp.Extent(0).Offset {
		t.Fatalf("open read %d bytes: more than the header and manifest (%d)", got, fp.Extent(0).Offset)
	}
	before := r.n.Load()
	b, err := p.Mapped(1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fp.Mapped(1)
	if !bytes.Equal(b, want) || r.n.Load()-before != fp.Extent(1).Length {
		t.Fatalf("layer 1: equal %v, read %d bytes for a %d-byte extent", bytes.Equal(b, want), r.n.Load()-before, fp.Extent(1).Length)
	}
	m, err := p.Model()
	if err != nil {
		t.Fatal(err)
	}
	fm, err := fp.Model()
	if err != nil {
		t.Fatal(err)
	}
	got, ref := logitsRun(t, m, 3), logitsRun(t, fm, 3)
	for i := range ref {
		for j := range ref[i] {
			if got[i][j] != ref[i][j] {
				t.Fatalf("step %d logit %d: %g through the reader, %g from the file", i, j, got[i][j], ref[i][j])
			}
		}
	}

	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "truncated header"},
		{"header only", raw[:64], "truncated manifest"},
		{"bad magic", append([]byte("XXXX"), raw[4:]...), "bad magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenPoolReader("dev:bad", bytes.NewReader(tc.b), int64(len(tc.b)))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "dev:bad") {
				t.Fatalf("error %v, want ErrCorrupt naming dev:bad and %q", err, tc.want)
			}
		})
	}
}
