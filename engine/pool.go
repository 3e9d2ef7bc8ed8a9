package engine

import (
	"fmt"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// OpenPool maps a prefab pool (see prefab.WritePool) and prepares it for
// generation on the CPU backend, with every layer resident over the pool's
// mapping. The tokenizer comes from the pool's manifest. Every extent's
// checksum is verified while loading, so a damaged pool is refused here with
// an error naming the extent.
func OpenPool(path string) (*Engine, error) {
	p, err := prefab.OpenPool(path)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	e, err := fromPool(path, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	return e, nil
}

func fromPool(path string, p *prefab.Pool) (*Engine, error) {
	return poolEngine(path, p, p.Model)
}

// poolEngine builds an engine over pool p with the model that build makes
// (p.Model: resident and verified; p.StreamingModel: layers left to a
// pipeline).
func poolEngine(path string, p *prefab.Pool, build func() (*model.Model, error)) (*Engine, error) {
	tok, err := tokenizer.New(p.Vocab())
	if err != nil {
		return nil, fmt.Errorf("model %s: building tokenizer: %w", path, err)
	}
	mod, err := build()
	if err != nil {
		return nil, fmt.Errorf("model %s: loading weights: %w", path, err)
	}
	if tok.VocabSize() != mod.Config.Vocab {
		return nil, fmt.Errorf("model %s: tokenizer has %d tokens but the model's vocabulary is %d", path, tok.VocabSize(), mod.Config.Vocab)
	}
	return newCPUEngine(&Engine{path: path, pool: p, Model: mod, Tok: tok}), nil
}

// Pool is the prefab pool the engine was opened from, or nil for a GGUF.
func (e *Engine) Pool() *prefab.Pool { return e.pool }
