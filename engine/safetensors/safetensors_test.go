package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// makeTensor builds a tensor of the given dtype whose values are exactly
// representable in that dtype (small multiples of 1/8), and returns the
// float32 values it encodes.
func makeTensor(name, dtype string, shape []int64, salt int) (Tensor, []float32) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32((i*7+salt*13)%41-20) / 8
	}
	var data []byte
	switch dtype {
	case "F32":
		data = make([]byte, 4*n)
		for i, v := range vals {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
	case "F16":
		data = make([]byte, 2*n)
		for i, v := range vals {
			binary.LittleEndian.PutUint16(data[2*i:], quant.F32ToF16(v))
		}
	case "BF16":
		data = make([]byte, 2*n)
		for i, v := range vals {
			binary.LittleEndian.PutUint16(data[2*i:], quant.F32ToBF16(v))
		}
	}
	return Tensor{Name: name, DType: dtype, Shape: shape, Data: data}, vals
}

func testTensors(dtype string) ([]Tensor, map[string][]float32) {
	specs := []struct {
		name  string
		shape []int64
	}{
		{"model.layers.0.self_attn.q_proj.weight", []int64{16, 8}},
		{"model.embed_tokens.weight", []int64{32, 8}},
		{"model.norm.weight", []int64{8}},
		{"model.layers.1.mlp.down_proj.weight", []int64{8, 24}},
		{"scalar", []int64{}},
		{"empty", []int64{0, 4}},
	}
	var ts []Tensor
	want := map[string][]float32{}
	for i, s := range specs {
		t, v := makeTensor(s.name, dtype, s.shape, i)
		ts = append(ts, t)
		want[s.name] = v
	}
	return ts, want
}

func checkModel(t *testing.T, m *Model, ts []Tensor, want map[string][]float32) {
	t.Helper()
	var names []string
	for _, tt := range ts {
		names = append(names, tt.Name)
	}
	if got := m.Names(); len(got) != len(names) {
		t.Fatalf("Names() = %v, want %d names", got, len(names))
	}
	for _, in := range ts {
		got, err := m.Tensor(in.Name)
		if err != nil {
			t.Fatalf("Tensor(%q): %v", in.Name, err)
		}
		if got.DType != in.DType || !reflect.DeepEqual(got.Shape, in.Shape) || !bytes.Equal(got.Data, in.Data) {
			t.Fatalf("tensor %q: got %s %v (%d bytes), want %s %v (%d bytes)", in.Name, got.DType, got.Shape, len(got.Data), in.DType, in.Shape, len(in.Data))
		}
		f, err := got.Float32s()
		if err != nil {
			t.Fatalf("Float32s(%q): %v", in.Name, err)
		}
		if !reflect.DeepEqual(f, want[in.Name]) {
			t.Fatalf("tensor %q values: got %v, want %v", in.Name, f, want[in.Name])
		}
	}
}

func TestWriteFileRoundTrip(t *testing.T) {
	t.Parallel()
	for _, dtype := range []string{"F32", "F16", "BF16"} {
		t.Run(dtype, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ts, want := testTensors(dtype)
			if err := WriteFile(filepath.Join(dir, SingleFile), ts, map[string]string{"format": "pt"}); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, SingleFile))
			if err != nil {
				t.Fatal(err)
			}
			n := binary.LittleEndian.Uint64(raw)
			if n%8 != 0 {
				t.Errorf("header length %d not a multiple of 8", n)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(left) != 0 {
				t.Errorf("temporary files left behind: %v", left)
			}
			m, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Config != nil {
				t.Errorf("Config = %v, want nil without config.json", m.Config)
			}
			if m.Metadata["format"] != "pt" {
				t.Errorf("Metadata = %v", m.Metadata)
			}
			checkModel(t, m, ts, want)
			// Data is laid out in name order.
			h, err := parseHeader(raw)
			if err != nil {
				t.Fatal(err)
			}
			var prev string
			for _, e := range h.Entries {
				if e.Begin == e.End {
					continue
				}
				if e.Name < prev {
					t.Errorf("tensor %q stored after %q", e.Name, prev)
				}
				prev = e.Name
			}
		})
	}
}

func TestWriteDirSharded(t *testing.T) {
	t.Parallel()
	for _, dtype := range []string{"F32", "F16", "BF16"} {
		for _, maxShard := range []int64{0, 300, 1} {
			t.Run(fmt.Sprintf("%s/max%d", dtype, maxShard), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				ts, want := testTensors(dtype)
				cfg := map[string]any{"model_type": "llama", "hidden_size": 8}
				if err := WriteDir(dir, cfg, ts, maxShard); err != nil {
					t.Fatal(err)
				}
				_, errSingle := os.Stat(filepath.Join(dir, SingleFile))
				_, errIndex := os.Stat(filepath.Join(dir, IndexFile))
				sharded := maxShard > 0
				if sharded != (errSingle != nil) || sharded != (errIndex == nil) {
					t.Fatalf("maxShard %d: single err %v, index err %v", maxShard, errSingle, errIndex)
				}
				if sharded {
					var idx struct {
						Metadata  map[string]int64  `json:"metadata"`
						WeightMap map[string]string `json:"weight_map"`
					}
					b, _ := os.ReadFile(filepath.Join(dir, IndexFile))
					if err := json.Unmarshal(b, &idx); err != nil {
						t.Fatal(err)
					}
					var total int64
					files := map[string]bool{}
					for _, tt := range ts {
						total += int64(len(tt.Data))
						files[idx.WeightMap[tt.Name]] = true
					}
					if idx.Metadata["total_size"] != total {
						t.Errorf("total_size %d, want %d", idx.Metadata["total_size"], total)
					}
					if len(files) < 2 {
						t.Errorf("expected several shards, got %v", files)
					}
					if maxShard == 1 && !files[ShardName(len(ts), len(ts))] {
						t.Errorf("one tensor per shard expected, files %v", files)
					}
				}
				m, err := OpenDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if m.Config["model_type"] != "llama" || m.Config["hidden_size"] != 8.0 {
					t.Errorf("Config = %v", m.Config)
				}
				checkModel(t, m, ts, want)
			})
		}
	}
}

// TestLoadDir: LoadDir holds a copy of the files, single or sharded: the
// tensors stay right once the files are cut to nothing; DirSize is the
// files' bytes.
func TestLoadDir(t *testing.T) {
	t.Parallel()
	for _, maxShard := range []int64{0, 300} {
		t.Run(fmt.Sprintf("max%d", maxShard), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ts, want := testTensors("BF16")
			if err := WriteDir(dir, map[string]any{"model_type": "llama"}, ts, maxShard); err != nil {
				t.Fatal(err)
			}
			files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if err != nil || len(files) == 0 || (maxShard > 0) != (len(files) > 1) {
				t.Fatalf("files %v (%v)", files, err)
			}
			var total int64
			for _, f := range files {
				st, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				total += st.Size()
			}
			if n, err := DirSize(dir); err != nil || n != total {
				t.Fatalf("DirSize %d, %v; want %d", n, err, total)
			}
			m, err := LoadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, f := range files {
				if err := os.Truncate(f, 0); err != nil {
					t.Fatal(err)
				}
			}
			checkModel(t, m, ts, want)
		})
	}
}

// TestWriteDirSwitchLayout checks that rewriting a directory with the other
// layout removes the stale entry point.
func TestWriteDirSwitchLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts, want := testTensors("F32")
	if err := WriteDir(dir, nil, ts[:2], 0); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(dir, nil, ts, 100); err != nil {
		t.Fatal(err)
	}
	m, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkModel(t, m, ts, want)
	m.Close()
	if err := WriteDir(dir, nil, ts[:3], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, IndexFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale index kept: %v", err)
	}
	m, err = OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkModel(t, m, ts[:3], want)
	m.Close()
}

// rawFile assembles a file from a header string and n data bytes.
func rawFile(hdr string, n int) []byte {
	b := make([]byte, 8, 8+len(hdr)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	return append(b, make([]byte, n)...)
}

func TestParseHeaderErrors(t *testing.T) {
	t.Parallel()
	tooLong := make([]byte, 16)
	binary.LittleEndian.PutUint64(tooLong, 1000)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "shorter than"},
		{"header beyond file", tooLong, "runs past the end"},
		{"invalid json", rawFile(`{"a": `, 0), "header JSON"},
		{"not object", rawFile(`[1,2]`, 0), "not a JSON object"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}}`, 4), "unknown dtype"},
		{"missing field", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), "needs dtype"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, 24), "needs 24 bytes"},
		{"out of range", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 8), "out of range"},
		{"reversed offsets", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 8), "out of range"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0), "negative dimension"},
		{"overflow", rawFile(`{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}}`, 0), "overflows"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12), "overlap"},
		{"bad metadata", rawFile(`{"__metadata__":{"a":1}}`, 0), "__metadata__"},
		{"three offsets", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 8), "want 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseHeader(c.file)
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat containing %q", err, c.want)
			}
		})
	}
}

func TestOpenDirErrors(t *testing.T) {
	t.Parallel()
	good, _ := testTensors("F32")
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"empty dir", func(t *testing.T, dir string) {}, "neither"},
		{"bad config", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, ConfigFile), []byte("{"))
			if err := WriteFile(filepath.Join(dir, SingleFile), good, nil); err != nil {
				t.Fatal(err)
			}
		}, "config.json"},
		{"corrupt single", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, SingleFile), rawFile(`{"a":{"dtype":"X","shape":[],"data_offsets":[0,0]}}`, 0))
		}, "unknown dtype"},
		{"missing shard", func(t *testing.T, dir string) {
			if err := WriteDir(dir, nil, good, 100); err != nil {
				t.Fatal(err)
			}
			shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
			if len(shards) < 2 {
				t.Fatalf("want several shards, got %v", shards)
			}
			if err := os.Remove(shards[1]); err != nil {
				t.Fatal(err)
			}
		}, "missing shard"},
		{"index names absent tensor", func(t *testing.T, dir string) {
			if err := WriteFile(filepath.Join(dir, "a.safetensors"), good[:1], nil); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"nope":"a.safetensors"}}`))
		}, "not in shard"},
		{"index path escape", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"x":"../a.safetensors"}}`))
		}, "invalid file name"},
		{"duplicate across shards", func(t *testing.T, dir string) {
			if err := WriteFile(filepath.Join(dir, "a.safetensors"), good[:1], nil); err != nil {
				t.Fatal(err)
			}
			if err := WriteFile(filepath.Join(dir, "b.safetensors"), good[:1], nil); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"`+good[0].Name+`":"a.safetensors","x":"b.safetensors"}}`))
		}, "stored in both"},
		{"bad index json", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, IndexFile), []byte(`{"weight_map":`))
		}, "invalid safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			c.setup(t, dir)
			m, err := OpenDir(dir)
			if err == nil {
				m.Close()
				t.Fatalf("OpenDir succeeded, want error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWriteErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ts   []Tensor
		want string
	}{
		{"duplicate", []Tensor{{Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}, {Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}}, "duplicate"},
		{"unknown dtype", []Tensor{{Name: "a", DType: "Q4", Shape: []int64{1}, Data: []byte{1}}}, "unknown dtype"},
		{"size mismatch", []Tensor{{Name: "a", DType: "F32", Shape: []int64{2}, Data: []byte{1}}}, "do not match"},
		{"empty name", []Tensor{{Name: "", DType: "U8", Shape: []int64{1}, Data: []byte{1}}}, "invalid tensor name"},
		{"metadata name", []Tensor{{Name: "__metadata__", DType: "U8", Shape: []int64{1}, Data: []byte{1}}}, "invalid tensor name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "x.safetensors")
			err := WriteFile(path, c.ts, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("file exists after failed write: %v", err)
			}
		})
	}
	t.Run("unwritable dir", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "missing", "sub")
		ts, _ := testTensors("F32")
		if err := WriteFile(filepath.Join(dir, "x.safetensors"), ts, nil); err == nil {
			t.Fatal("write into a missing directory succeeded")
		}
	})
}

func TestFloat32sErrors(t *testing.T) {
	t.Parallel()
	cases := []Tensor{
		{Name: "int", DType: "I32", Shape: []int64{1}, Data: make([]byte, 4)},
		{Name: "short", DType: "F16", Shape: []int64{3}, Data: make([]byte, 4)},
		{Name: "unknown", DType: "Q8", Shape: []int64{1}, Data: make([]byte, 1)},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			if _, err := c.Float32s(); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func FuzzParseHeader(f *testing.F) {
	for _, dtype := range []string{"F32", "F16", "BF16"} {
		ts, _ := testTensors(dtype)
		var buf bytes.Buffer
		if err := Encode(&buf, ts, map[string]string{"format": "pt"}); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12))
	f.Add(rawFile(`{}`, 0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		dataLen := int64(len(b)) - h.DataStart
		var prevEnd int64
		for _, e := range h.Entries {
			if e.Begin < 0 || e.End < e.Begin || e.End > dataLen {
				t.Fatalf("accepted out-of-range tensor %+v (data %d)", e, dataLen)
			}
			n, err := numElements(e.Shape)
			if err != nil || n*dtypeSizes[e.DType] != e.End-e.Begin {
				t.Fatalf("accepted size mismatch %+v", e)
			}
			if e.Begin != e.End {
				if e.Begin < prevEnd {
					t.Fatalf("accepted overlap at %+v", e)
				}
				prevEnd = e.End
			}
		}
	})
}
