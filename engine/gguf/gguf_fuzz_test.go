package gguf

import (
	"bytes"
	"cmp"
	"io"
	"runtime"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// Open may allocate at most fuzzAllocFactor bytes per input byte plus
// fuzzAllocSlack. The derivation is in read.go: the scan allocates nothing
// input-dependent, and the decode allocates at most about 4 bytes per
// encoded byte (a one-byte nested array: 24-byte slot + 24-byte boxed slice
// for 13 encoded bytes); the read buffer is at most one byte per input byte.
// The slack covers error text and the fixed-size structures.
const (
	fuzzAllocFactor = 6
	fuzzAllocSlack  = 16 << 10
)

// fuzzSeeds are small valid files from the Writer covering every value
// type, nesting, tensors of several types and both versions.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, version := range []uint32{2, 3} {
		w := NewWriter(version)
		for _, kv := range []KV{
			{"general.architecture", "llama"},
			{"u8", uint8(1)}, {"i8", int8(-1)}, {"u16", uint16(2)}, {"i16", int16(-2)},
			{"u32", uint32(3)}, {"i32", int32(-3)}, {"f32", float32(0.5)}, {"b", true},
			{"u64", uint64(4)}, {"i64", int64(-4)}, {"f64", 0.25},
			{"tokens", []string{"a", "", "bc"}}, {"scores", []float32{1, 2}},
			{"types", []int32{1, 2}}, {"flags", []bool{true, false}},
			{"nested", Array{TypeArray, []Array{{TypeUint8, []uint8{1, 2}}, {TypeString, []string{"x"}}}}},
		} {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.AddTensor("token_embd.weight", quant.Q8_0, []uint64{32, 2}); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor("output_norm.weight", quant.F32, []uint64{3}); err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, writeFile(t, w))
	}
	w := NewWriter(3)
	if err := w.SetAlignment(64); err != nil {
		t.Fatal(err)
	}
	for i, typ := range quant.Types() {
		if err := w.AddTensor(typ.String(), typ, []uint64{uint64(typ.BlockElems()), uint64(i%2 + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	seeds = append(seeds, writeFile(t, w))
	seeds = append(seeds, writeFile(t, NewWriter(2))) // empty file
	return seeds
}

func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, err := Open(bytes.NewReader(data), int64(len(data)))
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(fuzzAllocFactor*len(data)+fuzzAllocSlack); got > limit {
			t.Fatalf("Open allocated %d bytes for %d input bytes (limit %d); err = %v", got, len(data), limit, err)
		}
		if err != nil {
			if file != nil {
				t.Fatal("File returned with an error")
			}
			return
		}
		checkFile(t, file, data)
	})
}

// checkFile asserts the invariants Open promises for a successfully parsed
// file, and that rewriting it is a fixed point.
func checkFile(t *testing.T, f *File, data []byte) {
	if f.Version != 2 && f.Version != 3 {
		t.Fatalf("version %d", f.Version)
	}
	if f.Alignment == 0 || f.Alignment&(f.Alignment-1) != 0 || f.DataOffset%int64(f.Alignment) != 0 || f.DataOffset < f.HeaderSize {
		t.Fatalf("alignment %d, data offset %d, header %d", f.Alignment, f.DataOffset, f.HeaderSize)
	}
	ts := slices.Clone(f.Tensors)
	slices.SortFunc(ts, func(a, b TensorInfo) int { return cmp.Compare(a.Offset, b.Offset) })
	prevEnd := f.DataOffset
	for _, ti := range ts {
		start := f.DataOffset + int64(ti.Offset)
		end := start + ti.Size
		if ti.Size < 0 || ti.Offset > uint64(len(data)) || start < prevEnd || end > int64(len(data)) {
			t.Fatalf("tensor %q at %d+%d size %d (previous end %d) in a %d-byte file", ti.Name, f.DataOffset, ti.Offset, ti.Size, prevEnd, len(data))
		}
		if ti.Offset%f.Alignment != 0 {
			t.Fatalf("tensor %q offset %d misaligned", ti.Name, ti.Offset)
		}
		if len(ti.Dims) == 0 || len(ti.Dims) > MaxDims || !ti.Type.Known() {
			t.Fatalf("tensor %q dims %v type %v", ti.Name, ti.Dims, ti.Type)
		}
		if got, ok := f.Tensor(ti.Name); !ok || got.Offset != ti.Offset {
			t.Fatalf("Tensor(%q) lookup failed", ti.Name)
		}
		prevEnd = end
	}
	for _, kv := range f.KV {
		if _, ok := f.Lookup(kv.Key); !ok {
			t.Fatalf("Lookup(%q) failed", kv.Key)
		}
	}

	// Write the file back and read it again: the second write must equal
	// the first (NaNs and all, which reflect.DeepEqual cannot compare).
	// Huge alignments would make the rewrite pad gigabytes; skip those.
	if f.Alignment > 1<<16 {
		return
	}
	first := rewrite(t, f)
	f2, err := Open(bytes.NewReader(first), int64(len(first)))
	if err != nil {
		t.Fatalf("reopening the rewritten file: %v", err)
	}
	if second := rewrite(t, f2); !bytes.Equal(first, second) {
		t.Fatal("rewrite is not a fixed point")
	}
}

func rewrite(t *testing.T, f *File) []byte {
	w := NewWriter(f.Version)
	for _, kv := range f.KV {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatalf("AddKV(%q) of a value Open returned: %v", kv.Key, err)
		}
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims); err != nil {
			t.Fatalf("AddTensor(%q) of a tensor Open returned: %v", ti.Name, err)
		}
	}
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf, func(i int, ti TensorInfo, dst io.Writer) error {
		b, err := f.ReadTensor(ti.Name)
		if err != nil {
			return err
		}
		_, err = dst.Write(b)
		return err
	})
	if err != nil {
		t.Fatalf("rewriting: %v", err)
	}
	return buf.Bytes()
}
