package quant

import (
	"errors"
	"fmt"
)

// Type is a tensor element format. Values equal ggml_type where ggml has the
// format, so GGUF tensor infos can be cast straight to Type.
type Type uint32

// The formats strata knows. Numbers are ggml's (ggml.h, enum ggml_type).
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	BF16 Type = 30

	// INT8Row is strata's per-row symmetric INT8 format: each row is a
	// float32 scale followed by n int8 values, value = scale * q. It is not a
	// ggml type; the id sits far above ggml's enum.
	INT8Row Type = 1024

	// Q6KA is Q6_K re-laid on a GPU for aligned loads: the same 210 bytes
	// per 256-element super-block, each block's bytes permuted in place by
	// its device address mod 16 so that its 192 quant bytes start 16-byte
	// aligned, each 64-element unit's 48 of them adjacent, with the scales
	// (a 4-byte-aligned word per unit) and d around them. Q6_K's blocks
	// are only 2-byte aligned, so a kernel reading them directly needs
	// word loads and funnel shifts; re-laid, a unit is three aligned
	// 16-byte loads. It exists only in device memory, for the address the
	// matrix was re-laid at (package kernels makes it from an uploaded
	// Q6_K matrix): no file or pool holds it, so it is not Known, has no
	// sizes of its own (use Q6_K's) and Parse does not accept it. The id
	// sits beside INT8Row, outside ggml's range.
	Q6KA Type = 1025
)

// QK_K is the super-block size of the K-quants (ggml-common.h).
const QK_K = 256

// ErrUnknownType is returned for a type id strata does not implement.
var ErrUnknownType = errors.New("unknown tensor type")

type typeInfo struct {
	name       string
	blockElems int // elements per block
	blockBytes int // bytes per block
}

var types = map[Type]typeInfo{
	F32:  {"F32", 1, 4},
	F16:  {"F16", 1, 2},
	BF16: {"BF16", 1, 2},
	Q4_0: {"Q4_0", 32, 2 + 16},
	Q8_0: {"Q8_0", 32, 2 + 32},
	// Q4_K: d, dmin (fp16) + 12 bytes of 6-bit scales/mins + 128 bytes of nibbles.
	Q4_K: {"Q4_K", QK_K, 2 + 2 + 12 + QK_K/2},
	// Q5_K: as Q4_K plus 32 bytes of high bits.
	Q5_K: {"Q5_K", QK_K, 2 + 2 + 12 + QK_K/8 + QK_K/2},
	// Q6_K: 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, fp16 d.
	Q6_K: {"Q6_K", QK_K, QK_K/2 + QK_K/4 + QK_K/16 + 2},
	// INT8Row is per row, not per block: BlockElems reports 1 and RowBytes
	// adds the 4-byte scale.
	INT8Row: {"INT8_ROW", 1, 1},
}

// Known reports whether t is a format strata implements.
func (t Type) Known() bool { _, ok := types[t]; return ok }

// String returns the format's conventional name (ggml's for ggml types).
func (t Type) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockElems is the number of elements one block holds.
func (t Type) BlockElems() int { return types[t].blockElems }

// BlockBytes is the size in bytes of one block.
func (t Type) BlockBytes() int { return types[t].blockBytes }

// RowBytes returns the bytes that a row of n elements occupies, or an error
// when n is not a whole number of blocks or the type is unknown. A row is the
// unit kernels dequantize: tensors are stored as rows of their first
// (fastest-varying) dimension.
func (t Type) RowBytes(n int64) (int64, error) {
	ti, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrUnknownType, uint32(t))
	}
	if n < 0 {
		return 0, fmt.Errorf("negative row length %d", n)
	}
	if n%int64(ti.blockElems) != 0 {
		return 0, fmt.Errorf("%v row of %d elements is not a multiple of the block size %d", t, n, ti.blockElems)
	}
	b := n / int64(ti.blockElems) * int64(ti.blockBytes)
	if t == INT8Row {
		b += 4
	}
	return b, nil
}

// TensorBytes returns the storage size of a tensor with ggml-order dims
// (dims[0] is the row length). It guards against overflow so hostile
// headers cannot produce a wrapped size.
func (t Type) TensorBytes(dims []uint64) (int64, error) {
	if len(dims) == 0 {
		return 0, errors.New("tensor has no dimensions")
	}
	const max = int64(1) << 62
	if dims[0] > uint64(max) {
		return 0, fmt.Errorf("dimension %d too large", dims[0])
	}
	row, err := t.RowBytes(int64(dims[0]))
	if err != nil {
		return 0, err
	}
	total := row
	for _, d := range dims[1:] {
		if d == 0 {
			return 0, nil
		}
		if d > uint64(max) || total > max/int64(d) {
			return 0, fmt.Errorf("tensor size overflows (dims %v)", dims)
		}
		total *= int64(d)
	}
	return total, nil
}

// Types lists every implemented format, for tests and help text.
func Types() []Type { return []Type{F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, INT8Row} }

// Parse maps a name (case-insensitive, as printed by String) to a Type.
func Parse(name string) (Type, error) {
	for t, ti := range types {
		if equalFold(ti.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownType, name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
