package gpu

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TestPackedLayout checks, without a GPU, what PackBF16 puts in pinned host
// memory for the tiny bf16 models: every matrix packed smaller, decoding
// (engine/quant's validating decoder) to the original bytes at the offset
// the layer's device description points at, the norms copied raw, and
// PackedLayerBytes agreeing with the load-time plan; Qwen2's biases and
// Qwen3's and Gemma 3's q/k norms are copied raw as the norms are.
func TestPackedLayout(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"llama", "gemma2", "gemma3", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			cpu := tinyModel(t, arch, "bf16")
			w := cpu.Weights
			gemma := kindOf(&cpu.Config)
			sizes, _, scratch, err := PackedLayerBytes(cpu.Config, w)
			if err != nil {
				t.Fatal(err)
			}
			m := &Model{Config: cpu.Config, opts: Options{PackBF16: true}}
			streamed := make([]bool, len(w.Layers))
			streamed[len(streamed)-1] = true
			pk, err := m.planPacking(w, streamed, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range w.Layers {
				raw := layerSize(&w.Layers[i], gemma)
				if sizes[i] >= raw {
					t.Errorf("layer %d: packed %d bytes, raw %d", i, sizes[i], raw)
				}
				if pl := pk.layer(i); (pl != nil) != streamed[i] {
					t.Errorf("layer %d: packed %v, streamed %v", i, pl != nil, streamed[i])
				}
			}
			i := len(w.Layers) - 1
			L := &w.Layers[i]
			pl := pk.layer(i)
			if pl.size != sizes[i] || pk.scratchBytes() != scratch {
				t.Errorf("plan: layer %d bytes, scratch %d; PackedLayerBytes: %d, %d", pl.size, pk.scratchBytes(), sizes[i], scratch)
			}
			t.Logf("layer %d: %d bytes packed, %d raw (%.4f); decode scratch %d bytes", i, pl.size, layerSize(L, gemma), float64(pl.size)/float64(layerSize(L, gemma)), scratch)
			host := make([]byte, pl.size+64)
			if err := pl.write(host, L, gemma); err != nil {
				t.Fatal(err)
			}
			lw := pl.layerAt(L, gemma)
			mats := []struct {
				name string
				t    *model.Tensor
				off  int64
			}{{"q", &L.Q, int64(lw.q.Ptr)}, {"k", &L.K, int64(lw.k.Ptr)}, {"v", &L.V, int64(lw.v.Ptr)}, {"o", &L.O, int64(lw.o.Ptr)},
				{"gate", &L.Gate, int64(lw.gate.Ptr)}, {"up", &L.Up, int64(lw.up.Ptr)}, {"down", &L.Down, int64(lw.down.Ptr)}}
			for j, mt := range mats {
				pm := pl.mats[j]
				if pm.off != mt.off || pm.n != int64(len(mt.t.Data))/2 {
					t.Fatalf("%s: plan at %d (%d values), layer description at %d (%d values)", mt.name, pm.off, pm.n, mt.off, len(mt.t.Data)/2)
				}
				got := make([]byte, len(mt.t.Data))
				if err := quant.UnpackBF16(got, host[pm.off:pm.off+pm.size]); err != nil {
					t.Fatalf("%s: %v", mt.name, err)
				}
				if string(got) != string(mt.t.Data) {
					t.Fatalf("%s: decoded bytes differ", mt.name)
				}
			}
			if n := len(L.AttnNorm.Data); string(host[lw.attnNorm:int(lw.attnNorm)+n]) != string(L.AttnNorm.Data) {
				t.Error("attention norm not copied raw")
			}
			if n := len(L.FFNNorm.Data); string(host[lw.ffnNorm:int(lw.ffnNorm)+n]) != string(L.FFNNorm.Data) {
				t.Error("ffn norm not copied raw")
			}
			for _, v := range []struct {
				name string
				t    *model.Tensor
				at   cudadrv.DevPtr
			}{{"q bias", &L.QBias, lw.qBias}, {"k bias", &L.KBias, lw.kBias}, {"v bias", &L.VBias, lw.vBias},
				{"q norm", &L.QNorm, lw.qNorm}, {"k norm", &L.KNorm, lw.kNorm}} {
				if (v.t.Data != nil) != (v.at != 0) {
					t.Fatalf("%s: %d bytes in the layer, described at %d", v.name, len(v.t.Data), v.at)
				}
				if n := len(v.t.Data); n > 0 && string(host[v.at:int(v.at)+n]) != string(v.t.Data) {
					t.Errorf("%s not copied raw", v.name)
				}
			}
		})
	}
}

// TestPackedStreamed: the packed streamed path gives logits bit-identical
// to the plain streamed path (same kernels on the same decoded values) for
// a 16-token prompt (GEMM) and 24 greedy decode steps (GEMV), on tiny llama
// and gemma2 in bf16, with fewer bytes streamed; both within maxNMSE of the
// CPU reference.
func TestPackedStreamed(t *testing.T) {
	gpu(t)
	for _, tc := range []struct {
		arch   string
		layers []int
		slots  int
	}{
		{"llama", []int{0, 1}, 1},
		{"llama", []int{1}, 2},
		{"gemma2", []int{0, 2, 3}, 2},
		{"gemma2", []int{0, 1, 2, 3}, 3},
	} {
		t.Run(fmt.Sprintf("%s/%v/k=%d", tc.arch, tc.layers, tc.slots), func(t *testing.T) {
			cpu := tinyModel(t, tc.arch, "bf16")
			raw := loadGPU(t, cpu, Options{StreamLayers: tc.layers, Slots: tc.slots})
			pk := loadGPU(t, cpu, Options{StreamLayers: tc.layers, Slots: tc.slots, PackBF16: true})
			if pk.pk == nil || pk.StreamedBytes() >= raw.StreamedBytes() {
				t.Fatalf("packed model streams %d bytes per pass, raw %d (packing on: %v)", pk.StreamedBytes(), raw.StreamedBytes(), pk.pk != nil)
			}
			t.Logf("streamed per pass: %d bytes packed, %d raw (%.4f)", pk.StreamedBytes(), raw.StreamedBytes(), float64(pk.StreamedBytes())/float64(raw.StreamedBytes()))
			worst := greedyCompare(t, cpu, []*Model{raw, pk}, promptTokens(cpu.Config.Vocab, 16, 2), 8)
			t.Logf("worst NMSE vs CPU: raw %.3g, packed %.3g", worst[0], worst[1])
			// Bit-identical logits, prompt and decode, on fresh sequences.
			ctx := context.Background()
			rs, err := raw.NewSequence(0)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			ps, err := pk.NewSequence(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ps.Close()
			rb := []model.Step{{Seq: rs, Tokens: promptTokens(cpu.Config.Vocab, 16, 3), AllLogits: true}}
			pb := []model.Step{{Seq: ps, Tokens: rb[0].Tokens, AllLogits: true}}
			for step := 0; step < 25; step++ {
				if err := raw.Forward(ctx, rb); err != nil {
					t.Fatal(err)
				}
				if err := pk.Forward(ctx, pb); err != nil {
					t.Fatal(err)
				}
				for r := range rb[0].Logits {
					for j, v := range rb[0].Logits[r] {
						if math.Float32bits(v) != math.Float32bits(pb[0].Logits[r][j]) {
							t.Fatalf("step %d row %d logit %d: packed %v, raw %v", step, r, j, pb[0].Logits[r][j], v)
						}
					}
				}
				next := sample.Argmax(rb[0].Logits[len(rb[0].Logits)-1])
				rb[0] = model.Step{Seq: rs, Tokens: []int32{next}}
				pb[0] = model.Step{Seq: ps, Tokens: []int32{next}}
			}
		})
	}
}
