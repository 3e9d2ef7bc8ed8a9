package cpubench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/internal/synth"
)

// TestMeasureDecodeBytes: the bytes a decode step reads are the file's
// tensors less the embedding table for a dense model, and, for a mixture
// of experts, the experts its tokens were routed to instead of them all:
// each token's picks in each layer, all one size in the tiny shape. The
// prefill request after it runs the prompt length asked for and decodes
// after it.
func TestMeasureDecodeBytes(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"llama", "mixtral"} {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), arch+".gguf")
			if err := synth.Write(path, synth.Options{Arch: arch, Shape: "tiny", Type: "q8_0", Seed: 2}); err != nil {
				t.Fatal(err)
			}
			d, err := MeasureDecode(context.Background(), path, 4, 20, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if d.PromptTokens != 20 || d.PrefillTokensPerSecond <= 0 || d.ContextTokensPerSecond <= 0 {
				t.Fatalf("prefill of %d tokens at %.1f tokens/s, decode after it at %.1f, want 20 tokens", d.PromptTokens, d.PrefillTokensPerSecond, d.ContextTokensPerSecond)
			}
			if d.TokensPerSecond <= 0 || d.BytesPerSecond != d.TokensPerSecond*float64(d.WeightBytes) {
				t.Fatalf("%.1f tokens/s, %.0f bytes/s for %d bytes a step", d.TokensPerSecond, d.BytesPerSecond, d.WeightBytes)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			c, w := &m.Config, m.Weights
			dense := st.Size() - int64(len(w.Embed.Data))
			if !c.MoE() {
				if d.WeightBytes != dense || d.RoutedBytes != 0 {
					t.Fatalf("dense: %d bytes a step (%d routed), want %d", d.WeightBytes, d.RoutedBytes, dense)
				}
				return
			}
			x := &w.Layers[0].Experts[0]
			one := x.Bytes()
			all := one * int64(c.Layers*c.Experts)
			routed := one * int64(c.Layers*c.ExpertsUsed)
			if d.RoutedBytes != routed || d.WeightBytes != dense-all+routed {
				t.Fatalf("moe: %d bytes a step, %d of them routed; want %d, %d (%d experts of %d bytes, %d picked)",
					d.WeightBytes, d.RoutedBytes, dense-all+routed, routed, c.Experts, one, c.ExpertsUsed)
			}
		})
	}
}

// TestMeasureDecodeImpl: the decode runs the kernel family asked for (its
// report names it), and a family this CPU does not run is refused as a
// bad option before the model is opened.
func TestMeasureDecodeImpl(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.gguf")
	if err := synth.Write(path, synth.Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	d, err := MeasureDecode(context.Background(), path, 2, 0, "go", 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kernels != "gemv go" || d.TokensPerSecond <= 0 {
		t.Fatalf("kernels %q at %.1f tokens/s, want gemv go", d.Kernels, d.TokensPerSecond)
	}
	if _, err := MeasureDecode(context.Background(), path, 2, 0, "sse9", 0); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("kernel family sse9: %v, want ErrBadOptions", err)
	}
}
