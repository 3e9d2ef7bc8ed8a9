package stream_test

import (
	"bytes"
	"testing"

	"github.com/strata-llm/strata/engine/stream"
)

// TestCPUDeviceSpans: CopyIn with spans copies each span of src to the
// same offset in the slot and leaves the rest of the slot as it was; bad
// spans are refused before anything is copied.
func TestCPUDeviceSpans(t *testing.T) {
	t.Parallel()
	var d stream.CPUDevice
	slot, err := d.AllocSlot(8192)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Free()
	src := make([]byte, 8192)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	dst := slot.Host()
	for i := range dst {
		dst[i] = 0xEE
	}
	spans := []stream.Span{{Off: 0, Len: 1000}, {Off: 4096, Len: 10}, {Off: 8000, Len: 192}}
	op, err := d.CopyIn(0, slot, src, spans)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(); err != nil {
		t.Fatal(err)
	}
	in := make([]bool, len(src))
	for _, s := range spans {
		for i := s.Off; i < s.Off+s.Len; i++ {
			in[i] = true
		}
	}
	for i := range dst {
		want := byte(0xEE)
		if in[i] {
			want = src[i]
		}
		if dst[i] != want {
			t.Fatalf("slot byte %d = %#x, want %#x", i, dst[i], want)
		}
	}
	if got := stream.SpanBytes(spans, 8192); got != 1202 {
		t.Errorf("SpanBytes = %d, want 1202", got)
	}
	if got := stream.SpanBytes(nil, 8192); got != 8192 {
		t.Errorf("SpanBytes(nil) = %d, want the whole 8192", got)
	}
	before := bytes.Clone(dst)
	if _, err := d.CopyIn(0, slot, src, []stream.Span{{Off: 8000, Len: 193}}); err == nil {
		t.Error("a span past src: no error")
	}
	if !bytes.Equal(dst, before) {
		t.Error("a refused copy changed the slot")
	}
}
