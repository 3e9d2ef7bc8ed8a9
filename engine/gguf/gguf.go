package gguf

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/strata-llm/strata/engine/quant"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// DefaultAlignment is the data alignment used when general.alignment is
// absent.
const DefaultAlignment = 32

// AlignmentKey is the metadata key that overrides DefaultAlignment.
const AlignmentKey = "general.alignment"

// MaxDims is the most dimensions a GGUF tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// MaxArrayDepth bounds how deeply arrays may nest (an array of arrays has
// depth 2). The spec allows nesting; ggml itself reads none, so a small limit
// loses nothing real and keeps the reader's recursion shallow.
const MaxArrayDepth = 4

// maxAlignment is the largest accepted alignment: the spec stores it as a
// uint32, and the largest power of two a uint32 holds is 2^31.
const maxAlignment = 1 << 31

// Errors that Open's errors wrap, for errors.Is. The message around them
// names what is wrong and where.
var (
	// ErrTruncated: the file ends before a value, string, count or tensor
	// that the header announces.
	ErrTruncated = errors.New("file truncated")
	// ErrInvalid: the bytes are present but break a GGUF rule (bad type id,
	// misaligned or overlapping tensor, duplicate key, ...).
	ErrInvalid = errors.New("invalid gguf")
	// ErrUnsupported: a well-formed file this package does not read
	// (version 1, big-endian).
	ErrUnsupported = errors.New("unsupported gguf")
)

// ValueType is the type tag of a metadata value (gguf_type).
type ValueType uint32

// The metadata value types, numbered as in the GGUF spec.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32",
	"FLOAT32", "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"}

// String returns the spec's name for t, such as "UINT32".
func (t ValueType) String() string {
	if t.Valid() {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// Valid reports whether t is one of the thirteen GGUF value types.
func (t ValueType) Valid() bool { return t <= TypeFloat64 }

// fixedSize is the encoded size of a scalar of type t, or 0 for strings and
// arrays (and invalid types).
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of type t occupies (a string
// is at least its 8-byte length, an array its 4-byte type and 8-byte count).
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.fixedSize()
}

// Array is a metadata array value. Values holds a typed slice matching Type:
// []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool,
// []string, []uint64, []int64, []float64, or []Array for nested arrays
// (each element carries its own element type).
type Array struct {
	Type   ValueType
	Values any
}

// Len returns the number of elements, or 0 when Values is not a slice of a
// supported type.
func (a Array) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	case []Array:
		return len(v)
	}
	return 0
}

// KV is one metadata entry. Value is one of uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool, string or Array.
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name string
	// Dims are in ggml order: Dims[0] is the row length (fastest varying).
	Dims []uint64
	Type quant.Type
	// Offset is relative to the start of the data section
	// (File.DataOffset); it is a multiple of the file's alignment.
	Offset uint64
	// Size is the tensor's byte size, from Type and Dims.
	Size int64

	part int // which file of a split model holds the data (0: the first)
}

// Shape returns the dimensions in PyTorch order (slowest varying first),
// the reverse of Dims.
func (ti *TensorInfo) Shape() []uint64 {
	s := make([]uint64, len(ti.Dims))
	for i, d := range ti.Dims {
		s[len(s)-1-i] = d
	}
	return s
}

// Elems returns the number of elements. The caller must not use it on a
// TensorInfo whose size Open or the Writer has not validated (the product
// could overflow).
func (ti *TensorInfo) Elems() int64 {
	n := int64(1)
	for _, d := range ti.Dims {
		n *= int64(d)
	}
	return n
}

// File is a parsed GGUF header. Its slices and strings must be treated as
// read-only: getters return them without copying.
type File struct {
	// Version is the GGUF version (2 or 3).
	Version uint32
	// Alignment is general.alignment, or DefaultAlignment when absent.
	Alignment uint64
	// KV holds the metadata in file order.
	KV []KV
	// Tensors holds the tensor infos in file order.
	Tensors []TensorInfo
	// DataOffset is the absolute file offset of the data section.
	DataOffset int64
	// Size is the file's size in bytes.
	Size int64
	// HeaderSize is the byte length of the header before the alignment
	// padding that precedes the data section.
	HeaderSize int64

	r        io.ReaderAt
	kvIndex  []int32 // indexes into KV sorted by key
	tenIndex []int32 // indexes into Tensors sorted by name
	// parts are the headers of a split model's further files, whose
	// readers and data offsets hold their tensors (parts[0] is nil: the
	// first file is this one).
	parts []*File
}

// Lookup returns the value stored under key.
func (f *File) Lookup(key string) (any, bool) {
	i, ok := slices.BinarySearchFunc(f.kvIndex, key, func(j int32, k string) int {
		return strings.Compare(f.KV[j].Key, k)
	})
	if !ok {
		return nil, false
	}
	return f.KV[f.kvIndex[i]].Value, true
}

// String returns a STRING value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Lookup(key)
	s, ok := v.(string)
	return s, ok
}

// Uint returns an integer value of any integer type, if it is not negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Lookup(key)
	return asUint(v)
}

// Int returns an integer value of any integer type, if it fits an int64.
func (f *File) Int(key string) (int64, bool) {
	v, _ := f.Lookup(key)
	return asInt(v)
}

// Float returns a FLOAT32 or FLOAT64 value, or an integer value converted to
// float64.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Lookup(key)
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := asInt(v); ok {
		return float64(i), true
	}
	if u, ok := asUint(v); ok {
		return float64(u), true
	}
	return 0, false
}

// Bool returns a BOOL value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Lookup(key)
	b, ok := v.(bool)
	return b, ok
}

// Strings returns an array of STRING.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Lookup(key)
	a, ok := v.(Array)
	if !ok {
		return nil, false
	}
	s, ok := a.Values.([]string)
	return s, ok
}

// Float32s returns an array of FLOAT32.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Lookup(key)
	a, ok := v.(Array)
	if !ok {
		return nil, false
	}
	s, ok := a.Values.([]float32)
	return s, ok
}

// Int32s returns an integer array as []int32. An INT32 array is returned
// as stored; arrays of other integer types are converted when every element
// fits an int32.
func (f *File) Int32s(key string) ([]int32, bool) {
	v, _ := f.Lookup(key)
	a, ok := v.(Array)
	if !ok {
		return nil, false
	}
	switch s := a.Values.(type) {
	case []int32:
		return s, true
	case []uint8:
		return convInts(s)
	case []int8:
		return convInts(s)
	case []uint16:
		return convInts(s)
	case []int16:
		return convInts(s)
	case []uint32:
		return convInts(s)
	case []uint64:
		return convInts(s)
	case []int64:
		return convInts(s)
	}
	return nil, false
}

type integer interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~uint64 | ~int64
}

func convInts[T integer](s []T) ([]int32, bool) {
	out := make([]int32, len(s))
	for i, x := range s {
		y := int32(x)
		if T(y) != x || (y < 0) != (x < 0) {
			return nil, false
		}
		out[i] = y
	}
	return out, true
}

func asUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= 1<<63-1
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := slices.BinarySearchFunc(f.tenIndex, name, func(j int32, n string) int {
		return strings.Compare(f.Tensors[j].Name, n)
	})
	if !ok {
		return nil, false
	}
	return &f.Tensors[f.tenIndex[i]], true
}

// TensorReader returns a reader over the named tensor's bytes.
func (f *File) TensorReader(name string) (*io.SectionReader, error) {
	ti, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: no tensor %q", name)
	}
	if ti.part > 0 {
		p := f.parts[ti.part]
		return io.NewSectionReader(p.r, p.DataOffset+int64(ti.Offset), ti.Size), nil
	}
	return io.NewSectionReader(f.r, f.DataOffset+int64(ti.Offset), ti.Size), nil
}

// ReadTensor reads the named tensor's bytes into a new slice.
func (f *File) ReadTensor(name string) ([]byte, error) {
	sr, err := f.TensorReader(name)
	if err != nil {
		return nil, err
	}
	b := make([]byte, sr.Size())
	if _, err := io.ReadFull(sr, b); err != nil {
		return nil, fmt.Errorf("gguf: reading tensor %q: %w", name, err)
	}
	return b, nil
}
