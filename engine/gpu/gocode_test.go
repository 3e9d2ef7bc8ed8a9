package gpu

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
)

// TestGocodeHybrid: the real gocode-29m model (STRATA_GOCODE_GGUF; the
// test skips without it) with 14 of its 16 layers streamed from tier B
// and the CPU computing the FFN of every other streamed layer gives the
// same greedy tokens as the CPU reference — its golden file's 3 x 64,
// which the trained PyTorch model chose — and logits within the GPU
// backend's bound of the reference's.
func TestGocodeHybrid(t *testing.T) {
	path := os.Getenv("STRATA_GOCODE_GGUF")
	if path == "" {
		t.Skip("STRATA_GOCODE_GGUF is not set (path of ../shared/models/gocode-29m-f16.gguf)")
	}
	gpu(t)
	raw, err := os.ReadFile(strings.TrimSuffix(path, ".gguf") + ".golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Golden []struct {
			Prompt []int32 `json:"prompt"`
			Greedy []int32 `json:"greedy"`
		} `json:"golden"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	cpu, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	var streamed, onCPU []int
	for l := 2; l < cpu.Config.Layers; l++ {
		streamed = append(streamed, l)
		if l%2 == 1 {
			onCPU = append(onCPU, l)
		}
	}
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, MaxContext: 256, StreamLayers: streamed, Slots: 2, Hybrid: &Hybrid{Plans: [][]int{onCPU}}})
	ctx := context.Background()
	worst := 0.0
	for pi, gp := range golden.Golden {
		gs, err := g.NewSequence(0)
		if err != nil {
			t.Fatal(err)
		}
		cs := cpu.NewSequence(0)
		toks := gp.Prompt
		for i, want := range gp.Greedy {
			gb := []model.Step{{Seq: gs, Tokens: toks}}
			cb := []model.Step{{Seq: cs, Tokens: toks}}
			if err := g.Forward(ctx, gb); err != nil {
				t.Fatal(err)
			}
			if err := cpu.Forward(ctx, cb); err != nil {
				t.Fatal(err)
			}
			e := quant.NMSE(gb[0].Logits[0], cb[0].Logits[0])
			worst = max(worst, e)
			if e > maxNMSE {
				t.Fatalf("prompt %d token %d: logits NMSE %.3g against the CPU reference", pi, i, e)
			}
			if got, ref := sample.Argmax(gb[0].Logits[0]), sample.Argmax(cb[0].Logits[0]); got != want || ref != want {
				t.Fatalf("prompt %d token %d: hybrid %d, CPU reference %d, golden %d", pi, i, got, ref, want)
			}
			toks = []int32{want}
		}
		gs.Close()
	}
	st := g.HybridStats()
	t.Logf("3 x 64 golden tokens; worst NMSE %.3g; CPU share %+v", worst, st)
	if st.Layers == 0 {
		t.Fatal("the CPU computed no FFN")
	}
}
