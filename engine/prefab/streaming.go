package prefab

import (
	"fmt"

	"github.com/strata-llm/strata/engine/model"
)

// StreamingModel builds a model.Model over the mapping whose layers are
// NOT verified or touched: the layer tensors are views of the mapped
// extents, so building it costs no I/O however large the pool, while
// Model verifies (so reads) every extent first. It is for a model whose
// layers a pipeline (engine/stream) streams and verifies: install the
// pipeline as the model's LayerSource before running it. The globals
// (embedding, output norm and projection), which every pass uses in place,
// are verified here. The pool must stay open while the model is used.
func (p *Pool) StreamingModel() (*model.Model, error) {
	g, err := p.Globals()
	if err != nil {
		return nil, err
	}
	if p.data == nil {
		return nil, fmt.Errorf("pool %s: closed", p.path)
	}
	w := &model.Weights{Embed: g.Embed, OutputNorm: g.OutputNorm, Output: g.Output, Layers: make([]model.Layer, len(p.l.layers))}
	if p.l.cfg.TiedOutput {
		w.Output = model.Tensor{}
	}
	for i := range p.l.layers {
		e := p.l.layers[i].ext
		l, err := p.Decode(i, p.data[e.Offset:e.Offset+e.Length:e.Offset+e.Length])
		if err != nil {
			return nil, err
		}
		w.Layers[i] = *l
	}
	m, err := model.New(p.l.cfg, w)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.path, err)
	}
	return m, nil
}
