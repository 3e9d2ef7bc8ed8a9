package model

import (
	"context"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
)

// TestFFNDeviceGateUp: the CPU's share of a split layer. GateUp from any
// row gives exactly the tail of the activations from row 0 (rows are
// independent products of the same quantized input), and the down product
// of those activations plus the residual is, bit for bit, what FFN
// computes for the layer: a GPU that computes rows [0, lo) the same way
// and adds the CPU's rows gets the whole FFN. Bad arguments are refused.
func TestFFNDeviceGateUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, arch := range []string{ArchLlama, ArchGemma2, ArchPhi3} {
		for _, typ := range []string{"f16", "q4_k_m"} {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				t.Parallel()
				m, err := Open(synthModel(t, arch, typ))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				c := m.Config
				m.UseGEMV(gemv.Detect())
				dev, err := NewFFNDevice(c, gemv.Detect())
				if err != nil {
					t.Fatal(err)
				}
				const l = 1
				w := c.SplitFused(&m.Weights.Layers[l])
				w.GateUp = Tensor{}
				h := randomVector(c.Dim, 7)
				all := make([]float32, c.FFN)
				if err := dev.GateUp(ctx, l, &w, h, 0, all); err != nil {
					t.Fatal(err)
				}
				for _, lo := range []int{1, c.FFN / 2, c.FFN - 1} {
					part := make([]float32, c.FFN-lo)
					if err := dev.GateUp(ctx, l, &w, h, lo, part); err != nil {
						t.Fatal(err)
					}
					for i, v := range part {
						if v != all[lo+i] {
							t.Fatalf("from row %d: activation %d = %g, from row 0 %g", lo, lo+i, v, all[lo+i])
						}
					}
				}
				// down(all) + post-norm + residual against the whole FFN.
				want := [][]float32{append([]float32(nil), h...)}
				if err := m.FFN(ctx, l, &m.Weights.Layers[l], want); err != nil {
					t.Fatal(err)
				}
				m.prepare(1, 0)
				sc := &m.sc
				got := append([]float32(nil), h...)
				if err := m.matmul(matOp{&w.Down, [][]float32{all}, sc.tmp[:1]}); err != nil {
					t.Fatal(err)
				}
				if c.PostNorms() {
					m.norm(sc.tmp[:1], sc.tmp[:1], &w.PostFFNNorm)
				}
				axpy(got, 1, sc.tmp[0])
				for i := range got {
					if got[i] != want[0][i] {
						t.Fatalf("element %d: split %g, FFN %g", i, got[i], want[0][i])
					}
				}
				for _, tc := range []struct {
					name string
					l    int
					h    []float32
					lo   int
					out  int
				}{
					{"layer", c.Layers, h, 0, c.FFN},
					{"row width", l, h[1:], 0, c.FFN},
					{"start past the rows", l, h, c.FFN, 0},
					{"negative start", l, h, -1, c.FFN + 1},
					{"outputs", l, h, 4, c.FFN},
				} {
					if err := dev.GateUp(ctx, tc.l, &w, tc.h, tc.lo, make([]float32, tc.out)); err == nil {
						t.Errorf("%s: no error", tc.name)
					}
				}
			})
		}
	}
}
