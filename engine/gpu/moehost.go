package gpu

import (
	"fmt"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/internal/hostmem"
)

// packExperts copies every layer's experts into one region of 2 MiB pages
// and returns the layers with their experts pointing there (the other
// tensors as they were). The CPU computes a mixture-of-experts model's
// FFN blocks from these bytes every pass: a token's routed experts are a
// gigabyte scattered over the file, and read through the model file's
// 4 KiB pages every expert's rows cost the CPU TLB misses (page walks that
// themselves read DRAM), where huge pages cost few. The tier-B layers of
// the hybrid placement sit in huge pages for the same reason.
func packExperts(w *model.Weights) ([]*model.Layer, *hostmem.Region, error) {
	const align = 64
	var total int64
	for i := range w.Layers {
		for e := range w.Layers[i].Experts {
			x := &w.Layers[i].Experts[e]
			for _, t := range []*model.Tensor{&x.Gate, &x.Up, &x.Down} {
				total += hostmem.AlignUp(int64(len(t.Data)), align)
			}
		}
	}
	layers := make([]*model.Layer, len(w.Layers))
	if total == 0 {
		for i := range w.Layers {
			layers[i] = &w.Layers[i]
		}
		return layers, nil, nil
	}
	r, err := hostmem.Alloc(int(total), hostmem.AllocOptions{HugePages: true})
	if err != nil {
		return nil, nil, fmt.Errorf("experts in host memory (%d bytes): %w", total, err)
	}
	b := r.Bytes()
	var off int64
	for i := range w.Layers {
		l := w.Layers[i] // a copy: the caller's layer keeps its own views
		l.Experts = append([]model.Expert(nil), l.Experts...)
		for e := range l.Experts {
			x := &l.Experts[e]
			for _, t := range []*model.Tensor{&x.Gate, &x.Up, &x.Down} {
				n := int64(len(t.Data))
				copy(b[off:], t.Data)
				t.Data = b[off : off+n : off+n]
				off += hostmem.AlignUp(n, align)
			}
		}
		layers[i] = &l
	}
	return layers, r, nil
}
