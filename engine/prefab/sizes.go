package prefab

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
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
	// A name is a GGUF tensor, or "merged/n": one expert's slab of the
	// merged tensor merged, n experts in all. vector says which tensors
	// stay as they are (norms, biases, as writeLayer keeps them); the rest
	// take the pool's type.
	extent := func(names []string, vector []bool) (int64, int64, error) {
		var pos, out int64
		for j, n := range names {
			name, experts, _ := strings.Cut(n, "/")
			ti, ok := f.Tensor(name)
			if !ok {
				return 0, 0, fmt.Errorf("missing tensor %s", name)
			}
			dims := ti.Dims
			if experts != "" {
				if len(dims) != 3 || strconv.FormatUint(dims[2], 10) != experts {
					return 0, 0, fmt.Errorf("tensor %s has dims %v, want %s experts", name, dims, experts)
				}
				dims = dims[:2]
			}
			t := ti.Type
			if !vector[j] && !strings.HasSuffix(n, "norm.weight") {
				if t, err = matrixType(typ, ti.Type, int(ti.Dims[0])); err != nil {
					return 0, 0, err
				}
			}
			byType[t] += sz0(t, dims)
			sz, err := t.TensorBytes(dims)
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
	names := func(i int, order []role) ([]string, []bool) {
		ns, vector := make([]string, len(order)), make([]bool, len(order))
		for j, r := range order {
			ns[j] = "blk." + strconv.Itoa(i) + "." + r.suffix
			if r.merged != "" {
				ns[j] = "blk." + strconv.Itoa(i) + "." + r.merged + "/" + strconv.Itoa(cfg.Experts)
			}
			vector[j] = r.norm
		}
		return ns, vector
	}
	order := layerOrder(&cfg)
	s.Layers = make([]int64, cfg.Layers)
	if cfg.MoE() {
		s.Experts = make([][]int64, cfg.Layers)
	}
	for i := range s.Layers {
		if s.Layers[i], _, err2 = extent(names(i, order)); err2 != nil {
			return s, cfg, err2
		}
		for e := range cfg.Experts {
			n, _, err := extent(names(i, expertOrder(&cfg, e)))
			if err != nil {
				return s, cfg, err
			}
			s.Experts[i] = append(s.Experts[i], n)
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

// SizesFromModel computes the sizes a pool written from mod with prefab
// type typ would have, as SizesFromGGUF does for a GGUF: a model loaded
// from another format (a Hugging Face directory) is planned the same way.
func SizesFromModel(mod *model.Model, typ string) (tier.Sizes, error) {
	if mod == nil {
		return tier.Sizes{}, fmt.Errorf("sizes: nil model")
	}
	if typ == "" {
		typ = TypeKeep
	}
	man, exts, err := planPool(mod, &tokenizer.Vocab{}, Options{Type: typ})
	if err != nil {
		return tier.Sizes{}, fmt.Errorf("sizes: %w", err)
	}
	cfg := &mod.Config
	s := tier.Sizes{Globals: man.Globals.Length, Layers: make([]int64, len(man.Layers))}
	for _, t := range man.Globals.Tensors {
		if t.Name != "token_embd.weight" || cfg.TiedOutput {
			s.Output += t.Bytes
		}
	}
	if cfg.MoE() {
		s.Experts = make([][]int64, len(man.Layers))
	}
	for i := range man.Layers {
		s.Layers[i] = man.Layers[i].Length
		for _, x := range man.Layers[i].Experts {
			s.Experts[i] = append(s.Experts[i], x.Length)
		}
	}
	if len(exts) > 1 {
		by := map[quant.Type]int64{}
		for _, t := range exts[1].tensors { // layer 0's own extent
			by[t.typ] += t.sz
		}
		s.Type = heaviest(by)
	}
	return s, nil
}
