package stream

import (
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
)

// LayerStore is what the pipeline needs from a model stored as layer
// extents. engine/prefab's Pool implements it; tests build small ones.
// Implementations must be safe for concurrent use (the pipeline's stages
// run on separate goroutines).
type LayerStore interface {
	// NumLayers is the number of transformer blocks.
	NumLayers() int
	// Extent returns layer i's bytes within the pool: one sequential read.
	Extent(i int) tier.Extent
	// Mapped returns a zero-copy view of layer i's extent (the tier B
	// source), checksum-verified on first use.
	Mapped(i int) ([]byte, error)
	// Verify checks the checksum of layer i's bytes read from storage
	// (tier C). b is exactly Extent(i).Length long.
	Verify(i int, b []byte) error
	// Decode returns model.Layer views over an extent's bytes; the views
	// are valid while b is.
	Decode(i int, b []byte) (*model.Layer, error)
}
