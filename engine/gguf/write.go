package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

// writeBufSize is the Writer's output buffer: large enough that writes
// reach the disk in big sequential chunks.
const writeBufSize = 4 << 20

// Writer builds a GGUF file: add metadata and tensor infos, then WriteTo
// streams the header followed by each tensor's bytes, which a callback
// produces on demand so that a model never has to fit in memory.
type Writer struct {
	version   uint32
	alignment uint64
	kv        []KV
	keys      map[string]int
	tensors   []TensorInfo
	names     map[string]struct{}
	err       error
}

// NewWriter returns a Writer for GGUF version 2 or 3. Any other version
// makes every later call fail.
func NewWriter(version uint32) *Writer {
	w := &Writer{
		version:   version,
		alignment: DefaultAlignment,
		keys:      make(map[string]int),
		names:     make(map[string]struct{}),
	}
	if version != 2 && version != 3 {
		w.err = fmt.Errorf("gguf: cannot write version %d (only 2 and 3)", version)
	}
	return w
}

func checkAlignment(n uint64) error {
	if n == 0 || n&(n-1) != 0 || n > maxAlignment {
		return fmt.Errorf("gguf: alignment %d is not a nonzero power of two no larger than 2^31", n)
	}
	return nil
}

// SetAlignment sets the data alignment (default 32). A non-default
// alignment is recorded as general.alignment (UINT32) automatically; if the
// key was added with AddKV its value is replaced by uint32(n).
func (w *Writer) SetAlignment(n uint64) error {
	if w.err != nil {
		return w.err
	}
	if err := checkAlignment(n); err != nil {
		return err
	}
	w.alignment = n
	if i, ok := w.keys[AlignmentKey]; ok {
		w.kv[i].Value = uint32(n)
	}
	return nil
}

// AddKV appends a metadata entry. value must be one of the Go types KV
// documents; a plain slice of a supported element type ([]string,
// []float32, []int32, ...) is accepted and stored as an Array. Adding
// general.alignment also sets the alignment, as SetAlignment would. Keys
// must be unique.
func (w *Writer) AddKV(key string, value any) error {
	if w.err != nil {
		return w.err
	}
	if _, dup := w.keys[key]; dup {
		return fmt.Errorf("gguf: duplicate metadata key %q", key)
	}
	if t, ok := sliceType(value); ok {
		value = Array{Type: t, Values: value}
	}
	if _, err := valueType(value); err != nil {
		return fmt.Errorf("gguf: metadata %q: %w", key, err)
	}
	if key == AlignmentKey {
		a, ok := asUint(value)
		if !ok {
			return fmt.Errorf("gguf: %s must be a non-negative integer, got %T", key, value)
		}
		if err := checkAlignment(a); err != nil {
			return err
		}
		w.alignment = a
	}
	w.keys[key] = len(w.kv)
	w.kv = append(w.kv, KV{Key: key, Value: value})
	return nil
}

// AddTensor appends a tensor info with ggml-order dims (dims[0] is the row
// length). Its size comes from quant's TensorBytes; names must be unique.
func (w *Writer) AddTensor(name string, typ quant.Type, dims []uint64) error {
	if w.err != nil {
		return w.err
	}
	if _, dup := w.names[name]; dup {
		return fmt.Errorf("gguf: duplicate tensor name %q", name)
	}
	if len(dims) == 0 || len(dims) > MaxDims {
		return fmt.Errorf("gguf: tensor %q has %d dimensions (must be 1 to %d)", name, len(dims), MaxDims)
	}
	if !typ.Known() {
		return fmt.Errorf("gguf: tensor %q: unknown tensor type id %d", name, uint32(typ))
	}
	size, err := typ.TensorBytes(dims)
	if err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	w.names[name] = struct{}{}
	w.tensors = append(w.tensors, TensorInfo{Name: name, Dims: slices.Clone(dims), Type: typ, Size: size})
	return nil
}

// Tensors returns the tensor infos with the offsets WriteTo will use under
// the current alignment.
func (w *Writer) Tensors() ([]TensorInfo, error) {
	if w.err != nil {
		return nil, w.err
	}
	out := slices.Clone(w.tensors)
	var off uint64
	for i := range out {
		off = hostmem.AlignUp(off, w.alignment)
		out[i].Offset = off
		off += uint64(out[i].Size)
		if off > math.MaxInt64/2 {
			return nil, fmt.Errorf("gguf: data section exceeds 2^62 bytes at tensor %q", out[i].Name)
		}
	}
	return out, nil
}

// WriteTo writes the file to out: the header, padding to the alignment,
// then each tensor's bytes at its aligned offset, zero padding between
// tensors and after the last. For tensor i it calls data, which must write
// exactly ti.Size bytes to dst (data may be nil when every tensor is
// empty). It returns the bytes written.
func (w *Writer) WriteTo(out io.Writer, data func(i int, ti TensorInfo, dst io.Writer) error) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	tensors, err := w.Tensors()
	if err != nil {
		return 0, err
	}
	kvs := w.kv
	if _, ok := w.keys[AlignmentKey]; !ok && w.alignment != DefaultAlignment {
		kvs = append(slices.Clip(kvs), KV{Key: AlignmentKey, Value: uint32(w.alignment)})
	}
	bw := bufio.NewWriterSize(out, writeBufSize)
	e := &encoder{w: bw}
	e.write([]byte(Magic))
	e.u32(w.version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		t, _ := valueType(kv.Value) // validated by AddKV
		e.str(kv.Key)
		e.u32(uint32(t))
		e.value(kv.Value)
	}
	for _, ti := range tensors {
		e.str(ti.Name)
		e.u32(uint32(len(ti.Dims)))
		for _, d := range ti.Dims {
			e.u64(d)
		}
		e.u32(uint32(ti.Type))
		e.u64(ti.Offset)
	}
	e.zeros(int64(hostmem.AlignUp(uint64(e.n), w.alignment)) - e.n)
	if e.err != nil {
		return e.n, fmt.Errorf("gguf: writing header: %w", e.err)
	}
	start := e.n
	for i, ti := range tensors {
		e.zeros(start + int64(ti.Offset) - e.n)
		if e.err != nil {
			return e.n, fmt.Errorf("gguf: padding before tensor %q: %w", ti.Name, e.err)
		}
		if ti.Size == 0 {
			continue
		}
		if data == nil {
			return e.n, fmt.Errorf("gguf: tensor %q has %d bytes but no data function was given", ti.Name, ti.Size)
		}
		tw := &tensorWriter{w: bw, left: ti.Size}
		err := data(i, ti, tw)
		e.n += ti.Size - tw.left
		switch {
		case err != nil:
			return e.n, fmt.Errorf("gguf: writing tensor %q: %w", ti.Name, err)
		case tw.over:
			return e.n, fmt.Errorf("gguf: tensor %q: data wrote more than its %d bytes", ti.Name, ti.Size)
		case tw.left != 0:
			return e.n, fmt.Errorf("gguf: tensor %q: data wrote %d of its %d bytes", ti.Name, ti.Size-tw.left, ti.Size)
		}
	}
	e.zeros(int64(hostmem.AlignUp(uint64(e.n-start), w.alignment)) - (e.n - start))
	if e.err == nil {
		e.err = bw.Flush()
	}
	if e.err != nil {
		return e.n, fmt.Errorf("gguf: writing data: %w", e.err)
	}
	return e.n, nil
}

// tensorWriter passes exactly one tensor's bytes to the output and refuses
// any beyond its size.
type tensorWriter struct {
	w    *bufio.Writer
	left int64
	over bool
}

var errTooMuch = errors.New("write exceeds the tensor's size")

func (t *tensorWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > t.left {
		t.over = true
		return 0, errTooMuch
	}
	n, err := t.w.Write(p)
	t.left -= int64(n)
	return n, err
}

// ReadFrom lets io.Copy hand the source to bufio (and from there to the
// destination's own ReadFrom, such as copy_file_range between files).
func (t *tensorWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := t.w.ReadFrom(io.LimitReader(r, t.left))
	t.left -= n
	if err != nil || t.left > 0 {
		return n, err
	}
	var b [1]byte
	if m, _ := io.ReadFull(r, b[:]); m > 0 {
		t.over = true
		return n, errTooMuch
	}
	return n, nil
}

// encoder writes little-endian GGUF encodings, keeping the first error.
type encoder struct {
	w   *bufio.Writer
	n   int64
	err error
	b   [8]byte
}

var zeroBlock [4096]byte

func (e *encoder) write(p []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(p)
	e.n += int64(n)
	e.err = err
}

func (e *encoder) zeros(n int64) {
	for n > 0 && e.err == nil {
		c := min(n, int64(len(zeroBlock)))
		e.write(zeroBlock[:c])
		n -= c
	}
}

func (e *encoder) u8(v uint8) { e.b[0] = v; e.write(e.b[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.b[:], v)
	e.write(e.b[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.b[:], v)
	e.write(e.b[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.b[:], v)
	e.write(e.b[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err != nil {
		return
	}
	n, err := e.w.WriteString(s)
	e.n += int64(n)
	e.err = err
}

func boolU8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// value writes a validated value without its type tag.
func (e *encoder) value(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case bool:
		e.u8(boolU8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	case Array:
		e.array(x)
	}
}

func (e *encoder) array(a Array) {
	e.u32(uint32(a.Type))
	e.u64(uint64(a.Len()))
	switch s := a.Values.(type) {
	case []uint8:
		e.write(s)
	case []int8:
		for _, x := range s {
			e.u8(uint8(x))
		}
	case []bool:
		for _, x := range s {
			e.u8(boolU8(x))
		}
	case []uint16:
		for _, x := range s {
			e.u16(x)
		}
	case []int16:
		for _, x := range s {
			e.u16(uint16(x))
		}
	case []uint32:
		for _, x := range s {
			e.u32(x)
		}
	case []int32:
		for _, x := range s {
			e.u32(uint32(x))
		}
	case []float32:
		for _, x := range s {
			e.u32(math.Float32bits(x))
		}
	case []uint64:
		for _, x := range s {
			e.u64(x)
		}
	case []int64:
		for _, x := range s {
			e.u64(uint64(x))
		}
	case []float64:
		for _, x := range s {
			e.u64(math.Float64bits(x))
		}
	case []string:
		for _, x := range s {
			e.str(x)
		}
	case []Array:
		for _, x := range s {
			e.array(x)
		}
	}
}

// sliceType reports the element type of a plain Go slice that AddKV
// accepts in place of an Array.
func sliceType(v any) (ValueType, bool) {
	switch v.(type) {
	case []uint8:
		return TypeUint8, true
	case []int8:
		return TypeInt8, true
	case []uint16:
		return TypeUint16, true
	case []int16:
		return TypeInt16, true
	case []uint32:
		return TypeUint32, true
	case []int32:
		return TypeInt32, true
	case []float32:
		return TypeFloat32, true
	case []bool:
		return TypeBool, true
	case []string:
		return TypeString, true
	case []uint64:
		return TypeUint64, true
	case []int64:
		return TypeInt64, true
	case []float64:
		return TypeFloat64, true
	case []Array:
		return TypeArray, true
	}
	return 0, false
}

// valueType returns the GGUF type of a Go value, validating arrays.
func valueType(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	case Array:
		return TypeArray, checkArray(v.(Array), 1)
	}
	return 0, fmt.Errorf("unsupported Go type %T (use a sized integer, float32/64, bool, string or Array)", v)
}

// checkArray validates that a's Values match its Type, recursively, with
// nesting no deeper than the reader accepts.
func checkArray(a Array, depth int) error {
	if !a.Type.Valid() {
		return fmt.Errorf("array has invalid element type %v", a.Type)
	}
	if a.Type == TypeArray && depth >= MaxArrayDepth {
		return fmt.Errorf("arrays nest deeper than %d levels", MaxArrayDepth)
	}
	if a.Values == nil {
		return nil
	}
	t, ok := sliceType(a.Values)
	if !ok {
		return fmt.Errorf("array Values has unsupported Go type %T", a.Values)
	}
	if t != a.Type {
		return fmt.Errorf("array Type is %v but Values is %T", a.Type, a.Values)
	}
	if nested, ok := a.Values.([]Array); ok {
		for i, x := range nested {
			if err := checkArray(x, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	return nil
}
