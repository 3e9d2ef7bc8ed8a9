//go:build unix

package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// writeModel writes a small single-file GGUF with nt tensors of distinct
// contents and returns it mapped.
func writeModel(t *testing.T, dir string, nt int) *Mapped {
	t.Helper()
	w := NewWriter(3)
	for _, kv := range []KV{{"general.architecture", "llama"}, {"x.list", []int32{1, 2, 3}}} {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < nt; i++ {
		if err := w.AddTensor("t"+string(rune('a'+i)), quant.F32, []uint64{uint64(8 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "whole.gguf")
	if err := os.WriteFile(p, writeFile(t, w), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// openers are the ways to open a GGUF model: copied, mapped shared, and
// its header alone (as a Mapped without data).
var openers = []struct {
	name string
	open func(string) (*Mapped, error)
}{
	{"Map", Map},
	{"MapShared", MapShared},
	{"ReadHeader", func(p string) (*Mapped, error) {
		f, err := ReadHeader(p)
		if err != nil {
			return nil, err
		}
		return &Mapped{File: f}, nil
	}},
}

// TestSplitRoundTrip: a model written in 3 parts opens from its first part
// as the whole, each way: the same metadata and tensors, each tensor's
// bytes from the part that holds it (through Data and TensorReader), or,
// read as a header, none.
func TestSplitRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	whole := writeModel(t, dir, 7)
	paths, err := WriteSplit(whole, filepath.Join(dir, "m"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "m-00002-of-00003.gguf"); paths[1] != want {
		t.Fatalf("part 2 at %s, want %s", paths[1], want)
	}
	for _, o := range openers {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			roundTrip(t, whole, paths[0], o.open, o.name == "ReadHeader")
		})
	}
}

func roundTrip(t *testing.T, whole *Mapped, path string, open func(string) (*Mapped, error), header bool) {
	m, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if header {
		for _, wt := range whole.Tensors {
			ti, ok := m.Tensor(wt.Name)
			if !ok || ti.Size != wt.Size || ti.Type != wt.Type {
				t.Fatalf("tensor %s: %+v, want %+v", wt.Name, ti, wt)
			}
			if m.Data(ti) != nil {
				t.Errorf("tensor %s: a header has data", wt.Name)
			}
			if _, err := m.ReadTensor(wt.Name); !errors.Is(err, errHeaderOnly) {
				t.Errorf("tensor %s: ReadTensor of a header: %v, want %v", wt.Name, err, errHeaderOnly)
			}
		}
		return
	}
	if len(m.Tensors) != len(whole.Tensors) {
		t.Fatalf("%d tensors, want %d", len(m.Tensors), len(whole.Tensors))
	}
	if a, ok := m.String("general.architecture"); !ok || a != "llama" {
		t.Errorf("metadata lost: general.architecture = %q", a)
	}
	parts := map[int]bool{}
	for _, wt := range whole.Tensors {
		ti, ok := m.Tensor(wt.Name)
		if !ok {
			t.Fatalf("tensor %s missing", wt.Name)
		}
		parts[ti.part] = true
		if got, want := m.Data(ti), whole.Data(&wt); !bytes.Equal(got, want) {
			t.Errorf("tensor %s: Data differs", wt.Name)
		}
		if got, err := m.ReadTensor(wt.Name); err != nil || !bytes.Equal(got, whole.Data(&wt)) {
			t.Errorf("tensor %s: ReadTensor differs (%v)", wt.Name, err)
		}
	}
	if len(parts) != 3 {
		t.Errorf("tensors came from parts %v, want all 3", parts)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Data(&m.Tensors[len(m.Tensors)-1]) != nil {
		t.Error("Data after Close returned bytes")
	}
	if _, err := m.ReadTensor(m.Tensors[len(m.Tensors)-1].Name); err == nil {
		t.Error("ReadTensor after Close succeeded")
	}
}

// TestSplitErrors: a later part opened alone names the first; a missing
// part, a part of another split, a wrong tensor count, a tensor in two
// parts and a badly named first part are clear errors.
func TestSplitErrors(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (string, []string, *Mapped) {
		dir := t.TempDir()
		whole := writeModel(t, dir, 6)
		paths, err := WriteSplit(whole, filepath.Join(dir, "m"), 3)
		if err != nil {
			t.Fatal(err)
		}
		return dir, paths, whole
	}
	// rewrite replaces part i with a file written by w.
	rewrite := func(t *testing.T, path string, kvs []KV, tensors []TensorInfo) {
		w := NewWriter(3)
		for _, kv := range kvs {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
		for _, ti := range tensors {
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(path, writeFile(t, w), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	splitKV := func(no, n, total int) []KV {
		return []KV{{SplitNoKey, uint16(no)}, {SplitCountKey, uint16(n)}, {SplitTensorsKey, int32(total)}}
	}
	tests := []struct {
		name string
		mod  func(t *testing.T, dir string, paths []string, whole *Mapped) string // returns the path to Map
		want string
	}{
		{"later part alone", func(t *testing.T, _ string, p []string, _ *Mapped) string { return p[1] },
			"is part 2 of a model split in 3: open its first part"},
		{"missing part", func(t *testing.T, _ string, p []string, _ *Mapped) string { os.Remove(p[2]); return p[0] },
			"part 3 of 3"},
		{"part of another split", func(t *testing.T, _ string, p []string, w *Mapped) string {
			rewrite(t, p[1], splitKV(1, 4, 6), w.Tensors[2:4])
			return p[0]
		}, "says it is part 2 of 4, want part 2 of 3"},
		{"tensor count", func(t *testing.T, _ string, p []string, w *Mapped) string {
			rewrite(t, p[2], splitKV(2, 3, 6), w.Tensors[4:5])
			return p[0]
		}, "split.tensors.count is 6 but the 3 parts hold 5 tensors"},
		{"tensor twice", func(t *testing.T, _ string, p []string, w *Mapped) string {
			rewrite(t, p[2], splitKV(2, 3, 6), []TensorInfo{w.Tensors[4], w.Tensors[0]})
			return p[0]
		}, `tensor "ta" is in part 1 and part 3`},
		{"badly named", func(t *testing.T, dir string, p []string, _ *Mapped) string {
			q := filepath.Join(dir, "first.gguf")
			if err := os.Rename(p[0], q); err != nil {
				t.Fatal(err)
			}
			return q
		}, "is not PREFIX-00001-of-00003.gguf"},
		{"split.no out of range", func(t *testing.T, _ string, p []string, w *Mapped) string {
			rewrite(t, p[0], splitKV(3, 3, 6), w.Tensors[:2])
			return p[0]
		}, "split.no is 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, paths, whole := setup(t)
			p := tc.mod(t, dir, paths, whole)
			for _, o := range openers {
				m, err := o.open(p)
				if err == nil {
					m.Close()
					t.Fatalf("%s opened it; want an error with %q", o.name, tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %q, want %q", o.name, err, tc.want)
				}
			}
		})
	}
}

func TestSplitPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"Qwen2.5-7B-Q4_K_M-00001-of-00002.gguf", "Qwen2.5-7B-Q4_K_M", true},
		{"m-00002-of-00003.gguf", "m", true},
		{"model.gguf", "", false},
		{"m-1-of-3.gguf", "", false},
		{"-00001-of-00002.gguf", "", false},
	} {
		if got, ok := SplitPrefix(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("SplitPrefix(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
