package gpu

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/strata-llm/strata/engine/model"
)

// TestPackExperts: the experts' copies in huge pages hold the same bytes
// as the model's, every other tensor is the model's own view, and the
// model's layers are left as they were.
func TestPackExperts(t *testing.T) {
	t.Parallel()
	cpu := tinyModel(t, "qwen3moe", "q4_k_m")
	w := cpu.Weights
	layers, r, err := packExperts(w)
	if err != nil {
		t.Fatal(err)
	}
	if r == nil {
		t.Fatal("no region for a model with experts")
	}
	defer r.Free()
	inRegion := func(b []byte) bool { return inside(r.Bytes(), b) }
	for i, l := range layers {
		src := &w.Layers[i]
		if &l.Router.Data[0] != &src.Router.Data[0] {
			t.Fatalf("layer %d: the router was copied", i)
		}
		if len(l.Experts) != len(src.Experts) || len(l.Experts) == 0 {
			t.Fatalf("layer %d: %d experts, want %d", i, len(l.Experts), len(src.Experts))
		}
		for e := range l.Experts {
			for j, pair := range [][2]*model.Tensor{{&l.Experts[e].Gate, &src.Experts[e].Gate}, {&l.Experts[e].Up, &src.Experts[e].Up}, {&l.Experts[e].Down, &src.Experts[e].Down}} {
				got, want := pair[0], pair[1]
				if !bytes.Equal(got.Data, want.Data) || got.Rows != want.Rows || got.Type != want.Type {
					t.Fatalf("layer %d expert %d tensor %d differs", i, e, j)
				}
				if !inRegion(got.Data) || inside(r.Bytes(), want.Data) {
					t.Fatalf("layer %d expert %d tensor %d: not in the packed region (or the model's view moved)", i, e, j)
				}
			}
		}
	}
}

// inside reports whether b lies within r.
func inside(r, b []byte) bool {
	if len(r) == 0 || len(b) == 0 {
		return false
	}
	lo, hi := uintptr(unsafe.Pointer(&r[0])), uintptr(unsafe.Pointer(&r[0]))+uintptr(len(r))
	p := uintptr(unsafe.Pointer(&b[0]))
	return p >= lo && p+uintptr(len(b)) <= hi
}
