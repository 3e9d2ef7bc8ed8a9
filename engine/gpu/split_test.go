package gpu

import (
	"bytes"
	"testing"
)

// TestSplitWeights: the GPU's copy of a Phi-3 model's layers holds q, k,
// v, gate and up as the fused matrices' rows in order (q, k, v; gate, up),
// drops the fused tensors so nothing uploads twice, and leaves the
// model's own weights as they were.
func TestSplitWeights(t *testing.T) {
	t.Parallel()
	cpu := tinyModel(t, "phi3", "q4_k_m")
	cfg := cpu.Config
	w := splitWeights(&cfg, cpu.Weights)
	for i := range w.Layers {
		src, got := &cpu.Weights.Layers[i], &w.Layers[i]
		if src.QKV.Data == nil || src.Q.Data != nil {
			t.Fatalf("layer %d: the model's own layer changed", i)
		}
		if got.QKV.Data != nil || got.GateUp.Data != nil {
			t.Fatalf("layer %d: fused tensors kept", i)
		}
		qkv := append(append(append([]byte(nil), got.Q.Data...), got.K.Data...), got.V.Data...)
		gu := append(append([]byte(nil), got.Gate.Data...), got.Up.Data...)
		if !bytes.Equal(qkv, src.QKV.Data) || !bytes.Equal(gu, src.GateUp.Data) {
			t.Fatalf("layer %d: the views are not the fused matrices' rows in order", i)
		}
		if got.Q.Rows != cfg.QDim() || got.K.Rows != cfg.KVDim() || got.V.Rows != cfg.KVDim() || got.Gate.Rows != cfg.FFN || got.Up.Rows != cfg.FFN {
			t.Fatalf("layer %d: view shapes q %d k %d v %d gate %d up %d", i, got.Q.Rows, got.K.Rows, got.V.Rows, got.Gate.Rows, got.Up.Rows)
		}
		var n int64
		for _, tn := range layerTensors(got, kindOf(&cfg)) {
			if tn.Data == nil {
				t.Fatalf("layer %d: %s has no data", i, tn.Name)
			}
			n += int64(len(tn.Data))
		}
		want := int64(len(src.AttnNorm.Data) + len(src.QKV.Data) + len(src.O.Data) + len(src.FFNNorm.Data) + len(src.GateUp.Data) + len(src.Down.Data))
		if n != want {
			t.Fatalf("layer %d: %d bytes to upload, the layer holds %d", i, n, want)
		}
	}
}
