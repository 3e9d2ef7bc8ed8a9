package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// MaxHeaderBytes caps the JSON header size. The reference implementation
// rejects headers above 100 MB; so do we, so that a corrupt length field
// cannot make us allocate or scan gigabytes.
const MaxHeaderBytes = 100 << 20

// ErrFormat is wrapped by every error caused by malformed file content, so
// callers can tell corrupt input from I/O failures with errors.Is.
var ErrFormat = errors.New("invalid safetensors file")

// dtypeSizes maps the safetensors dtype names to their element size in bytes.
var dtypeSizes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"U16": 2, "I16": 2, "F16": 2, "BF16": 2,
	"U32": 4, "I32": 4, "F32": 4,
	"U64": 8, "I64": 8, "F64": 8,
}

// DTypeSize returns the element size in bytes of a safetensors dtype name and
// whether the dtype is known.
func DTypeSize(dtype string) (int64, bool) {
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// entry is one tensor as described by a header, with offsets relative to the
// start of the data section.
type entry struct {
	Name  string
	DType string
	Shape []int64
	Begin int64
	End   int64
}

// header is a parsed and validated safetensors header.
type header struct {
	Meta    map[string]string
	Entries []entry // sorted by Begin
	// DataStart is the absolute file offset of the data section (8 + N).
	DataStart int64
}

type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader parses and validates the header of a complete safetensors file
// image b (length prefix, JSON, data). It checks that the header length fits
// in the file, the JSON is well formed, every dtype is known, each tensor's
// byte range matches its shape and lies inside the data section, and that no
// two tensors overlap. Gaps between tensors are tolerated.
func parseHeader(b []byte) (*header, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: file is %d bytes, shorter than the 8-byte header length", ErrFormat, len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%w: header length %d runs past the end of the %d-byte file", ErrFormat, n, len(b))
	}
	if n > MaxHeaderBytes {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d-byte limit", ErrFormat, n, MaxHeaderBytes)
	}
	js := b[8 : 8+n]
	if len(bytes.TrimSpace(js)) == 0 || bytes.TrimSpace(js)[0] != '{' {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrFormat)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
	}
	h := &header{DataStart: int64(8 + n)}
	dataLen := int64(len(b)) - h.DataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Meta); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrFormat, err)
			}
			continue
		}
		e, err := parseEntry(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		h.Entries = append(h.Entries, e)
	}
	sort.Slice(h.Entries, func(i, j int) bool {
		a, c := h.Entries[i], h.Entries[j]
		if a.Begin != c.Begin {
			return a.Begin < c.Begin
		}
		if a.End != c.End {
			return a.End < c.End
		}
		return a.Name < c.Name
	})
	// Overlap check: each non-empty range must start at or after the end of
	// every earlier one. Empty tensors own no bytes and cannot overlap.
	var prevEnd int64
	prevName := ""
	for _, e := range h.Entries {
		if e.Begin == e.End {
			continue
		}
		if e.Begin < prevEnd {
			return nil, fmt.Errorf("%w: tensor %q bytes [%d,%d) overlap tensor %q ending at %d", ErrFormat, e.Name, e.Begin, e.End, prevName, prevEnd)
		}
		prevEnd, prevName = e.End, e.Name
	}
	return h, nil
}

func parseEntry(name string, msg json.RawMessage, dataLen int64) (entry, error) {
	var r rawEntry
	if err := json.Unmarshal(msg, &r); err != nil {
		return entry{}, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
	}
	if r.DType == nil || r.Shape == nil || r.DataOffsets == nil {
		return entry{}, fmt.Errorf("%w: tensor %q: needs dtype, shape and data_offsets", ErrFormat, name)
	}
	size, ok := dtypeSizes[*r.DType]
	if !ok {
		return entry{}, fmt.Errorf("%w: tensor %q: unknown dtype %q", ErrFormat, name, *r.DType)
	}
	offs := *r.DataOffsets
	if len(offs) != 2 {
		return entry{}, fmt.Errorf("%w: tensor %q: data_offsets has %d values, want 2", ErrFormat, name, len(offs))
	}
	begin, end := offs[0], offs[1]
	if begin < 0 || end < begin || end > dataLen {
		return entry{}, fmt.Errorf("%w: tensor %q: data_offsets [%d,%d] out of range for %d data bytes", ErrFormat, name, begin, end, dataLen)
	}
	shape := *r.Shape
	elems, err := numElements(shape)
	if err != nil {
		return entry{}, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
	}
	if elems > math.MaxInt64/size || elems*size != end-begin {
		return entry{}, fmt.Errorf("%w: tensor %q: shape %v of %s needs %d bytes but data_offsets span %d", ErrFormat, name, shape, *r.DType, mulSat(elems, size), end-begin)
	}
	return entry{Name: name, DType: *r.DType, Shape: shape, Begin: begin, End: end}, nil
}

// numElements returns the product of shape, rejecting negative dims and
// overflow.
func numElements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v overflows", shape)
		}
		n *= d
	}
	return n, nil
}

func mulSat(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
