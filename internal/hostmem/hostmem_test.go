//go:build linux

package hostmem_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/internal/hostmem"
)

func TestAlign(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, a, up, down int64 }{
		{0, 4096, 0, 0},
		{1, 4096, 4096, 0},
		{4096, 4096, 4096, 4096},
		{4097, 4096, 8192, 4096},
		{100, 64, 128, 64},
		{10, 3, 12, 9}, // not a power of two
		{7, 1, 7, 7},
	} {
		if got := hostmem.AlignUp(c.n, c.a); got != c.up {
			t.Errorf("AlignUp(%d, %d) = %d, want %d", c.n, c.a, got, c.up)
		}
		if got := hostmem.AlignDown(c.n, c.a); got != c.down {
			t.Errorf("AlignDown(%d, %d) = %d, want %d", c.n, c.a, got, c.down)
		}
	}
	if got := hostmem.AlignUp(uint64(33), 32); got != 64 {
		t.Errorf("AlignUp(uint64 33, 32) = %d", got)
	}
}

func TestAlloc(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		n    int
		opts hostmem.AllocOptions
	}{
		{"page", 4096, hostmem.AllocOptions{}},
		{"odd size", 5000, hostmem.AllocOptions{}},
		{"empty", 0, hostmem.AllocOptions{}},
		{"huge pages", 3 << 20, hostmem.AllocOptions{HugePages: true}},
		{"locked", 64 << 10, hostmem.AllocOptions{Lock: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, err := hostmem.Alloc(c.n, c.opts)
			if c.opts.Lock && err != nil {
				t.Skipf("mlock refused here (RLIMIT_MEMLOCK): %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			b := r.Bytes()
			if len(b) != c.n || r.Len() != c.n || !hostmem.Aligned(b, hostmem.PageSize) {
				t.Fatalf("%d bytes at %#x, want %d page-aligned", len(b), hostmem.Addr(b), c.n)
			}
			if c.opts.HugePages && r.Huge() && !hostmem.Aligned(b, hostmem.HugePageSize) {
				t.Fatalf("huge region at %#x", hostmem.Addr(b))
			}
			if r.Locked() != c.opts.Lock {
				t.Fatalf("Locked = %v", r.Locked())
			}
			if bytes.ContainsFunc(b, func(r rune) bool { return r != 0 }) {
				t.Fatal("fresh memory is not zero")
			}
			for i := range b {
				b[i] = byte(i)
			}
			if err := r.Free(); err != nil {
				t.Fatal(err)
			}
			if err := r.Free(); err != nil || r.Bytes() != nil {
				t.Fatalf("second Free: %v, bytes %v", err, r.Bytes() != nil)
			}
		})
	}
	if _, err := hostmem.Alloc(-1, hostmem.AllocOptions{}); err == nil {
		t.Error("negative size accepted")
	}
}

// writeFile writes n patterned bytes to a new file and returns its path.
func writeFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestMap(t *testing.T) {
	t.Parallel()
	path, data := writeFile(t, 3*hostmem.PageSize+100)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		name   string
		off, n int64
		ok     bool
	}{
		{"whole", 0, int64(len(data)), true},
		{"from a page", hostmem.PageSize, 2 * hostmem.PageSize, true},
		{"empty", 0, 0, true},
		{"misaligned offset", 100, 10, false},
		{"negative", -hostmem.PageSize, 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := hostmem.Map(f, c.off, c.n)
			if !c.ok {
				if err == nil {
					m.Close()
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Bytes(), data[c.off:c.off+c.n]) || m.Len() != int(c.n) {
				t.Fatal("mapped bytes differ from the file's")
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil || m.Bytes() != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
	m, err := hostmem.MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !bytes.Equal(m.Bytes(), data) {
		t.Fatal("MapFile bytes differ from the file's")
	}
	if _, err := hostmem.MapFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("MapFile of a missing file: %v", err)
	}
}

func TestOpenDirect(t *testing.T) {
	t.Parallel()
	path, data := writeFile(t, 4*hostmem.PageSize)
	f, err := hostmem.OpenDirect(path)
	if errors.Is(err, hostmem.ErrDirectRefused) {
		t.Logf("%v: reading buffered", err)
		f, err = hostmem.OpenBuffered(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size() != int64(len(data)) || f.Path() != path {
		t.Fatalf("size %d, path %s", f.Size(), f.Path())
	}
	r, err := hostmem.Alloc(2*hostmem.PageSize, hostmem.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	buf := r.Bytes()
	if n, err := f.ReadAt(buf, hostmem.PageSize); err != nil || n != len(buf) || !bytes.Equal(buf, data[hostmem.PageSize:3*hostmem.PageSize]) {
		t.Fatalf("ReadAt: %d, %v (direct %v)", n, err, f.Direct())
	}
	if n, err := f.ReadAt(buf, 3*hostmem.PageSize); err != io.EOF || n != hostmem.PageSize {
		t.Fatalf("ReadAt past the end: %d, %v", n, err)
	}
	if f.Direct() {
		if _, err := f.ReadAt(buf[1:hostmem.PageSize+1], 0); err == nil {
			t.Error("misaligned direct read accepted")
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := hostmem.OpenDirect(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenDirect of a missing file: %v", err)
	}
}
