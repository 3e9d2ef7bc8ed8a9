//go:build linux

package hostmem

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSnapshotSurvivesTruncation: bytes filled into a snapshot stay
// readable and unchanged after the file is truncated and rewritten (a
// shared mapping's would fault with SIGBUS), and filling a range the file
// no longer has is an error wrapping ErrFileChanged.
func TestSnapshotSurvivesTruncation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(path string) error
	}{
		{"truncate", func(path string) error { return os.Truncate(path, 0) }},
		{"rewrite", func(path string) error { return os.WriteFile(path, []byte("short"), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "f")
			want := make([]byte, 3*PageSize+17)
			for i := range want {
				want[i] = byte(i * 7)
			}
			if err := os.WriteFile(path, want, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSnapshot(f, int64(len(want)))
			f.Close() // the snapshot keeps its own descriptor
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Fill(0, 2*PageSize); err != nil {
				t.Fatal(err)
			}
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			if got := s.Bytes()[:2*PageSize]; string(got) != string(want[:2*PageSize]) {
				t.Fatal("filled bytes changed with the file")
			}
			if err := s.Fill(2*PageSize, int64(len(want))-2*PageSize); !errors.Is(err, ErrFileChanged) {
				t.Fatalf("filling past the new end: %v, want ErrFileChanged", err)
			}
			if err := s.Fill(0, int64(len(want))+1); err == nil {
				t.Fatal("a fill past the snapshot's size succeeded")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Fill(0, 1); err == nil {
				t.Fatal("a fill after Close succeeded")
			}
		})
	}
}

// TestSnapshotFileKeepsNoDescriptor: a whole-file copy holds the bytes and
// no descriptor of the file.
func TestSnapshotFileKeepsNoDescriptor(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	want := []byte("weights, all of them")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SnapshotFile(f, int64(len(want)))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if string(s.Bytes()) != string(want) {
		t.Fatalf("copy %q", s.Bytes())
	}
	if err := s.Fill(0, 1); err == nil {
		t.Fatal("a whole-file snapshot still fills: it kept a descriptor")
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if string(s.Bytes()) != string(want) {
		t.Fatalf("copy after truncation %q", s.Bytes())
	}
}

// BenchmarkLoad compares serving a file's bytes from a shared mapping with
// copying them into a Snapshot: the load (map, or copy) and the first full
// read of the bytes (a mapping's page faults), over a file in the page
// cache. STRATA_BENCH_FILE names a larger file to measure (it is only
// read); by default a 256 MiB file is written to the temp directory.
func BenchmarkLoad(b *testing.B) {
	path := os.Getenv("STRATA_BENCH_FILE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "f")
		if err := os.WriteFile(path, make([]byte, 256<<20), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	n := st.Size()
	touch := func(p []byte) (sum byte) {
		for i := 0; i < len(p); i += PageSize {
			sum += p[i]
		}
		return sum
	}
	for _, m := range []struct {
		name string
		open func() ([]byte, func() error, error)
	}{
		{"map", func() ([]byte, func() error, error) {
			m, err := Map(f, 0, n)
			if err != nil {
				return nil, nil, err
			}
			return m.Bytes(), m.Close, nil
		}},
		{"snapshot", func() ([]byte, func() error, error) {
			s, err := SnapshotFile(f, n)
			if err != nil {
				return nil, nil, err
			}
			return s.Bytes(), s.Close, nil
		}},
	} {
		b.Run(m.name, func(b *testing.B) {
			b.SetBytes(n)
			var load, first time.Duration
			for b.Loop() {
				t0 := time.Now()
				p, closeFn, err := m.open()
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				touch(p)
				first += time.Since(t1)
				load += t1.Sub(t0)
				if err := closeFn(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms/op")
			b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "first-read-ms/op")
		})
	}
}
