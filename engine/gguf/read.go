package gguf

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

// Memory discipline. Open reads the header twice with the same code. The
// first pass (scan) allocates nothing that depends on the input: it only
// checks the structure (every count and length is backed by bytes present
// in the file, types are known, nesting is bounded) and sums the string
// bytes and tensor dimensions. Only a header that passed the scan is decoded
// by the second pass, so every allocation of the second pass corresponds to
// bytes present in the file: a KV slot (32 B) is at least 13 encoded bytes,
// a string header (16 B) at least 8, a tensor info (64 B + 8 B per dim) at
// least 32, a nested array (24 B slot + 24 B boxed slice) at least 12, and
// string bytes are copied once into one block sized by the scan. The second
// pass still checks every count against the bytes left, so even a file that
// changes between the passes cannot make it over-allocate. The read buffer
// is min(file size, 64 KiB).

// readBufSize is the header read buffer size.
const readBufSize = 64 << 10

// Minimum encoded sizes used to bound counts before anything is allocated.
const (
	headerSize   = 4 + 4 + 8 + 8 // magic, version, tensor_count, kv_count
	minKVSize    = 8 + 4 + 1     // empty key, value type, one-byte value
	minTensorLen = 8 + 4 + 8 + 4 + 8
	maxCtxName   = 128 // longest key/name quoted in scan-pass errors
)

// Open parses the GGUF header read from r, which holds size bytes. It reads
// through a small buffer and never reads tensor data; the returned File
// keeps r for TensorReader and ReadTensor.
func Open(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("gguf: negative file size %d", size)
	}
	rd := &reader{ra: r, size: size, buf: make([]byte, min(size, readBufSize))}
	scan := &decoder{rd: rd}
	if _, err := scan.header(); err != nil {
		return nil, err
	}
	rd.seek(0)
	dec := &decoder{rd: rd, build: true, strBytes: scan.strBytes, dims: scan.dims}
	f, err := dec.header()
	if err != nil {
		return nil, err
	}
	f.r = r
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// reader is a buffered little-endian reader over an io.ReaderAt that knows
// how many bytes the file has left.
type reader struct {
	ra   io.ReaderAt
	size int64
	buf  []byte
	base int64 // file offset of buf[0]
	r, w int   // unread bytes are buf[r:w]
}

func (rd *reader) pos() int64  { return rd.base + int64(rd.r) }
func (rd *reader) left() int64 { return rd.size - rd.pos() }

func (rd *reader) seek(off int64) {
	rd.base = off
	rd.r, rd.w = 0, 0
}

func truncated(n, off, left int64) error {
	return fmt.Errorf("need %d bytes at offset %d, only %d left: %w", n, off, left, ErrTruncated)
}

// fill makes at least n bytes (n ≤ 8, or n ≤ len(buf)) available in
// buf[r:w].
func (rd *reader) fill(n int) error {
	if rd.w-rd.r >= n {
		return nil
	}
	if int64(n) > rd.left() {
		return truncated(int64(n), rd.pos(), rd.left())
	}
	copy(rd.buf, rd.buf[rd.r:rd.w])
	rd.base += int64(rd.r)
	rd.w -= rd.r
	rd.r = 0
	end := rd.base + int64(rd.w)
	want := min(int64(len(rd.buf)-rd.w), rd.size-end)
	m, err := rd.ra.ReadAt(rd.buf[rd.w:rd.w+int(want)], end)
	rd.w += m
	if rd.w < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading %d bytes at offset %d: %w", want, end, err)
	}
	return nil
}

func (rd *reader) u32() (uint32, error) {
	if err := rd.fill(4); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(rd.buf[rd.r:])
	rd.r += 4
	return v, nil
}

func (rd *reader) u64() (uint64, error) {
	if err := rd.fill(8); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(rd.buf[rd.r:])
	rd.r += 8
	return v, nil
}

// skip advances n bytes, which must lie within the file.
func (rd *reader) skip(n int64) error {
	if n > rd.left() {
		return truncated(n, rd.pos(), rd.left())
	}
	if n <= int64(rd.w-rd.r) {
		rd.r += int(n)
	} else {
		rd.seek(rd.pos() + n)
	}
	return nil
}

// copyTo appends the next n bytes (n ≤ left, checked by the caller) to sb.
func (rd *reader) copyTo(sb *strings.Builder, n int64) error {
	for n > 0 {
		if rd.r == rd.w {
			if err := rd.fill(1); err != nil {
				return err
			}
		}
		c := min(int64(rd.w-rd.r), n)
		sb.Write(rd.buf[rd.r : rd.r+int(c)])
		rd.r += int(c)
		n -= c
	}
	return nil
}

// copyBytes reads the next len(dst) bytes into dst.
func (rd *reader) copyBytes(dst []byte) error {
	for len(dst) > 0 {
		if rd.r == rd.w {
			if err := rd.fill(1); err != nil {
				return err
			}
		}
		c := copy(dst, rd.buf[rd.r:rd.w])
		rd.r += c
		dst = dst[c:]
	}
	return nil
}

// decoder walks a header. With build false it only validates structure and
// sums strBytes and dims; with build true it decodes into a File.
type decoder struct {
	rd    *reader
	build bool

	strBytes int64           // total string bytes (scan result, build budget)
	dims     int64           // total tensor dims (scan result, build budget)
	strs     strings.Builder // build: backing store of every string
	dimBuf   []uint64        // build: backing store of every Dims slice
	ctx      [maxCtxName]byte
	ctxLen   int
	ctxLong  bool
}

// label names the key or tensor last read with str(true), for errors.
func (d *decoder) label(s string) string {
	if !d.build {
		s = string(d.ctx[:d.ctxLen])
		if d.ctxLong {
			s += "..."
		}
	}
	return fmt.Sprintf("%q", s)
}

// str reads a GGUF string. During the scan it returns "" and, when ctx is
// set, keeps the first bytes for label.
func (d *decoder) str(ctx bool) (string, error) {
	rd := d.rd
	off := rd.pos()
	n, err := rd.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(rd.left()) {
		return "", fmt.Errorf("string length %d at offset %d exceeds the %d bytes left in the file: %w",
			n, off, rd.left(), ErrTruncated)
	}
	if !d.build {
		d.strBytes += int64(n)
		if ctx {
			d.ctxLen = int(min(n, maxCtxName))
			d.ctxLong = n > maxCtxName
			if err := rd.copyBytes(d.ctx[:d.ctxLen]); err != nil {
				return "", err
			}
			n -= uint64(d.ctxLen)
		}
		return "", rd.skip(int64(n))
	}
	if n == 0 {
		return "", nil
	}
	if d.strs.Cap() == 0 {
		d.strs.Grow(int(min(d.strBytes, rd.size)))
	}
	start := d.strs.Len()
	if err := rd.copyTo(&d.strs, int64(n)); err != nil {
		return "", err
	}
	return d.strs.String()[start:], nil
}

// header decodes (or, during the scan, checks) everything up to the end of
// the tensor infos.
func (d *decoder) header() (*File, error) {
	rd := d.rd
	if err := rd.fill(headerSize); err != nil {
		return nil, fmt.Errorf("gguf: header: %w", err)
	}
	b := rd.buf[rd.r : rd.r+headerSize]
	rd.r += headerSize
	switch m := string(b[:4]); m {
	case Magic:
	case "FUGG":
		return nil, fmt.Errorf("gguf: magic is byte-swapped (%q): big-endian files are not supported: %w", m, ErrUnsupported)
	default:
		return nil, fmt.Errorf("gguf: bad magic %q (want %q): %w", m, Magic, ErrInvalid)
	}
	version := binary.LittleEndian.Uint32(b[4:])
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, fmt.Errorf("gguf: version 1 is not supported (only 2 and 3): %w", ErrUnsupported)
	case version&0xffff == 0 && bits.ReverseBytes32(version) <= 3:
		return nil, fmt.Errorf("gguf: version field reads %#x, a byte-swapped version %d: big-endian files are not supported: %w",
			version, bits.ReverseBytes32(version), ErrUnsupported)
	default:
		return nil, fmt.Errorf("gguf: unknown version %d (only 2 and 3 are supported): %w", version, ErrUnsupported)
	}
	nTensors := binary.LittleEndian.Uint64(b[8:])
	nKV := binary.LittleEndian.Uint64(b[16:])
	left := uint64(rd.left())
	if nKV > left/minKVSize || nTensors > left/minTensorLen || nKV*minKVSize+nTensors*minTensorLen > left {
		return nil, fmt.Errorf("gguf: header claims %d tensors and %d metadata keys, which cannot fit in the %d bytes after the header: %w",
			nTensors, nKV, left, ErrTruncated)
	}
	if nKV > math.MaxInt32 || nTensors > math.MaxInt32 {
		return nil, fmt.Errorf("gguf: header claims %d tensors and %d metadata keys; at most %d of each are supported: %w",
			nTensors, nKV, math.MaxInt32, ErrInvalid)
	}

	var f *File
	if d.build {
		f = &File{
			Version:   version,
			Alignment: DefaultAlignment,
			Size:      rd.size,
			KV:        make([]KV, nKV),
			Tensors:   make([]TensorInfo, nTensors),
		}
	}
	for i := range nKV {
		off := rd.pos()
		key, err := d.str(true)
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata %d: key at offset %d: %w", i, off, err)
		}
		off = rd.pos()
		t, err := rd.u32()
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata %d %s: value type: %w", i, d.label(key), err)
		}
		v, err := d.value(ValueType(t), off, 1)
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata %d %s: %w", i, d.label(key), err)
		}
		if d.build {
			f.KV[i] = KV{Key: key, Value: v}
		}
	}

	// The KV pass consumed bytes, so recheck the tensor count.
	if left := uint64(rd.left()); nTensors > left/minTensorLen {
		return nil, fmt.Errorf("gguf: %d tensor infos cannot fit in the %d bytes left at offset %d: %w",
			nTensors, left, rd.pos(), ErrTruncated)
	}
	if d.build {
		d.dimBuf = make([]uint64, 0, min(d.dims, int64(nTensors)*MaxDims))
	}
	for i := range nTensors {
		off := rd.pos()
		name, err := d.str(true)
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d: name at offset %d: %w", i, off, err)
		}
		off = rd.pos()
		nd, err := rd.u32()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d %s: dimension count: %w", i, d.label(name), err)
		}
		if nd == 0 || nd > MaxDims {
			return nil, fmt.Errorf("gguf: tensor %d %s: %d dimensions at offset %d (must be 1 to %d): %w",
				i, d.label(name), nd, off, MaxDims, ErrInvalid)
		}
		var dims []uint64
		start := len(d.dimBuf)
		for j := range nd {
			x, err := rd.u64()
			if err != nil {
				return nil, fmt.Errorf("gguf: tensor %d %s: dimension %d: %w", i, d.label(name), j, err)
			}
			if d.build {
				d.dimBuf = append(d.dimBuf, x)
			}
		}
		if d.build {
			dims = d.dimBuf[start:len(d.dimBuf):len(d.dimBuf)]
		} else {
			d.dims += int64(nd)
		}
		typ, err := rd.u32()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d %s: type: %w", i, d.label(name), err)
		}
		offset, err := rd.u64()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d %s: offset: %w", i, d.label(name), err)
		}
		if d.build {
			f.Tensors[i] = TensorInfo{Name: name, Dims: dims, Type: quant.Type(typ), Offset: offset}
		}
	}
	if d.build {
		f.HeaderSize = rd.pos()
	}
	return f, nil
}

// value reads one value of type t that starts at offset off (the offset of
// its type tag, for errors). depth is the array nesting level of the value.
func (d *decoder) value(t ValueType, off int64, depth int) (any, error) {
	rd := d.rd
	if n := t.fixedSize(); n > 0 {
		if err := rd.fill(n); err != nil {
			return nil, fmt.Errorf("%v value: %w", t, err)
		}
		b := rd.buf[rd.r : rd.r+n]
		if t == TypeBool && b[0] > 1 {
			return nil, fmt.Errorf("BOOL value %d at offset %d is neither 0 nor 1: %w", b[0], rd.pos(), ErrInvalid)
		}
		rd.r += n
		if !d.build {
			return nil, nil
		}
		return scalar(t, b), nil
	}
	switch t {
	case TypeString:
		s, err := d.str(false)
		if err != nil {
			return nil, fmt.Errorf("STRING value: %w", err)
		}
		return s, nil
	case TypeArray:
		a, err := d.array(depth)
		if err != nil {
			return nil, err
		}
		return a, nil
	}
	return nil, fmt.Errorf("unknown value type %d at offset %d: %w", uint32(t), off, ErrInvalid)
}

func scalar(t ValueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0]
	case TypeInt8:
		return int8(b[0])
	case TypeBool:
		return b[0] == 1
	case TypeUint16:
		return le.Uint16(b)
	case TypeInt16:
		return int16(le.Uint16(b))
	case TypeUint32:
		return le.Uint32(b)
	case TypeInt32:
		return int32(le.Uint32(b))
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case TypeUint64:
		return le.Uint64(b)
	case TypeInt64:
		return int64(le.Uint64(b))
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	return nil
}

// array reads an array body (element type, count, elements) at nesting
// level depth.
func (d *decoder) array(depth int) (Array, error) {
	rd := d.rd
	off := rd.pos()
	et32, err := rd.u32()
	if err != nil {
		return Array{}, fmt.Errorf("array element type: %w", err)
	}
	n64, err := rd.u64()
	if err != nil {
		return Array{}, fmt.Errorf("array length: %w", err)
	}
	et := ValueType(et32)
	if !et.Valid() {
		return Array{}, fmt.Errorf("array at offset %d has unknown element type %d: %w", off, et32, ErrInvalid)
	}
	if et == TypeArray && depth >= MaxArrayDepth {
		return Array{}, fmt.Errorf("array at offset %d nests arrays deeper than %d levels: %w", off, MaxArrayDepth, ErrInvalid)
	}
	if left := uint64(rd.left()); n64 > left/uint64(et.minSize()) {
		return Array{}, fmt.Errorf("array at offset %d claims %d %v elements, which cannot fit in the %d bytes left: %w",
			off, n64, et, left, ErrTruncated)
	}
	n := int(n64) // fits: n64 ≤ file size
	if size := et.fixedSize(); size > 0 {
		if !d.build {
			if et == TypeBool {
				if _, err := readFixed(rd, n, 1, false, boolByte); err != nil {
					return Array{}, fmt.Errorf("array at offset %d: %w", off, err)
				}
				return Array{}, nil
			}
			return Array{}, rd.skip(int64(n) * int64(size))
		}
		v, err := fixedArray(rd, et, n)
		if err != nil {
			return Array{}, fmt.Errorf("array at offset %d: %w", off, err)
		}
		return Array{Type: et, Values: v}, nil
	}
	switch et {
	case TypeString:
		var out []string
		if d.build {
			out = make([]string, n)
		}
		for i := range n {
			s, err := d.str(false)
			if err != nil {
				return Array{}, fmt.Errorf("array at offset %d: element %d: %w", off, i, err)
			}
			if d.build {
				out[i] = s
			}
		}
		return Array{Type: et, Values: out}, nil
	default: // TypeArray
		var out []Array
		if d.build {
			out = make([]Array, n)
		}
		for i := range n {
			a, err := d.array(depth + 1)
			if err != nil {
				return Array{}, fmt.Errorf("array at offset %d: element %d: %w", off, i, err)
			}
			if d.build {
				out[i] = a
			}
		}
		return Array{Type: et, Values: out}, nil
	}
}

func fixedArray(rd *reader, et ValueType, n int) (any, error) {
	le := binary.LittleEndian
	switch et {
	case TypeUint8:
		return readFixed(rd, n, 1, true, func(b []byte) (uint8, bool) { return b[0], true })
	case TypeInt8:
		return readFixed(rd, n, 1, true, func(b []byte) (int8, bool) { return int8(b[0]), true })
	case TypeBool:
		return readFixed(rd, n, 1, true, boolByte)
	case TypeUint16:
		return readFixed(rd, n, 2, true, func(b []byte) (uint16, bool) { return le.Uint16(b), true })
	case TypeInt16:
		return readFixed(rd, n, 2, true, func(b []byte) (int16, bool) { return int16(le.Uint16(b)), true })
	case TypeUint32:
		return readFixed(rd, n, 4, true, func(b []byte) (uint32, bool) { return le.Uint32(b), true })
	case TypeInt32:
		return readFixed(rd, n, 4, true, func(b []byte) (int32, bool) { return int32(le.Uint32(b)), true })
	case TypeFloat32:
		return readFixed(rd, n, 4, true, func(b []byte) (float32, bool) { return math.Float32frombits(le.Uint32(b)), true })
	case TypeUint64:
		return readFixed(rd, n, 8, true, func(b []byte) (uint64, bool) { return le.Uint64(b), true })
	case TypeInt64:
		return readFixed(rd, n, 8, true, func(b []byte) (int64, bool) { return int64(le.Uint64(b)), true })
	case TypeFloat64:
		return readFixed(rd, n, 8, true, func(b []byte) (float64, bool) { return math.Float64frombits(le.Uint64(b)), true })
	}
	return nil, fmt.Errorf("not a fixed-size type: %v", et)
}

func boolByte(b []byte) (bool, bool) { return b[0] == 1, b[0] <= 1 }

// readFixed decodes n elements of size bytes each with dec, which reports
// false for an invalid encoding. With keep false it only validates.
func readFixed[T any](rd *reader, n, size int, keep bool, dec func([]byte) (T, bool)) ([]T, error) {
	var out []T
	if keep {
		out = make([]T, n)
	}
	for i := 0; i < n; {
		if rd.w-rd.r < size {
			if err := rd.fill(size); err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
		}
		k := min((rd.w-rd.r)/size, n-i)
		for j := range k {
			v, ok := dec(rd.buf[rd.r+j*size : rd.r+j*size+size])
			if !ok {
				return nil, fmt.Errorf("element %d at offset %d has invalid value %d: %w",
					i+j, rd.pos()+int64(j*size), rd.buf[rd.r+j*size], ErrInvalid)
			}
			if keep {
				out[i+j] = v
			}
		}
		rd.r += k * size
		i += k
	}
	return out, nil
}

// validate checks the decoded header: unique keys, a valid alignment, and
// tensors that have known types, are aligned, lie inside the file and do not
// overlap. It also builds the lookup indexes.
func (f *File) validate() error {
	f.kvIndex = sortedIndex(len(f.KV), func(i int) string { return f.KV[i].Key })
	for i := 1; i < len(f.kvIndex); i++ {
		if a, b := f.kvIndex[i-1], f.kvIndex[i]; f.KV[a].Key == f.KV[b].Key {
			return fmt.Errorf("gguf: duplicate metadata key %q (entries %d and %d): %w",
				f.KV[a].Key, min(a, b), max(a, b), ErrInvalid)
		}
	}
	if v, ok := f.Lookup(AlignmentKey); ok {
		a, isInt := asUint(v)
		switch {
		case !isInt:
			if _, signed := asInt(v); signed { // an integer that asUint refused
				return fmt.Errorf("gguf: %s is negative (%v): %w", AlignmentKey, v, ErrInvalid)
			}
			return fmt.Errorf("gguf: %s has type %v, want an integer: %w", AlignmentKey, typeOf(v), ErrInvalid)
		case a == 0 || a&(a-1) != 0 || a > maxAlignment:
			return fmt.Errorf("gguf: %s is %d, want a nonzero power of two no larger than 2^31: %w", AlignmentKey, a, ErrInvalid)
		}
		f.Alignment = a
	}
	f.DataOffset = int64(hostmem.AlignUp(uint64(f.HeaderSize), f.Alignment))

	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if !ti.Type.Known() {
			return fmt.Errorf("gguf: tensor %d %q: unknown tensor type id %d: %w", i, ti.Name, uint32(ti.Type), ErrInvalid)
		}
		size, err := ti.Type.TensorBytes(ti.Dims)
		if err != nil {
			return fmt.Errorf("gguf: tensor %d %q: dims %v: %v: %w", i, ti.Name, ti.Dims, err, ErrInvalid)
		}
		ti.Size = size
		if ti.Offset%f.Alignment != 0 {
			return fmt.Errorf("gguf: tensor %d %q: offset %d is not a multiple of the alignment %d: %w",
				i, ti.Name, ti.Offset, f.Alignment, ErrInvalid)
		}
		avail := f.Size - f.DataOffset // bytes in the data section
		if avail < 0 || ti.Offset > uint64(avail) || uint64(size) > uint64(avail)-ti.Offset {
			return fmt.Errorf("gguf: tensor %d %q: data at offset %d+%d (%d bytes) runs past the end of the file (%d bytes): %w",
				i, ti.Name, f.DataOffset, ti.Offset, size, f.Size, ErrTruncated)
		}
	}
	f.tenIndex = sortedIndex(len(f.Tensors), func(i int) string { return f.Tensors[i].Name })
	for i := 1; i < len(f.tenIndex); i++ {
		if a, b := f.tenIndex[i-1], f.tenIndex[i]; f.Tensors[a].Name == f.Tensors[b].Name {
			return fmt.Errorf("gguf: duplicate tensor name %q (tensors %d and %d): %w",
				f.Tensors[a].Name, min(a, b), max(a, b), ErrInvalid)
		}
	}
	byOffset := make([]int32, len(f.Tensors))
	for i := range byOffset {
		byOffset[i] = int32(i)
	}
	slices.SortFunc(byOffset, func(a, b int32) int {
		ta, tb := &f.Tensors[a], &f.Tensors[b]
		if c := cmp.Compare(ta.Offset, tb.Offset); c != 0 {
			return c
		}
		return cmp.Compare(ta.Size, tb.Size)
	})
	for i := 1; i < len(byOffset); i++ {
		a, b := &f.Tensors[byOffset[i-1]], &f.Tensors[byOffset[i]]
		if a.Offset+uint64(a.Size) > b.Offset {
			return fmt.Errorf("gguf: tensors %q (offset %d, %d bytes) and %q (offset %d) overlap: %w",
				a.Name, a.Offset, a.Size, b.Name, b.Offset, ErrInvalid)
		}
	}
	return nil
}

// sortedIndex returns 0..n-1 sorted by key(i).
func sortedIndex(n int, key func(int) string) []int32 {
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return strings.Compare(key(int(a)), key(int(b))) })
	return idx
}

// typeOf names the GGUF type of a decoded value, for errors.
func typeOf(v any) ValueType {
	t, err := valueType(v)
	if err != nil {
		return ValueType(^uint32(0))
	}
	return t
}
