package engine

import (
	"context"
	"fmt"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// OpenPool maps a prefab pool (see prefab.WritePool) and prepares it for
// generation on the CPU backend, with every layer resident over the pool's
// mapping. The tokenizer comes from the pool's manifest. Every extent's
// checksum is verified while loading, so a damaged pool is refused here with
// an error naming the extent; cancelling ctx stops the verification
// between extents with an error wrapping ctx's.
func OpenPool(ctx context.Context, path string) (*Engine, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	p, err := prefab.OpenPool(path)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	e, err := fromPool(ctx, path, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	return e, nil
}

// fromPool builds the resident CPU engine over pool p, verifying every
// extent first.
func fromPool(ctx context.Context, path string, p *prefab.Pool) (*Engine, error) {
	if err := verifyPool(ctx, p, nil); err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	return poolEngine(path, p, p.Model)
}

// verifyPool checks the checksums of p's globals and of every layer that
// keep accepts (nil: all), checking ctx between extents so that a
// cancelled load stops within one extent. The pool remembers each verdict,
// so building a model over it afterwards reads nothing again.
func verifyPool(ctx context.Context, p *prefab.Pool, keep func(layer int) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("verifying the pool: %w", err)
	}
	if _, err := p.Globals(); err != nil {
		return err
	}
	for i := range p.NumLayers() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("verifying the pool at layer %d: %w", i, err)
		}
		if keep != nil && !keep(i) {
			continue
		}
		if _, err := p.Mapped(i); err != nil {
			return err
		}
	}
	return nil
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
