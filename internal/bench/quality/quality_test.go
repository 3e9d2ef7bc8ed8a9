package quality

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/synth"
)

// TestRun: on a tiny synthetic model and a small text tree, every figure
// is in range (KL ≥ 0 and 0 for nothing changed, agreement in [0, 1],
// perplexities positive), the held-out files are the last matching ones,
// the skipped layers are the most similar, and the draft model that is the
// model itself is accepted every time.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := filepath.Join(dir, "tiny.gguf")
	if err := synth.Write(m, synth.Options{Arch: "llama", Shape: "tiny", Type: "f32", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "text")
	for i, name := range []string{"a/one.go", "a/one_test.go", "b/two.go", "b/two_test.go", "c/three_test.go"} {
		p := filepath.Join(text, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		body := strings.Repeat("func f"+string(rune('a'+i))+"() { return x + y }\n", 40)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Run(context.Background(), Options{Model: m, Draft: m, Types: []string{"keep", "q8_0"}, Text: text,
		Tokens: 300, Window: 64, Skip: []int{1}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text.Last != "c/three_test.go" || r.Text.Tokens != 300 || r.Text.Windows != 5 || r.Text.Calibration == "" {
		t.Errorf("text %+v", r.Text)
	}
	if !(r.Perplexity > 1) || len(r.Variants) != 3 || len(r.Drafters) != 3 || len(r.Cosines) != 2 {
		t.Fatalf("report %+v", r)
	}
	for _, v := range r.Variants {
		if !(v.KL >= 0) || v.Top1 < 0 || v.Top1 > 1 || !(v.Perplexity > 1) {
			t.Errorf("variant %+v", v)
		}
	}
	if k := r.Variants[0]; k.KL > 1e-4 || k.Top1 < 0.99 {
		t.Errorf("the keep pool drifts from the reference: %+v", k)
	}
	most := 0
	if r.Cosines[1] > r.Cosines[0] {
		most = 1
	}
	if s := r.Variants[2]; len(s.Skipped) != 1 || s.Skipped[0] != most || !(s.KL > 0) {
		t.Errorf("skip: %+v with cosines %v", s, r.Cosines)
	}
	// Decode speed is timed for the base and every skip count, not for
	// the pool types.
	if !(r.TokensPerSecond > 0) || !(r.Variants[2].TokensPerSecond > 0) || r.Variants[0].TokensPerSecond != 0 {
		t.Errorf("decode speeds: base %g, variants %+v", r.TokensPerSecond, r.Variants)
	}
	if d := r.Drafters[0]; d.Greedy != 1 || d.Coverage != 1 || math.Abs(d.PerPass-5) > 1e-9 {
		t.Errorf("the model drafting for itself: %+v", d)
	}
	if _, err := Run(context.Background(), Options{Model: m, Text: text, Skip: []int{2}, Tokens: 100, Window: 64}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("skipping every layer: %v", err)
	}
	if _, err := Run(context.Background(), Options{Model: m, Text: t.TempDir()}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("an empty text directory: %v", err)
	}
}
