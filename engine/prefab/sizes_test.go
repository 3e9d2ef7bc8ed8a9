package prefab

import (
	"reflect"
	"testing"

	"github.com/strata-llm/strata/engine/model"
)

// TestSizesFromGGUFMatchPool checks that the sizes planned from a GGUF, and
// from the model loaded from it, are the ones the pool written from it has.
func TestSizesFromGGUFMatchPool(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ arch, typ string }{{"llama", TypeKeep}, {"llama", TypeQ4_K}, {"mixtral", TypeKeep}, {"mixtral", TypeQ8_0}} {
		typ := c.typ
		path, src := prefab(t, t.TempDir(), c.arch, "q4_k_m", typ)
		p, err := OpenPool(path)
		if err != nil {
			t.Fatal(err)
		}
		got, cfg, err := SizesFromGGUF(src.File, typ)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Sizes()
		mod, err := model.LoadGGUF(src)
		if err != nil {
			t.Fatal(err)
		}
		if fromModel, err := SizesFromModel(mod, typ); err != nil || !reflect.DeepEqual(fromModel, got) {
			t.Errorf("%s %s: sizes from the loaded model %+v (%v), from the GGUF %+v", c.arch, typ, fromModel, err, got)
		}
		if cfg.Layers != len(want.Layers) || got.Globals != want.Globals || got.Output != want.Output || got.Type != want.Type {
			t.Errorf("%s: GGUF sizes %+v, pool %+v", typ, got, want)
		}
		for i := range want.Layers {
			if got.Layers[i] != want.Layers[i] {
				t.Errorf("%s: layer %d: GGUF estimate %d, pool %d", typ, i, got.Layers[i], want.Layers[i])
			}
		}
		if !reflect.DeepEqual(got.Experts, want.Experts) || (c.arch == "mixtral") != (len(want.Experts) == cfg.Layers) {
			t.Errorf("%s %s: GGUF expert estimates %v, pool %v", c.arch, typ, got.Experts, want.Experts)
		}
		p.Close()
	}
}
