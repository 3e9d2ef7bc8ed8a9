package model

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
)

// gocodeGolden is a real model's golden file (../shared/models): per
// prompt, the greedy tokens its trained PyTorch model chose in fp32.
type gocodeGolden struct {
	Golden []struct {
		Prompt []int32 `json:"prompt"`
		Greedy []int32 `json:"greedy"`
	} `json:"golden"`
}

// gocodePath is the real gocode-29m model: STRATA_GOCODE_GGUF, or the
// shared models directory beside the checkout; the test skips without it.
func gocodePath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("STRATA_GOCODE_GGUF")
	if p == "" {
		p = filepath.Join("..", "..", "..", "shared", "models", "gocode-29m-f16.gguf")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no gocode-29m model (set STRATA_GOCODE_GGUF): %v", err)
	}
	return p
}

// TestGocodeGolden: the real gocode-29m model reproduces its golden greedy
// tokens (3 prompts x 64 tokens) on quant's reference and on every gemv
// kernel family (under the race detector, the best family only).
func TestGocodeGolden(t *testing.T) {
	t.Parallel()
	path := gocodePath(t)
	raw, err := os.ReadFile(strings.TrimSuffix(path, ".gguf") + ".golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g gocodeGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	impls := append([]gemv.Impl{-1}, gemv.Impls()...) // -1: the reference
	if raceEnabled {
		impls = []gemv.Impl{gemv.Detect()}
	}
	for _, impl := range impls {
		name := "reference"
		if impl >= 0 {
			name = impl.String()
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if impl >= 0 {
				m.UseGEMV(impl)
			}
			for pi, gp := range g.Golden {
				seq := m.NewSequence(0)
				toks := gp.Prompt
				for i, want := range gp.Greedy {
					b := []Step{{Seq: seq, Tokens: toks}}
					if err := m.Forward(context.Background(), b); err != nil {
						t.Fatal(err)
					}
					if got := int32(argmax(b[0].Logits[0])); got != want {
						t.Fatalf("prompt %d token %d: %d, golden %d", pi, i, got, want)
					}
					toks = []int32{want}
				}
			}
		})
	}
}
