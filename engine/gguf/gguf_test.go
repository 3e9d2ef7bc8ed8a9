package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

func TestValueTypeString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		t    ValueType
		want string
	}{
		{TypeUint8, "UINT8"}, {TypeInt8, "INT8"}, {TypeUint16, "UINT16"}, {TypeInt16, "INT16"},
		{TypeUint32, "UINT32"}, {TypeInt32, "INT32"}, {TypeFloat32, "FLOAT32"}, {TypeBool, "BOOL"},
		{TypeString, "STRING"}, {TypeArray, "ARRAY"}, {TypeUint64, "UINT64"}, {TypeInt64, "INT64"},
		{TypeFloat64, "FLOAT64"}, {13, "ValueType(13)"},
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("ValueType(%d).String() = %q, want %q", uint32(tt.t), got, tt.want)
		}
	}
}

func TestRoundTripValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		want any // nil: same as in
	}{
		{"uint8", uint8(200), nil},
		{"int8", int8(-100), nil},
		{"uint16", uint16(65535), nil},
		{"int16", int16(-32768), nil},
		{"uint32", uint32(math.MaxUint32), nil},
		{"int32", int32(math.MinInt32), nil},
		{"uint64", uint64(math.MaxUint64), nil},
		{"int64", int64(math.MinInt64), nil},
		{"float32", float32(-1.5e-5), nil},
		{"float32 inf", float32(math.Inf(1)), nil},
		{"float64", math.Pi, nil},
		{"bool true", true, nil},
		{"bool false", false, nil},
		{"string", "héllo, wörld ✓", nil},
		{"empty string", "", nil},
		{"uint8 array", Array{TypeUint8, []uint8{0, 1, 255}}, nil},
		{"int8 array", Array{TypeInt8, []int8{-128, 0, 127}}, nil},
		{"uint16 array", Array{TypeUint16, []uint16{1, 65535}}, nil},
		{"int16 array", Array{TypeInt16, []int16{-1, 32767}}, nil},
		{"uint32 array", Array{TypeUint32, []uint32{7, math.MaxUint32}}, nil},
		{"int32 array", Array{TypeInt32, []int32{-7, math.MaxInt32}}, nil},
		{"float32 array", Array{TypeFloat32, []float32{0.5, -2, 1e30}}, nil},
		{"bool array", Array{TypeBool, []bool{true, false, true}}, nil},
		{"string array", Array{TypeString, []string{"a", "", "ccc"}}, nil},
		{"uint64 array", Array{TypeUint64, []uint64{math.MaxUint64}}, nil},
		{"int64 array", Array{TypeInt64, []int64{math.MinInt64, 3}}, nil},
		{"float64 array", Array{TypeFloat64, []float64{math.E, -0.0}}, nil},
		{"empty uint8 array", Array{TypeUint8, []uint8{}}, nil},
		{"empty string array", Array{TypeString, []string{}}, nil},
		{"empty nested array", Array{TypeArray, []Array{}}, nil},
		{"nil values array", Array{TypeFloat64, nil}, Array{TypeFloat64, []float64{}}},
		{"plain []string", []string{"x", "y"}, Array{TypeString, []string{"x", "y"}}},
		{"plain []int32", []int32{1, -2}, Array{TypeInt32, []int32{1, -2}}},
		{"nested arrays", Array{TypeArray, []Array{
			{TypeString, []string{"p", "q"}},
			{TypeInt32, []int32{}},
			{TypeArray, []Array{{TypeUint8, []uint8{9}}, {TypeArray, []Array{{TypeBool, []bool{true}}}}}},
		}}, nil},
	}
	for _, version := range []uint32{2, 3} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("v%d/%s", version, tt.name), func(t *testing.T) {
				t.Parallel()
				w := NewWriter(version)
				if err := w.AddKV("general.architecture", "llama"); err != nil {
					t.Fatal(err)
				}
				if err := w.AddKV("test.value", tt.in); err != nil {
					t.Fatalf("AddKV: %v", err)
				}
				data := writeFile(t, w)
				f, err := Open(bytes.NewReader(data), int64(len(data)))
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if f.Version != version {
					t.Errorf("Version = %d, want %d", f.Version, version)
				}
				want := tt.want
				if want == nil {
					want = tt.in
				}
				got, ok := f.Lookup("test.value")
				if !ok {
					t.Fatal("test.value missing")
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got %#v, want %#v", got, want)
				}
				if len(f.KV) != 2 || f.KV[0].Key != "general.architecture" || f.KV[1].Key != "test.value" {
					t.Errorf("KV order/keys = %v", f.KV)
				}
				// Re-encoding what was read reproduces the file exactly.
				w2 := NewWriter(version)
				for _, kv := range f.KV {
					if err := w2.AddKV(kv.Key, kv.Value); err != nil {
						t.Fatal(err)
					}
				}
				if again := writeFile(t, w2); !bytes.Equal(again, data) {
					t.Errorf("re-encoded file differs")
				}
			})
		}
	}
}

func TestGetters(t *testing.T) {
	t.Parallel()
	w := NewWriter(3)
	kvs := []KV{
		{"u8", uint8(7)}, {"i8neg", int8(-3)}, {"i64", int64(-1 << 40)}, {"u64big", uint64(math.MaxUint64)},
		{"u32", uint32(1 << 31)}, {"f32", float32(0.25)}, {"f64", 1e-6}, {"b", true}, {"s", "text"},
		{"strs", []string{"a", "b"}}, {"f32s", []float32{1, 2}}, {"i32s", []int32{-1, 5}},
		{"u8s", []uint8{1, 255}}, {"u32s big", []uint32{1, 1 << 31}}, {"i64s", []int64{-5, 1 << 30}},
		{"f64s", []float64{1}},
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	data := writeFile(t, w)
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		v  any
		ok bool
	}
	r := func(v any, ok bool) result { return result{v, ok} }
	tests := []struct {
		name string
		got  result
		want result
	}{
		{"Uint u8", r(f.Uint("u8")), result{uint64(7), true}},
		{"Uint negative", r(f.Uint("i8neg")), result{uint64(0xfffffffffffffffd), false}},
		{"Uint u64", r(f.Uint("u64big")), result{uint64(math.MaxUint64), true}},
		{"Uint float", r(f.Uint("f32")), result{uint64(0), false}},
		{"Uint missing", r(f.Uint("nope")), result{uint64(0), false}},
		{"Int negative", r(f.Int("i64")), result{int64(-1 << 40), true}},
		{"Int u32", r(f.Int("u32")), result{int64(1 << 31), true}},
		{"Int too big", r(f.Int("u64big")), result{int64(-1), false}},
		{"Float f32", r(f.Float("f32")), result{0.25, true}},
		{"Float f64", r(f.Float("f64")), result{1e-6, true}},
		{"Float int", r(f.Float("i8neg")), result{-3.0, true}},
		{"Float string", r(f.Float("s")), result{0.0, false}},
		{"Bool", r(f.Bool("b")), result{true, true}},
		{"Bool wrong type", r(f.Bool("u8")), result{false, false}},
		{"String", r(f.String("s")), result{"text", true}},
		{"String wrong type", r(f.String("b")), result{"", false}},
		{"Strings", r(f.Strings("strs")), result{[]string{"a", "b"}, true}},
		{"Strings wrong type", r(f.Strings("f32s")), result{[]string(nil), false}},
		{"Float32s", r(f.Float32s("f32s")), result{[]float32{1, 2}, true}},
		{"Float32s of f64", r(f.Float32s("f64s")), result{[]float32(nil), false}},
		{"Int32s", r(f.Int32s("i32s")), result{[]int32{-1, 5}, true}},
		{"Int32s of u8", r(f.Int32s("u8s")), result{[]int32{1, 255}, true}},
		{"Int32s of i64", r(f.Int32s("i64s")), result{[]int32{-5, 1 << 30}, true}},
		{"Int32s overflow", r(f.Int32s("u32s big")), result{[]int32(nil), false}},
		{"Int32s of scalar", r(f.Int32s("u8")), result{[]int32(nil), false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
}

func TestTensorLayout(t *testing.T) {
	t.Parallel()
	type tensor struct {
		name string
		typ  quant.Type
		dims []uint64
		size int64
	}
	tensors := []tensor{
		{"token_embd.weight", quant.Q4_K, []uint64{256, 3}, 3 * 144},
		{"output_norm.weight", quant.F32, []uint64{5}, 20},
		{"blk.0.attn_q.weight", quant.Q8_0, []uint64{64, 2}, 2 * 2 * 34},
		{"rope_freqs.weight", quant.F16, []uint64{3, 1, 1, 2}, 12},
		{"empty", quant.F32, []uint64{0, 4}, 0},
		{"blk.0.ffn_down.weight", quant.Q6_K, []uint64{256, 1}, 210},
		{"int8", quant.INT8Row, []uint64{7, 2}, 2 * (4 + 7)},
	}
	for _, version := range []uint32{2, 3} {
		for _, align := range []uint64{32, 64, 1, 4096} {
			t.Run(fmt.Sprintf("v%d/align%d", version, align), func(t *testing.T) {
				t.Parallel()
				w := NewWriter(version)
				if err := w.AddKV("general.name", "layout"); err != nil {
					t.Fatal(err)
				}
				if err := w.SetAlignment(align); err != nil {
					t.Fatal(err)
				}
				for _, tn := range tensors {
					if err := w.AddTensor(tn.name, tn.typ, tn.dims); err != nil {
						t.Fatal(err)
					}
				}
				data := writeFile(t, w)
				f, err := Open(bytes.NewReader(data), int64(len(data)))
				if err != nil {
					t.Fatal(err)
				}
				if f.Alignment != align {
					t.Errorf("Alignment = %d, want %d", f.Alignment, align)
				}
				if got, ok := f.Uint(AlignmentKey); (align != DefaultAlignment) != ok || (ok && got != align) {
					t.Errorf("%s = %d, %v (alignment %d)", AlignmentKey, got, ok, align)
				}
				if f.DataOffset%int64(align) != 0 || f.DataOffset < f.HeaderSize || f.DataOffset-f.HeaderSize >= int64(align) {
					t.Errorf("DataOffset %d, HeaderSize %d, alignment %d", f.DataOffset, f.HeaderSize, align)
				}
				if f.Size != int64(len(data)) || f.Size%int64(align) != 0 {
					t.Errorf("Size = %d, file %d bytes, alignment %d", f.Size, len(data), align)
				}
				if len(f.Tensors) != len(tensors) {
					t.Fatalf("%d tensors, want %d", len(f.Tensors), len(tensors))
				}
				var end uint64
				for i, tn := range tensors {
					ti := f.Tensors[i]
					want := hostmem.AlignUp(end, align)
					if ti.Name != tn.name || ti.Type != tn.typ || !slices.Equal(ti.Dims, tn.dims) || ti.Size != tn.size || ti.Offset != want {
						t.Errorf("tensor %d = %+v, want %s %v %v size %d offset %d", i, ti, tn.name, tn.typ, tn.dims, tn.size, want)
					}
					end = want + uint64(tn.size)
					got, err := f.ReadTensor(tn.name)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, pattern(i, tn.size)) {
						t.Errorf("tensor %q bytes differ", tn.name)
					}
				}
				if _, ok := f.Tensor("missing"); ok {
					t.Error("Tensor(missing) found")
				}
				if _, err := f.ReadTensor("missing"); err == nil || !strings.Contains(err.Error(), "missing") {
					t.Errorf("ReadTensor(missing) error = %v", err)
				}
			})
		}
	}
}

func TestShapeAndElems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dims  []uint64
		shape []uint64
		elems int64
	}{
		{[]uint64{4096}, []uint64{4096}, 4096},
		{[]uint64{4096, 128256}, []uint64{128256, 4096}, 4096 * 128256},
		{[]uint64{2, 3, 5, 7}, []uint64{7, 5, 3, 2}, 210},
		{[]uint64{8, 0}, []uint64{0, 8}, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.dims), func(t *testing.T) {
			t.Parallel()
			ti := TensorInfo{Dims: tt.dims}
			if got := ti.Shape(); !slices.Equal(got, tt.shape) {
				t.Errorf("Shape() = %v, want %v", got, tt.shape)
			}
			if got := ti.Elems(); got != tt.elems {
				t.Errorf("Elems() = %d, want %d", got, tt.elems)
			}
		})
	}
}

const (
	bpeVocab = "../tokenizer/testdata/ggml-vocab-llama-bpe.gguf"
	spmVocab = "../tokenizer/testdata/ggml-vocab-llama-spm.gguf"
)

func TestVocabFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path       string
		model, pre string
		tokens     int
		merges     int // -1: absent
		scores     int // -1: absent
		bos, eos   uint64
		kvs        int
		first      []string
		token      map[int]string
	}{
		{
			path: bpeVocab, model: "gpt2", pre: "llama-bpe", tokens: 128256, merges: 280147, scores: -1,
			bos: 128000, eos: 128001, kvs: 12,
			token: map[int]string{0: "!", 128000: "<|begin_of_text|>", 128001: "<|end_of_text|>"},
		},
		{
			path: spmVocab, model: "llama", pre: "default", tokens: 32000, merges: -1, scores: 32000,
			bos: 1, eos: 2, kvs: 22,
			token: map[int]string{0: "<unk>", 1: "<s>", 2: "</s>"},
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			t.Parallel()
			fd, err := os.Open(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			st, err := fd.Stat()
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(fd, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			if f.Version != 3 || len(f.Tensors) != 0 || len(f.KV) != tt.kvs || f.Alignment != 32 {
				t.Errorf("version %d, %d tensors, %d KVs, alignment %d", f.Version, len(f.Tensors), len(f.KV), f.Alignment)
			}
			if arch, _ := f.String("general.architecture"); arch != "llama" {
				t.Errorf("general.architecture = %q", arch)
			}
			if m, _ := f.String("tokenizer.ggml.model"); m != tt.model {
				t.Errorf("tokenizer.ggml.model = %q, want %q", m, tt.model)
			}
			if p, _ := f.String("tokenizer.ggml.pre"); p != tt.pre {
				t.Errorf("tokenizer.ggml.pre = %q, want %q", p, tt.pre)
			}
			toks, ok := f.Strings("tokenizer.ggml.tokens")
			if !ok || len(toks) != tt.tokens {
				t.Fatalf("tokenizer.ggml.tokens: %d tokens, ok %v; want %d", len(toks), ok, tt.tokens)
			}
			for id, want := range tt.token {
				if toks[id] != want {
					t.Errorf("token %d = %q, want %q", id, toks[id], want)
				}
			}
			if n, _ := f.Uint("llama.vocab_size"); n != uint64(tt.tokens) {
				t.Errorf("llama.vocab_size = %d, want %d", n, tt.tokens)
			}
			types, ok := f.Int32s("tokenizer.ggml.token_type")
			if !ok || len(types) != tt.tokens {
				t.Errorf("token_type: %d, ok %v", len(types), ok)
			}
			merges, ok := f.Strings("tokenizer.ggml.merges")
			if (tt.merges < 0) == ok || (ok && len(merges) != tt.merges) {
				t.Errorf("merges: %d, present %v; want %d", len(merges), ok, tt.merges)
			}
			if ok && merges[0] != "Ġ Ġ" {
				t.Errorf("first merge = %q", merges[0])
			}
			scores, ok := f.Float32s("tokenizer.ggml.scores")
			if (tt.scores < 0) == ok || (ok && len(scores) != tt.scores) {
				t.Errorf("scores: %d, present %v; want %d", len(scores), ok, tt.scores)
			}
			if bos, _ := f.Uint("tokenizer.ggml.bos_token_id"); bos != tt.bos {
				t.Errorf("bos = %d, want %d", bos, tt.bos)
			}
			if eos, _ := f.Uint("tokenizer.ggml.eos_token_id"); eos != tt.eos {
				t.Errorf("eos = %d, want %d", eos, tt.eos)
			}
			// A faithful rewrite of the metadata reproduces the file's header.
			w := NewWriter(f.Version)
			for _, kv := range f.KV {
				if err := w.AddKV(kv.Key, kv.Value); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			if _, err := w.WriteTo(&buf, nil); err != nil {
				t.Fatal(err)
			}
			orig := make([]byte, f.HeaderSize)
			if _, err := fd.ReadAt(orig, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes()[:f.HeaderSize], orig) {
				t.Error("rewritten header differs from the original")
			}
		})
	}
}

// small returns a small valid file with metadata of several types and
// three tensors.
func small(t testing.TB) []byte {
	w := NewWriter(3)
	for _, kv := range []KV{
		{"general.architecture", "llama"},
		{"llama.block_count", uint32(2)},
		{"tokenizer.ggml.tokens", []string{"a", "bc"}},
		{"tokenizer.ggml.scores", []float32{0.5, -1}},
		{"nested", Array{TypeArray, []Array{{TypeUint16, []uint16{3}}}}},
		{"flag", true},
	} {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range []struct {
		name string
		typ  quant.Type
		dims []uint64
	}{
		{"a", quant.F32, []uint64{3}},
		{"b", quant.Q8_0, []uint64{32, 2}},
		{"c", quant.F16, []uint64{5}},
	} {
		if err := w.AddTensor(tn.name, tn.typ, tn.dims); err != nil {
			t.Fatal(err)
		}
	}
	return writeFile(t, w)
}

func TestTruncatedPrefixes(t *testing.T) {
	t.Parallel()
	data := small(t)
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var dataEnd int64 // end of the last tensor's bytes
	for _, ti := range f.Tensors {
		dataEnd = max(dataEnd, f.DataOffset+int64(ti.Offset)+ti.Size)
	}
	for n := range len(data) {
		_, err := Open(bytes.NewReader(data[:n]), int64(n))
		if int64(n) >= dataEnd {
			// Only trailing padding is missing: still a valid file.
			if err != nil {
				t.Errorf("prefix %d (tensor data ends at %d): %v", n, dataEnd, err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("prefix %d of %d: error %v, want ErrTruncated", n, len(data), err)
		}
	}
	// A ReaderAt that holds fewer bytes than the size claims.
	_, err = Open(bytes.NewReader(data[:100]), int64(len(data)))
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("short ReaderAt: %v", err)
	}
}

func TestHostileInputs(t *testing.T) {
	t.Parallel()
	le := func(v uint32) []byte { return new(raw).u32(v).b }
	header := func(version uint32, nTensors, nKV uint64) []byte {
		return append([]byte(Magic), new(raw).u32(version).u64(nTensors).u64(nKV).b...)
	}
	good := tinfo("w", quant.F32, 0, 8) // 32 bytes of data
	arrayKV := func(et ValueType, n uint64, elems ...byte) []byte {
		return append(new(raw).str("arr").u32(uint32(TypeArray)).u32(uint32(et)).u64(n).b, elems...)
	}
	nested := func(depth int) []byte {
		r := new(raw).str("deep").u32(uint32(TypeArray))
		for range depth - 1 {
			r.u32(uint32(TypeArray)).u64(1)
		}
		return r.u32(uint32(TypeUint8)).u64(0).b
	}
	kvAlign := func(t ValueType, v []byte) []byte {
		return append(new(raw).str(AlignmentKey).u32(uint32(t)).b, v...)
	}
	tests := []struct {
		name string
		data []byte
		want string  // substring of the error
		is   []error // errors the error must wrap
	}{
		{"empty", nil, "header: need 24 bytes", []error{ErrTruncated}},
		{"bad magic", append([]byte("GGML"), header(3, 0, 0)[4:]...), `bad magic "GGML"`, []error{ErrInvalid}},
		{"byte-swapped magic", append([]byte("FUGG"), header(3, 0, 0)[4:]...), "big-endian", []error{ErrUnsupported}},
		{"version 1", header(1, 0, 0), "version 1 is not supported", []error{ErrUnsupported}},
		{"big-endian v3", append(append([]byte(Magic), 0, 0, 0, 3), header(3, 0, 0)[8:]...), "byte-swapped version 3", []error{ErrUnsupported}},
		{"version 4", header(4, 0, 0), "unknown version 4", []error{ErrUnsupported}},
		{"huge kv count", header(3, 0, 1<<62), "4611686018427387904 metadata keys, which cannot fit", []error{ErrTruncated}},
		{"huge tensor count", header(3, math.MaxUint64, 0), "18446744073709551615 tensors", []error{ErrTruncated}},
		{"counts fit separately, not together", append(header(3, 1, 1), make([]byte, 40)...), "cannot fit", []error{ErrTruncated}},
		{"huge key length", rawFile(32, [][]byte{new(raw).u64(1 << 63).u32(0).u8(0).b}, nil, 0),
			"metadata 0: key at offset 24: string length 9223372036854775808 at offset 24 exceeds", []error{ErrTruncated}},
		{"huge string value", rawFile(32, [][]byte{new(raw).str("k").u32(uint32(TypeString)).u64(1 << 40).b}, nil, 0),
			`metadata 0 "k": STRING value: string length 1099511627776`, []error{ErrTruncated}},
		{"huge array count", rawFile(32, [][]byte{arrayKV(TypeUint64, 1<<61)}, nil, 0),
			`"arr": array at offset 39 claims 2305843009213693952 UINT64 elements`, []error{ErrTruncated}},
		{"huge string array", rawFile(32, [][]byte{arrayKV(TypeString, 1<<40)}, nil, 0), "STRING elements, which cannot fit", []error{ErrTruncated}},
		{"huge array-of-arrays", rawFile(32, [][]byte{arrayKV(TypeArray, 1<<40)}, nil, 0), "ARRAY elements, which cannot fit", []error{ErrTruncated}},
		{"string in array past end", rawFile(1, [][]byte{append(arrayKV(TypeString, 1), new(raw).u64(5).b...)}, nil, 0),
			"element 0: string length 5", []error{ErrTruncated}},
		{"unknown value type", rawFile(32, [][]byte{new(raw).str("k").u32(13).u32(0).b}, nil, 0), `"k": unknown value type 13 at offset 33`, []error{ErrInvalid}},
		{"unknown array element type", rawFile(32, [][]byte{arrayKV(99, 0)}, nil, 0), "unknown element type 99", []error{ErrInvalid}},
		{"nesting at the limit", rawFile(32, [][]byte{nested(MaxArrayDepth), kvU32("x", 1)}, [][]byte{tinfo("t", quant.F32, 0, 1)}, 4), "", nil},
		{"nesting too deep", rawFile(32, [][]byte{nested(MaxArrayDepth + 1)}, nil, 0), "nests arrays deeper than 4 levels", []error{ErrInvalid}},
		{"bad bool", rawFile(32, [][]byte{new(raw).str("b").u32(uint32(TypeBool)).u8(2).b}, nil, 0), `"b": BOOL value 2 at offset 37 is neither 0 nor 1`, []error{ErrInvalid}},
		{"bad bool in array", rawFile(32, [][]byte{arrayKV(TypeBool, 3, 1, 0, 7)}, nil, 0), "element 2 at offset 53 has invalid value 7", []error{ErrInvalid}},
		{"duplicate key", rawFile(32, [][]byte{kvU32("a", 1), kvStr("b", "x"), kvU32("a", 2)}, nil, 0), `duplicate metadata key "a" (entries 0 and 2)`, []error{ErrInvalid}},
		{"alignment 0", rawFile(32, [][]byte{kvU32(AlignmentKey, 0)}, nil, 0), "general.alignment is 0", []error{ErrInvalid}},
		{"alignment 48", rawFile(32, [][]byte{kvU32(AlignmentKey, 48)}, nil, 0), "general.alignment is 48, want a nonzero power of two", []error{ErrInvalid}},
		{"alignment 2^32", rawFile(32, [][]byte{kvAlign(TypeUint64, new(raw).u64(1<<32).b)}, nil, 0), "is 4294967296", []error{ErrInvalid}},
		{"alignment negative", rawFile(32, [][]byte{kvAlign(TypeInt32, le(0xffffffe0))}, nil, 0), "general.alignment is negative (-32)", []error{ErrInvalid}},
		{"alignment string", rawFile(32, [][]byte{kvStr(AlignmentKey, "32")}, nil, 0), "general.alignment has type STRING", []error{ErrInvalid}},
		{"alignment as uint8 64", rawFile(64, [][]byte{kvAlign(TypeUint8, []byte{64})}, [][]byte{tinfo("t", quant.F32, 64, 1)}, 128), "", nil},
		{"n_dims 0", rawFile(32, nil, [][]byte{tinfo("w0", quant.F32, 0)}, 0), `tensor 0 "w0": 0 dimensions at offset 34`, []error{ErrInvalid}},
		{"n_dims 5", rawFile(32, nil, [][]byte{tinfo("w5", quant.F32, 0, 1, 1, 1, 1, 1)}, 32), `tensor 0 "w5": 5 dimensions`, []error{ErrInvalid}},
		{"unknown tensor type", rawFile(32, nil, [][]byte{good, tinfo("q41", 3, 32, 32)}, 64), `tensor 1 "q41": unknown tensor type id 3`, []error{ErrInvalid}},
		{"dims overflow", rawFile(32, nil, [][]byte{tinfo("big", quant.F32, 0, 1<<40, 1<<40)}, 32), `tensor 0 "big": dims [1099511627776 1099511627776]: tensor size overflows`, []error{ErrInvalid}},
		{"dim beyond int64", rawFile(32, nil, [][]byte{tinfo("neg", quant.F32, 0, 1<<63)}, 32), `tensor 0 "neg"`, []error{ErrInvalid}},
		{"row not whole blocks", rawFile(32, nil, [][]byte{tinfo("qk", quant.Q4_K, 0, 100)}, 256), "not a multiple of the block size", []error{ErrInvalid}},
		{"misaligned offset", rawFile(32, nil, [][]byte{good, tinfo("m", quant.F32, 48, 4)}, 96), `tensor 1 "m": offset 48 is not a multiple of the alignment 32`, []error{ErrInvalid}},
		{"data past end", rawFile(32, nil, [][]byte{good, tinfo("late", quant.F32, 32, 9)}, 64), `tensor 1 "late": data at offset 96+32 (36 bytes) runs past the end of the file (160 bytes)`, []error{ErrTruncated}},
		{"offset beyond file", rawFile(32, nil, [][]byte{tinfo("far", quant.F32, 1<<63, 1)}, 32), `"far": data at offset 64+9223372036854775808`, []error{ErrTruncated}},
		{"overlap", rawFile(32, nil, [][]byte{good, tinfo("y", quant.F32, 64, 8), tinfo("x", quant.F32, 32, 16)}, 128), `tensors "x" (offset 32, 64 bytes) and "y" (offset 64) overlap`, []error{ErrInvalid}},
		{"same offset", rawFile(32, nil, [][]byte{good, tinfo("y", quant.F32, 0, 8)}, 32), "overlap", []error{ErrInvalid}},
		{"zero-size tensors share an offset", rawFile(32, nil, [][]byte{tinfo("z1", quant.F32, 0, 0), good, tinfo("z2", quant.F32, 32, 4, 0)}, 32), "", nil},
		{"duplicate tensor", rawFile(32, nil, [][]byte{good, tinfo("w", quant.F32, 32, 8)}, 64), `duplicate tensor name "w" (tensors 0 and 1)`, []error{ErrInvalid}},
		{"tensor name past end", rawFile(1, nil, [][]byte{new(raw).u64(1 << 50).b[:8]}, 24), "tensor 0: name at offset 24: string length", []error{ErrTruncated}},
		{"truncated dims", append(header(3, 1, 0), new(raw).str("t").u32(2).u64(1).b...), "", []error{ErrTruncated}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Open(bytes.NewReader(tt.data), int64(len(tt.data)))
			if tt.want == "" && tt.is == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if f == nil {
					t.Fatal("nil File")
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not wrap %q", err, target)
				}
			}
			if f != nil {
				t.Error("File returned with an error")
			}
		})
	}
}

// Sequential: allocBytes reads process-wide MemStats.
func TestOpenAllocationBounded(t *testing.T) {
	// Hostile headers claim enormous counts and lengths. Open must fail
	// without allocating for the claims: a few KiB of error text and the
	// read buffer (min(size, 64 KiB)) are all it may use.
	const mib = 1 << 20
	pad := make([]byte, mib) // a 1 MiB file makes the claims look plausible
	big := func(b []byte) []byte { return append(b, pad...) }
	header := func(nTensors, nKV uint64) []byte {
		return append([]byte(Magic), new(raw).u32(3).u64(nTensors).u64(nKV).b...)
	}
	// repeat fills about 1 MiB with copies of rec: records larger than the
	// minimum encoding, so counts pass the up-front check and the file runs
	// out only at the end of the scan.
	recs := func(rec []byte) int { return mib / len(rec) }
	repeat := func(b, rec []byte) []byte {
		for range recs(rec) {
			b = append(b, rec...)
		}
		return b
	}
	// most is the largest count of minSize-byte items that the bytes of
	// repeat(rec) could hold: the most the up-front check lets through.
	most := func(rec []byte, minSize int) uint64 { return uint64(recs(rec) * len(rec) / minSize) }
	kvRec := new(raw).u64(0).u32(uint32(TypeString)).u64(0).b
	tiRec := tinfo("", quant.F32, 0, 0, 0)
	strRec := new(raw).str("x").b
	arrRec := new(raw).u32(uint32(TypeUint8)).u64(1).u8(0).b
	arr := func(et ValueType, n uint64) []byte {
		return new(raw).str("a").u32(uint32(TypeArray)).u32(uint32(et)).u64(n).b
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"kv count 2^62", big(header(0, 1<<62))},
		{"tensor count 2^62", big(header(1<<62, 0))},
		{"kv count passes, records run out", repeat(header(0, most(kvRec, minKVSize)), kvRec)},
		{"tensor count passes, infos run out", repeat(header(most(tiRec, minTensorLen), 0), tiRec)},
		{"array of 2^60 uint64", big(rawFile(32, [][]byte{arr(TypeUint64, 1<<60)}, nil, 0))},
		{"string array runs out", repeat(append(header(0, 1), arr(TypeString, most(strRec, 8))...), strRec)},
		{"string of 2^50 bytes", big(rawFile(32, [][]byte{new(raw).str("a").u32(uint32(TypeString)).u64(1 << 50).b}, nil, 0))},
		{"nested arrays run out", repeat(append(header(0, 1), arr(TypeArray, most(arrRec, 12))...), arrRec)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			got := allocBytes(func() { _, err = Open(bytes.NewReader(tt.data), int64(len(tt.data))) })
			if err == nil {
				t.Fatal("hostile input opened")
			}
			const limit = readBufSize + 16<<10
			if got > limit {
				t.Errorf("Open allocated %d bytes for a %d-byte file (limit %d): %v", got, len(tt.data), limit, err)
			}
			t.Logf("%d bytes allocated: %v", got, err)
		})
	}
}

// TestOpenAllocationProportional checks valid headers built from the
// constructs that cost the most memory per encoded byte.
// Sequential: allocBytes reads process-wide MemStats.
func TestOpenAllocationProportional(t *testing.T) {
	emptyArrays := make([]Array, 50000)
	for i := range emptyArrays {
		emptyArrays[i] = Array{TypeUint8, []uint8{}}
	}
	oneByteArrays := make([]Array, 50000)
	for i := range oneByteArrays {
		oneByteArrays[i] = Array{TypeUint8, []uint8{1}}
	}
	tests := []struct {
		name  string
		build func(w *Writer) error
	}{
		{"many tiny KVs", func(w *Writer) error {
			for i := range 50000 {
				if err := w.AddKV(fmt.Sprint(i), uint8(i)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"many uint16 KVs", func(w *Writer) error {
			for i := range 50000 {
				if err := w.AddKV(fmt.Sprint(i), uint16(i)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"empty strings", func(w *Writer) error { return w.AddKV("s", make([]string, 100000)) }},
		{"empty nested arrays", func(w *Writer) error { return w.AddKV("a", emptyArrays) }},
		{"one-byte nested arrays", func(w *Writer) error { return w.AddKV("a", oneByteArrays) }},
		{"many tensors", func(w *Writer) error {
			for i := range 30000 {
				if err := w.AddTensor(fmt.Sprint(i), quant.F32, []uint64{0}); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter(3)
			if err := tt.build(w); err != nil {
				t.Fatal(err)
			}
			data := writeFile(t, w)
			var err error
			got := allocBytes(func() { _, err = Open(bytes.NewReader(data), int64(len(data))) })
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(got) / float64(len(data))
			t.Logf("%d bytes allocated for a %d-byte file (%.2f×)", got, len(data), ratio)
			if limit := uint64(fuzzAllocFactor*len(data) + fuzzAllocSlack); got > limit {
				t.Errorf("allocated %d bytes, limit %d", got, limit)
			}
		})
	}
}

func TestWriterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		do   func(w *Writer) error
		want string
	}{
		{"version 1", func(*Writer) error { return NewWriter(1).AddKV("a", "b") }, "cannot write version 1"},
		{"version 4 WriteTo", func(*Writer) error { _, err := NewWriter(4).WriteTo(io.Discard, nil); return err }, "version 4"},
		{"duplicate key", func(w *Writer) error { w.AddKV("k", "a"); return w.AddKV("k", "b") }, `duplicate metadata key "k"`},
		{"int value", func(w *Writer) error { return w.AddKV("k", 5) }, `metadata "k": unsupported Go type int`},
		{"nil value", func(w *Writer) error { return w.AddKV("k", nil) }, "unsupported Go type <nil>"},
		{"array type mismatch", func(w *Writer) error { return w.AddKV("k", Array{TypeInt32, []uint32{1}}) }, "array Type is INT32 but Values is []uint32"},
		{"array bad type", func(w *Writer) error { return w.AddKV("k", Array{20, nil}) }, "invalid element type ValueType(20)"},
		{"array bad values", func(w *Writer) error { return w.AddKV("k", Array{TypeInt32, []int{1}}) }, "unsupported Go type []int"},
		{"nested mismatch", func(w *Writer) error {
			return w.AddKV("k", Array{TypeArray, []Array{{TypeString, []string{}}, {TypeUint8, []int8{1}}}})
		}, "element 1: array Type is UINT8"},
		{"nested too deep", func(w *Writer) error {
			a := Array{TypeUint8, []uint8{}}
			for range MaxArrayDepth {
				a = Array{TypeArray, []Array{a}}
			}
			return w.AddKV("k", a)
		}, "deeper than 4 levels"},
		{"alignment 0", func(w *Writer) error { return w.SetAlignment(0) }, "alignment 0 is not"},
		{"alignment 24", func(w *Writer) error { return w.SetAlignment(24) }, "alignment 24 is not"},
		{"alignment KV string", func(w *Writer) error { return w.AddKV(AlignmentKey, "64") }, "must be a non-negative integer"},
		{"alignment KV 3", func(w *Writer) error { return w.AddKV(AlignmentKey, uint32(3)) }, "alignment 3 is not"},
		{"duplicate tensor", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{1})
			return w.AddTensor("t", quant.F32, []uint64{1})
		}, `duplicate tensor name "t"`},
		{"no dims", func(w *Writer) error { return w.AddTensor("t", quant.F32, nil) }, `tensor "t" has 0 dimensions`},
		{"5 dims", func(w *Writer) error { return w.AddTensor("t", quant.F32, []uint64{1, 1, 1, 1, 1}) }, "5 dimensions"},
		{"unknown type", func(w *Writer) error { return w.AddTensor("t", 3, []uint64{32}) }, "unknown tensor type id 3"},
		{"partial block", func(w *Writer) error { return w.AddTensor("t", quant.Q8_0, []uint64{33}) }, "not a multiple of the block size"},
		{"data too short", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{4})
			_, err := w.WriteTo(io.Discard, func(int, TensorInfo, io.Writer) error { return nil })
			return err
		}, `tensor "t": data wrote 0 of its 16 bytes`},
		{"data too long", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{4})
			_, err := w.WriteTo(io.Discard, func(_ int, _ TensorInfo, dst io.Writer) error {
				dst.Write(make([]byte, 17)) // error deliberately ignored
				return nil
			})
			return err
		}, "data wrote more than its 16 bytes"},
		{"data too long via io.Copy", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{4})
			_, err := w.WriteTo(io.Discard, func(_ int, _ TensorInfo, dst io.Writer) error {
				_, err := io.Copy(dst, bytes.NewReader(make([]byte, 20)))
				return err
			})
			return err
		}, "write exceeds the tensor's size"},
		{"data error", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{4})
			_, err := w.WriteTo(io.Discard, func(int, TensorInfo, io.Writer) error { return errors.New("disk on fire") })
			return err
		}, `writing tensor "t": disk on fire`},
		{"no data func", func(w *Writer) error {
			w.AddTensor("t", quant.F32, []uint64{4})
			_, err := w.WriteTo(io.Discard, nil)
			return err
		}, "no data function"},
		{"output error", func(w *Writer) error {
			w.AddKV("k", "v")
			_, err := w.WriteTo(failWriter{}, nil)
			return err
		}, "writing data: out of space"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.do(NewWriter(3))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("out of space") }

func TestWriterAlignmentKV(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		setup     func(w *Writer) error
		wantAlign uint64
		wantKV    any // nil: absent
	}{
		{"default", func(*Writer) error { return nil }, 32, nil},
		{"SetAlignment 64", func(w *Writer) error { return w.SetAlignment(64) }, 64, uint32(64)},
		{"SetAlignment 32 writes nothing", func(w *Writer) error { return w.SetAlignment(32) }, 32, nil},
		{"AddKV uint64 keeps its type", func(w *Writer) error { return w.AddKV(AlignmentKey, uint64(128)) }, 128, uint64(128)},
		{"AddKV then SetAlignment", func(w *Writer) error {
			if err := w.AddKV(AlignmentKey, uint64(128)); err != nil {
				return err
			}
			return w.SetAlignment(16)
		}, 16, uint32(16)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := NewWriter(3)
			if err := tt.setup(w); err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensor("t", quant.F32, []uint64{3}); err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensor("u", quant.F32, []uint64{3}); err != nil {
				t.Fatal(err)
			}
			data := writeFile(t, w)
			f, err := Open(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if f.Alignment != tt.wantAlign || f.Tensors[1].Offset != tt.wantAlign || f.DataOffset%int64(tt.wantAlign) != 0 {
				t.Errorf("alignment %d, second tensor at %d, data at %d; want alignment %d", f.Alignment, f.Tensors[1].Offset, f.DataOffset, tt.wantAlign)
			}
			v, _ := f.Lookup(AlignmentKey)
			if !reflect.DeepEqual(v, tt.wantKV) {
				t.Errorf("%s = %#v, want %#v", AlignmentKey, v, tt.wantKV)
			}
		})
	}
}

func TestWriterCopyPath(t *testing.T) {
	t.Parallel()
	// io.Copy from a file takes tensorWriter.ReadFrom; the bytes must land
	// exactly as with Write.
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	payload := pattern(5, 3*1<<20+4)
	if err := os.WriteFile(src, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(3)
	if err := w.AddTensor("big", quant.F32, []uint64{uint64(len(payload) / 4)}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("small", quant.F32, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "out.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.WriteTo(out, func(i int, ti TensorInfo, dst io.Writer) error {
		if i == 1 {
			_, err := dst.Write([]byte{1, 2, 3, 4})
			return err
		}
		fd, err := os.Open(src)
		if err != nil {
			return err
		}
		defer fd.Close()
		_, err = io.Copy(dst, fd)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := Map(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !bytes.Equal(m.Data(&m.Tensors[0]), payload) || !bytes.Equal(m.Data(&m.Tensors[1]), []byte{1, 2, 3, 4}) {
		t.Error("tensor bytes differ")
	}
}

func TestMapRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := small(t)
	path := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) != 3 {
		t.Fatalf("%d tensors", len(m.Tensors))
	}
	for i := range m.Tensors {
		ti := &m.Tensors[i]
		got := m.Data(ti)
		if !bytes.Equal(got, pattern(i, ti.Size)) {
			t.Errorf("tensor %q: mapped bytes differ", ti.Name)
		}
		if cap(got) != len(got) {
			t.Errorf("tensor %q: Data has spare capacity %d", ti.Name, cap(got)-len(got))
		}
		viaReader, err := m.ReadTensor(ti.Name)
		if err != nil || !bytes.Equal(viaReader, got) {
			t.Errorf("ReadTensor(%q) = %v, %v", ti.Name, viaReader, err)
		}
	}
	if m.Data(&TensorInfo{Offset: 1 << 40, Size: 1}) != nil {
		t.Error("Data of an out-of-range tensor is not nil")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if m.Data(&m.Tensors[0]) != nil {
		t.Error("Data after Close is not nil")
	}
	if _, err := m.ReadTensor("a"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("ReadTensor after Close: %v", err)
	}
}

func TestMapBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := small(t)
	bad[4] = 1 // version 1
	tests := []struct {
		name string
		data []byte // nil: do not create the file
		want string
	}{
		{"missing", nil, "no such file"},
		{"empty", []byte{}, "header: need 24 bytes at offset 0, only 0 left"},
		{"tiny", []byte("GGUF"), "only 4 left"},
		{"exactly a header", append([]byte(Magic), new(raw).u32(3).u64(0).u64(0).b...), ""},
		{"version 1", bad, "version 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if tt.data != nil {
				if err := os.WriteFile(path, tt.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := Map(path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Map error %v, want %q", err, tt.want)
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	data, err := os.ReadFile(bpeVocab)
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Open(r, int64(len(data))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMapBPE(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		m, err := Map(bpeVocab)
		if err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}

func BenchmarkWriteTo(b *testing.B) {
	const n = 64 << 20
	w := NewWriter(3)
	if err := w.AddTensor("t", quant.F32, []uint64{n / 4}); err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	b.SetBytes(n)
	for b.Loop() {
		_, err := w.WriteTo(io.Discard, func(_ int, ti TensorInfo, dst io.Writer) error {
			for left := ti.Size; left > 0; left -= int64(len(chunk)) {
				if _, err := dst.Write(chunk); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// virtualFile is a ReaderAt of any claimed size: head, then zeros.
type virtualFile struct{ head []byte }

func (v virtualFile) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(v.head)) {
		copy(p, v.head[off:])
	}
	return len(p), nil
}

// Sequential: allocBytes reads process-wide MemStats.
func TestHugeVirtualFiles(t *testing.T) {
	// Files too large to build for real: the size is claimed, the bytes
	// past the header read as zeros.
	header := func(nTensors, nKV uint64) []byte {
		return append([]byte(Magic), new(raw).u32(3).u64(nTensors).u64(nKV).b...)
	}
	tests := []struct {
		name string
		head []byte
		size int64
		want string
	}{
		{"2^31 keys", header(0, 1<<31), 1 << 40, "at most 2147483647 of each are supported"},
		{"2^31 tensors", header(1<<31, 0), 1 << 40, "at most 2147483647 of each are supported"},
		// The scan skips the 1 TiB string without reading or allocating it,
		// then finds the zeroed tensor info invalid.
		{"string of 2^40 bytes", append(header(1, 1), new(raw).str("k").u32(uint32(TypeString)).u64(1<<40).b...), 1 << 41, `tensor 0 "": 0 dimensions at offset 1099511627829`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			got := allocBytes(func() { _, err = Open(virtualFile{tt.head}, tt.size) })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if got > readBufSize+16<<10 {
				t.Errorf("allocated %d bytes", got)
			}
		})
	}
}
