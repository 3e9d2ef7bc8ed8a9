package engine_test

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/synth"
)

// dequantized returns an F32 copy of t holding exactly the values t encodes.
func dequantized(t *testing.T, src model.Tensor) model.Tensor {
	t.Helper()
	if src.Data == nil {
		return src
	}
	vals := make([]float32, src.Rows*src.Cols)
	if err := quant.DequantizeRows(src.Type, src.Data, src.Cols, vals); err != nil {
		t.Fatalf("dequantizing %s: %v", src.Name, err)
	}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return model.Tensor{Name: src.Name, Type: quant.F32, Rows: src.Rows, Cols: src.Cols, Data: b}
}

// f32Twin builds a model whose every tensor is the F32 dequantization of
// m's: the fp32 forward on the dequantized weights.
func f32Twin(t *testing.T, m *model.Model) *model.Model {
	t.Helper()
	w := m.Weights
	tw := &model.Weights{Embed: dequantized(t, w.Embed), OutputNorm: w.OutputNorm}
	if m.Config.TiedOutput {
		tw.Output = tw.Embed
	} else {
		tw.Output = dequantized(t, w.Output)
	}
	for _, l := range w.Layers {
		tw.Layers = append(tw.Layers, model.Layer{
			AttnNorm: l.AttnNorm, PostAttnNorm: l.PostAttnNorm, FFNNorm: l.FFNNorm, PostFFNNorm: l.PostFFNNorm,
			QBias: l.QBias, KBias: l.KBias, VBias: l.VBias, QNorm: l.QNorm, KNorm: l.KNorm,
			Q: dequantized(t, l.Q), K: dequantized(t, l.K), V: dequantized(t, l.V), O: dequantized(t, l.O),
			Gate: dequantized(t, l.Gate), Up: dequantized(t, l.Up), Down: dequantized(t, l.Down),
			QKV: dequantized(t, l.QKV), GateUp: dequantized(t, l.GateUp),
		})
	}
	twin, err := model.New(m.Config, tw)
	if err != nil {
		t.Fatalf("building the f32 twin: %v", err)
	}
	return twin
}

// TestQuantizedAgainstDequantizedF32 runs each quantized tiny model and an
// F32 model holding its dequantized weights: the quantized kernels must give
// the fp32 result (NMSE <= 1e-9 per step) and the same 32 greedy tokens.
func TestQuantizedAgainstDequantizedF32(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"llama", "gemma2", "gemma3", "mistral", "phi3", "qwen2", "qwen3"} {
		for _, typ := range []string{"f16", "q8_0", "q4_k_m"} {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				path := filepath.Join(t.TempDir(), "m.gguf")
				if err := synth.Write(path, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: 7}); err != nil {
					t.Fatal(err)
				}
				e, err := engine.Open(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				e.Model.UseReference() // quant's kernels are under test, not engine/gemv's
				quantized := false
				for _, l := range e.Model.Weights.Layers {
					if l.Q.Type != quant.F32 || l.QKV.Data != nil && l.QKV.Type != quant.F32 {
						quantized = true
					}
				}
				if !quantized {
					t.Fatalf("%s model has F32 attention weights", typ)
				}
				prompt := e.Tok.Encode("Layers stream from storage to the device while the previous one computes.", true, false)
				got, gotToks := greedyLogits(t, e.Model, prompt, 32)
				want, wantToks := greedyLogits(t, f32Twin(t, e.Model), prompt, 32)
				worst := 0.0
				for s := range want {
					n := quant.NMSE(got[s], want[s])
					worst = math.Max(worst, n)
					if n > 1e-9 {
						t.Errorf("step %d: NMSE %.3g > 1e-9", s, n)
					}
				}
				if !equalIDs(gotToks, wantToks) {
					t.Errorf("greedy tokens differ:\n got %v\nwant %v", gotToks, wantToks)
				}
				t.Logf("worst NMSE %.3g over 32 steps", worst)
			})
		}
	}
}
