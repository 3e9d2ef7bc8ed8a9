package stream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// writeRandom writes n random bytes to a file in dir.
func writeRandom(t testing.TB, dir string, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(dir, "data")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestFileSourceReads(t *testing.T) {
	t.Parallel()
	path, data := writeRandom(t, t.TempDir(), 3<<20+5*4096)
	for _, tc := range []struct {
		name string
		opts stream.FileOptions
	}{
		{"defaults", stream.FileOptions{}},
		{"small chunks deep queue", stream.FileOptions{ChunkBytes: 4096, QueueDepth: 32}},
		{"odd chunk one deep", stream.FileOptions{ChunkBytes: 12345, QueueDepth: 1}},
		{"buffered", stream.FileOptions{Buffered: true, ChunkBytes: 1 << 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := stream.OpenFile(path, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.opts.Buffered && s.Direct() {
				t.Fatal("Buffered source reports O_DIRECT")
			}
			if s.Size() != int64(len(data)) {
				t.Fatalf("size %d, want %d", s.Size(), len(data))
			}
			for _, r := range []struct{ off, n int }{{0, 4096}, {4096, 2 << 20}, {0, len(data)}, {len(data) - 8192, 8192}} {
				buf, err := s.Alloc(r.n)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.ReadAt(context.Background(), buf.Bytes()[:r.n], int64(r.off)); err != nil {
					t.Fatalf("read [%d, +%d): %v", r.off, r.n, err)
				}
				if !bytes.Equal(buf.Bytes()[:r.n], data[r.off:r.off+r.n]) {
					t.Fatalf("read [%d, +%d): wrong bytes", r.off, r.n)
				}
				buf.Free()
			}
		})
	}
}

func TestFileSourceErrors(t *testing.T) {
	t.Parallel()
	path, _ := writeRandom(t, t.TempDir(), 64<<10)
	s, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := s.Alloc(2 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	ctx := context.Background()
	if err := s.ReadAt(ctx, buf.Bytes(), 64<<10-4096); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read past end: %v", err)
	}
	if s.Direct() {
		if err := s.ReadAt(ctx, buf.Bytes()[:4096], 100); !errors.Is(err, tier.ErrMisaligned) {
			t.Errorf("misaligned offset: %v", err)
		}
		if err := s.ReadAt(ctx, buf.Bytes()[1:4097], 0); !errors.Is(err, tier.ErrMisaligned) {
			t.Errorf("misaligned buffer: %v", err)
		}
	} else {
		t.Log("filesystem refuses O_DIRECT here; alignment checks not exercised")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.ReadAt(cctx, buf.Bytes(), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.ReadAt(ctx, buf.Bytes(), 0); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("read after Close: %v", err)
	}
	if _, err := stream.OpenFile(filepath.Join(t.TempDir(), "missing"), stream.FileOptions{}); err == nil {
		t.Error("opened a missing file")
	}
}

// TestFileSourceTmpfs opens a file on tmpfs, which refuses O_DIRECT on
// older kernels: the source must fall back (and say so) or read directly,
// and in both cases read the right bytes.
func TestFileSourceTmpfs(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("/dev/shm", "stream-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(dir)
	path, data := writeRandom(t, dir, 1<<20)
	s, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("tmpfs O_DIRECT: %v", s.Direct())
	buf, _ := s.Alloc(len(data))
	defer buf.Free()
	if err := s.ReadAt(context.Background(), buf.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Fatal("wrong bytes")
	}
}

func TestMmapSource(t *testing.T) {
	t.Parallel()
	path, data := writeRandom(t, t.TempDir(), 3<<20+17)
	s, err := stream.OpenMmap(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 3<<20)
	if err := s.ReadAt(context.Background(), dst, 17); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, data[17:17+len(dst)]) || !bytes.Equal(s.Bytes(), data) {
		t.Fatal("wrong bytes")
	}
	if err := s.ReadAt(context.Background(), dst, 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read past end: %v", err)
	}
	s.Close()
	if err := s.ReadAt(context.Background(), dst[:1], 0); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("read after Close: %v", err)
	}
}

func TestFaultySource(t *testing.T) {
	t.Parallel()
	path, _ := writeRandom(t, t.TempDir(), 64<<10)
	s, err := stream.OpenMmap(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := stream.NewFaulty(s)
	ctx := context.Background()
	dst := make([]byte, 4096)
	f.FailNth(2)
	for i, want := range []bool{false, true, false} {
		if err := f.ReadAt(ctx, dst, 0); errors.Is(err, stream.ErrInjected) != want {
			t.Fatalf("read %d: %v, want failure %v", i+1, err, want)
		}
	}
	f.FailExtent(tier.Extent{Offset: 8192, Length: 4096}, false)
	for _, r := range []struct {
		off  int64
		want bool
	}{{0, false}, {4096, false}, {8192, true}, {8192 + 4095, true}, {12288, false}, {8192, true}} {
		if err := f.ReadAt(ctx, dst[:1], r.off); errors.Is(err, stream.ErrInjected) != r.want {
			t.Fatalf("read at %d: %v, want failure %v", r.off, err, r.want)
		}
	}
	f.Clear()
	if err := f.ReadAt(ctx, dst, 8192); err != nil {
		t.Fatalf("after Clear: %v", err)
	}
	if f.Reads() != 10 {
		t.Fatalf("%d reads counted, want 10", f.Reads())
	}
}
