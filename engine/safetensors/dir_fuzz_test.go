package safetensors

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpenDir opens arbitrary model directories: a config, an index and
// two shards (or the second shard's bytes as a single model.safetensors).
// OpenDir never panics, and every tensor of a directory it accepts lies in
// its file with as many bytes as its shape and type say.
func FuzzOpenDir(f *testing.F) {
	seedDir := f.TempDir()
	tensors := []Tensor{
		{Name: "a.weight", DType: "F32", Shape: []int64{2, 3}, Data: make([]byte, 24)},
		{Name: "b.weight", DType: "BF16", Shape: []int64{4}, Data: make([]byte, 8)},
	}
	if err := WriteDir(seedDir, map[string]any{"model_type": "llama", "hidden_size": 8}, tensors, 16); err != nil {
		f.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(seedDir, name))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	cfg, idx := read(ConfigFile), read(IndexFile)
	s1, s2 := read(ShardName(1, 2)), read(ShardName(2, 2))
	f.Add(cfg, idx, s1, s2, false)
	f.Add(cfg, idx, s1, s2, true)
	f.Add([]byte("{"), []byte(`{"weight_map":{"x":"../x"}}`), s1, s2, false)
	f.Fuzz(func(t *testing.T, cfg, idx, s1, s2 []byte, single bool) {
		dir := t.TempDir()
		write := func(name string, b []byte) {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if len(cfg) > 0 {
			write(ConfigFile, cfg)
		}
		if single {
			write(SingleFile, s2)
		} else {
			write(IndexFile, idx)
			write(ShardName(1, 2), s1)
			write(ShardName(2, 2), s2)
		}
		m, err := OpenDir(dir)
		if err != nil {
			return
		}
		defer m.Close()
		for _, name := range m.Names() {
			tn, err := m.Tensor(name)
			if err != nil {
				t.Fatalf("listed tensor %q: %v", name, err)
			}
			n, err := tn.NumElements()
			size, ok := DTypeSize(tn.DType)
			if err != nil || !ok || int64(len(tn.Data)) != n*size {
				t.Fatalf("tensor %q %s %v: %d bytes (%v, %v)", name, tn.DType, tn.Shape, len(tn.Data), err, ok)
			}
			_, _ = tn.Float32s()
		}
	})
}
