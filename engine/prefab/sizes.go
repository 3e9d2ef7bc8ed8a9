package prefab

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostmem"
)

// SizesFromGGUF computes the sizes a pool written from f with prefab type
// typ would have (extent lengths with the pool's alignment), so a GGUF can
// be planned before it is prefabbed. It also returns the model's config.
func SizesFromGGUF(f *gguf.File, typ string) (tier.Sizes, model.Config, error) {
	cfg, err := model.ConfigFromGGUF(f)
	if err != nil {
		return tier.Sizes{}, cfg, err
	}
	byType := map[quant.Type]int64{}
	// vector says which tensors stay as they are (norms, biases, as
	// writeLayer keeps them); the rest take the pool's type.
	extent := func(names []string, vector []bool) (int64, int64, error) {
		var pos, out int64
		for j, n := range names {
			ti, ok := f.Tensor(n)
			if !ok {
				return 0, 0, fmt.Errorf("missing tensor %s", n)
			}
			t := ti.Type
			if !vector[j] && !strings.HasSuffix(n, "norm.weight") {
				if t, err = matrixType(typ, ti.Type, int(ti.Dims[0])); err != nil {
					return 0, 0, err
				}
			}
			byType[t] += sz0(t, ti.Dims)
			sz, err := t.TensorBytes(ti.Dims)
			if err != nil {
				return 0, 0, fmt.Errorf("tensor %s: %w", n, err)
			}
			pos = hostmem.AlignUp(pos, TensorAlign) + sz
			if n != "token_embd.weight" || cfg.TiedOutput {
				out += sz
			}
		}
		return hostmem.AlignUp(max(pos, 1), ExtentAlign), out, nil
	}
	var s tier.Sizes
	var err2 error
	globals := globalNames(cfg.TiedOutput)
	if s.Globals, s.Output, err2 = extent(globals, make([]bool, len(globals))); err2 != nil {
		return s, cfg, err2
	}
	clear(byType) // the dominant type is a layer's, not the embedding's
	order := layerOrder(cfg.Arch)
	s.Layers = make([]int64, cfg.Layers)
	for i := range s.Layers {
		names := make([]string, len(order))
		vector := make([]bool, len(order))
		for j, r := range order {
			names[j] = "blk." + strconv.Itoa(i) + "." + r.suffix
			vector[j] = r.norm
		}
		if s.Layers[i], _, err2 = extent(names, vector); err2 != nil {
			return s, cfg, err2
		}
		if i == 0 {
			s.Type = heaviest(byType)
		}
	}
	return s, cfg, nil
}

// sz0 is TensorBytes without the error (callers check it right after).
func sz0(t quant.Type, dims []uint64) int64 {
	n, _ := t.TensorBytes(dims)
	return n
}

// heaviest returns the type with the most bytes (ties: lower id).
func heaviest(by map[quant.Type]int64) quant.Type {
	var best quant.Type
	var n int64 = -1
	for t, b := range by {
		if b > n || b == n && t < best {
			best, n = t, b
		}
	}
	return best
}
