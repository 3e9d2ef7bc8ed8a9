// Package gocodetest finds the real gocode-29m model of the shared models
// directory and its golden greedy continuations, for tests that hold a
// serving path (a pool file, a pool on an NVMe volume, the GPU) to what
// the trained model chose.
package gocodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
)

// File is the model's file name in the shared models directory.
const File = "gocode-29m-f16.gguf"

// Golden is one prompt and the greedy tokens the trained PyTorch model
// chose after it (in fp32).
type Golden struct {
	Prompt []int32 `json:"prompt"`
	Greedy []int32 `json:"greedy"`
}

// Path is the gocode-29m GGUF: STRATA_GOCODE_GGUF, or shared/models/File in
// the working directory or one of its parents (the shared directory sits
// beside the checkout, which may be a worktree a few levels deeper). The
// test skips when there is none.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STRATA_GOCODE_GGUF"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("STRATA_GOCODE_GGUF: %v", err)
		}
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Skipf("no gocode-29m model: %v", err)
	}
	for {
		p := filepath.Join(dir, "shared", "models", File)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Skipf("no gocode-29m model (set STRATA_GOCODE_GGUF, or put shared/models/%s beside the checkout)", File)
		}
		dir = up
	}
}

// Goldens reads the golden file beside the GGUF at path (under the race
// detector, the first prompt's first tokens only).
func Goldens(t testing.TB, path string) []Golden {
	t.Helper()
	return GoldensFile(t, strings.TrimSuffix(path, ".gguf")+".golden.json")
}

// GoldensFile reads a golden file (under the race detector, the first
// prompt's first tokens only).
func GoldensFile(t testing.TB, file string) []Golden {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Golden []Golden `json:"golden"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Golden) == 0 {
		t.Fatal("golden file holds no prompts")
	}
	if Race {
		g.Golden = g.Golden[:1]
		g.Golden[0].Greedy = g.Golden[0].Greedy[:min(8, len(g.Golden[0].Greedy))]
	}
	return g.Golden
}

// Pool converts the GGUF at path into a prefab pool in dir, keeping the
// weights' type (f16), and returns the pool's path.
func Pool(t testing.TB, path, dir string) string {
	t.Helper()
	g, err := gguf.Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(path), ".gguf")+".pool")
	if err := prefab.WritePool(g, out, prefab.Options{Type: prefab.TypeKeep}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Greedy feeds prompt to m and returns the n tokens greedy decoding picks
// after it.
func Greedy(ctx context.Context, m *model.Model, prompt []int32, n int) ([]int32, error) {
	seq := m.NewSequence(0)
	defer seq.Close()
	out := make([]int32, 0, n)
	toks := prompt
	for range n {
		b := []model.Step{{Seq: seq, Tokens: toks}}
		if err := m.Forward(ctx, b); err != nil {
			return out, err
		}
		if len(b[0].Logits) == 0 {
			return out, fmt.Errorf("no logits after %d tokens", len(out))
		}
		l := b[0].Logits[len(b[0].Logits)-1]
		best := 0
		for i, x := range l {
			if x > l[best] {
				best = i
			}
		}
		out = append(out, int32(best))
		toks = []int32{int32(best)}
	}
	return out, nil
}

// Check compares got with the golden continuation of prompt number i.
func Check(t testing.TB, label string, i int, g Golden, got []int32) {
	t.Helper()
	for j := range g.Greedy {
		if j >= len(got) || got[j] != g.Greedy[j] {
			t.Fatalf("%s: prompt %d: token %d is %v, golden %d (got %v)", label, i, j, at(got, j), g.Greedy[j], got)
		}
	}
}

func at(s []int32, i int) any {
	if i < len(s) {
		return s[i]
	}
	return "missing"
}
