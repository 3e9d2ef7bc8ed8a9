package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
)

// raw builds GGUF bytes by hand, so tests can write what the Writer refuses.
type raw struct{ b []byte }

func (r *raw) u8(v uint8) *raw   { r.b = append(r.b, v); return r }
func (r *raw) u32(v uint32) *raw { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *raw) u64(v uint64) *raw { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.b = append(r.b, s...); return r }

// kvU32 encodes a UINT32 metadata entry.
func kvU32(key string, v uint32) []byte { return new(raw).str(key).u32(uint32(TypeUint32)).u32(v).b }

// kvStr encodes a STRING metadata entry.
func kvStr(key, v string) []byte { return new(raw).str(key).u32(uint32(TypeString)).str(v).b }

// tinfo encodes a tensor info.
func tinfo(name string, typ quant.Type, offset uint64, dims ...uint64) []byte {
	r := new(raw).str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(offset).b
}

// rawFile assembles a version-3 file: header with the true counts, the given
// KV and tensor-info encodings, padding to align, and dataLen zero bytes.
func rawFile(align int, kvs, tensors [][]byte, dataLen int) []byte {
	r := new(raw)
	r.b = append(r.b, Magic...)
	r.u32(3).u64(uint64(len(tensors))).u64(uint64(len(kvs)))
	for _, kv := range kvs {
		r.b = append(r.b, kv...)
	}
	for _, t := range tensors {
		r.b = append(r.b, t...)
	}
	for len(r.b)%align != 0 {
		r.b = append(r.b, 0)
	}
	return append(r.b, make([]byte, dataLen)...)
}

// writeFile runs w.WriteTo into memory, filling tensor i with bytes
// derived from i.
func writeFile(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf, fillData)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// pattern is the deterministic content fillData writes for tensor i.
func pattern(i int, size int64) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*31 + j*7 + 1)
	}
	return b
}

func fillData(i int, ti TensorInfo, dst io.Writer) error {
	_, err := dst.Write(pattern(i, ti.Size))
	return err
}

// allocBytes returns the bytes f allocates, the least over a few runs (the
// runtime itself occasionally allocates in the background).
func allocBytes(f func()) uint64 {
	best := ^uint64(0)
	var a, b runtime.MemStats
	for range 3 {
		runtime.GC()
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		best = min(best, b.TotalAlloc-a.TotalAlloc)
	}
	return best
}
