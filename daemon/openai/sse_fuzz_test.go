package openai

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzEventReader feeds arbitrary server output to the client's SSE
// reader: it never panics or loops, returns each event's data at most
// once per line read, and reports io.EOF only after [DONE].
func FuzzEventReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {}\n\n"))
	f.Add([]byte("data: [DONE]\n\ndata: x\n\n"))
	f.Add([]byte("event: e\ndata: x\n\n"))
	f.Add([]byte("data: x\nno blank"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewEventReader(bytes.NewReader(data))
		sawDone := false
		for n := 0; ; n++ {
			if n > len(data) {
				t.Fatalf("more events than bytes in %q", data)
			}
			d, err := r.Next()
			if errors.Is(err, io.EOF) {
				if !sawDone {
					t.Fatalf("io.EOF without [DONE] in %q", data)
				}
				return
			}
			if err != nil {
				return
			}
			if string(d) == Done {
				sawDone = true
			}
			if !bytes.Contains(data, d) {
				t.Fatalf("event %q not in the input %q", d, data)
			}
		}
	})
}
